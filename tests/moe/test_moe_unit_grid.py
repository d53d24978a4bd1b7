"""MoeSchedule(persistent=False) without a GPU: the prefill grouped GEMMs (bf16
grouped_gemm_kernel, fp8 grouped_gemm_fp8_kernel and grouped_gemm_fp8_smem_kernel) on a grid
of one CTA (or cluster) per unit of the largest layout, each taking unit pid of the same
walk (argus/kernels/moe.py unit_programs). Checked here: the grid, from shapes, is the
largest layout's units (in CTAs: times the cluster) whatever num_sms says, and more than the
units routing counts when experts get no rows; the layer in the interpreter bit-identical to
the persistent schedule (the output, y, h or the fused quantize's hq / hs, bit for bit, NaN
padding included), gate-up and down, bf16 and fp8, with and without clusters, with zero-row
experts; the schedule's refusals (decode, PDL and its kin, ping-pong); the verifier with zero
findings; NVRTC builds for sm_90a without spills."""

from dataclasses import replace

import pytest
import torch

from argus import verify
from argus.compiler import lower_only
from argus.kernels import moe_routing as R
from argus.kernels.moe import (DECODE, PREFILL, PREFILL_DOWN_PAIR_N, PREFILL_GATE_UP_S4,
                               PREFILL_TMA, PREFILL_TMA_CLUSTER, MoeSchedule, decode_schedule,
                               grouped_gemm_kernel)
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA,
                                   FP8_SMALL, grouped_gemm_fp8_kernel,
                                   grouped_gemm_fp8_smem_kernel)
from argus.runtime import nvrtc_available
from argus.runtime.interp import grid_extents

from tests.moe.conftest import assert_builds_without_spills
from tests.moe.test_moe_fp8_layer import _rel
from tests.moe.test_moe_skip_pad_halves import _experts, _routing

from argus.ops import moe_module as M

# expert rows: a zero-row expert (the grid then has units no CTA finds), a one-row expert, a
# tail of 65 rows (the second warpgroup holds one routed row)
COUNTS = [180, 0, 65, 1, 130, 0]
BITS = {torch.bfloat16: torch.int16, torch.float32: torch.int32,
        torch.float8_e4m3fn: torch.uint8}


def _unit_grid(s: MoeSchedule) -> MoeSchedule:
    return replace(s, persistent=False)


def _layer(gate_up: MoeSchedule, down: MoeSchedule, fp8: bool, counts=COUNTS, seed: int = 5):
    """(out, ws) of the layer in the interpreter, the GEMMs' outputs filled first (so rows
    neither schedule writes read the same)."""
    E, H, I, k = len(counts), 256, 256, 2
    ids, weights = _routing(counts, k, seed)
    T = ids.shape[0]
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(seed + 1)).bfloat16()
    layer = M.Layer(T, H, I, E, k, gate_up, down)
    ws = M._workspace(layer, x.device, True)
    for name in ("y", "h", "hq", "hs"):
        if name in ws:
            ws[name].view(BITS[ws[name].dtype]).fill_(7)
    out, exact = _experts(x, ids, weights, layer, ws, fp8, seed)
    return out, ws, exact


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(BITS[t.dtype])


CASES = [
    ("fp8 split_smem_tma", FP8_PREFILL_SPLIT_SMEM_TMA, None, True),
    ("fp8 gate-up only", _unit_grid(FP8_PREFILL_SPLIT_SMEM_TMA), FP8_PREFILL_SPLIT_SMEM_TMA,
     True),
    ("fp8 fused quantize", replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True), None, True),
    ("fp8 global scales cluster", replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2), None, True),
    ("fp8 small tile", FP8_SMALL, None, True),
    ("fp8 skip_pad_halves", replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True), None,
     True),
    ("bf16 tma", PREFILL_TMA, None, False),
    ("bf16 tma cluster", PREFILL_TMA_CLUSTER, None, False),
    ("bf16 direct", PREFILL, None, False),
    ("bf16 pair-n", replace(PREFILL_DOWN_PAIR_N, stages=2), None, False),
]


@pytest.mark.parametrize("name,schedule,down,fp8", CASES, ids=[c[0] for c in CASES])
def test_unit_grid_gives_the_persistent_layer_bit_for_bit(name, schedule, down, fp8):
    """Each unit is computed by the same code whichever CTA takes it, so every element the
    GEMMs write is the same bits: the output, y, and h (or hq and its scales). The
    persistent baseline walks 2 CTAs (num_sms=2: units wrap), the other its own default."""
    if down is None:   # both GEMMs on the unit grid
        grid = (_unit_grid(schedule), _unit_grid(schedule))
        base = (schedule, schedule)
    else:
        grid = (schedule, down)
        base = (replace(schedule, persistent=True), down)
    out, ws, exact = _layer(*grid, fp8)
    for persistent in (base, tuple(replace(s, num_sms=2 * s.cluster_m * s.cluster_n)
                                   for s in base)):
        ref, ref_ws, _ = _layer(*persistent, fp8)
        assert torch.equal(out, ref)
        for key in ("y", "h", "hq", "hs"):
            if key in ws:
                assert torch.equal(_bits(ws[key]), _bits(ref_ws[key])), key
    assert not torch.isnan(out).any()
    assert _rel(out, exact) < 1e-2, _rel(out, exact)


def _symbols(layer, gated: bool) -> dict:
    rows = layer.padded_rows
    return dict(M=rows, MT=rows // layer.schedule.pad, K=layer.hidden if gated else layer.inter,
                E=layer.experts, NC=layer.inter if gated else layer.hidden)


@pytest.mark.parametrize("schedule,gated,build", [
    (PREFILL_TMA, True, grouped_gemm_kernel),
    (PREFILL_TMA_CLUSTER, True, grouped_gemm_kernel),
    (replace(PREFILL_DOWN_PAIR_N, stages=2), False, grouped_gemm_kernel),
    (FP8_PREFILL_SPLIT_SMEM_TMA, True, grouped_gemm_fp8_smem_kernel),
    (replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2), False, grouped_gemm_fp8_kernel),
], ids=["bf16 gate-up", "bf16 gate-up cluster_m", "bf16 down cluster_n", "fp8 smem gate-up",
        "fp8 down cluster_m"])
def test_grid_is_the_largest_layouts_units(schedule, gated, build):
    """From shapes only (a host integer: what CUDA-graph capture needs): the largest layout's
    units times the cluster's CTAs, num_sms ignored; the persistent grid is at most num_sms
    CTAs. At DeepSeek-V3-like sizes (T = 4096, E = 256, top 8) the unit grid is thousands of
    CTAs, and routing that sends every row to one expert counts far fewer units than it
    launches."""
    cs = schedule.cluster_m * schedule.cluster_n
    layer = M.Layer(4096, 7168, 2048, 256, 8, schedule)
    symbols = _symbols(layer, gated)
    width = schedule.bn // 2 if gated else schedule.bn
    n_tiles = -(-symbols["NC"] // width)
    n_units = -(-n_tiles // schedule.cluster_n)
    most = symbols["MT"] * n_units
    for num_sms in (132, 8):
        unit = lower_only(build(gated), s=replace(schedule, persistent=False, num_sms=num_sms))
        assert grid_extents(unit, symbols)[0] == most * cs
    persistent = lower_only(build(gated), s=schedule)
    assert grid_extents(persistent, symbols)[0] == min(most, 132 // cs) * cs
    # one expert with all 4096 x 8 rows: its units are 32768 / pad m-units, the grid's MT
    assert 32768 // schedule.pad * n_units < most


def test_refusals():
    """Decode (swap_ab, with it split_k and fused_finish) and the PDL family refuse the unit
    grid, ping-pong refuses it (the skeleton's rule), each saying why."""
    with pytest.raises(ValueError, match="prefill schedule"):
        replace(DECODE, persistent=False)
    with pytest.raises(ValueError, match="prefill schedule"):
        replace(decode_schedule(split_k=4, fused_finish=True), persistent=False)
    with pytest.raises(ValueError, match="resident"):
        replace(decode_schedule(pdl=True, prefetch=4, pdl_combine=True), persistent=False)
    with pytest.raises(ValueError, match="pingpong"):
        MoeSchedule(bm=128, bn=128, bk=64, stages=4, consumers=2, pingpong=True,
                    persistent=False)
    # prefill schedules take it, with clusters and skip_pad_halves too
    for s in (PREFILL_TMA, PREFILL_TMA_CLUSTER, PREFILL_GATE_UP_S4, PREFILL_DOWN_PAIR_N,
              FP8_PREFILL_SPLIT_SMEM_TMA, replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2),
              replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True, quantize_out=True)):
        assert "persistent=False" in repr(replace(s, persistent=False))


def _kernels():
    fp8 = _unit_grid(FP8_PREFILL_SPLIT_SMEM_TMA)
    return [
        ("fp8 smem gate_up", lambda: grouped_gemm_fp8_smem_kernel(True), fp8),
        ("fp8 smem down", lambda: grouped_gemm_fp8_smem_kernel(False), fp8),
        ("fp8 global scales gate_up cluster", lambda: grouped_gemm_fp8_kernel(True),
         _unit_grid(replace(FP8_PREFILL_SPLIT_TMA, cluster_m=2))),
        ("bf16 gate_up tma", lambda: grouped_gemm_kernel(True), _unit_grid(PREFILL_TMA)),
        ("bf16 down tma cluster", lambda: grouped_gemm_kernel(False),
         _unit_grid(PREFILL_TMA_CLUSTER)),
        ("bf16 down pair-n", lambda: grouped_gemm_kernel(False),
         _unit_grid(PREFILL_DOWN_PAIR_N)),
    ]


KERNELS = _kernels()


@pytest.mark.parametrize("name,build,schedule", KERNELS, ids=[k[0] for k in KERNELS])
def test_unit_grid_kernels_verify_clean(name, build, schedule):
    """Zero findings, and what the persistent kernels prove proven here too."""
    report = verify.run(lower_only(build(), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"pipe.totals", "pipe.release", "pipe.deadlock", "wgmma.agree", "wgmma.k-once",
            "store.coords"} <= proven, proven


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,build,schedule", [KERNELS[i] for i in (0, 1, 2, 4)],
                         ids=[KERNELS[i][0] for i in (0, 1, 2, 4)])
def test_unit_grid_kernels_build_without_spills(name, build, schedule):
    assert_builds_without_spills(build(), schedule)


def test_layout_of_the_cases_has_units_past_the_count():
    """COUNTS' zero-row experts leave the grid more units than routing counts (CTAs that
    exit at once), so the comparison above covers them."""
    layer = M.Layer(sum(COUNTS) // 2, 256, 256, len(COUNTS), 2, PREFILL_TMA)
    counted = sum(-(-c // PREFILL_TMA.pad) for c in COUNTS)
    assert counted < layer.padded_rows // PREFILL_TMA.pad
    assert R.max_padded_rows(layer.entries, layer.experts, PREFILL_TMA.pad) == \
        layer.padded_rows
