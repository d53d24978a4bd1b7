"""store.coords on a product with a size-1 dim broadcast (x[4, 64, 3000] * w[1, 64, 1], the
compose template's kept outer group): w's dim0 is position 0 of an extent-1 dim, torch's
broadcast, not an element met pointwise, so the product's dim0 is x's batch
(transfer/tiles._broadcast_kept) and store.coords links it to OUT's dim0 by extent (extent 1
left out for a field that moves: check_stores._integer_extents). A store to another batch is
an error, in either operand order; the right store, and w expanded alone into every batch (its
dim0 the constant 0: not linked), stay clean."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify


def _batch_scale(form: str):
    @ag.kernel(threads=256)
    def batch_scale(X: ag.Tensor[4, 64, 3000, ag.f32], W: ag.Tensor[1, 64, 1, ag.f32],
                    OUT: ag.Tensor[4, 64, 3000, ag.f32], ROWS: int = 2, BN: int = 1024):
        p1, p0 = ag.grid(3, 128)
        o1 = (p0 % 32) * ROWS
        c0 = (p0 // 32) % 4
        o2 = p1 * BN
        x = ag.load(X, (c0, o1, o2), (ROWS, BN))
        w = ag.load(W, (0, o1, 0), (ROWS, 1))
        if form == "expand":
            v = w + ag.zeros((ROWS, BN))
        else:
            v = w * x if form.startswith("w_first") else x * w
        batch = (c0 + 1) % 4 if form.endswith("other_batch") else c0
        ag.store(OUT, (batch, o1, o2), v)
    return batch_scale


@pytest.mark.parametrize("form", ["x_first", "w_first", "expand"])
def test_a_broadcast_product_stored_to_its_batch_is_clean(form):
    report = verify.run(_batch_scale(form).trace())
    assert not report.errors, "\n".join(str(d) for d in report.errors)


@pytest.mark.parametrize("form", ["x_first_other_batch", "w_first_other_batch"])
def test_a_broadcast_product_stored_to_another_batch_is_refused(form):
    report = verify.run(_batch_scale(form).trace())
    found = [d for d in report.errors if d.code == "store.coords"]
    assert found, "\n".join(str(d) for d in report.diagnostics)
    wit = found[0].counterexample
    # the value's batch (x's c0) is not the batch it is stored to
    assert "dim0 of the value == destination dim 0 of OUT" in wit["violated"], wit
    assert "thread" in wit
