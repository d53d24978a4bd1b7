"""Seeded bugs in SmemGather's `inside` claim (ir/ops.py: the dims whose index the trace proved
inside the shared view; codegen drops their bounds check), each caught by smem.gather-inside
(verify/check_smem.py) with the element, the thread holding it, the index and its line; and
the library's span gathers (conv_im2col's ag.gather of a shared view) proving the claim.

The tracer's intervals are right, so a wrong claim is seeded into the IR the way a wrong
interval rule (ir/numeric.py) would put it there:

  * the conv span kernel's row index, `ag.where(..., r, -1)` (a column with no input reads
    row -1, i.e. `other`), claimed inside: the -1 rows would read the bytes before the buffer;
  * a column index `arange(64) + 1` over a 64-column view claimed inside: column 64 is the next
    row's first element;
  * an index the model has no value of (loaded from memory) claimed inside: unknown, never
    proven.
"""

import dataclasses
import sys
from pathlib import Path

import pytest

import argus as ag
from argus import dtypes, verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interp"))
from test_conv_im2col_span import ALEXNET, STEM, _lowered  # noqa: E402


def _claim(region: Region, inside: tuple[int, ...]) -> Region:
    """`region` with every SmemGather claiming `inside`."""
    ops = []
    for op in region.ops:
        if isinstance(op, O.SmemGather):
            op = dataclasses.replace(op, inside=inside)
        elif isinstance(getattr(op, "body", None), Region):
            op = op.replace(body=_claim(op.body, inside))
        ops.append(op)
    return Region(tuple(ops))


def _seeded(kernel, inside):
    return dataclasses.replace(kernel, body=_claim(kernel.body, inside))


@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
@pytest.mark.parametrize("geom,q", [(STEM, 112), (ALEXNET, 55)], ids=["7x7s2", "11x11s4"])
def test_the_span_gathers_prove_their_claim(planes, geom, q):
    kernel = _lowered(geom, q, dtypes.bf16, planes)
    gathers = [op for op in kernel.walk() if isinstance(op, O.SmemGather)]
    assert gathers and all(op.inside == (1,) for op in gathers)   # the columns: no guard
    report = verify.run(kernel, include_proven=True)
    mine = [f for f in report.findings if f.code == "smem.gather-inside"]
    assert mine and all(f.status == "proven" for f in mine), "\n".join(map(str, mine))
    assert not report.errors and not report.unknowns, \
        "\n".join(map(str, report.errors + report.unknowns))


def test_a_row_claim_the_padding_rows_break_is_reported():
    """BUG: the span kernel's row index (-1 for a column with no input) claimed inside."""
    kernel = _seeded(_lowered(STEM, 112, dtypes.bf16, False), (0, 1))
    bad = [d for d in verify.run(kernel).errors if d.code == "smem.gather-inside"]
    assert bad, "the wrong claim is not reported"
    d = bad[0]
    wit = d.counterexample
    assert wit["dim"] == 0 and wit["index"] == -1 and wit["extent"] == STEM.r, wit
    # who: the thread holding the element (its layout), not a line lookup
    assert "thread" in wit and "element" in wit and "register" in wit, wit
    # where: the gather's line and the line of the index's defining expression (the where)
    assert "conv_im2col.py" in str(d.loc) and "conv_im2col.py" in wit["index_at"], wit
    assert "sX" in d.message and "row -1" in d.message, d.message


@ag.kernel(threads=32)
def shifted(X: ag.Tensor["M", 64, ag.bf16], Y: ag.Tensor["M", 64, ag.bf16]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((32, 64), ag.bf16)
    ag.store_shared(sX.view(), ag.load(X, (b * 32, 0), (32, 64)))
    col = ag.arange(64)[None, :] + 1
    ag.store(Y, (b * 32, 0), ag.gather(sX.view(), (ag.arange(32)[:, None], col), other=0.0))


def test_a_column_claim_one_past_the_end_is_reported():
    """BUG: `arange(64) + 1` over 64 columns claimed inside: element (t, 63) reads column 64."""
    kernel = lower_only(shifted)
    assert [op.inside for op in kernel.walk() if isinstance(op, O.SmemGather)] == [(0,)]
    assert not [d for d in verify.run(kernel).errors if d.code == "smem.gather-inside"]
    bad = [d for d in verify.run(_seeded(kernel, (0, 1))).errors
           if d.code == "smem.gather-inside"]
    assert bad, "the wrong claim is not reported"
    wit = bad[0].counterexample
    assert wit["dim"] == 1 and wit["index"] == 64 and wit["element"][1] == 63, wit
    # the thread holding element (t, 63) of a "rows" tile is thread t
    assert wit["thread"] == wit["element"][0], wit
    # the index's line is the user's `col = ...` line, named by the user's variable
    line = next(i + 1 for i, text in enumerate(Path(__file__).read_text().splitlines())
                if text.strip().startswith("col = ag.arange(64)"))
    assert wit["index_at"].endswith(f":{line}"), wit
    assert "col" in bad[0].message, bad[0].message


@ag.kernel(threads=32)
def routed(X: ag.Tensor["M", 64, ag.bf16], R: ag.Tensor["M", 1, ag.i32],
           Y: ag.Tensor["M", 64, ag.bf16]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((32, 64), ag.bf16)
    ag.store_shared(sX.view(), ag.load(X, (b * 32, 0), (32, 64)))
    rows = ag.load(R, (b * 32, 0), (32, 1))
    ag.store(Y, (b * 32, 0), ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0))


def test_a_claim_on_an_index_the_model_does_not_know_is_never_proven():
    kernel = _seeded(lower_only(routed), (0, 1))
    report = verify.run(kernel, include_proven=True)
    mine = [f for f in report.findings if f.code == "smem.gather-inside"]
    assert mine and not any(f.status == "proven" and "dim-0" in f.message for f in mine), \
        "\n".join(map(str, mine))
    assert any(f.status in ("unknown", "violated") for f in mine), "\n".join(map(str, mine))
