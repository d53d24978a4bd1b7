"""GPU tier for kernels prebuilt without a GPU (argus/bench/kernelbench/prebuild.py): a composed
solution's kernels built from meta tensors into a fresh cache are every kernel its forward on
the GPU needs. A fresh process (as a judged candidate is) runs the forward on CUDA tensors in
both input layouts with that cache and compiles nothing: every cubin is a disk hit, so the
meta build's keys are the GPU launch's (CUDA text, launch specialization, NVRTC build)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

REPO = Path(__file__).resolve().parents[2]

TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x, y):
        h = torch.relu(self.linear(x) * 2.0 + y)
        return torch.softmax(h, dim=1)

def get_inputs():
    return [torch.rand(1000, 512), torch.rand(1000, 520)[:, 3:515]]

def get_init_inputs():
    return [512]
'''

RUN_ON_GPU = '''
import json, sys, importlib.util, torch
from argus.bench.kernelbench.tasks import load_task
from argus.runtime.compile import compile_stats
task = load_task(sys.argv[1])
spec = importlib.util.spec_from_file_location("kernelbench_solution", sys.argv[2])
mod = importlib.util.module_from_spec(spec); spec.loader.exec_module(mod)
torch.manual_seed(0)
model = mod.ModelNew(*task.get_init_inputs()).cuda()
with torch.device("cuda"):
    inputs = task.get_inputs()
dense = [x.contiguous() for x in inputs]
with torch.no_grad():
    ref = task.Model(*task.get_init_inputs()).cuda()
    ref.load_state_dict(model.state_dict())
    for values in (inputs, dense):
        out = model(*values)
        torch.cuda.synchronize()
        assert torch.allclose(out, ref(*values), atol=1e-4, rtol=1e-4)
print("STATS " + json.dumps(compile_stats()))
'''


@pytest.mark.gpu
def test_prebuilt_cache_covers_the_gpu_forward(tmp_path):
    from argus.bench.kernelbench import prebuild
    from argus.compose.solution import compose_task

    task = tmp_path / "1_Linear_Relu_Softmax.py"
    task.write_text(TASK)
    comp = compose_task(task)
    assert comp.source, comp.error
    solution = tmp_path / "solution.py"
    solution.write_text(comp.source)
    env = {**os.environ, "ARGUS_CACHE_DIR": str(tmp_path / "cache"), "ARGUS_VERIFY": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                       os.environ.get("PYTHONPATH", "")]))}
    old = {k: os.environ.get(k) for k in ("ARGUS_CACHE_DIR", "ARGUS_VERIFY")}
    os.environ.update({k: env[k] for k in old})
    try:
        built = prebuild._one(task, solution, timeout_s=600)    # meta tensors, no launch
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
    assert built.get("compiles", 0) >= 1 and built["layouts"] == 2, built
    proc = subprocess.run([sys.executable, "-c", RUN_ON_GPU, str(task), str(solution)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.split("STATS ", 1)[1])
    assert stats["compiles"] == 0, (stats, built)
    assert stats["disk_hits"] >= 1, stats
