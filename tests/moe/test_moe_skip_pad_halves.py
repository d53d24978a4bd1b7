"""MoeSchedule.skip_pad_halves without a GPU: a consumer warpgroup whose 64 rows of an m-tile
are all padding skips its wgmma, promotion and epilogue and only takes part in the ring
(argus/kernels/moe.py consume_unit), from each m-tile's routed rows written by the layout
kernels (moe_routing's tile_rows: TileRows). Checked here: TileRows against torch (both layout
kernels); the layer in the interpreter bit-identical to the schedule without the skip, fp8
(the prefill default FP8_PREFILL_SPLIT_SMEM_TMA, with rsqrt_silu, with the fused quantize) and
bf16 (PREFILL_TMA, the 256-row CTA pairs, the direct store), at routing where experts' last
tiles hold <= 64 rows (64 exactly, 1, 2), > 64 (65, 72) and zero-row experts, with the
skipped rows left unwritten (they keep a sentinel) and nothing of theirs reaching the output;
a seeded skip of a warpgroup holding one routed row is seen; the schedule's checks; the
verifier with zero findings; NVRTC builds for sm_90a without spills. The seeded skip that
also drops its stage releases is tests/mutations/moe_mutations.py's."""

from dataclasses import replace

import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.kernels import moe as MK
from argus.kernels import moe_routing as R
from argus.kernels.moe import (DECODE, PREFILL, PREFILL_DOWN_PAIR_N, PREFILL_TMA,
                               PREFILL_TMA_CLUSTER, SMALL, MoeSchedule, grouped_gemm_kernel)
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT_SMEM_TMA, FP8_PREFILL_SPLIT_TMA, FP8_SMALL,
                                   grouped_gemm_fp8_kernel, grouped_gemm_fp8_smem_kernel)
from argus.runtime import nvrtc_available

from tests.moe.test_moe_fp8_layer import _fp8_weights, _rel

from argus.ops import moe_module as M

# expert rows: last m-tiles of 72 (> 64), 64 (exactly: the second warpgroup skips), 65 (one
# routed row in the second warpgroup), a zero-row expert, 2 and 1 (<= 64)
COUNTS = [200, 64, 65, 0, 130, 1]
SENTINEL = 7.0   # what the skipped rows of y (and h) keep


def _routing(counts, k: int, seed: int):
    """ids [T, k] (distinct experts per token, tokens shuffled) with exactly `counts` entries
    per expert, and random weights."""
    T = sum(counts) // k
    flat = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
    assert max(counts) <= T       # slot j takes entries [j T, (j + 1) T): distinct experts
    ids = flat.view(k, T).t().contiguous()
    g = torch.Generator().manual_seed(seed)
    ids = ids[torch.randperm(T, generator=g)]
    return ids.int(), torch.rand(T, k, generator=g)


def _expected_rows(counts, pad: int) -> list[int]:
    return [min(pad, c - j * pad) for c in counts for j in range(-(-c // pad))]


@pytest.mark.parametrize("small", [False, True], ids=["layout", "layout_small"])
@pytest.mark.parametrize("pad", [128, 256, 16])
def test_tile_rows_are_each_tiles_routed_rows(small, pad):
    """TileRows[m] = the routed rows of m-tile m (its segment's count minus the rows of its
    earlier tiles, at most pad), 0 past the last tile; the other outputs as without it."""
    counts = COUNTS if not small else [9, 0, 16, 17, 1, 33, 0, 4]
    ids, _ = _routing(counts, 2, seed=1)
    E, N = len(counts), ids.numel()
    be, flat = R.block_experts(E), ids.view(-1)
    assert R.small_layout(N, E) or not small
    i32 = dict(dtype=torch.int32)
    MT = R.max_padded_rows(N, E, pad) // pad
    outs = {}
    for rows in (False, True):
        te, tiles = torch.full((MT, 1), -7, **i32), torch.full((1, 1), -7, **i32)
        start, pos = torch.full((1, E), -7, **i32), torch.full((N, 1), -7, **i32)
        extra = (torch.full((MT, 1), -7, **i32),) if rows else ()
        if small:
            R.layout_small_kernel(be, pad, rows).interpret(flat, flat, start, te, tiles, pos,
                                                           *extra)
        else:
            totals = torch.tensor([counts], **i32)
            R.layout_kernel(be, pad, rows).interpret(totals, start, te, tiles, *extra)
        outs[rows] = (te, tiles, start, pos, *extra)
    for a, b in zip(outs[False], outs[True]):
        assert torch.equal(a, b)
    expect = _expected_rows(counts, pad)
    got = outs[True][4].view(-1).tolist()
    assert got[:len(expect)] == expect and not any(got[len(expect):]), got
    assert outs[True][1].item() == len(expect)


def _skipped_rows(tile_rows: torch.Tensor, tiles: int, s: MoeSchedule) -> torch.Tensor:
    """The layout rows whose consumer warpgroup skips them (a bool per row)."""
    rows = s.bm // s.consumers
    skipped = torch.zeros(tile_rows.numel() * s.pad, dtype=torch.bool)
    for u in range(tiles):
        for first in range(0, s.pad, rows):
            if first >= tile_rows[u]:
                skipped[u * s.pad + first:u * s.pad + first + rows] = True
    return skipped


def _experts(x, ids, weights, layer, ws, fp8: bool, seed: int):
    """(out, exact): the layer's experts in the interpreter into workspace `ws`, and their
    float64 reference, with fp8 weights (_fp8_weights: block scales) or bf16 ones, from
    `seed`."""
    E, H, I = layer.experts, layer.hidden, layer.inter
    if fp8:
        w13, w2, s13, s2 = _fp8_weights(E, H, I, seed)
        out = M.experts(x, w13, w2, ids, weights, layer, interpret=True, ws=ws,
                        scales=(s13, s2))
        return out, M.reference_fp8(x, w13, w2, s13, s2, ids, weights)
    g = torch.Generator().manual_seed(seed + 2)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16()
    out = M.experts(x, w13, w2, ids, weights, layer, interpret=True, ws=ws)
    return out, M.reference(x, w13, w2, ids, weights)


def _layer(s, fp8: bool, seed: int = 5, counts=COUNTS, k: int = 2):
    """(out, ws) of the layer in the interpreter, y (and the bf16 h) filled with SENTINEL
    first."""
    E, H, I = len(counts), 256, 256
    ids, weights = _routing(counts, k, seed)
    T = ids.shape[0]
    x = torch.randn(T, H, generator=torch.Generator().manual_seed(seed + 1)).bfloat16()
    layer = M.Layer(T, H, I, E, k, s)
    ws = M._workspace(layer, x.device, True)
    for name in ("y", "h"):
        if name in ws:
            ws[name].fill_(SENTINEL)
    out, exact = _experts(x, ids, weights, layer, ws, fp8, seed)
    return out, ws, exact


CASES = [
    ("fp8 split_smem_tma", FP8_PREFILL_SPLIT_SMEM_TMA, True),
    ("fp8 rsqrt_silu", replace(FP8_PREFILL_SPLIT_SMEM_TMA, rsqrt_silu=True), True),
    ("fp8 fused quantize", replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True), True),
    # 2 persistent CTAs: units wrap, skipped and computed units alternate on one ring
    ("fp8 wrap", replace(FP8_PREFILL_SPLIT_SMEM_TMA, stages=2, num_sms=2, group_m=1), True),
    ("bf16 tma", PREFILL_TMA, False),
    ("bf16 tma cluster", PREFILL_TMA_CLUSTER, False),   # 256-row units: whole CTAs skip
    ("bf16 direct", PREFILL, False),
    # 2x1 pairs along N: both CTAs of a pair skip the same warpgroup of the shared token tile
    ("bf16 tma pair-n", replace(PREFILL_DOWN_PAIR_N, stages=2), False),
]


@pytest.mark.parametrize("name,schedule,fp8", CASES, ids=[c[0] for c in CASES])
def test_skip_gives_the_same_layer_and_leaves_padding_halves_unwritten(name, schedule, fp8):
    """The routed rows (the output, and y's routed rows) bit-identical with and without the
    skip; the skipped warpgroups' rows of y keep the sentinel (they were skipped: without the
    skip those rows are computed, NaN from the interpreter's NaN padding of the permuted
    input), and no padding row reaches the output."""
    _check_skip(schedule, fp8, COUNTS)


@pytest.mark.parametrize("schedule,fp8", [(PREFILL_TMA, False),
                                          (FP8_PREFILL_SPLIT_SMEM_TMA, True)],
                         ids=["bf16 tma", "fp8 split_smem_tma"])
def test_skip_with_the_one_launch_layout(schedule, fp8):
    """As above with few entries (140 over 6 experts): argus.ops.moe takes layout_small, whose
    tile_rows variant writes TileRows (tails of 30, 69, 1 and 40 rows, two zero-row experts)."""
    counts = [30, 0, 69, 1, 0, 40]
    assert R.small_layout(sum(counts), len(counts))
    _check_skip(schedule, fp8, counts)


def _check_skip(schedule, fp8: bool, counts) -> None:
    skip = replace(schedule, skip_pad_halves=True)
    out, ws, exact = _layer(skip, fp8, counts=counts)
    base, base_ws, _ = _layer(schedule, fp8, counts=counts)
    assert torch.equal(out, base)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    routed = torch.zeros(ws["y"].shape[0], dtype=torch.bool)
    routed[ws["pos"].view(-1).long()] = True
    assert torch.equal(ws["y"][routed], base_ws["y"][routed])
    skipped = _skipped_rows(ws["tile_rows"].view(-1), ws["tiles"].item(), skip)
    assert skipped.any() and not (skipped & routed).any()
    assert (ws["y"][skipped] == SENTINEL).all()
    assert not (base_ws["y"][skipped] == SENTINEL).all(dim=1).any()
    if "h" in ws:   # the gate-up's skipped rows too
        assert (ws["h"][skipped] == SENTINEL).all()


def test_the_check_sees_a_skip_of_rows_that_are_not_all_padding(monkeypatch):
    """Seeded bug: the routed-row count read one short (a warpgroup holding exactly one routed
    row, the 65-row expert's second, skips it): that token's output changes, so the layer
    leaves the schedule without the skip (the comparison above would fail)."""
    real = MK.routed_rows

    def short(TileRows, s, m, wg):
        routed, first = real(TileRows, s, m, wg)
        return routed - 1, first

    base, _, _ = _layer(FP8_PREFILL_SPLIT_SMEM_TMA, True)
    grouped_gemm_fp8_smem_kernel.cache_clear()
    monkeypatch.setattr(MK, "routed_rows", short)
    try:
        out, _, exact = _layer(replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True), True)
    finally:
        grouped_gemm_fp8_smem_kernel.cache_clear()
    assert not torch.equal(out, base)
    assert _rel(out, exact) > _rel(base, exact)


def test_schedule_and_kernel_checks():
    assert "skip_pad_halves" not in repr(FP8_PREFILL_SPLIT_SMEM_TMA)
    assert repr(replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True)).endswith(
        "skip_pad_halves=True, n_split=2, smem_scales=True)")
    with pytest.raises(ValueError, match="skip_pad_halves"):
        replace(DECODE, skip_pad_halves=True)
    with pytest.raises(ValueError, match="pingpong"):
        MoeSchedule(bm=128, bn=128, bk=64, stages=4, consumers=2, pingpong=True,
                    skip_pad_halves=True)
    with pytest.raises(ValueError, match="tile_rows"):
        grouped_gemm_kernel(True, True, tile_rows=True)
    # one warpgroup holding the unit's whole pad rows: every unit routing counts has a routed
    # row there, so the skip could never fire (only TileRows would be read)
    for one in (SMALL, FP8_SMALL, replace(PREFILL_TMA, bm=64, consumers=1),
                replace(PREFILL_TMA, bm=64, consumers=1, cluster_n=2, bn=128)):
        with pytest.raises(ValueError, match="nothing would be skipped"):
            replace(one, skip_pad_halves=True)
    replace(SMALL, cluster_m=2, skip_pad_halves=True)   # the pair's second CTA can skip
    skip = replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True)
    with pytest.raises(ag.TraceError, match="tile_rows=True"):
        lower_only(grouped_gemm_fp8_smem_kernel(True), s=skip)
    with pytest.raises(ag.TraceError, match="skip_pad_halves=False"):
        lower_only(grouped_gemm_fp8_smem_kernel(False, tile_rows=True),
                   s=FP8_PREFILL_SPLIT_SMEM_TMA)
    # the fix offers skip_pad_halves=True only to a schedule that can take it
    with pytest.raises(ag.TraceError, match="or pass the schedule with skip_pad_halves=True"):
        lower_only(grouped_gemm_kernel(True, tile_rows=True), s=PREFILL)
    for cannot, why in ((SMALL, "nothing would be skipped"),
                        (MoeSchedule(bm=128, bn=128, bk=64, stages=4, consumers=2,
                                     pingpong=True), "pingpong=False")):
        with pytest.raises(ag.TraceError, match="this schedule cannot skip") as err:
            lower_only(grouped_gemm_kernel(False, tile_rows=True), s=cannot)
        assert why in str(err.value) and "skip_pad_halves=True" not in str(err.value)
    layer = M.Layer(300, 256, 256, 4, 2, FP8_PREFILL_SPLIT_SMEM_TMA, skip)   # the down only
    assert layer.tile_rows and not M.Layer(300, 256, 256, 4, 2, PREFILL_TMA).tile_rows


def _kernels():
    fp8 = replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True)
    return [
        ("fp8 gate_up", lambda: grouped_gemm_fp8_smem_kernel(True, tile_rows=True), fp8),
        ("fp8 down", lambda: grouped_gemm_fp8_smem_kernel(False, tile_rows=True), fp8),
        ("fp8 gate_up fused quantize",
         lambda: grouped_gemm_fp8_smem_kernel(True, True, True, True),
         replace(fp8, quantize_out=True)),
        ("fp8 global scales down", lambda: grouped_gemm_fp8_kernel(False, tile_rows=True),
         replace(fp8, smem_scales=False)),
        ("bf16 gate_up tma", lambda: grouped_gemm_kernel(True, tile_rows=True),
         replace(PREFILL_TMA, skip_pad_halves=True)),
        ("bf16 down tma", lambda: grouped_gemm_kernel(False, tile_rows=True),
         replace(PREFILL_TMA, skip_pad_halves=True)),
        ("bf16 gate_up tma cluster", lambda: grouped_gemm_kernel(True, tile_rows=True),
         replace(PREFILL_TMA_CLUSTER, skip_pad_halves=True)),
    ]


KERNELS = _kernels()


@pytest.mark.parametrize("name,build,schedule", KERNELS, ids=[k[0] for k in KERNELS])
def test_skip_kernels_verify_clean(name, build, schedule):
    """Zero findings, and the pipeline's step totals proven: the skipping warpgroup's
    guard is the working one's negation, so every consumer warpgroup consumes each unit's
    k_steps either way."""
    report = verify.run(lower_only(build(), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"pipe.totals", "pipe.release", "pipe.deadlock", "wgmma.agree", "wgmma.k-once",
            "store.coords"} <= proven, proven


@pytest.mark.parametrize("name", ["layout", "layout_small"])
def test_tile_rows_layouts_verify_clean(name):
    kernel = R.layout_kernel(256, 128, True) if name == "layout" else \
        R.layout_small_kernel(256, 8, True)
    report = verify.run(lower_only(kernel))
    assert not report.errors, "\n".join(str(d) for d in report.errors)


# the epilogues' barrier forms on top: 2x1 pairs along N (both CTAs skip the same warpgroup)
BARRIER_KERNELS = KERNELS + [
    ("bf16 down tma pair-n", lambda: grouped_gemm_kernel(False, tile_rows=True),
     replace(PREFILL_DOWN_PAIR_N, skip_pad_halves=True)),
    ("fp8 gate_up global scales tma quantize",
     lambda: grouped_gemm_fp8_kernel(True, True, False, True),
     replace(FP8_PREFILL_SPLIT_TMA, quantize_out=True, skip_pad_halves=True)),
]


@pytest.mark.parametrize("name,build,schedule", BARRIER_KERNELS,
                         ids=[k[0] for k in BARRIER_KERNELS])
def test_skipping_warpgroup_misses_no_shared_barrier(name, build, schedule):
    """The skipping warpgroup never reaches its epilogue, so every barrier the consumer role
    syncs on must be its own warpgroup's (codegen's named barrier 1 + wg over 128 threads,
    before a TMA store reads the staging): a barrier shared by both consumer warpgroups (a
    CTA-wide __syncthreads, a named barrier over 256 threads, a cluster sync inside the unit
    loop) would hang the working one on the GPU, which neither the interpreter nor the
    verifier's pipe rules would show. The cluster sync at the kernel's end is every thread's."""
    import re

    text = codegen.render(lower_only(build(), s=schedule)).text
    consumer = text[text.index("// role consumer"):]
    exit_sync = "ag::cluster_sync();\n}"
    if schedule.cluster_m * schedule.cluster_n > 1:
        assert consumer.rstrip().endswith(exit_sync), consumer[-200:]
        consumer = consumer.rstrip()[:-len(exit_sync)]
    barriers = re.findall(r"named_barrier_\w+\([^;]*\)|__syncthreads\(\)|cluster_\w*sync\w*\("
                          r"|bar\.sync|barrier\.cluster", consumer)
    assert set(barriers) <= {"named_barrier_sync(1 + threadIdx.x / 128, 128)"}, barriers


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,build,schedule", KERNELS[:2] + KERNELS[4:6],
                         ids=[k[0] for k in KERNELS[:2] + KERNELS[4:6]])
def test_skip_kernels_build_without_spills(name, build, schedule):
    """sm_90a, no spills (the epilogue's barriers:
    test_skipping_warpgroup_misses_no_shared_barrier)."""
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(build(), s=schedule))
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    assert "TileRows" in source.text
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
