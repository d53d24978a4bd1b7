"""`argus optimize` from the command line: a killed run resumes where it stopped (no step lost or
repeated), the output directory holds the promised files (the plot is valid SVG), and the
ablation switch runs the planner on pass/fail feedback only."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from argus.agent.composer import compose
from argus.agent.loop import OptimizeConfig, optimize
from tests.agent._tasks import BIG_RELU_TASK

ROOT = Path(__file__).resolve().parents[2]


def _count(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1)
        try:
            return con.execute("SELECT COUNT(*) FROM steps").fetchone()[0]
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def test_killed_run_resumes_where_it_stopped(tmp_path):
    task = tmp_path / "19_ReLU.py"
    task.write_text(BIG_RELU_TASK)
    out, db = tmp_path / "out", tmp_path / "db.sqlite"
    cmd = [sys.executable, "-m", "argus", "optimize", str(task), "--out", str(out),
           "--iterations", "10", "--device", "cpu", "--check-sets", "1", "--db", str(db),
           "--explore", "on", "--judge", "off"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 120
    while _count(db) < 2 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)                 # no cleanup, no report
    proc.wait(timeout=30)
    killed_at = _count(db)
    assert 2 <= killed_at < 10, killed_at
    assert not (out / "report.json").exists()
    state = json.loads((out / "run.json").read_text())
    assert state["status"] == "running"

    again = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert f"resuming run {state['run_id']} at step {killed_at}" in again.stdout
    report = json.loads((out / "report.json").read_text())
    assert report["run_id"] == state["run_id"] and report["resumed_at"] == killed_at
    indices = [s["index"] for s in report["steps"]]
    assert indices == list(range(len(indices))) and len(indices) == 10
    keys = [json.dumps(s["candidate"], sort_keys=True) for s in report["steps"]]
    assert len(set(keys)) == len(keys)                  # nothing evaluated twice
    assert json.loads((out / "run.json").read_text())["status"] == "done"
    for name in ("kernel.py", "kernel.cu", "solution.py", "report.md", "speed.svg"):
        assert (out / name).exists(), name
    svg = ET.parse(out / "speed.svg").getroot()
    assert svg.tag.endswith("svg") and len(list(svg.iter())) > 10
    assert "ag.relu(x)" in (out / "kernel.py").read_text()


def test_no_template_and_list_cards():
    r = subprocess.run([sys.executable, "-m", "argus", "optimize", "--list-cards"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "gemm.tile_128x256_2wg" in r.stdout

def test_a_task_argus_lowers_none_of_is_no_template(tmp_path):
    # an FFT: argus.compose has no rule, so the whole forward would run in torch (softmax, the
    # task this test used, now composes)
    task = tmp_path / "fft_task.py"
    task.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def forward(self, x):\n        return torch.fft.fft(x).real\n\n\n"
                    "def get_inputs():\n    return [torch.randn(16, 64)]\n\n\n"
                    "def get_init_inputs():\n    return []\n")
    r = subprocess.run([sys.executable, "-m", "argus", "optimize", str(task), "--out",
                        str(tmp_path / "never-written")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "no Argus template for this op family" in r.stderr, r.stderr
    assert not (tmp_path / "never-written").exists()


def test_binary_feedback_ablation(tmp_path):
    task = tmp_path / "19_ReLU.py"
    task.write_text(BIG_RELU_TASK)
    cfg = OptimizeConfig(iterations=4, device="cpu", check_sets=1, feedback="binary",
                         db=str(tmp_path / "db.sqlite"), verbose=False)
    result = optimize(compose(task), tmp_path / "out", cfg)
    assert len(result.steps) >= 2
    # no verifier or rule pruning in the ablation: the planner only learns pass/fail
    assert all(p["by"] == "cost_model" for s in result.steps for p in s.pruned)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["config"]["feedback"] == "binary"
