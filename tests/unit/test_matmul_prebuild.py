"""A matmul kernel prebuilt into the cache costs its first call no verifier run and no NVRTC
compile, in this process (memory caches dropped) and in a fresh one; the verifier's remembered
verdict is keyed by this Argus and never remembers a refusal; the prebuilt set covers the
untuned choice of shapes it was not built from (argus/ops/prebuild.py, compiler.py
`_verified_source`)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from argus import verify
from argus.errors import Diagnostic, VerificationError
from argus.kernels.gemm import GemmSchedule
from argus.ops import prebuild
from argus.ops.schedules import kernel_for, untuned
from argus.runtime import cache
from argus.runtime import compile as compile_mod
from argus.runtime import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]
KIND = prebuild.Kind("bf16", "bf16", "nk", True)
# a shape the grid never asks about (K = 2000, M = 3000 are off the grid)
PROBLEM = KIND.problem(3000, 5000, 2000)

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty ARGUS_CACHE_DIR and no kernel compiled in this process's memory."""
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    # the fingerprint as the sources are now: a value this process read earlier, before an
    # edit to the working tree, would key records that a fresh process never finds
    cache.argus_fingerprint.cache_clear()
    _forget_in_memory(PROBLEM, untuned(PROBLEM))
    yield tmp_path / "cache"
    _forget_in_memory(PROBLEM, untuned(PROBLEM))


def _forget_in_memory(problem, schedule) -> None:
    kernel, _ = kernel_for(problem, schedule)
    kernel._compiled.clear()
    compile_mod.clear_memory_cache()


@pytest.fixture
def counted(monkeypatch):
    """Counts of verifier runs and real NVRTC compiles from here on."""
    counts = {"verify": 0, "nvrtc": 0}
    check, nvrtc = verify.check, compile_mod._nvrtc_compile

    def counting_check(*a, **k):
        counts["verify"] += 1
        return check(*a, **k)

    def counting_nvrtc(*a, **k):
        counts["nvrtc"] += 1
        return nvrtc(*a, **k)

    monkeypatch.setattr(verify, "check", counting_check)
    monkeypatch.setattr(compile_mod, "_nvrtc_compile", counting_nvrtc)
    return counts


def _first_call(problem=PROBLEM):
    from argus.ops.matmul import compiled_for

    return compiled_for(problem, untuned(problem))


def test_untuned_choices_of_unseen_shapes_are_prebuilt():
    """The untuned schedule of random shapes (none built from: random M, N, K) is one that
    prebuild compiles, for every kind."""
    rng = random.Random(18)
    sets = {kind: prebuild.common_schedules(kind) for kind in prebuild.COMMON_KINDS}
    for _ in range(200):
        kind = rng.choice(prebuild.COMMON_KINDS)
        m = rng.choice((rng.randint(1, 256), rng.randint(257, 16384)))
        n, k = rng.randint(8, 4096) * 8, rng.randint(8, 2048) * 8
        chosen = untuned(kind.problem(m, n, k))
        assert chosen in sets[kind], (kind, m, n, k, chosen)
    # one kernel per schedule, a small set: shape-generic kernels (M, N, K at run time)
    assert all(3 <= len(s) <= 24 for s in sets.values()), {k: len(s) for k, s in sets.items()}
    assert all(s.split_k == 1 and s.tail_splits == 1 for v in sets.values() for s in v)


@needs_nvrtc
def test_first_call_after_prebuild_runs_no_verifier_and_no_nvrtc(fresh_cache, counted,
                                                                 monkeypatch):
    # without a prebuild the first call verifies and compiles (so the test can fail)
    other = KIND.problem(3000, 5000, 2000)
    monkeypatch.setattr(prebuild, "common_schedules", lambda kind: {untuned(other): other})
    built = prebuild.prebuild_matmul([KIND])
    assert [b.schedule for b in built] == [untuned(PROBLEM)]
    assert counted == {"verify": 1, "nvrtc": 1}
    assert any((fresh_cache / "verified").rglob("*.json"))

    _forget_in_memory(PROBLEM, untuned(PROBLEM))
    before = compile_mod.compile_stats()["disk_hits"]
    compiled = _first_call()
    assert counted == {"verify": 1, "nvrtc": 1}, "the first call verified or compiled again"
    assert compile_mod.compile_stats()["disk_hits"] == before + 1
    assert compiled.binary.from_cache and compiled.binary.cubin


@needs_nvrtc
def test_prebuild_writes_records_even_when_the_kernel_is_in_memory(fresh_cache, counted,
                                                                  monkeypatch, tmp_path):
    """This process compiled the kernel before, with ARGUS_VERIFY=0 into another cache (as
    tests/gpu/test_matmul_first_call_gpu.py does before test_matmul_prebuild_gpu.py): the
    prebuild into the cache in use still leaves the verdict and the cubin there, so the first
    call after it verifies and compiles nothing (on the H200, 2026-12-02, it did both: the
    prebuild came back from the kernel's in-process memo and wrote nothing)."""
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "earlier"))
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    _first_call()                                    # in memory now, no verdict anywhere
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(fresh_cache))
    monkeypatch.delenv("ARGUS_VERIFY")
    monkeypatch.setattr(prebuild, "common_schedules",
                        lambda kind: {untuned(PROBLEM): PROBLEM})
    prebuild.prebuild_matmul([KIND])
    assert counted == {"verify": 1, "nvrtc": 1}
    assert any((fresh_cache / "verified").rglob("*.json"))
    assert any((fresh_cache / "cubin").rglob("*.json"))
    assert any((fresh_cache / "coverage").rglob("*.json"))

    _forget_in_memory(PROBLEM, untuned(PROBLEM))
    compiled = _first_call()
    assert counted == {"verify": 1, "nvrtc": 1}, "the first call verified or compiled again"
    assert compiled.binary.from_cache


@pytest.mark.parametrize("m,n,k,layout", [(3000, 5000, 2000, "kn"), (2048, 7168, 2000, "nk"),
                                          (16, 8000, 8000, "nk"), (4095, 4097, 4096, "kn")])
def test_launch_specialization_of_unaligned_shapes_renders_the_prebuilt_kernel(m, n, k,
                                                                               layout):
    """The first launch of a shape whose K, M or N is no multiple of 16 runs the kernel that
    prebuild compiled, not a launch-specialized variant of it (CompiledKernel.variant builds
    one only when the launch's alignment facts change the CUDA): the GEMMs move global data by
    TMA only, so the facts of any launch render the same text."""
    from argus import codegen
    from argus.analysis import alignment
    from argus.compiler import lower_only

    kind = prebuild.Kind("bf16", "bf16", layout, n % 8 == 0)
    problem = kind.problem(m, n, k)
    kernel_fn, run = kernel_for(problem, untuned(problem))
    lowered = lower_only(kernel_fn, s=run)
    text = codegen.render(lowered).text
    extents = {"M": m, "N": n, "K": k}
    for spec in (alignment.LaunchSpecialization(("A", "B", "C"), tuple(
                     s for s, v in extents.items() if v % alignment.DIVISIBILITY == 0)),
                 alignment.LaunchSpecialization(("A", "B", "C"), ("K", "M", "N"))):
        specialized = alignment.specialize(lowered, spec)
        assert not specialized.attr("global_access") or \
            codegen.render(specialized).text == text, spec


def test_no_launch_specialization_changes_a_prebuilt_kernel():
    """Every kernel prebuild compiles is the one every launch runs: for each common schedule of
    each kind and every launch specialization (operands 16-byte aligned or C not, any of M, N,
    K a multiple of 16 or not), the specialized kernel renders the same CUDA, so no launch
    compiles a variant that prebuild did not build."""
    import itertools

    from argus import codegen
    from argus.analysis import alignment
    from argus.compiler import lower_only

    specs = [alignment.LaunchSpecialization(aligned, divisible)
             for aligned in (("A", "B", "C"), ("A", "B"))
             for r in range(4) for divisible in itertools.combinations(("K", "M", "N"), r)]
    for kind in prebuild.COMMON_KINDS:
        for schedule, problem in prebuild.common_schedules(kind).items():
            kernel_fn, run = kernel_for(problem, schedule)
            lowered = lower_only(kernel_fn, s=run)
            text = codegen.render(lowered).text
            for spec in specs:
                specialized = alignment.specialize(lowered, spec)
                assert not specialized.attr("global_access") or \
                    codegen.render(specialized).text == text, (kind, schedule, spec)


@needs_nvrtc
def test_prebuilt_kernel_is_a_hit_in_a_fresh_process(fresh_cache):
    """Across processes: the printed IR and CUDA of a kernel (the verdict's key) do not depend
    on the process (no object ids, no hash randomization)."""
    _first_call()  # prebuild (this process)
    code = ("import json\n"
            "from argus import verify\n"
            "from argus.runtime import compile as rc\n"
            "from argus.ops.matmul import compiled_for\n"
            "from argus.ops import prebuild\n"
            "from argus.ops.schedules import untuned\n"
            "calls = []\n"
            "check = verify.check\n"
            "verify.check = lambda *a, **k: calls.append(1) or check(*a, **k)\n"
            "p = prebuild.Kind().problem(3000, 5000, 2000)\n"
            "compiled_for(p, untuned(p))\n"
            "print(json.dumps({'verify': len(calls), **rc.compile_stats()}))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(  # keep the caller's site dirs
        [str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]), PYTHONHASHSEED="7")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    stats = json.loads(proc.stdout.strip().splitlines()[-1])
    assert stats["verify"] == 0 and stats["compiles"] == 0 and stats["disk_hits"] == 1, stats


@needs_nvrtc
def test_verdict_is_keyed_by_this_argus(fresh_cache, counted, monkeypatch):
    _first_call()
    assert counted["verify"] == 1
    _forget_in_memory(PROBLEM, untuned(PROBLEM))
    monkeypatch.setattr(cache, "argus_fingerprint", lambda: "another argus")
    _first_call()
    assert counted["verify"] == 2, "a record of another Argus was trusted"


@needs_nvrtc
def test_a_refused_kernel_is_never_remembered(fresh_cache, monkeypatch):
    calls = []

    def refuse(kernel):
        calls.append(kernel.name)
        return [Diagnostic("error", "test.refused", "refused by the test")]

    monkeypatch.setattr(verify, "check", refuse)
    for _ in range(2):
        _forget_in_memory(PROBLEM, untuned(PROBLEM))
        with pytest.raises(VerificationError):
            _first_call()
    assert len(calls) == 2, "the refusal was remembered instead of checked again"
    assert not any((fresh_cache / "verified").rglob("*.json"))


def test_prebuild_list_prints_the_schedules(capsys):
    from argus.cli import main

    assert main(["prebuild", "--list", "--kind", "bf16:kn:tma"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    expected = prebuild.common_schedules(prebuild.Kind("bf16", "bf16", "kn", True))
    assert [line.split("  ", 1)[1] for line in lines] == [repr(s) for s in expected]
    assert all(isinstance(s, GemmSchedule) for s in expected)
