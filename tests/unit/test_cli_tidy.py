"""The test suite tidies up (issue 19, item 5): a pytest run writes nothing into the user's Argus
cache (~/.cache/argus) and leaves nothing in the temporary directory, whatever its tests
compile, optimize or kill; and the quick GPU tier (`-m "gpu and not slow"`) is a real subset.

The check runs a small pytest session in a subprocess with HOME and TMPDIR pointed at fresh
folders, over tests that compile a kernel (a cubin for the cache), run the agent (a scratch
folder) and use tmp_path, then looks in both folders.
"""

import os
import subprocess
import sys

from tests.conftest import ROOT


def _listing(folder):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_a_pytest_run_leaves_no_cache_entries_and_no_temp_folders(tmp_path):
    home, tmp = tmp_path / "home", tmp_path / "tmp"
    home.mkdir()
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ARGUS_") and k not in ("TMPDIR", "PYTEST_ADDOPTS")}
    env.update(HOME=str(home), TMPDIR=str(tmp))
    tests = ["tests/unit/test_cli_errors.py::test_compile_an_example_without_naming_the_kernel",
             "tests/agent/test_resume_cli.py::test_binary_feedback_ablation"]
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *tests], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "2 passed" in proc.stdout
    # matplotlib keeps its own font cache in ~/.cache/matplotlib, as for any of its users
    argus_files = [p for p in _listing(home) if "argus" in p]
    assert argus_files == [], "the run wrote into the user's Argus cache: " + str(argus_files)
    assert _listing(tmp) == [], "the run left temporary files: " + str(_listing(tmp))


def test_slow_marker_is_registered_and_the_quick_gpu_tier_is_a_subset():
    try:
        import tomllib
    except ImportError:                 # Python 3.10
        import tomli as tomllib

    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    markers = {m.split(":")[0] for m in config["ini_options"]["markers"]}
    assert {"gpu", "slow"} <= markers
    counts = {}
    for expr in ("gpu", "gpu and not slow"):
        proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                               "-p", "no:cacheprovider", "-m", expr, "tests/gpu"], cwd=ROOT,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
        counts[expr] = sum(1 for line in proc.stdout.splitlines() if "::" in line)
    assert 0 < counts["gpu and not slow"] < counts["gpu"], counts


def test_the_scratch_of_a_killed_run_is_swept_by_the_next(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    finished = subprocess.Popen(["true"])
    finished.wait()                              # its pid now names no process
    abandoned = tmp / "argus-tests-killed"
    (abandoned / "cache").mkdir(parents=True)
    (abandoned / "pid").write_text(str(finished.pid))
    alive = tmp / "argus-tests-alive"
    alive.mkdir()
    (alive / "pid").write_text(str(os.getpid()))  # a run still going: left alone
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("ARGUS_") and k not in ("TMPDIR", "PYTEST_ADDOPTS")}
    env["TMPDIR"] = str(tmp)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "tests/unit/test_docs_packaging.py::test_classifiers_name_every_"
                           "supported_python"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert not abandoned.exists() and alive.exists()
    assert _listing(tmp) == ["argus-tests-alive", "argus-tests-alive/pid"]
