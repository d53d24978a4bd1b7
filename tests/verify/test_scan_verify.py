"""The verifier on ag.scan. fill.identity: a scan combines the masked elements of a block loaded
past the tensor's end like a reduction does (into the elements before them when reversed, and
into its total), so they must hold the scan's identity: a reverse cumprod whose load fills
with 0 is refused, the same kernel filling with 1 verifies. And the compose scan template's
kernels (one pass, segmented, totals, middle axis) verify clean: positions kept, coverage of
the row by the walk and by the segments proven."""

import pytest

import argus as ag
from argus import verify


def _kernel(fill: float):
    @ag.kernel(threads=32)
    def rev_cumprod(X: ag.Tensor["O", "L", ag.f32], Y: ag.Tensor["O", "L", ag.f32],
                    BN: int = 128):
        (p,) = ag.grid(X.shape[0])
        nb = ag.cdiv(X.shape[1], BN)
        carry = ag.full((1, 1), 1.0)
        for it in ag.range(nb):
            c0 = (nb - 1 - it) * BN
            x = ag.load(X, (p, c0), (1, BN), other=fill)
            y, carry = ag.scan(x, "prod", 1, carry, reverse=True)
            ag.store(Y, (p, c0), y)
    return rev_cumprod


@pytest.mark.parametrize("fill,refused", [(0.0, True), (1.0, False)])
def test_scan_fill_must_be_the_identity(fill, refused):
    found = [d for d in verify.check(_kernel(fill).lower())
             if d.code == "fill.identity" and d.severity == "error"]
    assert bool(found) == refused, found


@pytest.mark.parametrize("key,consts", [
    (("rows", "sum", True, True, False), dict(ROWS=2, BN=128, SEG=4096)),
    (("rows", "prod", False, False, True), dict(ROWS=2, BN=128, SEG=8192, TB=128)),
    (("totals", "sum"), dict(ROWS=2, BN=128, SEG=8192)),
    (("inner", "sum", True, True, False, 256), dict(ROWS=16, BN=256)),
])
def test_compose_scan_kernels_verify(key, consts):
    from argus.compose.scan import kernel

    k, _ = kernel(*key)
    bad = [d for d in verify.check(k.lower(**consts)) if d.severity in ("error", "unknown")]
    assert not bad, bad
