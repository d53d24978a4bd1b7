"""Shared test helpers: the examples directory on sys.path, a loader for example modules, and a
private scratch area: the whole run (and every process it starts) writes its compile cache,
agent store, KernelBench baseline cache and temporary folders under one directory that is
removed at the end, so `pytest` leaves nothing in the user's ~/.cache/argus or in /tmp."""

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def examples():
    """Load an example module by name (examples/<name>.py)."""
    from argus.demo import load_example

    return load_example


_SCRATCH_ENV = ("ARGUS_CACHE_DIR", "ARGUS_KERNELBENCH_CACHE", "TMPDIR")
_saved_env: dict = {}


def pytest_configure(config):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    if hasattr(config, "workerinput") or "ARGUS_TEST_SCRATCH" in os.environ:
        return                          # an xdist worker or a nested run: the parent's scratch
    _sweep_abandoned_scratch()
    scratch = Path(tempfile.mkdtemp(prefix="argus-tests-"))
    (scratch / "tmp").mkdir()
    (scratch / "pid").write_text(str(os.getpid()))
    _saved_env.update({k: os.environ.get(k) for k in (*_SCRATCH_ENV, "ARGUS_TEST_SCRATCH")})
    os.environ.update({"ARGUS_TEST_SCRATCH": str(scratch),
                       "ARGUS_CACHE_DIR": str(scratch / "cache"),
                       "ARGUS_KERNELBENCH_CACHE": str(scratch / "kernelbench-baselines.json"),
                       "TMPDIR": str(scratch / "tmp")})
    tempfile.tempdir = None             # re-read TMPDIR: pytest's tmp_path lands there too


def _sweep_abandoned_scratch() -> None:
    """Remove the scratch folders of earlier runs that were killed before they could (a
    timeout's SIGTERM skips pytest_unconfigure): those whose process is gone."""
    for folder in Path(tempfile.gettempdir()).glob("argus-tests-*"):
        try:
            pid = int((folder / "pid").read_text())
            os.kill(pid, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):
            continue                    # no pid file yet, or not ours to judge


def pytest_unconfigure(config):
    scratch = os.environ.get("ARGUS_TEST_SCRATCH")
    if not _saved_env or not scratch:
        return
    for key, value in _saved_env.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    tempfile.tempdir = None
    shutil.rmtree(scratch, ignore_errors=True)
