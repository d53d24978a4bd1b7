"""Transfer functions of register-tile ops: full, arange, elementwise, convert, convert_layout,
expand_dims, tile slices and reductions.

Job: a result tile's tags as a function of its operands' (a constant or index tile carries
none; a pointwise op combines its value operands' tags at the broadcast index; a reduction
reduces its source's tags over the reduced axis), and the sites obligations read (elementwise
combinations of several tiles, reductions).

Invariant kept: an element's tags come from exactly the operand elements it is computed from
(broadcast axes read index 0; a where's condition carries no data into the result); computed
data is no longer an element of one tensor, so the `tensor` tag does not flow through.
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify.tagdomain import Record, combine, fresh_int, reduce_over
from argus.verify.transfer.domain import EwSite, ReduceSite, Rule, TileState


def full(m: Model, op: O.Full, scopes, role, counters, following) -> None:
    m._set_tile(op.result, lambda idx: Record(source="a constant tile"), op, "a constant tile")


def arange(m: Model, op: O.Arange, scopes, role, counters, following) -> None:
    m._set_tile(op.result, lambda idx: Record(source="an index tile"), op, "an index tile")


def elementwise(m: Model, op: O.Elementwise, scopes, role, counters, following) -> None:
    shape = op.result.type.shape
    operands = []
    for a in op.args:
        if isinstance(a.type, TileType):
            operands.append((m.tile(a), a.type.shape))
    site = m._site(op, scopes, role)
    if m._recording and len(operands) > 1:
        m.ews.append(EwSite(op, site, operands))
    if op.fn == "where" and operands and isinstance(op.args[0].type, TileType):
        value_ops = operands[1:]  # the condition carries no data into the result
    else:
        value_ops = operands

    def fn(idx, value_ops=value_ops, shape=shape):
        fields: dict = {}
        cond: tuple = ()
        defined = []
        for state, oshape in value_ops:
            rec = state.fn(_broadcast_index(idx, oshape))
            cond += rec.cond
            defined.append(rec.defined)
            for name, val in rec.fields.items():
                if name == "tensor":
                    continue  # computed data is no longer an element of one tensor
                fields[name] = combine(fields[name], val, f"{op.fn} at {op.loc}") \
                    if name in fields else val
        return Record(fields, z3.And(defined) if defined else z3.BoolVal(True), cond,
                      f"{op.fn} at {op.loc}")
    # without layout inference, a pointwise result of a same-shape accumulator is one too
    layout = op.result.type.layout or next(
        (st.layout for st, sh in operands if tuple(sh) == tuple(shape) and st.layout), "")
    m.tiles[op.result.id] = TileState(shape, layout, fn, op.loc, f"{op.fn} at {op.loc}")
    m._def_seq[op.result.id] = next(m._seq)


def convert(m: Model, op: O.Convert, scopes, role, counters, following) -> None:
    src = m.tile(op.src)
    m._set_tile(op.result, src.fn, op, src.what)
    m.tiles[op.result.id].layout = op.result.type.layout or src.layout


def convert_layout(m: Model, op: O.ConvertLayout, scopes, role, counters, following) -> None:
    # the same elements, redistributed: tags unchanged (the layout is in the type)
    src = m.tile(op.src)
    m._set_tile(op.result, src.fn, op, src.what)


def expand_dims(m: Model, op: O.ExpandDims, scopes, role, counters, following) -> None:
    src = m.tile(op.src)
    axis = op.axis

    def fn(idx, src=src, axis=axis):
        return src.fn(tuple(x for d, x in enumerate(idx) if d != axis))
    m._set_tile(op.result, fn, op, src.what)


def tile_slice(m: Model, op: O.TileSlice, scopes, role, counters, following) -> None:
    src = m.tile(op.src)
    axis, start = op.axis, op.start

    def fn(idx, src=src, axis=axis, start=start):
        return src.fn(tuple(x + start if d == axis else x for d, x in enumerate(idx)))
    m._set_tile(op.result, fn, op, f"columns/rows from {start} of {src.what}")
    m.tiles[op.result.id].layout = src.layout


def reduce(m: Model, op: O.Reduce, scopes, role, counters, following) -> None:
    src = m.tile(op.src)
    site = m._site(op, scopes, role)
    if m._recording:
        m.reduces.append(ReduceSite(op, site, src))
    axis, extent = op.axis, op.src.type.shape[op.axis]

    def fn(idx, src=src):
        v = fresh_int(f"r{op.result.id}")
        inner = tuple(v if d == axis else x for d, x in enumerate(idx))
        rec = src.fn(inner)
        fields = {name: reduce_over(val, v, 0, extent, f"{op.fn} over axis {axis} at "
                                                       f"{op.loc}")
                  for name, val in rec.fields.items() if name != "tensor"}
        # cond mentioning v belongs to the fields now; keep the rest
        return Record(fields, rec.defined, tuple(c for c in rec.cond),
                      f"{op.fn} at {op.loc}")
    m._set_tile(op.result, fn, op, f"{op.fn}-reduction at {op.loc}")


def _broadcast_index(idx: tuple, shape: tuple) -> tuple:
    return tuple(z3.IntVal(0) if s == 1 else x for x, s in zip(idx, shape))


RULES: dict[type, Rule] = {
    O.Full: full,
    O.Arange: arange,
    O.Elementwise: elementwise,
    O.Convert: convert,
    O.ConvertLayout: convert_layout,
    O.ExpandDims: expand_dims,
    O.TileSlice: tile_slice,
    O.Reduce: reduce,
}
