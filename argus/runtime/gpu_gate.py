"""A GPU shared by several processes: timing runs alone, other GPU work runs together.

When a run times kernels on one GPU while other processes compile, check correctness or build
references on it, the timings are only clean if nothing else runs on the GPU while a timing
runs. `GpuGate` is a reader-writer lock over files (flock), shared by every process that gets
the same path (the environment variable ARGUS_GPU_GATE, or an explicit path):

- `gate.exclusive()`: timing (the judge's timing of a solution, eager and torch.compile
  baselines, tuning runs that time candidates). Waits until no other holder is inside.
- `gate.shared()`: any other GPU work (references, correctness runs, comparisons). Many
  holders at once; none while an exclusive holder is inside.
- `gate.yielding()`: inside a shared hold, a CPU-only stretch (compiling a kernel with NVRTC):
  finishes this process's queued GPU work, lets go of the hold for the stretch, and takes it
  again, so a timing waiting for the gate does not wait for the compile.

Writers are preferred: an exclusive request takes a turnstile file first, which new shared
requests must pass, so a stream of correctness runs cannot starve a timing. flock locks belong
to an open file description, so threads of one process that open the files themselves exclude
each other like processes do. Without a path every method is a no-op (one process, one GPU
user: nothing to serialize).

Invariant: while an exclusive hold is inside, no shared hold is (on the same path).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator

ENV = "ARGUS_GPU_GATE"

_LOCAL = threading.local()   # per thread: the shared hold this thread is inside, if any


def _flock(fd: int, how: int) -> None:
    import fcntl

    fcntl.flock(fd, how)


class GpuGate:
    """See the module docstring. `path` None: ARGUS_GPU_GATE, or no gate at all."""

    def __init__(self, path: str | os.PathLike[str] | None = None):
        path = path if path is not None else os.environ.get(ENV) or None
        self.path = str(path) if path else None

    @property
    def active(self) -> bool:
        return self.path is not None

    def _open(self, suffix: str) -> int:
        assert self.path is not None
        return os.open(self.path + suffix, os.O_RDWR | os.O_CREAT, 0o644)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        if not self.active:
            yield
            return
        if holding_shared():
            # our own shared flock would block the exclusive one forever
            raise RuntimeError("GpuGate.exclusive() inside a shared hold of the same thread "
                               "would wait for itself: leave the shared hold first (or wrap "
                               "the timing in gate().yielding())")
        import fcntl

        turn, main = self._open(".turn"), self._open("")
        try:
            t0 = time.perf_counter()
            _flock(turn, fcntl.LOCK_EX)         # new shared requests queue behind us
            try:
                _flock(main, fcntl.LOCK_EX)     # the shared holders inside finish
            finally:
                _flock(turn, fcntl.LOCK_UN)
            _count("exclusive wait s", time.perf_counter() - t0)
            try:
                yield
            finally:
                _flock(main, fcntl.LOCK_UN)
        finally:
            os.close(turn)
            os.close(main)

    def _enter_shared(self) -> int:
        import fcntl

        turn, main = self._open(".turn"), self._open("")
        try:
            t0 = time.perf_counter()
            _flock(turn, fcntl.LOCK_EX)         # pass the turnstile (blocked while a
            _flock(turn, fcntl.LOCK_UN)         # writer waits or runs)
            _flock(main, fcntl.LOCK_SH)
            _count("shared wait s", time.perf_counter() - t0)
            _count("shared entries", 1)
        except BaseException:
            os.close(main)
            raise
        finally:
            os.close(turn)
        return main

    @contextlib.contextmanager
    def shared(self) -> Iterator[None]:
        if not self.active or getattr(_LOCAL, "fd", None) is not None:
            yield                               # no gate, or already inside a shared hold
            return
        _LOCAL.fd = self._enter_shared()
        try:
            yield
        finally:
            fd, _LOCAL.fd = _LOCAL.fd, None
            if fd is not None:
                os.close(fd)                    # closing the description drops the lock

    @staticmethod
    def holding_shared() -> bool:
        """Whether this thread is inside a shared hold (of any gate): the module's
        holding_shared()."""
        return holding_shared()

    @contextlib.contextmanager
    def yielding(self) -> Iterator[None]:
        fd = getattr(_LOCAL, "fd", None)
        if not self.active or fd is None:
            yield
            return
        _count("yields", 1)
        _sync_cuda()        # our queued kernels must not run into someone else's timing
        os.close(fd)
        _LOCAL.fd = None
        try:
            yield
        finally:
            _LOCAL.fd = self._enter_shared()


def _sync_cuda() -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _count(name: str, value: float) -> None:
    counts = getattr(_LOCAL, "counts", None)
    if counts is None:
        counts = _LOCAL.counts = {}
    counts[name] = counts.get(name, 0.0) + value


def wait_counts() -> dict[str, float]:
    """This thread's totals on every gate: seconds waited to enter shared holds ("shared wait
    s") and exclusive ones ("exclusive wait s"), shared entries and yields. Per thread: the
    judge's process judges one task per thread, and each task's account is its own."""
    return dict(getattr(_LOCAL, "counts", None) or {})


def holding_shared() -> bool:
    """Whether this thread is inside a shared hold (of any gate): cheap enough for every
    kernel launch."""
    return getattr(_LOCAL, "fd", None) is not None


_GATES: dict[str | None, GpuGate] = {}


def gate() -> GpuGate:
    """The process's gate: the one on ARGUS_GPU_GATE as it is now (a run that sets it for its
    workers gets the same gate in its own process)."""
    path = os.environ.get(ENV) or None
    if path not in _GATES:
        _GATES[path] = GpuGate(path)
    return _GATES[path]


__all__ = ["ENV", "GpuGate", "gate", "holding_shared", "wait_counts"]
