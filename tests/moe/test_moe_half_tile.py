"""MoeFp8Schedule.half_tile_last without a GPU: in an expert's last m-tile with <= 64 routed
rows both consumer warpgroups take rows [0, 64), warpgroup j column half j of the tile
(argus/kernels/moe_fp8.py `_half_tile_mma` / `_store_half_tile`, moe.consume_unit(half=...)).
Checked here: the layer in the interpreter bit-identical to the schedule without it (the
prefill default FP8_PREFILL_SPLIT_SMEM_TMA, the direct store, a wrapping persistent walk, one
GEMM only) at routing where experts' last tiles hold 64, 1, 2 (half tiles), 65, 72 (full) and
zero rows, with rows [64, 128) of every half tile left unwritten in h and y (the sentinel);
a seeded test that is one row off is seen; the schedule's checks; the verifier with zero
findings; NVRTC sm_90a builds without spills."""

from dataclasses import replace

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import moe as MK
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT, FP8_PREFILL_SPLIT_SMEM,
                                   FP8_PREFILL_SPLIT_SMEM_TMA, grouped_gemm_fp8_smem_kernel)
from argus.ops import moe_module as M
from argus.runtime import nvrtc_available

from tests.moe.test_moe_fp8_layer import _rel
from tests.moe.test_moe_skip_pad_halves import COUNTS, SENTINEL, _experts, _routing

HALF = replace(FP8_PREFILL_SPLIT_SMEM_TMA, half_tile_last=True)


def _half_rows(tile_rows: torch.Tensor, tiles: int, pad: int = 128) -> torch.Tensor:
    """The layout rows [64, 128) of every m-tile with <= 64 routed rows (a bool per row):
    a half tile's padding rows, never written."""
    rows = torch.zeros(tile_rows.numel() * pad, dtype=torch.bool)
    for u in range(tiles):
        if tile_rows[u] <= pad // 2:
            rows[u * pad + pad // 2:(u + 1) * pad] = True
    return rows


def _layer(s, down=None, seed: int = 5, counts=COUNTS, k: int = 2):
    """(out, ws, exact) of the fp8 layer in the interpreter with gate-up schedule s and down
    schedule `down` (default s), h and y filled with SENTINEL first
    (test_moe_skip_pad_halves._layer's, with the down's own schedule)."""
    E, H, I = len(counts), 256, 256
    ids, weights = _routing(counts, k, seed)
    T = ids.shape[0]
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(seed + 1)).bfloat16()
    layer = M.Layer(T, H, I, E, k, s, down or s)
    ws = M._workspace(layer, x.device, True)
    for name in ("y", "h"):
        ws[name].fill_(SENTINEL)
    out, exact = _experts(x, ids, weights, layer, ws, True, seed)
    return out, ws, exact


def _check_half(schedule, down=None, counts=COUNTS) -> None:
    """The layer with `schedule` (and `down`, default the same) against the same schedules
    without half_tile_last: the output and y's routed rows bit for bit, the half tiles'
    padding rows keep the sentinel in the GEMMs that ran half tiles."""
    down = down or schedule
    base = (replace(schedule, half_tile_last=False), replace(down, half_tile_last=False))
    out, ws, exact = _layer(schedule, down, counts=counts)
    ref, base_ws, _ = _layer(*base, counts=counts)
    assert torch.equal(out, ref)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    routed = torch.zeros(ws["y"].shape[0], dtype=torch.bool)
    routed[ws["pos"].view(-1).long()] = True
    assert torch.equal(ws["y"][routed], base_ws["y"][routed])
    assert torch.equal(ws["h"][routed], base_ws["h"][routed])
    pads = _half_rows(ws["tile_rows"].view(-1), ws["tiles"].item())
    assert pads.any() and not (pads & routed).any()
    for name, s in (("h", schedule), ("y", down)):
        unwritten = (ws[name][pads] == SENTINEL).all()
        assert unwritten == s.half_tile_last, name
        # without the half tile those rows are computed (NaN padding in the interpreter)
        assert not (base_ws[name][pads] == SENTINEL).all(dim=1).any(), name


CASES = [
    ("split_smem_tma", HALF, None),
    ("direct store", replace(FP8_PREFILL_SPLIT_SMEM, half_tile_last=True), None),
    ("rsqrt fast silu", replace(HALF, rsqrt_silu=True, fast_silu=True), None),
    # 2 persistent CTAs: units wrap, half and full units alternate on one ring
    ("wrap", replace(HALF, stages=2, num_sms=2, group_m=1), None),
    ("down only", FP8_PREFILL_SPLIT_SMEM_TMA, HALF),
    ("gate-up only", HALF, FP8_PREFILL_SPLIT_SMEM_TMA),
    # the walks that keep CTAs sharing a weight tile together though half units end early
    # (h310): the dynamic walk (also wrapping on 2 CTAs) and the grid of one CTA a unit
    ("dynamic walk", replace(HALF, scheduler="dynamic"), None),
    ("dynamic walk wrap", replace(HALF, scheduler="dynamic", stages=2, num_sms=2, group_m=1),
     None),
    ("grid", replace(HALF, persistent=False), None),
]


@pytest.mark.parametrize("name,schedule,down", CASES, ids=[c[0] for c in CASES])
def test_half_tile_gives_the_same_layer(name, schedule, down):
    _check_half(schedule, down)


def test_half_tile_with_the_one_launch_layout():
    """Few entries (140 over 6 experts): layout_small writes TileRows (tails of 30, 69, 1 and
    40 rows, two zero-row experts)."""
    _check_half(HALF, counts=[30, 0, 69, 1, 0, 40])


def test_the_check_sees_a_half_tile_of_a_tile_with_65_rows(monkeypatch):
    """Seeded bug: the routed-row count read one short, so the 65-row expert's last tile runs
    as a half tile and drops its 65th row: the layer leaves the one without half tiles."""
    real = MK.routed_rows

    def short(TileRows, s, m, wg):
        routed, first = real(TileRows, s, m, wg)
        return routed - 1, first

    base, _, _ = _layer(FP8_PREFILL_SPLIT_SMEM_TMA)
    grouped_gemm_fp8_smem_kernel.cache_clear()
    monkeypatch.setattr(MK, "routed_rows", short)
    try:
        out, _, exact = _layer(HALF)
    finally:
        grouped_gemm_fp8_smem_kernel.cache_clear()
    assert not torch.equal(out, base)
    assert _rel(out, exact) > _rel(base, exact)


def test_schedule_and_kernel_checks():
    assert "half_tile_last" not in repr(FP8_PREFILL_SPLIT_SMEM_TMA)
    assert repr(HALF).endswith("n_split=2, smem_scales=True, half_tile_last=True)")
    assert HALF.reads_tile_rows and not FP8_PREFILL_SPLIT_SMEM_TMA.reads_tile_rows
    for bad, why in ((FP8_PREFILL_SPLIT, "smem_scales=True"),
                     (replace(FP8_PREFILL_SPLIT_SMEM, quantize_out=True), "quantize_out=False"),
                     (replace(FP8_PREFILL_SPLIT_SMEM, skip_pad_halves=True),
                      "skip_pad_halves=False"),
                     (replace(FP8_PREFILL_SPLIT_SMEM, pair_multicast=True),
                      "pair_multicast=False")):
        with pytest.raises(ValueError, match="half_tile_last") as err:
            replace(bad, half_tile_last=True)
        assert why in str(err.value)
    # the dynamic walk takes it (h310: the static walk's CTAs drift apart on half units)
    assert replace(HALF, scheduler="dynamic").half_tile_last
    with pytest.raises(ag.TraceError, match="half_tile_last reads"):
        lower_only(grouped_gemm_fp8_smem_kernel(False), s=HALF)
    layer = M.Layer(300, 256, 256, 4, 2, FP8_PREFILL_SPLIT_SMEM_TMA, HALF)   # the down only
    assert layer.tile_rows


def _kernels():
    return [
        ("gate_up tma", lambda: grouped_gemm_fp8_smem_kernel(True, tile_rows=True), HALF),
        ("down tma", lambda: grouped_gemm_fp8_smem_kernel(False, tile_rows=True), HALF),
        ("gate_up direct", lambda: grouped_gemm_fp8_smem_kernel(True, tile_rows=True),
         replace(FP8_PREFILL_SPLIT_SMEM, half_tile_last=True)),
        ("down direct", lambda: grouped_gemm_fp8_smem_kernel(False, tile_rows=True),
         replace(FP8_PREFILL_SPLIT_SMEM, half_tile_last=True)),
        ("gate_up tma dynamic",
         lambda: grouped_gemm_fp8_smem_kernel(True, tile_rows=True, dynamic=True),
         replace(HALF, scheduler="dynamic")),
        ("down tma dynamic",
         lambda: grouped_gemm_fp8_smem_kernel(False, tile_rows=True, dynamic=True),
         replace(HALF, scheduler="dynamic")),
    ]


KERNELS = _kernels()


@pytest.mark.parametrize("name,build,schedule", KERNELS, ids=[k[0] for k in KERNELS])
def test_half_tile_kernels_verify_clean(name, build, schedule):
    """Zero findings, the pipeline's step totals proven (the half branch consumes the unit's
    k_steps as the full one does), k-once and the store coordinates proven."""
    report = verify.run(lower_only(build(), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"pipe.totals", "pipe.release", "pipe.deadlock", "wgmma.agree", "wgmma.k-once",
            "store.coords"} <= proven, proven


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,build,schedule", KERNELS[:2] + KERNELS[4:],
                         ids=[k[0] for k in KERNELS[:2] + KERNELS[4:]])
def test_half_tile_kernels_build_without_spills(name, build, schedule):
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(build(), s=schedule))
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


def test_the_gpu_step_times_each_half_walk_against_the_same_walk_without_it():
    """scripts/gpu_round2.sh half57 (h310): the half tile lost 31% on the static walk to the
    drift of its CTAs (docs/perf/moe.md); the step that decides it times every half variant
    beside the same schedule without half_tile_last, the dynamic walk and the grid among them."""
    import re
    from pathlib import Path

    from tests.loading import load_script

    variants = load_script("gpu_moe_bench").fp8_variants()
    text = (Path(__file__).resolve().parents[2] / "scripts" / "gpu_round2.sh").read_text()
    step = re.search(r"\n    half57\)(.*?);;", text, re.S)
    assert step, "gpu_round2.sh has no step half57"
    names = re.search(r"--fp8-only (.*?)--out", step.group(1), re.S).group(1)
    names = [n for n in names.split() if n != "\\"]
    halves = [variants[n] for n in names if variants[n].half_tile_last]
    assert {s.scheduler for s in halves} >= {"static", "dynamic"}
    assert any(not s.persistent for s in halves)
    others = [variants[n] for n in names if not variants[n].half_tile_last]
    for s in halves:
        assert replace(s, half_tile_last=False) in others, s
