"""Block scales through shared memory (Fp8GemmSchedule(promote=True, smem_scales=True),
`gemm_fp8_blockscaled_smem_kernel`) without a GPU: the producer TMA-loads each stage's
activation scales (a [bm, 4] f32 box of the K-major scale_a) and weight scales (a [1 or 2, 4]
box of scale_b) beside the operand tiles, the consumers read them with ag.load_shared in their
consume step and release the slot before the promotion's FFMAs. The interpreter against a
float64 reference and bit for bit against the global-scale kernel (same partials, same
scales, same order of adds); the rendered CUDA reads the scales from shared memory only; the
verifier finds nothing; NVRTC builds it without spills; the op's K-major scale views; the
compiler pieces (RL.widen, ag.load_shared's checks)."""

import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_blockscaled_smem_kernel)
from argus.runtime import nvrtc_available
from argus.target import register_layouts as RL

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import interpret_blockscaled, verify_clean  # noqa: E402


def _smem(**kw) -> Fp8GemmSchedule:
    return Fp8GemmSchedule(promote=True, smem_scales=True, **kw)


CASES = [
    (128, 128, 128, ag.f32, _smem(bn=128, stages=2)),                  # one K step
    (130, 250, 640, ag.f32, _smem(bn=112, stages=3)),                  # straddling, ragged
    (190, 256, 768, ag.bf16, _smem(bn=128, stages=3, cluster_m=2, epilogue="tma")),
    (200, 320, 512, ag.f32, _smem(bn=160, stages=2, cluster_m=2)),     # straddling, cluster
    # 8 tiles on 2 persistent CTAs: the ring and the scale buffers wrap across tiles
    (256, 256, 384, ag.bf16, _smem(bn=64, stages=2, num_sms=2, group_m=1)),
]


@pytest.mark.parametrize("m,n,k,out,schedule", CASES)
def test_smem_scales_match_float64_and_the_global_scale_kernel(m, n, k, out, schedule):
    c = interpret_blockscaled(m, n, k, out, schedule)
    plain = Fp8GemmSchedule(**{f: getattr(schedule, f) for f in (
        "bn", "stages", "cluster_m", "epilogue", "num_sms", "group_m")}, promote=True)
    assert torch.equal(c, interpret_blockscaled(m, n, k, out, plain))


def _consumer_source(schedule) -> tuple[str, str]:
    text = codegen.render(lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16),
                                     s=schedule)).text
    return text, text[text.index("setmaxnreg_inc"):]


@pytest.mark.parametrize("schedule", [_smem(bn=128, stages=5, cluster_m=2, epilogue="tma"),
                                      _smem(bn=112, stages=5)])
def test_rendered_consumers_read_the_scales_from_shared_memory(schedule):
    text, consumer = _consumer_source(schedule)
    # the producer copies both scale boxes with each stage, into the stage's full barrier
    assert len(re.findall(r"ag::tma_load_2d\(&tmap\d+", text)) >= 3
    # no consumer thread touches the scale tensors in global memory
    assert "ScaleA[" not in consumer and "ScaleB[" not in consumer
    # each thread reads its two rows' activation scales of the stage (the box's first
    # column: row * 4 + 0) and the weight scale, straight into registers
    assert re.search(r"\[\(\(acc_row \+ 0\)\) \* 4 \+ 0\]", consumer)
    assert re.search(r"\[\(\(acc_row \+ 8\)\) \* 4 \+ 0\]", consumer)
    assert "convert_layout" not in text
    # the slot is released after the wgmma wait, before the promotion's multiply-adds
    loop = consumer[consumer.index("ag::wgmma_commit();"):]
    promote = loop.index("] * (")
    assert loop.index("ag::wgmma_wait<0>();") < loop.rindex("mbar_arrive", 0, promote)


_C_BYTES = {"float": 4, "ag::e4m3": 1, "ag::bf16": 2, "ag::f16": 2}


@pytest.mark.parametrize("schedule", [_smem(bn=128, stages=6), _smem(bn=112, stages=5),
                                      _smem(bn=128, stages=5, cluster_m=2, epilogue="tma")])
def test_every_tma_destination_stage_is_128_byte_aligned(schedule):
    """A TMA copy's shared-memory destination starts on 128 B (CUDA Programming Guide, TMA
    alignment requirements; DeepGEMM asserts it for its scale stages). The weight scales'
    stages were 16 B apart (planes x 4 f32), so stages 1.. were misaligned (a device fault:
    the likely 'illegal instruction' of tests/gpu/test_fp8_smem_scales_gpu.py); smem.align
    checks the stage step of swizzled buffers only."""
    text, _ = _consumer_source(schedule)
    base = {m[1]: int(m[2]) for m in re.finditer(
        r"const (s\d+) = reinterpret_cast<[^>]+>\(smem \+ (\d+)\)", text)}
    dests = re.findall(r"ag::tma_load\w*\(&tmap\d+, (v\d+),", text)
    assert len(dests) >= 4, dests
    for d in dests:
        m = re.search(rf"([\w:]+)\* const {d} = (s\d+) \+ v\d+ \* (\d+)"
                      rf"(?: \+ \(v\d+\) \* (\d+))?;", text)
        assert m, f"{d}: destination not of the form buffer + stage * step [+ row * pitch]"
        steps = [int(x) * _C_BYTES[m[1]] for x in (m[3], m[4]) if x]
        assert base[m[2]] % 128 == 0 and all(b % 128 == 0 for b in steps), (m[0], steps)


def test_smem_scales_verify_clean():
    for s in (_smem(bn=128, stages=5, cluster_m=2, epilogue="tma"), _smem(bn=160, stages=4)):
        verify_clean(lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16), s=s))


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("schedule", [_smem(bn=128, stages=5, cluster_m=2, epilogue="tma"),
                                      _smem(bn=128, stages=6), _smem(bn=160, stages=5)])
def test_nvrtc_builds_smem_scales_without_spills(schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert f"wgmma.mma_async.sync.aligned.m64n{schedule.bn}k32.f32.e4m3.e4m3" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log


def test_smem_scales_schedule_checks_and_repr():
    for bad in (dict(smem_scales=True), dict(promote=True, overlap=True, smem_scales=True),
                dict(promote=True, late_release=True, smem_scales=True)):
        with pytest.raises(ValueError, match="smem_scales"):
            Fp8GemmSchedule(bn=128, **bad)
    assert "smem_scales" not in repr(Fp8GemmSchedule(bn=128, promote=True))
    s = _smem(bn=128, stages=5)
    assert eval(repr(s), {"Fp8GemmSchedule": Fp8GemmSchedule}) == s
    # the scale boxes' shared memory is counted: bm rows of 16 bytes per stage, and the
    # weight scales' 128 B (a TMA destination's alignment)
    assert s.smem_bytes == Fp8GemmSchedule(bn=128, stages=5, promote=True).smem_bytes \
        + 5 * (128 * 16 + 128)
    # each kernel refuses the other's schedules
    with pytest.raises(ag.TraceError, match="smem_scales"):
        lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s)
    with pytest.raises(ag.TraceError, match="smem_scales=True"):
        lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16),
                   s=Fp8GemmSchedule(bn=128, promote=True))


def test_op_passes_kmajor_scales_with_16_byte_rows():
    from argus.ops.scaled_matmul import _kmajor_block_scales

    sa, sb = torch.rand(7, 5), torch.rand(3, 5)     # K/128 = 5: rows of 20 bytes
    ka, kb = _kmajor_block_scales(sa, sb)
    for got, want in ((ka, sa), (kb, sb)):
        assert torch.equal(got, want) and got.stride() == (8, 1)
        assert got.data_ptr() % 16 == 0
    aligned = torch.rand(7, 8)                      # 32-byte rows: passed as they are
    assert _kmajor_block_scales(aligned, aligned)[0] is aligned
    # an MN-major scale_a (DeepGEMM's layout) is copied K-major
    mn = torch.rand(8, 7).t()
    got = _kmajor_block_scales(mn, aligned)[0]
    assert torch.equal(got, mn) and got.stride(-1) == 1


def test_widen_holds_the_window_in_the_same_threads():
    part = RL.build("slice(wgmma_acc,1,128)", (64, 1), 128)
    wide = RL.build("widen(slice(wgmma_acc,1,128),1,4)", (64, 4), 128)
    assert wide.shape == (64, 4) and wide.thread_bases == part.thread_bases
    assert wide.check_exact() is None
    # column 0 of the widened layout is the parent's registers, in order
    assert wide.regs[:part.nregs] == part.regs
    with pytest.raises(ValueError, match="must be 4"):
        RL.build("widen(slice(wgmma_acc,1,128),1,4)", (64, 2), 128)


def test_load_shared_refuses_16_bit_and_swizzled_views():
    def make(dtype, swizzle):
        def k(A: ag.Tensor["M", "K", ag.f32]):
            ag.grid(1)
            buf = ag.smem((64, 32 if swizzle else 4) if dtype == ag.f32 else (64, 64),
                          dtype, swizzle=swizzle)
            ag.load_shared(buf.view())
        return ag.kernel(k, name=f"load_shared_{dtype.name}_{swizzle}")
    for dtype, swizzle in ((ag.bf16, 0), (ag.f32, 128)):
        with pytest.raises(ag.TraceError, match="32-bit unswizzled"):
            make(dtype, swizzle).trace()
