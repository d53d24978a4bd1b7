"""The same kernels verified in two fresh processes with different PYTHONHASHSEED values give
the same findings, word for word: verdicts, messages and counterexamples (docs/verify.md,
"Reproducible findings"), whatever the process verified before (each `verify.run` in a z3
context of its own, counterexamples minimized canonically: "A z3 context per run, canonical
counterexamples"). Run at the default budget (counterexamples) and at a 1 ms budget, where
most pipeline queries run out of their resource limit (unknowns: their reason quoted the
wall-clock milliseconds the attempt took, so two runs never read alike)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# seeded bugs with counterexamples of several checks (store.once / coverage / coords, the
# pipeline's totals and counters), each verified in a few seconds
MUTATIONS = ("gemm/store_missing_wg_offset", "gemm/consumer_skips_last_k",
             "lowered/per_tile_counter_reset")

SCRIPT = """
import os, sys
from argus import verify
from argus.verify import solver
from tests.mutations.corpus import CORPUS
for budget in (None, "1"):
    if budget is not None:
        os.environ["ARGUS_VERIFY_TIMEOUT_MS"] = budget
    solver.clear_cache()
    for m in CORPUS:
        if m.name in sys.argv[1:]:
            for d in verify.run(m.build()).diagnostics:
                if d.severity != "note":
                    print(budget, m.name, d.severity, d.code, d.message, repr(d.counterexample))
"""


def _findings(hash_seed: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARGUS_VERIFY_TIMEOUT_MS"}
    env.update(PYTHONHASHSEED=hash_seed, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", SCRIPT, *MUTATIONS], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_findings_do_not_depend_on_the_process():
    first, second = _findings("0"), _findings("1")
    lines = first.splitlines()
    # the run exercises what it claims: counterexamples, and unknowns out of budget
    assert any(" error " in ln and "{" in ln for ln in lines), first[:2000]
    assert any(ln.startswith("1 ") and " unknown " in ln and "out of budget" in ln
               for ln in lines), first[:2000]
    assert {ln.split(" ")[1] for ln in lines} == set(MUTATIONS)
    differ = [(a, b) for a, b in zip(lines, second.splitlines()) if a != b]
    assert first == second, "findings differ between two processes:\n" + "\n".join(
        f"- {a[:400]}\n+ {b[:400]}" for a, b in differ[:4])


def test_an_unknown_says_when_a_wall_clock_backstop_cut_it(monkeypatch):
    """An unknown out of its resource limit has no time in its reason; one whose check ran
    to its wall-clock backstop (here: a backstop of 0 ms) says so (machine-dependent)."""
    import z3

    from argus.verify import solver

    x, y, z = z3.Ints("det_x det_y det_z")
    query = ([x > 1, y > 1, z > 1], [("no cube sum", x * x * x + y * y * y != z * z * z)])
    plain = solver.prove(*query, rlimit=1)
    assert plain.status == "unknown" and "out of budget" in plain.reason, plain
    assert "backstop" not in plain.reason and " ms" not in plain.reason, plain.reason
    monkeypatch.setattr(solver, "backstop_ms", lambda rlimit: 0)
    cut = solver.prove(*query, rlimit=1)
    assert cut.status == "unknown" and "wall-clock backstop cut a check short" in cut.reason, \
        cut.reason


# the corpus kernel whose findings read three ways on the parent tree: alone, and after other
# corpus kernels (a one-kernel prefix was enough), under two hash seeds (store.once's M = 514,
# 128 or 1; store.coverage's two units in either order)
RASTER = "persistent/raster_full_groups"

PREFIXED = """
import sys
from argus import verify
from tests.mutations.corpus import CORPUS
target, prefix = sys.argv[1], int(sys.argv[2])
for m in CORPUS[:prefix]:
    if m.name != target:
        verify.run(m.build())
for m in CORPUS:
    if m.name == target:
        for d in verify.run(m.build()).diagnostics:
            if d.severity != "note":
                print(d.severity, d.code, d.message, repr(d.counterexample))
"""


def _after_prefix(hash_seed: str, prefix: int) -> str:
    env = {k: v for k, v in os.environ.items() if k != "ARGUS_VERIFY_TIMEOUT_MS"}
    env.update(PYTHONHASHSEED=hash_seed, PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-c", PREFIXED, RASTER, str(prefix)], cwd=ROOT,
                         env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_findings_do_not_depend_on_what_the_process_verified_before():
    """raster_full_groups alone, after the corpus's first kernel and after its first eight, in
    fresh processes under three hash seeds: the same text. On the parent tree: two texts
    (M = 514 alone, 128 after the prefixes); with a context per run alone, still two (z3's
    first model also follows the process's memory layout); with the canonical minimization
    too, one."""
    from tests.mutations.corpus import CORPUS

    assert RASTER in {m.name for m in CORPUS[8:]}   # the prefixes are other kernels
    alone = _after_prefix("0", 0)
    assert "store.once" in alone and "store.coverage" in alone, alone[:2000]
    for seed, prefix in (("1", 1), ("7", 8)):
        after = _after_prefix(seed, prefix)
        assert after == alone, (f"{RASTER} after {prefix} other corpus kernels "
                                f"(PYTHONHASHSEED={seed}) reads differently from alone:\n"
                                f"- {alone[:1500]}\n+ {after[:1500]}")


def test_a_run_leaves_no_z3_context_behind():
    """A run's terms live in its own context, which nothing keeps after the run (a live
    context was enough to change a later run's counterexamples, measured): the caller's main
    context is back, and the verifier's context-local tables are the caller's again."""
    import gc
    import weakref

    import z3

    from argus import verify
    from argus.verify import solver
    from tests.mutations.corpus import CORPUS

    made: list = []
    real = z3.Context

    class Watched(real):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            made.append(weakref.ref(self))

    outer = z3.main_ctx()
    x = z3.Int("outer_x")
    z3.Context = Watched
    try:
        by = {m.name: m for m in CORPUS}
        verify.run(by[RASTER].build())
    finally:
        z3.Context = real
    gc.collect()
    assert len(made) == 1, made
    assert made[0]() is None, [type(r).__name__ for r in gc.get_referrers(made[0]())][:8]
    assert z3.main_ctx() is outer and x.ctx is outer
    assert solver.prove([x > 1], [("outer terms still solve", x > 0)]).status == "proven"
