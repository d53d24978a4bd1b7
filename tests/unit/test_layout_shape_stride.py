"""Layout value type: construction, evaluation (ints, tuples, numpy), text, coalesce, helpers."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.layout import (
    Layout,
    coalesce,
    crd2idx,
    flatten,
    idx2crd,
    inttuple,
    make_layout,
    make_layout_like,
    make_ordered_layout,
)

FAST = settings(max_examples=150, deadline=None)


def shape_trees(max_leaf: int = 6):
    leaf = st.integers(1, max_leaf)
    return st.recursive(leaf, lambda kids: st.tuples(kids, kids) | st.tuples(kids, kids, kids)
                        | st.tuples(kids), max_leaves=5)


@st.composite
def layouts(draw, max_leaf: int = 6, max_stride: int = 40):
    shape = draw(shape_trees(max_leaf))
    leaves = inttuple.flatten(shape)
    strides = draw(st.lists(st.integers(0, max_stride), min_size=len(leaves),
                            max_size=len(leaves)))
    return Layout(shape, inttuple.unflatten(strides, shape))


def brute(layout: Layout) -> list[int]:
    """Reference evaluation straight from the definition (no shared code with Layout)."""
    shapes, strides = inttuple.flatten(layout.shape), inttuple.flatten(layout.stride)
    out = []
    for idx in range(layout.size):
        off, rest = 0, idx
        for s, d in zip(shapes, strides):
            off += (rest % s) * d
            rest //= s
        out.append(off)
    return out


def test_construction_normalises_and_validates():
    lay = Layout([4, [2, 3]], [1, [4, 8]])
    assert lay.shape == (4, (2, 3)) and lay.stride == (1, (4, 8))
    assert Layout((4, 8)).stride == (1, 4)
    assert Layout(np.int64(4), np.int64(2)) == Layout(4, 2)
    with pytest.raises(ValueError, match="congruent"):
        Layout((4, 8), (1, (2, 3)))
    with pytest.raises(ValueError, match="leaf < 1"):
        Layout((4, 0), (1, 4))
    with pytest.raises(ValueError, match="negative"):
        Layout(4, -1)
    with pytest.raises(TypeError):
        Layout("4", 1)


def test_structure_queries():
    lay = Layout(((4, 8, 4), (2, 2, 8)), ((128, 1, 16), (64, 8, 512)))
    assert (lay.size, lay.cosize, lay.rank, lay.depth) == (4096, 4096, 2, 2)
    assert Layout(8, 2).rank == 1 and Layout(8, 2).depth == 0
    assert lay[1] == Layout((2, 2, 8), (64, 8, 512))
    assert Layout(8, 2)[0] == Layout(8, 2)
    assert [m.size for m in lay.modes()] == [128, 32]


def test_evaluation_index_coordinate_and_numpy():
    lay = Layout(((2, 4), 3), ((12, 1), 4))
    assert lay(0) == 0 and lay(1) == 12 and lay(2) == 1
    assert lay(((1, 2), 2)) == 12 + 2 + 8
    assert lay((5, 2)) == lay(5 + 8 * 2)          # an int for a tuple mode is its 1-D index
    assert lay(5, 2) == lay((5, 2))
    assert lay.table().tolist() == brute(lay)
    idx = np.arange(lay.size)
    assert lay(idx).tolist() == brute(lay)
    with pytest.raises(ValueError):
        lay((1, 2, 3))


def test_index_past_size_extends_last_mode():
    # CuTe convention: the last leaf takes the remainder without a modulo
    assert Layout((2, 3), (1, 10))(7) == 1 + 3 * 10


def test_text_round_trip_and_examples():
    for text in ["(4,8):(8,1)", "((4,8),2):((1,4),32)", "7:3", "(4,):(2,)"]:
        assert str(Layout.parse(text)) == text
    with pytest.raises(ValueError, match="shape:stride"):
        Layout.parse("(4,8)")


@FAST
@given(layouts())
def test_parse_str_round_trip(lay):
    assert Layout.parse(str(lay)) == lay


@FAST
@given(layouts())
def test_evaluation_matches_definition(lay):
    assert lay.table().tolist() == brute(lay)
    assert lay.cosize == (max(brute(lay)) + 1)


@FAST
@given(layouts())
def test_coalesce_preserves_function(lay):
    c = coalesce(lay)
    assert c.size == lay.size
    assert c.table().tolist() == lay.table().tolist()
    assert c.depth <= 1
    leaves = list(zip(inttuple.flatten(c.shape), inttuple.flatten(c.stride)))
    for (s0, d0), (_, d1) in itertools.pairwise(leaves):
        assert d1 != s0 * d0                # nothing left to merge
    assert all(s > 1 for s, _ in leaves) or c == Layout(1, 0)


@FAST
@given(layouts())
def test_flatten_preserves_function(lay):
    assert flatten(lay).table().tolist() == lay.table().tolist()
    assert flatten(lay).depth <= 1


def test_coalesce_examples_and_by_mode():
    assert coalesce(Layout((2, (1, 6)), (1, (6, 2)))) == Layout(12, 1)
    assert coalesce(Layout((1, 1), (3, 5))) == Layout(1, 0)
    assert coalesce(Layout((4, 3), (0, 0))) == Layout(12, 0)
    by_mode = coalesce(Layout(((2, 3), (4, 5)), ((1, 2), (10, 40))), (1, 1))
    assert by_mode == Layout((6, 20), (1, 10))
    assert by_mode.table().tolist() == Layout(((2, 3), (4, 5)), ((1, 2), (10, 40))).table().tolist()


@FAST
@given(shape_trees(), st.data())
def test_idx2crd_crd2idx_round_trip(shape, data):
    idx = data.draw(st.integers(0, inttuple.product(shape) - 1))
    crd = idx2crd(idx, shape)
    assert inttuple.congruent(crd, shape)
    assert crd2idx(crd, shape) == idx
    assert Layout(shape)(crd) == idx           # compact col-major is the colex index


def test_compact_constructors():
    assert Layout.row_major((2, 3, 4)) == Layout((2, 3, 4), (12, 4, 1))
    assert Layout.col_major((2, 3, 4)) == Layout((2, 3, 4), (1, 2, 6))
    assert make_ordered_layout((2, 3, 4), (1, 2, 0)) == Layout((2, 3, 4), (4, 8, 1))
    assert make_layout(Layout(4, 1), Layout((2, 2), (4, 8))) == Layout((4, (2, 2)), (1, (4, 8)))
    for shape in [(2, 3, 4), ((2, 2), 5)]:
        assert Layout.row_major(shape).is_compact() and Layout.col_major(shape).is_compact()


@FAST
@given(layouts())
def test_make_layout_like_keeps_order_and_is_compact_on_live_modes(lay):
    like = make_layout_like(lay)
    assert like.shape == lay.shape
    live = [(s, d, nd) for s, d, nd in zip(inttuple.flatten(lay.shape),
                                           inttuple.flatten(lay.stride),
                                           inttuple.flatten(like.stride)) if s > 1 and d > 0]
    order_old = sorted(range(len(live)), key=lambda p: (live[p][1], p))
    order_new = sorted(range(len(live)), key=lambda p: (live[p][2], p))
    assert order_old == order_new
    sub = Layout(tuple(s for s, _, _ in live) or 1, tuple(nd for _, _, nd in live) or 0)
    assert sub.is_compact()
