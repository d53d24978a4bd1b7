"""Index arithmetic by a RUNTIME divisor (verify/transfer/tiles.py `_runtime_divmod`): an index
tile divided or reduced by a kernel argument (`% q_len`, `/ group`: packed decode rows, token
r % Sq of head r / Sq) has a value the checks read, z3's integer division by the symbolic size
under C's truncation, bounded by the size's premises (a scalar parameter in [1, 2^24),
ag.require). Before, such an index had no value: sync.exchange took it as any row of the view
and reported the correct kernel below (a false alarm), store.coords too.

The kernel: two consumer warpgroups each write their 64 rows of a [128, 64] shared buffer and
gather them back through a view of the WHOLE buffer, row r of warpgroup wg at
wg * 64 + (r / q_len) * q_len + r % q_len (head, token of a packed row; = wg * 64 + r):

  * correct: proven, zero findings (sync.exchange element by element, store.coords: the row's
    tag is the row stored);
  * a rotation `(r + 1) % q_len` under ag.require(q_len <= 64) stays in the warpgroup's rows
    (needs the remainder's bound 0 <= x % q < q, not an identity): sync.exchange proven;
  * BUG, off-by-one modulus `% (q_len + 1)`: row 64 (warpgroup 1's) for q_len = 32, r = 32;
  * BUG, dividing by the wrong size `r / group`: rows past the warpgroup's 64 for group < q_len;
  * BUG, the rotation by `% (q_len + 1)`: element 63 reads row 64 when q_len = 64.

Each bug is reported by sync.exchange with the thread and element, the row, and the line of
the index's defining expression (the line a fix edits), and by store.coords.
"""

from pathlib import Path

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.target import register_layouts as RL
from tests.mutations.test_exchange_across_warpgroups import _across

HERE = Path(__file__).name


def _packed(variant: str, require: bool = True):
    """The exchange with the row index `variant` names; require=False drops the size's bound
    ag.require(q_len <= 64)."""
    @ag.kernel(threads=384)
    def packed(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32],
               q_len: ag.i32, group: ag.i32):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
        if require:
            ag.require(ag.sym(q_len) <= 64, "a warpgroup's 64 rows hold whole tokens")
        sX = ag.smem((128, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            ag.store_shared(sX.view().rows_of(wg * 64, 64),
                            ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))
            r = ag.arange(64)[:, None]
            if variant == "mod+1":
                rows = wg * 64 + (r / q_len) * q_len + r % (q_len + 1)   # bug: mod+1
            elif variant == "div-group":
                rows = wg * 64 + (r / group) * q_len + r % q_len         # bug: div-group
            elif variant == "rotate":
                rows = wg * 64 + (r + 1) % q_len                         # ok: rotate
            elif variant == "rotate+1":
                rows = wg * 64 + (r + 1) % (q_len + 1)                   # bug: rotate+1
            elif variant == "by-zero":
                rows = wg * 64 + r % (q_len - 1)                         # q_len = 1: x % 0
            else:
                rows = wg * 64 + (r / q_len) * q_len + r % q_len         # ok: packed
            x = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
            ag.store(Y, (b * 128 + wg * 64, 0), x)
    return packed


def _line(text: str) -> int:
    return next(i + 1 for i, line in enumerate(Path(__file__).read_text().splitlines())
                if text in line and "rows =" in line)


def _row(variant, wg, r, q_len, group):
    """The row the kernel's index names, computed independently (Python, C truncation: every
    operand here is non-negative)."""
    if variant == "mod+1":
        return wg * 64 + (r // q_len) * q_len + r % (q_len + 1)
    if variant == "div-group":
        return wg * 64 + (r // group) * q_len + r % q_len
    if variant == "rotate+1":
        return wg * 64 + (r + 1) % (q_len + 1)
    raise AssertionError(variant)


def test_the_packed_index_proves_with_zero_findings():
    report = verify.run(lower_only(_packed("ok")), include_proven=True)
    across = _across(report)
    assert across and all(f.status == "proven" for f in across), "\n".join(map(str, across))
    assert not report.errors and not report.unknowns, \
        "\n".join(map(str, report.errors + report.unknowns))


def test_a_rotation_by_the_runtime_size_stays_in_the_warpgroups_rows():
    """Needs 0 <= (r + 1) % q_len < q_len <= 64 (the require): the remainder's bound."""
    report = verify.run(lower_only(_packed("rotate")), include_proven=True)
    across = _across(report)
    assert across and all(f.status == "proven" for f in across), "\n".join(map(str, across))
    assert not [d for d in report.errors if d.code.startswith(("sync.", "smem."))], \
        "\n".join(map(str, report.errors))


def test_without_the_require_the_rotation_is_reported():
    """The size's bound comes from its premises only: drop ag.require(q_len <= 64) and a
    q_len of 65 or more makes (r + 1) % q_len reach 64, the other warpgroup's first row."""
    unbounded = _packed("rotate", require=False)
    bad = [d for d in verify.run(lower_only(unbounded)).errors if d.code == "sync.exchange"]
    assert bad, "an unbounded runtime modulus was proven"
    wit = bad[0].counterexample
    assert wit["element"][0] == 63 and wit["row"] == wit["warpgroup"] * 64 + 64, wit


@pytest.mark.parametrize("variant", ["mod+1", "div-group", "rotate+1"])
def test_a_seeded_divisor_bug_is_reported_with_thread_element_and_line(variant):
    kernel = lower_only(_packed(variant))
    report = verify.run(kernel)
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))
    d = bad[0]
    wit = d.counterexample
    assert wit["role"] == "consumer" and wit["writer"]["role"] == "consumer", wit
    assert {wit["warpgroup"], wit["writer"]["warpgroup"]} == {0, 1}, wit
    # the element and the thread holding it: the gather's register layout over the
    # warpgroup's 128 threads (not the CTA's 384)
    i = wit["element"][0]
    gather = next(op for op in kernel.walk() if isinstance(op, O.SmemGather))
    layout = RL.build(gather.result.type.layout, tuple(gather.result.type.shape), 128)
    assert 0 <= i < 64 and wit["thread"] == layout.owners()[tuple(wit["element"])][0][0], wit
    # the row is the other warpgroup's, and is what the index computes for SOME launch: the
    # counterexample's q_len / group (when the witness names them) reproduce it exactly
    w = wit["warpgroup"]
    assert not 64 * w <= wit["row"] < 64 * w + 64, wit
    shapes = wit["shapes"]
    assert wit["row"] == _row(variant, w, i, shapes["q_len"], shapes["group"]), wit
    # the root cause: the line of the index expression holding the bug
    assert wit["index_at"].endswith(f"{HERE}:{_line('# bug: ' + variant)}"), wit
    assert "gathers element" in d.message and f"thread {wit['thread']}" in d.message, d.message
    # the tags of the stored tile show it too (the gathered row is not the row stored)
    assert [e for e in report.errors if e.code == "store.coords"], \
        "\n".join(map(str, report.errors))


def test_a_divisor_the_launch_may_make_zero_is_never_proven():
    """`% (q_len - 1)` divides by 0 when q_len = 1 (undefined in C): the model gives that
    element an unknown value, never z3's own total `x % 0 == x` (which would keep the row
    r, inside the warpgroup's): for q_len >= 2 the rows stay below 63, so only the zero
    divisor can break the exchange, and it is not proven."""
    report = verify.run(lower_only(_packed("by-zero")), include_proven=True)
    across = _across(report)
    assert across and not all(f.status == "proven" for f in across), \
        "\n".join(map(str, across))
