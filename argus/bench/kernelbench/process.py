"""The parent side of a worker subprocess: start it, send a command, wait with a timeout, kill.

Each worker runs `python -m argus.bench.kernelbench.worker ROLE` in its own session (process
group), with the repository on PYTHONPATH and its stderr in a log file. A command that does not
answer within its timeout, or a worker that dies, becomes a `WorkerError` with the reason code
"timeout" or "crash" and the tail of the log, never a hang of the judge.

Invariant: this module only ever signals process groups it started itself.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from argus.bench.kernelbench.tasks import repo_root

# Starts a worker. The real `argus` package is imported when it can be (solutions need it);
# when its __init__ needs something this Python lacks (a GPU box with only torch), the harness
# modules are loaded on their own through namespace stubs, and the failure is logged.
BOOTSTRAP = """
import time
_boot = time.perf_counter()
import os, sys, types
root = sys.argv[1]
sys.path.insert(0, root)
try:
    import argus
except Exception as exc:
    print(f"argus package not importable ({type(exc).__name__}: {exc}); "
          "loading only argus.bench", file=sys.stderr)
    for name in [m for m in sys.modules if m == "argus" or m.startswith("argus.")]:
        del sys.modules[name]
    for name, sub in (("argus", "argus"), ("argus.bench", os.path.join("argus", "bench"))):
        stub = types.ModuleType(name)
        stub.__path__ = [os.path.join(root, sub)]
        sys.modules[name] = stub
import importlib
for name in filter(None, os.environ.get("ARGUS_KB_PRELOAD", "").split(",")):
    try:
        importlib.import_module(name)
    except Exception as exc:
        print(f"preloading {name} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
from argus.bench.kernelbench.worker import ROLES, serve
sys.exit(serve(sys.argv[2], time.perf_counter() - _boot))
"""
# Modules a candidate started ahead imports while it waits (ARGUS_KB_PRELOAD): a composed
# solution's first forward otherwise imports torch._dynamo (through torch's meta-device
# references, several seconds) and the compose runtime after the judge asked for it.
CANDIDATE_PRELOAD = "torch._dynamo,argus.compose.runtime"


class WorkerError(Exception):
    """A worker failed: kind is a reason code (timeout, crash, load_error, runtime_error...)."""

    def __init__(self, kind: str, message: str, reply: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = kind
        self.reply = reply or {}


class Worker:
    """One live worker process of a role ("reference", "candidate" or "baseline")."""

    def __init__(self, role: str, log_path: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None):
        self.role = role
        self.log_path = Path(log_path)
        full_env = dict(os.environ)
        root = str(repo_root())
        full_env["PYTHONPATH"] = root + (os.pathsep + full_env["PYTHONPATH"]
                                         if full_env.get("PYTHONPATH") else "")
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", BOOTSTRAP, root, role],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=full_env, cwd=str(cwd) if cwd else None, start_new_session=True)
        self._buffer = b""

    def log_tail(self, chars: int = 2000) -> str:
        try:
            self._log.flush()
            text = self.log_path.read_bytes()[-chars:].decode("utf-8", "replace")
        except OSError:
            return ""
        return text

    def request(self, op: str, timeout: float, **args: Any) -> dict[str, Any]:
        """Send one command; return its reply, or raise WorkerError."""
        if self.proc.poll() is not None:
            raise WorkerError("crash", self._death_message())
        line = json.dumps({"op": op, **args}, default=str) + "\n"
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            self.kill()
            raise WorkerError("crash", self._death_message()) from None
        reply_line = self._read_line(timeout)
        if reply_line is None:  # timed out
            self.kill()
            raise WorkerError("timeout", f"{self.role} worker: `{op}` did not finish within "
                                         f"{timeout:.0f} s\n{self.log_tail()}")
        if reply_line == "":  # end of file: the process is dying or dead
            raise WorkerError("crash", self._death_message())
        reply = json.loads(reply_line)
        if not reply.get("ok"):
            raise WorkerError(reply.get("kind", "worker_error"),
                              reply.get("error", "unknown error")
                              + ("\n" + reply["traceback"] if reply.get("traceback") else ""),
                              reply)
        return reply

    def _read_line(self, timeout: float) -> str | None:
        """One reply line; None on timeout, "" when the worker closed its end (died)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while b"\n" not in self._buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                if not sel.select(left):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    return ""
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def _death_message(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        how = f"exit code {code}"
        if code is not None and code < 0:
            try:
                how = f"killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"killed by signal {-code}"
        return f"{self.role} worker died ({how})\n{self.log_tail()}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # our own session, started above
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        """End the worker. It holds nothing worth a graceful exit (its log is unbuffered), and
        torch's interpreter teardown costs most of a second, so it is killed."""
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream:
                    stream.close()
            except OSError:
                pass
        self._log.close()

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalWorker:
    """A role run inside this process, behind the same `request` interface as `Worker`: the
    judge's own reference when judging `direct` (its tensors then never leave the process).
    No timeout can be enforced on a call in this process; an exception becomes a WorkerError
    with the role's reason code, like a worker's error reply."""

    def __init__(self, role: str):
        from argus.bench.kernelbench.worker import ROLES

        self.role = role
        self.impl = ROLES[role]()
        self.proc = _Alive()

    def request(self, op: str, timeout: float, **args: Any) -> dict[str, Any]:
        import torch

        from argus.bench.kernelbench.worker import WorkerFailure

        started = time.perf_counter()
        try:
            reply = {"ok": True, **getattr(self.impl, op)(**args)}
        except WorkerFailure as exc:
            raise WorkerError(exc.kind, str(exc)) from exc
        except torch.OutOfMemoryError as exc:  # type: ignore[attr-defined]
            raise WorkerError("out_of_memory", str(exc)[:2000]) from exc
        except Exception as exc:
            raise WorkerError("worker_error", f"{type(exc).__name__}: {exc}") from exc
        reply["seconds"] = time.perf_counter() - started
        return reply

    def log_tail(self, chars: int = 2000) -> str:
        return ""

    def kill(self) -> None:
        self.impl = None

    def close(self) -> None:
        self.impl = None

    def __enter__(self) -> LocalWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Alive:
    """`proc` of a LocalWorker: always running (poll() is None)."""

    pid = os.getpid()

    @staticmethod
    def poll() -> None:
        return None
