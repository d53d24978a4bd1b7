"""Ahead-of-time kernels for the KernelBench judge (argus/bench/kernelbench/prebuild.py): a
composed solution's forward on meta tensors compiles every kernel and launch-specialized
variant into the compile cache without a GPU, under the keys a GPU launch computes."""

from __future__ import annotations

import json

import pytest
import torch

import argus as ag
from argus.analysis import alignment
from argus.runtime import compile as rt_compile
from argus.runtime.toolkit import nvrtc_available

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed")


@ag.kernel(threads=128)
def _scale_rows(X: ag.Tensor["R", "C", ag.f32], Y: ag.Tensor["R", "C", ag.f32], BN: int = 64):
    r, j = ag.grid(X.shape[0], ag.cdiv(X.shape[1], BN))
    ag.store(Y, (r, j * BN), ag.load(X, (r, j * BN), (1, BN)) * 2.0)


def _facts(t: torch.Tensor) -> tuple:
    return (t.data_ptr(), tuple(t.shape), tuple(t.stride()), t.element_size())


@pytest.mark.parametrize("view", ["whole", "offset_row", "offset_col", "narrow_cols"])
def test_meta_tensors_give_the_specialization_of_aligned_buffers(view):
    """The launch specialization (what the cubin's source depends on besides the kernel) of a
    meta tensor equals that of the same view of a real buffer allocated 512-byte aligned (as
    every GPU allocation is); a CPU buffer stands in for the GPU's here."""
    def make(device):
        base = torch.empty(64, 260, device=device)
        return {"whole": base, "offset_row": base[1:], "offset_col": base[:, 1:],
                "narrow_cols": base[:, :256]}[view]
    real = make("cpu")
    assert real.untyped_storage().data_ptr() % 64 == 0
    meta = make("meta")
    symbols = {"R": real.shape[0], "C": real.shape[1]}
    assert alignment.of_arguments({"X": _facts(meta)}, symbols) == \
        alignment.of_arguments({"X": _facts(real)}, symbols)


@needs_nvrtc
def test_build_for_compiles_the_launch_variant_without_launching(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    rt_compile.clear_memory_cache()
    x = torch.empty(64, 256, device="meta")
    y = torch.empty(64, 256, device="meta")
    compiled = _scale_rows.compile(BN=64)
    assert not compiled.ready_for((x, y))            # the aligned variant is not built yet
    compiled.build_for(x, y)
    spec = compiled.specialization((x, y), compiled.bind((x, y), device="meta"))
    assert spec and spec in compiled._variants   # built (its own cubin where the CUDA differs)
    assert compiled.ready_for((x, y))
    # a misaligned view is another specialization: not ready until built
    xs, ys = torch.empty(64, 257, device="meta")[:, 1:], torch.empty(64, 256, device="meta")
    assert not compiled.ready_for((xs, ys))
    with pytest.raises(Exception):
        compiled.build_for(torch.empty(64, 256), y)  # a CPU tensor is refused, like a launch


TASK = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, y):
        return torch.relu(x * self.scale + y).sum(dim=1)

def get_inputs():
    return [torch.rand(64, 384), torch.rand(64, 390)[:, 3:387]]

def get_init_inputs():
    return [3.0]
'''


@needs_nvrtc
def test_prebuild_fills_the_cache_a_later_process_hits(tmp_path, monkeypatch):
    """prebuild_solution on a composed solution compiles its kernels (for the task's layout of
    the inputs and the contiguous one of the re-distributed sets); built again after the
    in a fresh process (as a candidate is), every kernel is a disk hit
    and nothing compiles: the keys do not depend on the process that made them."""
    from argus.bench.kernelbench import prebuild
    from argus.compose.solution import compose_task

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    task = tmp_path / "1_Scale_Add_Relu_Sum.py"
    task.write_text(TASK)
    comp = compose_task(task)
    assert comp.source, comp.error
    solution = tmp_path / "solution.py"
    solution.write_text(comp.source)
    rt_compile.clear_memory_cache()
    first = prebuild.prebuild_solution(task, solution)
    assert first["compiles"] >= 1 and first["layouts"] == 2, first
    again = prebuild._one(task, solution, timeout_s=300)     # a fresh process, as a candidate
    assert again.get("compiles") == 0, again
    assert again["disk_hits"] >= first["compiles"], (first, again)


def test_manifest_names_a_compiler_mismatch(tmp_path, monkeypatch):
    from argus.bench.kernelbench import prebuild

    assert "no prebuilt kernels" in prebuild.check_manifest(tmp_path)
    (tmp_path / prebuild.MANIFEST).write_text(json.dumps({"compiler": "nvrtc 0.0 (other)",
                                                          "tasks": {"L1/1": {}}}))
    monkeypatch.setattr(prebuild, "compiler_id", lambda: "nvrtc 13.0 (here)")
    line = prebuild.check_manifest(tmp_path)
    assert line.startswith("WARNING") and "nvrtc 0.0 (other)" in line
    monkeypatch.setattr(prebuild, "compiler_id", lambda: "nvrtc 0.0 (other)")
    assert "built with this NVRTC" in prebuild.check_manifest(tmp_path)


def test_gate_wait_counts_are_per_thread_and_count_a_wait(tmp_path):
    """wait_counts: a shared entry that waits behind an exclusive hold is counted with the
    seconds it waited, in the waiting thread only (the judge's phase table per task)."""
    import threading
    import time

    from argus.runtime.gpu_gate import GpuGate, wait_counts

    gate = GpuGate(tmp_path / "gate")
    entered = threading.Event()
    seen: dict = {}

    def reader():
        entered.wait()
        before = wait_counts()
        with gate.shared():
            pass
        after = wait_counts()
        seen["waited"] = after.get("shared wait s", 0) - before.get("shared wait s", 0)
        seen["entries"] = after.get("shared entries", 0) - before.get("shared entries", 0)

    main_before = wait_counts()
    th = threading.Thread(target=reader)
    th.start()
    with gate.exclusive():
        entered.set()
        time.sleep(0.3)
    th.join()
    assert seen["entries"] == 1 and seen["waited"] >= 0.2, seen
    assert wait_counts().get("shared entries", 0) == main_before.get("shared entries", 0)


KB_DIR = __import__("pathlib").Path(__file__).resolve().parents[3] / "shared" / "kernelbench"


@pytest.mark.skipif(not (KB_DIR / "level1").is_dir(), reason="KernelBench tasks not found")
def test_parallel_judge_enters_the_gate_once_a_set(tmp_path):
    """The judge's thread keeps its shared hold of the GPU gate from a set's comparison
    through the next set's reference and probes: about one entry per set (before: three, each
    waiting behind every queued timing), and the judgment is the same (correct)."""
    from argus.bench.kernelbench.judge import JudgeOptions
    from argus.bench.kernelbench.parallel import ParallelOptions, run_parallel
    from argus.bench.kernelbench.shrink import SizeBudget
    from argus.bench.kernelbench.tasks import discover

    task = discover(KB_DIR, levels=[1], ids=[23])[0]
    sol = tmp_path / "solutions" / "level1"
    sol.mkdir(parents=True)
    (sol / task.path.name).write_text(task.path.read_text() + "\nModelNew = Model\n")
    # sets prepared in this thread (ref_cache_bytes=0: none ahead): a set prepared ahead that
    # is not ready yet is waited for outside the hold and costs one more entry (see
    # test_kernelbench_parallel.py::test_sets_prepared_ahead_give_the_same_judgment)
    options = JudgeOptions(device="cpu", timeout_s=180, ref_cache_bytes=0,
                           cpu_budget=SizeBudget(elements=1 << 16, flops=2e7))
    run = run_parallel([task], tmp_path / "solutions", tmp_path / "out", options,
                       ParallelOptions(jobs=1), progress=None, write_reports=False)
    (j,) = run.judgments
    assert j.correct, j.reasons
    sets = len(j.sets)
    entries = j.phases["# judge gate shared entries"]
    assert entries <= sets + 2, (entries, sets)      # set 0 up front, then one per set


def test_phase_table_sums_the_counts():
    """The device script's phase table ends with the counts summed over tasks: NVRTC compiles
    against disk hits is how a GPU run shows whether the prebuilt kernels were found."""
    from types import SimpleNamespace

    from argus.bench.kernelbench.summary import phase_table

    js = [SimpleNamespace(task="L1/1", phases={"probes": 1.0, "# nvrtc compiles": 2.0,
                                               "# nvrtc disk_hits": 5.0}),
          SimpleNamespace(task="L1/2", phases={"probes": 0.5, "# nvrtc compiles": 1.0})]
    text = phase_table(js)
    assert "| probes | 2 | 1.5 |" in text
    assert text.rstrip().endswith("Counts over these tasks: nvrtc compiles 3, nvrtc disk_hits 5")
