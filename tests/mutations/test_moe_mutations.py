"""The MoE seeded bugs (tests/mutations/moe_mutations.py) are caught by the invariant meant to
catch them, with the witness and words asked for, pointing at the `# BUG` line; their base
kernels verify clean. Same checks as tests/mutations/test_corpus.py: an error, naming the
thread (and warpgroup or role where the kernel has roles)."""

from __future__ import annotations

from pathlib import Path

import pytest

from argus import verify
from tests.mutations import moe_mutations as MM
from tests.mutations.moe_mutations import MOE_CLEAN, MOE_CORPUS
from tests.mutations.seeded import names_thread

FILE = Path(MM.__file__)


def _marker_lines(marker: str) -> list[int]:
    return [i for i, line in enumerate(FILE.read_text().splitlines(), 1)
            if f"BUG:{marker}" in line]


@pytest.mark.parametrize("mutation", MOE_CORPUS, ids=[m.name for m in MOE_CORPUS])
def test_moe_mutation_is_caught(mutation):
    kernel = mutation.build()
    report = verify.run(kernel)
    found = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    hits = [d for d in found if d.code in mutation.codes and d.severity == "error"]
    assert hits, (f"{mutation.name}: expected one of {mutation.codes}, got "
                  f"{[(d.code, d.message[:120]) for d in found]}")
    best = next((d for d in hits if all(k in d.counterexample for k in mutation.witness)
                 and all(w in str(d) for w in mutation.words)
                 and names_thread(d, kernel)), None)
    assert best is not None, (f"{mutation.name}: no {mutation.codes} diagnostic names "
                              f"{mutation.witness} / {mutation.words}:\n"
                              + "\n".join(str(d) for d in hits))
    if mutation.marker:
        lines = _marker_lines(mutation.marker)
        text = str(best) + str(best.loc)
        assert any(f"{FILE.name}:{n}" in text for n in lines), (
            f"{mutation.name}: the diagnostic should point at line(s) {lines}:\n{best}")


@pytest.mark.parametrize("name,build", MOE_CLEAN, ids=[n for n, _ in MOE_CLEAN])
def test_moe_base_kernel_is_clean(name, build):
    errors = [d for d in verify.check(build()) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)
