"""Two claims of the depthwise conv template's shape (argus/compose/conv.py; seeded bugs
store_row_below and bias_input_channel of tests/mutations/compose_kernels.py):

* store.coverage of leading dims decoded from one program id (image pb // 16, row pb % 16,
  no tile axis on either): covered tile by tile (check_stores._tile_coverage, the pair merged
  into one dim), no longer left to store.once. A row stored one below puts a unit outside the
  output while the units are no more than the tiles: an error. A grid with spare units (an
  image more than the output has) stores outside too and is right: a warning only.
* ew.broadcast of an integer dim (`dim{i}`) across operands of different dim sets: linked
  where the tensors loaded into each operand with an integer dim at position i are of one
  rank (check_tiles._one_rank_fields): the bias B[8, 1] against x * Wt[8, 9] (X's dims ride
  along) is checked on dim0; a bias of another rank is not linked."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify


def make_rows(shift: int = 0, spare: int = 0):
    @ag.kernel(threads=32, name="decoded_rows")
    def decoded_rows(X: ag.Tensor["NK", 16, 16, 1, ag.f32], Y: ag.Tensor["NK", 16, 16, 1, ag.f32]):
        pb, q = ag.grid((Y.shape[0] + spare) * 16, 1)
        nk = pb // 16
        h = pb % 16
        x = ag.load(X, (nk, h, 0, 0), (16, 1))
        ag.store(Y, (nk, h + shift, 0, 0), x)
    return decoded_rows


def _coverage(kernel):
    report = verify.run(kernel.trace(), include_proven=True)
    return [f for f in report.findings if f.code == "store.coverage"]


def test_decoded_image_and_row_are_proven_covered_tile_by_tile():
    cov = _coverage(make_rows())
    assert cov and all(f.status == "proven" for f in cov), cov
    # the tile walk's claims are posed (before: only the tile dims were)
    assert any("each once" in f.subject for f in cov), [f.subject for f in cov]


def test_a_decoded_row_stored_one_below_is_an_error():
    found = [d for d in verify.check(make_rows(shift=1).trace())
             if d.code == "store.coverage" and d.severity == "error"]
    assert found, "a row stored one below was proven covered"
    assert any("no more than" in d.message and "thread" in d.counterexample
               for d in found), "\n".join(str(d) for d in found)


def test_spare_units_outside_the_output_are_only_a_warning():
    """A grid one image larger than Y: its units past the end are masked away (right), so
    a unit outside is no error when the units outnumber the tiles."""
    diags = [d for d in verify.check(make_rows(spare=1).trace())
             if d.code == "store.coverage" and d.severity in ("error", "warning")]
    assert diags and all(d.severity == "warning" for d in diags), \
        "\n".join(str(d) for d in diags)


BIAS2 = ag.Tensor[8, 1, ag.f32]
BIAS3 = ag.Tensor[8, 1, 1, ag.f32]


def make_bias(channel_div: int = 1, bias_rank: int = 2):
    """x * Wt[k] + B[k] over one (16, 1) column of an image row (the depthwise template's
    epilogue): the bias read at kk // channel_div; B of rank 2 ([8, 1]) or 3 ([8, 1, 1])."""
    def body(X, Wt, B, Y):
        pb, q = ag.grid(Y.shape[0] * 16, 1)
        nk = pb // 16
        o0 = pb % 16
        kk = nk % 8
        x = ag.load(X, (nk // 8 * 4 + kk // 2, o0, 0, 0), (16, 1))
        acc = x * ag.load(Wt, (kk, 4), (1, 1))
        at = (kk // channel_div, 0) if bias_rank == 2 else (kk // channel_div, 0, 0)
        acc = acc + ag.load(B, at, (1, 1))
        ag.store(Y, (nk, o0, 0, 0), acc)

    if bias_rank == 2:
        @ag.kernel(threads=32, name="bias_epilogue")
        def bias_epilogue(X: ag.Tensor["NC", 16, 16, 1, ag.f32], Wt: ag.Tensor[8, 9, ag.f32],
                          B: BIAS2, Y: ag.Tensor["NK", 16, 16, 1, ag.f32]):
            body(X, Wt, B, Y)
        return bias_epilogue

    @ag.kernel(threads=32, name="bias_epilogue3")
    def bias_epilogue3(X: ag.Tensor["NC", 16, 16, 1, ag.f32], Wt: ag.Tensor[8, 9, ag.f32],
                       B: BIAS3, Y: ag.Tensor["NK", 16, 16, 1, ag.f32]):
        body(X, Wt, B, Y)
    return bias_epilogue3


def test_bias_of_the_weights_channel_is_proven():
    report = verify.run(make_bias().trace(), include_proven=True)
    ew = [f for f in report.findings if f.code == "ew.broadcast" and "add" in f.subject]
    assert ew and all(f.status == "proven" for f in ew), ew
    bad = [d for d in report.diagnostics if d.severity in ("error", "warning", "unknown")]
    assert not bad, "\n".join(str(d) for d in bad)


def test_bias_of_the_input_channel_is_an_error():
    found = [d for d in verify.check(make_bias(channel_div=2).trace())
             if d.code == "ew.broadcast" and d.severity == "error"]
    assert found and "dim0" in found[0].message and "thread" in found[0].counterexample, \
        "\n".join(str(d) for d in found)


@pytest.mark.parametrize("channel_div", [1, 2])
def test_a_bias_of_another_rank_is_not_linked(channel_div):
    """B[8, 1, 1]'s dim0 against Wt[8, 9]'s: tensors of two ranks, whose positions need not
    mean one dim, link nothing (the wrong channel is then not seen: no claim, no alarm)."""
    found = [d for d in verify.check(make_bias(channel_div, bias_rank=3).trace())
             if d.code == "ew.broadcast" and d.severity != "note"]
    assert not found, "\n".join(str(d) for d in found)


def test_integer_dim_fields_are_positions_not_names():
    from argus.verify.tagdomain import integer_dim_position, is_coordinate_field, is_integer_dim

    assert is_integer_dim("dim0") and is_integer_dim("dim12")
    assert integer_dim_position("dim12") == 12
    # a shape symbol that starts with "dim" (DIMS, lower-cased) is a name: a coordinate field
    assert not is_integer_dim("dims") and not is_integer_dim("dim")
    assert is_coordinate_field("dims") and not is_coordinate_field("dim3")
