"""Every seeded bug of the mutation corpus is caught, as an error, by the invariant meant to
catch it, with a counterexample naming the thread (and its warpgroup or role in a kernel with
roles), the element and iteration it should and pointing at the right line; every base kernel
of the corpus verifies clean (no false positives)."""

from __future__ import annotations

import pytest

from argus import verify
from tests.mutations.corpus import CLEAN, CORPUS, KERNELS_FILE, marker_lines
from tests.mutations.seeded import names_thread


def test_corpus_size_and_families():
    assert len(CORPUS) >= 80
    assert {m.family for m in CORPUS} >= {"gemm", "attention", "moe", "reduction",
                                          "elementwise"}
    assert len({m.name for m in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("mutation", CORPUS, ids=[m.name for m in CORPUS])
def test_mutation_is_caught(mutation):
    kernel = mutation.build()
    report = verify.run(kernel)
    found = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    hits = [d for d in found if d.code in mutation.codes and d.severity == "error"]
    assert hits, (f"{mutation.name}: expected one of {mutation.codes}, got "
                  f"{[(d.code, d.message[:120]) for d in found]}")
    best = None
    for d in hits:  # the one that names everything asked for
        text = str(d)
        if all(k in d.counterexample for k in mutation.witness) and \
                all(w in text for w in mutation.words) and names_thread(d, kernel):
            best = d
            break
    assert best is not None, (
        f"{mutation.name}: no {mutation.codes} error names {mutation.witness} / "
        f"{mutation.words} and a thread (and warpgroup or role where the kernel has roles):\n"
        + "\n".join(str(d) for d in hits))
    for code in mutation.also:
        assert any(d.code == code for d in found), (
            f"{mutation.name}: {code} should be reported too, got "
            f"{[(d.code, d.message[:120]) for d in found]}")
    # structured data for the agent: JSON round trip keeps the witness
    data = best.to_json()
    assert data["code"] == best.code and data["counterexample"]
    if mutation.marker:
        lines = marker_lines(mutation.marker)
        assert lines, mutation.marker
        text = str(best) + str(best.loc)
        assert any(f"{KERNELS_FILE.name}:{n}" in text for n in lines), (
            f"{mutation.name}: the diagnostic should point at line(s) {lines}:\n{best}")


@pytest.mark.parametrize("name,build", CLEAN, ids=[n for n, _ in CLEAN])
def test_base_kernel_is_clean(name, build):
    errors = [d for d in verify.check(build()) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)
