"""The first call of `argus.ops.matmul` after `argus prebuild`, on the GPU's path but without a
GPU (issue 18 item 1): in a fresh process, with CPU tensors and stand-ins for only what the
device itself does (the CUDA-tensor checks, TMA encoding, module load and launch), the call
chooses a schedule, finds the kernel's verdict, cubin and launch-coverage finding in the cache,
prepares the launch, and imports neither z3 nor the verifier, compiles nothing and tunes
nothing. On the H200 (2026-12-02) the prebuilt first call still imported z3: the launch check
(runtime/coverage.py) built the verifier's model of the kernel at every first launch, which the
CPU-only measurement of the compile path had not covered. Also: the launch specialization of a
kernel without access facts costs no render (compiled.py `variant`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from argus import codegen
from argus.analysis import alignment
from argus.errors import LaunchError
from argus.ops import prebuild
from argus.ops.schedules import kernel_for, untuned
from argus.runtime import cache, coverage
from argus.runtime import compile as compile_mod
from argus.runtime import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]
KIND = prebuild.Kind("bf16", "bf16", "kn", True)
PROBLEM = KIND.problem(3000, 5000, 2000)   # off prebuild's grid (M 3000, K 2000)

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")

# The child: argus.ops.matmul end to end on CPU tensors. Stood in: the checks that need CUDA
# tensors, the device name, TMA encoding (cuTensorMapEncodeTiled) and the launch itself
# (module load, cuLaunchKernelEx); everything else is the code the GPU runs. The tuner and the
# verifier are counted where they would run.
_CHILD = r"""
import dataclasses, json, sys
import torch, argus, argus.ops
mm = sys.modules["argus.ops.matmul"]
import argus.ops.tune as tune
import argus.runtime.args, argus.runtime.driver, argus.runtime.tma
from argus.runtime import compile as rc

calls = {{"tune": 0, "launch": 0}}
def no_tuning(*a, **k):
    calls["tune"] += 1
    raise AssertionError("the first call tuned")
tune.tune_matmul = tune._tune = no_tuning
mm._check = lambda *a: None
mm.device_name = lambda device: "NVIDIA H200"
torch.cuda.current_device = lambda: None
argus.runtime.args.check_tensor_arg = lambda *a, **k: None
argus.runtime.tma.make_tensor_map = lambda tensor, **k: None

@dataclasses.dataclass(frozen=True)
class Launch:
    args: tuple = ()
    def __call__(self):
        calls["launch"] += 1

argus.runtime.driver.prepare_launch = lambda *a, **k: Launch()
m, n, k = {shape!r}
a = torch.randn(m, k, dtype=torch.bfloat16)
b = torch.randn(k, n, dtype=torch.bfloat16)
argus.ops.matmul(a, b)
print(json.dumps({{"z3": "z3" in sys.modules,
                  "verifier": any(x.startswith("argus.verify") for x in sys.modules),
                  **calls, **rc.compile_stats()}}))
"""


def _emulated_first_call(cache_dir: Path) -> dict:
    env = dict(os.environ, ARGUS_CACHE_DIR=str(cache_dir), ARGUS_VERIFY="1",
               PYTHONPATH=os.pathsep.join(  # keep the caller's site dirs
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    code = _CHILD.format(shape=(PROBLEM.m, PROBLEM.n, PROBLEM.k))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def prebuilt_once(tmp_path_factory):
    """A cache that `argus prebuild` filled with the kernel PROBLEM's untuned choice runs
    (built once: the verifier takes seconds)."""
    folder = tmp_path_factory.mktemp("first-call") / "cache"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ARGUS_CACHE_DIR", str(folder))
        mp.setenv("ARGUS_VERIFY", "1")
        mp.setattr(prebuild, "common_schedules", lambda kind: {untuned(PROBLEM): PROBLEM})
        # the sources as they are now (an edit since this process first read them would key
        # the records where a fresh process never looks)
        cache.argus_fingerprint.cache_clear()
        _forget_in_memory()
        built = prebuild.prebuild_matmul([KIND])
    assert [b.schedule for b in built] == [untuned(PROBLEM)]
    return folder


@pytest.fixture
def prebuilt(prebuilt_once, tmp_path, monkeypatch):
    """A copy of the prebuilt cache, the environment pointing at it, no memory caches."""
    folder = tmp_path / "cache"
    shutil.copytree(prebuilt_once, folder)
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(folder))
    monkeypatch.setenv("ARGUS_VERIFY", "1")
    _forget_in_memory()
    yield folder
    _forget_in_memory()


def _forget_in_memory() -> None:
    kernel, _ = kernel_for(PROBLEM, untuned(PROBLEM))
    kernel._compiled.clear()
    compile_mod.clear_memory_cache()
    coverage._CACHE.clear()


@needs_nvrtc
def test_prebuilt_first_call_imports_no_z3_and_compiles_verifies_tunes_nothing(prebuilt):
    for kind in ("cubin", "verified", "coverage"):
        assert any((prebuilt / kind).rglob("*.json")), f"prebuild wrote no {kind} record"
    stats = _emulated_first_call(prebuilt)
    assert stats["launch"] == 1, stats          # the call went all the way to the launch
    assert stats["compiles"] == 0 and stats["disk_hits"] == 1, stats
    assert stats["tune"] == 0, stats
    assert not stats["verifier"], "the first call imported the verifier (or ran it)"
    assert not stats["z3"], "the first call imported z3"

    # the same call without the launch check's record: the detector above can fail (this is
    # what the GPU measured before the record existed)
    shutil.rmtree(prebuilt / "coverage")
    stats = _emulated_first_call(prebuilt)
    assert stats["z3"] and stats["verifier"] and stats["compiles"] == 0, stats
    assert any((prebuilt / "coverage").rglob("*.json")), "the finding was not remembered"


@needs_nvrtc
def test_coverage_finding_is_remembered_only_when_there_is_no_requirement(prebuilt,
                                                                           monkeypatch):
    from tests.unit.test_launch_coverage import one_tile_softmax

    gemm, run = kernel_for(PROBLEM, untuned(PROBLEM))
    lowered = gemm.compile(s=run).kernel
    calls = []
    analyse = coverage._analyse
    monkeypatch.setattr(coverage, "_analyse", lambda k: calls.append(k.name) or analyse(k))
    assert not coverage.remembered(lowered).requirements
    assert calls == [], "the prebuilt finding was analysed again"

    # a kernel with a requirement is analysed at every first launch, and still refused
    softmax = one_tile_softmax().compile().kernel
    for _ in range(2):
        found = coverage.remembered(softmax)
        with pytest.raises(LaunchError, match="N = 5000"):
            found.check({"M": 2, "N": 5000})
    assert calls == [softmax.name] * 2

    # another Argus does not trust this one's finding
    monkeypatch.setattr(cache, "argus_fingerprint", lambda: "another argus")
    coverage.remembered(lowered)
    assert calls[-1] == lowered.name


@needs_nvrtc
def test_a_specialization_without_access_facts_renders_nothing(prebuilt, monkeypatch):
    gemm, run = kernel_for(PROBLEM, untuned(PROBLEM))
    compiled = gemm.compile(s=run)
    spec = alignment.LaunchSpecialization(("A", "B", "C"), ("K", "M", "N"))
    assert not alignment.specialize(compiled.kernel, spec).attr("global_access")
    # what the shortcut claims: the render would have been the unspecialized text
    assert codegen.render(alignment.specialize(compiled.kernel, spec)).text == \
        compiled.source.text

    def no_render(kernel):
        raise AssertionError("rendered a specialization that has no access fact")

    monkeypatch.setattr(codegen, "render", no_render)
    compiled._variants.clear()
    assert compiled.variant(spec) == (compiled.source, compiled.binary)
