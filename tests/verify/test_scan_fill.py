"""fill.identity for ag.scan: a scan combines the masked elements of a block loaded past the
tensor's end like a reduction does (into the elements before them when reversed, and into its
total), so they must hold the scan's identity. A reverse cumprod whose load fills with 0 is
refused; the same kernel filling with 1 verifies."""

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
