"""Overlapped fp8 promotion (Fp8GemmSchedule(promote=True, overlap=True)) without a GPU: two
block partials taken in turns, block k's wgmma (overwrite=True, scale-d = 0) issued before block
k - 1 is promoted. The interpreter against a float64 reference of the dequantized product over
odd and even K-step counts (the loop's two steps and both tails), ragged M / N, tiles
straddling 128-column weight blocks, clusters, the TMA-store epilogue and persistent
wrap-around; the lowering keeps the next block in flight (wgmma.wait 1 before the promotion,
no wait 0 in the K loop) while other kernels' waits stay as they were; NVRTC builds it without
spills and without ptxas serializing the wgmma (C7514), and the SASS issues the next QGMMA
before the promotion's FFMAs."""

import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import check_close, e4m3, interpret_blockscaled, scales  # noqa: E402


def _overlap(**kw) -> Fp8GemmSchedule:
    return Fp8GemmSchedule(promote=True, overlap=True, **kw)


@pytest.mark.parametrize("m,n,k,out,schedule", [
    (128, 128, 128, ag.f32, _overlap(bn=128, stages=2)),              # 1 step: odd tail only
    (128, 128, 256, ag.f32, _overlap(bn=128, stages=2)),              # 2 steps: even tail only
    (200, 256, 384, ag.bf16, _overlap(bn=128, stages=3)),             # 3: one loop trip, ragged M
    (128, 256, 512, ag.f32, _overlap(bn=128, stages=3)),              # 4: loop + even tail
    # 112-wide tiles straddle 128-column weight blocks; ragged N; 5 steps
    (130, 250, 640, ag.f32, _overlap(bn=112, stages=3, cluster_m=2)),
    (190, 256, 768, ag.bf16, _overlap(bn=128, stages=3, cluster_m=2, epilogue="tma")),
    # 8 tiles on 2 persistent CTAs: both partials and the ring wrap across tiles
    (256, 256, 384, ag.bf16, _overlap(bn=64, stages=2, num_sms=2, group_m=1)),
])
def test_overlapped_blockscaled_matches_float64(m, n, k, out, schedule):
    interpret_blockscaled(m, n, k, out, schedule)


def test_overlapped_promotion_adds_the_same_values_in_the_same_order():
    """The serial and the overlapped loop add block k's scaled partial into one fp32 sum in K
    order: bit-identical results (5 K steps: the loop twice and the odd tail)."""
    m, n, k = 130, 256, 640
    a, w = e4m3((m, k), 3.0, 11), e4m3((n, k), 0.5, 12)
    sa, sb = scales((m, k // 128), 3), scales((2, k // 128), 4)
    outs = []
    for overlap in (False, True):
        c = torch.full((m, n), float("nan"), dtype=torch.float32)
        gemm_fp8_blockscaled_kernel(ag.f32).interpret(
            a, w, sa.t().contiguous(), sb, c,
            s=Fp8GemmSchedule(bn=128, stages=3, promote=True, overlap=overlap))
        outs.append(c)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("k", [128, 384, 512])
def test_overlapped_per_tensor_promotion_matches_float64(k):
    m, n = 130, 128
    a, w = e4m3((m, k), 3.0, 5), e4m3((n, k), 0.5, 6)
    scale_a, scale_b = torch.tensor([0.25]), torch.tensor([1.5])
    c = torch.full((m, n), float("nan"), dtype=torch.float32)
    gemm_fp8_kernel(ag.f32).interpret(a, w, scale_a, scale_b, c,
                                      s=_overlap(bn=128, stages=2))
    a64, w64 = a.double() * 0.25, w.double() * 1.5
    check_close(c, a64, w64, ag.f32, k)


def test_overlap_schedule_checks():
    with pytest.raises(ValueError, match="needs promote=True"):
        Fp8GemmSchedule(overlap=True, bn=128)
    with pytest.raises(ValueError, match="three 64x160"):
        _overlap(bn=160)
    # repr names overlap only when set: every earlier schedule keeps its key
    assert "overlap" not in repr(Fp8GemmSchedule(bn=128, promote=True))
    s = _overlap(bn=128)
    assert eval(repr(s), {"Fp8GemmSchedule": Fp8GemmSchedule}) == s


def test_wgmma_overwrite_refuses_a_register_operand():
    def k(A: ag.Tensor["M", "K", ag.bf16], W: ag.Tensor["N", "K", ag.bf16]):
        ag.grid(1)
        sb = ag.smem((64, 64), ag.bf16, swizzle=128)
        acc = ag.zeros((64, 64), ag.f32)
        ag.wgmma(ag.zeros((64, 64), ag.bf16), sb.view(), acc, overwrite=True)
    with pytest.raises(ag.TraceError, match="overwrite=True"):
        ag.kernel(k).trace()


def _waits_in_k_loops(kernel):
    """(pending, note) of every wgmma.wait inside an innermost loop whose body has a consume
    step (the K loop, not the loop over tiles around it)."""
    out = []
    for op in kernel.walk():
        if isinstance(op, O.For) and any(isinstance(x, O.Consume) for x in op.body.ops) \
                and not any(isinstance(x, O.For) for x in op.body.walk()):
            out += [(w.pending, w.note) for w in op.body.walk() if isinstance(w, O.WgmmaWait)]
    return out


def test_lowering_keeps_the_next_block_in_flight_during_promotion():
    s = _overlap(bn=128, stages=5)
    waits = _waits_in_k_loops(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=s))
    # each of the loop's two steps: wait 1 where the held partial is promoted (this step's
    # block stays in flight), wait 1 at the step's end; never a wait 0 in the K loop
    assert waits and all(p == 1 for p, _ in waits), waits
    assert sum("this step's stays in flight" in n for _, n in waits) == 2
    # the serial form waits for each block before its promotion
    serial = _waits_in_k_loops(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16),
                                          s=Fp8GemmSchedule(bn=128, stages=5, promote=True)))
    assert any(p == 0 for p, _ in serial)


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@needs_nvrtc
@pytest.mark.parametrize("kernel,schedule", [
    ("block", _overlap(bn=128, stages=5, cluster_m=2, epilogue="tma")),
    ("block", _overlap(bn=128, stages=6)),
    ("tensor", _overlap(bn=128, stages=6)),
])
def test_nvrtc_builds_overlap_without_spills_or_serialization(kernel, schedule):
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    kf = gemm_fp8_blockscaled_kernel(ag.bf16) if kernel == "block" else gemm_fp8_kernel()
    source = codegen.render(lower_only(kf, s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    # C7514: ptxas serialized the wgmma (it saw an accumulator touched while in flight);
    # C7517: it injected a wait of its own
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no disassembler (cuobjdump / nvdisasm) for the SASS order check")
    # the K loop's steady state: a block's QGMMA group, then the previous block's 64 x bn / 128
    # promotion FFMAs (FADDs with per-tensor scales: the partial is added unscaled) with only
    # waits that leave a group in flight (DEPBAR.LE gsb0, 0x1) between them; the serial form
    # has a DEPBAR.LE gsb0, 0x0 there
    seq = re.findall(r"QGMMA|WARPGROUP\.DEPBAR\.LE gsb0, 0x[0-9]|FFMA|FADD", sass)
    add = "FFMA" if kernel == "block" else "FADD"
    between, overlapped = [], False
    for x in seq + ["QGMMA"]:
        if x == "QGMMA":
            drained = "WARPGROUP.DEPBAR.LE gsb0, 0x0" in between
            overlapped |= not drained and between.count(add) >= 64 * schedule.bn // 128
            between = []
        else:
            between.append(x)
    assert overlapped, " ".join(seq)
