"""The serial fp8 promotion's stage release (no GPU): by default the dense kernels release a
ring slot as soon as the K block's wgmma group has retired, before the promotion's CUDA-core
FFMAs (`early_release_promoted_mma`, DeepGEMM's order), so the producer refills the slot while
the consumers promote; `late_release=True` keeps `promoted_mma`'s order (release after the
FFMAs) for measuring one against the other. Both compute bit for bit the same sum in the
interpreter, both verify with zero findings, and NVRTC builds the default without spills."""

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import (check_close, dequantized, e4m3, scales,  # noqa: E402
                                   verify_clean)


def _k_loop(kernel) -> list:
    """The ops of the consumer's K loop (the innermost loop holding a consume step), nested
    regions flattened in program order."""
    loops = [op for op in kernel.walk() if isinstance(op, O.For)
             and any(isinstance(x, O.Consume) for x in op.body.ops)
             and not any(isinstance(x, O.For) for x in op.body.walk())
             and any(isinstance(x, O.Wgmma) for x in op.body.walk())]
    assert len(loops) == 1, len(loops)
    return list(loops[0].body.walk())


def _release_before_promotion(kernel) -> bool:
    """Whether every slot release of the K loop comes before the promotion's add into the
    fp32 accumulator (after the wgmma group's wait 0)."""
    ops = _k_loop(kernel)
    adds = [i for i, op in enumerate(ops) if isinstance(op, O.Elementwise) and op.fn == "add"
            and op.result.type.shape[-1] > 1]
    releases = [i for i, op in enumerate(ops) if isinstance(op, O.SlotRelease)]
    assert adds and releases
    return max(releases) < min(adds)


@pytest.mark.parametrize("kernel", ["block", "tensor"])
def test_the_serial_promotion_releases_the_stage_before_its_ffmas(kernel):
    kf = gemm_fp8_blockscaled_kernel(ag.bf16) if kernel == "block" else gemm_fp8_kernel()
    s = Fp8GemmSchedule(bn=128, stages=5, promote=True)
    assert _release_before_promotion(lower_only(kf, s=s))
    late = Fp8GemmSchedule(bn=128, stages=5, promote=True, late_release=True)
    assert not _release_before_promotion(lower_only(kf, s=late))


def test_late_release_schedule_checks():
    with pytest.raises(ValueError, match="late_release"):
        Fp8GemmSchedule(bn=128, late_release=True)
    with pytest.raises(ValueError, match="late_release"):
        Fp8GemmSchedule(bn=128, promote=True, overlap=True, late_release=True)
    # repr names late_release only when set: every earlier schedule keeps its cache key
    assert "late_release" not in repr(Fp8GemmSchedule(bn=128, promote=True))
    s = Fp8GemmSchedule(bn=128, promote=True, late_release=True)
    assert eval(repr(s), {"Fp8GemmSchedule": Fp8GemmSchedule}) == s


@pytest.mark.parametrize("m,n,k,schedule", [
    (130, 250, 640, Fp8GemmSchedule(bn=112, stages=3, promote=True, cluster_m=2)),
    (256, 256, 384, Fp8GemmSchedule(bn=64, stages=2, promote=True, num_sms=2, group_m=1)),
])
def test_early_and_late_release_add_the_same_values(m, n, k, schedule):
    """Same partials, same scales, same order of adds: bitwise equal, and close to float64."""
    a, w = e4m3((m, k), 3.0, 21), e4m3((n, k), 0.5, 22)
    sa, sb = scales((m, k // 128), 23), scales((-(-n // 128), k // 128), 24)
    outs = []
    for late in (False, True):
        c = torch.full((m, n), float("nan"), dtype=torch.float32)
        s = Fp8GemmSchedule(**{**{f: getattr(schedule, f) for f in (
            "bn", "stages", "cluster_m", "num_sms", "group_m")}, "promote": True,
            "late_release": late})
        gemm_fp8_blockscaled_kernel(ag.f32).interpret(a, w, sa.t().contiguous(), sb, c, s=s)
        outs.append(c)
    assert torch.equal(outs[0], outs[1])
    check_close(outs[0], *dequantized(a, w, sa, sb), ag.f32, k)


def test_early_release_verifies_clean():
    verify_clean(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=Fp8GemmSchedule(
        bn=128, stages=5, promote=True, cluster_m=2, epilogue="tma")))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_nvrtc_builds_the_early_release_without_spills():
    from argus.runtime.compile import compile_cuda

    s = Fp8GemmSchedule(bn=128, stages=5, promote=True, cluster_m=2, epilogue="tma")
    source = codegen.render(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
