"""The worker-process helpers every subprocess owner shares (argus/bench/kernelbench/process.py:
the judge's workers and fork server, the GPU pool's workers, the agent's worker): killing a
child's whole session, closing its pipes, and its return code in words."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from argus.bench.kernelbench.process import close_pipes, how_it_ended, kill_session

# a child in its own session that starts a grandchild (same group) and prints its pid
PARENT = ("import subprocess, sys, time; "
          "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)']); "
          "print(p.pid, flush=True); time.sleep(120)")


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for a reaper counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_kill_session_ends_the_child_and_its_children():
    proc = subprocess.Popen([sys.executable, "-c", PARENT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, start_new_session=True)
    try:
        grandchild = int(proc.stdout.readline())
        assert _alive(grandchild)
        kill_session(proc)
        assert proc.returncode == -signal.SIGKILL
        deadline = time.monotonic() + 10
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(grandchild), "the grandchild outlived its session's kill"
        kill_session(proc)              # a second kill of a reaped child is a no-op
        close_pipes(proc)
        close_pipes(proc)               # and so is closing closed pipes
        assert proc.stdin.closed and proc.stdout.closed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_how_it_ended_names_the_signal():
    assert how_it_ended(0) == "exit code 0"
    assert how_it_ended(3) == "exit code 3"
    assert how_it_ended(-signal.SIGKILL) == "killed by SIGKILL"
    assert how_it_ended(-signal.SIGSEGV) == "killed by SIGSEGV"
    assert how_it_ended(-200) == "killed by signal 200"
    assert how_it_ended(None) == "still running"
