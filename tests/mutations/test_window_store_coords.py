"""store.coords of a window sum (check_stores._coords, `_window`): a 'same' 1-d convolution
whose input and output share the dim name L stores Y[l] = sum over t of X[l + t - P]. The
value's l is a set (the window), so the claim since 2b88012 is that the destination is in the
window; membership alone accepted a tile stored permuted inside its windows (4 outputs a
tile, 8 taps: a reversed tile keeps every destination inside its element's window). The
window must also sit at one offset from the destination for every element, CTA and
iteration."""

from __future__ import annotations

from pathlib import Path

import pytest

import argus as ag
from argus import verify
from tests.mutations import seeded as S

TAPS = 8


def make_conv1d_same(bug: str | None = None, P: int = 3, BO: int = 4):
    @ag.kernel(threads=128, name="conv1d_same")
    def conv1d_same(X: ag.Tensor["NB", "L", ag.f32], W: ag.Tensor[1, TAPS, ag.f32],
                    Y: ag.Tensor["NB", "L", ag.f32]):
        NB, L = X.shape
        n, po = ag.grid(NB, ag.cdiv(L, BO))
        if bug == "reversed":
            o = po * BO + (BO - 1 - ag.arange(BO))[:, None]  # BUG:reversed
        elif bug == "cta_shift":
            o = po * BO + ag.arange(BO)[:, None] + po % 2  # BUG:cta_shift
        else:
            o = po * BO + ag.arange(BO)[:, None]
        tap = ag.arange(TAPS)[None, :]
        x = ag.gather(X, (n, o + tap - P), other=0.0)
        w = ag.load(W, (0, 0), (1, TAPS))
        ag.store(Y, (n, po * BO), (x * w).sum(axis=1), transposed=True)

    return conv1d_same


def _errors(kernel):
    return [d for d in verify.check(kernel) if d.severity in ("error", "warning")]


def test_the_correct_window_sum_is_clean():
    assert _errors(make_conv1d_same()) == []


def test_a_tile_stored_reversed_inside_its_windows_is_a_coords_error():
    found = _errors(make_conv1d_same("reversed"))
    coords = [d for d in found if d.code == "store.coords" and d.severity == "error"]
    assert coords, [str(d) for d in found]
    assert "permuted inside their windows" in coords[0].message
    assert "thread" in coords[0].counterexample


def test_a_window_shifted_by_the_cta_is_a_coords_error():
    found = _errors(make_conv1d_same("cta_shift"))
    assert any(d.code == "store.coords" and d.severity == "error" for d in found), \
        [str(d) for d in found]


@pytest.mark.parametrize("bug", ["reversed", "cta_shift"])
def test_each_bug_names_a_thread_and_its_line(bug):
    S.assert_caught(make_conv1d_same(bug).trace(), ("store.coords",), Path(__file__), bug)
