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
import threading
import time
from pathlib import Path
from typing import Any

from argus.bench.kernelbench.tasks import repo_root

# What both start-up scripts do first, with `root` set: import the real `argus` package when
# it can be (solutions need it); when its __init__ needs something this Python lacks (a GPU box
# with only torch), load the harness modules on their own through namespace stubs, and log the
# failure; then import the modules named in ARGUS_KB_PRELOAD.
_IMPORT_ARGUS = """
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
"""

# Starts a worker (the imports of _IMPORT_ARGUS, then the worker's request loop).
BOOTSTRAP = """
import time
_boot = time.perf_counter()
import os, sys, types
root = sys.argv[1]
""" + _IMPORT_ARGUS + """from argus.bench.kernelbench.worker import ROLES, serve
sys.exit(serve(sys.argv[2], time.perf_counter() - _boot))
"""
# Modules a candidate started ahead imports while it waits (ARGUS_KB_PRELOAD): a composed
# solution's first forward otherwise imports torch._dynamo (through torch's meta-device
# references, several seconds) and the compose runtime after the judge asked for it.
CANDIDATE_PRELOAD = "torch._dynamo,argus.compose.runtime"


# The candidates' fork server: one process per judge that imported Python, torch, the harness
# and CANDIDATE_PRELOAD once (never CUDA), and forks a fresh candidate on request in
# milliseconds instead of a new interpreter's seconds of imports (8 s each on the H200 host,
# 20+ s beside other work on a 2-core machine). Each solution still gets a process of its own,
# forked from a process that never saw a task, a reference or a solution. Requests, one JSON
# line each on a Unix socket: spawn (with the child's stdin and stdout as passed descriptors)
# -> pid; poll -> exit code or null; kill -> kills the child's process group and reaps it. The
# server signals and reaps only its own children, so a pid is never reused under it.
ZYGOTE = """
import time
import os, sys, types, json, socket, signal
root, sock_fd = sys.argv[1], int(sys.argv[2])
""" + _IMPORT_ARGUS + """
import torch
from argus.bench.kernelbench import worker
assert not torch.cuda.is_initialized(), "the fork server must never initialise CUDA"
sock = socket.socket(fileno=sock_fd)
probe = os.fork()          # a forked child must be able to use the GPU (no driver state from
if probe == 0:             # the imports above): try once, else the parent starts interpreters
    try:
        os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        if torch.cuda.is_available():
            assert float(torch.ones(1, device="cuda").sum()) == 1.0
        os._exit(0)
    except BaseException:
        os._exit(1)
if os.waitstatus_to_exitcode(os.waitpid(probe, 0)[1]) != 0:
    sock.sendall(b"forked children cannot use CUDA\\n")
    sys.exit(0)
codes = {}
def status(pid, block=False):
    if pid not in codes:
        done, st = os.waitpid(pid, 0 if block else os.WNOHANG)
        if done:
            codes[pid] = os.waitstatus_to_exitcode(st)
    return codes.get(pid)
buf = b""
sock.sendall(b"ready\\n")
while True:
    msg, fds, _, _ = socket.recv_fds(sock, 1 << 16, 4)
    if not msg:
        break
    buf += msg
    while b"\\n" in buf:
        line, buf = buf.split(b"\\n", 1)
        req = json.loads(line)
        if req["op"] == "spawn":
            started = time.perf_counter()
            pid = os.fork()
            if pid == 0:
                try:
                    sock.close()
                    os.setsid()
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    os.dup2(fds[0], 0)
                    os.dup2(fds[1], 1)
                    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
                    os.dup2(log, 2)
                    for fd in (*fds, log):
                        os.close(fd)
                    os.environ.clear()
                    os.environ.update(req["env"])
                    if req.get("cwd"):
                        os.chdir(req["cwd"])
                    code = worker.serve(req["role"], time.perf_counter() - started)
                except BaseException:
                    import traceback
                    traceback.print_exc()
                    code = 1
                os._exit(code or 0)
            for fd in fds:
                os.close(fd)
            codes.pop(pid, None)    # a reused pid: the code kept is the old child's
            reply = {"pid": pid}
        elif req["op"] == "poll":
            reply = {"code": status(req["pid"])}
        elif req["op"] == "kill":
            pid = req["pid"]
            if status(pid) is None:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            reply = {"code": status(pid, block=True)}
        else:
            reply = {"error": "unknown op"}
        sock.sendall((json.dumps(reply) + "\\n").encode())
"""


def kill_session(proc: Any) -> None:
    """SIGKILL the process group `proc` leads (a child started here with
    start_new_session=True, so the group holds it and its children only), or the child alone
    where the group is gone or not ours; then reap it, waiting 10 s at most."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            proc.kill()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def close_pipes(proc: Any) -> None:
    """Close our ends of `proc`'s stdin and stdout (either may be None or closed already)."""
    for stream in (proc.stdin, proc.stdout):
        try:
            if stream:
                stream.close()
        except OSError:
            pass


def how_it_ended(code: int | None) -> str:
    """A child's return code in words: "exit code 1", "killed by SIGKILL", "still running"
    (None: it had not ended when asked)."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class Zygote:
    """The parent's side of the fork server (see ZYGOTE); thread-safe. `shared()` is the
    process's one server, started on first use; None where it cannot start (then workers are
    started as new interpreters)."""

    _shared: Zygote | None = None
    _shared_failed = False
    _shared_lock = threading.Lock()

    def __init__(self, log_path: Path):
        import socket

        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        root = str(repo_root())
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH")
                                    else "")
        env["ARGUS_KB_PRELOAD"] = CANDIDATE_PRELOAD
        env["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"   # no driver initialisation before forks
        self._log = open(log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", ZYGOTE, root, str(theirs.fileno())],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, env=env,
            pass_fds=(theirs.fileno(),), start_new_session=True)
        theirs.close()
        self.sock = ours
        self.lock = threading.Lock()
        self._buffer = b""
        answer = self._line(timeout=300.0)
        if answer != "ready":
            self.close()
            raise OSError(f"the candidate fork server did not start ({answer or 'no answer'};"
                          f" log {log_path})")

    @classmethod
    def shared(cls) -> Zygote | None:
        with cls._shared_lock:
            if cls._shared is not None and cls._shared.proc.poll() is None:
                return cls._shared
            if cls._shared_failed:
                return None
            try:
                import tempfile

                log = Path(tempfile.gettempdir()) / f"argus-kb-zygote-{os.getpid()}.log"
                cls._shared = Zygote(log)
                import atexit

                atexit.register(cls._shared.close)
            except (OSError, ValueError) as exc:
                print(f"kernelbench: candidate fork server unavailable ({exc}); starting "
                      "candidates as new interpreters", file=sys.stderr)
                cls._shared_failed = True
                cls._shared = None
            return cls._shared

    def _line(self, timeout: float) -> str | None:
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(1 << 16)
            except TimeoutError:
                return None
            if not chunk:
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line.decode()

    def request(self, fds: tuple[int, ...] = (), **req: Any) -> dict[str, Any]:
        import json as _json
        import socket

        with self.lock:
            data = (_json.dumps(req) + "\n").encode()
            if fds:
                socket.send_fds(self.sock, [data], list(fds))
            else:
                self.sock.sendall(data)
            line = self._line(timeout=60.0)
        if line is None:
            raise OSError("the candidate fork server did not answer")
        return _json.loads(line)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        kill_session(self.proc)
        self._log.close()


class _Forked:
    """`proc` of a Worker forked by the Zygote: Popen's interface, through the server."""

    def __init__(self, zygote: Zygote, pid: int, stdin: Any, stdout: Any):
        self.zygote, self.pid, self.stdin, self.stdout = zygote, pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.request(op="poll", pid=self.pid)["code"]
            except OSError:
                self.returncode = -int(signal.SIGKILL)     # the server is gone, and with it
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = time.monotonic() + (timeout if timeout is not None else 1e9)
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("forked worker", timeout or 0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode

    def kill_group(self) -> None:
        if self.returncode is None:
            try:
                self.returncode = self.zygote.request(op="kill", pid=self.pid)["code"]
            except OSError:
                pass


class WorkerError(Exception):
    """A worker failed: kind is a reason code (timeout, crash, load_error, runtime_error...)."""

    def __init__(self, kind: str, message: str, reply: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = kind
        self.reply = reply or {}


class Worker:
    """One live worker process of a role ("reference", "candidate" or "baseline")."""

    def __init__(self, role: str, log_path: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, forked: bool = False):
        """`forked`: from the candidates' fork server (Zygote.shared()) when it runs, which
        has the candidate's preloads imported already; else a new interpreter."""
        self.role = role
        self.log_path = Path(log_path)
        full_env = dict(os.environ)
        root = str(repo_root())
        full_env["PYTHONPATH"] = root + (os.pathsep + full_env["PYTHONPATH"]
                                         if full_env.get("PYTHONPATH") else "")
        full_env["PYTHONUNBUFFERED"] = "1"
        full_env.update(env or {})
        self._log = open(self.log_path, "ab")
        self._buffer = b""
        zygote = Zygote.shared() if forked else None
        if zygote is not None:
            child_in, parent_in = os.pipe()
            parent_out, child_out = os.pipe()
            try:
                pid = zygote.request((child_in, child_out), op="spawn", role=role,
                                     env=full_env, cwd=str(cwd) if cwd else None,
                                     log=str(self.log_path))["pid"]
            except OSError:
                for fd in (parent_in, parent_out):
                    os.close(fd)
                zygote = None
            finally:
                os.close(child_in)
                os.close(child_out)
            if zygote is not None:
                self.proc: Any = _Forked(zygote, pid, os.fdopen(parent_in, "wb"),
                                         os.fdopen(parent_out, "rb"))
                return
        self.proc = subprocess.Popen(
            [sys.executable, "-u", "-c", BOOTSTRAP, root, role],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log,
            env=full_env, cwd=str(cwd) if cwd else None, start_new_session=True)

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
        return f"{self.role} worker died ({how_it_ended(code)})\n{self.log_tail()}"

    def kill(self) -> None:
        if isinstance(self.proc, _Forked):
            self.proc.kill_group()          # the server signals its own child's group
            return
        kill_session(self.proc)

    def close(self) -> None:
        """End the worker. It holds nothing worth a graceful exit (its log is unbuffered), and
        torch's interpreter teardown costs most of a second, so it is killed."""
        self.kill()
        close_pipes(self.proc)
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
        except Exception as exc:
            from argus.bench.kernelbench.worker import out_of_memory

            if out_of_memory(exc):
                raise WorkerError("out_of_memory", str(exc)[:2000]) from exc
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
