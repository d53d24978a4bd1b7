"""The fp8 MoE path's activation quantization (argus/kernels/moe_fp8.py): token rows to e4m3
with one scale per 128 columns, plain and fused into the permute, in the interpreter against
a torch reference (DeepGEMM's per_token_cast_to_fp8 formula, torch's float8_e4m3fn cast);
verifier clean with the permute's rows proven distinct; NVRTC builds for sm_90a."""

import numpy as np
import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ops.quantize_fp8 import reference as quantize_reference
from argus.kernels.moe_fp8 import (AMAX_FLOOR, E4M3_MAX, GROUP, permute_quantize_kernel,
                                   quantize_1x128_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

SENTINEL = -7.0  # what unwritten elements of the outputs keep (not an e4m3 value we produce)


def reference(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """x [M, K] f32 -> (e4m3 values [M, K/128, 128] as f32, scales [M, K/128]): the library's
    torch reference (argus.ops.quantize_fp8.reference: correctly rounded f32 divisions)."""
    q, s = quantize_reference(torch.from_numpy(x))
    return q.float().numpy(), s.numpy()


def activations(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Row groups of very different magnitudes, an all-zero group, one group with a single
    large outlier, and bf16-representable values (the kernels' bf16 inputs)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)) * 10.0 ** rng.uniform(-3, 3, (rows, cols // GROUP, 1)
                                                                ).repeat(GROUP, axis=2).reshape(
        rows, cols)
    x[0, :GROUP] = 0.0
    second = min(1, rows - 1)     # row 1, or row 0's second group when there is one row
    x[second, GROUP:2 * GROUP] *= 1e-3
    x[second, GROUP + 5] = 3e4
    return torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16).float().numpy()


def _check_dequantized(q: np.ndarray, scales: np.ndarray, x: np.ndarray) -> None:
    """An independent bound: q * scale is x within e4m3's half ulp (2^-4 relative) or, for
    the group's tiny values, half its subnormal quantum (2^-10 of the scale)."""
    back = q * scales[:, :, None]
    err = np.abs(back - x.reshape(q.shape))
    bound = np.abs(x.reshape(q.shape)) * 2.0 ** -4 + scales[:, :, None] * 2.0 ** -10
    assert np.all(err <= bound * (1 + 1e-6))


def _amaxes_where_division_and_reciprocal_differ(n: int) -> np.ndarray:
    """n f32 amax values (in [2^-3, 2^12), all above the floor) where amax / 448 and
    amax * fl(1/448) round to different f32 values, and so do 448 / amax and 448 * fl(1/amax):
    numpy's f32 arithmetic is IEEE, one rounding an operation."""
    rng = np.random.default_rng(16)
    a = np.float32(2.0) ** rng.uniform(-3, 12, 40 * n).astype(np.float32)
    four48 = np.float32(E4M3_MAX)
    differ = (a / four48 != a * (np.float32(1) / four48)) & \
        (four48 / a != four48 * (np.float32(1) / a))
    assert differ.mean() > 0.05            # not a corner case: a good share of all values
    return a[differ][:n]


def test_scales_are_correctly_rounded_divisions_not_reciprocal_products():
    """The rounding contract (argus/kernels/moe_fp8.py): the interpreted kernel and the
    library's torch reference both give scale = fl(amax / 448) and q = e4m3(x * fl(448 / amax)),
    checked against numpy's f32 formula on groups whose amax is chosen where the reciprocal
    product (what torch on CUDA computes for `amax / 448.0`) differs in the last bit."""
    amax = _amaxes_where_division_and_reciprocal_differ(8 * 3)
    rows, groups = 8, 3
    rng = np.random.default_rng(3)
    x = (rng.uniform(-1, 1, (rows, groups, GROUP)) * amax.reshape(rows, groups, 1)
         ).astype(np.float32)
    x[:, :, 7] = amax.reshape(rows, groups)  # the group's largest magnitude, exactly amax
    x = x.reshape(rows, groups * GROUP)
    four48 = np.float32(E4M3_MAX)
    scale_div = amax.reshape(rows, groups) / four48
    inverse = four48 / amax.reshape(rows, groups, 1)
    assert np.all(scale_div != amax.reshape(rows, groups) * (np.float32(1) / four48))
    q_div = torch.from_numpy(np.clip(x.reshape(rows, groups, GROUP) * inverse, -448, 448)
                             ).to(torch.float8_e4m3fn).float().numpy()
    xq = np.full((rows, groups, GROUP), SENTINEL, np.float32)
    scale_t = np.full((groups, rows), SENTINEL, np.float32)
    quantize_1x128_kernel(ag.f32, 2).interpret(x.reshape(rows, groups, GROUP), xq, scale_t)
    np.testing.assert_array_equal(scale_t.T, scale_div)
    np.testing.assert_array_equal(xq, q_div)
    q_ref, s_ref = reference(x)
    np.testing.assert_array_equal(s_ref, scale_div)
    np.testing.assert_array_equal(q_ref, q_div)


def test_activations_of_one_row():
    """The GPU tier quantizes a single row too (rows = 1): the zero group and the outlier group
    both land in row 0."""
    x = activations(1, 3 * GROUP)
    assert np.all(x[0, :GROUP] == 0) and np.abs(x[0, GROUP:2 * GROUP]).max() > 1e4
    xq = np.full((1, 3, GROUP), SENTINEL, np.float32)
    scale_t = np.full((3, 4), SENTINEL, np.float32)
    quantize_1x128_kernel(ag.bf16, 4).interpret(x.reshape(1, -1, GROUP), xq, scale_t)
    q_ref, s_ref = reference(x)
    np.testing.assert_array_equal(xq, q_ref)
    np.testing.assert_array_equal(scale_t[:, :1], s_ref.T)
    assert np.all(scale_t[:, 1:] == SENTINEL)


@pytest.mark.parametrize("src,groups", [(ag.bf16, 4), (ag.f32, 8), (ag.bf16, 1)])
def test_quantize_1x128_matches_torch(src, groups):
    rows, cols, padded = 7, 5 * GROUP, 8       # 5 groups: a ragged last block of groups
    x = activations(rows, cols)
    xq = np.full((rows, cols // GROUP, GROUP), SENTINEL, np.float32)
    scale_t = np.full((cols // GROUP, padded), SENTINEL, np.float32)
    quantize_1x128_kernel(src, groups).interpret(x.reshape(rows, -1, GROUP), xq, scale_t)
    q_ref, s_ref = reference(x)
    np.testing.assert_array_equal(xq, q_ref)
    np.testing.assert_array_equal(scale_t[:, :rows], s_ref.T)
    assert np.all(scale_t[:, rows:] == SENTINEL)  # the alignment padding is not written
    assert np.all(np.abs(xq).max(axis=2) == E4M3_MAX) or np.all(x[0, :GROUP] == 0)
    _check_dequantized(xq, scale_t[:, :rows].T, x)


def test_nan_in_a_group_makes_that_group_nan_only():
    x = activations(2, 2 * GROUP)
    x[1, 3] = np.nan
    xq = np.zeros((2, 2, GROUP), np.float32)
    scale_t = np.zeros((2, 2), np.float32)
    quantize_1x128_kernel(ag.f32, 4).interpret(x.reshape(2, -1, GROUP), xq, scale_t)
    q_ref, s_ref = reference(x)
    np.testing.assert_array_equal(xq, q_ref)       # NaN positions equal too
    np.testing.assert_array_equal(scale_t, s_ref.T)
    assert np.isnan(scale_t[0, 1]) and np.isfinite(scale_t).sum() == 3


@pytest.mark.parametrize("top_k,groups", [(2, 4), (8, 2)])
def test_permute_quantize_matches_torch(top_k, groups):
    tokens, cols, bm = 9, 3 * GROUP, 8
    x = activations(tokens, cols, seed=top_k)
    rng = np.random.default_rng(top_k)
    entries = tokens * top_k
    # a padded layout like routing's: entries in a random order, a padding row after every
    # third entry (never written), the scale buffer one column wider than the layout
    order = rng.permutation(entries)
    pos = order + order // 3
    rows = int(pos.max()) + 1 + bm
    xq = np.full((rows, cols // GROUP, GROUP), SENTINEL, np.float32)
    scale_t = np.full((cols // GROUP, rows + 1), SENTINEL, np.float32)
    permute_quantize_kernel(top_k, groups).interpret(
        x.reshape(tokens, -1, GROUP), pos.astype(np.int32).reshape(-1, 1), xq, scale_t)
    q_ref, s_ref = reference(x)
    token_of = np.arange(entries) // top_k
    np.testing.assert_array_equal(xq[pos], q_ref[token_of])
    np.testing.assert_array_equal(scale_t[:, pos], s_ref[token_of].T)
    unwritten = np.setdiff1d(np.arange(rows), pos)
    assert np.all(xq[unwritten] == SENTINEL) and np.all(scale_t[:, unwritten] == SENTINEL)
    assert np.all(scale_t[:, rows] == SENTINEL)


@pytest.mark.parametrize("build", [
    lambda: quantize_1x128_kernel(ag.bf16, 4),
    lambda: permute_quantize_kernel(8, 4),
], ids=["quantize_1x128", "permute_quantize"])
def test_verifies_clean(build):
    kernel = build()
    report = verify.run(lower_only(kernel))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert "store.once" in {o.code for o in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("build,warp", [
    (lambda: quantize_1x128_kernel(ag.bf16, 4), True),
    (lambda: quantize_1x128_kernel(ag.f32, 8), True),
    (lambda: permute_quantize_kernel(8, 4), True),
    (lambda: quantize_1x128_kernel(ag.bf16, 4, threads=128), False),
], ids=["bf16_4", "f32_8", "permute_k8", "bf16_4_128_threads"])
def test_builds_for_sm90a_without_spills(build, warp):
    """No spills; at one warp a CTA (the default) no block barrier and packed e4m3 stores."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(build()))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert binary.arch == "sm_90a" and not res.spills, res.summary()
    assert "cvt.rn.satfinite.e4m3x2.f32" in binary.ptx
    # the rounding contract: IEEE divisions (div.rn.f32), never approximate ones
    assert "div.rn.f32" in binary.ptx
    assert "div.approx" not in binary.ptx and "div.full" not in binary.ptx
    if warp:
        assert res.barriers == 0 and "ag::pack_e4m3x4(" in source.text, res.summary()



class _PretendCuda(torch.Tensor):
    """A CPU tensor whose is_cuda is True: reaches the op's checks after the device check."""

    @property
    def is_cuda(self):
        return True


@pytest.mark.parametrize("make,message", [
    (lambda: [1.0], "torch.Tensor"),
    (lambda: torch.zeros(4, 256), "CUDA device"),
    (lambda: torch.zeros(4, 256, dtype=torch.float16).as_subclass(_PretendCuda),
     "bfloat16 or torch.float32"),
    (lambda: torch.zeros(2, 4, 256).as_subclass(_PretendCuda), "2-d"),
    (lambda: torch.zeros(4, 200).as_subclass(_PretendCuda), "multiple of 128"),
    (lambda: torch.zeros(256, 4).t().as_subclass(_PretendCuda), "contiguous"),
], ids=["list", "cpu", "f16", "3d", "ragged_k", "strided"])
def test_quantize_fp8_op_refuses_bad_input(make, message):
    from argus.errors import LaunchError
    from argus.ops import quantize_fp8

    with pytest.raises(LaunchError, match=message):
        quantize_fp8(make())


def _permute_quantize_every_slot_to_slot_0(top_k: int = 8, groups: int = 4):
    """Seeded bug: permute_quantize_kernel, but every slot j writes slot 0's row."""
    from argus.kernels.moe_fp8 import THREADS, _quantize_groups

    @ag.kernel(threads=THREADS, name="moe_permute_quantize_mut",
               partial_outputs=("Xq", "ScaleT"))
    def moe_permute_quantize(X: ag.Tensor["T", "HG", GROUP, ag.bf16],
                             Pos: ag.Tensor["N", 1, ag.i32],
                             Xq: ag.Tensor["M", "HG", GROUP, ag.e4m3],
                             ScaleT: ag.Tensor["HG", "MS", ag.f32]):
        position = ag.opaque("position")
        ag.tag_tensor(Pos, value=lambda i, zero: position(i))
        ag.tag_assume(lambda a, b: ag.tag_any(a == b, position(a) != position(b)))
        t, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
        g0 = b * groups
        x = ag.load(X, (t, g0, 0), (groups, GROUP)).to(ag.f32)
        q, scale = _quantize_groups(x, g0, X.shape[1])
        for j in range(top_k):
            row = ag.load_scalar(Pos, (t * top_k, 0))   # the bug: slot 0's row for every j
            ag.store(Xq, (row, g0, 0), q)
            ag.store(ScaleT, (g0, row), scale)

    return moe_permute_quantize


def test_verifier_catches_slots_written_to_one_row():
    report = verify.run(lower_only(_permute_quantize_every_slot_to_slot_0()))
    assert "store.once" in {d.code for d in report.errors}, [str(d) for d in report.errors]


@pytest.mark.parametrize("T,E,k,bm", [(16, 8, 2, 8), (5, 32, 8, 16)])
def test_permute_quantize_after_real_routing(T, E, k, bm):
    """Routing's own positions (layout_small) into the quantizing permute: every non-padding
    row of the padded layout is the e4m3 quantization of the bf16 row the library permute puts
    there, with its scales; padding rows and their scales stay unwritten."""
    from argus.kernels import moe_routing as R

    H = 3 * GROUP
    gen = torch.Generator().manual_seed(T * E)
    ids = torch.stack([torch.randperm(E, generator=gen)[:k] for _ in range(T)]).int()
    N, be = T * k, R.block_experts(E)
    i32 = dict(dtype=torch.int32)
    rows = R.max_padded_rows(N, E, bm)
    start, tiles = torch.full((1, E), -7, **i32), torch.full((1, 1), -7, **i32)
    te, pos = torch.full((rows // bm, 1), -7, **i32), torch.full((N, 1), -7, **i32)
    flat = ids.view(-1)
    R.layout_small_kernel(be, bm).interpret(flat, flat, start, te, tiles, pos)
    x = torch.from_numpy(activations(T, H, seed=k)).to(torch.bfloat16)
    xp = torch.full((rows, H), SENTINEL).to(torch.bfloat16)
    R.permute_kernel(k, GROUP).interpret(x, pos, xp)
    xq = np.full((rows, H // GROUP, GROUP), SENTINEL, np.float32)
    scale_t = np.full((H // GROUP, rows), SENTINEL, np.float32)
    permute_quantize_kernel(k, 2).interpret(x.float().numpy().reshape(T, -1, GROUP), pos, xq,
                                            scale_t)
    used = pos.view(-1).long().numpy()
    q_ref, s_ref = reference(xp.float().numpy()[used])
    np.testing.assert_array_equal(xq[used], q_ref)
    np.testing.assert_array_equal(scale_t[:, used], s_ref.T)
    padding = np.setdiff1d(np.arange(rows), used)
    assert padding.size and np.all(xq[padding] == SENTINEL)
    assert np.all(scale_t[:, padding] == SENTINEL)


@ag.kernel
def fp8_epilogue_quantize(Q: ag.Tensor["M", 64, ag.bf16], K: ag.Tensor[GROUP, 64, ag.bf16],
                          O: ag.Tensor["M", GROUP, ag.e4m3], S: ag.Tensor["M", 1, ag.f32]):
    """The fp8 gate-up epilogue's pieces on a 64 x 128 wgmma accumulator: each row's amax over
    its 128 columns (a reduction in the accumulator layout), the row quantized to e4m3 and
    stored from registers (16-bit pair stores), its scale stored; rows past M take the floor
    (ag.where, as _quantize_groups: their zero fill is not max's identity to the verifier)."""
    (pid,) = ag.grid(ag.cdiv(Q.shape[0], 64))
    sK = ag.smem((1, GROUP, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(1, consumers=1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sK[st], K, (0, 0))
    with ag.role("consumer", warpgroups=1):
        q = ag.load(Q, (pid * 64, 0), (64, 64))
        acc = ag.zeros((64, GROUP))
        with pipe.consume() as st:
            acc = ag.wgmma(q, sK[st], acc)
        real = (pid * 64 + ag.arange(64) < Q.shape[0])[:, None]
        amax = ag.maximum(ag.where(real, ag.abs_(acc), float("-inf")).max(axis=1), AMAX_FLOOR)
        ag.store(O, (pid * 64, 0), (acc * (E4M3_MAX / amax)).to(ag.e4m3))
        ag.store(S, (pid * 64, 0), amax / E4M3_MAX)


def test_epilogue_quantization_of_an_accumulator():
    """Interpreter vs torch on exact integer sums, verifier clean, NVRTC (16-bit e4m3 stores)."""
    rng = np.random.default_rng(5)
    q = rng.integers(-3, 4, (100, 64)).astype(np.float32)
    k = rng.integers(-3, 4, (GROUP, 64)).astype(np.float32)
    o, s = np.zeros((100, GROUP), np.float32), np.zeros((100, 1), np.float32)
    fp8_epilogue_quantize.interpret(q, k, o, s)
    acc = torch.from_numpy(q @ k.T)   # exact: integer sums below 2^24
    q_ref, s_ref = reference(acc.numpy())
    np.testing.assert_array_equal(o, q_ref.reshape(100, GROUP))
    np.testing.assert_array_equal(s, s_ref)
    kernel = lower_only(fp8_epilogue_quantize)
    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    if nvrtc_available():
        from argus import codegen
        from argus.runtime.compile import compile_cuda

        source = codegen.render(kernel)
        binary = compile_cuda(source.text, [source.name], use_cache=False)
        assert "st.global.b16" in binary.ptx and not binary.resource(source.name).spills
