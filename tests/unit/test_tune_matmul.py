"""argus.ops.tune_matmul's decision, on the CPU with the timer and the launch replaced: the
screen times every candidate, the fastest few are timed again side by side, and the pooled
final median, not the screen, picks what is recorded."""

from __future__ import annotations

import sys

import pytest
import torch

import argus.ops
from argus.runtime import timing
from argus.ops import tune_matmul
from argus.ops.tune import tuning_candidates


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
    scheds = tuning_candidates(problem)
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
    problem, (fa, _, fo) = mm.problem_of(a, w.T, out)
    assert (problem.m, problem.n, problem.k, problem.batch) == (128, 128, 64, 1)
    assert problem.b_layout == "nk" and fa.shape == (128, 64) and fo.shape == (128, 128)
    one, _ = mm.problem_of(a[:1], w.T.unsqueeze(0), out[:1])
    assert (one.m, one.batch) == (32, 1)


def test_a_non_contiguous_out_tunes_the_buffer_matmul_uses():
    """A shared-weight batch whose out cannot be flattened runs into a buffer of out's own
    dtype (then copied): problem_of names that problem, dtype and alignment included."""
    mm = sys.modules["argus.ops.matmul"]
    a = torch.zeros(2, 64, 128, dtype=torch.bfloat16)
    w = torch.zeros(256, 128, dtype=torch.bfloat16)
    for dtype in (torch.float32, torch.bfloat16):
        pitched = torch.zeros(2, 64, 260, dtype=dtype)[..., :256]     # rows 260 apart
        problem, (_, _, flat_out) = mm.problem_of(a, w.T, pitched)
        assert flat_out.is_contiguous() and flat_out.dtype == dtype
        assert problem.out_dtype == {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype]
        assert problem.tma_store_ok                                   # the fresh buffer is
        _, fresh, copy_back = mm._shared_weight_flat(a, w.T, pitched)
        assert copy_back and fresh.dtype == dtype and fresh.shape == (128, 256)
    flat_a, view, copy_back = mm._shared_weight_flat(a, w.T, torch.zeros(2, 64, 256))
    assert not copy_back and view.shape == (128, 256)


def test_an_empty_problem_is_refused(fake, monkeypatch):
    _, _, _, _, _, recorded = fake
    a, b = torch.zeros(0, 512, dtype=torch.bfloat16), torch.zeros(512, 64, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="nothing to tune"):
        tune_matmul(a, b, torch.zeros(0, 64, dtype=torch.bfloat16))
    assert recorded == []


def test_choose_trusts_only_entries_from_todays_candidates(tmp_path, monkeypatch):
    """A tuned entry recorded from another candidate set (an older Argus) or naming an
    illegal schedule is ignored: the untuned choice runs until the shape is tuned again."""
    from argus.kernels.gemm import GemmSchedule
    from argus.ops import schedules, tuning_cache

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    p = schedules.Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True)
    pick = GemmSchedule(bn=128, stages=6, epilogue="tma", cluster_m=2)
    assert pick != schedules.untuned(p)
    schedules.store_choice("gpu", p, pick, 1.0)
    assert schedules.choose(p, "gpu") == pick
    tuning_cache.record("matmul", "gpu", p.key, pick, 1.0, candidates="0123456789abcdef")
    assert schedules.choose(p, "gpu") == schedules.untuned(p)             # stale
    tuning_cache.record("matmul", "gpu", p.key, pick, 1.0)                 # legacy: no print
    assert schedules.choose(p, "gpu") == pick
    data = tuning_cache.load("matmul", "gpu")
    data[p.key]["schedule"]["store_cols"] = -64                           # illegal now
    tuning_cache.cache_file("matmul", "gpu").write_text(__import__("json").dumps(data))
    assert schedules.choose(p, "gpu") == schedules.untuned(p)


def test_store_cols_validation_and_the_agents_space():
    from argus.agent.families import get_family
    from argus.agent.task import TaskSpec
    from argus.kernels.gemm import GemmSchedule

    for bad in (None, -16, 1.5):
        with pytest.raises(ValueError, match="must be an int >= 0"):
            GemmSchedule(epilogue="tma", store_cols=bad)
    family = get_family("gemm")
    for out, allowed in (("f32", (0,)), ("bf16", (0, 64, 128))):
        task = TaskSpec("gemm", "t", "argus", "x", (("M", 512), ("N", 512), ("K", 512)), out,
                        "bf16", options=(("in", "bf16"), ("out", out), ("b_layout", "nk")))
        assert family.space(task)["store_cols"] == allowed
    p = family.normalize(task, {**family.default_params(task), "store_cols": 128,
                                "epilogue": "direct"})
    assert p["store_cols"] == 0


def test_measure_alternating_interleaves_and_pools():
    """Rounds alternate between the functions; each Timing pools every round's samples."""
    order, rounds_seen = [], []
    fns = [lambda: order.append("a"), lambda: order.append("b")]
    pooled = timing.measure_alternating(fns, rounds=3, trials=timing.MIN_TRIALS, warmup=1,
                                        on_round=lambda r, so_far: rounds_seen.append(
                                            (r, [t.trials for t in so_far])))
    per_round = timing.MIN_TRIALS + 1                      # warm-up plus timed calls
    assert "".join(order) == ("a" * per_round + "b" * per_round) * 3
    assert [t.trials for t in pooled] == [3 * timing.MIN_TRIALS] * 2
    assert rounds_seen == [(r, [(r + 1) * timing.MIN_TRIALS] * 2) for r in range(3)]
    for t in pooled:
        assert t.min_ms <= t.median_ms <= t.max_ms and len(t.samples_ms) == t.trials
