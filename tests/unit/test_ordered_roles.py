"""Ordered roles (ag.ordered) and pipeline skips: the ping-pong GEMM in the interpreter against
float64, the turn protocol (round-robin, deadlock on a skipped turn), the lowered barrier ids,
their CUDA rendering, and the trace-time errors for misuse."""

from __future__ import annotations

import pytest

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.kernels.gemm import GemmSchedule, gemm_kernel

torch = pytest.importorskip("torch")


def _rand(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(torch.bfloat16)


@pytest.mark.parametrize("m,n,k,layout,schedule", [
    (200, 96, 128, "nk", GemmSchedule(bm=64, bn=32, stages=2, pingpong=True, num_sms=3)),
    (256, 64, 192, "nk", GemmSchedule(bm=128, bn=32, stages=3, pingpong=True, num_sms=2)),
    (130, 128, 64, "kn", GemmSchedule(bm=64, bn=64, stages=2, pingpong=True, num_sms=2)),
    (256, 128, 192, "kn", GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, num_sms=4,
                                       swap_ab=True)),
    (330, 96, 128, "nk", GemmSchedule(bm=64, bn=32, stages=2, pingpong=True, num_sms=2,
                                      ordered_epilogue=True)),
    # the TMA-store epilogue: a warpgroup's whole tile stacked in its staging slots
    (256, 128, 192, "nk", GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, num_sms=2,
                                       epilogue="tma")),
    (200, 96, 128, "kn", GemmSchedule(bm=128, bn=64, stages=2, pingpong=True, num_sms=2,
                                      epilogue="tma")),
    (330, 160, 64, "nk", GemmSchedule(bm=128, bn=160, stages=2, pingpong=True, num_sms=2,
                                      epilogue="tma", ordered_epilogue=True)),
    (200, 256, 128, "nk", GemmSchedule(bm=64, bn=128, stages=2, pingpong=True, num_sms=3,
                                       epilogue="tma", store_cols=64)),
])
def test_pingpong_gemm_matches_float64_in_the_interpreter(m, n, k, layout, schedule):
    a, w = _rand(m, k, seed=m), _rand(n, k, seed=n)
    b = w if layout == "nk" else w.T.contiguous()
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    gemm_kernel(ag.bf16, ag.bf16, layout, False).interpret(a, b, c, s=schedule)
    exact = a.double() @ w.double().T
    assert not torch.isnan(c).any()
    assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3


@pytest.mark.parametrize("extra", [{"cluster_m": 2}, {"consumers": 1},
                                   {"bm": 256}, {"persistent": False}, {"ordered_epilogue": True,
                                                                        "pingpong": False}])
def test_pingpong_schedule_problems(extra):
    with pytest.raises(ValueError, match="pingpong"):
        GemmSchedule(**{"bm": 64, "bn": 128, "pingpong": True, **extra})


@pytest.mark.parametrize("schedule", [
    GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, num_sms=2, epilogue="tma"),
    GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, num_sms=2, epilogue="tma",
                 store_cols=64, ordered_epilogue=True),
    GemmSchedule(bm=64, bn=256, stages=2, pingpong=True, num_sms=2, epilogue="tma")])
def test_pingpong_tma_store_epilogue_is_proved(schedule, monkeypatch, tmp_path):
    """The TMA-store ping-pong epilogue verifies with no finding, store.coverage included: one
    bm-row box per column block (stacked accumulators), so the stores tile the tile along one
    axis; each warpgroup stages in its own slots and waits for its own bulk reads."""
    pytest.importorskip("z3")
    from argus.compiler import compile_kernel

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))  # verify now, not a cached verdict
    compiled = compile_kernel(gemm_kernel(), verify=1, s=schedule)
    assert not compiled.diagnostics
    text = compiled.source.text
    assert "st_global" not in text  # no register stores left in the epilogue
    blocks = schedule.bn // 64 if schedule.bn % 64 == 0 else schedule.bn // 32
    assert text.count("ag::tma_store_2d(") == blocks  # one bm-row box per column block


def test_ordered_epilogue_is_a_second_turn_sequence():
    """With ordered_epilogue the epilogues take turns too: a second pair of named barriers
    after the main loop's pair, each sequence with its own initial pass."""
    k = lower_only(gemm_kernel(), s=GemmSchedule(bm=128, bn=128, stages=6, pingpong=True,
                                                 ordered_epilogue=True))
    turn_ops = [op for op in k.walk() if isinstance(op, (O.TurnWait, O.TurnPass))]
    pairs = {op.barriers for op in turn_ops}
    assert len(pairs) == 2 and len({b for pair in pairs for b in pair}) == 4
    assert sum(isinstance(op, O.TurnPass) and op.initial for op in turn_ops) == 2
    assert parse_kernel(print_kernel(k)) == k


def _turns_kernel(skip_turn: bool = False, order: list | None = None):
    """Two warpgroups append their index to `log` inside an ordered section, 3 times each;
    with skip_turn warpgroup 1 runs the section only once (then warpgroup 0 waits forever)."""
    @ag.kernel
    def turns(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        with ag.role("w", warpgroups=2) as wg:
            for i in ag.range(3):
                if skip_turn:
                    with ag.when((i < 1) | (wg == 0)):
                        with ag.ordered("s"):
                            ag.store(X, (i * 2 + wg,), ag.full((1,), 1.0))
                else:
                    with ag.ordered("s"):
                        ag.store(X, (i * 2 + wg,), ag.full((1,), 1.0))
    return turns


def test_sections_take_turns_in_round_robin_order():
    """Each section stamps the running count X[6] into its own slot and increments it, so the
    slots read 0..5 exactly when the sections ran warpgroup 0, 1, 0, 1, 0, 1."""
    @ag.kernel
    def order(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        with ag.role("w", warpgroups=2) as wg:
            for i in ag.range(3):
                with ag.ordered("s"):
                    count = ag.load(X, (6,), (1,))
                    ag.store(X, (i * 2 + wg,), count)
                    ag.store(X, (6,), count + 1.0)
    x = torch.zeros(7)
    order.interpret(x)
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_sections_run_in_turns_and_a_skipped_turn_deadlocks():
    x = torch.zeros(6)
    _turns_kernel().interpret(x)
    assert x.tolist() == [1.0] * 6
    with pytest.raises(Exception, match="deadlock"):
        _turns_kernel(skip_turn=True).interpret(torch.zeros(6))


def test_lowering_numbers_barriers_after_the_group_barriers_and_renders_them():
    k = lower_only(gemm_kernel(), s=GemmSchedule(bm=128, bn=128, stages=6, pingpong=True))
    threads = k.attr("threads")
    turn_ops = [op for op in k.walk() if isinstance(op, (O.TurnWait, O.TurnPass))]
    assert {op.barriers for op in turn_ops} == {(1 + threads // 128, 2 + threads // 128)}
    assert {op.threads for op in turn_ops} == {256}
    assert sum(isinstance(op, O.TurnPass) and op.initial for op in turn_ops) == 1
    assert parse_kernel(print_kernel(k)) == k
    from argus import codegen
    text = codegen.render(k).text
    assert f"ag::named_barrier_sync({1 + threads // 128} + " in text
    assert f"ag::named_barrier_arrive({1 + threads // 128} + (" in text
    assert any("steps another warpgroup consumes" in line for line in text.splitlines())


def _misuse(body):
    @ag.kernel
    def bad(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        body()
    return bad


@pytest.mark.parametrize("what,match", [
    ("outside", "outside an ag.role"),
    ("one_wg", "nobody to take turns"),
    ("nested", "inside ordered section"),
    ("twice", "appears twice"),
])
def test_misuse_is_a_trace_error(what, match):
    def body():
        if what == "outside":
            with ag.ordered("s"):
                pass
            return
        with ag.role("r", warpgroups=1 if what == "one_wg" else 2):
            if what == "nested":
                with ag.ordered("a"), ag.ordered("b"):
                    pass
            elif what == "twice":
                with ag.ordered("a"):
                    pass
                with ag.ordered("a"):
                    pass
            else:
                with ag.ordered("a"):
                    pass
    with pytest.raises(ag.TraceError, match=match):
        _misuse(body).trace()


@pytest.mark.parametrize("where", ["produce", "skip_before", "skip_after"])
def test_ordered_inside_a_pipeline_step_is_refused_where_it_can_starve(where):
    """Inside a produce step, or a consume step of a pipeline whose steps the role skips
    (ping-pong: the turn holder may need a slot the waiter holds), whichever comes first."""
    @ag.kernel
    def bad(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        pipe = ag.pipeline(2)
        with ag.role("r", warpgroups=2):
            if where == "produce":
                with pipe.produce():
                    with ag.ordered("a"):
                        pass
                return
            if where == "skip_before":
                pipe.skip(1)
            with pipe.consume():
                with ag.ordered("a"):
                    pass
            if where == "skip_after":
                pipe.skip(1)
    match = "pipe.skip of a pipeline in whose consume steps" if where == "skip_after" else \
        "inside a (produce step|consume step of a pipeline whose steps this role skips)"
    with pytest.raises(ag.TraceError, match=match):
        bad.trace()


def test_ordered_inside_a_consume_step_every_warpgroup_consumes_is_traced():
    """Cooperative consumers may take turns inside a step (the staggered split fp8 promotion's
    column halves): no warpgroup skips, so the turn holder needs no slot the waiter holds."""
    @ag.kernel
    def ok(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        pipe = ag.pipeline(2)
        with ag.role("r", warpgroups=2):
            with pipe.consume():
                with ag.ordered("a"):
                    pass
    ops = [type(op).__name__ for op in ok.trace().walk()]
    assert ops.index("Consume") < ops.index("TurnWait") < ops.index("TurnPass")


def test_a_turn_taking_consumer_with_consumers_2_says_why_one_releases():
    """Ping-pong consumers release each slot once; a pipeline declared with consumers=2 is
    refused with the reason (the role takes turns), not just a count."""
    @ag.kernel
    def pp(X: ag.Tensor[("N", 64, ag.f32)], Y: ag.Tensor[("N", 64, ag.f32)]):
        ag.grid(1)
        s = ag.smem((2, 64, 64), ag.f32)
        pipe = ag.pipeline(2, consumers=2)
        with ag.role("producer", warpgroups=1):
            for i in ag.range(4):
                with pipe.produce() as st:
                    ag.tma.load(s[st], X, (i * 64, 0))
        with ag.role("consumer", warpgroups=2) as wg:
            for i in ag.range(4):
                with ag.when(i % 2 == wg):
                    with ag.ordered("c"):
                        with pipe.consume():
                            pass
                    ag.store(Y, (i * 64, 0), ag.full((64, 64), 1.0))
                with ag.when(i % 2 != wg):
                    pipe.skip(1)
    with pytest.raises(ag.CompileError, match=r"1 warpgroup releases each step \(role "
                                              r"'consumer' takes turns on it with pipe.skip"):
        lower_only(pp)


def test_skipping_steps_in_a_one_warpgroup_role_is_a_trace_error():
    """Skipped steps are another warpgroup's turn; a role of one warpgroup has no other (its
    ring would wait for releases nobody makes)."""
    def body():
        pipe = ag.pipeline(2)
        with ag.role("r", warpgroups=1):
            pipe.skip(1)
    with pytest.raises(ag.TraceError, match="pipe.skip in role 'r' of 1 warpgroup"):
        _misuse(body).trace()
