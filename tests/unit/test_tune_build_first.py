"""Tuning builds every candidate before it times any (argus.ops.tune.build_then_time): a
candidate's first call compiles it (1-5 s of CPU), and a compile inside or between timed
candidates made the same fp8 schedule time 103-119 us in one H200 run and 175-189 us in
another (docs/perf/fp8.md, 2026-12-04). On the CPU with the builder, the launch and the timer
replaced by fakes that log what happens when."""

from __future__ import annotations

import sys

import pytest
import torch

import argus.ops
from argus.ops import fp8_schedules, tune
from argus.ops.schedules import Problem, candidates, tail_split_candidates
from argus.runtime import timing


class _Log:
    """One event list shared by the fake builder, launch and timer; `pending` is the set of
    builds started and not finished (a build in a background thread would stay in it)."""

    def __init__(self):
        self.events, self.pending, self.built = [], set(), set()


def test_every_build_ends_before_the_first_timing_and_a_failed_build_is_never_timed():
    log = _Log()
    todo = ["a", "b", "bad", "c", "d"]

    def build(s):
        log.pending.add(s)
        log.events.append(("build", s))
        if s == "bad":
            raise RuntimeError("NVRTC: too many resources requested\nsecond line")
        log.pending.discard(s)
        log.built.add(s)
        return lambda: log.events.append(("call", s))

    ms = {"a": 3.0, "b": 1.0, "c": 2.0, "d": 4.0}

    def screen(call):
        assert not log.pending - {"bad"}, f"timed while {log.pending} were building"
        call()
        s = log.events[-1][1]
        log.events.append(("time", s))
        return ms[s]

    def finals(calls):
        assert log.built == {"a", "b", "c", "d"}
        for call in calls:
            call()
        # the finals reverse the screen's top two
        return [{"b": 1.5, "c": 1.2}[log.events[-len(calls) + i][1]] for i in range(len(calls))]

    lines = []
    screened, final, failed = tune.build_then_time(todo, build, screen, finals, finalists=2,
                                                   say=lines.append, label="p")
    kinds = [k for k, _ in log.events]
    last_build = max(i for i, k in enumerate(kinds) if k == "build")
    first_time = kinds.index("time")
    assert last_build < first_time, log.events
    assert ("time", "bad") not in log.events and ("call", "bad") not in log.events
    assert [s for _, s in screened] == ["b", "c", "a", "d"]
    assert final == [(1.2, "c"), (1.5, "b")]
    assert failed == [("bad", "RuntimeError: NVRTC: too many resources requested")]
    assert any("failed" in line and "bad" in line for line in lines)


def test_a_candidate_that_builds_but_fails_to_run_is_reported_and_one_left_skips_the_finals():
    def screen(call):
        return call()

    def boom():
        raise RuntimeError("launch failed")

    def finals(calls):
        raise AssertionError("one candidate left: no finals")

    screened, final, failed = tune.build_then_time(
        ["x", "y"], lambda s: (boom if s == "x" else (lambda: 0.5)), screen, finals,
        finalists=3)
    assert screened == [(0.5, "y")] and final == [(0.5, "y")]
    assert failed == [("x", "RuntimeError: launch failed")]


@pytest.fixture
def fake_matmul(monkeypatch):
    """tune_matmul with the launch and the clock replaced: the fake launch "compiles" a
    schedule on its first call; the fake measure refuses to time while any candidate of
    the problem is not compiled yet."""
    a = torch.zeros(256, 512, dtype=torch.bfloat16)
    b = torch.zeros(512, 4096, dtype=torch.bfloat16)
    out = torch.zeros(256, 4096, dtype=torch.bfloat16)
    mm = sys.modules["argus.ops.matmul"]
    problem, _ = mm.problem_of(a, b, out)
    scheds = tune.tuning_candidates(problem)
    log = _Log()
    current = {}

    def matmul(x, y, o=None, *, schedule=None, **_):
        if schedule not in log.built:
            log.events.append(("build", schedule))
            log.built.add(schedule)
        current["s"] = schedule
        return out if o is None else o

    def measure(fn, *, trials, warmup=0, allow_few_trials=False, **_):
        fn()
        s = current["s"]
        missing = [c for c in scheds if c not in log.built]
        assert not missing, f"timing {s} with {len(missing)} candidates not built yet"
        log.events.append(("time", s))
        ms = 1.0 + scheds.index(s)
        return timing.Timing(ms, ms, ms, ms, 0.0, trials, warmup, "fake", False, "cpu",
                             samples_ms=(ms,) * trials)

    monkeypatch.setattr(argus.ops, "matmul", matmul)
    monkeypatch.setattr(timing, "measure", measure)
    monkeypatch.setattr(mm, "device_name", lambda device: "fake GPU")
    monkeypatch.setattr(tune, "store_choice", lambda *args: None)
    return a, b, out, scheds, log


def test_tune_matmul_builds_all_candidates_first(fake_matmul):
    a, b, out, scheds, log = fake_matmul
    result = tune.tune_matmul(a, b, out, trials=5, finalists=2, rounds=2, progress=None)
    assert result.best == scheds[0] and not result.failed
    kinds = [k for k, _ in log.events]
    # tune_matmul's checking call (GemmSchedule()) may build one more schedule, first
    assert {s for k, s in log.events if k == "build"} >= set(scheds)
    assert "build" not in kinds[kinds.index("time"):]


@pytest.fixture
def fake_scaled(monkeypatch):
    """tune_scaled_matmul on CPU tensors: the device check passes, the op and the clock are
    fakes, the choice is recorded into a list."""
    sm = sys.modules["argus.ops.scaled_matmul"]
    monkeypatch.setattr(sm, "check_on_one_gpu", lambda who, named: None)
    a = torch.zeros(4096, 1024, dtype=torch.float8_e4m3fn)
    w = torch.zeros(2048, 1024, dtype=torch.float8_e4m3fn)
    one = torch.ones(1)
    out = torch.zeros(4096, 2048, dtype=torch.bfloat16)
    problem = fp8_schedules.Fp8Problem(4096, 2048, 1024, "bf16", True)
    scheds = fp8_schedules.candidates(problem)
    log = _Log()
    current = {}

    def op(x, y, sa, sb, out_dtype=None, out=None, *, schedule=None):
        if schedule not in log.built:
            log.events.append(("build", schedule))
            log.built.add(schedule)
        current["s"] = schedule
        return out

    def measure(fn, *, trials, warmup=0, allow_few_trials=False, **_):
        fn()
        s = current["s"]
        assert all(c in log.built for c in scheds), f"timing {s} before every build"
        log.events.append(("time", s))
        ms = {True: 1.0, False: 2.0}[s == scheds[-1]] + 0.01 * scheds.index(s)
        return timing.Timing(ms, ms, ms, ms, 0.0, trials, warmup, "fake", False, "cpu",
                             samples_ms=(ms,) * trials)

    recorded = []
    monkeypatch.setattr(argus.ops, "scaled_matmul", op)
    monkeypatch.setattr(timing, "measure", measure)
    monkeypatch.setattr(sys.modules["argus.ops.matmul"], "device_name", lambda d: "fake GPU")
    monkeypatch.setattr(fp8_schedules, "store_choice",
                        lambda gpu, p, s, ms: recorded.append((gpu, p, s, ms)))
    return a, w, one, out, problem, scheds, log, recorded


def test_tune_scaled_matmul_builds_first_and_records_the_fastest(fake_scaled):
    a, w, one, out, problem, scheds, log, recorded = fake_scaled
    assert len(scheds) >= 3
    result = tune.tune_scaled_matmul(a, w, one, one, out, trials=5, finalists=3, rounds=2,
                                     progress=None)
    assert result.problem == problem
    assert result.best == scheds[-1] and result.best_ms == pytest.approx(1.0 + 0.01 *
                                                                         (len(scheds) - 1))
    assert recorded == [("fake GPU", problem, scheds[-1], pytest.approx(result.best_ms))]
    kinds = [k for k, _ in log.events]
    # the heuristic's checking call builds one candidate before the build phase, which
    # builds the rest: every build before the first timing
    assert kinds.index("time") == len(scheds)
    assert kinds.count("build") == len(scheds) and "build" not in kinds[len(scheds):]
    # each candidate screened once, the three fastest twice more in the finals
    times = [s for k, s in log.events if k == "time"]
    assert len(times) == len(scheds) + 3 * 2


def test_tune_scaled_matmul_refuses_bad_arguments(fake_scaled):
    a, w, one, out, *_ = fake_scaled
    with pytest.raises(ValueError, match="must all be >= 1"):
        tune.tune_scaled_matmul(a, w, one, one, out, rounds=0)


def test_the_tuned_set_holds_the_tail_splits_where_the_last_wave_is_mostly_empty():
    """2048x7168x2048 x @ W.T (the lowest tuned case, 448 tiles of 128 x 256 on 132 SMs): the
    tuner times the tail-split schedule beside the model's candidates; the model's own set
    (what an untuned call picks from) stays without it."""
    p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    tails = tail_split_candidates(p)
    assert tails and all(s.tail_splits > 1 for s in tails)
    todo = tune.tuning_candidates(p)
    assert todo[:len(candidates(p))] == candidates(p) and set(tails) <= set(todo)
    assert not [s for s in candidates(p) if s.tail_splits > 1]
    full = Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True)    # last wave 88% full
    assert tune.tuning_candidates(full) == candidates(full)
    tf32 = Problem(2048, 7168, 2048, 1, "tf32", "f32", "nk", True)
    assert not [s for s in tune.tuning_candidates(tf32) if s.tail_splits > 1]
