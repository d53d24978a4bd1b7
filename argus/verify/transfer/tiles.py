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

from dataclasses import replace

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify.tagdomain import (POINTWISE, Record, TagVal, combine, free_consts, fresh_int,
                                    integer_dim_position, is_integer_dim, reduce_over,
                                    referenced_conds, substitute, with_fresh)
from argus.verify.transfer import values as V
from argus.verify.transfer.domain import (EwSite, ReduceSite, Rule, TileState, _is_z3, _num,
                                          c_div, c_mod)


def full(m: Model, op: O.Full, scopes, role, counters, following) -> None:
    # a constant carries no tags, only what its value is (-inf, 0: transfer/values.py)
    facts = V.of_constant(op.value)
    m._set_tile(op.result, lambda idx: Record(dict(facts), source="a constant tile"), op,
                "a constant tile")


def arange(m: Model, op: O.Arange, scopes, role, counters, following) -> None:
    # an index tile's element holds its own index: the `value` field, which arithmetic and
    # comparisons on index tiles carry (a causal mask's key and row bounds), so a tag
    # assertion can state what a mask keeps
    m._set_tile(op.result, lambda idx: Record({"value": TagVal(idx[0])},
                                              source="an index tile"), op, "an index tile")


def _broadcast_kept(m: Model, name: str, a: TagVal, b: TagVal) -> TagVal | None:
    """The lineage of integer dim `name` (`dim{i}`) an elementwise op keeps when one operand
    reads position i as a broadcast: a point that is the constant 0 where some tensor of the
    kernel has extent 1 at position i (w[1, 64, 1]), met by a point that moves (depends on a
    variable). None otherwise: two moving points, two constants, or a named dim (whose
    extent is not known to be 1), combined as before."""
    if not (is_integer_dim(name) and a.is_point and b.is_point):
        return None
    i = integer_dim_position(name)
    if not any(len(t.dims) > i and t.dims[i] == 1 for t in m.tensors.values()):
        return None
    if zero_point(a) and moving_point(b):
        return b
    if zero_point(b) and moving_point(a):
        return a
    return None


def zero_point(v: TagVal) -> bool:
    """Whether the point is the constant 0 (a dim read at its first position)."""
    t = z3.simplify(v.term)
    return z3.is_int_value(t) and t.as_long() == 0


def moving_point(v: TagVal) -> bool:
    """Whether the point depends on a variable (a program id, a loop index, an element)."""
    return bool(free_consts(v.term))


def elementwise(m: Model, op: O.Elementwise, scopes, role, counters, following) -> None:
    shape = op.result.type.shape
    operands = []
    for a in op.args:
        if isinstance(a.type, TileType):
            operands.append((m.tile(a), a.type.shape))
    site = m._site(op, scopes, role)
    if m._recording and len(operands) > 1:
        m.ews.append(EwSite(op, site, operands))
    values = _index_values(m, op)
    masking = op.fn == "where" and len(op.args) == 3 and \
        isinstance(op.args[0].type, TileType) and not isinstance(op.args[2].type, TileType)
    selects = op.fn == "where" and len(op.args) == 3 and isinstance(op.args[0].type, TileType)
    facts = V.elementwise_rule(m, op)   # is_neg_inf / is_zero / not_neg_inf (values.py)
    # the operands whose tags flow into the result (a where's condition carries no data)
    tile_args = [(i, m.tile(a), a.type.shape) for i, a in enumerate(op.args)
                 if isinstance(a.type, TileType) and not (selects and i == 0)]

    def fn(idx, shape=shape):
        fields: dict = {}
        parts: list = []
        defined = []
        combined = False   # whether `combine` dropped an operand's lineage of a field
        by_arg: list = [None] * len(op.args)
        for i, state, oshape in tile_args:
            rec, own = with_fresh(lambda state=state, oshape=oshape:
                                  state.fn(_broadcast_index(idx, oshape)))
            by_arg[i] = rec
            parts.append((rec, own))
            defined.append(rec.defined)
            for name, val in rec.fields.items():
                if name in ("tensor", "value", "live") or name in V.FACTS:
                    continue  # computed data is no longer an element of one tensor
                combined = combined or name in fields
                if name in fields:
                    prev = fields[name]
                    kept = _broadcast_kept(m, name, prev, val)
                    if kept is not None:
                        # a size-1 dim's position 0 met a moving position of the same dim
                        # (w[1, 64, 1] * x[4, 64, 3000]'s dim0): torch's broadcast, no
                        # element met another; the moving one is the element's position
                        fields[name] = kept
                        continue
                    fields[name] = combine(prev, val, f"{op.fn} at {op.loc}")
                    if prev.is_point and val.is_point and not z3.eq(prev.term, val.term):
                        # two elements of one dim met (a pooling window's max): the point
                        # kept is one contributor's; noted for the links by extent that
                        # would read it as the element's own (check_stores._integer_links)
                        fields[name] = replace(fields[name], mixed=fields[name].mixed + (
                            f"{POINTWISE}{op.fn} at {op.loc}",))
                else:
                    fields[name] = val
        if values is not None:
            fields["value"] = TagVal(values(idx))
        mask = None
        if selects:
            c = operands[0][0].fn(_broadcast_index(idx, operands[0][1])).fields.get("value")
            mask = c.term != 0 if c is not None else None
        if masking and mask is not None:
            kept = mask
            prev = by_arg[1].fields if by_arg[1] is not None else {}
            if "live" in prev:
                kept = z3.And(kept, prev["live"].term != 0)
            fields["live"] = TagVal(z3.If(kept, 1, 0))
        if facts is not None:
            for name, t in facts(by_arg, mask).items():
                fields[name] = TagVal(_num(t))
        defined = z3.And(defined) if defined else z3.BoolVal(True)
        # an operand's conditions stay where its auxiliaries do (a broadcast row sum whose
        # lineage `combine` dropped leaves none: referenced_conds)
        return Record(fields, defined, referenced_conds(fields, defined, (), parts) if
                      combined else tuple(c for p in parts for c in p[0].cond),
                      f"{op.fn} at {op.loc}")
    # without layout inference, a pointwise result of a same-shape accumulator is one too
    layout = op.result.type.layout or next(
        (st.layout for st, sh in operands if tuple(sh) == tuple(shape) and st.layout), "")
    m.tiles[op.result.id] = TileState(shape, layout, fn, op.loc, f"{op.fn} at {op.loc}")
    m._def_seq[op.result.id] = next(m._seq)


_ARITH = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
          "lt": lambda a, b: z3.If(a < b, 1, 0), "le": lambda a, b: z3.If(a <= b, 1, 0),
          "gt": lambda a, b: z3.If(a > b, 1, 0), "ge": lambda a, b: z3.If(a >= b, 1, 0),
          "eq": lambda a, b: z3.If(a == b, 1, 0), "ne": lambda a, b: z3.If(a != b, 1, 0),
          "and": lambda a, b: z3.If(z3.And(a != 0, b != 0), 1, 0),
          "or": lambda a, b: z3.If(z3.Or(a != 0, b != 0), 1, 0)}


# integer index arithmetic the im2col span gathers use (`k / slot`, `k % slot`, a where
# choosing -1 for a padding column): C's semantics, as the interpreter's (runtime/interp/
# tile.py) and the generated code's; `div` only of integer tiles, by a nonzero compile-time
# divisor or a runtime scalar one (`% q_len`: _runtime_divmod; _index_values)
_ARITH.update({"div": c_div, "mod": c_mod})
_SELECT = "where"


def _runtime_divmod(name: str):
    """C's `a / b` or `a % b` for a symbolic divisor b: c_div's quotient (transfer/
    domain.py; exact for a negative dividend or divisor), and a fresh unknown where b is 0
    (undefined in C)."""
    def fn(a, b):
        got = _ARITH[name](a, b)
        return z3.If(b == 0, fresh_int(f"{name}_by_zero"), got)
    return fn


def _index_tiles(m: Model) -> set[int]:
    """Ids of the index tiles: aranges, and what expand_dims, conversions, arithmetic and
    comparisons make of them and of scalars (computed once per model, from the IR alone)."""
    got = getattr(m, "_index_tile_ids", None)
    if got is None:
        got = set()
        for op in m.kernel.walk():
            if isinstance(op, O.Arange):
                got.add(op.result.id)
            elif isinstance(op, (O.ExpandDims, O.Convert, O.ConvertLayout)) and \
                    op.src.id in got:
                got.add(op.result.id)
            elif isinstance(op, O.Elementwise) and op.fn in _ARITH and len(op.args) == 2 and \
                    any(a.id in got for a in op.args) and \
                    all(a.id in got or not isinstance(a.type, TileType) for a in op.args) \
                    and (op.fn != "div" or not op.result.type.dtype.is_float):
                got.add(op.result.id)
            elif isinstance(op, O.Elementwise) and op.fn == _SELECT and len(op.args) == 3 \
                    and op.args[0].id in got and not op.result.type.dtype.is_float and \
                    any(a.id in got for a in op.args[1:]) and \
                    all(a.id in got or not isinstance(a.type, TileType) for a in op.args[1:]):
                # a choice between index values by an index comparison: an index too
                got.add(op.result.id)
        m._index_tile_ids = got
    return got


def _index_values(m: Model, op: O.Elementwise):
    """idx -> the integer value of the result element, when the op is arithmetic or a
    comparison of index tiles (their `value` fields) and integer scalars; else None."""
    fn = _ARITH.get(op.fn) if op.fn != _SELECT else \
        (lambda c, a, b: z3.If(c != 0, a, b))
    if fn is None or op.result.id not in _index_tiles(m):
        return None
    parts = []
    for a in op.args:
        if isinstance(a.type, TileType):
            st = m.tiles.get(a.id)
            if st is None:
                return None
            parts.append(("tile", st, a.type.shape))
        else:
            s = m.sym.get(a.id)
            if s is None or isinstance(s, float) or (_is_z3(s) and not z3.is_int(s)
                                                      and not z3.is_bool(s)):
                return None
            parts.append(("scalar", _num(s), None))
    if op.fn in ("div", "mod"):
        if parts[1][0] != "scalar":
            return None   # by a scalar only: a tile divisor varies per element (not modelled)
        d = z3.simplify(parts[1][1])
        if z3.is_int_value(d):
            if d.as_long() == 0:
                return None
        else:
            # a runtime divisor (`% q_len`, `/ heads`: a kernel argument, a shape symbol or
            # scalar arithmetic on them): z3's integer division by the symbolic term under
            # C's truncation (c_div: exact for either operand's sign), each query bounding
            # the size by the model's premises (a parameter in [1, 2^24), ag.require). A
            # divisor the launch could make 0 gives an unknown value there (C's undefined
            # behaviour), never z3's own total `x / 0`
            fn = _runtime_divmod(op.fn)

    def values(idx):
        vals = []
        for kind, x, shape in parts:
            if kind == "scalar":
                vals.append(x)
                continue
            v = x.fn(_broadcast_index(idx, shape)).fields.get("value")
            vals.append(v.term if v is not None else fresh_int("unknown_value"))
        got = fn(*vals)
        if op.fn in ("add", "sub", "mul"):
            # the kernel computes in i32: a result that could leave its range wraps there, so
            # the model knows it only inside the range (a wrapped a * 2^32 == b * 2^32 keeps
            # every index in the kernel, not the one the unbounded integers would say)
            got = z3.If(z3.And(got >= -2 ** 31, got < 2 ** 31), got,
                        fresh_int(f"wrapped_{op.fn}"))
        return got
    return values


def convert(m: Model, op: O.Convert, scopes, role, counters, following) -> None:
    src = m.tile(op.src)
    fn = src.fn
    dst = op.result.type.dtype if isinstance(op.result.type, TileType) else None
    drop: tuple = ()
    if dst is None or dst.is_float or dst.bits != 32:
        # an index value converted to a float or a narrower integer may round or wrap: the
        # model no longer knows it (a mask built from it restricts nothing)
        drop += ("value",)
    if dst is None or not dst.is_float:
        drop += V.FACTS   # -inf and 0 are kept by a float conversion only
    if drop:
        def fn(idx, src=src):
            rec = src.fn(idx)
            if not any(k in rec.fields for k in drop):
                return rec
            return replace(rec, fields={k: v for k, v in rec.fields.items() if k not in drop})
    m._set_tile(op.result, fn, op, src.what)
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


def _pointwise_operands(m: Model, v) -> dict:
    """The current states of v and of every tile it is computed from through pointwise ops
    and conversions (which read each operand at the same element, broadcasting): what
    ReduceSite.operands keeps."""
    out: dict = {}
    todo = [v]
    while todo:
        x = todo.pop()
        if x.id in out or x.id not in m.tiles:
            continue
        out[x.id] = m.tiles[x.id]
        d = m.pointwise_defs().get(x.id)
        if isinstance(d, O.Elementwise):
            todo += [a for a in d.args if hasattr(a.type, "shape")]
        elif isinstance(d, (O.Convert, O.ConvertLayout)):
            todo.append(d.src)
    return out


def reduce(m: Model, op: O.Reduce, scopes, role, counters, following) -> None:
    src = m.tile(op.src)
    site = m._site(op, scopes, role)
    if m._recording:
        m.reduces.append(ReduceSite(op, site, src, _pointwise_operands(m, op.src)))
    axis, extent = op.axis, op.src.type.shape[op.axis]

    def fn(idx, src=src):
        v = fresh_int(f"r{op.result.id}")
        inner = tuple(v if d == axis else x for d, x in enumerate(idx))
        rec = src.fn(inner)
        live = rec.fields.get("live")
        fields = {}
        for name, val in rec.fields.items():
            if name == "tensor" or name in V.FACTS:
                continue   # (what a reduction's value is, is not known from its elements')
            got = reduce_over(val, v, 0, extent, f"{op.fn} over axis {axis} at {op.loc}")
            if live is not None and live.is_point and name != "live" and got is not val:
                got = _kept_only(got, live, v, extent)
            fields[name] = got
        # cond mentioning v belongs to the fields now; keep the rest
        return Record(fields, rec.defined, tuple(c for c in rec.cond),
                      f"{op.fn} at {op.loc}")
    m._set_tile(op.result, fn, op, f"{op.fn}-reduction at {op.loc}")


def _kept_only(reduced: TagVal, live: TagVal, var, extent: int) -> TagVal:
    """A reduced field's set restricted to the elements a mask keeps. An element of
    `where(mask, v, c)` (mask an index predicate, c a scalar) whose mask is false is the
    constant c and carries no data, so only the kept elements' tags reach the reduction: a
    sum over i of where(i == k, x[i], 0) carries x[k]'s tags alone (a one-hot selection, the
    transpose's), while a mask that keeps several i (i <= k) still mixes them. `reduced` is
    reduce_over's set, its last bound variable the renamed `var`."""
    bound = reduced.bound[-1]
    kept = substitute(live.term, (var, bound)) != 0
    # only where the mask keeps some element: where it keeps none, the result is c alone and
    # an empty set would make every claim on it hold vacuously, so the whole axis stays
    # (found by review: `(i == k) & (k < BR - 1)` dropped a column and verified)
    some = z3.Or([substitute(live.term, (var, z3.IntVal(w))) != 0 for w in range(extent)])
    return replace(reduced, cond=reduced.cond + (z3.Or(kept, z3.Not(some)),))


def scan(m: Model, op: O.Scan, scopes, role, counters, following) -> None:
    """A scan keeps positions: element j of the result is the source's element j (its point
    tags, as `x - max` keeps x's) with the rest of its row mixed in (over-approximated by the
    whole axis, as a reduction) and its row of `init`. The total is a reduction of the row
    (a set along the axis) combined with init."""
    src, init = m.tile(op.src), m.tile(op.init)
    axis, extent = op.axis, op.src.type.shape[op.axis]
    note = f"{op.fn}-scan over axis {axis} at {op.loc}"

    def mixed(idx, point: bool, src=src, init=init):
        v = fresh_int(f"s{op.result.id}")
        rec = src.fn(tuple(v if d == axis else x for d, x in enumerate(idx)))
        base = init.fn(tuple(z3.IntVal(0) if d == axis else x for d, x in enumerate(idx)))
        fields = {name: reduce_over(val, v, 0, extent, note)
                  for name, val in rec.fields.items() if name != "tensor" and
                  name not in V.FACTS}
        defined, cond = z3.And(rec.defined, base.defined), rec.cond + base.cond
        if point:
            own = src.fn(tuple(idx))
            fields = {name: combine(val, fields[name], note) if name in fields else val
                      for name, val in own.fields.items() if name != "tensor" and
                      name not in V.FACTS}
            defined, cond = z3.And(defined, own.defined), cond + own.cond
        for name, val in base.fields.items():
            if name != "tensor" and name not in V.FACTS:
                fields[name] = combine(fields[name], val, note) if name in fields else val
        return Record(fields, defined, cond, note)
    m._set_tile(op.result, lambda idx: mixed(idx, True), op, note)
    m._set_tile(op.total, lambda idx: mixed(idx, False), op, f"total of the {note}")


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
    O.Scan: scan,
}
