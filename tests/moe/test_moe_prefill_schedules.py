"""The prefill grouped GEMMs' schedule alternatives before they spend device time (issue 16's
Mixtral T = 16384 bar, docs/perf/moe.md 2026-12-03): the per-GEMM 4-stage forms
(PREFILL_GATE_UP_S4, PREFILL_DOWN_S4) and the fast SiLU match float64 in the interpreter as a
(gate-up, down) pair and verify clean; CTA pairs along N (cluster_n=2) match float64 and verify
clean (k-once included: the multicast A tile's `expert` is no k coordinate, check_wgmma's
_reduction_fields); every pair that scripts/gpu_moe_bench.py
--prefill-variants times compiles for sm_90a within shared memory and without spills; the
bench's bookkeeping (padded rows, kernel groups, table) is checked on made-up numbers."""

from __future__ import annotations

import collections
import importlib.util
import re
from dataclasses import replace

import numpy as np
import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.errors import CompileError
from argus.kernels.moe import (PREFILL_DOWN_PAIR_N, PREFILL_DOWN_S4, PREFILL_GATE_UP_PAIR_N,
                               PREFILL_GATE_UP_S4, PREFILL_TMA_CLUSTER, MoeSchedule,
                               grouped_gemm_kernel, silu_mul)
from argus.runtime import nvrtc_available
from tests.loading import load_script

bench = load_script("gpu_moe_bench")
needs_nvrtc_early = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")

from argus.ops import moe_module as M  # noqa: E402
FAST = replace(PREFILL_GATE_UP_S4, fast_silu=True)
# the rule's gate-up with the branch-free SiLU (MoeSchedule.rsqrt_silu), with the SFU's
# exponential (fast_silu) and with expf
RSQRT_FAST = replace(PREFILL_TMA_CLUSTER, fast_silu=True, rsqrt_silu=True)
RSQRT = replace(PREFILL_TMA_CLUSTER, rsqrt_silu=True)


def _weights(E, H, I, seed):
    g = torch.Generator().manual_seed(seed)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16()
    return w13, w2


@pytest.mark.parametrize("gate_up", [PREFILL_GATE_UP_S4, FAST, RSQRT_FAST, RSQRT],
                         ids=["exact", "fast_silu", "fast_rsqrt_silu", "rsqrt_silu"])
def test_prefill_pair_matches_float64(gate_up):
    """The 4-stage gate-up (and its fast SiLU) with the down's 4 stages and 128-column store
    rounds, as one layer: H = 256 makes the down store two rounds per tile, 140 tokens over 4
    experts make several 256-row units per expert and a partial last one."""
    T, E, k, H, I = 140, 4, 2, 256, 128
    w13, w2 = _weights(E, H, I, seed=3)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(T, H, generator=g).bfloat16() * 4   # gates of a few units: both tails
    ids = torch.rand(T, E, generator=g).topk(k, dim=1).indices.int()
    weights = torch.rand(T, k, generator=g)
    layer = M.Layer(T, H, I, E, k, gate_up, PREFILL_DOWN_S4)
    out = M.experts(x, w13, w2, ids, weights, layer, interpret=True)
    exact = M.reference(x, w13, w2, ids, weights)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    rel = ((out.double() - exact).norm() / exact.norm()).item()
    assert rel < 1e-2, rel


def test_pairs_along_n_match_float64():
    """cluster_n=2: CTA pairs on two n-tiles of one m-tile, the token tile multicast, experts
    padded to 128 rows. I = 384 gives the gate-up 3 n-tiles of 128 columns: the last pair's
    second tile lies wholly past I (zeros read, nothing stored); the down's H = 256 is one
    256-column tile, so its pair's second tile lies past H too."""
    T, E, k, H, I = 140, 4, 2, 256, 384
    w13, w2 = _weights(E, H, I, seed=5)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = torch.rand(T, E, generator=g).topk(k, dim=1).indices.int()
    weights = torch.rand(T, k, generator=g)
    assert (PREFILL_GATE_UP_PAIR_N.pad, PREFILL_DOWN_PAIR_N.pad) == (128, 128)
    layer = M.Layer(T, H, I, E, k, PREFILL_GATE_UP_PAIR_N, PREFILL_DOWN_PAIR_N)
    scratch = {}
    out = M.experts(x, w13, w2, ids, weights, layer, interpret=True, scratch=scratch)
    exact = M.reference(x, w13, w2, ids, weights)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    rel = ((out.double() - exact).norm() / exact.norm()).item()
    assert rel < 1e-2, rel
    counts = torch.bincount(ids.view(-1).long(), minlength=E)
    assert scratch["tiles"].item() == int(((counts + 127) // 128).sum())


@pytest.mark.parametrize("kwargs,words", [
    (dict(cluster_n=2, cluster_m=2), "cluster_n=2"),
    (dict(cluster_n=3), "cluster_n=3"),
    (dict(cluster_n=2, swap_ab=True, bm=64, consumers=1, bn=8), "cluster_n=2"),
])
def test_pairs_along_n_refuse_what_they_cannot_run(kwargs, words):
    base = dict(bm=128, bn=256, bk=64, stages=4, consumers=2, epilogue="tma")
    with pytest.raises(ValueError, match=words):
        MoeSchedule(**{**base, **kwargs})


@pytest.mark.parametrize("gated,schedule", [
    (True, PREFILL_GATE_UP_PAIR_N), (False, PREFILL_DOWN_PAIR_N),
    # the bench's pair-n-3st: the rule's 3-stage ring with pairs along N
    (True, replace(PREFILL_TMA_CLUSTER, cluster_m=1, cluster_n=2, group_m=16, fast_silu=True,
                   rsqrt_silu=True)),
    (False, replace(PREFILL_TMA_CLUSTER, cluster_m=1, cluster_n=2))],
    ids=["gate_up", "down", "gate_up_3st_rsqrt_silu", "down_3st"])
def test_pairs_along_n_verify_clean(gated, schedule):
    # the multicast A tile's `expert` term mentions k without depending on it: no reduction
    # coordinate (check_wgmma._reduction_fields), so k-once is proven for `k` alone
    report = verify.run(lower_only(grouped_gemm_kernel(gated), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    # wgmma.agree: no tile reads another expert's weights
    assert {"wgmma.agree", "store.coords", "wgmma.k-once"} <= proven, proven


@pytest.mark.parametrize("gated,schedule", [(True, PREFILL_GATE_UP_S4), (False, PREFILL_DOWN_S4),
                                            (True, FAST), (True, RSQRT_FAST)],
                         ids=["gate_up_s4", "down_s4_c128", "gate_up_fast_silu",
                              "gate_up_fast_rsqrt_silu"])
def test_prefill_schedules_verify_clean(gated, schedule):
    report = verify.run(lower_only(grouped_gemm_kernel(gated), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"wgmma.agree", "store.coords", "wgmma.k-once"} <= proven, proven


def test_fast_silu_renders_the_sfu_exponential():
    """fast_silu changes the gated epilogue only: ex2.approx instead of expf; the default
    keeps expf (its generated CUDA is what tests/golden hashes)."""
    fast = codegen.render(lower_only(grouped_gemm_kernel(True), s=FAST)).text
    exact = codegen.render(lower_only(grouped_gemm_kernel(True), s=PREFILL_GATE_UP_S4)).text
    assert "ag::exp2_approx" in fast and "expf(" not in fast
    assert "expf(" in exact and "ag::exp2_approx" not in exact


@ag.kernel(threads=128)
def _silu_rows(G: ag.Tensor["M", "N", ag.f32], U: ag.Tensor["M", "N", ag.f32],
               Y: ag.Tensor["M", "N", ag.f32], fast: bool = False, rsqrt: bool = False):
    """silu_mul over one [4, 64] block: the gated epilogue's formula alone."""
    ag.grid(1)
    g, u = ag.load(G, (0, 0), (4, 64)), ag.load(U, (0, 0), (4, 64))
    ag.store(Y, (0, 0), silu_mul(g, u, fast, rsqrt))


@pytest.mark.parametrize("fast,rsqrt", [(False, False), (True, False), (True, True),
                                        (False, True)])
def test_silu_forms_match_float64_over_the_whole_range(fast, rsqrt):
    """Every SiLU form of the gated epilogue against float64 silu(g) * u, gates from -1e4 to
    1e4 (both exponent tails: e^-g overflows to inf below about -88, where d = inf must give
    -0, not NaN) and ordinary ones: within 1e-5 relative (h is rounded to bf16, 2^-9, after
    it), and a gate of NaN stays NaN."""
    tails = [-1e4, -300.0, -200.0, -150.0, -100.0, -90.0, -89.0, -88.7, -87.5, -87.0, -86.0,
             -80.0, -60.0, -40.0, -20.0, 20.0, 40.0, 60.0, 80.0, 88.0, 90.0, 100.0, 1e4, 0.0,
             -0.0, 1e-30, -1e-30]
    g = np.concatenate([tails, np.linspace(-12.0, 12.0, 256 - len(tails))]).astype(np.float32)
    gate = g.reshape(4, 64)
    up = np.random.default_rng(0).uniform(-3, 3, (4, 64)).astype(np.float32)
    y = np.zeros_like(gate)
    _silu_rows.interpret(gate, up, y, fast=fast, rsqrt=rsqrt)
    g64, u64 = gate.astype(np.float64), up.astype(np.float64)
    with np.errstate(over="ignore"):
        exact = g64 / (1.0 + np.exp(-g64)) * u64
    assert not np.isnan(y).any(), "an exponent tail gave NaN"
    scale = np.maximum(np.abs(exact), 1e-30)
    rel = np.abs(y - exact) / scale
    worst = np.unravel_index(int(np.argmax(rel)), rel.shape)
    assert rel.max() < 1e-5, (gate[worst], y[worst], exact[worst])
    nan = np.full((4, 64), np.nan, np.float32)
    _silu_rows.interpret(nan, up, y, fast=fast, rsqrt=rsqrt)
    assert np.isnan(y).all()


@needs_nvrtc_early
@pytest.mark.parametrize("schedule,calls,mufu", [(replace(PREFILL_TMA_CLUSTER, rsqrt_silu=False),
                                                  64, None),
                                                 (PREFILL_TMA_CLUSTER, 0, None),
                                                 (RSQRT_FAST, 0, 128)],
                         ids=["divide", "rule", "fast_rsqrt_silu"])
def test_rsqrt_silu_epilogue_is_branch_free_in_sass(schedule, calls, mufu):
    """Why rsqrt_silu (the rule's form since it became PREFILL_TMA_CLUSTER's): the gated
    epilogue without it divides with IEEE 1.0f / d, which ptxas
    compiles to MUFU.RCP plus a range check branching to a slow-path CALL per element (64 per
    thread and unit, each inside its own BSSY/BSYNC, so the elements' MUFU latencies are paid
    one after another while no wgmma issues); with rsqrt_silu and fast_silu the epilogue has
    no CALL and exactly two MUFU per element (EX2, RSQ: 64 gate elements a thread). Needs a
    disassembler (nvdisasm / cuobjdump; NVDISASM=path)."""
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    source = codegen.render(lower_only(grouped_gemm_kernel(True), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert not binary.resource(source.name).spills
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no SASS disassembler (nvdisasm / cuobjdump) installed")
    ops = re.findall(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?"
                     r"([A-Z][A-Z0-9_]*(?:\.[A-Z0-9]+)?)", sass, re.MULTILINE)
    assert ops.count("CALL.REL") == calls, collections.Counter(ops).most_common(12)
    if mufu is not None:
        assert ops.count("MUFU.EX2") == ops.count("MUFU.RSQ") == mufu // 2
        # (the other MUFU are MUFU.RCP of the raster's integer divisions, I2F.RP before each)
        assert ops.count("MUFU.RCP") == ops.count("I2F.RP")
        assert ops.count("BSSY") < 10, "per-element branches are back"


def test_bench_prefill_variants_are_pairs_on_one_layout():
    """Every --prefill-variants pair reads one layout (equal padding) and is a legal
    (gate-up, down) schedule pair for argus.ops.moe at Mixtral T = 16384."""
    variants = bench.prefill_variants()
    assert {"gate-up-4st", "down-4st-c128", "both-4st", "both-4st-fast-silu",
            "rule-fast-rsqrt-silu"} <= set(variants)
    gate_up, down = variants["rule-fast-rsqrt-silu"]
    assert (gate_up, down) == (replace(PREFILL_TMA_CLUSTER, fast_silu=True, rsqrt_silu=True),
                               PREFILL_TMA_CLUSTER)
    for name, (gate_up, down) in variants.items():
        assert gate_up.pad == down.pad, name
        layer = M._layer(16384, 4096, 14336, 8, 2, (gate_up, down))
        assert (layer.schedule, layer.down) == (gate_up, down), name
    assert M._layer(16384, 4096, 14336, 8, 2, None).schedule == PREFILL_TMA_CLUSTER


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _compile(gated: bool, schedule):
    from argus.runtime.compile import compile_cuda

    # a skip_pad_halves schedule (the bench's rule-skip / tma-skip) takes routing's TileRows
    kernel = grouped_gemm_kernel(gated, tile_rows=schedule.skip_pad_halves)
    source = codegen.render(lower_only(kernel, s=schedule))
    return compile_cuda(source.text, [source.name], use_cache=False).resource(source.name)


@needs_nvrtc
def test_bench_prefill_variants_build_for_sm90a():
    """Each schedule the bench times compiles within a CTA's shared memory, without spills."""
    seen = set()
    for gate_up, down in bench.prefill_variants().values():
        for gated, schedule in ((True, gate_up), (False, down)):
            if (gated, schedule) in seen:
                continue
            seen.add((gated, schedule))
            res = _compile(gated, schedule)
            assert not res.spills, (schedule, res.summary())
    assert len(seen) >= 10


@needs_nvrtc
def test_down_needs_store_rounds_for_a_fourth_stage():
    """Why PREFILL_DOWN_S4 stores in 128-column rounds: four 48 KB stages and the down's
    256-column staging (64 KB) exceed a CTA's shared memory; the gate-up's 128-column staging
    fits beside four stages as it is."""
    with pytest.raises(CompileError, match="shared memory"):
        _compile(False, replace(PREFILL_DOWN_S4, store_cols=0))
    assert not _compile(True, PREFILL_GATE_UP_S4).spills


def test_bench_bookkeeping():
    """padded_rows pads each expert's count; split_gemm_time groups the profiler's kernels;
    prefill_table renders a row (made-up numbers: the arithmetic, not a measurement); layer_ms
    warms up and times (the rounds around it: tests/moe/test_moe_bench_rounds.py)."""
    ids = torch.tensor([[0, 1], [0, 2], [0, 1]])   # counts 3, 2, 1, 0
    assert bench.padded_rows(ids, 4, 256) == 3 * 256
    assert bench.padded_rows(ids, 4, 2) == 4 + 2 + 2
    per = {"argus_moe_gate_up(...)": 100.0, "argus_moe_down(...)": 50.0, "argus_moe_permute": 7.0,
           "argus_moe_combine": 3.0}
    assert bench.split_gemm_time(per) == (100.0, 50.0, 10.0)
    entry = dict(ms=1.0, tflops=500.0, rel_err=3e-3, ok=True, gate_up_us=100.0, down_us=50.0,
                 other_us=10.0, gate_up_tflops=600.0, gate_up_tflops_padded=620.0,
                 down_tflops=590.0, down_tflops_padded=610.0)
    row = dict(model="mixtral", T=16384, k=2, prefill={
        "rule": entry, "both-4st": dict(error="LaunchError: x"),
        "dense": {"gate-up cublas": dict(ms=2.0, tflops=680.0), "down cublas": dict(error="x")}})
    text = bench.prefill_table([row])
    assert ("| rule | 1.000 | 500 | 100 (600 / 620) | 50 (590 / 610) | 10 | 3.0e-03 "
            "| 0.160 / - |") in text
    row["prefill"]["rule"]["hot_kernels_ms"] = 0.175
    assert "| 10 | 3.0e-03 | 0.160 / 0.175 |" in bench.prefill_table([row])
    assert "| both-4st | fail |" in text
    assert "gate-up cublas 2.000 ms 680 TFLOP/s; down cublas failed" in text
    calls = []
    assert bench.layer_ms(lambda: calls.append(1), 3) >= 0
    assert calls == [1] * 6   # 3 warm-up and 3 timed calls (measure's CPU clock here)


def test_bench_prefill_run_plumbing(monkeypatch):
    """run_prefill_variants' control flow on the CPU with the device parts faked (the layer,
    the profiler, the dense references): every variant gets its error, breakdown and time, a
    variant that raises is reported and the rest still run, and the table renders them."""
    E, k, H, I, routing = bench.MODELS["mixtral"]
    T = 8
    exact = torch.ones(T, H, dtype=torch.float64)
    ids = torch.tensor([[0, 1]] * T)
    seen = []

    def fake_layer(x, w13, w2, logits, k, routing, bias, schedule=None, out=None):
        seen.append(schedule)
        if schedule is not None and schedule[0].cluster_n == 2:
            raise RuntimeError("device fault (faked)")
        return torch.ones(T, H)

    monkeypatch.setattr(bench, "ours_layer", fake_layer)
    monkeypatch.setattr(bench, "kernel_breakdown", lambda fn, reps=10: (fn(), {
        "argus_moe_gate_up": 1000.0, "argus_moe_down": 500.0, "argus_moe_permute": 50.0})[1])
    monkeypatch.setattr(bench, "dense_references",
                        lambda *a: {"gate-up cublas": dict(ms=1.0, tflops=680.0)})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    row = dict(model="mixtral", T=T, k=k)
    bench.run_prefill_variants("mixtral", T, None, None, None, None, k, routing, None, ids,
                               exact, 3, True, row)
    res = row["prefill"]
    names = ["rule", *bench.prefill_variants()]
    # and the rule timed again behind a GPU sleep (its host work hidden), with the rule's
    # breakdown and no second hot profile
    assert set(res) == {"dense", *names, bench.HIDDEN_HOST}
    hidden = res.pop(bench.HIDDEN_HOST)
    assert hidden["ms"] >= 0 and hidden["gate_up_us"] == res["rule"]["gate_up_us"]
    assert "hot_kernels_ms" not in hidden
    assert None in seen   # the rule's own schedule
    for name in names:
        if "pair-n" in name:
            assert "device fault" in res[name]["error"]
            continue
        d = res[name]
        assert d["ok"] and d["rel_err"] == 0.0 and d["ms"] >= 0
        assert (d["gate_up_us"], d["down_us"], d["other_us"]) == (1000.0, 500.0, 50.0)
        # the second (hot) breakdown after the timing: the same faked kernels
        assert d["hot_kernels_ms"] == pytest.approx(1.55)
        # 2 * N * H * 2I FLOPs in 1 ms
        assert d["gate_up_tflops"] == pytest.approx(2 * T * k * H * 2 * I / 1e-3 / 1e12)
        # every entry of ids is expert 0 or 1: T rows each, padded to the schedule's pad (the
        # rule's at T = 8 is the decode token tile: 2 * T * k / E = 4 rows -> 8)
        pad = {"rule": 8, "both-4st-nocluster": 128, "tma-skip": 128}.get(name, 256)
        assert d["padded_rows"] == 2 * pad, (name, d["padded_rows"])
    text = bench.prefill_table([row])
    assert text.count("pair-n") == sum("pair-n" in n for n in names) and "| rule | " in text
