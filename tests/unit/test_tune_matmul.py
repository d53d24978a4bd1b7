"""argus.ops.tune_matmul's decision, on the CPU with the timer and the launch replaced: the
screen times every candidate, the fastest few are timed again side by side, and the pooled
final median, not the screen, picks what is recorded."""

from __future__ import annotations

import sys

import pytest
import torch

import argus.ops
from argus.bench import timing
from argus.ops import tune_matmul
from argus.ops.schedules import candidates


class _FakeClock:
    """measure() stand-in: the screen (few trials) sees `screen[s]`, the finals `final[s]`."""

    def __init__(self, screen, final):
        self.screen, self.final, self.calls = screen, final, []
        self.current = None

    def measure(self, fn, *, trials, warmup=0, allow_few_trials=False, **_):
        fn()                       # runs the fake matmul, which names the schedule
        s = self.current
        ms = self.screen[s] if trials < timing.MIN_TRIALS else self.final[s]
        self.calls.append((s, trials))
        return timing.Timing(ms, ms, ms, ms, 0.0, trials, warmup, "fake", False, "cpu",
                             samples_ms=(ms,) * trials)


@pytest.fixture
def fake(monkeypatch):
    a, b = torch.zeros(256, 512, dtype=torch.bfloat16), torch.zeros(512, 4096,
                                                                     dtype=torch.bfloat16)
    out = torch.zeros(256, 4096, dtype=torch.bfloat16)
    mm = sys.modules["argus.ops.matmul"]
    problem, _ = mm.problem_of(a, b, out)
    scheds = candidates(problem)
    # the screen ranks them in list order; in the finals the third one is fastest
    screen = {s: 1.0 + 0.1 * i for i, s in enumerate(scheds)}
    final = {s: 2.0 + 0.1 * i for i, s in enumerate(scheds)}
    final[scheds[2]] = 1.5
    clock = _FakeClock(screen, final)
    recorded = []

    def fake_matmul(x, y, o=None, *, schedule=None):
        clock.current = schedule
        return out if o is None else o

    monkeypatch.setattr(argus.ops, "matmul", fake_matmul)
    monkeypatch.setattr(timing, "measure", clock.measure)
    monkeypatch.setattr(mm, "device_name", lambda device: "fake GPU")
    monkeypatch.setattr(sys.modules["argus.ops.tune"], "store_choice",
                        lambda gpu, p, s, ms: recorded.append((gpu, p, s, ms)))
    return a, b, out, scheds, clock, recorded


def test_the_pooled_finals_decide_and_the_winner_is_recorded(fake):
    a, b, out, scheds, clock, recorded = fake
    lines = []
    result = tune_matmul(a, b, out, trials=20, finalists=3, rounds=2, progress=lines.append)
    assert result.best == scheds[2] and result.best_ms == pytest.approx(1.5)
    assert [s for _, s in result.screened] == scheds            # fastest first
    assert [s for _, s in result.finals] == [scheds[2], scheds[0], scheds[1]]
    assert recorded == [("fake GPU", result.problem, scheds[2], pytest.approx(1.5))]
    # every candidate screened once with the few trials, each finalist twice with 100
    screen_calls = [s for s, n in clock.calls if n == 20]
    final_calls = [s for s, n in clock.calls if n == timing.MIN_TRIALS]
    assert sorted(map(repr, screen_calls)) == sorted(map(repr, scheds))
    assert sorted(map(repr, final_calls)) == sorted(map(repr, scheds[:3] * 2))
    assert len(lines) == len(scheds) + 2                        # one per candidate and round
    assert "*" in result.table().splitlines()[3]                # the winner is marked


def test_one_finalist_takes_the_screen_and_nothing_is_recorded_on_request(fake):
    a, b, out, scheds, clock, recorded = fake
    result = tune_matmul(a, b, out, finalists=1, record=False, progress=None)
    assert result.best == scheds[0] and recorded == []
    assert all(n < timing.MIN_TRIALS for _, n in clock.calls)


def test_bad_arguments_are_refused(fake):
    a, b, out, *_ = fake
    with pytest.raises(ValueError, match="must all be >= 1"):
        tune_matmul(a, b, out, finalists=0)


def test_a_shared_weight_batch_tunes_the_flattened_problem():
    mm = sys.modules["argus.ops.matmul"]
    a = torch.zeros(4, 32, 64, dtype=torch.bfloat16)
    w = torch.zeros(128, 64, dtype=torch.bfloat16)
    out = torch.zeros(4, 32, 128, dtype=torch.bfloat16)
    problem, (fa, fb, fo) = mm.problem_of(a, w.T, out)
    assert (problem.m, problem.n, problem.k, problem.batch) == (128, 128, 64, 1)
    assert problem.b_layout == "nk" and fa.shape == (128, 64) and fo.shape == (128, 128)
    one, _ = mm.problem_of(a[:1], w.T.unsqueeze(0), out[:1])
    assert (one.m, one.batch) == (32, 1)
