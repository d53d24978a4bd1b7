"""store.coverage of a destination dim no tile axis lands on (a batch, an image row of a
per-row walk: Y[n, h, :, :] stored a (W, 1) tile at a time). Such a leading dim was left
to store.once ("a batch index: covered with the grid's batch loop"); a row stored one off,
`h + 1`, is injective (store.once holds) and leaves row 0 unwritten: it was proven. The dim is
now claimed from the program ids, warpgroups and loops (counted from 0) it names: injective,
and inside the positions they visit. Not that they are as many as the extent: a leading
dim's extent is often a launch relation the kernel does not state (BH = B * HKV of the decode
split's partials). A dim walked together with another (decoded from one program id) is
covered tile by tile with it (tests/verify/test_store_decoded_leading_dims.py)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify


def make_rows(shift: int = 0, batch_shift: int = 0):
    @ag.kernel(threads=32, name="rows_walk")
    def rows_walk(X: ag.Tensor["NK", 16, 16, 1, ag.f32], Y: ag.Tensor["NK", 16, 16, 1, ag.f32]):
        nk, h = ag.grid(Y.shape[0], 16)
        x = ag.load(X, (nk, h, 0, 0), (16, 1))
        ag.store(Y, (nk + batch_shift, h + shift, 0, 0), x)
    return rows_walk


def test_rows_walked_by_the_grid_are_proven_covered():
    report = verify.run(make_rows().trace(), include_proven=True)
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    cov = [f for f in report.findings if f.code == "store.coverage"]
    assert cov and all(f.status == "proven" for f in cov), cov


@pytest.mark.parametrize("shift,batch_shift,dim", [(1, 0, 1), (0, 1, 0)],
                         ids=["row_plus_one", "batch_plus_one"])
def test_a_leading_dim_stored_one_off_is_a_coverage_error(shift, batch_shift, dim):
    found = [d for d in verify.check(make_rows(shift, batch_shift).trace())
             if d.code == "store.coverage" and d.severity == "error"]
    assert found, "a leading dim stored one off was proven covered"
    assert any(f"dim {dim} of Y" in d.message and "thread" in d.counterexample
               for d in found), "\n".join(str(d) for d in found)
    # the fix speaks of the leading dim's index (a shift), not of a tile count and step
    assert all(f"index dim {dim} of Y" in d.fix and "no shift" in d.fix and
               "partial_outputs=('Y',)" in d.fix
               for d in found if f"dim {dim} of Y" in d.message), [d.fix for d in found]
