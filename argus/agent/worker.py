"""Run candidates in a worker subprocess with a time limit, so that a crash, a hang or an illegal
address in one candidate is a recorded failure and the loop goes on.

Parent side: `WorkerClient.request(op, timeout, **args)` writes one JSON line to the worker's
stdin and waits for one JSON line back. A reply that does not come within the timeout kills
the worker's whole process group (`WorkerTimeout`); a worker that dies (segfault, abort, CUDA
illegal address taking the process down) raises `WorkerCrash` with its exit signal and the tail
of its log. Either way the next request starts a fresh worker.

Worker side (`python -m argus.agent.worker`): answers "ping", "screen" (load, static check, lower,
verify, estimate), "evaluate" (all stages, see evaluate.py), "artifacts" (the best candidate's
sources, CUDA and proven invariants) and "baseline" (an Argus example's PyTorch baseline). It
protects the protocol channel from prints (stdout is redirected to the log), dies with its
parent (PR_SET_PDEATHSIG), writes no core files, runs in a scratch directory, and gets an
environment without API keys. Candidate source is Python the user asked for; the worker also
refuses outgoing network connections from Python (socket.connect is replaced). This is
containment against accidents, not a security sandbox.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from argus.bench.kernelbench.process import close_pipes, how_it_ended, kill_session

_SECRET = re.compile(r"(API_KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)


class WorkerError(Exception):
    """The worker did not produce a reply."""

    kind = "error"


class WorkerTimeout(WorkerError):
    kind = "timeout"


class WorkerCrash(WorkerError):
    kind = "crash"


def scrubbed_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment without secrets and LLM settings (the worker needs neither)."""
    env = {k: v for k, v in os.environ.items()
           if not _SECRET.search(k) and not k.startswith("ARGUS_LLM_")}
    env["ARGUS_AGENT_SANDBOX"] = "1"
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


class WorkerClient:
    """One worker process at a time, restarted after a timeout or a crash."""

    def __init__(self, scratch: Path, *, python: str | None = None,
                 env: dict[str, str] | None = None):
        self.scratch = Path(scratch)
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.python = python or sys.executable
        self.env = env
        self.proc: subprocess.Popen | None = None
        self._lines: queue.Queue = queue.Queue()
        self._log = None
        self.restarts = 0
        self.log_path = self.scratch / "worker.log"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        self._log = open(self.log_path, "ab")
        self._lines = queue.Queue()
        self.proc = subprocess.Popen(
            [self.python, "-m", "argus.agent.worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self._log, cwd=self.scratch,
            env=self.env if self.env is not None else scrubbed_env(),
            start_new_session=True)
        self.restarts += 1
        reader = threading.Thread(target=self._read, args=(self.proc, self._lines), daemon=True)
        reader.start()

    @staticmethod
    def _read(proc: subprocess.Popen, lines: queue.Queue) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)  # EOF: the worker exited

    def kill(self) -> None:
        if self.proc is None:
            return
        kill_session(self.proc)
        self._close_pipes()
        self.proc = None

    def _close_pipes(self) -> None:
        if self.proc:
            close_pipes(self.proc)
        if self._log:
            self._log.close()
            self._log = None

    def close(self) -> None:
        """Ask the worker to exit; kill it if it does not."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(b'{"op": "exit"}\n')
                self.proc.stdin.flush()
                self.proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired, ValueError):
                pass
        self.kill()

    def __enter__(self) -> "WorkerClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests ------------------------------------------------------------------------------
    def log_tail(self, chars: int = 2000) -> str:
        try:
            data = self.log_path.read_bytes()[-chars:]
        except OSError:
            return ""
        return data.decode(errors="replace")

    def request(self, op: str, timeout: float, **args: Any) -> dict[str, Any]:
        """Send one request and return the reply; raise WorkerTimeout / WorkerCrash."""
        self.start()
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps({"op": op, **args}) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # the read below reports the death
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"no reply to {op!r} within {timeout:.0f} s; the worker was "
                                    "killed (a hang, a deadlock, or a very slow candidate)")
            try:
                line = self._lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                what = how_it_ended(self.proc.wait())
                tail = self.log_tail()
                self.kill()
                raise WorkerCrash(f"the worker died ({what}) during {op!r}; log tail:\n{tail}")
            try:
                return json.loads(line)
            except ValueError:
                continue  # not ours (a stray write to the protocol fd); keep reading


# ----------------------------------------------------------------------------- worker side


def _die_with_parent() -> None:
    """Linux: receive SIGKILL when the parent dies (a killed optimizer leaves no orphan)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)   # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001 - not Linux: the stdin EOF still ends the loop
        pass


def _no_core_files() -> None:
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except Exception:  # noqa: BLE001
        pass


def _refuse_network() -> None:
    import socket

    def refuse(*args: Any, **kwargs: Any):
        raise PermissionError("network access is disabled in the Argus agent's worker")

    socket.socket.connect = refuse            # type: ignore[method-assign]
    socket.socket.connect_ex = refuse         # type: ignore[method-assign]
    socket.create_connection = refuse         # type: ignore[assignment]


def serve() -> int:
    """The worker's main loop: one JSON request per line on stdin, one reply per line."""
    _die_with_parent()
    _no_core_files()
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                               # prints from kernels go to the log
    sys.stdout = sys.stderr
    if os.environ.get("ARGUS_AGENT_SANDBOX") == "1":
        _refuse_network()

    from argus.agent.candidate import Candidate
    from argus.agent.evaluate import EvalOptions, Evaluator
    from argus.agent.task import TaskSpec

    evaluator = Evaluator()
    for line in sys.stdin:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        op = req.get("op")
        if op == "exit":
            break
        try:
            if op == "ping":
                reply: dict[str, Any] = {"ok": True, "pid": os.getpid()}
            elif op in ("screen", "evaluate"):
                task = TaskSpec.from_json(req["task"])
                cand = Candidate.from_json(req["candidate"])
                opts = EvalOptions.from_json(req.get("options", {}))
                if op == "screen":
                    opts = EvalOptions.from_json({**opts.to_json(), "stop_after": "verify"})
                outcome = evaluator.evaluate(task, cand, opts)
                reply = {"ok": True, "outcome": outcome.to_json()}
            elif op == "artifacts":
                task = TaskSpec.from_json(req["task"])
                cand = Candidate.from_json(req["candidate"])
                opts = EvalOptions.from_json(req.get("options", {}))
                reply = {"ok": True, "artifacts": evaluator.artifacts(task, cand, opts)}
            elif op == "baseline":
                task = TaskSpec.from_json(req["task"])
                opts = EvalOptions.from_json(req.get("options", {}))
                reply = {"ok": True, "baselines": evaluator.baseline(task, opts)}
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - report, keep serving
            import traceback

            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}",
                     "traceback": traceback.format_exc()[-4000:]}
        protocol.write(json.dumps(reply, default=str) + "\n")
        protocol.flush()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
