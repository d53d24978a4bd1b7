"""Seeded bugs in the KernelBench templates (argus/compose; tests/mutations/compose_kernels.py:
the DSL source tile.py and conv.py render, written out with a bug switch): each caught bug is
an error naming a thread and its `# BUG:<name>` line (tests/mutations/seeded.py); each
correct kernel verifies clean. The bugs the verifier does not catch yet (compose_kernels.GAPS,
with why) are strict xfails: they fail the moment a fix catches them, to be moved to BUGS."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mutations import compose_kernels as C
from tests.mutations import seeded as S

FILE = Path(C.__file__)


@pytest.mark.parametrize("factory,bug,codes", C.BUGS, ids=[b for _, b, _ in C.BUGS])
def test_compose_bug_is_caught_at_its_line(factory, bug, codes):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


@pytest.mark.parametrize("factory,bug,codes,why", C.GAPS, ids=[g[1] for g in C.GAPS])
@pytest.mark.xfail(strict=True, reason="a verifier gap on the templates' static shapes "
                                       "(compose_kernels.GAPS)")
def test_compose_gap(factory, bug, codes, why):
    S.assert_caught(factory(bug).trace(), codes, FILE, bug)


@pytest.mark.parametrize("factory", C.CLEAN, ids=[f.__name__ for f in C.CLEAN])
def test_compose_template_is_clean(factory):
    S.assert_clean(factory().trace())


def test_max_fill_names_the_where_that_sets_it():
    """fill.identity names the op that put the wrong masked value in (the where's constant
    false branch), not only the reduction lines later: the line a fix edits."""
    (line,) = S.bug_lines(FILE, "max_fill_zero")
    (d,) = [d for d in S.assert_caught(C.make_softmax("max_fill_zero").trace(),
                                       ("fill.identity",), FILE, "max_fill_zero")]
    assert d.counterexample["filled_at"] == f"{FILE.name}:{line}", d.counterexample
    assert f"where at {FILE.name}:{line}" in d.fix, d.fix
