"""Tune a matmul shape on this GPU: time every candidate schedule, re-time the fastest few
side by side, and record the winner in the on-disk cache that `argus.ops.matmul` reads.

    from argus.ops import tune_matmul
    result = tune_matmul(x, w.T)          # once per shape and card (again after an upgrade
                                          # that changes the candidates: the stale entry is
                                          # then ignored)
    y = argus.ops.matmul(x, w.T)          # from now on runs result.best

Two passes, because one short timing per candidate is easily fooled: a card that heats up
during tuning runs the later candidates slower, and a lucky run can make a candidate look
several percent faster than it stays (seen on the H200 at 8192^3: 1557 us in a 20-call
screen, 1830 us over the next 100 calls). The screen times each candidate for `trials` calls;
the `finalists` fastest are then timed again in alternating rounds of 100 calls each, so that
drift falls on all of them alike, and the pooled median decides.

Every candidate is built (compiled, launched once, the device synchronized) before the first
one is timed (`build_then_time`): a candidate's first call compiles it for 1-5 s of CPU, and
a compile inside a timed candidate's warm-up left the card idle and clocked down for its few
timed calls (on the H200 the same fp8 schedules timed 103-119 us in one run and 175-189 us in
another, docs/perf/fp8.md 2026-12-04). `tune_scaled_matmul` does the same for
`argus.ops.scaled_matmul` over `argus.ops.fp8_schedules.candidates`.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, candidates, store_choice, tail_split_candidates


@dataclass(frozen=True)
class TuneResult:
    """What tuning found: the problem, the winner and its pooled median, every screen time."""

    problem: Any            # schedules.Problem (tune_matmul) or fp8_schedules.Fp8Problem
    best: Any               # GemmSchedule or Fp8GemmSchedule
    best_ms: float
    screened: tuple[tuple[float, Any], ...]      # (median ms, schedule), fastest first
    finals: tuple[tuple[float, Any], ...]        # the finalists' pooled medians
    failed: tuple[tuple[Any, str], ...] = ()     # candidates that did not run, and why

    def table(self) -> str:
        """The screen, fastest first, the winner marked."""
        lines = [f"{self.problem.key}: best {self.best_ms * 1e3:.1f} us"]
        finals = {s: ms for ms, s in self.finals}
        for ms, s in self.screened:
            mark = "*" if s == self.best else " "
            final = f" (final {finals[s] * 1e3:.1f} us)" if s in finals else ""
            lines.append(f" {mark} {ms * 1e3:9.1f} us{final}  {s}")
        lines += [f"   failed: {s}: {why}" for s, why in self.failed]
        return "\n".join(lines)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def tune_matmul(a, b, out=None, *, trials: int = 20, finalists: int = 3, rounds: int = 3,
                record: bool = True, progress: Callable[[str], None] | None = _stderr,
                precision: str | None = None) -> TuneResult:
    """Tune `a @ b` (into `out`, or a new tensor of a's dtype) over
    `argus.ops.schedules.candidates` and, with `record`, store the winner for this GPU.

    trials: calls per candidate in the screen; finalists: how many of the fastest are timed
    again, in `rounds` alternating rounds of 100 calls; progress: called with one line per
    candidate (None: silent); precision: matmul's ("tf32" for fp32 inputs: the tf32 problem's
    own candidates and tuning entry)."""
    import torch

    from argus.ops import matmul
    from argus.ops.matmul import problem_of

    if trials < 1 or finalists < 1 or rounds < 1:
        raise ValueError(f"tune_matmul: trials={trials}, finalists={finalists} and "
                         f"rounds={rounds} must all be >= 1")
    # checks the inputs (clear errors), with a schedule every problem can run: not the cached
    # choice, which may be the stale entry this tuning is meant to replace
    # only a tf32 request passes precision on (the plain call stays what it was)
    kw = {"precision": precision} if precision is not None else {}
    out = matmul(a, b, out, schedule=GemmSchedule(bk=32) if precision == "tf32" else
                 GemmSchedule(), **kw)
    problem, (a, b, out) = problem_of(a, b, out, *kw.values())
    if min(problem.m, problem.n, problem.k) == 0:
        raise ValueError(f"tune_matmul: nothing to tune for the empty problem {problem.key} "
                         f"(M, N or K is 0; matmul returns at once)")
    # time where the operands live, whichever device is current
    with torch.cuda.device(out.device) if out.is_cuda else contextlib.nullcontext():
        return _tune(problem, a, b, out, trials, finalists, rounds, record, progress,
                     precision)


def tuning_candidates(problem: Problem) -> list[GemmSchedule]:
    """What tune_matmul times: `schedules.candidates` (the untuned model's choices) plus the
    tail-split schedules (GemmSchedule.tail_splits: the persistent walk's last, mostly empty
    wave in K slices, summed by a second kernel, and the same with tail_finish="fused": summed
    by the last slice to arrive, in the GEMM) where the last wave is under 60% full, e.g.
    2048x7168x2048 (448 tiles of 128 x 256 on 132 SMs, the lowest tuned case at 0.92-0.98x
    cuBLAS). They were slower than the plain kernel in every case measured (docs/perf/gemm.md
    run 5, cb28b39, before the K loop's bookkeeping cut), so the model never picks them and
    they stay out of `candidates` (the fused finish is not measured yet); the tuner times them
    beside the others and keeps one only where it is faster on the card. Not for tf32 (their K-slice checks assume 16-bit
    elements)."""
    todo = candidates(problem)
    if problem.in_dtype == "tf32":
        return todo
    tails = tail_split_candidates(problem) + tail_split_candidates(problem, "fused")
    return todo + [s for s in tails if s not in todo]


def _why(e: Exception) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"


def build_then_time(todo: list, build: Callable[[Any], Callable[[], Any]],
                    screen: Callable[[Callable[[], Any]], float],
                    finals: Callable[[list[Callable[[], Any]]], list[float]], *,
                    finalists: int, say: Callable[[str], None] = lambda line: None,
                    label: str = "") -> tuple[list, list, list]:
    """The tuning procedure, timer and builder injected (tests give fakes): three phases that
    never overlap.

    1. build: `build(s)` for every candidate, in order, each returning when its kernel is
       compiled and has run once on the device (so nothing compiles, and no first-call work
       is left, once timing starts); it returns the call to time. A candidate whose build
       raises is reported in `failed` and never timed.
    2. screen: `screen(call)` -> median ms for every built candidate.
    3. finals: `finals(calls)` -> pooled median ms of the `finalists` fastest, timed side by
       side (alternating rounds), unless only one is left.

    Returns (screened, finals, failed): (ms, schedule) fastest first, the same for the
    finalists, (schedule, why) of those that did not build or run."""
    built, failed = [], []
    for i, s in enumerate(todo, 1):
        try:
            built.append((s, build(s)))
        except Exception as e:  # noqa: BLE001 - a candidate that cannot run is reported, skipped
            failed.append((s, _why(e)))
            say(f"[build {i}/{len(todo)}] {label}: failed: {failed[-1][1]}  {s}")
    screened = []
    for i, (s, call) in enumerate(built, 1):
        try:
            ms = screen(call)
        except Exception as e:  # noqa: BLE001 - built but failed to run: reported, skipped
            failed.append((s, _why(e)))
            say(f"[{i}/{len(built)}] {label}: failed: {failed[-1][1]}")
            continue
        screened.append((ms, s))
        say(f"[{i}/{len(built)}] {label}: {ms * 1e3:9.1f} us  {s}")
    screened.sort(key=lambda r: r[0])
    calls = dict(built)
    top = [s for _, s in screened[:finalists]]
    if len(top) > 1:
        final = sorted(zip(finals([calls[s] for s in top]), top), key=lambda r: r[0])
    else:
        final = screened[:1]
    return screened, final, failed


def _timers(trials: int, rounds: int, say: Callable[[str], None]):
    """The screen (`trials` calls per candidate) and the finals (`rounds` alternating rounds
    of MIN_TRIALS calls each, pooled) on argus.runtime.timing, L2 flushed before each call."""
    from argus.runtime import timing

    def screen(call):
        return timing.measure(call, trials=trials, warmup=5, allow_few_trials=True).median_ms

    def finals(calls):
        timings = timing.measure_alternating(
            calls, rounds=rounds, trials=timing.MIN_TRIALS, warmup=5,
            on_round=lambda r, so_far: say(f"final round {r + 1}/{rounds}: " + ", ".join(
                f"{t.median_ms * 1e3:.1f} us" for t in so_far)))
        return [t.median_ms for t in timings]
    return screen, finals


def _built(call: Callable[[], Any], device) -> Callable[[], Any]:
    """Run `call` once (its first call compiles and prepares the launch) and wait for the
    device, so that its build and first run are over before anything is timed; returns it."""
    import torch

    call()
    if getattr(device, "type", None) == "cuda":
        torch.cuda.synchronize(device)
    return call


def _tune(problem, a, b, out, trials, finalists, rounds, record, progress,
          precision=None) -> TuneResult:
    """tune_matmul's phases (build_then_time) on checked, problem-shaped operands."""
    import torch

    from argus.ops import matmul
    from argus.ops.matmul import device_name, forget_choices

    kw = {"precision": precision} if precision is not None else {}
    say = progress or (lambda line: None)
    todo = tuning_candidates(problem)
    bar = None
    if progress is _stderr:     # the default: a progress bar with ETA (plain lines in a log)
        from argus.runtime.progress import Progress

        bar = Progress(2 * len(todo), f"tune_matmul {problem.key}").__enter__()
        say = bar.note

    def build(s):
        call = _built(lambda: matmul(a, b, out, schedule=s, **kw), out.device)
        if bar is not None:
            bar.advance(f"built {s}")
        return call

    screen, finals = _timers(trials, rounds, say)
    try:
        screened, final, failed = build_then_time(
            todo, build, screen, finals, finalists=finalists,
            say=bar.advance if bar is not None else say, label=problem.key)
    finally:
        if bar is not None:
            bar.__exit__(None, None, None)
    if not screened:
        raise RuntimeError(f"tune_matmul: no candidate schedule ran for {problem.key}: "
                           + "; ".join(why for _, why in failed))
    best_ms, best = final[0]
    if record:
        store_choice(device_name(out.device), problem, best, best_ms)
        forget_choices()   # the next plain matmul() reads the new choice
    if out.is_cuda:
        torch.cuda.synchronize(out.device)
    return TuneResult(problem, best, best_ms, tuple(screened), tuple(final), tuple(failed))


def tune_scaled_matmul(a, b, scale_a, scale_b, out=None, *, trials: int = 20,
                       finalists: int = 3, rounds: int = 3, record: bool = True,
                       progress: Callable[[str], None] | None = _stderr,
                       schedules: Callable[[Any], list] | None = None) -> TuneResult:
    """Tune `argus.ops.scaled_matmul(a, b, scale_a, scale_b, out=out)` (per-tensor or block
    scales, as the scales say) over `argus.ops.fp8_schedules.candidates`: every candidate
    built first, then screened for `trials` calls, the `finalists` fastest timed again in
    `rounds` alternating rounds of 100 calls; with `record`, the winner is stored for this
    GPU and the next plain call runs it. progress: one line per candidate (None: silent);
    schedules: the candidate set as a function of the Fp8Problem (default
    fp8_schedules.candidates; e.g. fp8_schedules.promoted_candidates)."""
    import torch

    from argus.ops import fp8_schedules
    from argus.ops import scaled_matmul as op
    from argus.ops.matmul import device_name
    from argus.ops.scaled_matmul import forget_choices

    if trials < 1 or finalists < 1 or rounds < 1:
        raise ValueError(f"tune_scaled_matmul: trials={trials}, finalists={finalists} and "
                         f"rounds={rounds} must all be >= 1")
    # checks the inputs (clear errors) and makes `out`, with the heuristic's schedule: not a
    # cached choice, which may be the stale entry this tuning replaces
    out = op(a, b, scale_a, scale_b, out=out,
             schedule=fp8_schedules.heuristic(_fp8_problem(a, b, scale_a, scale_b, out)))
    problem = _fp8_problem(a, b, scale_a, scale_b, out)
    if min(problem.m, problem.n, problem.k) == 0:
        raise ValueError(f"tune_scaled_matmul: nothing to tune for the empty problem "
                         f"{problem.key} (M, N or K is 0; scaled_matmul returns at once)")
    say = progress or (lambda line: None)

    def build(s):
        return _built(lambda: op(a, b, scale_a, scale_b, out=out, schedule=s), out.device)

    screen, finals = _timers(trials, rounds, say)
    with torch.cuda.device(out.device) if out.is_cuda else contextlib.nullcontext():
        screened, final, failed = build_then_time(
            (schedules or fp8_schedules.candidates)(problem), build, screen, finals,
            finalists=finalists,
            say=say, label=problem.key)
    if not screened:
        raise RuntimeError(f"tune_scaled_matmul: no candidate schedule ran for {problem.key}: "
                           + "; ".join(why for _, why in failed))
    best_ms, best = final[0]
    if record:
        fp8_schedules.store_choice(device_name(out.device), problem, best, best_ms)
        forget_choices()   # the next plain scaled_matmul() reads the new choice
    return TuneResult(problem, best, best_ms, tuple(screened), tuple(final), tuple(failed))


def _fp8_problem(a, b, scale_a, scale_b, out):
    """The Fp8Problem scaled_matmul keys its choice by (out None: a new bf16 tensor, which
    is TMA-aligned)."""
    from argus.ops.fp8_schedules import Fp8Problem
    from argus.ops.scaled_matmul import _OUT, _aligned, _check

    block = _check(a, b, scale_a, scale_b, out)
    if out is None or str(out.dtype) not in _OUT:   # the op makes bf16 (or refuses the dtype)
        return Fp8Problem(a.shape[0], b.shape[0], a.shape[1], "bf16", True, block)
    out_type = _OUT[str(out.dtype)]
    return Fp8Problem(a.shape[0], b.shape[0], a.shape[1], out_type.name,
                      _aligned(out, out_type.bytes), block)
