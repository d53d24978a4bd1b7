"""GPU tier of issue 18 item 1, the fresh-process form: after `prebuild_matmul` of a held-out
shape's untuned choice, a new Python process's first `argus.ops.matmul` of that shape compiles
nothing, finds the launch check's coverage record, imports neither z3 nor the verifier, and is
right against float64 (tests/unit/test_matmul_first_call.py is the CPU form with the device
calls stood in; the 2026-12-02 H200 run imported z3 here). Prints the first call's seconds."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

ROOT = Path(__file__).resolve().parents[2]

_CHILD = r"""
import json, sys, time
import torch, argus, argus.ops
from argus.runtime.compile import compile_stats
m, n, k, layout = {shape!r}
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
a = torch.randn(m, k, device="cuda").bfloat16()
b = (torch.randn(n, k, device="cuda").bfloat16().t() if layout == "nk"
     else torch.randn(k, n, device="cuda").bfloat16())
torch.cuda.synchronize()
t0 = time.perf_counter()
out = argus.ops.matmul(a, b)
torch.cuda.synchronize()
first = time.perf_counter() - t0
ref = a.double() @ b.double()
err = ((out.double() - ref).norm() / ref.norm()).item()
print(json.dumps({{"first_s": first, "err": err, "z3": "z3" in sys.modules,
                  "verifier": any(x.startswith("argus.verify") for x in sys.modules),
                  **compile_stats()}}))
"""


@pytest.mark.parametrize("m,n,k,layout", [(3000, 5000, 2000, "kn"), (2048, 7168, 2000, "nk")])
def test_fresh_process_first_call_after_prebuild(tmp_path, monkeypatch, m, n, k, layout):
    from argus.ops import prebuild
    from argus.ops.schedules import untuned

    cache = tmp_path / "cache"
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(cache))
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    kind = prebuild.Kind("bf16", "bf16", layout, True)
    problem = kind.problem(m, n, k)
    monkeypatch.setattr(prebuild, "common_schedules",
                        lambda kind: {untuned(problem): problem})
    prebuild.prebuild_matmul([kind])
    assert any((cache / "coverage").rglob("*.json"))

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(  # keep the caller's entries (site dirs)
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(shape=(m, n, k, layout))],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"{m}x{n}x{k} {layout}: first call {stats['first_s']:.3f} s after prebuild")
    assert stats["compiles"] == 0 and stats["disk_hits"] >= 1, stats
    assert not stats["z3"] and not stats["verifier"], stats
    assert stats["err"] < 4e-3, stats
