"""z3 encodings of layouts: the same functions as Python evaluation, as solver terms.

Job: turn a `Layout`, `Swizzle`, `ComposedLayout` or `F2Layout` applied to symbolic indices
into a z3 term, so the verifier can prove layout equalities (UNSAT of a difference) or get a
counterexample, and a tiny `find_counterexample` helper that reports solver answers honestly.

Theories (INVARIANTS.md §3.6):
* bit-vectors (QF_BV) for addresses, swizzles and power-of-two layouts; widths are the
  caller's choice (`bitvec(name, width)`), 18–24 bits cover 228 KB of shared memory;
* integers (LIA) for layouts with non-power-of-two modes. A bit-vector is never divided by a
  non-power-of-two (that makes z3 take seconds): such a request raises ValueError naming the
  fix, which is to pass z3.Int terms.

Invariant kept: every term built here evaluates, under any model, to exactly what the Python
evaluation of the same object gives on the model's values (tests check this on random points).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import z3

from argus.layout import arith
from argus.layout.f2 import F2Layout
from argus.layout.shape_stride import Layout
from argus.layout.swizzle import ComposedLayout, Swizzle


class SolverUnknown(RuntimeError):
    """z3 answered `unknown` (timeout or incompleteness): never to be read as a proof."""


def bitvec(name: str, width: int = 32) -> z3.BitVecRef:
    """A bit-vector variable; pick `width` so that every value of interest fits."""
    return z3.BitVec(name, width)


def intvar(name: str) -> z3.ArithRef:
    """An integer (LIA) variable, for counters and non-power-of-two layouts."""
    return z3.Int(name)


def zext(x: z3.BitVecRef, width: int) -> z3.BitVecRef:
    """Zero-extend (or truncate) a bit-vector to `width` bits."""
    w = x.size()
    if w == width:
        return x
    if w < width:
        return z3.ZeroExt(width - w, x)
    return z3.Extract(width - 1, 0, x)


def _check_terms(x: Any, what: str) -> None:
    terms = list(x) if isinstance(x, tuple) else [x]
    flat: list[Any] = []
    while terms:
        t = terms.pop()
        if isinstance(t, tuple):
            terms.extend(t)
        else:
            flat.append(t)
    kinds = {("bv", t.size()) if arith.is_bv(t) else ("int", 0) if arith.is_z3(t) else ("const", 0)
             for t in flat}
    kinds.discard(("const", 0))
    if len(kinds) > 1:
        raise TypeError(f"{what}: index terms mix theories or widths {sorted(kinds)}; fix: use "
                        "one bit-vector width (see zext) or only z3.Int terms")


def layout_term(layout: Layout, index: Any) -> Any:
    """z3 term of `layout` at a 1-D index or a (hierarchical) coordinate of z3 terms.

    Bit-vector indices need power-of-two sizes wherever the index is split into modes; other
    layouts need z3.Int terms (ValueError says so). Coordinates given per mode need no split.
    """
    _check_terms(index, "layout_term")
    try:
        return layout(index)
    except ValueError as exc:
        raise ValueError(f"layout_term({layout}): {exc}") from None


def swizzle_term(swizzle: Swizzle, x: z3.BitVecRef) -> z3.BitVecRef:
    """z3 term of `swizzle(x)`; bit-vectors only (XOR/shift/and have no LIA encoding)."""
    if not arith.is_bv(x) and swizzle.bits:
        raise TypeError(f"swizzle_term({swizzle}): needs a z3 bit-vector term, got {x!r}; "
                        "fix: encode addresses with bitvec(name, width)")
    return swizzle(x)


def composed_term(layout: ComposedLayout, index: Any) -> z3.BitVecRef:
    """z3 term of `swizzle(offset + layout(index))` (bit-vectors)."""
    inner = layout_term(layout.layout, index)
    return swizzle_term(layout.swizzle, inner + layout.offset if layout.offset else inner)


def f2_terms(layout: F2Layout, inputs: Mapping[str, z3.BitVecRef],
             width: int | None = None) -> dict[str, z3.BitVecRef]:
    """z3 terms of every output dim of an F2 layout, as XORs of selected basis images.

    Inputs are bit-vectors (zero-extended or truncated to `width`); `width` defaults to the
    widest input or output. Only the low log2(size) bits of each input are read.
    """
    missing = [n for n in layout.in_names if n not in inputs]
    if missing:
        raise KeyError(f"f2_terms: missing inputs {missing}; expected {list(layout.in_names)}")
    for n in layout.in_names:
        if not arith.is_bv(inputs[n]):
            raise TypeError(f"f2_terms: input {n!r} must be a z3 bit-vector")
    need = max([s.bit_length() for _, s in layout.out_dims] + [1])
    w = width or max([inputs[n].size() for n in layout.in_names] + [need])
    outs = [z3.BitVecVal(0, w) for _ in layout.out_dims]
    for (name, _), imgs in zip(layout.in_dims, layout.bases):
        x = inputs[name]
        for b, img in enumerate(imgs):
            if not any(img) or b >= x.size():
                continue
            bit = z3.Extract(b, b, x) == 1
            for o, v in enumerate(img):
                if v:
                    outs[o] = outs[o] ^ z3.If(bit, z3.BitVecVal(v, w), z3.BitVecVal(0, w))
    return {n: z3.simplify(t) for (n, _), t in zip(layout.out_dims, outs)}


def find_counterexample(claim: Any, assumptions: Sequence[Any] = (),
                        variables: Sequence[Any] = (), timeout_ms: int = 2000
                        ) -> dict[str, int] | None:
    """None if `assumptions ⇒ claim` is valid, else a model as {variable name: int}.

    `variables` picks which values to report (default: every constant in the model). An
    `unknown` answer raises SolverUnknown: a timeout is never a pass (INVARIANTS.md §3.6).
    """
    solver = z3.Solver()
    solver.set("timeout", timeout_ms)
    solver.add(*assumptions)
    solver.add(z3.Not(claim))
    res = solver.check()
    if res == z3.unsat:
        return None
    if res != z3.sat:
        raise SolverUnknown(f"z3 returned {res} ({solver.reason_unknown()}) within {timeout_ms} ms")
    model = solver.model()
    picks = list(variables) or [d() for d in model.decls() if d.arity() == 0]
    out = {}
    for v in picks:
        val = model.eval(v, model_completion=True)
        out[str(v)] = val.as_long() if hasattr(val, "as_long") else int(str(val))
    return out
