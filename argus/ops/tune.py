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
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable
from dataclasses import dataclass

from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, candidates, store_choice


@dataclass(frozen=True)
class TuneResult:
    """What tuning found: the problem, the winner and its pooled median, every screen time."""

    problem: Problem
    best: GemmSchedule
    best_ms: float
    screened: tuple[tuple[float, GemmSchedule], ...]      # (median ms, schedule), fastest first
    finals: tuple[tuple[float, GemmSchedule], ...]        # the finalists' pooled medians
    failed: tuple[tuple[GemmSchedule, str], ...] = ()     # candidates that did not run, and why

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


def _tune(problem, a, b, out, trials, finalists, rounds, record, progress,
          precision=None) -> TuneResult:
    """tune_matmul's two passes on checked, problem-shaped operands."""
    import torch

    from argus.runtime.timing import MIN_TRIALS, measure, measure_alternating
    from argus.ops import matmul
    from argus.ops.matmul import device_name, forget_choices

    kw = {"precision": precision} if precision is not None else {}
    say = progress or (lambda line: None)
    todo = candidates(problem)
    bar = None
    if progress is _stderr:     # the default: a progress bar with ETA (plain lines in a log)
        from argus.runtime.progress import Progress

        bar = Progress(len(todo), f"tune_matmul {problem.key}").__enter__()
        say = bar.note
    step = bar.advance if bar is not None else say
    screened, failed = [], []
    for i, s in enumerate(todo, 1):
        try:
            t = measure(lambda s=s: matmul(a, b, out, schedule=s, **kw),
                        trials=trials, warmup=5,
                        allow_few_trials=True)
        except Exception as e:  # noqa: BLE001 - a candidate that cannot run is reported, skipped
            failed.append((s, f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"))
            step(f"[{i}/{len(todo)}] {problem.key}: failed: {failed[-1][1]}")
            continue
        screened.append((t.median_ms, s))
        step(f"[{i}/{len(todo)}] {problem.key}: {t.median_ms * 1e3:9.1f} us  {s}")
    if bar is not None:
        bar.__exit__(None, None, None)
    if not screened:
        raise RuntimeError(f"tune_matmul: no candidate schedule ran for {problem.key}: "
                           + "; ".join(why for _, why in failed))
    screened.sort(key=lambda r: r[0])
    top = [s for _, s in screened[:finalists]]
    if len(top) > 1:
        timings = measure_alternating(
            [lambda s=s: matmul(a, b, out, schedule=s, **kw) for s in top],
            rounds=rounds,
            trials=MIN_TRIALS, warmup=5,
            on_round=lambda r, so_far: say(f"final round {r + 1}/{rounds}: " + ", ".join(
                f"{t.median_ms * 1e3:.1f} us" for t in so_far)))
        finals = sorted(((t.median_ms, s) for t, s in zip(timings, top)), key=lambda r: r[0])
    else:
        finals = [screened[0]]
    best_ms, best = finals[0]
    if record:
        store_choice(device_name(out.device), problem, best, best_ms)
        forget_choices()   # the next plain matmul() reads the new choice
    if out.is_cuda:
        torch.cuda.synchronize(out.device)
    return TuneResult(problem, best, best_ms, tuple(screened), tuple(finals), tuple(failed))
