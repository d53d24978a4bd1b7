"""The tf32 wgmma path without a GPU: tf32 rounding as the KernelBench calibration does it, the
generated `wgmma ... .tf32` wrappers, the DSL's precision request and its refusals (f32 without
precision="tf32", MN-major or register operands), the fp32 GEMM kernel with precision="tf32" in
the numpy interpreter against a float64 reference (ragged M, N and K, swap-AB, ping-pong,
clusters, a bf16 output), the verifier proving its schedules with zero findings and refusing a
16-bit K step on tf32 operands, NVRTC building it for sm_90a with `.tf32` wgmma in the PTX, and
argus.ops.matmul's precision argument."""

import dataclasses

import numpy as np
import pytest

import argus as ag
from argus import codegen, dtypes
from argus.build_memo import BuildMemo
from argus.codegen.wgmma import WgmmaSpec, wgmma_function_name, wgmma_function_source
from argus.compiler import lower_only
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.ops import schedules
from argus.ops.schedules import Problem, kernel_for
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

TF32 = dict(precision="tf32")


# ----------------------------------------------------------------------------- rounding


def test_round_to_tf32_matches_the_kernelbench_calibration():
    """Bit for bit the judge's `round_to_tf32` (the tf32 rung of its precision ladder): ten
    mantissa bits, half away from zero, non-finite values unchanged."""
    from argus.bench.kernelbench.tolerance import round_to_tf32 as judge_round

    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(50000) * 10.0 ** rng.integers(-30, 30, 50000),
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39]]).astype(np.float32)
    ours = dtypes.round_to_tf32(x)
    theirs = judge_round(torch.from_numpy(x)).numpy()
    assert np.array_equal(ours.view(np.uint32), theirs.view(np.uint32))
    # the low 13 bits are gone, and halves round away from zero
    assert not np.any(ours[np.isfinite(ours)].view(np.uint32) & 0x1FFF)
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -10)
    ties = np.array([one + ulp / 2, -(one + ulp / 2), one + ulp / 2 - np.float32(2 ** -23)],
                    np.float32)
    assert dtypes.round_to_tf32(ties).tolist() == [one + ulp, -(one + ulp), one]


# ----------------------------------------------------------------------------- wrappers


def test_tf32_wrapper_text():
    assert wgmma_function_name(128, "tf32", "tf32") == "wgmma_m64n128k8_f32_tf32_ss"
    text = wgmma_function_source(64, "tf32", "tf32")
    assert "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32" in text
    # 32 accumulators, desc_a %32, desc_b %33, scale_d %34; no transpose immediates (PTX has
    # them for f16/bf16 only)
    assert "}, %32, %33, p, 1, 1;" in text
    assert WgmmaSpec(256, "tf32", "tf32").k == 8


def test_tf32_register_a_wrapper_text():
    """The rs form (the NCHW pointwise conv's A, argus/kernels/conv_pointwise_nchw.py): the
    m64k8 tf32 A fragment is four 32-bit registers, like the 16-bit one's four packed pairs."""
    spec = WgmmaSpec(n=64, a_dtype="tf32", b_dtype="tf32", a_source="regs")
    assert spec.name == "wgmma_m64n64k8_f32_tf32_rs"
    assert "}, {%32, %33, %34, %35}, %36, p, 1, 1;" in spec.source()


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"a_dtype": "tf32", "b_dtype": "bf16"}, "tf32 B"),
    ({"a_dtype": "tf32", "b_dtype": "tf32", "acc_dtype": "f16"}, "f32 only"),
    ({"a_dtype": "tf32", "b_dtype": "tf32", "trans_b": True}, "K-major"),
    ({"a_dtype": "tf32", "b_dtype": "tf32", "trans_a": True}, "K-major"),
])
def test_illegal_tf32_wrappers_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WgmmaSpec(n=64, **kwargs)


# ----------------------------------------------------------------------------- DSL rules


def _mma_kernel(dtype, precision=None, trans_b=False, cols=32, name="mma"):
    @ag.kernel(name=name)
    def mma(C: ag.Tensor["M", "N", ag.f32]):
        ag.grid(1)
        sA = ag.smem((64, cols), dtype, swizzle=128)
        # K-major [N, K], or with trans_b [K, N] as N / 32 column atoms of [K][32]
        sB = ag.smem((64, cols), dtype, swizzle=128)
        acc = ag.zeros((64, 64), ag.f32)
        ag.wgmma(sA, sB, acc, trans_b=trans_b, precision=precision)
        ag.store(C, (0, 0), acc)
    return mma


def test_f32_wgmma_needs_the_tf32_request():
    with pytest.raises(ag.TraceError, match="runs as tf32") as info:
        _mma_kernel(ag.f32).trace()
    assert "precision='tf32'" in str(info.value.fix)
    _mma_kernel(ag.f32, "tf32").trace()   # asked for: legal


def test_tf32_request_refusals():
    with pytest.raises(ag.TraceError, match="takes f32 operands, got bf16"):
        _mma_kernel(ag.bf16, "tf32", cols=64).trace()
    with pytest.raises(ag.TraceError, match="only reduced precision is 'tf32'"):
        _mma_kernel(ag.f32, "fp16").trace()
    with pytest.raises(ag.TraceError, match="must be K-major: PTX has no transpose for tf32") \
            as info:
        _mma_kernel(ag.f32, "tf32", trans_b=True).trace()
    assert "transpose it in global memory" in str(info.value.fix)

    @ag.kernel
    def register_a(C: ag.Tensor["M", "N", ag.f32]):
        ag.grid(1)
        sB = ag.smem((64, 32), ag.f32, swizzle=128)
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)
            ag.wgmma(ag.zeros((64, 32), ag.f32), sB, acc, precision="tf32")
            ag.store(C, (0, 0), acc)

    # a tf32 register A exists only in the accumulator's order (the fragment's k-positions
    # q, q + 4 are the accumulator pattern's columns 2q, 2q + 1): natural order is refused
    with pytest.raises(ag.TraceError, match="accumulator's order only") as info:
        register_a.trace()
    assert "a_acc_order=True" in str(info.value.fix)


def test_gemm_kernel_refusals():
    with pytest.raises(ValueError, match="fp32 inputs run only as tf32"):
        gemm_kernel(ag.f32, ag.f32)
    with pytest.raises(ValueError, match="tf32 only on fp32"):
        gemm_kernel(ag.bf16, ag.bf16, precision="tf32")
    with pytest.raises(ValueError, match="no transpose"):
        gemm_kernel(ag.f32, ag.f32, "kn", precision="tf32")
    with pytest.raises(ag.TraceError, match="bk=64") as info:
        lower_only(gemm_kernel(ag.f32, ag.f32, **TF32), s=GemmSchedule(epilogue="direct"))
    assert "bk=32" in str(info.value.fix)


def test_lowering_refuses_an_mn_major_tf32_operand():
    """The DSL refuses trans_b on f32 views; lowering refuses it too, for IR built or
    rewritten by other means (the descriptor of a transposed 32-bit operand does not exist)."""
    from argus import lower
    from argus.errors import CompileError
    from argus.ir import ops as O
    from argus.ir.rewrite import Rules

    traced = _mma_kernel(ag.f32, "tf32").trace()
    flipped = Rules([(O.Wgmma, lambda op, _ctx: None if op.trans_b else
                      op.replace(trans_b=True))]).apply(traced)
    with pytest.raises(CompileError, match="MN-major B operand of a f32 wgmma"):
        lower.wgmma.run(flipped)


# ----------------------------------------------------------------------------- interpreter


def _f32(shape, seed, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * scale


TF32_CASES = [
    (130, 200, 96, ag.f32, GemmSchedule(bm=128, bn=128, bk=32, stages=3, epilogue="direct")),
    # ragged K (TMA zero-fills the last slice), ragged M and N
    (70, 72, 100, ag.f32, GemmSchedule(bm=64, bn=64, bk=32, consumers=1, stages=2,
                                       epilogue="direct", persistent=False)),
    (190, 256, 64, ag.f32, GemmSchedule(bm=128, bn=128, bk=32, stages=2, cluster_m=2,
                                        epilogue="direct")),
    (129, 128, 96, ag.f32, GemmSchedule(bm=128, bn=128, bk=32, stages=3, pingpong=True,
                                        epilogue="direct")),
    # swap-AB (the weights as wgmma's A, both K-major), a bf16 output
    (12, 192, 160, ag.bf16, GemmSchedule(bm=64, bn=16, bk=32, consumers=1, stages=4,
                                         k_atoms=2, swap_ab=True, epilogue="direct")),
]


@pytest.mark.parametrize("m,n,k,out,schedule", TF32_CASES,
                         ids=[f"{m}x{n}x{k}-{o.name}" for m, n, k, o, _ in TF32_CASES])
def test_interpreter_matches_float64_reference(m, n, k, out, schedule):
    """The GEMM kernel reads its fp32 operands as they are: the interpreter's tf32 wgmma drops
    their 13 low bits (the tensor core's reading of an unrounded operand), so the result is the
    fp32 sum of the truncated operands' products; operands rounded first (cvt.rna,
    dtypes.round_to_tf32) are read exactly and give the rounded model, closer to the exact
    product. (argus.ops.matmul rounds its operands first: tf32_operands, tested below.)"""
    a, w = _f32((m, k), m, 3.0), _f32((n, k), n, 0.5)
    a64, w64 = a.double().numpy(), w.double().numpy()
    bound = np.abs(a64) @ np.abs(w64).T
    exact = a64 @ w64.T
    ulp = {"bf16": 2.0 ** -8, "f32": 2.0 ** -23}[out.name]
    errs = {}
    for name, model in (("truncated", dtypes.truncate_to_tf32),
                        ("rounded", dtypes.round_to_tf32)):
        ops = (a, w) if name == "truncated" else \
            (torch.from_numpy(model(a.numpy())), torch.from_numpy(model(w.numpy())))
        c = torch.full((m, n), float("nan"), dtype=out.torch_dtype())
        gemm_kernel(ag.f32, out, **TF32).interpret(*ops, c, s=schedule)
        got = c.float().numpy().astype(np.float64)
        assert not np.isnan(got).any()
        # the products of the tf32 operands, summed in fp32: at most K f32 roundings of
        # partial sums bounded by sum |a||w|, and one rounding of the output
        want = model(a.numpy()).astype(np.float64) @ model(w.numpy()).astype(np.float64).T
        tol = ulp * np.abs(want) + k * 2.0 ** -24 * bound + 1e-30
        assert (np.abs(got - want) <= tol).all(), (name, np.max(np.abs(got - want) / tol))
        # against the exact fp32 inputs: within the tf32 bound (each operand off by less than
        # one tf32 ulp, 2^-10 relative, truncated; half of it rounded), and really tf32 (the
        # fp32 product is not what comes out)
        per_operand = 2.0 ** -10 if name == "truncated" else 2.0 ** -11
        assert (np.abs(got - exact) <= 2 * per_operand * bound + tol).all()
        if out == ag.f32:
            assert np.abs(got - exact).max() > 10 * np.abs(got - want).max()
        errs[name] = np.linalg.norm(got - exact) / np.linalg.norm(exact)
    if out == ag.f32:   # truncation's bias toward zero does not average out over K
        assert errs["truncated"] > 1.5 * errs["rounded"], errs


def test_interpreter_models_truncation_and_rounding():
    """dtypes.truncate_to_tf32 (a tf32 wgmma reading an unrounded f32) drops the 13 low bits
    toward zero; round_to_tf32 (cvt.rna, ag.round_tf32) rounds to nearest, ties away; a rounded
    value is read unchanged by the truncation."""
    one = np.float32(1.0)
    ulp = np.float32(2.0 ** -10)
    below_half, above_half = one + np.float32(2.0 ** -12), one + np.float32(3 * 2.0 ** -12)
    x = np.array([below_half, above_half, -above_half, one + ulp - np.float32(2.0 ** -23)],
                 dtype=np.float32)
    assert dtypes.truncate_to_tf32(x).tolist() == [1.0, 1.0, -1.0, 1.0]
    assert dtypes.round_to_tf32(x).tolist() == [1.0, 1 + ulp, -(1 + ulp), 1 + ulp]
    g = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    r = dtypes.round_to_tf32(g)
    assert np.array_equal(dtypes.truncate_to_tf32(r), r)
    assert np.all(np.abs(dtypes.truncate_to_tf32(g)) <= np.abs(g))
    special = np.array([np.inf, -np.inf, np.nan], dtype=np.float32)
    assert np.array_equal(dtypes.truncate_to_tf32(special), special, equal_nan=True)


def test_round_tf32_in_a_kernel_is_cvt_rna():
    """ag.round_tf32: the interpreter rounds as round_to_tf32, and the generated CUDA calls
    the device header's cvt.rna.tf32.f32."""
    @ag.kernel(threads=128)
    def rnd(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], BN: int = 128):
        (i,) = ag.grid(X.shape[0])
        ag.store(Y, (i, 0), ag.round_tf32(ag.load(X, (i, 0), (1, BN))))

    x = _f32((4, 128), 3) * 7.0
    y = torch.zeros_like(x)
    rnd.interpret(x, y)
    assert np.array_equal(y.numpy().view(np.uint32), dtypes.round_to_tf32(x.numpy())
                          .view(np.uint32))
    text = codegen.render(lower_only(rnd)).text
    assert "ag::round_tf32(" in text
    from pathlib import Path
    header = (Path(ag.__file__).parent / "codegen" / "device" / "argus_sm90.cuh").read_text()
    assert "cvt.rna.tf32.f32" in header
    with pytest.raises(ag.TraceError, match="rounds f32 tiles"):
        @ag.kernel(threads=128)
        def bad(X: ag.Tensor["M", "N", ag.bf16], Y: ag.Tensor["M", "N", ag.bf16]):
            ag.store(Y, (0, 0), ag.round_tf32(ag.load(X, (0, 0), (1, 128))))
        bad.trace()


# ----------------------------------------------------------------------------- verifier


PROBLEMS = [Problem(4096, 4096, 4096, 1, "tf32", "f32", "nk", True),
            Problem(16, 8192, 8192, 1, "tf32", "f32", "nk", True)]


def _cases():
    out = {}
    for p in PROBLEMS:
        for s in schedules.candidates(p):
            out.setdefault(s, p)
    # a bf16 output: the stmatrix + TMA-store epilogue beside the fp32 ring
    bf16_out = Problem(4096, 4096, 4096, 1, "tf32", "bf16", "nk", True)
    tma = [s for s in schedules.candidates(bf16_out) if s.epilogue == "tma"]
    assert tma
    return [(p, s) for s, p in out.items()] + [(bf16_out, s) for s in tma]


CASES = _cases()


def test_tf32_problems_get_tf32_schedules():
    for p in PROBLEMS:
        cands = schedules.candidates(p)
        assert cands and all(s.bk == 32 and s.split_k == 1 and s.tail_splits == 1
                             for s in cands)
        assert schedules.heuristic(p) in cands and schedules.untuned(p) in cands
    # the tuning key keeps tf32 apart from bf16
    assert ":tf32->f32:" in PROBLEMS[0].key


@pytest.mark.parametrize("problem,schedule", CASES,
                         ids=[f"{p.m}-{p.out_dtype}-{s.bm}x{s.bn}-st{s.stages}-c{s.cluster_m}"
                              f"{'-swap' if s.swap_ab else ''}{'-pp' if s.pingpong else ''}"
                              f"-ka{s.k_atoms}-{s.epilogue}" for p, s in CASES])
def test_schedules_lower_and_verify_with_zero_findings(problem, schedule):
    from argus import verify

    kernel_fn, run = kernel_for(problem, schedule)
    kernel = lower_only(kernel_fn, s=run)
    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)
    assert {"wgmma.smem-layout", "wgmma.k-once", "wgmma.agree"} <= \
        {d.code for d in report.proven}
    assert parse_kernel(print_kernel(kernel)) == kernel


@pytest.mark.parametrize("advance", [16, 64])
def test_verifier_refuses_a_wrong_k_step_on_tf32_operands(advance):
    """A descriptor advancing 64 bytes per k8 instruction (16 elements: the bf16 rule applied
    to 4-byte elements) or 16 bytes (half a step) makes the tensor core read the wrong K
    elements: wgmma.smem-layout refuses both."""
    from argus import verify
    from argus.ir import ops as O
    from argus.ir.rewrite import Rules

    kernel = lower_only(gemm_kernel(ag.f32, ag.f32, **TF32),
                        s=GemmSchedule(bm=128, bn=128, bk=32, stages=2, epilogue="direct"))
    assert all(op.a_desc[3] == 32 for op in kernel.walk() if isinstance(op, O.Wgmma))
    wrong = Rules([(O.Wgmma, lambda op, _ctx: None if op.a_desc[3] == advance else op.replace(
        a_desc=op.a_desc[:3] + (advance,)))]).apply(kernel)
    assert "wgmma.smem-layout" in {d.code for d in verify.run(wrong).errors}


@pytest.mark.parametrize("in_dtype,k,block", [(ag.f32, 12, (1, 4)), (ag.bf16, 12, (0, 12))])
def test_wgmma_witness_names_the_instructions_k_block(in_dtype, k, block):
    """A wgmma counterexample names the K block of the instruction that reads k: k8 for tf32
    (k 12 is element 4 of block 1), k16 for bf16 (element 12 of block 0). It said k // 16
    for every dtype, so a tf32 witness named the wrong instruction."""
    import z3

    from argus.verify import check_wgmma
    from argus.verify.model import Model

    kw = TF32 if in_dtype == ag.f32 else {}
    kernel = lower_only(gemm_kernel(in_dtype, ag.f32, **kw),
                        s=GemmSchedule(bm=128, bn=128, bk=128 // in_dtype.bytes, stages=2,
                                       epilogue="direct"))
    model = Model(kernel)
    ob = next(o for o in check_wgmma.obligations(model, model.wgmmas[0])
              if o.code == "wgmma.defined")
    kk = ob.minimize[-1]
    s = z3.Solver()
    s.add(*ob.premises)
    s.add(kk == k)
    assert s.check() == z3.sat
    msg, wit = ob.decode(s.model(), ["A element defined"])
    assert (wit["k_in_tile"], wit["k_block"], wit["k_in_block"]) == (k, *block)
    assert f"(k-block {block[0]})" in msg


# ----------------------------------------------------------------------------- NVRTC


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@needs_nvrtc
@pytest.mark.parametrize("out,schedule", [
    (ag.f32, GemmSchedule(bk=32, stages=4, epilogue="direct", cluster_m=2)),
    (ag.f32, GemmSchedule(bm=64, bn=16, bk=32, consumers=1, stages=10, k_atoms=2,
                          swap_ab=True, epilogue="direct")),
    (ag.bf16, GemmSchedule(bm=128, bn=128, bk=32, stages=6, pingpong=True,
                           epilogue="direct")),
])
def test_nvrtc_builds_tf32_wgmma_for_sm90a(out, schedule, tmp_path, monkeypatch):
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    source = codegen.render(lower_only(gemm_kernel(ag.f32, out, **TF32), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and binary.cubin[:4] == b"\x7fELF"
    ptx = binary.ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{schedule.bn}k8.f32.tf32.tf32" in ptx
    assert ".bf16.bf16" not in ptx and ".f16.f16" not in ptx  # no 16-bit wgmma
    assert "cp.async.bulk.tensor" in ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


# ----------------------------------------------------------------------------- ops.matmul


def test_matmul_precision_errors_without_a_gpu():
    from argus.errors import LaunchError
    from argus.ops import matmul

    a, b = torch.randn(64, 32), torch.randn(32, 48)
    with pytest.raises(LaunchError, match="float32 inputs run only as tf32") as info:
        matmul(a, b)
    assert "precision='tf32'" in str(info.value.fix)
    with pytest.raises(LaunchError, match="takes float32 inputs, got torch.bfloat16"):
        matmul(a.bfloat16(), b.bfloat16(), precision="tf32")
    with pytest.raises(LaunchError, match="the only choice is 'tf32'"):
        matmul(a, b, precision="bf16x3")
    # right except for the device: the device is named
    with pytest.raises(LaunchError, match="a is on cpu"):
        matmul(a, b, precision="tf32")


def test_matmul_tf32_problem_reads_b_k_major():
    """Either layout of B is a K-major ("nk") tf32 problem: a row-major [K, N] B is made
    [N, K] in its rounding pass rather than read MN-major (tf32 has no transpose)."""
    from argus.ops.matmul import _problem

    a = torch.randn(64, 32)
    out = torch.empty(64, 48)
    for b in (torch.randn(32, 48), torch.randn(48, 32).T):
        p = _problem(a, b, out, "tf32")
        assert (p.in_dtype, p.b_layout) == ("tf32", "nk")
    assert dataclasses.replace(p, in_dtype="bf16").key != p.key


# ----------------------------------------------------------------------------- tf32 operands


def _bits(t):
    return t.contiguous().numpy().view(np.uint32)


def _rounded(t):
    return dtypes.round_to_tf32(t.contiguous().numpy())


def _check_k_major(ready, want):
    """`ready` holds round_tf32 of `want` bit for bit, K contiguous in a 16-byte row pitch whose
    padding is zero (TMA reads it; the kernel's bounds never use it)."""
    assert tuple(ready.shape) == tuple(want.shape) and ready.stride(-1) == 1
    assert ready.stride(-2) % 4 == 0 and ready.data_ptr() % 16 == 0
    assert np.array_equal(_bits(ready), _rounded(want).view(np.uint32))
    k = want.shape[-1]
    pitch = ready.stride(-2)
    full = torch.as_strided(ready, (*ready.shape[:-1], pitch), ready.stride())
    assert not full[..., k:].any()


A_LAYOUTS = {
    "contiguous": lambda t: t,
    "unaligned-k": lambda t: t[..., :37],               # row pitch 37 floats: not TMA-ready
    "m-major": lambda t: t.transpose(-1, -2).contiguous().transpose(-1, -2),
    "strided-both": lambda t: t[..., ::2, ::3],
}


@pytest.mark.parametrize("layout", sorted(A_LAYOUTS))
@pytest.mark.parametrize("batched", [False, True], ids=["2d", "3d"])
def test_tf32_operands_round_a_to_nearest_from_every_layout(layout, batched):
    """matmul's A (argus.ops.matmul.tf32_operands): round_tf32 of a's values in a K-major
    aligned buffer, from a K-contiguous, M-contiguous (the transposing pass), unaligned or
    doubly strided a; the caller's a is not written."""
    from argus.ops.matmul import tf32_operands

    base = _f32((3, 70, 100) if batched else (70, 100), 1, 5.0)
    a = A_LAYOUTS[layout](base)
    before = base.clone()
    ready, _ = tf32_operands(a, _f32((a.shape[-1], 8), 2))
    _check_k_major(ready, a)
    assert torch.equal(base, before)


B_LAYOUTS = {
    "x@W (row-major [K, N])": lambda k, n: _f32((k, n), 3),
    "x@W.T (a view of [N, K])": lambda k, n: _f32((n, k), 4).T,
    "strided-both": lambda k, n: _f32((2 * k, 3 * n), 5)[::2, ::3],
    "batched [K, N]": lambda k, n: _f32((2, k, n), 6),
    "batched W.T": lambda k, n: _f32((2, n, k), 7).transpose(-1, -2),
}


@pytest.mark.parametrize("layout", sorted(B_LAYOUTS))
def test_tf32_operands_make_b_k_major_and_round_it_in_one_pass(layout):
    """matmul's B [.., K, N] comes back K-major [.., N, K], rounded to tf32 to nearest, from
    either memory layout (tf32 has no MN-major operand: a row-major [K, N] is transposed in its
    rounding pass); K = 45 is not a multiple of 4, so the row pitch is padded."""
    from argus.ops.matmul import tf32_operands

    k, n = 45, 70
    b = B_LAYOUTS[layout](k, n)
    a = _f32((*b.shape[:-2], 9, k), 8)
    _, ready = tf32_operands(a, b)
    _check_k_major(ready, b.transpose(-1, -2))


def _gemm_tf32(a_ready, b_ready, schedule):
    """The tf32 GEMM kernel (the one argus.ops.matmul runs) in the interpreter on K-major
    operands: a [M, K], b [N, K]."""
    m, n, k = a_ready.shape[0], b_ready.shape[0], a_ready.shape[1]
    problem = Problem(m, n, k, 1, "tf32", "f32", "nk", True)
    kernel_fn, run = kernel_for(problem, schedule)
    c = torch.full((m, n), float("nan"))
    kernel_fn.interpret(a_ready.clone(), b_ready.clone(), c, s=run)
    assert not torch.isnan(c).any()
    return c.double().numpy()


@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_tf32_matmul_error_falls_to_the_rounded_models(layout):
    """The interpreter reads an unrounded operand as the tensor core does (its 13 low bits
    dropped: dtypes.truncate_to_tf32). The GEMM on matmul's operands (tf32_operands: rounded to
    nearest first) errs what the rounded model (float64 product of the rounded operands) errs,
    as cuBLAS TF32 does; the raw operands err ~2.5x more (the H200: 7.8e-4 raw, 2.9e-4 cuBLAS).
    Before the rounding, matmul fed the raw bits (the 'raw' line below is that kernel call)."""
    from argus.ops.matmul import tf32_operands

    m, n, k = 96, 80, 512
    schedule = GemmSchedule(bm=64, bn=80, bk=32, consumers=1, stages=2, epilogue="direct",
                            persistent=False)
    a = _f32((m, k), 11)
    w = _f32((n, k), 12) if layout == "x@W.T" else _f32((k, n), 12)
    b = w.T if layout == "x@W.T" else w
    exact = a.double().numpy() @ b.double().numpy()

    def err(c):
        return np.linalg.norm(c - exact) / np.linalg.norm(exact)

    model = _rounded(a).astype(np.float64) @ _rounded(b).astype(np.float64)
    ours = _gemm_tf32(*tf32_operands(a, b), schedule)
    raw = _gemm_tf32(a, b.T.contiguous(), schedule)
    # ours is the rounded model up to the fp32 accumulation (K roundings of sums <= |a||b|)
    bound = np.abs(a.double().numpy()) @ np.abs(b.double().numpy())
    assert (np.abs(ours - model) <= k * 2.0 ** -24 * bound + 2.0 ** -23 * np.abs(model)).all()
    assert err(ours) <= 1.05 * err(model), (err(ours), err(model))
    assert err(raw) > 1.8 * err(ours), (err(raw), err(ours))


def test_tf32_b_is_kept_per_parameter_version():
    """A B derived from an nn.Parameter (x @ W, x @ W.T) is rounded and made K-major once per
    parameter version (argus/ops/weight_cache.py): a repeated call gets the same tensor, an
    in-place update (an optimizer step) a new one with the new values and the old one's memory
    back. Anything else (an activation A, a non-leaf B, a plain tensor rewritten between calls)
    is derived every call, so a changed value is never read stale."""
    import importlib

    mm = importlib.import_module("argus.ops.matmul")   # the module (argus.ops.matmul: the op)
    mm._TF32_OPERANDS.clear()
    k, n = 64, 48
    a = _f32((16, k), 21)
    for w in (torch.nn.Parameter(_f32((k, n), 22)), torch.nn.Parameter(_f32((n, k), 23))):
        b = w if w.shape == (k, n) else w.T            # x @ W, x @ W.T (a view of W)
        first = mm.tf32_operands(a, b)[1]
        assert mm.tf32_operands(a, b)[1] is first      # kept: no second pass
        _check_k_major(first, b.detach().T)
        with torch.no_grad():
            w.mul_(-3.0)                                # a new version of the weight
        second = mm.tf32_operands(a, b)[1]
        assert second is not first
        _check_k_major(second, b.detach().T)
        assert len([1 for ref, _ in mm._TF32_OPERANDS.values() if ref() is w]) == 1
    assert mm.tf32_operands(a, b)[0] is not mm.tf32_operands(a, b)[0]   # A: an activation
    n_kept = len(mm._TF32_OPERANDS)
    transient = b * 1.0                                 # non-leaf: derived anew, not kept
    _check_k_major(mm.tf32_operands(a, transient)[1], transient.detach().T)
    plain = _f32((k, n), 24)
    _check_k_major(mm.tf32_operands(a, plain)[1], plain.T)
    plain.mul_(0.5)                                     # same buffer, new values
    _check_k_major(mm.tf32_operands(a, plain)[1], plain.T)
    assert len(mm._TF32_OPERANDS) == n_kept
    mm._TF32_OPERANDS.clear()


def test_tf32_replay_checks_kept_operands_and_replays_passes():
    """A repeated tf32 call with the same buffers (argus.ops.matmul's _Tf32Replay) launches the
    operands' rounding passes again and the GEMM, in that order; an operand kept for a
    parameter is checked to be still the store's for its current version first, and an update
    of the parameter refuses the replay with nothing launched (the checked path prepares the
    call again). The replays own the passes' buffers: bounded by their bytes."""
    import importlib
    import weakref

    mm = importlib.import_module("argus.ops.matmul")
    mm._TF32_OPERANDS.clear()
    w = torch.nn.Parameter(_f32((48, 64), 31))
    _, kept = mm._tf32_operand(w.T, "tf32 B^T", True)
    assert isinstance(kept, mm._Kept) and kept.check(w.T)
    _, again = mm._tf32_operand(w.T, "tf32 B^T", True)          # a hit: the same tensor
    assert again.ready() is kept.ready()
    assert mm._tf32_operand(_f32((16, 64), 32), "tf32 A", False)[1] is None  # CPU: no plan
    log = []
    buf = torch.empty(16, 64)
    replay = mm._Tf32Replay((mm._Pass(lambda: log.append("round a"), buf), kept),
                            lambda: log.append("gemm"))
    assert replay.nbytes == buf.numel() * 4
    assert replay(None, w.T) and log == ["round a", "gemm"]
    with torch.no_grad():
        w.add_(1.0)                                     # a new version: the kept one is stale
    log.clear()
    assert not replay(None, w.T) and log == []
    assert not kept.check(w.T)
    dead = mm._Kept("tf32 B^T", weakref.ref(torch.empty(1)))   # freed: refused
    assert not dead.check(w.T)
    # the byte bound: the least recently used replays go first, the newest stays
    saved = mm._TF32_LAUNCHES, mm._TF32_MEMO_BYTES
    try:
        mm._TF32_LAUNCHES = BuildMemo()
        mm._TF32_MEMO_BYTES = 2 * buf.numel() * 4
        for key in range(3):
            mm._remember_tf32(key, replay)
        assert [0 in mm._TF32_LAUNCHES, 1 in mm._TF32_LAUNCHES, 2 in mm._TF32_LAUNCHES] == \
            [False, True, True] and len(mm._TF32_LAUNCHES) == 2
    finally:
        mm._TF32_LAUNCHES, mm._TF32_MEMO_BYTES = saved
        mm._TF32_OPERANDS.clear()
