"""Transfer functions of memory ops other than TMA: shared-memory buffers and views,
stmatrix/ldmatrix, global loads and stores, and global atomics.

Job: name shared-memory buffers and the views into them (stage, first row, shape); record
stmatrix as a generic-proxy write of its source tile's tags and ldmatrix as a read resolved
against the buffer's writes (`Model.read_smem`); give a loaded tile the tags of the tensor
elements it reads (`Model.element_record`: coordinates, user tag fields, the iteration), and
record every store with the tags of what it writes. An atomic is recorded as an atomic site,
never as a store (store.* claims nothing of it; verify/check_atomics.py checks it), and an
atomic.fetch_add's old value is a ticket: an uninterpreted function of the instance (program
ids, warpgroup, loop indices); for a self-resetting counter (`wrap`) the premise that the
instance is a function of (cell, ticket), inverse functions naming it, states that two
instances at one cell draw different tickets, which check_atomics' atomic.tickets obligation
justifies (at most `wrap` instances reach one cell).

Invariant kept: a read is resolved lazily, at the reader's site (its scopes and sequence
number), so it sees exactly the writes the model allows it to (earlier generic writes, or the
TMA copies of the matching pipeline step), never a later one.
"""

from __future__ import annotations

import dataclasses

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.layout import arith
from argus.verify.tagdomain import fresh_int, through
from argus.verify.transfer.domain import (AtomicSite, ReadSite, Rule, StoreSite, ViewInfo,
                                         WriteSite, _num, trailing)


def smem_alloc(m: Model, op: O.SmemAlloc, scopes, role, counters, following) -> None:
    m.buffers[op.result.id] = op


def smem_slice(m: Model, op: O.SmemSlice, scopes, role, counters, following) -> None:
    stage = None if op.stage is None else m.scalar(op.stage)
    row0 = op.row0 if isinstance(op.row0, int) else m.scalar(op.row0)
    rows, cols = op.result.type.shape
    m.views[op.result.id] = ViewInfo(op.result, op.buffer, stage, row0, rows, cols, op)


def stmatrix(m: Model, op: O.StMatrix, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    view = m.views[op.dst.id]
    tile = m.tile(op.src)
    if op.transposed:
        # view element (r, c) holds tile element ((r // K) * W + c, r % K) (atoms [A][K][W]:
        # O.StMatrix.transposed), so the write reads as a tile of the view's shape
        k, w = op.src.type.shape[1], op.dst.type.shape[1]

        def fn(idx, src=tile.fn, k=k, w=w):
            return src((arith.div(idx[0], k) * w + idx[1], arith.mod(idx[0], k)))
        tile = dataclasses.replace(tile, shape=(view.rows, view.cols), layout="", fn=fn,
                                   what=f"{tile.what}, stored transposed")
    if m._recording:
        m.writes.setdefault(view.buffer.id, []).append(
            WriteSite("generic", op, site, view, None, tile=tile))


def ldmatrix(m: Model, op: O.LdMatrix, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    view = m.views[op.src.id]
    if m._recording:
        m.reads.append(ReadSite("ldmatrix", op, site, view))
    k, w = op.result.type.shape[1], op.src.type.shape[1]
    atoms = op.result.type.shape[0] // w if op.transposed else 0

    def fn(idx, v=view, s=site):
        if atoms == 1:      # element (m, k) of the tile is (k, m) of the view
            idx = (idx[1], idx[0])
        elif atoms:         # atoms [A][K][W]: (m, k) is ((m // W) * K + k, m % W)
            idx = (arith.div(idx[0], w) * k + idx[1], arith.mod(idx[0], w))
        return through(m.read_smem(v, idx, s), f"the ldmatrix view at {v.op.loc}")
    m._set_tile(op.result, fn,
        op, "ldmatrix of a shared-memory view")


def load(m: Model, op: O.Load, scopes, role, counters, following) -> None:
    info = m.tensors[op.tensor.id]
    offs = tuple(m.scalar(o) for o in op.offsets)
    site = m._site(op, scopes, role)
    loops = site.loops()
    it = loops[-1].var if loops else None

    def fn(idx, info=info, offs=offs, it=it):
        coords = trailing(offs, idx)
        return m.element_record(info, coords, it=it,
                                source=f"{info.name}[...] loaded at {op.loc}")
    m._set_tile(op.result, fn, op, f"a tile of {info.name} loaded at {op.loc}")


def _index_parts(m: Model, indices) -> list:
    """(the model's tile or scalar, the tile's shape or None) of each gather index."""
    parts = []
    for ix in indices:
        if isinstance(ix.type, TileType):
            parts.append((m.tile(ix), ix.type.shape))
        else:
            parts.append((m.scalar(ix), None))
    return parts


def _index_coords(parts, idx, unknown: str) -> list:
    """The coordinates gather element `idx` reads: a scalar index as it is, an index tile's
    `value` field at idx (broadcast: a dim of extent 1 at 0) where the model knows it
    (arithmetic on aranges and scalars), else a fresh variable named `unknown` (nothing is
    claimed about which element it read)."""
    coords = []
    for x, shape in parts:
        if shape is None:
            coords.append(x)
            continue
        v = x.fn(tuple(z3.IntVal(0) if s == 1 else c
                       for c, s in zip(idx, shape))).fields.get("value")
        coords.append(v.term if v is not None else fresh_int(unknown))
    return coords


def gather(m: Model, op: O.Gather, scopes, role, counters, following) -> None:
    # element i carries the tags of the tensor element its indices name (_index_coords);
    # past the tensor's edge it reads `other`: element_record's record is undefined there
    info = m.tensors[op.tensor.id]
    site = m._site(op, scopes, role)
    loops = site.loops()
    it = loops[-1].var if loops else None
    parts = _index_parts(m, op.indices)

    def fn(idx, info=info, parts=parts, it=it):
        return m.element_record(info, tuple(_index_coords(parts, idx, "gather_index")), it=it,
                                source=f"{info.name}[...] gathered at {op.loc}")
    m._set_tile(op.result, fn, op, f"a tile of {info.name} gathered at {op.loc}")


def smem_gather(m: Model, op: O.SmemGather, scopes, role, counters, following) -> None:
    # a shared read as ldmatrix's (the smem race and ownership checks see it), element i
    # resolved against the buffer's writes at the view element its indices name
    # (_index_coords). Outside the view it reads `other` (codegen guards each index by the
    # view's rows and columns): its record is undefined there, as a load's past a tensor's
    # edge, so nothing is claimed of it. read_smem alone would not give that: a row outside
    # a sub-view (`rows_slice`) may be a row of the buffer another write covers, whose
    # tags would stand for a value the gather never reads (tests/unit/test_smem_gather.py)
    site = m._site(op, scopes, role)
    view = m.views[op.src.id]
    parts = _index_parts(m, op.indices)
    if m._recording:
        m.reads.append(ReadSite("smem-gather", op, site, view, tuple(parts)))

    def fn(idx, view=view, parts=parts, site=site):
        r, c = (_num(x) for x in _index_coords(parts, idx, "smem_gather_index"))
        rec = m.read_smem(view, (r, c), site)
        inside = z3.And(r >= 0, r < view.rows, c >= 0, c < view.cols)
        return through(dataclasses.replace(rec, defined=z3.And(inside, rec.defined)),
                       f"the shared view gathered at {op.loc}")
    m._set_tile(op.result, fn, op, f"a tile gathered from shared memory at {op.loc}")


def load_scalar(m: Model, op: O.LoadScalar, scopes, role, counters, following) -> None:
    # data read at run time (a scale): an unknown value, guarded like a tile load; a
    # function of its address, so a per-thread address gives a per-thread value. A tensor
    # whose tag field `value` names its contents (`ag.tag_tensor(T, value=lambda i, j:
    # fn(i))`, fn opaque: an index map routing computed) gives that expression instead, so
    # `ag.tag_assume` axioms about fn reach the loaded value.
    offsets = [m.scalar(o) for o in op.offsets]
    named = m.tensors[op.tensor.id].user_fields.get("value")
    if named is not None:
        m.sym[op.result.id] = m.eval_tag_expr(named[0], named[1], coords=offsets)
        return
    fn = z3.Function(f"loaded{op.result.id}", *([z3.IntSort()] * len(offsets)),
                     z3.IntSort())
    m.sym[op.result.id] = fn(*offsets) if offsets else fresh_int(f"loaded{op.result.id}")


def store(m: Model, op: O.Store, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    if m._recording:
        m.stores.append(StoreSite("store", op, site, m.tensors[op.tensor.id],
                                  tuple(m.scalar(o) for o in op.offsets),
                                  op.value.type.shape, m.tile(op.value),
                                  op.transposed))


def atomic_add(m: Model, op: O.AtomicAdd, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    if m._recording:
        m.atomics.append(AtomicSite("add", op, site, m.tensors[op.tensor.id],
                                    tuple(m.scalar(o) for o in op.offsets)))


def atomic_fetch_add(m: Model, op: O.AtomicFetchAdd, scopes, role, counters,
                     following) -> None:
    site = m._site(op, scopes, role)
    info = m.tensors[op.tensor.id]
    offs = tuple(_num(m.scalar(o)) for o in op.offsets)
    args = tuple(site.scope_vars()) + tuple(v for v, _, _ in m.grid_vars)
    name = f"ticket{op.result.id}"
    ticket = z3.Function(name, *([z3.IntSort()] * len(args)), z3.IntSort())(*args) \
        if args else fresh_int(name)
    m.sym[op.result.id] = ticket
    inverses: tuple = ()
    inside = z3.And([z3.And(o >= 0, o < _num(info.extent(m, d))) for d, o in enumerate(offs)])
    m.premises.append(z3.Implies(z3.Not(inside), ticket == -1))   # no atomic: -1
    if op.wrap is not None:
        inverses = tuple(z3.Function(f"{name}_inv{k}", *([z3.IntSort()] * (len(offs) + 1)),
                                     z3.IntSort()) for k in range(len(args)))
        m.premises.append(z3.Implies(inside, z3.And(
            [inv(*offs, ticket) == a for inv, a in zip(inverses, args)] +
            [ticket >= 0, ticket < _num(m.scalar(op.wrap))])))
    if m._recording:
        m.atomics.append(AtomicSite("fetch_add", op, site, info, offs, args, ticket, inverses))


RULES: dict[type, Rule] = {
    O.SmemAlloc: smem_alloc,
    O.SmemSlice: smem_slice,
    O.StMatrix: stmatrix,
    O.LdMatrix: ldmatrix,
    O.Load: load,
    O.Gather: gather,
    O.SmemGather: smem_gather,
    O.LoadScalar: load_scalar,
    O.Store: store,
    O.AtomicAdd: atomic_add,
    O.AtomicFetchAdd: atomic_fetch_add,
}
