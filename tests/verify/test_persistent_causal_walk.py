"""The causal persistent attention walk (AttentionSchedule(persistent=True), FA3's order, with
and without early_q_release) verifies with zero findings, and the bugs of its unit decode are
still caught.

Its wgmma.agree / k-once reports (9 errors and 271 s of z3 at head dim 128, counterexamples
the interpreter ran right: tests/interp/test_attention_short_interp.py) were the verifier's
false alarms, not the div/mod decode's: under the causal mask a unit's KV block count depends
on the unit, so each role's step counter inside the unit loop is a sum over the earlier units
(Model.steps_over, an uninterpreted function). The unit loop kept no `steps` entry for such a
pipe (transfer/control.py for_), so Model._same_loop_nest never paired the producer's unit
with the consumer's: the read of a K / V slot was resolved through "F_p(units before) + offset
== F_c(units before') + offset'", which the solver met with different units (P of batch 0
against V of batch 1). A step of iteration t has counter start(t) + offset, 0 <= offset <
per(t), and start(t) + per(t) <= start(t + 1); with equal bounds, equal counters before the
loop and equal counts per unit (proven), equal counters mean the same unit: the loop is now
paired like one with a fixed count, and the queries are linear (2 s a kernel).

The pairing needs the counts per unit proven equal, so a decode that differs between the roles
is not paired away: seeded below (the producer's batch decoded as bh % H: store.coords; V's
batch the flat (batch, head) index: wgmma.agree, the old false alarm's shape as a real bug)."""

from __future__ import annotations

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel
from tests.loading import load_script
from tests.mutations.corpus import rewrite
from tests.verify.clean import assert_verifies_clean

BENCH = load_script("gpu_attention_bench")
WALKS = [("default+persistent+earlyq", 128), ("default+persistent", 128),
         ("default+persistent+lpt+earlyq", 128), ("occ2+fast+persistent+earlyq", 128),
         ("default+persistent+earlyq", 256)]


def _walk(variant: str = "default+persistent+earlyq", head_dim: int = 128):
    s = BENCH.variant_schedule(variant, head_dim, True, 1024)
    assert s.persistent and s.fa3_overlap, s
    return lower_only(attention_kernel(head_dim, ag.bf16, True, False), s=s)


@pytest.mark.parametrize("variant,head_dim", WALKS, ids=[f"{v}-d{d}" for v, d in WALKS])
def test_causal_persistent_walk_verifies_clean(variant, head_dim):
    # 1-3 s of CPU on the 2-core machine (was 271 s and 9 false errors): bounded with room
    assert_verifies_clean(_walk(variant, head_dim), f"{variant} d{head_dim}")


def _arith(kernel, loc_line_of, fn):
    """The producer's (first) Arith op of `fn` on the line of tile_of that `loc_line_of`
    names (its text), and its index among the kernel's Arith ops (for `rewrite`)."""
    import inspect

    from argus.kernels import attention
    src, first = inspect.getsourcelines(attention.attention_kernel)
    line = first + next(i for i, t in enumerate(src) if loc_line_of in t)
    ops = [op for op in kernel.walk() if isinstance(op, O.Arith)]
    i = next(i for i, op in enumerate(ops) if op.loc.line == line and op.fn == fn)
    return i, ops[i]


def test_producer_batch_decode_differs_is_caught():
    """The producer decodes the batch as bh % H (the head) while the consumers take bh // H:
    each unit's Q, K and V come from another batch than the one its O is stored to. The
    counts per unit are the same in both roles (they depend on the m tile only), so the unit
    loops are paired, and the stored tile's tags disagree with its destination."""
    i, _ = _arith(_walk(), "return bh // H, bh % H, m", "floordiv")
    kernel = rewrite(_walk(), O.Arith, lambda op: dataclasses.replace(op, fn="mod"), nth=i)
    errors = [d for d in verify.check(kernel) if d.severity == "error"]
    hits = [d for d in errors if d.code in ("store.coords", "wgmma.agree")]
    assert hits, [(d.code, d.message[:160]) for d in errors]
    assert any("'b'" in str(d) or ".b" in str(d) for d in hits), "\n".join(map(str, hits))


def test_v_from_another_batch_is_caught():
    """V's batch coordinate is the flat (batch, head) index bh = unit // m_tiles: P of one
    batch multiplied by V of another (the old false alarm's counterexample, now a real bug)
    is wgmma.agree on the batch field, with the thread named."""
    kernel = _walk()
    _, bh = _arith(kernel, "bh = unit // m_tiles", "floordiv")
    loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
    v_loop = [n for n, op in enumerate(loads) if "load_v" in op.loc.function or
              op.loc.line == loads[-1].loc.line][-2:]   # the loop's V loads (both atoms)
    for n in v_loop:
        kernel = rewrite(kernel, O.TmaLoad,
                         lambda op: op.replace(coords=(bh.result,) + op.coords[1:]), nth=n)
    errors = [d for d in verify.check(kernel) if d.severity == "error"]
    hits = [d for d in errors if d.code == "wgmma.agree" and "A.b == B.b" in str(d)]
    assert hits, [(d.code, d.message[:160]) for d in errors]
    assert any("thread" in d.counterexample for d in hits), [d.counterexample for d in hits]
