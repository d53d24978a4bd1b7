"""Register-tile obligations: combined operands agree, and row reductions over the wgmma
accumulator stay in their row and see all of it.

Job (INVARIANTS.md §3.2–3.3; bug classes 16, 17, 19):
  ew.broadcast — when an elementwise op broadcasts a row or column vector against a tile, the
      coordinate fields (and user tags) both carry as points agree at every paired element:
      `x - rowmax(x)` subtracts the max of the same row, `x + bias` adds the bias of the same
      column. Fields one side carries as a reduction (the row max over n) are the point of
      the operation and are not compared. An integer dim wider than 1 read at the constant 0
      (`y[0]` of y[4, 64, N]) met by a moving position of the same dim (x[c0]) is claimed
      equal to it: only an extent-1 dim broadcasts (`_zero_reads`);
  ew.agree — two operands of one shape meet element by element (`X[b] + Y[b]`): they agree on
      the coordinate fields of the tensors the result is stored into (outflow.Uses), so a tile
      read at a constant batch (`X[b] + Y[0]`) is an error. A field no destination has is
      combined across on purpose (split-K's P[0] + P[1] stored to C, the slice summed away:
      reduce.slices' business), and a result the walk cannot follow to a store (a wgmma
      operand) claims nothing;
  reduce.layout — a row reduction of a tile in the wgmma accumulator layout combines, per
      thread, the registers of its row half and then lanes by xor shuffles (masks (1, 2), the
      quad): tier F2 on the fragment's linear layout (argus.target.sm90.wgmma_acc_f2): every
      generator keeps the row (row image 0) and the generators' column images are independent
      and span all columns (every column of the row exactly once); for N no power of two
      (no F2 layout) the same claim on the whole fragment table. Blocked tiles are reduced
      by codegen over whole rows of its blocked layout (by construction).
"""

from __future__ import annotations

import functools

import numpy as np
import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.target import sm90
from argus.verify import witness as W
from argus.verify.model import EwSite, Model, ReduceSite, _num, through
from argus.verify.obligation import Finding, Obligation
from argus.verify.outflow import Uses
from argus.verify.solver import value
from argus.verify.tagdomain import (POINTWISE, fresh_int, integer_dim_position,
                                    is_coordinate_field, is_integer_dim)
from argus.verify.transfer.tiles import _index_tiles, moving_point, zero_point

QUAD_SHUFFLE_MASKS = (1, 2)


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    user = set()
    for info in model.tensors.values():
        user |= set(info.user_fields)
    uses = Uses(model.kernel) if model.ews else None
    for ew in model.ews:
        obs += _broadcast(model, ew, user, uses)
    for red in model.reduces:
        f = _reduce_layout(model, red)
        if f is not None:
            finds.append(f)
    return obs, finds


def _tile_arg(ew: EwSite, i: int):
    """The i-th tile operand of `ew` (the value `ew.operands[i]` is the state of), or None."""
    tiles = [v for v in ew.op.args if isinstance(v.type, TileType)]
    return tiles[i] if i < len(tiles) else None


def _operand_name(ew: EwSite, i: int) -> str:
    """The IR name of the i-th tile operand of `ew` (names.annotate makes it the user's)."""
    v = _tile_arg(ew, i)
    return str(v) if v is not None else f"operand {i}"


def _stored_fields(model: Model, ew: EwSite, uses: Uses) -> frozenset[str]:
    """The coordinate fields of the tensors `ew`'s result is stored into (outflow.Uses): the
    fields two same-shape operands must agree on. A field no destination has is combined
    across on purpose (split-K's P[0] + P[1] stored to C: the slice `s` is summed away); a
    result that reaches a use the walk does not follow (a wgmma operand) claims nothing."""
    reached = uses.stores_from(ew.op.result)
    if not reached:
        return frozenset()
    names: set[str] = set()
    for st, _axes, _crossed in reached:
        info = model.tensors.get(st.tensor.id)
        if info is not None:
            names |= {f for f in info.field_names if is_coordinate_field(f)}
    return frozenset(names)


def _broadcast(model: Model, ew: EwSite, user: set[str], uses: Uses) -> list[Obligation]:
    out = []
    stored: frozenset[str] | None = None
    shape = ew.op.result.type.shape
    idx = [fresh_int(f"e{d}") for d in range(len(shape))]
    ranges = [z3.And(i >= 0, i < n) for i, n in zip(idx, shape)]
    recs: dict[int, tuple] = {}
    index_op = ew.op.result.id in _index_tiles(model)

    def record(i: int) -> tuple:
        # evaluated only for operands of a broadcast pair: most elementwise sites have none,
        # and a record is the whole tag DAG below the operand (the bulk of this check's time)
        if i not in recs:
            state, oshape = ew.operands[i]
            oidx = tuple(z3.IntVal(0) if s == 1 else x for x, s in zip(idx, oshape))
            recs[i] = (state, oshape, state.fn(oidx))
        return recs[i]
    for a in range(len(ew.operands)):
        for b in range(len(ew.operands)):
            sha, shb = ew.operands[a][1], ew.operands[b][1]
            bcast = [d for d in range(len(shape)) if sha[d] == 1 and shape[d] > 1 and
                     shb[d] == shape[d]]
            # two operands of one shape meet element by element (`X[b] + Y[b]`): the same
            # claim, each pair once (ew.agree); a broadcast pair is ew.broadcast's
            same = a < b and tuple(sha) == tuple(shb) and \
                any(s > 1 for s in sha)
            if a == b or not (bcast or same):
                continue
            code = "ew.broadcast" if bcast else "ew.agree"
            if not bcast and stored is None:
                stored = _stored_fields(model, ew, uses)
            if not bcast and not stored:
                continue
            sa, sha, ra = record(a)
            sb, shb, rb = record(b)
            claims, prem = [], []
            linked = _linked_integer_fields(model, ra, rb, _tile_arg(ew, a), _tile_arg(ew, b)) \
                if bcast else frozenset()
            for name in sorted(set(ra.fields) & set(rb.fields)):
                if not (is_coordinate_field(name) or name in user or name in linked):
                    continue
                if name == "value" and index_op:
                    # index arithmetic (`key <= row_last_key`): the operands' `value` fields
                    # are the integers being compared or combined, not tags naming rows (a
                    # user tag field named `value` shares the name)
                    continue
                if not bcast and name not in stored:
                    continue
                fa, fb = ra.fields[name], rb.fields[name]
                if not (fa.is_point and fb.is_point):
                    continue
                label = (f"{name} of {_operand_name(ew, a)} == {name} of {_operand_name(ew, b)}"
                         if code == "ew.agree" else
                         f"{name} of the broadcast operand == {name} of the tile")
                claims.append((label, fa.term == fb.term))
                prem += list(fa.cond) + list(fb.cond)
            if not claims:
                continue
            premises = list(model.premises) + ew.site.constraints() + ranges + list(ra.cond) + \
                list(rb.cond) + [ra.defined, rb.defined] + prem
            premises += model.axiom_instances([c for _, c in claims])

            def decode(zm, violated, ra=ra, rb=rb, sa=sa, sb=sb, code=code, a=a, b=b,
                       linked=linked):
                wit = W.context(model, zm, ew.site)
                iv = tuple(value(zm, i) for i in idx)
                wit["element"] = iv
                if ew.op.result.type.layout == "wgmma_acc" and len(iv) == 2:
                    wit.update(W.acc_thread(*iv))
                va = {k: value(zm, v.term) for k, v in ra.fields.items() if v.is_point
                      and (is_coordinate_field(k) or k in linked)}
                vb = {k: value(zm, v.term) for k, v in rb.fields.items() if v.is_point
                      and (is_coordinate_field(k) or k in linked)}
                if code == "ew.agree":
                    # the operands by the user's names (names.annotate renames the IR values)
                    na, nb = _operand_name(ew, a), _operand_name(ew, b)
                    wit.update({"operand": {"name": na, "tags": va},
                                "other_operand": {"name": nb, "tags": vb}})
                    return W.placed(f"element {iv} of `{ew.op.fn}` combines `{na}` "
                                    f"({sa.what}) with tags {va} and `{nb}` ({sb.what}) with "
                                    f"tags {vb}: one element of the result is made of two "
                                    f"different elements", wit), wit
                wit.update({"broadcast_operand": va, "tile_operand": vb})
                return W.placed(f"element {iv} of `{ew.op.fn}` combines the broadcast operand "
                                f"({sa.what}) with tags {va} and the tile ({sb.what}) with "
                                f"tags {vb}", wit), wit
            out.append(Obligation(code, ew.op.loc, f"{ew.op.fn} at {ew.op.loc}",
                                  premises, claims, decode,
                                  minimize=list(idx) + [s.var for s in ew.site.scopes
                                                        if s.var is not None]))
    out += _zero_reads(model, ew, record, idx, ranges, uses)
    return out


# ops through which an operand holds the loaded elements themselves, at its own element
_ELEMENTS = (O.Elementwise, O.Convert, O.ConvertLayout, O.ExpandDims)


def _element_loads(model: Model, v) -> list:
    """The loads whose elements v holds: its definitions walked back through elementwise ops,
    conversions and expand_dims only. Not through a reduction (a statistic of y[0], as the
    Welford shift of compose's batch norm, `mean(x[0])` subtracted from every batch, is a
    constant of the computation, not an element of y) nor a variable (an accumulator carried
    across the dim: split-K's `total = P[0]`, then `total + P[s]`)."""
    return [op for _, op in model.walk_defs(v, through(_ELEMENTS)) if isinstance(op, O.Load)]


def _wide_zero_loads(model: Model, v) -> dict[str, tuple]:
    """`dim{i}` -> (the tensor, its extent E > 1 at i, the load) for each load whose elements
    v holds (`_element_loads`) that reads position i of an integer dim wider than 1 at the
    constant 0 outside the tile's axes (`y[0]` of a [4, 64, 3000] y: one batch, not a
    broadcast)."""
    out: dict[str, tuple] = {}
    for op in _element_loads(model, v):
        if op.tensor.id not in model.tensors:
            continue
        info = model.tensors[op.tensor.id]
        lead = len(info.dims) - len(op.result.type.shape)   # positions no tile axis covers
        for i, off in enumerate(op.offsets[:max(lead, 0)]):
            ext = info.dims[i]
            if isinstance(ext, int) and ext > 1 and is_integer_dim(info.field_names[i]):
                t = z3.simplify(_num(model.scalar(off)))
                if z3.is_int_value(t) and t.as_long() == 0:
                    out.setdefault(info.field_names[i], (info, ext, op))
    return out


def _zero_reads(model: Model, ew: EwSite, record, idx, ranges, uses: Uses) -> list[Obligation]:
    """ew.broadcast of an integer dim read at 0: an operand that reads position i of a tensor
    at the constant 0 where the tensor's extent there is E > 1 (`y[0]` of y[4, 64, 3000]), met
    in one elementwise op by an operand whose position i moves (x[c0] of an x with the same
    extent E at i) combines one element of the dim with every element of it: torch broadcasts
    only a dim of extent 1 (transfer/tiles._broadcast_kept reads those so). Claimed: the two
    positions are equal at every element, so any other batch is an error naming the thread.
    Not claimed where the moving operand reads the zero-read tensor itself (`x - x[0]`, valid
    torch: an anchor row subtracted from every row, indistinguishable by its loads from a
    wrong batch, so only another tensor's row 0 is taken for the bug).
    The moving operand must read a tensor of the same integer positions and the same extent E
    at i (the same dim): a table [4, N] read at row 0 next to x[8, N]'s moving row is another
    dim that only shares the position's name, and is not claimed. As for ew.agree, the dim
    must be one the result is stored along: a destination of the same rank with extent E at i
    (OUT[4, 64, 3000]); a dim no destination has is combined across on purpose (split-K's
    `total = P[0]`, then `total + P[s]` stored to C[M, N]: the partials summed away)."""
    tiles = [a for a in ew.op.args if isinstance(a.type, TileType)]
    if len(tiles) != len(ew.operands) or len(tiles) < 2:
        return []
    wide = [_wide_zero_loads(model, v) for v in tiles]
    if not any(wide):
        return []
    dests = [model.tensors[st.tensor.id] for st, _axes, _crossed in
             uses.stores_from(ew.op.result) if st.tensor.id in model.tensors]
    out = []
    for a, zeros in enumerate(wide):
        for name, (info, ext, load) in sorted(zeros.items(), key=lambda kv: kv[0]):
            i = integer_dim_position(name)
            if not any(len(t.dims) == len(info.dims) and t.dims[i] == ext and
                       t.field_names[i] == name for t in dests):
                continue   # summed away, or stored along no such dim
            ra = record(a)[2]
            fa = ra.fields.get(name)
            if fa is None or not fa.is_point or not zero_point(fa):
                continue
            for b, v in enumerate(tiles):
                if b == a:
                    continue
                moving_loads = model.loads_into(v)
                if any(op.tensor.id == load.tensor.id for op in moving_loads):
                    continue   # x - x[0]: one row of a tensor against the tensor itself, the
                    #            idiom of an anchor row (torch's x - x[0] broadcasts it)
                same_dim = any(len(t.dims) == len(info.dims) and t.dims[i] == ext
                               for t in (model.tensors.get(op.tensor.id)
                                         for op in moving_loads) if t is not None)
                rb = record(b)[2]
                fb = rb.fields.get(name)
                if not same_dim or fb is None or not fb.is_point or not moving_point(fb) or \
                        {f for f in ra.fields if is_integer_dim(f)} != \
                        {f for f in rb.fields if is_integer_dim(f)}:
                    continue
                claim = (f"{name} of {_operand_name(ew, a)} (read at 0 of {info.name}, "
                         f"extent {ext}) == {name} of {_operand_name(ew, b)}",
                         fa.term == fb.term)
                premises = list(model.premises) + ew.site.constraints() + ranges + \
                    list(ra.cond) + list(rb.cond) + [ra.defined, rb.defined] + \
                    list(fa.cond) + list(fb.cond)

                def decode(zm, violated, a=a, b=b, fb=fb, info=info, ext=ext, load=load,
                           name=name):
                    wit = W.context(model, zm, ew.site)
                    iv = tuple(value(zm, x) for x in idx)
                    moved = value(zm, fb.term)
                    na, nb = _operand_name(ew, a), _operand_name(ew, b)
                    wit.update({"element": iv, "zero_read": str(load.loc), name: moved})
                    return W.placed(
                        f"element {iv} of `{ew.op.fn}` combines `{nb}` at {name} = {moved} "
                        f"with `{na}`, read at {name} = 0 of {info.name} (extent {ext} there, "
                        f"loaded at {load.loc}): one {name} of {info.name} meets every "
                        f"{name}, not a broadcast (only an extent-1 dim broadcasts)",
                        wit), wit
                out.append(Obligation(
                    "ew.broadcast", ew.op.loc, f"{ew.op.fn} at {ew.op.loc}", premises,
                    [claim], decode,
                    minimize=list(idx) + [s.var for s in ew.site.scopes if s.var is not None],
                    fix=f"read {info.name} at the {name} of {_operand_name(ew, b)} in the "
                        f"load at {load.loc} (or give {info.name} extent 1 there to "
                        f"broadcast it)"))
    return out


def _linked_integer_fields(model: Model, ra, rb, va=None, vb=None) -> frozenset[str]:
    """The `dim{i}` fields (integer dims: a position, not a name) a broadcast pair is checked
    on, as a named field would be: a constant dim is a known size. `dim{i}` is a candidate
    when both operands come from tensors of the same integer positions (the same set of `dim`
    fields: torch's right-aligned broadcast rendered at one rank, `x[64, 3000] * w[1, 3000]`),
    or, where the sets differ, when the tensors loaded into the operands `va`, `vb` that have
    an integer dim at position i (the only sources of field `dim{i}`: `_loaded_tensors`) are
    of one rank on both sides (a depthwise conv's x * Wt[8, 9] against its bias B[8, 1]: the
    product also carries X[NC, 16, 16, 1]'s dim1..3, and its dim0 is Wt's; a rank-1 bias
    b[64] against x[64, K] pairs b's column with x's row and is not linked). A candidate is
    linked when every tensor with an integer dim at position i gives it one extent E > 1, and
    E occurs at no other integer position of any such tensor: a square tile (`x.T + w` of an
    [N, N] x, a bias [N] against [N, N]) could pair position i with another dim of that
    extent, so it links nothing. A field whose point met another element pointwise (a pooling
    window's max: tagdomain.POINTWISE) or that is a set is not compared (the caller keeps
    points)."""
    da = {f for f in ra.fields if is_integer_dim(f)}
    db = {f for f in rb.fields if is_integer_dim(f)}
    if not da or not db:
        return frozenset()
    candidates = da if da == db else _one_rank_fields(model, da & db, va, vb)
    out = set()
    for f in candidates:
        i = integer_dim_position(f)
        owners = [t for t in model.tensors.values()
                  if len(t.dims) > i and isinstance(t.dims[i], int)]
        exts = {t.dims[i] for t in owners}
        if len(exts) != 1:
            continue
        (ext,) = exts
        if ext <= 1 or any(sum(1 for x in t.dims if isinstance(x, int) and x == ext) > 1
                           for t in owners):
            continue
        if any(x.startswith(POINTWISE) for v in (ra.fields[f], rb.fields[f]) for x in v.mixed):
            continue
        out.add(f)
    return frozenset(out)


def _one_rank_fields(model: Model, common: set[str], va, vb) -> set[str]:
    """The fields `dim{i}` of `common` whose sources, the tensors loaded into `va` and into
    `vb` with an integer dim at position i, are some on each side and all of one rank."""
    if va is None or vb is None:
        return set()
    la, lb = _loaded_tensors(model, va), _loaded_tensors(model, vb)
    if la is None or lb is None:
        return set()
    out = set()
    for f in common:
        i = integer_dim_position(f)
        ta, tb = [[t for t in (model.tensors.get(x) for x in side)
                   if t is not None and len(t.dims) > i and isinstance(t.dims[i], int)]
                  for side in (la, lb)]
        if ta and tb and len({len(t.dims) for t in ta + tb}) == 1:
            out.add(f)
    return out


def _loaded_tensors(model: Model, v) -> frozenset[int] | None:
    """The ids of the tensors whose `ag.load`s make tile `v`, through elementwise ops, fulls,
    constants and variables (a `var`'s initial value and every `assign` to it); None when
    anything else makes it (a wgmma, shared memory, a reduction, a gather, a scalar read),
    whose tags this walk does not follow: then no field is linked by its sources."""
    assigns = model.assigned_sources()

    def follow(x, op) -> list:
        if isinstance(op, O.Elementwise):
            return list(op.args)
        if isinstance(op, O.Var):
            return [op.init] + assigns.get(x.id, [])
        return []
    out: set[int] = set()
    for _, op in model.walk_defs(v, follow):
        if isinstance(op, O.Load):
            out.add(op.tensor.id)
        elif not isinstance(op, (O.Elementwise, O.Var, O.Full, O.Const)):
            return None
    return frozenset(out)


def _reduce_layout(model: Model, red: ReduceSite) -> Finding | None:
    src_t = red.op.src.type
    layout = src_t.layout or (red.src.layout if hasattr(red, "src") else "")
    if layout != "wgmma_acc" or red.op.axis != len(src_t.shape) - 1:
        return _reduce_plan(model, red, layout)
    n = src_t.shape[1]
    subject = f"{red.op.fn} over the accumulator columns at {red.op.loc}"
    masks = tuple(getattr(red.op, "shuffle_xor", ()) or QUAD_SHUFFLE_MASKS)
    try:
        lay = sm90.wgmma_acc_f2(n)
    except ValueError:   # N no power of two (block_n 80, 112, 192...): no F2 layout
        return _reduce_acc_table(red, n, masks, subject)
    names = [d for d, _ in lay.in_dims]
    reg = lay.bases[names.index("register")]
    lane = lay.bases[names.index("lane")]
    # generators of the contributor set: lane bits named by the xor masks, and every register
    # bit except the row-half bit (register index bit 1 selects rows g vs g + 8)
    gens = []
    for m in masks:
        for b in range(5):
            if (m >> b) & 1:
                gens.append((f"lane xor {1 << b}", lane[b]))
    for b, img in enumerate(reg):
        if b != 1:
            gens.append((f"register bit {b}", img))
    for what, (row_img, _col) in gens:
        if row_img:
            return Finding("reduce.layout", red.op.loc, subject, "violated",
                           f"the contributor '{what}' moves to another row (row image "
                           f"{row_img}): the row statistic mixes rows",
                           {"generator": what, "row_xor": row_img, "masks": masks}, tier="F2")
    cols = [c for _, (_r, c) in gens]
    rank, basis = 0, []
    for c in cols:
        for b in basis:
            c = min(c, c ^ b)
        if c:
            basis.append(c)
            rank += 1
    need = (n - 1).bit_length()
    if rank < need or len(cols) != rank:
        missing = "some columns are never seen" if rank < need else "some columns count twice"
        return Finding("reduce.layout", red.op.loc, subject, "violated",
                       f"with shuffle masks {masks} the contributors of a row span {rank} of "
                       f"{need} column bits: {missing}",
                       {"masks": masks, "rank": rank, "column_bits": need}, tier="F2")
    return Finding("reduce.layout", red.op.loc, subject, "proven", tier="F2")


def _reduce_acc_table(red: ReduceSite, n: int, masks, subject: str) -> Finding:
    """The F2 claim of `_reduce_layout` checked on the whole fragment table instead, for an
    accumulator whose N is no power of two: for every warpgroup thread and row half, the
    registers of that half (combined in-thread) of the lanes its xor masks reach hold one row
    and each of its N columns exactly once (sm90.wgmma_acc_coord, 128 x N/2 entries)."""
    status, why, witness = _acc_table_verdict(n, tuple(masks))
    return Finding("reduce.layout", red.op.loc, subject, status, why, dict(witness),
                   tier="exhaustive")


@functools.cache
def _acc_table_verdict(n: int, masks: tuple) -> tuple[str, str, dict]:
    """(status, message, witness) of `_reduce_acc_table`: a function of N and the masks alone,
    so decided once per process (an attention kernel at block_n 112 reduces its accumulator
    four times; the walk over the table through the generic layout arithmetic was a third of
    its verification time). The table is read through wgmma_acc_coord on numpy arrays (the
    formula codegen renders), once."""
    rows_t, cols_t = sm90.wgmma_acc_coord(np.arange(128)[:, None], np.arange(n // 2)[None, :])
    rows_t, cols_t = np.broadcast_to(rows_t, (128, n // 2)).tolist(), \
        np.broadcast_to(cols_t, (128, n // 2)).tolist()
    span = [0]
    for m in masks:
        span += [x ^ m for x in span]
    for t in range(128):
        for half in (0, 1):
            rows, cols = set(), {}
            for x in span:
                if (t ^ x) // 32 != t // 32:   # a shuffle stays in its warp
                    return "violated", f"shuffle masks {masks} leave the warp", {"masks": masks}
                for i in range(n // 2):
                    if (i // 2) % 2 != half:
                        continue
                    r, c = rows_t[t ^ x][i], cols_t[t ^ x][i]
                    rows.add(r)
                    cols[c] = cols.get(c, 0) + 1
            if len(rows) != 1:
                return "violated", (f"thread {t} (row half {half}) combines rows "
                                    f"{sorted(rows)}: the row statistic mixes rows"), \
                    {"thread": t, "masks": masks}
            if sorted(cols) != list(range(n)) or any(v != 1 for v in cols.values()):
                missing = "some columns are never seen" if len(cols) < n else \
                    "some columns count twice"
                return "violated", (f"with shuffle masks {masks} thread {t} (row half {half}) "
                                    f"sees {len(cols)} of {n} columns: {missing}"), \
                    {"thread": t, "masks": masks}
    return "proven", "", {}


def _reduce_plan(model: Model, red: ReduceSite, layout: str) -> Finding | None:
    """Any other reduction: the plan codegen renders (RegisterLayout.reduction_plan: registers
    in-thread, lane xor masks, warps through shared memory) is checked exhaustively on the
    layout's (thread, register) table: every thread's combined contributors are exactly the
    line of its result element along the axis, each element once."""
    if not layout:
        return None
    threads = 128 if red.site.role is not None else int(model.kernel.attr("threads", 128))
    subject = f"{red.op.fn} over axis {red.op.axis} at {red.op.loc}"
    try:
        lay = red.src.register_layout(threads) if red.src.layout == layout else \
            _build(layout, red.op.src.type.shape, threads)
        plan = lay.reduction_plan(red.op.axis)
    except ValueError as e:
        return Finding("reduce.layout", red.op.loc, subject, "unknown", str(e))
    if lay.threads * lay.nregs > 1 << 16:
        return Finding("reduce.layout", red.op.loc, subject, "unknown",
                       "the layout table is too large to check exhaustively")
    masks = list(plan.lane_masks) + [1 << b for b in plan.warp_bits]
    span = [0]
    for m in masks:
        span += [x ^ m for x in span]
    axis = red.op.axis
    span_bits = sum(masks)
    # threads that differ only in the combined bits combine the same set: one per class
    for t in (t for t in range(lay.threads) if t & span_bits == 0):
        for j, group in enumerate(plan.groups):
            seen: dict[int, int] = {}
            want = lay.coord(t, group[0])
            for x in span:
                if t ^ x >= lay.threads:
                    continue
                for r in group:
                    c = lay.coord(t ^ x, r)
                    if any(c[d] != want[d] for d in range(lay.rank) if d != axis):
                        return Finding("reduce.layout", red.op.loc, subject, "violated",
                                       f"thread {t} register {r}: a contributor from thread "
                                       f"{t ^ x} holds {c}, off the line of {want}",
                                       {"thread": t, "register": r}, tier="exhaustive")
                    seen[c[axis]] = seen.get(c[axis], 0) + 1
            n = lay.shape[axis]
            if sorted(seen) != list(range(n)) or any(v != 1 for v in seen.values()):
                return Finding("reduce.layout", red.op.loc, subject, "violated",
                               f"thread {t}'s result {j} combines axis coordinates "
                               f"{sorted(seen)[:8]} with multiplicities "
                               f"{sorted(set(seen.values()))}, not each of 0..{n - 1} once",
                               {"thread": t, "result_register": j}, tier="exhaustive")
    return Finding("reduce.layout", red.op.loc, subject, "proven", tier="exhaustive")


def _build(layout: str, shape, threads: int):
    from argus.target import register_layouts

    return register_layouts.build(layout, tuple(shape), threads)
