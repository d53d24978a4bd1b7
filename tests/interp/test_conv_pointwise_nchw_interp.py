"""The tf32 pointwise convolution of an NCHW input read in place (argus/kernels/
conv_pointwise_nchw.py, routed by argus.ops.conv's pointwise route): the kernel in the numpy
interpreter against torch float64 F.conv2d of the tf32-rounded operands (the tf32 model:
inputs rounded to nearest, fp32 accumulation), the register-A fragment order it relies on,
the bank-conflict-free shared reads, the refusals of the DSL pieces it added, the verifier
(zero findings) and NVRTC (the rs-form tf32 wgmma, no spills; HGMMA .TF32 in the SASS)."""

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.bench.kernelbench.tolerance import round_to_tf32
from argus.kernels.conv_pointwise_nchw import pointwise_nchw_kernel
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available
from argus.target import fragments


def _rel(y, ref):
    return ((y.double() - ref).norm() / ref.norm()).item()


def _ref(x, w, b=None, relu=False):
    """float64 conv of the tf32-rounded operands (the bias exact, added in fp32 by the kernel)."""
    y = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(),
                 None if b is None else b.double())
    return y.clamp_min(0) if relu else y


def test_tf32_register_a_order_is_the_accumulator_pattern():
    """Every thread's tf32 A registers of k8 step kk are its own accumulator-pattern
    registers (4 kk + ACC_ORDER_A32[r]) at tile column acc_order_col32(8 kk + k): what codegen
    packs and the interpreter and verifier read (O.Wgmma.a_acc_order with an f32 A)."""
    fragments.check_acc_order_a32()
    assert [fragments.acc_order_col32(k) for k in range(8)] == [0, 2, 4, 6, 1, 3, 5, 7]


def test_swizzled_atoms_make_the_a_reads_conflict_free():
    """The consumer's ld.shared of each A register (wgmma accumulator pattern, transposed out
    of [32 ch][32 px] boxes with the 128-byte swizzle, codegen's address): 32 lanes on 32
    distinct banks; the unswizzled [32 ch][64 px] box would put 4 lanes on a bank."""
    def worst(addr):
        out = 1
        for w in range(4):
            for i in range(16):
                banks: dict = {}
                for lane in range(32):
                    m, k = fragments.wgmma_acc_coord(32 * w + lane, i)
                    a = addr(m, k)
                    banks.setdefault((a // 4) % 32, set()).add(a)
                out = max(out, max(len(v) for v in banks.values()))
        return out

    def swizzled(m, k):       # element ((m // 32) * 32 + k, m % 32) of the atoms, swizzled
        b = (((m // 32) * 32 + k) * 32 + m % 32) * 4
        return b ^ ((b >> 3) & 0x70)              # ag::swizzle_smem_addr(addr, 128)

    assert worst(swizzled) == 1
    assert worst(lambda m, k: (k * 64 + m) * 4) == 4


# (N, C, H, W, K): pixel counts not a multiple of the 128-pixel tile, C = 3 (29 zero-filled
# channels), C past 64 (two stages), K = 96, batch > 1
CASES = [
    (2, 64, 9, 20, 128),
    (1, 32, 5, 12, 96),
    (3, 3, 4, 7, 128),
    (1, 100, 2, 10, 64),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_pointwise_nchw_matches_float64(case):
    N, C, H, W, K = case
    g = torch.Generator().manual_seed(sum(case))
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C, 1, 1, generator=g)
    y, replay = conv_op._pointwise_nchw_tf32(x, w)
    assert y.shape == (N, K, H, W) and y.is_contiguous() and replay is not None
    assert _rel(y, _ref(x, w)) <= 1e-6
    # it is tf32, not fp32: the exact inputs' product differs by tf32's rounding
    assert _rel(y, F.conv2d(x.double(), w.double())) >= 3e-5
    # the replay runs again on x's current values
    x.mul_(-1)
    assert _rel(replay.launch(x, w), _ref(x, w)) <= 1e-6


def test_pointwise_nchw_bias_and_relu():
    g = torch.Generator().manual_seed(3)
    N, C, H, W, K = 2, 32, 3, 12, 64
    x = torch.randn(N, C, H, W, generator=g)
    w = torch.randn(K, C, 1, 1, generator=g)
    b = torch.randn(K, generator=g)
    wp = conv_op._pointwise_nchw_weight(w, 32)
    out = torch.zeros(N, K, H * W)
    pointwise_nchw_kernel(32, K, bias=True, activation="relu").interpret(
        x.view(N, C, H * W), wp, out, b.view(1, K))
    assert _rel(out.view(N, K, H, W), _ref(x, w, b, relu=True)) <= 1e-6


def test_route_takes_the_nchw_kernel(monkeypatch):
    """convolve(precision="tf32") of an NCHW x with NCHW_POINTWISE_PIXELS or more pixels runs
    the one kernel (no rounding pass, no per-image GEMMs); a channels-last x keeps the GEMM."""
    monkeypatch.setattr(conv_op, "NCHW_POINTWISE_PIXELS", 16)
    monkeypatch.setattr(conv_op, "NCHW_POINTWISE_IN_PLACE", True)    # the default; stated
    calls = []
    real = conv_op._pointwise_nchw_tf32
    monkeypatch.setattr(conv_op, "_pointwise_nchw_tf32",
                        lambda x, w: calls.append(x.shape) or real(x, w))
    g = torch.Generator().manual_seed(7)
    x = torch.randn(2, 16, 4, 8, generator=g)
    w = torch.randn(24, 16, 1, 1, generator=g)
    y = conv_op.convolve(x, w, precision="tf32")
    assert calls == [x.shape] and y.is_contiguous()
    assert _rel(y, _ref(x, w)) <= 1e-6
    xl = x.to(memory_format=torch.channels_last)
    assert conv_op._pointwise_nchw_applies(x, w) and not conv_op._pointwise_nchw_applies(xl, w)
    assert not conv_op._pointwise_nchw_applies(x[:, :, :, :4], w)    # not contiguous
    assert not conv_op._pointwise_nchw_applies(torch.randn(1, 16, 3, 3), w)  # 9 pixels


def test_refusals():
    """The DSL pieces: an f32 register A needs precision='tf32' and a_acc_order=True; a
    transposed shared read's rows must split the view into equal atoms."""
    def kernel(order: bool, rows: int):
        @ag.kernel(threads=256)
        def k(X: ag.Tensor["R", 32, ag.f32], W: ag.Tensor[64, 32, ag.f32],
              Y: ag.Tensor[64, 64, ag.f32]):
            ag.grid(1)
            sX = ag.smem((1, 64, 32), ag.f32, swizzle=128)
            sW = ag.smem((1, 64, 32), ag.f32, swizzle=128)
            pipe = ag.pipeline(1)
            with ag.role("load", warpgroups=1):
                with pipe.produce() as st:
                    ag.tma.load(sX[st], X, (0, 0))
                    ag.tma.load(sW[st], W, (0, 0))
            with ag.role("compute", warpgroups=1):
                acc = ag.zeros((64, 64), ag.f32)
                with pipe.consume() as st:
                    a = ag.load_shared(sX[st], transposed=True, rows=rows)
                    acc = ag.wgmma(a, sW[st], acc, precision="tf32", a_acc_order=order)
                ag.store(Y, (0, 0), acc)
        return k

    with pytest.raises(ag.TraceError, match="accumulator's order"):
        kernel(False, 64).trace()
    with pytest.raises(ag.TraceError, match="equal atoms"):
        kernel(True, 48).trace()
    kernel(True, 64).trace()


@pytest.mark.parametrize("kp,cout,bias", [(64, 128, False), (32, 96, True), (128, 128, False)])
def test_pointwise_nchw_verifies_with_zero_findings(kp, cout, bias):
    from argus.compiler import lower_only
    from argus.kernels.conv_pointwise_nchw import stages_for

    assert stages_for(64, 128) == 3 and stages_for(128, 256) == 0
    kernel = pointwise_nchw_kernel(kp, cout, stages=stages_for(kp, cout), bias=bias,
                                   activation="relu" if bias else None)
    report = verify.run(lower_only(kernel))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    proven = {d.code for d in report.proven}
    assert {"wgmma.agree", "wgmma.k-once", "wgmma.a-fragment", "store.once", "store.coverage",
            "pipe.data", "tma.swizzle"} <= proven, proven


def test_verifier_catches_a_weight_in_natural_order(monkeypatch):
    """Tagging the weight's columns in natural order (what it would be without the op's
    permutation) is a wgmma.agree error: A's k-position k multiplies channel
    acc_order_col32(k)."""
    from argus.compiler import lower_only
    from argus.kernels import conv_pointwise_nchw as mod

    monkeypatch.setattr(mod, "acc_order_col32", lambda k: k)
    mod.pointwise_nchw_kernel.cache_clear()
    try:
        report = verify.run(lower_only(mod.pointwise_nchw_kernel(32, 64)))
    finally:
        mod.pointwise_nchw_kernel.cache_clear()
    assert any(d.code == "wgmma.agree" for d in report.errors), report.errors


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_pointwise_nchw_kernel(tmp_path, monkeypatch):
    """sm_90a, no spills, the rs-form tf32 wgmma with A rounded by cvt.rna; with a
    disassembler, HGMMA .TF32 reading A from registers and 32 scalar LDS a tile (K = 64)."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import have_disassembler, instruction_histogram, sass_text

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    source = codegen.render(lower_only(pointwise_nchw_kernel(64, 128)))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    assert "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32" in binary.ptx
    assert "cvt.rna.tf32.f32" in binary.ptx
    assert not binary.resource(source.name).spills
    if have_disassembler():
        sass = sass_text(binary.cubin)
        hist = instruction_histogram(sass)
        assert hist["HGMMA"] == 8 and "HGMMA.64x128x8.F32.TF32 R" in sass, hist
        assert hist["LDS"] == 32 and not hist.get("STS"), hist


def test_route_keeps_the_gemm_while_the_in_place_kernel_is_off(monkeypatch):
    """NCHW_POINTWISE_IN_PLACE = False (an opt-out; on by default since its H200 run): the
    route never launches it, whatever the problem."""
    monkeypatch.setattr(conv_op, "NCHW_POINTWISE_PIXELS", 16)
    monkeypatch.setattr(conv_op, "NCHW_POINTWISE_IN_PLACE", False)
    monkeypatch.setattr(conv_op, "_pointwise_nchw_tf32",
                        lambda x, w: (_ for _ in ()).throw(AssertionError("launched")))
    g = torch.Generator().manual_seed(8)
    x = torch.randn(2, 16, 4, 8, generator=g)
    w = torch.randn(24, 16, 1, 1, generator=g)
    y = conv_op.convolve(x, w, precision="tf32")
    assert _rel(y, _ref(x, w)) <= 1e-6
