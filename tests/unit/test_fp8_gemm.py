"""The fp8 GEMM path without a GPU: e4m3 rounding as the hardware does it, the DSL rules for
fp8 wgmma and `ag.load_scalar`, the Fp8GemmSchedule checks, the kernel in the numpy
interpreter against a float64 reference of the e4m3 inputs (ragged M, N and K, every epilogue
and cluster variant), NVRTC building it for sm_90a with fp8 wgmma, and the schedule cache."""

import dataclasses

import numpy as np
import pytest

import argus as ag
from argus import codegen, dtypes
from argus.compiler import lower_only
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_kernel
from argus.ops import fp8_schedules
from argus.ops.fp8_schedules import Fp8Problem
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import ULP, e4m3  # noqa: E402


# ----------------------------------------------------------------------------- e4m3 rounding


def _all_e4m3() -> np.ndarray:
    """The 254 finite e4m3 values (every byte but the two NaNs), sorted."""
    codes = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()
    return np.unique(codes[np.isfinite(codes)])


def test_e4m3_rounding_table():
    cases = {0.0: 0.0, 1.0: 1.0, 1.0625: 1.0, 1.0625001: 1.125, 1.1875: 1.25,  # ties to even
             17.0: 16.0, 19.0: 20.0, 240.0: 240.0, 232.0: 224.0, 440.0: 448.0,
             448.0: 448.0, 464.0: 448.0, 1e6: 448.0, np.inf: 448.0, -np.inf: -448.0,
             2.0 ** -9: 2.0 ** -9, 2.0 ** -10: 0.0, 1.5 * 2.0 ** -9: 2.0 ** -8,  # subnormals
             2.0 ** -6: 2.0 ** -6, -3.3: -3.25}
    x = np.array(list(cases), dtype=np.float32)
    got = dtypes.round_to(x, ag.e4m3)
    assert got.tolist() == [np.float32(v) for v in cases.values()]
    assert np.isnan(dtypes.round_to(np.array([np.nan], np.float32), ag.e4m3)[0])
    assert np.signbit(dtypes.round_to(np.array([-1e-5], np.float32), ag.e4m3)[0])


def test_e4m3_rounding_matches_every_value_and_midpoint():
    """Exact on every representable value, both sides of every midpoint and the midpoints
    themselves; the same as torch's float8_e4m3fn cast of the saturated value."""
    vals = _all_e4m3()
    assert len(vals) == 253 and vals.max() == 448.0  # +-0 collapse to one
    mids = ((vals[1:] + vals[:-1]) / 2).astype(np.float32)
    x = np.concatenate([vals, mids, np.nextafter(mids, np.float32(np.inf)),
                        np.nextafter(mids, np.float32(-np.inf)),
                        np.random.default_rng(0).standard_normal(20000).astype(np.float32) * 50])
    ours = dtypes.round_to(x, ag.e4m3)
    theirs = torch.from_numpy(np.clip(x, -448, 448)).to(torch.float8_e4m3fn).float().numpy()
    np.testing.assert_array_equal(ours, theirs)
    assert set(np.unique(ours)) <= set(vals) | {-v for v in vals}
    # ties go to the even mantissa: the midpoint never rounds to the odd neighbour
    even = ours[len(vals):len(vals) + len(mids)]
    codes = torch.from_numpy(even).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
    assert not np.any(codes & 1)


# ----------------------------------------------------------------------------- DSL rules


def test_fp8_wgmma_must_be_k_major_with_k_a_multiple_of_32():
    def variant(trans_b: bool, cols: int):
        @ag.kernel(name=f"fp8_mma_{int(trans_b)}_{cols}")
        def mma(A: ag.Tensor["M", "K", ag.e4m3], C: ag.Tensor["M", "N", ag.f32]):
            ag.grid(1)
            swizzle = 128 if cols == 128 else 0
            sA = ag.smem((64, cols), ag.e4m3, swizzle=swizzle)
            sB = ag.smem((128, cols), ag.e4m3, swizzle=swizzle)
            acc = ag.zeros((64, 128), ag.f32)
            ag.wgmma(sA, sB, acc, trans_b=trans_b)
            ag.store(C, (0, 0), acc)
        return mma

    with pytest.raises(ag.TraceError, match="K-major") as info:
        variant(True, 128).trace()
    assert "transpose" in str(info.value.fix)
    with pytest.raises(ag.TraceError, match="multiple of 32 for e4m3"):
        variant(False, 16).trace()
    variant(False, 128).trace()  # K-major, K = 128: legal


def test_wgmma_operands_of_different_types_are_refused():
    @ag.kernel
    def mixed(A: ag.Tensor["M", "K", ag.e4m3], C: ag.Tensor["M", "N", ag.f32]):
        ag.grid(1)
        sA = ag.smem((64, 64), ag.e4m3, swizzle=64)   # K = 64 on both sides
        sB = ag.smem((64, 64), ag.bf16, swizzle=128)
        acc = ag.zeros((64, 64), ag.f32)
        ag.wgmma(sA, sB, acc)

    with pytest.raises(ag.TraceError, match="both e4m3"):
        mixed.trace()


def test_load_scalar_in_the_interpreter_and_cuda():
    @ag.kernel
    def scale_rows(X: ag.Tensor["M", "N", ag.f32], S: ag.Tensor["T", ag.f32],
                   Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        s = ag.load_scalar(S, (1,)) * ag.load_scalar(S, (5,), other=2.0)  # (5,) is outside
        ag.store(Y, (row, 0), ag.load(X, (row, 0), (1, 128)) * s)

    x = np.arange(3 * 128, dtype=np.float32).reshape(3, 128)
    y = np.zeros_like(x)
    scale_rows.interpret(x, np.array([9.0, 0.75, 9.0], np.float32), y)
    np.testing.assert_array_equal(y, x * 1.5)
    kernel = lower_only(scale_rows)
    assert parse_kernel(print_kernel(kernel)) == kernel
    text = codegen.render(kernel).text
    assert "__ldg(&S[(long long)" in text and ": 2.0f" in text
    with pytest.raises(ag.TraceError, match="load_scalar reads"):
        @ag.kernel
        def bad(X: ag.Tensor["M", ag.e4m3]):
            ag.grid(1)
            ag.load_scalar(X, (0,))
        bad.trace()


# ----------------------------------------------------------------------------- schedules


@pytest.mark.parametrize("kwargs,message", [
    ({"bk": 64}, "bk=128"),
    ({"bm": 128, "consumers": 1}, "consumers=2"),
    ({"bn": 260}, "multiple of 8"),
    ({"bn": 104, "epilogue": "tma"}, "64, 32 or 16 columns"),  # 96 is legal: 32-wide blocks
    ({"epilogue": "smem"}, "epilogue"),
    ({"cluster_m": 4}, "at most 2"),
    ({"stages": 0}, "stages"),
])
def test_schedule_validates_itself(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Fp8GemmSchedule(**kwargs)


PROBLEMS = [Fp8Problem(4096, 4096, 4096, "bf16", True), Fp8Problem(4096, 4096, 4096, "f32", True),
            Fp8Problem(128, 8192, 8192, "bf16", True), Fp8Problem(16, 8192, 8192, "f16", False)]


def _cases():
    out = {}
    for p in PROBLEMS:
        for s in fp8_schedules.candidates(p):
            if s.split_k > 1:   # two kernels run by the op: test_fp8_weight_streaming.py's
                continue
            out.setdefault((p.out_dtype, s), p)
    return [(p, s) for (_, s), p in out.items()]


CASES = _cases()
OUT = {"bf16": ag.bf16, "f16": ag.f16, "f32": ag.f32}


def test_candidates_are_legal_and_cover_the_variants():
    scheds = [s for _, s in CASES]
    assert any(s.cluster_m == 2 for s in scheds) and any(s.epilogue == "tma" for s in scheds)
    assert any(s.consumers == 1 for s in scheds)
    for p in PROBLEMS:
        assert fp8_schedules.heuristic(p) in fp8_schedules.candidates(p)
        for s in fp8_schedules.candidates(p):
            assert s.epilogue == "direct" or p.tma_epilogue_ok
            assert s.smem_bytes <= 227 * 1024


@pytest.mark.parametrize("problem,schedule", CASES,
                         ids=[f"{p.out_dtype}-{s.bm}x{s.bn}-st{s.stages}-{s.epilogue}"
                              f"-c{s.cluster_m}" for p, s in CASES])
def test_library_schedule_lowers_and_verifies_clean(problem, schedule):
    from argus import verify

    kernel = lower_only(gemm_fp8_kernel(OUT[problem.out_dtype]), s=schedule)
    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= {"store.coverage", "store.once"}, \
        "\n".join(str(d) for d in report.unknowns)
    assert len(report.proven) >= 20
    assert parse_kernel(print_kernel(kernel)) == kernel


def test_schedule_cache_roundtrip(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    p = Fp8Problem(4096, 4096, 4096, "bf16", True)
    assert fp8_schedules.choose(p, "NVIDIA H200") == fp8_schedules.heuristic(p)
    chosen = Fp8GemmSchedule(bn=128, stages=6, cluster_m=2)
    fp8_schedules.store_choice("NVIDIA H200", p, chosen, 0.5)
    assert fp8_schedules.choose(p, "NVIDIA H200") == chosen
    # a TMA-store choice is not reused for an output it cannot store
    fp8_schedules.store_choice("NVIDIA H200", dataclasses.replace(p, tma_store_ok=False),
                               Fp8GemmSchedule(epilogue="tma", stages=3), 0.5)
    q = dataclasses.replace(p, tma_store_ok=False)
    assert fp8_schedules.choose(q, "NVIDIA H200").epilogue == "direct"


# ----------------------------------------------------------------------------- interpreter


@pytest.mark.parametrize("m,n,k,out,schedule", [
    (64, 256, 256, ag.bf16, Fp8GemmSchedule()),
    (200, 256, 256, ag.bf16, Fp8GemmSchedule(bn=128)),                     # ragged M
    (129, 200, 144, ag.f32, Fp8GemmSchedule(bn=128, stages=3)),            # ragged M, N, K
    (130, 256, 256, ag.bf16, Fp8GemmSchedule(bn=128, epilogue="tma", stages=3)),
    (190, 256, 384, ag.f16, Fp8GemmSchedule(bn=128, cluster_m=2)),         # W multicast
    (70, 96, 256, ag.f32, Fp8GemmSchedule(bm=64, bn=32, consumers=1, stages=2,
                                          zero_by_wgmma=True, persistent=False)),
    # 8 tiles on 2 persistent CTAs: the ring wraps across tiles, parities carry over
    (200, 256, 384, ag.bf16, Fp8GemmSchedule(bn=64, stages=2, num_sms=2, group_m=1)),
    # a cluster whose second CTA's tile lies wholly below M (loads zeros, stores nothing)
    (70, 256, 128, ag.bf16, Fp8GemmSchedule(bn=128, cluster_m=2, epilogue="tma", stages=3)),
])
def test_interpreter_matches_float64_reference(m, n, k, out, schedule):
    a, w = e4m3((m, k), 3.0, m), e4m3((n, k), 0.5, n)
    sa, sb = torch.tensor([0.37]), torch.tensor([1.9])
    c = torch.full((m, n), float("nan"), dtype=out.torch_dtype())
    gemm_fp8_kernel(out).interpret(a, w, sa, sb, c, s=schedule)
    # the reference: exact products of the e4m3 values, summed in float64, scaled once
    acc = a.double() @ w.double().T
    scale = np.float32(np.float32(0.37) * np.float32(1.9))
    want = dtypes.round_to((acc.numpy() * float(scale)).astype(np.float32), out)
    got = c.float().numpy()
    assert not np.isnan(got).any()
    # one rounding of the output, plus fp32 accumulation: at most K f32 roundings of partial
    # sums bounded by sum |a||w| (the products themselves are exact in f32)
    ulp = ULP[out.name]
    bound = (a.double().abs() @ w.double().abs().T).numpy() * float(scale)
    tol = ulp * np.abs(want) + k * 2.0 ** -24 * bound + 1e-30
    assert (np.abs(got - want) <= tol).all(), np.max(np.abs(got - want) / tol)
    # and the scale is really applied: unscaled output would be far off
    assert np.abs(got - want).max() < 0.1 * np.abs(acc.numpy() * (1 - float(scale))).max()


# ----------------------------------------------------------------------------- NVRTC


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@needs_nvrtc
@pytest.mark.parametrize("out,schedule", [
    (ag.bf16, Fp8GemmSchedule(epilogue="tma", stages=3)),
    (ag.f32, Fp8GemmSchedule(cluster_m=2)),
    (ag.bf16, Fp8GemmSchedule(bm=64, bn=64, consumers=1, stages=12)),
])
def test_nvrtc_builds_fp8_wgmma_for_sm90a(out, schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(gemm_fp8_kernel(out), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and binary.cubin[:4] == b"\x7fELF"
    ptx = binary.ptx
    assert f"wgmma.mma_async.sync.aligned.m64n{schedule.bn}k32.f32.e4m3.e4m3" in ptx
    assert ".bf16.bf16" not in ptx and ".f16.f16" not in ptx  # no 16-bit wgmma path
    assert "cp.async.bulk.tensor.2d" in ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


# ----------------------------------------------------------------------------- op argument checks


def test_scaled_matmul_errors_without_a_gpu():
    """The checks of the call itself run before the device check, so they are tested here on
    CPU tensors; a call that is right except for its device names the device last."""
    from argus.errors import LaunchError
    from argus.ops import scaled_matmul

    a, w, s = e4m3((64, 128), 1.0, 0), e4m3((96, 128), 1.0, 1), torch.tensor(1.0)
    cases = [
        ((a, e4m3((128, 128), 1.0, 2).t(), s, s), "K-major.*\n  fix: pass b.contiguous()"),
        ((a.t().contiguous().t(), w, s, s), "a \\(64, 128\\) has strides"),
        ((a, w.t(), s, s), "torch._scaled_mm's b .*\n  fix: pass the weight W itself"),
        ((a, e4m3((96, 64), 1.0, 3), s, s), "do not match"),
        ((a.float(), w, s, s), "a must be torch.float8_e4m3fn, got torch.float32"),
        ((a, w.float().to(torch.float8_e5m2), s, s), "e5m2 is not supported yet"),
        ((a[None], w, s, s), "a must be 2-d"),
        ((a, w, torch.ones(64, 2), s), "scale_a has shape \\(64, 2\\)"),
        ((a, w, s, s.double()), "scale_b must be float32"),
        ((a, w, 0.5, s),
         "scale_a must be a torch.Tensor, got float\n  fix: wrap it: torch.tensor\\(0.5"),
        ((e4m3((64, 40), 1.0, 4), e4m3((96, 40), 1.0, 5), s, s), "K = 40 is not a multiple"),
        ((a, w, s, s), "a is on cpu; Argus kernels run on a CUDA device"),
    ]
    for args, message in cases:
        with pytest.raises(LaunchError, match=message):
            scaled_matmul(*args)


def test_verifier_catches_a_16_bit_k_step_on_fp8_operands():
    """A descriptor advancing 16 bytes per k32 instruction (the k16-elements rule of 16-bit
    inputs applied to e4m3) makes the tensor core read the wrong K bytes: refused."""
    from argus import verify
    from argus.ir import ops as O
    from argus.ir.rewrite import Rules

    kernel = lower_only(gemm_fp8_kernel(), s=Fp8GemmSchedule(bn=128, stages=2))
    wrong = Rules([(O.Wgmma, lambda op, _ctx: None if op.a_desc[3] == 16 else op.replace(
        a_desc=op.a_desc[:3] + (16,)))]).apply(kernel)
    codes = {d.code for d in verify.run(wrong).errors}
    assert "wgmma.smem-layout" in codes
