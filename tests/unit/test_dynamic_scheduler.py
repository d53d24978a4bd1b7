"""The dynamic persistent scheduler on the dense GEMM (GemmSchedule(scheduler="dynamic"),
docs/design/dynamic_scheduler.md): each CTA's producer draws its next unit from a global
work counter (atom.inc with wrap = total) and hands it to the consumers in its ring's payload
words; each CTA runs as many units as on the static walk.

What is tested here: the interpreter's result bit-for-bit equal to the static walk's on ragged
shapes (the CTAs run one after another, so CTA 0 draws the first units: a permutation of the
static walk's assignment, each tile computed by the same ops), the counter left at zero and a
second launch on it right again; the pipeline payload words (a word per slot, written before
the full barrier is armed, read inside the consume step); the schedule's and the kernel's
checks; NVRTC building the kernel for sm_90a without spills, with the atom.inc draw by the
elected producer thread; and what the verifier proves of it.
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
from argus.kernels.warp_specialized import OperandRing, TileScheduler
from argus.runtime import nvrtc_available
from tests.unit.ops_host import assert_replays_take_their_streams, interpret_compiles


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16()


def _operands(layout, batch, m, n, k):
    lead = (batch,) if batch > 1 else ()
    a, w = _rand(*lead, m, k, seed=m + k), _rand(*lead, n, k, seed=n)
    return a, (w if layout == "nk" else w.transpose(-1, -2).contiguous())


# ragged M, N and K; more units than CTAs (several units a CTA), fewer, a batch, B [K, N]
CASES = [
    ("nk", 1, 300, 520, 192, GemmSchedule(bm=128, bn=128, num_sms=3)),
    ("nk", 1, 200, 136, 80, GemmSchedule(bm=64, bn=64, consumers=1, stages=2, num_sms=4)),
    ("nk", 1, 130, 260, 64, GemmSchedule(bm=128, bn=256, num_sms=16)),
    ("kn", 2, 150, 192, 100, GemmSchedule(bm=128, bn=128, num_sms=3, group_m=2)),
    ("nk", 1, 260, 300, 128, GemmSchedule(bm=128, bn=128, num_sms=2, epilogue="tma")),
]


@pytest.mark.parametrize("layout,batch,m,n,k,s", CASES)
def test_dynamic_walk_equals_the_static_walk_bit_for_bit(layout, batch, m, n, k, s):
    a, b = _operands(layout, batch, m, n, k)
    lead = (batch,) if batch > 1 else ()
    static = torch.full((*lead, m, n), float("nan")).bfloat16()
    dynamic = torch.full((*lead, m, n), float("nan")).bfloat16()
    gemm_kernel(b_layout=layout, batched=batch > 1).interpret(a, b, static, s=s)
    work = torch.zeros(1, dtype=torch.int32)
    kernel = gemm_kernel(b_layout=layout, batched=batch > 1, dynamic=True)
    run = dataclasses.replace(s, scheduler="dynamic")
    kernel.interpret(a, b, dynamic, work, s=run)
    assert not torch.isnan(dynamic.float()).any(), "a tile no CTA drew"
    assert torch.equal(static, dynamic)
    assert work.tolist() == [0], "the launch's draws leave the counter at zero"
    again = torch.full_like(dynamic, float("nan"))
    kernel.interpret(a, b, again, work, s=run)    # the next launch on the same counter
    assert torch.equal(again, static) and work.tolist() == [0]


def test_a_counter_left_elsewhere_rotates_the_units_each_still_once():
    """A counter at c in [0, total) at launch: the draws are c, c+1, .. mod total, still every
    unit once (atom.inc wraps), and the launch leaves it at c again."""
    a, b = _operands("nk", 1, 300, 520, 192)
    s = GemmSchedule(bm=128, bn=128, num_sms=3)
    static = torch.zeros(300, 520).bfloat16()
    gemm_kernel().interpret(a, b, static, s=s)
    out = torch.full((300, 520), float("nan")).bfloat16()
    work = torch.tensor([5], dtype=torch.int32)
    gemm_kernel(dynamic=True).interpret(a, b, out, work,
                                        s=dataclasses.replace(s, scheduler="dynamic"))
    assert torch.equal(out, static) and work.tolist() == [5]


def test_the_payload_words_carry_a_value_per_fill():
    """ag.pipeline(payload=True): a peek before each consume step reads what the produce step
    that filled its slot put there (a 2-slot ring over 5 steps: the words are reused); the
    consumer marks Y at the word it read."""
    @ag.kernel(partial_outputs=("Y",))
    def relay(X: ag.Tensor[("R", "C", ag.bf16)], Y: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        buf = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1, payload=True)
        with ag.role("producer", warpgroups=1):
            for i in ag.range(5):
                with pipe.produce(payload=i * 7 + 1) as stage:
                    ag.tma.load(buf[stage], X, (0, 0))
        with ag.role("consumer", warpgroups=1):
            for i in ag.range(5):
                word = pipe.peek()
                with pipe.consume():
                    ag.store(Y, (word,), ag.full((1,), 1.0))

    y = torch.zeros(32)
    relay.interpret(torch.zeros(64, 64).bfloat16(), y)
    assert y.nonzero().flatten().tolist() == [1, 8, 15, 22, 29]


def test_the_peek_is_between_steps():
    @ag.kernel
    def bad(X: ag.Tensor[("R", "C", ag.bf16)]):
        ag.grid(1)
        buf = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1, payload=True)
        with ag.role("producer", warpgroups=1):
            with pipe.produce(payload=3) as stage:
                ag.tma.load(buf[stage], X, (0, 0))
        with ag.role("consumer", warpgroups=1):
            with pipe.consume():
                pipe.peek()

    with pytest.raises(TraceError, match="inside a step of its pipeline"):
        bad.trace()


def test_a_payload_needs_a_payload_pipeline():
    @ag.kernel
    def bad(Y: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1):
            with pipe.produce(payload=3):
                pass

    with pytest.raises(TraceError, match="without payload words"):
        bad.trace()


def test_the_schedule_and_the_kernel_check_the_scheduler():
    with pytest.raises(ValueError, match="scheduler='fifo'"):
        GemmSchedule(scheduler="fifo")
    for bad in (dict(persistent=False), dict(cluster_m=2), dict(tail_splits=2),
                dict(pingpong=True, bm=128, bn=128)):
        with pytest.raises(ValueError, match="scheduler='dynamic'"):
            GemmSchedule(scheduler="dynamic", **bad)
    with pytest.raises(TraceError, match="dynamic=True"):
        lower_only(gemm_kernel(), s=GemmSchedule(scheduler="dynamic"))
    with pytest.raises(TraceError, match="dynamic=False"):
        lower_only(gemm_kernel(dynamic=True), s=GemmSchedule())
    assert GemmSchedule().scheduler == "static"


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("s", [GemmSchedule(scheduler="dynamic"),
                               GemmSchedule(scheduler="dynamic", epilogue="tma", bn=192),
                               GemmSchedule(scheduler="dynamic", bm=128, bn=128, stages=6)])
def test_dynamic_gemm_compiles_for_sm90a_without_spills(s):
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(gemm_kernel(dynamic=True), s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert binary.arch == "sm_90a" and not res.spills, res.summary()
    assert binary.ptx.count("atom.acq_rel.gpu.global.inc.u32") == 1, "one draw a unit"
    # the draw is the elected producer thread's: no group barrier around it, and the word is
    # written before the full barrier is armed
    text = source.text
    assert text.index("pay") < text.index("mbar_arrive_expect_tx")
    produce = text[text.index("role producer"):text.index("role consumer")]
    assert "named_barrier_sync" not in produce
    assert produce.index("] = v") < produce.index("mbar_arrive_expect_tx")


def test_lowering_marks_the_elected_draw_alone():
    """lower/elect.py, which puts the producer's body under an elect of one thread, marks the
    draw in it `alone` (codegen renders what the op says: the thread's own atomic, no group
    barriers or broadcast, which the threads that skip the body would never reach); the
    consumers' atomics of the fused tail, run by whole warpgroups, stay as they were."""
    from argus.ir import ops as O

    kernel = lower_only(gemm_kernel(dynamic=True), s=GemmSchedule(scheduler="dynamic"))
    elects = [op for op in kernel.walk() if isinstance(op, O.Elect)]
    drawn = [op for e in elects for op in e.walk() if isinstance(op, O.AtomicFetchAdd)]
    assert len(drawn) == 1 and drawn[0].alone
    tail = gemm_kernel(tail_splits=2, tail_fused=True)
    lowered = lower_only(tail, s=GemmSchedule(tail_splits=2, tail_finish="fused"))
    ops = [op for op in lowered.walk() if isinstance(op, O.AtomicFetchAdd)]
    assert ops and not any(op.alone for op in ops)


def test_the_static_kernels_render_as_before():
    """No payload words, no draw: the default kernel's CUDA has neither."""
    from argus import codegen

    text = codegen.render(lower_only(gemm_kernel(), s=GemmSchedule())).text
    assert "pay" not in text and "atom_inc" not in text


# ----------------------------------------------------------------------------- the verifier


def _report(s=None):
    kernel = gemm_module.gemm_kernel.__wrapped__(ag.bf16, ag.bf16, "nk", False, dynamic=True)
    return verify.run(lower_only(kernel, s=s or GemmSchedule(scheduler="dynamic")))


@pytest.mark.parametrize("s", [GemmSchedule(scheduler="dynamic"),
                               GemmSchedule(scheduler="dynamic", epilogue="tma", bn=192)])
def test_the_verifier_proves_the_dynamic_walk(s):
    """Zero findings: the draws' tickets (atomic.tickets' grid-stride form with D = 1: one
    counter, wrap = the walk's stop), C stored once (the ticket's distinctness, read by the
    consumers through the ring: transfer/pipeline.py `pipe_peek`), the stored tile the one
    whose A and B tiles the producer loaded for that ticket (store.coords), C covered (the
    drawn units are the walk's units: check_stores `_drawn_walks`), and the ring's proofs."""
    report = _report(s)
    findings = report.errors + report.unknowns
    assert not findings, "\n".join(str(d) for d in findings)
    proven = {o.code for o in report.proven}
    assert {"atomic.tickets", "store.once", "store.coords", "store.coverage", "pipe.totals",
            "wgmma.k-once", "wgmma.agree"} <= proven, proven


def test_the_verifier_catches_a_unit_read_after_the_main_loop(monkeypatch):
    """The consumers peeking after the unit's main loop instead of before it read the fill of
    the next unit's first step: they would store this unit's tile at the next unit's place
    (and the last unit's peek waits for a fill that never comes). store.coords sees the
    stored place differ from where the tile's A rows came from."""
    late = {}
    original_mma, original_locate = OperandRing.mma, TileScheduler.locate

    def mma(self, k_steps, wg, **kw):
        acc = original_mma(self, k_steps, wg, **kw)
        late["word"] = self.pipe.peek()
        return acc

    class Late:   # the unit, decoded from the late word when the epilogue reads it
        def __init__(self, sched):
            self.sched = sched

        def __getattr__(self, name):
            return getattr(original_locate(self.sched, late["word"]), name)

    def locate(self, unit, rank=None):
        return Late(self) if unit is late else original_locate(self, unit, rank)
    monkeypatch.setattr(OperandRing, "peek_unit", lambda self: late)
    monkeypatch.setattr(OperandRing, "mma", mma)
    monkeypatch.setattr(TileScheduler, "locate", locate)
    report = _report()
    coords = [d for d in report.errors if d.code == "store.coords"]
    assert coords, "\n".join(str(d) for d in report.errors + report.unknowns)


def test_the_verifier_catches_a_peek_with_no_step_to_follow(monkeypatch):
    """A peek after the consumers' walk (its word unused) waits for the fill of a step the
    role never consumes, which the producer never fills: the kernel hangs. pipe.totals claims
    every peek's step is below its role's total (check_pipeline `_peek_consumed`)."""
    rings = []
    original_alloc, original_slots = OperandRing.alloc.__func__, TileScheduler.slots

    def alloc(cls, *args, **kw):
        rings.append(original_alloc(cls, *args, **kw))
        return rings[-1]

    def slots(self):
        yield from original_slots(self)
        rings[-1].peek_unit()
    monkeypatch.setattr(OperandRing, "alloc", classmethod(alloc))
    monkeypatch.setattr(TileScheduler, "slots", slots)
    report = _report()
    hang = [d for d in report.errors if d.code == "pipe.totals" and "peek" in str(d)]
    assert hang, "\n".join(str(d) for d in report.errors + report.unknowns)


@pytest.mark.parametrize("bug,code", [("wrap+1", "atomic.tickets"),
                                      ("per-cta", "atomic.tickets"),
                                      ("double-draw", "atomic.tickets"),
                                      ("unit+1", "store.coords"),
                                      ("static-store", "store.coords")])
def test_the_verifier_catches_seeded_draw_bugs(bug, code, monkeypatch):
    """A counter that wraps one late (wrap = total + 1: it never returns to zero, and a unit
    could be drawn twice across launches), a counter per CTA (each CTA draws 0, 1, ..: units
    drawn by several CTAs), a consumer that stores the next unit's tile (ticket + 1), and a
    consumer that stores at the static walk's unit instead of the drawn one; a producer
    that draws twice an iteration and hands on the second ticket (each site alone is reached
    by `total` instances, the counter by twice as many: the handed-on tickets repeat)."""
    def draws(self, counter):
        for t in ag.range(self.first, self.total, self.programs):
            if bug == "wrap+1":
                ticket = ag.atomic_fetch_add(counter, (0,), wrap=self.total + 1)
            elif bug == "per-cta":
                ticket = ag.atomic_fetch_add(counter, (self.first,), wrap=self.total)
            elif bug == "double-draw":
                ag.atomic_fetch_add(counter, (0,), wrap=self.total)
                ticket = ag.atomic_fetch_add(counter, (0,), wrap=self.total)
            else:
                ticket = ag.atomic_fetch_add(counter, (0,), wrap=self.total)
            yield ticket, self.locate(ticket)

    monkeypatch.setattr(TileScheduler, "draws", draws)
    if bug == "unit+1":
        monkeypatch.setattr(OperandRing, "peek_unit", lambda self: self.pipe.peek() + 1)
    if bug == "static-store":
        walked = {}

        def slots_static(self):
            for t in ag.range(self.first, self.total, self.programs):
                walked["t"] = t
                yield t
        monkeypatch.setattr(TileScheduler, "slots", slots_static)
        monkeypatch.setattr(OperandRing, "peek_unit",
                            lambda self: (self.pipe.peek(), walked["t"])[1])
    report = _report()
    hit = [d for d in report.errors + report.unknowns if d.code == code]
    assert hit, "\n".join(str(d) for d in report.errors + report.unknowns)


def test_coverage_alone_catches_units_drawn_twice(monkeypatch):
    """Producer and consumers both read the unit as ticket // 2: the tickets 2u and 2u + 1
    both give unit u, so units 0 .. total / 2 - 1 are each loaded and stored twice and the
    others never (store.coords holds: the stored tile is the loaded one). store.once fails;
    store.coverage must fail on its own too. It was proven: the peek's premises tie the
    consumers' loop index to its CTA's id (transfer/pipeline.py `pipe_peek`), and the tile
    obligation's second copy, which renames the walked index only, shared that id, so it
    compared two units of one CTA (i and i + P, never one ticket pair). check_stores.py
    `_tile_obligation` now leaves out the premises that mention a walked loop's index."""
    def draws(self, counter):
        for _ in ag.range(self.first, self.total, self.programs):
            ticket = ag.atomic_fetch_add(counter, (0,), wrap=self.total)
            yield ticket, self.locate(ticket // 2)
    monkeypatch.setattr(TileScheduler, "draws", draws)
    monkeypatch.setattr(OperandRing, "peek_unit", lambda self: self.pipe.peek() // 2)
    report = _report()
    codes = {d.code for d in report.errors}
    assert "store.coords" not in codes, "\n".join(str(d) for d in report.errors)
    coverage = [d for d in report.errors if d.code == "store.coverage"]
    assert any("both store tile" in str(d) for d in coverage), \
        "\n".join(str(d) for d in report.errors + report.unknowns)


# ----------------------------------------------------------------------------- argus.ops


def test_ops_host_path_in_the_interpreter(monkeypatch):
    """What argus.ops.matmul runs for the dynamic schedule (compiled_for: a DynamicMatmul, the
    kernel with the verifier's veto and a work word per stream), run by the interpreter, twice
    on the same word: x @ W.T, x @ W and a batch; the word is zero after each call."""
    from argus.ops.dynamic_walk import DynamicMatmul
    from argus.ops.matmul import compiled_for
    from argus.ops.schedules import Problem

    interpret_compiles(monkeypatch, verify=None)   # C written whole: with the verifier's veto
    s = GemmSchedule(bm=128, bn=64, stages=2, num_sms=3, scheduler="dynamic")
    for layout, batch in (("nk", 1), ("kn", 1), ("nk", 3)):
        a, b = _operands(layout, batch, 200, 300, 208)
        w = b if layout == "nk" else b.transpose(-1, -2)
        lead = (batch,) if batch > 1 else ()
        problem = Problem(200, 300, 208, batch, "bf16", "bf16", layout, True)
        run = compiled_for(problem, s)
        assert isinstance(run, DynamicMatmul)
        exact = a.double() @ w.double().transpose(-1, -2)
        for _ in range(2):
            c = torch.full((*lead, 200, 300), float("nan"), dtype=torch.bfloat16)
            assert run(a, b, c) is None          # no launch plans: nothing to replay
            assert not torch.isnan(c).any()
            assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3
        (word,) = run._words.values()
        assert word.tolist() == [0]


def test_a_replay_on_another_stream_takes_that_streams_word(monkeypatch):
    """argus.ops.matmul replays the dynamic launch on whatever stream is current: two outputs'
    replays running at once on two streams must not draw units from one work word (a launch
    would then miss units the other drew). On a new stream the plan is moved onto that
    stream's word; on its own stream it is launched as prepared (tests/unit/ops_host.py)."""
    from argus.ops.schedules import Problem

    s = GemmSchedule(bm=128, bn=64, stages=2, num_sms=3, scheduler="dynamic")
    a, b = _operands("nk", 1, 200, 300, 208)
    problem = Problem(200, 300, 208, 1, "bf16", "bf16", "nk", True)
    assert_replays_take_their_streams(monkeypatch, problem, s, a, b, lambda run: run._words)


def test_a_captured_graph_gets_a_word_of_its_own(monkeypatch):
    """Under CUDA graph capture the dynamic walk's work word, DynamicMatmul's and the module's
    (work_word, argus.ops.moe's), is fresh zeros each call (a memset node of the graph), never
    the stream's kept word, which capture leaves alone; as the fused tail's counters
    (tests/unit/test_tail_fused.py). (Capture stubbed: CPU tensors.)"""
    from argus.ops import dynamic_walk, split_k

    run = dynamic_walk.DynamicMatmul.__new__(dynamic_walk.DynamicMatmul)
    run._words = {}
    device = torch.device("cpu")
    for word_for, kept in ((run._word_for, run._words),
                           (dynamic_walk.work_word, dynamic_walk._WORDS)):
        word = word_for(device)
        assert word_for(device) is word and word.tolist() == [0]
        before = {key: w.data_ptr() for key, w in kept.items()}
        monkeypatch.setattr(split_k, "_capturing", lambda device: True)
        first, second = word_for(device), word_for(device)
        monkeypatch.undo()
        assert len({word.data_ptr(), first.data_ptr(), second.data_ptr()}) == 3
        assert first.tolist() == second.tolist() == [0] and first.dtype == torch.int32
        assert {key: w.data_ptr() for key, w in kept.items()} == before
        assert word_for(device) is word


def test_the_default_rule_never_picks_the_dynamic_walk():
    from argus.ops.schedules import Problem, choose

    for m, n, k in ((4096, 4096, 4096), (2048, 7168, 2048), (64, 8192, 8192)):
        assert choose(Problem(m, n, k, 1, "bf16", "bf16", "nk", True),
                      "NVIDIA H100 80GB HBM3").scheduler == "static"
