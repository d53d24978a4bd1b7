"""MoeSchedule(scheduler="dynamic") without a GPU: the fp8 prefill grouped GEMMs
(grouped_gemm_fp8_smem_kernel, grouped_gemm_fp8_kernel) on the dynamic persistent walk, each
CTA's producer drawing its units from a work counter (argus/kernels/moe.py _draws / _slots;
docs/design/dynamic_scheduler.md). Checked here: the layer in the interpreter bit-identical to
the static walk (the output, y, and h or the fused quantize's hq / hs, bit for bit, NaN
padding included), gate-up and down, with zero-row experts and num_sms=2 (units wrap); the
work word back at 0 after every launch; reprs unchanged when static; the refusals (clusters,
pair_multicast, decode, persistent=False, the bf16 kernel, a kernel built for the other
walk); the verifier with zero findings and what the static kernels prove; NVRTC builds for
sm_90a without spills."""

from dataclasses import replace

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.kernels.moe import PREFILL_TMA, MoeSchedule, grouped_gemm_kernel
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT_SMEM, FP8_PREFILL_SPLIT_SMEM_TMA,
                                   FP8_PREFILL_SPLIT_TMA, FP8_SMALL, grouped_gemm_fp8_kernel,
                                   grouped_gemm_fp8_smem_kernel)
from argus.ops import dynamic_walk
from argus.runtime import nvrtc_available

from tests.moe.conftest import assert_builds_without_spills
from tests.moe.test_moe_unit_grid import _bits, _layer

from argus.ops import moe_module as M


def _dyn(s):
    return replace(s, scheduler="dynamic")


CASES = [
    ("smem tma", FP8_PREFILL_SPLIT_SMEM_TMA),
    ("smem direct", FP8_PREFILL_SPLIT_SMEM),
    ("smem fused quantize", replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True)),
    ("smem skip_pad_halves", replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True)),
    ("global scales split", FP8_PREFILL_SPLIT_TMA),
    ("global scales small tile", FP8_SMALL),
]


@pytest.mark.parametrize("name,schedule", CASES, ids=[c[0] for c in CASES])
def test_dynamic_walk_gives_the_static_layer_bit_for_bit(name, schedule):
    """Each unit is computed by the same code whichever CTA draws it, so every element the
    GEMMs write is the same bits; with num_sms=2 each CTA walks several units (and the
    interpreter's CTA 0 draws the first half of them: a permutation of the static walk's).
    The work word (one per device off CUDA) is 0 after the layer's two launches."""
    for num_sms in (2, schedule.num_sms):
        static = replace(schedule, num_sms=num_sms)
        ref, ref_ws, _ = _layer(static, static, True)
        out, ws, _ = _layer(_dyn(static), _dyn(static), True)
        assert torch.equal(out, ref)
        for key in ("y", "h", "hq", "hs"):
            if key in ws:
                assert torch.equal(_bits(ws[key]), _bits(ref_ws[key])), key
        assert not torch.isnan(out).any()
        word = dynamic_walk.work_word(torch.device("cpu"))
        assert word.tolist() == [0]


def test_one_dynamic_gemm_beside_a_static_one():
    """The gate-up dynamic, the down static (and the other way): the same bits."""
    s = replace(FP8_PREFILL_SPLIT_SMEM_TMA, num_sms=3)
    ref, _, _ = _layer(s, s, True)
    for pair in ((_dyn(s), s), (s, _dyn(s))):
        out, _, _ = _layer(*pair, True)
        assert torch.equal(out, ref)


def test_a_counter_left_elsewhere_rotates_the_units_each_still_once():
    """A launch cut short leaves the word at some c in [0, total): the next launch of the same
    total draws every unit once (c, c + 1, .. mod total) and leaves it at c."""
    s = replace(FP8_PREFILL_SPLIT_SMEM_TMA, num_sms=2)
    ref, _, _ = _layer(s, s, True)
    word = dynamic_walk.work_word(torch.device("cpu"))
    word.fill_(1)
    try:
        out, _, _ = _layer(_dyn(s), s, True)
        assert word.tolist() == [1]
    finally:
        word.zero_()
    assert torch.equal(out, ref)


def test_repr_and_refusals():
    """scheduler is in the repr only when 'dynamic' (every earlier repr, tuning key and golden
    header reads as before); clusters, pair_multicast, decode, persistent=False, the bf16
    kernel and a kernel of the other walk refuse it, each saying why."""
    assert "scheduler" not in repr(FP8_PREFILL_SPLIT_SMEM_TMA)
    assert "scheduler='dynamic'" in repr(_dyn(FP8_PREFILL_SPLIT_SMEM_TMA))
    with pytest.raises(ValueError, match="not 'static' or 'dynamic'"):
        replace(FP8_SMALL, scheduler="greedy")
    with pytest.raises(ValueError, match="persistent=True"):
        replace(FP8_PREFILL_SPLIT_SMEM_TMA, scheduler="dynamic", persistent=False)
    with pytest.raises(ValueError, match="cluster_m=1 and cluster_n=1"):
        replace(FP8_PREFILL_SPLIT_TMA, scheduler="dynamic", cluster_m=2)
    with pytest.raises(ValueError, match="swap_ab=False"):
        MoeSchedule(bm=64, bn=8, bk=64, stages=8, consumers=1, swap_ab=True,
                    scheduler="dynamic")
    pair = replace(FP8_PREFILL_SPLIT_SMEM_TMA, pair_multicast=True, scheduler="dynamic")
    with pytest.raises(TraceError, match="pair_multicast"):
        lower_only(grouped_gemm_fp8_smem_kernel(True, dynamic=True), s=pair)
    with pytest.raises(TraceError, match="dynamic=True"):
        lower_only(grouped_gemm_fp8_smem_kernel(True), s=_dyn(FP8_PREFILL_SPLIT_SMEM_TMA))
    with pytest.raises(TraceError, match="dynamic=False"):
        lower_only(grouped_gemm_fp8_kernel(False, dynamic=True), s=FP8_PREFILL_SPLIT_TMA)
    with pytest.raises(TraceError, match="fp8 prefill kernels only"):
        lower_only(grouped_gemm_kernel(True), s=_dyn(PREFILL_TMA))


def _kernels():
    smem = _dyn(FP8_PREFILL_SPLIT_SMEM_TMA)
    return [
        ("smem gate_up", lambda: grouped_gemm_fp8_smem_kernel(True, dynamic=True), smem),
        ("smem down", lambda: grouped_gemm_fp8_smem_kernel(False, dynamic=True), smem),
        ("smem gate_up fused quantize",
         lambda: grouped_gemm_fp8_smem_kernel(True, True, dynamic=True),
         replace(smem, quantize_out=True)),
        ("global gate_up", lambda: grouped_gemm_fp8_kernel(True, dynamic=True),
         _dyn(FP8_PREFILL_SPLIT_TMA)),
        ("global down", lambda: grouped_gemm_fp8_kernel(False, dynamic=True),
         _dyn(FP8_PREFILL_SPLIT_TMA)),
    ]


KERNELS = _kernels()


@pytest.mark.parametrize("name,build,schedule", KERNELS, ids=[k[0] for k in KERNELS])
def test_dynamic_kernels_verify_clean(name, build, schedule):
    """Zero findings; what the static kernels prove proven here too, and the draws'
    atomic.tickets (every unit drawn once a launch, the counter back where it started)."""
    report = verify.run(lower_only(build(), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"pipe.totals", "pipe.release", "pipe.deadlock", "wgmma.agree", "wgmma.k-once",
            "store.coords", "atomic.tickets"} <= proven, proven


@pytest.mark.parametrize("bug,code", [("wrap+1", "atomic.tickets"),
                                      ("per-cta", "atomic.tickets"),
                                      ("unit+1", "store.coords")])
def test_the_verifier_catches_seeded_draw_bugs(bug, code, monkeypatch):
    """On the smem gate-up: a counter that wraps one late (it never returns to zero), a
    counter per CTA (units drawn by several CTAs), consumers that store the next ticket's
    unit (the peek + 1)."""
    import argus.kernels.moe_fp8 as F
    from argus.kernels.warp_specialized import OperandRing, tile_coords

    def draws(first, programs, m_units, n_tiles, group_m, TileExpert, Work):
        total = m_units * n_tiles
        for _ in ag.range(first, total, programs):
            if bug == "wrap+1":
                ticket = ag.atomic_fetch_add(Work, (0,), wrap=total + 1)
            elif bug == "per-cta":
                ticket = ag.atomic_fetch_add(Work, (first,), wrap=total)
            else:
                ticket = ag.atomic_fetch_add(Work, (0,), wrap=total)
            mu, n = tile_coords(ticket, m_units, n_tiles, group_m)
            yield ticket, mu, n, ag.load_scalar(TileExpert, (mu, 0))

    monkeypatch.setattr(F, "_draws", draws)
    if bug == "unit+1":
        monkeypatch.setattr(OperandRing, "peek_unit", lambda self: self.pipe.peek() + 1)
    kernel = F.grouped_gemm_fp8_smem_kernel.__wrapped__(True, dynamic=True)
    report = verify.run(lower_only(kernel, s=_dyn(FP8_PREFILL_SPLIT_SMEM_TMA)))
    hit = [d for d in report.errors + report.unknowns if d.code == code]
    assert hit, "\n".join(str(d) for d in report.errors + report.unknowns)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,build,schedule", KERNELS, ids=[k[0] for k in KERNELS])
def test_dynamic_kernels_build_without_spills(name, build, schedule):
    assert_builds_without_spills(build(), schedule)
