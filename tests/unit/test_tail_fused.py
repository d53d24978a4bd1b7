"""The fused tail finish (GemmSchedule(tail_splits=S, tail_finish="fused")): the persistent
walk's last, partial wave runs in K slices, and the slice that arrives last at a tail tile (a
self-resetting arrival counter per tile and consumer warpgroup) adds the slices' fp32 partials
in slice order and stores the tile, in the GEMM itself: no second kernel.

The partial-sum invariant (each element of C sums its K range exactly once: every slice once,
no slice twice, after every slice stored): in the interpreter against float64 on shapes with a
partial last wave (a few CTAs), bitwise equal to the two-kernel form (same order of the same
sums), the counters left at zero and a second call on them right again; seeded bugs (a slice
skipped, a slice added twice, the ticket threshold one too low or one too high) caught by the
interpreter (NaN partials not yet stored, or a wrong sum) and, for the ticket no arrival draws
and the one too low (a merge before the last slice stored), by the verifier. The verifier proves the tickets (exactly S arrivals at each tail tile's
counter, in the persistent walk's tail loop), C stored once, and the split's invariants of the
two-kernel form; a counter shared by two tiles or counting S + 1 arrivals is caught. NVRTC
compiles it for sm_90a without spills, with the acq_rel fences and the atom.inc counter.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.kernels import gemm as gemm_module
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.kernels.split_k_sum import tail_sum_kernel
from argus.ops import gemm_model, split_k, tune
from argus.ops.schedules import Problem, candidates, kernel_for, tail_split_candidates
from argus.runtime import nvrtc_available
from tests.unit.ops_host import assert_replays_take_their_streams, interpret_compiles

_TORCH = {ag.bf16: torch.bfloat16, ag.f32: torch.float32}


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16()


def _operands(layout, batch, m, n, k, seed=0):
    lead = (batch,) if batch > 1 else ()
    a, w = _rand(*lead, m, k, seed=m + k + seed), _rand(*lead, n, k, seed=n + seed)
    b = w if layout == "nk" else w.transpose(-1, -2).contiguous()
    return a, w, b


def _fused(problem: Problem, s: GemmSchedule, a, b, c, count=None, kernel=None):
    """What TailSplitMatmul launches with tail_finish="fused", in the interpreter: the GEMM
    alone, its workspace NaN-filled (a partial read before it is stored shows). Returns the
    counters."""
    fn, run = kernel_for(problem, s)
    tiles = split_k.tail_tiles(problem, s)
    a_s, b_s = split_k.tail_slices(a, b, problem.b_layout, s.tail_splits)
    partials = torch.full((s.tail_splits, tiles, s.bm, s.bn), float("nan"))
    if count is None:
        count = torch.zeros(tiles, s.consumers, dtype=torch.int32)
    (kernel or fn).interpret(a, b, c, a_s, b_s, partials, count, s=run)
    return count


def _two_kernels(problem: Problem, s: GemmSchedule, a, b, c):
    """The same schedule with the second kernel's finish (tests/unit/test_tail_splits.py)."""
    s = dataclasses.replace(s, tail_finish="kernel")
    fn, run = kernel_for(problem, s)
    tiles = split_k.tail_tiles(problem, s)
    a_s, b_s = split_k.tail_slices(a, b, problem.b_layout, s.tail_splits)
    partials = torch.full((s.tail_splits, tiles, s.bm, s.bn), float("nan"))
    fn.interpret(a, b, c, a_s, b_s, partials, s=run)
    out = ag.f32 if c.dtype == torch.float32 else ag.bf16
    tail_sum_kernel(out, s.tail_splits, problem.batch > 1).interpret(
        partials, c, bm=s.bm, bn=s.bn, cluster=s.cluster_m, group_m=s.group_m,
        num_sms=s.num_sms)


def _fs(**kw) -> GemmSchedule:
    return GemmSchedule(tail_finish="fused", **kw)


CASES = [
    # (layout, batch, m, n, k, out, schedule): num_sms small enough for a partial last wave
    # 2 x 5 tiles on 4 CTAs: 2 full waves, 2 tail tiles in 2 slices; ragged M, N and K
    ("nk", 1, 200, 300, 208, ag.bf16, _fs(bm=128, bn=64, stages=2, num_sms=4, tail_splits=2)),
    # MN-major B, 3 slices of 80 (a CTA takes two slices of the tail), fp32 output
    ("kn", 1, 130, 190, 240, ag.f32, _fs(bm=128, bn=64, stages=3, num_sms=4, tail_splits=3)),
    # batched: the raster's batch index decoded in the tail's store
    ("nk", 3, 70, 130, 128, ag.bf16, _fs(bm=128, bn=64, stages=2, num_sms=4, tail_splits=2)),
    # 2x1 clusters: a counter per CTA tile of the pair (q counts the rank)
    ("nk", 1, 500, 200, 192, ag.bf16, _fs(bm=128, bn=64, stages=2, num_sms=6, cluster_m=2,
                                          tail_splits=2)),
    # the only wave is partial (3 tiles on 8 CTAs), one consumer warpgroup, 4 slices of 32
    ("kn", 1, 64, 192, 128, ag.bf16, _fs(bm=64, bn=64, consumers=1, stages=2, num_sms=8,
                                         tail_splits=4, k_atoms=2)),
]


@pytest.mark.parametrize("layout,batch,m,n,k,out,s", CASES,
                         ids=[f"{c[0]}-b{c[1]}-{c[2]}x{c[3]}x{c[4]}-{c[5].name}-"
                              f"S{c[6].tail_splits}-cm{c[6].cluster_m}" for c in CASES])
def test_fused_tail_matches_float64_in_the_interpreter(layout, batch, m, n, k, out, s):
    a, w, b = _operands(layout, batch, m, n, k)
    problem = Problem(m, n, k, batch, "bf16", out.name, layout, False)
    assert split_k.tail_tiles(problem, s) > 0      # the case has a tail to split
    lead = (batch,) if batch > 1 else ()
    c = torch.full((*lead, m, n), float("nan"), dtype=_TORCH[out])
    count = _fused(problem, s, a, b, c)
    exact = a.double() @ w.double().transpose(-1, -2)
    assert not torch.isnan(c).any(), "an element of C was never written"
    err = ((c.double() - exact).norm() / exact.norm()).item()
    assert err < (4e-3 if out == ag.bf16 else 1e-5), err
    # every counter went round: S arrivals each, left at zero for the next call
    assert not count.any(), f"counters not back at zero: {count.tolist()}"
    # the same sums in the same order as the second kernel's: bit for bit
    ref = torch.full_like(c, float("nan"))
    _two_kernels(problem, s, a, b, ref)
    assert torch.equal(c, ref), "the fused finish differs from tail_sum_kernel's sum"
    # a second call on the counters the first left: the same C (nothing to reset)
    again = torch.full_like(c, float("nan"))
    _fused(problem, s, a, b, again, count=count)
    assert torch.equal(again, c) and not count.any()


def _seeded(kind: str):
    """_finish_tail with one bug: 'early' merges at ticket S - 2 (before the last slice
    stored), 'late' at ticket S (no arrival draws it), 'skip' leaves slice S - 1 out, 'twice'
    adds slice 0 twice instead of slice S - 1."""
    def finish_tail(C, partials, count, unit, q, wg, splits, *, bm, bn, rows, finish):
        ag.fence()
        ticket = ag.atomic_fetch_add(count, (q, wg), wrap=splits)
        last = {"early": splits - 2, "late": splits}.get(kind, splits - 1)
        pieces = {"skip": list(range(1, splits - 1)),
                  "twice": [0, *range(1, splits - 1)]}.get(kind, list(range(1, splits)))
        with ag.when(ticket == last):
            ag.fence()
            total = ag.load(partials, (0, q, wg * rows, 0), (rows, bn))
            for piece in pieces:
                total = total + ag.load(partials, (piece, q, wg * rows, 0), (rows, bn))
            ag.store(C, (*unit.batch, unit.m * bm + wg * rows, unit.n * bn), finish(total))
    return finish_tail


@pytest.mark.parametrize("kind", ["none", "early", "late", "skip", "twice"])
def test_seeded_finish_bugs_are_caught_by_the_interpreter(kind, monkeypatch):
    """Each bug leaves C's tail wrong: NaN (a partial loaded before its slice stored it, from
    the NaN-filled workspace; or a tile never stored) or a sum off by a slice. 'none' is the
    seeded finish without a bug, so the harness itself is shown to pass."""
    monkeypatch.setattr(gemm_module, "_finish_tail", _seeded(kind))
    kernel = gemm_module.gemm_kernel.__wrapped__(ag.bf16, ag.bf16, "nk", False, 3,
                                                 tail_fused=True)
    s = _fs(bm=128, bn=64, stages=2, num_sms=4, tail_splits=3)
    a, w, b = _operands("nk", 1, 200, 300, 240)
    problem = Problem(200, 300, 240, 1, "bf16", "bf16", "nk", False)
    c = torch.full((200, 300), float("nan"), dtype=torch.bfloat16)
    _fused(problem, s, a, b, c, kernel=kernel)
    exact = a.double() @ w.double().transpose(-1, -2)
    err = ((c.double() - exact).norm() / exact.norm()).item()
    if kind == "none":
        assert err < 4e-3, err
    else:
        assert torch.isnan(c).any() or err > 0.05, f"seeded bug {kind!r} not caught: {err}"


def test_the_verifier_proves_the_fused_tail():
    """On the 128x256 2x1-cluster schedule, 2 and 3 slices: the tickets (atomic.tickets'
    grid-stride form: the tail loop starts at the cluster index and steps by the clusters, the
    counter of tail tile q is reached by the slices t = part * tail + q, t mod tail = q, so
    exactly S arrivals each), no element of C stored twice by the full waves' store and the
    finish's store together (the last ticket's guard: one arrival a counter element), k-once
    per slice, A and B from one slice, each partial in its slice of P and P covered, the
    counters touched by atomics only. No error; the one unknown is C's coverage by two store
    sites (store.coverage checks one site)."""
    for splits in (2, 3):
        s = GemmSchedule(stages=4, cluster_m=2, tail_splits=splits, tail_finish="fused")
        report = verify.run(lower_only(gemm_kernel(tail_splits=splits, tail_fused=True), s=s))
        assert not report.errors, "\n".join(str(d) for d in report.errors)
        proven = {o.code for o in report.proven}
        assert {"atomic.tickets", "store.once", "wgmma.k-once", "wgmma.agree", "store.coords",
                "atomic.exclusive", "pipe.totals"} <= proven, proven
        subjects = [o.subject for o in report.proven if o.code == "store.once"]
        assert any(t.startswith("stores to C at ") and " and gemm.py:" in t
                   for t in subjects), subjects
        assert any(" of P stored at " in o.subject for o in report.proven
                   if o.code == "store.coverage"), "P's coverage"
        text = "\n".join(str(o) for o in report.proven)
        assert "A.s == B.s" in text and "store to P" in text
        unknown = [d for d in report.unknowns
                   if not (d.code == "store.coverage" and "2 store sites" in d.message)]
        assert not unknown, "\n".join(str(d) for d in unknown)


def _miscounted(kind: str):
    """_finish_tail with its counter wrong: 'shared' gives two tail tiles one counter (2S
    arrivals), 'wrap+1' counts S + 1 arrivals that never come (the counter never resets and
    no slice merges)."""
    def finish_tail(C, partials, count, unit, q, wg, splits, *, bm, bn, rows, finish):
        ag.fence()
        cell = (q // 2, wg) if kind == "shared" else (q, wg)
        wrap = splits + 1 if kind == "wrap+1" else splits
        ticket = ag.atomic_fetch_add(count, cell, wrap=wrap)
        with ag.when(ticket == wrap - 1):
            ag.fence()
            total = ag.load(partials, (0, q, wg * rows, 0), (rows, bn))
            for piece in range(1, splits):
                total = total + ag.load(partials, (piece, q, wg * rows, 0), (rows, bn))
            ag.store(C, (*unit.batch, unit.m * bm + wg * rows, unit.n * bn), finish(total))
    return finish_tail


@pytest.mark.parametrize("kind,claim", [("shared", "is the same for two instances"),
                                        ("wrap+1", "stop is D * wrap")])
def test_the_verifier_catches_a_miscounted_ticket(kind, claim, monkeypatch):
    monkeypatch.setattr(gemm_module, "_finish_tail", _miscounted(kind))
    kernel = gemm_module.gemm_kernel.__wrapped__(ag.bf16, ag.bf16, "nk", False, 2,
                                                 tail_fused=True)
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=2, tail_finish="fused")
    report = verify.run(lower_only(kernel, s=s))
    wrong = [d for d in report.errors if d.code == "atomic.tickets"]
    assert wrong and claim in wrong[0].message, "\n".join(str(d) for d in report.errors)


def test_the_verifier_catches_a_merge_before_the_last_slice(monkeypatch):
    """The threshold one too low (ticket == S - 2): one arrival passes (store.once holds), but
    it is the second to last, so it adds slice partials not yet stored. atomic.tickets' merge
    claim reports it at the guard (the seeded finish's `ag.when` line), naming the ticket,
    the arrival and who runs it; before it only the interpreter caught this."""
    monkeypatch.setattr(gemm_module, "_finish_tail", _seeded("early"))
    kernel = gemm_module.gemm_kernel.__wrapped__(ag.bf16, ag.bf16, "nk", False, 3,
                                                 tail_fused=True)
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=3, tail_finish="fused")
    report = verify.run(lower_only(kernel, s=s))
    early = [d for d in report.errors if d.code == "atomic.tickets"]
    assert early, "\n".join(str(d) for d in report.errors)
    d = early[0]
    assert "merges at ticket 1" in d.message and "arrival 2 of 3" in d.message, d.message
    assert "role 'consumer', warpgroup" in d.message and "test_tail_fused.py" in str(d.loc)
    assert not [e for e in report.errors if e is not d and e.code != "atomic.tickets"], \
        "\n".join(str(e) for e in report.errors)


def test_the_verifier_sees_a_ticket_no_arrival_draws(monkeypatch):
    """The threshold one too high (ticket == S): no arrival passes, so the tail of C is never
    stored. Every ticket is in 0 .. S - 1 (transfer/memory.py's premise), so the finish's store
    site has no instance: a finding (the ticket rule at the merge, or store.once) says its model
    is empty instead of proving it vacuously
    (the interpreter finds the NaN tail: test_seeded_finish_bugs_are_caught_by_the_interpreter)."""
    monkeypatch.setattr(gemm_module, "_finish_tail", _seeded("late"))
    kernel = gemm_module.gemm_kernel.__wrapped__(ag.bf16, ag.bf16, "nk", False, 2,
                                                 tail_fused=True)
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=2, tail_finish="fused")
    report = verify.run(lower_only(kernel, s=s))
    # Which check meets the empty site first depends on where the ag.when guards sit: since
    # a42940f store.once takes them into its claim (no longer an empty premise set), and the
    # ticket rule at the merge reports the contradiction instead. Either way it is reported.
    empty = [d for d in report.unknowns + report.errors
             if d.code in ("store.once", "atomic.tickets")
             and "test_tail_fused.py" in d.message and "site is empty" in d.message]
    assert empty, "\n".join(str(d) for d in report.unknowns + report.errors)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_fused_tail_compiles_for_sm90a_without_spills():
    """The 128x256 cluster schedule with 3 slices: no spills (the finish adds 64-column
    blocks in a runtime loop; whole 64 x 256 row blocks spilled 1.8 KB), the acquire and
    release fences, and one atom.inc per arrival."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    problem = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    fn, run = kernel_for(problem, GemmSchedule(stages=4, cluster_m=2, tail_splits=3,
                                               tail_finish="fused"))
    source = codegen.render(lower_only(fn, s=run))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert binary.arch == "sm_90a" and not res.spills, res.summary()
    assert "atom.acq_rel.gpu.global.inc.u32" in binary.ptx, "no self-resetting counter"
    assert binary.ptx.count("fence.acq_rel.gpu") >= 2, "a release and an acquire fence"


def test_the_schedule_and_the_kernel_check_the_finish():
    with pytest.raises(ValueError, match="tail_finish"):
        GemmSchedule(tail_finish="atomic")
    with pytest.raises(ValueError, match="tail_splits > 1"):
        GemmSchedule(tail_finish="fused")
    with pytest.raises(ValueError, match="tail_fused"):
        gemm_kernel(tail_fused=True)
    fused = GemmSchedule(stages=4, cluster_m=2, tail_splits=2, tail_finish="fused")
    with pytest.raises(TraceError, match="tail_fused"):
        gemm_kernel(tail_splits=2).trace(s=fused)
    with pytest.raises(TraceError, match="tail_fused"):
        gemm_kernel(tail_splits=2, tail_fused=True).trace(
            s=dataclasses.replace(fused, tail_finish="kernel"))
    # the fused kernel takes the counters after the workspace, and writes C whole
    kernel = gemm_kernel(tail_splits=2, tail_fused=True)
    assert [p.name for p in lower_only(kernel, s=fused).params][:7] == \
        ["A", "B", "C", "As", "Bs", "P", "Count"]
    assert not kernel.partial_outputs and gemm_kernel(tail_splits=2).partial_outputs


def test_the_tuner_times_the_fused_tail_where_the_last_wave_is_mostly_empty():
    """2048x7168x2048 (448 tiles of 128x256; 26 units of 2x1 clusters in the last wave of 66):
    tune_matmul's candidates hold each tail split with both finishes; the untuned model's
    candidates and its pick hold neither; a full last wave has none."""
    p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    tails = tail_split_candidates(p)
    fused = tail_split_candidates(p, "fused")
    assert tails and [dataclasses.replace(s, tail_finish="fused") for s in tails] == fused
    timed = tune.tuning_candidates(p)
    assert set(tails + fused) <= set(timed)
    assert not [s for s in candidates(p) if s.tail_splits > 1]
    assert gemm_model.pick(p, timed).tail_splits == 1
    assert not tail_split_candidates(Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True),
                                     "fused")


def test_ops_host_path_in_the_interpreter(monkeypatch):
    """What argus.ops.matmul runs for the fused finish (compiled_for: a TailSplitMatmul with
    the K-slice views, the workspace, the counters it keeps, one launch) run by the
    interpreter instead of the GPU, twice on the same counters: x @ W.T and x @ W, one
    batched."""
    from argus.ops.matmul import compiled_for

    interpret_compiles(monkeypatch, verify=None)   # C written whole: with the verifier's veto
    s = _fs(bm=128, bn=64, stages=2, num_sms=4, tail_splits=2)
    for layout, batch in (("nk", 1), ("kn", 1), ("nk", 3)):
        a, w, b = _operands(layout, batch, 200, 300, 208, seed=7)
        lead = (batch,) if batch > 1 else ()
        problem = Problem(200, 300, 208, batch, "bf16", "bf16", layout, True)
        run = compiled_for(problem, s)
        assert isinstance(run, split_k.TailSplitMatmul) and run.fused and run.reduce is None and run.tiles > 0
        exact = a.double() @ w.double().transpose(-1, -2)
        for _ in range(2):   # the second call on the counters the first left
            c = torch.full((*lead, 200, 300), float("nan"), dtype=torch.bfloat16)
            assert run(a, b, c) is None          # no launch plans: nothing to replay
            assert not torch.isnan(c).any()
            assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3
        (count,) = run._counters.values()
        assert count.shape == (run.tiles, s.consumers) and not count.any()


def test_a_replay_on_another_stream_takes_that_streams_counters(monkeypatch):
    """argus.ops.matmul replays the fused launch on whatever stream is current: two outputs'
    replays running at once on two streams must not draw tickets from one counter (a tile's
    last arrival could then be another launch's, and sum partials not yet stored). On a new
    stream the plan is moved onto that stream's counters; on its own stream it is launched as
    prepared (tests/unit/ops_host.py)."""
    s = _fs(bm=128, bn=64, stages=2, num_sms=4, tail_splits=2)
    a, _, b = _operands("nk", 1, 200, 300, 208)
    problem = Problem(200, 300, 208, 1, "bf16", "bf16", "nk", True)
    assert_replays_take_their_streams(monkeypatch, problem, s, a, b, lambda run: run._counters)


def test_a_captured_graph_gets_counters_of_its_own(monkeypatch):
    """Two CUDA graphs captured on one stream (torch.cuda.graph's shared default capture
    stream) and replayed at once on two streams must not share the fused finish's counters:
    under capture each call takes fresh zeros (a memset node of its graph), never the
    stream's kept set. (Capture stubbed: CPU tensors.)"""
    s = _fs(bm=128, bn=64, stages=2, num_sms=4, tail_splits=2)
    run = split_k.TailSplitMatmul.__new__(split_k.TailSplitMatmul)
    run.tiles, run.schedule, run._counters = 2, s, {}
    device = torch.device("cpu")
    kept = run._counters_for(device)
    monkeypatch.setattr(split_k, "_capturing", lambda device: True)
    first, second = run._counters_for(device), run._counters_for(device)
    assert len({kept.data_ptr(), first.data_ptr(), second.data_ptr()}) == 3
    assert not first.any() and first.shape == (2, s.consumers) and len(run._counters) == 1
