"""Progress of a long command (argus optimize, argus kernelbench run, argus.ops.tune_matmul):
a rich progress bar with the elapsed time and an ETA when the output is a terminal, plain
lines (each with [i/n], elapsed and ETA) when it is a file or a pipe, so logs stay readable.

    with Progress(total=20, description="optimize relu") as bar:
        for ...:
            bar.advance("[3/20] ok 0.41 ms ...")   # the step's line, then the bar moves
            bar.note("  event: ...")               # a line that does not move the bar

Lines are never cut: a terminal wraps them; a log keeps them whole.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


def _fmt(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


class Progress:
    """`total` steps of `description` on `stream` (stderr by default). `done` steps already
    finished (a resumed run) count toward the bar but not toward the ETA's rate."""

    def __init__(self, total: int, description: str = "", *, stream: TextIO | None = None,
                 done: int = 0, enabled: bool = True, terminal: bool | None = None):
        self.total = max(int(total), 0)
        self.description = description
        self.stream = stream if stream is not None else sys.stderr
        self.done = done
        self.enabled = enabled
        self.terminal = (terminal if terminal is not None
                         else bool(getattr(self.stream, "isatty", lambda: False)()))
        self._start_done = done
        self._t0 = time.monotonic()
        self._rich = None
        self._task = None

    # -- context ---------------------------------------------------------------------------
    def __enter__(self) -> "Progress":
        self._t0 = time.monotonic()
        if self.enabled and self.terminal:
            from rich.console import Console
            from rich.progress import (BarColumn, MofNCompleteColumn, Progress as RichProgress,
                                       TextColumn, TimeElapsedColumn, TimeRemainingColumn)

            console = Console(file=self.stream, force_terminal=True)
            self._rich = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn(),
                                      TextColumn("ETA"), TimeRemainingColumn(),
                                      console=console, transient=False)
            self._rich.start()
            self._task = self._rich.add_task(self.description, total=self.total,
                                             completed=self.done)
        return self

    def __exit__(self, *exc) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    # -- steps -----------------------------------------------------------------------------
    def eta_s(self) -> float | None:
        fresh = self.done - self._start_done
        if fresh <= 0:
            return None
        return (time.monotonic() - self._t0) / fresh * max(self.total - self.done, 0)

    def note(self, line: str) -> None:
        """Print a line above the bar (or as a plain line)."""
        if not self.enabled:
            return
        if self._rich is not None:
            self._rich.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=self.stream, flush=True)

    def advance(self, line: str | None = None, steps: int = 1) -> None:
        """One step done: print its line, then move the bar (plain: add elapsed and ETA)."""
        self.done += steps
        if not self.enabled:
            return
        if self._rich is not None:
            if line:
                self.note(line)
            self._rich.update(self._task, completed=self.done)
            return
        if line is None:
            line = f"{self.description} [{self.done}/{self.total}]"
        eta = self.eta_s()
        timing = f"elapsed {_fmt(time.monotonic() - self._t0)}" + (
            f", eta {_fmt(eta)}" if eta is not None and self.done < self.total else "")
        print(f"{line} ({timing})", file=self.stream, flush=True)
