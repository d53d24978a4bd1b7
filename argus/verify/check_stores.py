"""Output obligations: every stored element carries its own coordinates, is stored once, and
the grid covers the whole output.

Job (INVARIANTS.md §3.2 last row; bug classes 13, 14, 22), for `ag.store` and TMA stores:
  store.coords — for every in-bounds destination (r, c) the stored element's tags name it:
      the value's field named after each output dim (m of C["M","N"]) is a point equal to the
      destination coordinate, and user tags of the output tensor match; an integer dim
      (C["M", 256]) has no name, so it is met by extent (`_integer_links`): a swapped column
      tile of a fixed dim is a permutation that once and coverage accept;
  store.once — two different (CTA, warpgroup, iteration, element) instances never write the
      same in-bounds element (per site and across sites of one tensor);
  store.coverage — per output dim, the destination map over its own variables is injective
      with image [0, |domain|) and |domain| >= extent. A dim covered by one tile only (no
      program id or loop index) can only be complete if the extent fits the tile: that is a
      launch precondition, reported as a warning naming it.
All in linear integer arithmetic (products of a program id by a constant tile size).
"""

from __future__ import annotations

import dataclasses

import z3

from argus.ir import ops as O
from argus.verify import solver
from argus.verify import store_guards as guards
from argus.verify import witness as W
from argus.verify.model import Model, StoreSite, _num, trailing
from argus.verify.obligation import Finding, Lemma, Obligation
from argus.verify.once_split import (LowerBounds, Radix, drive, drive_all, factors, normalized,
                                     pushed_out_steps, radix, sign_facts, split_launch_factor,
                                     summands)
from argus.verify.solver import default_timeout_ms as solver_timeout
from argus.verify.solver import value
from argus.verify.tagdomain import (POINTWISE, free_consts, fresh_int, integer_dim_position,
                                    is_coordinate_field, is_integer_dim)
from argus.verify.terms import outermost, subterms


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    by_tensor: dict[int, list[StoreSite]] = {}
    for st in model.stores:
        by_tensor.setdefault(st.tensor.value.id, []).append(st)
        obs += _coords(model, st)
    for sites in by_tensor.values():
        reps: list[StoreSite] = []
        # store.once on in-bounds elements: summands that push an element out of bounds are
        # dropped first (once_split.pushed_out), so per-image row blocks become translates
        extra: dict = {}   # site key -> its pushed-out summands' premises
        # the sites' steps together: a row-segmented store's segments ask one family of them
        unpushed = drive_all([_unpushed_steps(model, st, extra) for st in sites])
        once_sites, tiled = _join_tiled(unpushed, extra)
        once_obs: list[Obligation] = []
        for i, a in enumerate(once_sites):
            if _key(a) in tiled:   # sites that tile one wider box: that box's store, once
                once_obs.append(_joined_once(model, a, tiled, extra))
                once_obs += [_once(model, a, b, extra=extra) for b in once_sites[i + 1:]]
                continue
            # a site that is another one shifted by constant offsets (a Python-unrolled
            # loop of stores) is injective iff that one is, on the whole tile; prove the class
            # once, without the bounds restriction, which makes the claim shift-invariant
            # (not for sites with in-bounds premises: they restrict the tile)
            rep = next((r for r in reps if _translate_of(r, a)), None)
            if rep is None:
                same_class = [b for b in once_sites if b is not a and _translate_of(a, b)]
                bounded = not same_class or _key(a) in extra
                if not bounded:
                    reps.append(a)
                once_obs.append(_once(model, a, a, bounded=bounded, extra=extra))
            for b in once_sites[i + 1:]:
                once_obs.append(_once(model, a, b, extra=extra))
        at = len(obs)   # where once_obs go (in place: `implied_by` may be set below)
        obs += once_obs
        partial = sites[0].tensor.name in (model.kernel.attr("partial_outputs", ()) or ())
        translates = len(sites) > 1 and all(_translate_of(sites[0], b) for b in sites[1:])
        pushed = None   # the pushed-out summands' premises per site, for coverage
        if len(sites) > 1 and not translates and all(_key(u) in extra for u in unpushed) and \
                all(_translate_of(unpushed[0], b) for b in unpushed[1:]):
            # each site pushed out of the tensor by its own flag (the row segments of a
            # TMA-store epilogue of per-image row blocks: the flag of row j is row j's):
            # without their pushes they are translates, and coverage sees them as one tile
            # with the block index in the flags (`_tile_coverage`'s `pushed`)
            sites, translates, pushed = unpushed, True, extra
        # one tile stored in blocks at constant offsets that tile one box without gaps (a
        # TMA-store epilogue's column blocks): the block index is one more variable inside
        # the tile. Translates with gaps between them (slots of a wider row, each BN of a
        # KC-wide slot) are not one tile: the else branch below
        blocks = translates and _joined(sites) is not None
        # translates by 0, 1, .. along the dim before the tile's (a gate and an up half of
        # one output row, stored by two sites): coverage is not claimed for them (below), but
        # store.once follows from the same decomposition with the site index inside the tile
        rows = translates and not blocks and _joined(sites, leading=True) is not None
        # translates forming a full grid over several dims (column blocks x row segments of
        # a TMA-store epilogue): one block index per moving dim inside the tile
        blocks = blocks or (translates and not rows and _block_grid(
            [[z3.simplify(_num(y) - _num(x)) for x, y in zip(sites[0].offsets, b.offsets)]
             for b in sites]) is not None)
        once = None   # the coverage claims that imply store.once (`_once_implied`)
        if partial:
            finds.append(Finding("store.coverage", sites[0].op.loc,
                                 f"stores to {sites[0].tensor.name}", "unknown",
                                 f"the kernel declares {sites[0].tensor.name} a partial output "
                                 f"(@ag.kernel(partial_outputs=...)): it writes part of it on "
                                 f"purpose, so coverage is not claimed"))
            if len(sites) == 1 or blocks or rows:
                # not reported: only their claims that imply store.once are queried
                once = _tile_coverage(model, sites[0], sites if blocks or rows else None,
                                      pushed)[2]
        elif len(sites) == 1 or blocks or rows:
            # rows: the site index is a variable inside the tile along the dim before the
            # tile's (a TMA-store epilogue's row segments of one warpgroup's rows)
            o, f, once = _coverage(model, sites[0]) if len(sites) == 1 else \
                _tile_coverage(model, sites[0], sites, pushed)
            obs += o
            finds += f
        elif _alternatives(sites) and (got := _coverage(model, sites[0], sites)) is not None:
            # one tile, one place, different conditions: stored where one of them holds
            obs += got[0]
            finds += got[1]
        else:
            finds.append(Finding("store.coverage", sites[0].op.loc,
                                 f"stores to {sites[0].tensor.name}", "unknown",
                                 f"{len(sites)} store sites: coverage is only checked for one"))
            if rows:
                # not reported: only their claims that imply store.once are queried
                once = _tile_coverage(model, sites[0], sites)[2]
        if once and len(once_obs) == 1:
            obs[at] = dataclasses.replace(
                once_obs[0], implied_by=once,
                implied_why=("implied by the proofs of store.coverage's tile decomposition "
                             "(check_stores._once_implied)"))
    return obs, finds


def coverage_obligations(model: Model) -> list[tuple[StoreSite, Obligation]]:
    """The store.coverage obligations alone, of tensors stored at one site (as above), with
    their store: the launch-time check (argus/runtime/coverage.py) evaluates their
    '|domain| >= extent' claim on the launched shapes."""
    sites: dict[int, list[StoreSite]] = {}
    for st in model.stores:
        sites.setdefault(st.tensor.value.id, []).append(st)
    return [(group[0], ob) for group in sites.values() if len(group) == 1
            for ob in _coverage(model, group[0])[0]]


def _dest(st: StoreSite, idx):
    """Destination coordinates of tile element `idx` (a transposed store swaps its axes)."""
    return list(trailing(st.offsets, _placed(st, idx)))


def _placed(st: StoreSite, seq) -> list:
    """`seq` (per tile axis) in the order of the destination dims it lands on."""
    seq = list(seq)
    return seq[::-1] if st.transposed else seq


def _inb(model: Model, st: StoreSite, dest):
    return [z3.And(d >= 0, d < _num(st.tensor.extent(model, k))) for k, d in enumerate(dest)]


def _by_store(model: Model, st: StoreSite, decode):
    """`decode` with who runs the store appended to its message (W.by_site: the store's role,
    warpgroup and threads), for the store.coverage decoders whose counterexample is a count
    or a shape rather than one instance, so the finding names them without names.who's
    lookup of its line."""
    def placed(zm, violated):
        msg, wit = decode(zm, violated)
        return W.by_site(model, st.site, msg, wit), wit
    return placed


def _elem_wit(model, zm, st: StoreSite, idx, dest):
    wit = W.context(model, zm, st.site)
    iv = tuple(value(zm, i) for i in idx)
    wit["tile_element"] = iv
    wit["output"] = W.fmt_elem(st.tensor.name, [value(zm, d) for d in dest])
    if st.tile.layout == "wgmma_acc" and len(iv) == 2:
        wit.update(W.acc_thread(iv[0], iv[1]))
    return wit


def _coords(model: Model, st: StoreSite) -> list[Obligation]:
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    rec = st.tile.fn(tuple(idx))
    dest = _dest(st, idx)
    prem = list(model.premises) + st.site.constraints() + list(rec.cond) + [rec.defined] + \
        _inb(model, st, dest) + [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)]
    claims = []
    field_of = {}   # claim name -> the field it compares (the witness names its views)
    other = None    # a second instance of the store (_other_instance), made for a window
    for d, fname in enumerate(st.tensor.field_names):
        val = rec.get(fname)
        if val is None or not is_coordinate_field(fname):
            continue
        if _window(val) and rec.get("live") is None:
            # a reduction over a window of this dim (a convolution's taps, a pool): the value
            # is several elements' along it, so no one of them is the destination's; the
            # claim is that the destination is one of them (a 'same' convolution storing
            # Y[l] = sum over t of X[l + t - P] names both dims L: the window holds l). Not
            # for a masked sum (a one-hot selection, compose's transpose): its mask pins the
            # set to the one element it keeps, which must be the destination's
            claims.append((f"{fname} of the destination is in the value's window",
                           z3.Exists(list(val.bound),
                                     z3.And(list(val.cond) + [val.term == dest[d]]))))
            field_of[claims[-1][0]] = fname
            # membership alone accepts a tile whose elements are stored permuted inside
            # their windows (a reversed tile of 4 outputs under 8 taps): the window must sit
            # at one offset from the destination for every element, CTA and iteration
            if other is None:
                other = _other_instance(model, st, idx, prem)
            ren, prem2 = other
            shift = val.term - dest[d]
            conds = list(val.cond) + [z3.substitute(c, *ren) for c in val.cond]
            # (the window's bound variables free: the claim holds for every value of them)
            claims.append((f"the window of {fname} sits at one offset from the destination "
                           f"for every element",
                           z3.Implies(z3.And(conds), shift == z3.substitute(shift, *ren))))
            field_of[claims[-1][0]] = fname
            continue
        prem += list(val.cond)
        claims.append((f"{fname} of the value == destination {fname}", val.term == dest[d]))
        field_of[claims[-1][0]] = fname
    for d, fname in _integer_links(model, st, rec):
        val = rec.get(fname)
        prem += list(val.cond)
        claims.append((f"{fname} of the value == destination dim {d} of "
                       f"{st.tensor.name}", val.term == dest[d]))
        field_of[claims[-1][0]] = fname
    for fname, (text, args) in st.tensor.user_fields.items():
        val = rec.get(fname)
        if val is None:
            continue
        want = model.eval_tag_expr(text, args, coords=dest)
        prem += list(val.cond)
        claims.append((f"{fname} of the value == {fname} of the destination", val.term == want))
        field_of[claims[-1][0]] = fname
    if not claims:
        return []
    if other is not None:
        prem += other[1]
    prem += model.axiom_instances([c for _, c in claims] + prem)
    subject = f"store to {st.tensor.name} at {st.op.loc}"

    def decode(zm, violated):
        wit = _elem_wit(model, zm, st, idx, dest)
        got = {}
        for fname in dict.fromkeys(tuple(st.tensor.field_names) + tuple(field_of.values())):
            val = rec.get(fname)
            if val is not None:
                got[fname] = value(zm, val.term)
        wit["value_tags"] = got
        src = rec.source or st.tile.what
        who = f"thread {wit['thread']} {wit['register']}, " if "register" in wit else ""
        mixed = [m for f in st.tensor.field_names if rec.get(f) is not None
                 for m in rec.get(f).mixed if not rec.get(f).is_point]
        msg = (f"{who}tile element {wit['tile_element']} is stored to {wit['output']} but its "
               f"tags say {got} ({src})")
        if mixed:
            msg += f"; it mixes values from {mixed[0]}"
        shifted = [field_of[c] for c in violated if c.startswith("the window of")]
        if shifted and other is not None:
            ren = other[0]
            iv2 = tuple(value(zm, z3.substitute(i, *ren)) for i in idx)
            out2 = W.fmt_elem(st.tensor.name, [value(zm, z3.substitute(x, *ren)) for x in dest])
            wit["other_tile_element"] = iv2
            msg += (f"; its window along {shifted[0]} sits at another offset from the "
                    f"destination than the window of tile element {iv2} stored to {out2} "
                    f"(the elements are stored permuted inside their windows)")
        # where each wrong field was selected: the views its lineage was read through (the
        # line of `sA[st].rows_of(...)` when the operand's rows are the wrong ones)
        for fname in dict.fromkeys(field_of[c] for c in violated if c in field_of):
            via = rec.get(fname).via
            if via:
                wit[f"{fname}_view_at"] = "; ".join(via)
                msg += f"; its {fname} was read through {wit[f'{fname}_view_at']}"
        return W.placed(msg, wit), wit
    return [Obligation("store.coords", st.op.loc, subject, prem, claims, decode,
                       minimize=list(idx) + [s.var for s in st.site.scopes if s.var is not None])]


def _other_instance(model: Model, st: StoreSite, idx, prem):
    """A second instance of the store `st` for a claim comparing two (_coords' window
    offset): the renaming of the tile element, the enclosing scopes' variables and the CTA
    index to fresh copies, and the premises `prem` (the store's, so far) over the copies."""
    own = list(idx) + st.site.scope_vars() + [v for v, _, _ in model.grid_vars]
    ren = [(v, fresh_int(f"{v}@other")) for v in dict.fromkeys(own)]
    return ren, [z3.substitute(p, *ren) for p in prem]


def _window(val) -> bool:
    """A field that a reduction made a set along its axis (tiles.py's reduce marks it mixed
    with "<fn> over axis <a> at <loc>"): the coordinates of a window, not one element's."""
    return not val.is_point and any(" over axis " in m for m in val.mixed)


def _integer_links(model: Model, st: StoreSite, rec) -> list[tuple[int, str]]:
    """(destination dim, value field) pairs for the destination's integer dims (C["M", 256]):
    an integer dim has no name to meet its source by (its field is `dim{i}`, the position),
    so it is met by extent. The value's `dim{i}` field is linked to destination dim d of
    extent E > 1 when it is the value's only point `dim{i}` field every tensor with an integer
    dim at position i gives extent E (B[256, K]'s dim0 in C[M, 256]'s dim1; V[.., 128]'s
    dim2 in O[.., 128]'s): a swapped column tile or head-dim half is a permutation that
    store.once and store.coverage accept. Two candidates of one extent (a transpose's rows
    and columns, or two destination dims: a pooled Y[NC, 4, 4, 1]) link nothing: which goes
    where is the kernel's choice; nor does a field
    whose point met another element of its dim pointwise (a pooling window's max keeps one
    contributor's coordinate: tagdomain.POINTWISE)."""
    out = []
    dims = st.tensor.dims
    for d, fname in enumerate(st.tensor.field_names):
        ext = dims[d]
        if not (isinstance(ext, int) and ext > 1 and fname == f"dim{d}"):
            continue
        if sum(1 for x in dims if isinstance(x, int) and x == ext) > 1:
            continue          # two destination dims of one extent: which is which is unknown
        cands = [f for f, v in rec.fields.items()
                 if is_integer_dim(f) and v.is_point and
                 not any(x.startswith(POINTWISE) for x in v.mixed) and
                 _integer_extents(model, integer_dim_position(f),
                                  bool(free_consts(v.term))) == {ext}]
        if len(cands) == 1:
            out.append((d, cands[0]))
    return out


def _integer_extents(model: Model, i: int, moves: bool = False) -> set:
    """The extents of the integer dims at position i over the kernel's tensors (a `dim{i}`
    field may come from any of them). A field that `moves` (its point depends on a variable)
    is not a size-1 dim's position, which is the constant 0: extent 1 is left out for it
    (x[4, 64, 3000] * w[1, 64, 1]'s dim0 is x's batch: transfer/tiles._broadcast_kept)."""
    return {t.dims[i] for t in model.tensors.values()
            if len(t.dims) > i and isinstance(t.dims[i], int) and
            not (moves and t.dims[i] == 1)}


def _instance_vars(model: Model, st: StoreSite) -> list:
    vs = list(st.site.scope_vars())
    vs += [v for v, _, _ in model.grid_vars]  # program ids (cluster index and rank)
    return vs


def _translate_of(a: StoreSite, b: StoreSite) -> bool:
    """b stores the same tile as a, in the same context, at offsets shifted by constants."""
    if a.shape != b.shape or a.site.scopes != b.site.scopes or \
            len(a.offsets) != len(b.offsets) or a.transposed != b.transposed:
        return False
    for x, y in zip(a.offsets, b.offsets):
        d = z3.simplify(_num(y) - _num(x))
        if not z3.is_int_value(d):
            return False
    return True


def _key(st: StoreSite) -> tuple[int, tuple[int, ...]]:
    """A store site's key in the maps of store.once (`extra`, `tiled`): its program point
    (Site.seq) and the box it stores. A site with pushed-out summands dropped (`_unpushed`)
    keeps its store's point, which no other site of the map has; a joined box (`_joined`)
    keeps its first block's and has more elements than any site or box it holds, so the
    boxes around one block, which grow round by round, all differ in shape."""
    return st.site.seq, tuple(st.shape)


def _unpushed(model: Model, st: StoreSite, extra: dict) -> StoreSite:
    """st for store.once: the summands of its offsets that are 0 on every in-bounds element
    (a row block's rows past its image pushed past the tensor: once_split.pushed_out) dropped,
    each as the premise `summand == 0` of the new site (`extra`, by its `_key`); st itself
    when none is."""
    return drive(_unpushed_steps(model, st, extra))


def _unpushed_steps(model: Model, st: StoreSite, extra: dict):
    """`_unpushed` as a step generator (once_split.pushed_out_steps: it yields the pushed-out
    steps' queries, is sent their answers, and returns the site)."""
    inst = {str(v) for v in _instance_vars(model, st)}
    if not any(split_launch_factor(t, inst) for o in st.offsets for t in summands(_num(o))):
        return st
    # the tile origin's digits first (`np0 % P` of np0 = image * P + p0 is p0), on every
    # instance; then the summands that are 0 on every in-bounds element
    site_prem = list(model.premises) + st.site.constraints()
    norm = [normalized(_num(o), inst, site_prem) for o in st.offsets]
    st = dataclasses.replace(st, offsets=tuple(norm)) \
        if any(not a.eq(z3.simplify(_num(b))) for a, b in zip(norm, st.offsets)) else st
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    dest = _dest(st, idx)
    inb = _inb(model, st, dest)
    prem = site_prem + [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)]
    lb = LowerBounds(prem)
    offsets, zero = [], []
    for k, off in enumerate(st.offsets):
        # the dim's own bounds only: the column blocks of one row pose one query (cached)
        o, z = yield from pushed_out_steps(_num(off), inst, prem + [inb[k]], lb)
        offsets.append(o if z else off)
        zero += z
    if not zero:
        return st
    out = dataclasses.replace(st, offsets=tuple(offsets))
    extra[_key(out)] = lambda idx, zero=tuple(zero): list(zero)
    return out


def _join_tiled(sites: list[StoreSite], extra: dict | None = None) \
        -> tuple[list[StoreSite], dict]:
    """Sites for store.once: each class of translates whose offsets step by the tile's own
    extent along one destination dim (a Python-unrolled loop storing 16-column blocks of one
    128 x 176 tile), or by 1 along the dim just before the tile's (one row segment per output
    row of a tile), becomes one site storing the joined box, so 11 blocks pose one query
    instead of 66 pairwise ones; joined boxes that are translates again join again (row
    segments of column blocks). Exact: block j's element (r, c) is the joined box's element
    (r, j * w + c) (or (j, r, c)), a bijection between (block, element) and the box, so the
    joined store is injective iff every block is and no two blocks (of any instances) meet.
    Returns the sites (joined ones in place of their blocks) and, per joined site, its
    blocks in order along the dim with the (axis, width) they step by, by the box's `_key`.
    `extra`: in-bounds premises per site key (`_unpushed`); a joined box's are its blocks',
    each under its block."""
    tiled: dict = {}   # joined site's key -> its blocks
    current = list(sites)
    changed = True
    while changed:
        changed = False
        out: list[StoreSite] = []
        left = list(current)
        while left:
            a = left.pop(0)
            cls = [a] + [b for b in left if _translate_of(a, b)]
            joined = _join_class(cls) if len(cls) > 1 else None
            if joined is None:
                out.append(a)
                continue
            site, (blocks, axis, w) = joined
            left = [b for b in left if not any(b is c for c in blocks)]
            tiled[_key(site)] = (blocks, axis, w)
            if extra is not None and any(_key(blk) in extra for blk in blocks):
                extra[_key(site)] = _joined_extra(site, blocks, axis, w, extra)
            out.append(site)
            changed = True
        current = out
    return current, tiled


def _join_class(cls: list[StoreSite]):
    """`_joined` of the class, or of its largest subclass that moves along one dim only
    (trailing dims first: column blocks join before row segments)."""
    joined = _joined(cls, leading=True)
    if joined is not None:
        return joined
    a = cls[0]
    deltas = [[z3.simplify(_num(y) - _num(x)).as_long() for x, y in zip(a.offsets, b.offsets)]
              for b in cls]
    for d in sorted({d for dl in deltas for d, v in enumerate(dl) if v}, reverse=True):
        sub = [b for b, dl in zip(cls, deltas) if all(v == 0 for k, v in enumerate(dl) if k != d)]
        joined = _joined(sub, leading=True) if len(sub) > 1 else None
        if joined is not None:
            return joined
    return None


def _joined_extra(site: StoreSite, blocks, axis: int, w: int, extra: dict):
    """The in-bounds premises of a joined box: block j's, on the box's elements of block j."""
    new_axis = len(blocks[0].shape) < len(site.shape)

    def premises(idx):
        out = []
        for j, blk in enumerate(blocks):
            if _key(blk) not in extra:
                continue
            if new_axis:
                sel, local = idx[axis] == j, list(idx[:axis]) + list(idx[axis + 1:])
            else:
                sel = z3.And(idx[axis] >= j * w, idx[axis] < (j + 1) * w)
                local = [i - j * w if k == axis else i for k, i in enumerate(idx)]
            out += [z3.Implies(sel, p) for p in extra[_key(blk)](local)]
        return out
    return premises


def _joined(cls: list[StoreSite], leading: bool = False):
    """(joined site, (blocks, axis, width)) when the translates in `cls` tile one box along
    one dim with no gap or overlap, else None. With `leading`, also translates by 0, 1, ..
    along the dim just before the tile's dims: the box gets a new axis (width 1), first, or
    last for a transposed store."""
    a = cls[0]
    deltas = [[z3.simplify(_num(y) - _num(x)).as_long() for x, y in zip(a.offsets, b.offsets)]
              for b in cls]
    moving = {d for dl in deltas for d, v in enumerate(dl) if v}
    lead = len(a.offsets) - len(a.shape)
    if len(moving) != 1:
        return None
    (d,) = moving
    order = sorted(range(len(cls)), key=lambda i: deltas[i][d])
    base = deltas[order[0]][d]
    steps = [deltas[i][d] - base for i in order]
    first = cls[order[0]]
    if d >= lead:
        axis = d - lead
        axis = len(a.shape) - 1 - axis if a.transposed else axis
        w = a.shape[axis]
        if steps != [j * w for j in range(len(cls))]:
            return None
        shape = tuple(n * len(cls) if k == axis else n for k, n in enumerate(first.shape))
    elif leading and d == lead - 1 and steps == list(range(len(cls))):
        # the new axis lands on dim d: first in the tile's axes, or last when the store is
        # transposed (`_placed` reverses every axis, the new one too)
        axis, w = (len(first.shape) if a.transposed else 0), 1
        shape = tuple(first.shape) + (len(cls),) if a.transposed else \
            (len(cls),) + tuple(first.shape)
    else:
        return None
    # the joined box has no register layout of its own (a witness's thread and register are
    # read off the block's tile, `_joined_once`)
    box = dataclasses.replace(first, shape=shape, tile=dataclasses.replace(first.tile, layout=""))
    return box, ([cls[i] for i in order], axis, w)


def _joined_once(model: Model, site: StoreSite, tiled: dict,
                 extra: dict | None = None) -> Obligation:
    """store.once of a joined box (`_join_tiled`); a witness names the block and its own
    tile element."""
    blocks, axis, w = tiled[_key(site)]
    ob = _once(model, site, site, extra=extra,
               what=(f"stores to {site.tensor.name} at {blocks[0].op.loc} ({len(blocks)} "
                     f"blocks of {w} along tile axis {axis}, joined)"))
    decode = ob.decode

    def local(wit: dict) -> None:
        elem, at = list(wit.get("tile_element", ())), site
        while _key(at) in tiled:
            bl, ax, wd = tiled[_key(at)]
            if len(elem) <= ax:
                return
            blk = bl[elem[ax] // wd]
            if len(blk.shape) < len(at.shape):
                del elem[ax]
            else:
                elem[ax] %= wd
            at = blk
        wit["tile_element"] = tuple(elem)
        wit["store"] = str(at.op.loc)
        if at.tile.layout == "wgmma_acc" and len(elem) == 2:
            wit.update(W.acc_thread(elem[0], elem[1]))

    def block_decode(zm, violated):
        msg, wit = decode(zm, violated)
        for part in (wit.get("first"), wit.get("second")):
            if isinstance(part, dict):
                local(part)
        first, second = wit.get("first", {}), wit.get("second", {})
        return (f"{wit.get('output')} is stored twice: by CTA {first.get('cta')} warpgroup "
                f"{first.get('warpgroup', 0)} element {first.get('tile_element')} of the store "
                f"at {first.get('store')} and by CTA {second.get('cta')} warpgroup "
                f"{second.get('warpgroup', 0)} element {second.get('tile_element')} of the "
                f"store at {second.get('store')}"), wit
    return dataclasses.replace(ob, decode=block_decode)


def _once(model: Model, a: StoreSite, b: StoreSite, bounded: bool = True,
          extra: dict | None = None, what: str | None = None) -> Obligation:
    same_site = a is b
    idx1 = [fresh_int(f"e{d}") for d in range(len(a.shape))]
    idx2 = [fresh_int(f"e{d}'") for d in range(len(b.shape))]
    vb = _instance_vars(model, b)
    ren = [(v, fresh_int(f"{v}@2")) for v in vb]

    def sub(t):
        t = t if isinstance(t, z3.BoolRef) else _num(t)
        return z3.substitute(t, *ren) if ren else t
    extra = extra if extra is not None else {}
    d1 = _dest(a, idx1)
    d2 = [sub(x) for x in _dest(b, idx2)]
    inb = (_inb(model, a, d1) + [sub(c) for c in _inb(model, b, _dest(b, idx2))]) \
        if bounded else []
    # in-bounds premises of sites whose pushed-out summands were dropped (`_unpushed`)
    ka, kb = _key(a), _key(b)
    pushed = (list(extra[ka](idx1)) if ka in extra else []) + \
        ([sub(p) for p in extra[kb](idx2)] if kb in extra else [])
    # the `ag.when`s around the two stores are part of the claim, not premises (as
    # smem.race's): two stores under exclusive launch-wide conditions (`K > 3`, `K <= 3`)
    # then have satisfiable premises and the claim proven, not an empty model
    prem = list(model.premises) + [sub(p) for p in model.premises] + guards.unguarded(a) + \
        [sub(c) for c in guards.unguarded(b)] + inb + pushed + \
        [z3.And(i >= 0, i < n) for i, n in zip(idx1, a.shape)] + \
        [z3.And(i >= 0, i < n) for i, n in zip(idx2, b.shape)]
    both_run = z3.And([c for _, c in guards.conditions(a)] +
                      [sub(c) for _, c in guards.conditions(b)])
    same = z3.And([x == y for x, y in zip(idx1, idx2)] + [v == w for v, w in ren]) \
        if same_site else z3.BoolVal(False)
    differ = [x != y for x, y in zip(d1, d2)]
    notes = ["rows pushed past the tensor dropped: 0 in bounds, proven"] if pushed else []
    if bounded:
        # a coordinate F * A + C with 0 <= C < F in bounds (proven) differs iff A or C does
        for k, (r1, r2) in enumerate(_radices(model, a, b, idx1, idx2, extra)):
            if r1 is None or r2 is None or not r1.f.eq(r2.f):
                continue
            a2, c2 = sub(r2.a), sub(r2.c)
            differ[k] = z3.Or(r1.a != a2, r1.c != c2)
            prem += [r1.c >= 0, r1.c < r1.f, c2 >= 0, c2 < r1.f]
            notes.append(f"dim {k} = {r1.f} * q + r with r in [0, {r1.f}), proven")
        if notes:
            prem += sign_facts(d1 + d2, LowerBounds(prem))
    claim = z3.Or(z3.Not(both_run), same, z3.Or(differ))
    subject = (what or f"stores to {a.tensor.name} at {a.op.loc}" +
               ("" if same_site else f" and {b.op.loc}")) + \
        (f" ({'; '.join(notes)})" if notes else "")

    def decode(zm, violated):
        w1 = _elem_wit(model, zm, a, idx1, d1)
        second = {"tile_element": tuple(value(zm, i) for i in idx2)}
        if model.grid is not None:
            pids = tuple(value(zm, sub(model.sym[v.id])) for v in model.grid.ids)
            second["cta"] = pids if len(pids) > 1 else pids[0]
        if b.site.role is not None:
            second["warpgroup"] = value(zm, sub(model.sym[b.site.role.index.id]))
        its = {f"loop@{s.op.loc}": value(zm, sub(s.var)) for s in b.site.loops()}
        if its:
            second["iteration"] = its
        # who stores each copy, from the sites themselves (not names.who's line lookup): the
        # role, and the thread holding the element (an accumulator's holder, else thread 0 of
        # the threads W.context says run the store)
        if b.site.role is not None:
            second["role"] = b.site.role.name
        held = W.context(model, zm, b.site)
        second["thread"], second["threads"] = 0, held["threads"]
        if b.tile.layout == "wgmma_acc" and len(second["tile_element"]) == 2:
            second.update(W.acc_thread(*second["tile_element"][:2]))
        wit = {"output": w1["output"], "first": w1, "second": second,
               "thread": w1["thread"], "threads": w1["threads"]}
        wit.update({k: w1[k] for k in ("role", "warpgroup") if k in w1})
        def who(w: dict) -> str:
            # the instance: CTA, warpgroup (in a kernel with roles) and loop iteration, so two
            # copies that differ only in the iteration read apart
            wg = f" warpgroup {w['warpgroup']}" if "warpgroup" in w else (
                " warpgroup 0" if a.site.role is not None else "")
            it = "".join(f", iteration {v} of {k}" for k, v in w.get("iteration", {}).items())
            return f"CTA {w.get('cta')}{wg}{it} element {w['tile_element']} ({W.said(w)})"
        return (f"{w1['output']} is stored twice: by {who(w1)} and by {who(second)}"), wit
    # raster orders (grouped tiles: a modulus by min(m_tiles - first, GROUP_M)) make this the
    # one non-linear query of a GEMM: it gets a larger budget, and stays "unknown" past it
    nonlinear = any(s.kind == "loop" and not isinstance(model.scalar(s.op.step), int)
                    for s in a.site.scopes)
    name = "distinct instances write distinct elements"
    return Obligation("store.once", a.op.loc, subject, prem, [(name, claim)],
                      decode, minimize=list(model.params.values()),
                      timeout_ms=4 * solver_timeout() if nonlinear else None,
                      tier="NIA" if nonlinear else "LIA")


def _radices(model: Model, a: StoreSite, b: StoreSite, idx1, idx2, extra: dict):
    """Per destination dim, the symbolic radix split (once_split.radix) of site a's and of
    site b's coordinate (b's over its own, not yet renamed, variables), each proven for its
    site's in-bounds elements; (None, None) where a dim has none."""
    def split(st: StoreSite, idx):
        inst = {str(v) for v in _instance_vars(model, st)} | {str(i) for i in idx}
        dest = [_num(x) for x in _dest(st, idx)]
        cands = [k for k, x in enumerate(dest)
                 if any(split_launch_factor(t, inst) for t in summands(x))]
        if not cands:
            return [None] * len(dest)
        prem = list(model.premises) + st.site.constraints() + _inb(model, st, dest) + \
            (list(extra[_key(st)](idx)) if _key(st) in extra else []) + \
            [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)]
        lb = LowerBounds(prem)
        prem += sign_facts(dest, lb)
        return [radix(x, inst, prem, lb) if k in cands else None for k, x in enumerate(dest)]
    r1 = split(a, idx1)
    r2 = r1 if a is b else split(b, idx2)
    if a is b:
        back = list(zip(idx1, idx2))
        r2 = [None if r is None else Radix(r.f, z3.substitute(r.a, *back),
                                           z3.substitute(r.c, *back)) for r in r1]
    return list(zip(r1, r2))


def _alternatives(sites: list[StoreSite]) -> bool:
    """The sites store one tile shape at one destination in one context but for their
    `ag.when`s (an epilogue's full-tile and tail-tile stores): the same offsets (equal terms),
    the same enclosing loops, roles and pipeline steps."""
    a = sites[0]

    def frame(st):
        return [sc for sc in st.site.scopes if sc.kind != "if"]
    return len(sites) > 1 and all(
        b.shape == a.shape and b.transposed == a.transposed and
        len(b.offsets) == len(a.offsets) and frame(b) == frame(a) and
        all(z3.is_true(z3.simplify(_num(x) == _num(y))) for x, y in zip(a.offsets, b.offsets))
        for b in sites[1:])


def _coverage(model: Model, st: StoreSite, alternatives: list[StoreSite] | None = None):
    """store.coverage of one store site; `alternatives` (sites storing st's tile at st's
    place under other conditions, `_alternatives`): the count is st's, and the conditions are
    claimed together (store_guards.alternatives), or None where they cannot be."""
    obs, finds = [], []
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    dest = _dest(st, idx)
    inst = _instance_vars(model, st)
    ranges = _var_ranges(model, st)
    lead = len(dest) - len(idx)
    # per destination dim: the tile axis that lands on it, and that axis's extent
    axis_idx, axis_len = _placed(st, idx), _placed(st, st.shape)
    for d, dd in enumerate(dest):
        # a leading dim no tile axis lands on (a batch, an image's row in a per-row walk) is
        # claimed from the instance variables alone (injective, inside the positions they
        # visit): a batch index stored one off (`b + 1`) is injective (store.once holds) and
        # leaves batch 0 unwritten
        batch = d < lead
        e = d - lead
        names = free_consts(dd)
        tile_axis = None if batch else axis_idx[e]
        dvars = [v for v in inst if str(v) in names] + ([] if batch else [tile_axis])
        subject = f"dim {d} of {st.tensor.name} stored at {st.op.loc}"
        size = z3.IntVal(1)
        ok = True
        for v in dvars:
            r = ranges.get(str(v)) if v is not tile_axis else \
                (0, axis_len[e], z3.IntVal(axis_len[e]))
            if r is None or batch and not z3.is_true(z3.simplify(_num(r[0]) == 0)):
                ok = False     # (a leading dim: only variables counted from 0)
                break
            lo, hi, count = r
            # a range whose bounds mention another variable of this dim is not a product
            if any(str(o) in free_consts(_num(lo)) | free_consts(_num(hi)) for o in dvars):
                ok = False
                break
            size = size * count
        shared = any(str(v) in free_consts(x) for v in dvars if v is not tile_axis
                     for x in dest[:d] + dest[d + 1:])
        if batch and ok and shared and alternatives is None:
            # walked together with another dim (the depthwise conv's image and row decoded
            # from one program id, pb // H and pb % H): the dims are covered together, tile
            # by tile, as a raster's are (`_tile_coverage`: x // E, x % E merged into one dim;
            # a row shifted by one lands a unit outside the output with no spare unit)
            return _tile_coverage(model, st)
        if batch and (not ok or shared or not dvars):
            # a constant index, or shared under alternatives (claimed together by
            # store_guards, not tile by tile): as before, left to store.once
            continue
        if not ok or shared:
            # a raster order or a persistent walk: the dims are covered together, tile by tile
            return _tile_coverage(model, st) if alternatives is None else None
        ext = _num(st.tensor.extent(model, d))
        ren = [(v, fresh_int(f"{v}@2")) for v in dvars]
        dd2 = z3.substitute(dd, *ren)
        prem = list(model.premises) + [z3.substitute(c, *ren) for c in model.premises] + \
            guards.unguarded(st) + \
            [z3.substitute(c, *ren) for c in guards.unguarded(st)] + \
            [z3.And(i >= 0, i < n) for i, n in zip(idx, st.shape)] + \
            [z3.And(b >= 0, b < axis_len[e]) for a, b in ren if a is tile_axis]
        same = z3.And([a == b for a, b in ren])
        single_tile = len(dvars) == 1 and not batch
        claims = [("injective", z3.Or(same, dd != dd2)),
                  ("image in [0, |domain|)", z3.And(dd >= 0, dd < size))]
        if not batch:
            # a leading dim's extent is often a launch relation the kernel does not state
            # (BH = B * HKV of a decode split's partials): its positions are claimed to be
            # the ones its variables visit, shifted nowhere, not to be as many as the extent
            claims.append(("|domain| >= extent", size >= ext))

        def decode(zm, violated, d=d, size=size, ext=ext, dd=dd):
            wit = {"shapes": W.shapes(model, zm), "dim": d, "domain": value(zm, size),
                   "extent": value(zm, ext)}
            if "|domain| >= extent" in violated:
                missing = value(zm, size)
                return (f"{value(zm, size)} positions are stored along dim {d} but "
                        f"{st.tensor.name} has {value(zm, ext)}: {st.tensor.name} index "
                        f"{missing} of dim {d} is never written"), wit
            return (f"dim {d}: the destination {value(zm, dd)} is outside the "
                    f"{value(zm, size)} positions the grid visits, or two instances coincide "
                    f"({', '.join(violated)})"), wit
        if batch:
            # (the rule's default fix, a tile count and step, says nothing of a dim no tile
            # axis lands on: what is wrong there is a shift or a scale of its index)
            fix = (f"index dim {d} of {st.tensor.name} by the program ids, warpgroup and "
                   f"loop indices that walk it as they count, from 0 and one apart (no shift "
                   f"such as + 1, no scale), so that it stores positions 0 .. (the product of "
                   f"their counts) - 1; or, where the kernel writes part of "
                   f"{st.tensor.name} on purpose (rows at an offset), declare it: "
                   f"@ag.kernel(partial_outputs=({st.tensor.name!r},))")
        elif single_tile:
            fix = (f"state the launch precondition {st.tensor.dims[d]} <= {axis_len[e]} with "
                   f"ag.tag_assume(lambda: ag.sym({st.tensor.dims[d]}) <= {axis_len[e]}) — or "
                   f"tile dim {d} over the grid")
        else:
            fix = ""
        obs.append(Obligation("store.coverage", st.op.loc, subject, prem, claims,
                              _by_store(model, st, decode),
                              minimize=list(model.params.values()), fix=fix,
                              warn_claims=("|domain| >= extent",) if single_tile else ()))
    # the count above is over every instance, the `ag.when`s around the store left out of
    # its premises (an injective map on the instances that pass a condition covers nothing):
    # each condition must let through the instances the count relies on (store_guards), but
    # a condition `wg == e` on a warpgroup the destination does not name (a ping-pong turn,
    # or one warpgroup storing what the role computed) lets exactly one warpgroup store each
    # element when e lies in the warpgroups' range: every warpgroup stores the same element,
    # so the count holds with that one (_turn_obligation, as _tile_coverage proves it)
    if alternatives is None:
        conds, turn_obs = _turns(model, st, dest)
        obs += turn_obs
        got = guards.obligations(model, st, conds)
    else:
        # the same turns around every alternative (one warpgroup stores, a tail or not):
        # peeled once, the alternatives' other conditions claimed together
        peeled = [_turns(model, x, dest) for x in alternatives]
        turns = [[c.sexpr() for _, c in guards.conditions(x) if all(c is not k for _, k in kept)]
                 for x, (kept, _) in zip(alternatives, peeled)]
        same_turns = all(t == turns[0] for t in turns[1:])
        if same_turns:
            obs += peeled[0][1]
        got = guards.alternatives(model, alternatives,
                                  [kept for kept, _ in peeled] if same_turns else None)
    if got is None:
        return None
    o, f = got
    return obs + o, finds + f, None


def _var_ranges(model: Model, st: StoreSite) -> dict:
    """name -> (lo, hi, count) for program ids, warpgroup indices and loop indices."""
    out = {}
    for v, lo, hi in model.grid_vars:
        out[str(v)] = (lo, _num(hi), _num(hi) - lo)
    for s in st.site.scopes:
        if s.kind == "role":
            out[str(s.var)] = (0, s.op.warpgroups, z3.IntVal(s.op.warpgroups))
        elif s.kind == "loop":
            lo, hi = model.scalar(s.op.start), model.scalar(s.op.stop)
            out[str(s.var)] = (lo, hi, model.trip_term(s.op))
    return out


# ----------------------------------------------------------------------------- tile coverage


def _tile_coverage(model: Model, st: StoreSite, sites: list | None = None,
                   pushed: dict | None = None):
    """Coverage of a store whose dims share variables: a grouped raster (m and n tile from one
    unit index), a persistent walk (units strided by the grid size), a batch decoded from the
    unit. The destination splits into a tile origin, a function of the *unit* variables
    (program ids and loops of symbolic range), plus an offset inside the tile, a function of
    the *within* variables (tile element, warpgroup, cluster rank: constant ranges). Then
      * store.coverage (offsets) — per dim, the offset maps its within variables one-to-one
        onto [0, T_d) (T_d the product of their counts: the tile's extent along d);
      * store.coverage (walk) — a loop `for u in range(start, T, P)` whose start is a
        program id walks [0, T) exactly once over the grid when the start maps the grid's
        program ids one-to-one onto [0, P): u replaces (program id, iteration);
      * store.coverage (tiles) — the tile origins are multiples of T_d, and the map from the
        unit variables to the tile index q_d = origin_d / T_d is injective into the box
        [0, cdiv(extent_d, T_d)) with at least as many units as the box has tiles: a
        bijection (counting), so every tile of the output, hence every element, is stored;
      * store.coverage (turn) — a condition `wg == e` around the store on a warpgroup the
        destination does not name (ping-pong's turn) lets exactly one warpgroup store when
        e lies in the warpgroups' range; any other condition is store_guards' (it holds at
        every instance storing an in-bounds element, or is a counter's last ticket).
    `sites`: stores of one tile in blocks, each `st` shifted by constant offsets (the TMA-store
    epilogue's column blocks); the block index is a variable inside the tile. `pushed`: the
    sites' pushed-out summands' premises by `_key` (`_unpushed`: `sites` are the sites without
    their pushes), each site's under its block index, `flag == 0` exactly when block k is
    site k (`_pushed_split` then proves the flags against the remainder, block index and all).
    Anything outside that shape is reported unknown, never assumed."""
    idx = [fresh_int(f"e{d}") for d in range(len(st.shape))]
    # a single site whose rows past an image are pushed out of the tensor (per-image row
    # blocks): its coordinates without the push, and the push's flags (`_pushed_split`)
    unpushed, zero = st, []
    if not sites or len(sites) == 1:
        extra: dict = {}
        unpushed = _unpushed(model, st, extra)
        zero = extra[_key(unpushed)](idx) if _key(unpushed) in extra else []
        if not zero:
            unpushed = st
    dest = [_num(x) for x in _dest(unpushed, idx)]
    block_vars: list = []
    block = None
    grid_blocks: dict[str, int] = {}   # a grid of translates: per-dim block index -> count
    if sites and len(sites) > 1:
        shifts = [[z3.simplify(_num(y) - _num(x)) for x, y in zip(st.offsets, b.offsets)]
                  for b in sites]
        grid = _block_grid(shifts)
        if grid is None:
            block = fresh_int("store_site")
            for d in range(len(dest)):
                delta = z3.IntVal(0)
                for k in range(len(sites) - 1, 0, -1):
                    delta = z3.If(block == k, shifts[k][d], delta)
                dest[d] = dest[d] + z3.simplify(delta)
        else:
            # translates along several dims that form a full grid (a TMA-store epilogue's
            # column blocks x its row segments): one block index per moving dim, each moving
            # only its dim, so the offset of each dim stays a function of its own variables
            for d, vals in grid:
                b = fresh_int(f"store_site{d}")
                delta = z3.IntVal(vals[0])
                for k in range(len(vals) - 1, 0, -1):
                    delta = z3.If(b == k, z3.IntVal(vals[k]), delta)
                dest[d] = dest[d] + delta
                grid_blocks[str(b)] = len(vals)
                block_vars.append(b)
    block_prem: list = []   # the block indices' ranges (premises of the push's claim)
    if pushed and sites and len(sites) > 1:
        zero = _site_flags(sites, pushed, idx, block, block_vars, grid)
        block_prem = [z3.And(b >= 0, b < (len(sites) if b is block else
                                          grid_blocks[str(b)]))
                      for b in ([block] if block is not None else []) + block_vars]
    ranges = _var_ranges(model, st)
    inst = _instance_vars(model, st)
    exts = [_num(st.tensor.extent(model, d)) for d in range(len(dest))]
    dest, exts, merged = _merge_radix_dims(dest, exts)
    # a walk spelled by its trip count (`for i in range(cdiv(T - pid, P))`, unit pid + i * P):
    # the destination reads the loop's index as the unit it walks
    dest, counted = _counted_walks(model, st, dest)
    # a walk whose units are drawn from a work counter (the dynamic scheduler): the unit read
    # as the walk's index, the same set over the walk's instances
    dest = _drawn_walks(model, st, dest)
    names = set().union(*(free_consts(x) for x in dest))
    subject = f"stores to {st.tensor.name} at {st.op.loc}" + \
        (f" (dims {', '.join(f'{d}-{d + 1}' for d in merged)} seen as one: x // E, x % E)"
         if merged else "")

    def unknown(why):
        return [], [Finding("store.coverage", st.op.loc, subject, "unknown", why)], None
    within, units = list(idx) + ([block] if block is not None else []) + block_vars, []
    for v in inst:
        r = ranges.get(str(v))
        if r is None:
            return unknown(f"{v} has no known range")
        lo, hi, _ = r
        (within if _constant(lo) and _constant(hi) else units).append(v)
    all_units = list(units)
    steps: dict[str, int] = {}   # a loop of constant range inside the tile: its step
    for sc in st.site.scopes:
        if sc.kind == "loop" and any(sc.var is w for w in within):
            step = z3.simplify(_num(model.scalar(sc.op.step)))
            if not z3.is_int_value(step) or step.as_long() < 1:
                return unknown(f"the loop at {sc.op.loc} steps by {step}")
            steps[str(sc.var)] = step.as_long()
    pinned_vars: dict[str, z3.ExprRef] = {}   # w -> e of a condition `w == e`
    walks: list[tuple[Obligation, list]] = []   # walk obligations with their program ids
    counts = {str(v): ranges[str(v)][2] for v in inst}
    counts.update({str(i): z3.IntVal(n) for i, n in zip(_placed(st, idx), _placed(st, st.shape))})
    los = {str(v): _num(ranges[str(v)][0]) for v in inst}
    los.update({str(i): z3.IntVal(0) for i in idx})
    if block is not None:
        counts[str(block)] = z3.IntVal(len(sites))
        los[str(block)] = z3.IntVal(0)
    for b in block_vars:
        counts[str(b)] = z3.IntVal(grid_blocks[str(b)])
        los[str(b)] = z3.IntVal(0)
    obs: list[Obligation] = []
    labels: list[str] = []
    if zero:
        dest, exts, labels, split_obs = _pushed_split(model, st, dest, exts, zero, inst,
                                                      block_prem)
        if not split_obs:
            return unknown("the rows pushed out of the tensor (per-image row blocks) are not "
                           "a remainder of a runtime stride")
        obs += split_obs
    # dims whose tile indices are x // F and x % F (a flattened unit index m of a grid of
    # row blocks x column tiles decoded by a runtime count F): one tile index x
    dest, exts, pair_labels, radix_obs = _pair_radix_dims(model, st, dest, exts, within,
                                                          counts)
    obs += radix_obs
    labels += pair_labels
    if labels:
        names = set().union(*(free_consts(x) for x in dest))
        subject += f" ({'; '.join(labels)})"
    # a condition `wg == e` on a warpgroup the destination does not name (ping-pong: the
    # warpgroup whose turn it is stores the unit) lets exactly one of them store when e is in
    # its range: proven below; any other condition must let through every instance that
    # stores an in-bounds element, or be a counter's last ticket (store_guards: the counts
    # below are over every instance, none of them takes a condition as a premise)
    conds = [(sc, c, _pinned(c, within, names)) for sc, c in guards.conditions(st)]
    guarded = [(sc, c) for sc, c, pinned in conds if pinned is None]
    for sc, c, pinned in conds:
        if pinned is not None:
            w, e = pinned
            pinned_vars[str(w)] = e
            obs.append(_turn_obligation(model, st, sc, w, e, los[str(w)], counts[str(w)],
                                        [p for _, p, q in conds if q is not None and p is not c]))
    guard_obs, guard_finds = guards.obligations(model, st, guarded)
    obs += guard_obs
    # persistent walks: (program id, iteration) -> unit index u in [0, T)
    walked: dict[str, tuple] = {}      # loop var name -> (scope, T)
    grid_names = {str(v) for v, _, _ in model.grid_vars}
    for sc in st.site.scopes:
        if sc.kind != "loop" or not any(sc.var is u for u in units):
            continue
        start, stop, step = counted.get(str(sc.var)) or \
            (_num(model.scalar(getattr(sc.op, f))) for f in ("start", "stop", "step"))
        gs = [v for v, _, _ in model.grid_vars if str(v) in free_consts(start)]
        if not gs:
            continue
        if free_consts(stop) & grid_names or free_consts(step) & grid_names or \
                any(str(g) in names for g in gs):
            return unknown(f"the loop at {sc.op.loc} starts at a program id but its bounds or "
                           f"the destination use the program id otherwise")
        obs.append(_walk_obligation(model, sc, gs, start, step, ranges))
        walks.append((obs[-1], gs))
        walked[str(sc.var)] = (sc, stop)
        units = [u for u in units if not any(u is g for g in gs)]
    units = [u for u in units if str(u) in names or str(u) in walked]
    # split: origin (within variables at their lowest value) + offset
    at_lo = [(w, los[str(w)]) for w in within]
    offsets, tiles = [], []
    for d, dd in enumerate(dest):
        base = z3.simplify(z3.substitute(dd, *at_lo)) if at_lo else dd
        off = z3.simplify(dd - base)
        if any(str(u) in free_consts(off) for u in units):
            return unknown(f"dim {d}: the offset inside a tile depends on the unit variables")
        wv = [w for w in within if str(w) in free_consts(off)]
        size = 1
        for w in wv:
            c = z3.simplify(counts[str(w)])
            if not z3.is_int_value(c):
                return unknown(f"dim {d}: {w} has no constant range")
            size *= c.as_long()
        offsets.append((d, off, wv, size))
        tiles.append((d, base, size))
    used = [w for _, _, wv, _ in offsets for w in wv]
    if len(used) != len({str(w) for w in used}):
        return unknown("a variable inside the tile moves two dims of the destination")
    offset_obs = [_offset_obligation(model, st, d, off, wv, size, los, counts, steps)
                  for d, off, wv, size in offsets if wv]
    obs += offset_obs
    moving = [(d, base, size) for d, base, size in tiles
              if any(str(u) in free_consts(base) for u in units)]
    for d, base, size in tiles:
        if (d, base, size) not in moving:
            obs.append(_fixed_dim(model, st, d, base, size, exts[d]))
    tile = _tile_obligation(model, st, moving, units, walked, counts, exts) if moving \
        else None
    if tile is not None:
        tile, outside = tile
        obs += [tile, outside]
    once = _once_implied(model, st, within, all_units, units, used, counts, pinned_vars,
                         walks, offset_obs, tile)
    return obs, guard_finds, once


def _merge_radix_dims(dest: list, exts: list) -> tuple[list, list, list]:
    """(dest, extents, merged dims): adjacent dims d, d + 1 whose coordinates are x // E and
    x % E, E the extent of dim d + 1 (a view that splits one flattened index, e.g. the
    conv's NCHW view [.., N, OD * P, ..] of rows r = image * OD * P + p), become one dim x of
    extent ext_d * E. Exact for coverage and once: x -> (x // E, x % E) is a bijection from
    [0, ext_d * E) onto [0, ext_d) x [0, E) (E >= 1; E == 0 leaves no element to store), and
    a negative x or one past ext_d * E lands outside dim d as it does outside the merged dim.
    So a tile decomposition of x (rows of tiles: r = block * rows + wg) is proven once, not
    through the non-linear division by the runtime E."""
    dest, exts, merged, d = list(dest), list(exts), [], 0
    while d + 1 < len(dest):
        a, b = z3.simplify(dest[d]), z3.simplify(dest[d + 1])
        if z3.is_app_of(a, z3.Z3_OP_IDIV) and z3.is_app_of(b, z3.Z3_OP_MOD) and \
                a.arg(0).eq(b.arg(0)) and a.arg(1).eq(b.arg(1)) and \
                z3.simplify(a.arg(1) - exts[d + 1]).eq(z3.IntVal(0)):
            dest[d:d + 2] = [a.arg(0)]
            exts[d:d + 2] = [exts[d] * exts[d + 1]]
            merged.append(d + len(merged))
            continue
        d += 1
    return dest, exts, merged


def _radix_term(t):
    """(c, kind, x, F) when t is c * (x / F) or c * (x % F) (kind 'div' / 'mod') for a
    constant c >= 1 and a non-constant F; else None."""
    c = 1
    if z3.is_mul(t) and t.num_args() == 2 and z3.is_int_value(t.arg(0)):
        c, t = t.arg(0).as_long(), t.arg(1)
    if c < 1 or not (z3.is_app_of(t, z3.Z3_OP_IDIV) or z3.is_app_of(t, z3.Z3_OP_MOD)):
        return None
    if z3.is_int_value(z3.simplify(t.arg(1))):
        return None
    return c, "div" if z3.is_app_of(t, z3.Z3_OP_IDIV) else "mod", t.arg(0), t.arg(1)


def _split_radix(t):
    """(c, kind, x, F, rest) when t is exactly one summand c * (x / F) or c * (x % F) plus
    summands `rest` free of x / F and x % F; else None."""
    parts = summands(t)
    found = [(i, _radix_term(r)) for i, r in enumerate(parts)]
    found = [(i, m) for i, m in found if m is not None]
    if len(found) != 1:
        return None
    i, (c, kind, x, F) = found[0]
    rest = z3.IntVal(0)
    for j, r in enumerate(parts):
        if j != i:
            rest = rest + r
    return c, kind, x, F, z3.simplify(rest)


def _site_flags(sites: list, pushed: dict, idx, block, block_vars: list, grid) -> list:
    """The push premises of translates `sites` joined by their block index (`block`: site k
    when block == k; or per-dim `block_vars` over `grid`: site k at its shifts' positions):
    site k's premises under the condition that names site k, so an instance of block k is
    pushed out exactly when site k's store is. A site without premises is never pushed."""
    out = []
    for k, site in enumerate(sites):
        if _key(site) not in pushed:
            continue
        if block is not None:
            sel = block == k
        elif block_vars:
            shifts = [z3.simplify(_num(y) - _num(x)).as_long()
                      for x, y in zip(sites[0].offsets, site.offsets)]
            sel = z3.And([b == vals.index(shifts[d]) for b, (d, vals) in zip(block_vars, grid)])
        else:
            sel = z3.BoolVal(k == 0)
        out += [z3.Implies(sel, p) for p in pushed[_key(site)](idx)]
    return out


def _pushed_split(model, st, dest, exts, zero, inst, within_prem=()):
    """(dest, extents, labels, obligations) for a site whose rows past an image are pushed
    out of the tensor (`_unpushed`: `zero` are the push flags' premises `flag == 0`, `dest`
    the coordinates without the push): a dim S * A + C, S a launch parameter (the image's
    rows P), becomes the dims A (extent E / S) and, appended, C (extent S). Needs, proven
    by the obligation: S >= 1, S divides the dim's extent E (a launch precondition the kernel
    states: NP == N * P; unstated, a warning naming it, as for a dim one tile covers), and on
    every instance the push is 0 exactly when C lies in [0, S). Exact for coverage: an
    element e of [0, E) is S * (e // S) + e % S; the instance of A = e // S, C = e % S is
    not pushed, so it stores e. For store.once: an in-bounds store is not pushed, so its C
    lies in [0, S), where (A, C) -> S * A + C is one-to-one."""
    names = {str(v) for v in inst} | {str(p) for p in model.params.values()} | \
        {n for p in within_prem for n in free_consts(p)}
    if any(not free_consts(z) <= names for z in zero):
        return dest, exts, [], []
    dest, exts = list(dest), list(exts)
    params = list(model.params.values())
    for d, x in enumerate(dest):
        parts = summands(z3.simplify(x))
        found = []
        for i, t in enumerate(parts):
            ft = split_launch_factor(t, {str(v) for v in inst})
            if ft is not None and any(ft[0].eq(p) for p in params):
                found.append((i, ft))
        if len(found) != 1:
            continue
        i, (S, A) = found[0]
        C = z3.IntVal(0)
        for j, t in enumerate(parts):
            if j != i:
                C = C + t
        C = z3.simplify(C)
        E = exts[d]
        # the push's flag against C: the same non-linear terms on both sides (C's x % F),
        # each named by a fresh variable, which only generalizes the claim (linear then)
        iff = _opaque_nonlinear(z3.And(zero) == z3.And(C >= 0, C < S))
        # a violation of the generalized claim need not be one of the kernel: asked first,
        # unproven it leaves the split (and coverage) unknown, never an error (proven, the
        # obligation below is answered from the proof cache)
        linear = [("pushed out exactly when the remainder leaves [0, stride)", iff),
                  ("the stride is positive", S >= 1)]
        if solver.prove(list(model.premises) + list(within_prem), linear).status != "proven":
            continue
        # two queries: the linear one, and the stride's (the launch precondition NP == N * P
        # is a non-linear fact, model.launch_facts)
        parts = [(list(model.premises) + list(within_prem), linear, None)]
        if not any(_multiple_of(f, E, S) for f in model.launch_facts):
            parts.append((_about(list(model.premises) + list(model.launch_facts), [S, E]),
                          [("the stride divides the extent", E % S == 0)], "NIA"))

        def decode(zm, violated, S=S, E=E, d=d):
            wit = {"shapes": W.shapes(model, zm), "stride": value(zm, S),
                   "extent": value(zm, E)}
            if "the stride divides the extent" in violated:
                msg = (f"dim {d} of {st.tensor.name} has {wit['extent']} rows, not a multiple "
                       f"of the {wit['stride']} rows ({S}) its row blocks walk per image: the "
                       f"last {wit['extent'] % max(wit['stride'], 1)} rows are never stored")
            else:
                msg = (f"dim {d}: the rows pushed out of {st.tensor.name} are not exactly "
                       f"those past the image's {S} rows ({', '.join(violated)})")
            return msg, wit
        fix = (f"state the launch precondition as a product, ag.require(ag.sym("
               f"{st.tensor.name}.shape[{d}]) == images * ag.sym({S}), ...) with the image "
               f"count a parameter (a remainder by a runtime value is not modelled)")
        obs = [Obligation("store.coverage", st.op.loc,
                          f"dim {d} of {st.tensor.name} stored at {st.op.loc}: rows {S} * A + "
                          f"C, " + (f"pushed out when C leaves [0, {S})" if tier is None else
                                    f"{S} divides the extent"), prem, claims,
                          _by_store(model, st, decode), minimize=params,
                          fix=fix if tier else "", tier=tier,
                          warn_claims=("the stride divides the extent",) if tier else ())
               for prem, claims, tier in parts]
        dest[d], exts[d] = A, E / S
        dest.append(C)
        exts.append(S)
        return dest, exts, [f"dim {d} split by {S}, its pushed-out rows dropped"], obs
    return dest, exts, [], []


def _multiple_of(fact, E, S) -> bool:
    """Whether the fact is E == a product with the factor S (then S divides E, for S >= 1,
    without a non-linear query)."""
    if not z3.is_eq(fact):
        return False
    for a, b in ((fact.arg(0), fact.arg(1)), (fact.arg(1), fact.arg(0))):
        if z3.simplify(a - E).eq(z3.IntVal(0)) and z3.is_mul(b) and \
                any(f.eq(S) for f in b.children()):
            return True
    return False


def _about(premises, terms) -> list:
    """The premises about the terms' constants, and, transitively, the constants those
    premises bring in (a smaller query: fewer premises prove less, never more)."""
    names = set().union(*(free_consts(t) for t in terms))
    todo, out = list(premises), []
    changed = True
    while changed:
        changed = False
        for p in list(todo):
            fc = free_consts(p)
            if fc & names:
                out.append(p)
                todo.remove(p)
                names |= fc
                changed = True
    return out


def _opaque_nonlinear(t):
    """t with each non-linear subterm (a division or remainder by a non-numeral, a product of
    two non-numerals) replaced by one fresh variable per distinct subterm: a claim proven for
    every value of those variables holds for the values the subterms take."""
    memo: dict[int, z3.ExprRef] = {}

    def numeral(x):
        return z3.is_int_value(z3.simplify(x))

    def walk(x):
        if x.get_id() in memo:
            return memo[x.get_id()]
        out = x
        if z3.is_app(x) and x.num_args():
            k = x.decl().kind()
            if (k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and not numeral(x.arg(1))) or \
                    (k == z3.Z3_OP_MUL and sum(not numeral(a) for a in x.children()) > 1):
                out = fresh_int("opaque")
            else:
                kids = [walk(a) for a in x.children()]
                if any(not a.eq(b) for a, b in zip(kids, x.children())):
                    out = z3.substitute(x, *[(a, b) for a, b in zip(x.children(), kids)
                                            if not a.eq(b)])
        memo[x.get_id()] = out
        return out
    return walk(z3.simplify(t))


def _pair_radix_dims(model, st, dest, exts, within, counts):
    """(dest, extents, labels, obligations): two dims d1, d2 of the destination that are
    c1 * (x / F) + r1 and c2 * (x % F) + r2, F a runtime count, r1 and r2 functions of
    variables inside the tile only (none of x's, none shared), ranging one-to-one over
    [0, c1) and [0, c2) (their variables' counts multiply to c1, c2; the offset obligations
    prove the rest), become the dims x (extent cdiv(ext_d1, c1) * F), r2 (extent c2) and,
    appended, r1 (extent c1). The conv kernels' unit index m = block * q_tiles + column tile,
    decoded by the runtime q_tiles (and the cluster rank inside m): the tile decomposition
    of m is then linear in m, not a division by q_tiles.

    Exact, given the pair's obligation (F >= 1 and ext_d2 <= F * c2): an element (a, b) of
    [0, ext_d1) x [0, ext_d2) is the image of x = (a // c1) * F + b // c2 in [0, R * F)
    (R = cdiv(ext_d1, c1)), r1 = a % c1, r2 = b % c2 (x // F = a // c1 since
    0 <= b // c2 < F); and (x, r1, r2) -> (c1 * (x // F) + r1, c2 * (x % F) + r2) is
    one-to-one for r1, r2 in their ranges (Euclidean division, F >= 1), so store.once's
    implication from the coverage claims carries over. Pairs repeat until none is left (the
    x of one pair is a dim of the next: block // per_image, then block = m // q_tiles)."""
    within_names = {str(w) for w in within}
    dest, exts, labels, obs = list(dest), list(exts), [], []

    def span(r, c):
        """The product of r's variables' counts is at most c, and r's variables lie inside
        the tile (0 with c == 1: no variable). Fewer than c (a row segment of the tile never
        stored): the pair is still exact for r in [0, c); the offset obligation then finds
        the positions of [0, c) r misses (an error, no longer an unknown)."""
        vs = free_consts(r)
        if not vs <= within_names:
            return False
        n = 1
        for v in vs:
            k = z3.simplify(_num(counts.get(v, z3.IntVal(0))))
            if not z3.is_int_value(k):
                return False
            n *= k.as_long()
        return n <= c and (vs or z3.simplify(r).eq(z3.IntVal(0)))
    changed = True
    while changed:
        changed = False
        split = [_split_radix(z3.simplify(x)) for x in dest]
        for d1, a in enumerate(split):
            if a is None or a[1] != "div":
                continue
            for d2, b in enumerate(split):
                if b is None or d2 == d1 or b[1] != "mod" or not a[2].eq(b[2]) or \
                        not a[3].eq(b[3]):
                    continue
                c1, _, x, F, r1 = a
                c2, _, _, _, r2 = b
                vx, v1, v2 = free_consts(x), free_consts(r1), free_consts(r2)
                if v1 & vx or v2 & vx or v1 & v2 or not span(r1, c1) or not span(r2, c2):
                    continue
                e1, e2 = exts[d1], exts[d2]
                R = (e1 + c1 - 1) / c1 if c1 > 1 else e1
                claims = [("the count is positive", F >= 1),
                          ("the count covers the inner dim", e2 <= F * c2)]

                def decode(zm, violated, F=F, e2=e2, c2=c2, d2=d2):
                    wit = {"shapes": W.shapes(model, zm), "count": value(zm, F),
                           "extent": value(zm, e2), "tile": c2}
                    return (f"the unit index is split by a count {wit['count']} whose "
                            f"{wit['count']} tiles of {c2} do not cover dim {d2}'s "
                            f"{wit['extent']} positions ({', '.join(violated)})"), wit
                obs.append(Obligation(
                    "store.coverage", st.op.loc,
                    f"dims {d1}, {d2} of {st.tensor.name} stored at {st.op.loc}: tile indices "
                    f"x // F, x % F of one x", list(model.premises), claims,
                    _by_store(model, st, decode), minimize=list(model.params.values())))
                labels.append(f"dims {d1}, {d2}: tile indices x // {F}, x % {F} seen as one "
                              f"x")
                dest[d1], exts[d1] = x, R * F
                dest[d2], exts[d2] = r2, z3.IntVal(c2)
                if c1 > 1:
                    dest.append(r1)
                    exts.append(z3.IntVal(c1))
                changed = True
                break
            if changed:
                break
    return dest, exts, labels, obs


def _block_grid(shifts: list[list]) -> list[tuple[int, list[int]]] | None:
    """[(dim, sorted distinct shifts along it)] when the sites' constant shifts (per site, per
    dim) are the full product of their per-dim values over two or more moving dims, each site
    one point of it (so a tuple of per-dim block indices names exactly one site); else None
    (one moving dim is the single block index's case)."""
    if not all(z3.is_int_value(x) for row in shifts for x in row):
        return None
    vecs = [tuple(x.as_long() for x in row) for row in shifts]
    if len(set(vecs)) != len(vecs):
        return None
    dims = [(d, sorted({v[d] for v in vecs})) for d in range(len(vecs[0]))]
    dims = [(d, vals) for d, vals in dims if len(vals) > 1]
    n = 1
    for _, vals in dims:
        n *= len(vals)
    if len(dims) < 2 or n != len(vecs):
        return None
    return dims


def _once_implied(model, st, within, all_units, units, used, counts, pinned, walks, offset_obs,
                  tile):
    """The claims of `_tile_coverage`'s obligations that imply store.once, or None when its
    decomposition does not account for every instance of the store.

    Argument: each destination coordinate is d = origin + off, where off (a function of the
    within variables) lies in [0, T) and the origin (a function of the unit variables and
    shared terms: shapes, loaded scalars) is a multiple of T (or T = 1). Two instances storing
    the same element therefore have the same origin and offset per dim: equal offsets give
    equal within variables ("injective" of each dim's offset), equal origins equal unit
    variables ("distinct units store distinct tiles"), and a walked loop's index u equal
    program ids (u = start(pid) + k * stride with start(pid) in [0, stride) one-to-one). A
    variable pinned by a condition `w == e` is equal when the others are. So the instances
    are equal: the store is injective, on every element, not just the in-bounds ones.
    Needs: every within variable moves its dim's offset, takes one value, or is pinned (by a
    term of neither it nor another pinned variable); every unit variable is in the tile map, walked or a
    walk's program id; the unit loops' bounds and walk starts and strides mention no within
    variable, and no premise of the model relates variables of two of these groups (the
    obligations do not rename them)."""
    within_names = {str(w) for w in within}
    used_names = {str(w) for w in used}
    for w in within:
        if str(w) in used_names or z3.simplify(_num(counts[str(w)])).eq(z3.IntVal(1)):
            continue   # moves an offset, or takes one value
        if str(w) not in pinned or free_consts(pinned[str(w)]) & set(pinned):
            return None
    for sc in st.site.scopes:
        if sc.kind == "loop" and any(sc.var is u for u in all_units):
            bounds = [_num(model.scalar(getattr(sc.op, f))) for f in ("start", "stop", "step")]
            if set().union(*(free_consts(b) for b in bounds + list(sc.constraints))) & \
                    within_names:
                return None
    walked_pids = {str(g) for _, gs in walks for g in gs}
    kept = {str(u) for u in units}
    for u in all_units:
        if str(u) not in kept and str(u) not in walked_pids:
            return None
    if units and tile is None:
        return None
    # the obligations rename one group of variables each and share the others between their
    # two copies: a premise relating variables of two groups would make them assume more
    # than two real instances satisfy
    groups = [{str(g) for g in gs} for _, gs in walks] + [kept, within_names]
    for p in model.premises:
        mentioned = free_consts(p) & (walked_pids | kept | within_names)
        if mentioned and not any(mentioned <= g for g in groups):
            return None
    need = [(ob, ("distinct program ids start at distinct units", "start in [0, stride)"))
            for ob, _ in walks]
    need += [(ob, ("injective", "offset in [0, tile)")) for ob in offset_obs]
    if tile is not None:
        need.append((tile, tuple(n for n, _ in tile.claims
                                 if n in ("distinct units store distinct tiles",
                                          "tile origins on the tile grid"))))
    return tuple(need)


def _pinned(cond, within, names):
    """(w, e) when `cond` is w == e for a variable w inside the tile that the destination
    does not name and e does not mention; else None."""
    if not z3.is_eq(cond):
        return None
    a, b = cond.arg(0), cond.arg(1)
    for w, e in ((a, b), (b, a)):
        if any(w.eq(v) for v in within) and str(w) not in names and \
                str(w) not in free_consts(e):
            return w, e
    return None


def _selects(cond, within, names):
    """w when `cond` is a turn given as a set of warpgroups (`wg != 0`, `wg >= 1`, `wg < 2`):
    a condition other than w == e (_pinned) that mentions the index w of a role around the
    store, which the destination does not name, and no value of the data (an uninterpreted
    function: an atomic's ticket `ticket(wg, pid) == splits - 1`, a load): a condition on data
    names no set of warpgroups (the fused split-K decode's last-arriver store is the
    atomic.tickets rule's, not a turn); else None."""
    if guards._reads(cond):        # store_guards' reading of values read at run time
        return None
    consts = free_consts(cond)
    for w in within:
        if str(w) in consts and str(w) not in names:
            return w
    return None


def _turns(model: Model, st: StoreSite, dest) -> tuple[list, list[Obligation]]:
    """The store's conditions other than its turns, and the turns' obligations: a turn is a
    condition `wg == e` on the index of a role around the store that the destination `dest`
    does not name and e does not mention (_pinned), or a condition selecting a set of those
    warpgroups (`wg != 0`, `wg >= 1`: _selects; then one of them must pass)."""
    roles = {str(sc.var): sc for sc in st.site.scopes if sc.kind == "role"}
    within = [sc.var for sc in roles.values()]
    names = set().union(*(free_consts(x) for x in dest)) if dest else set()
    conds = []
    for sc, c in guards.conditions(st):
        pinned = _pinned(c, within, names)
        conds.append((sc, c, pinned if pinned is not None else _selects(c, within, names)))
    obs = []
    done: set[str] = set()
    for sc, c, pinned in conds:
        if isinstance(pinned, tuple):
            w, e = pinned
            n = roles[str(w)].op.warpgroups
            done.add(str(w))
            obs.append(_turn_obligation(model, st, sc, w, e, z3.IntVal(0), z3.IntVal(n),
                                        [p for _, p, q in conds
                                         if q is not None and p is not c]))
    for sc, c, w in conds:
        if w is None or isinstance(w, tuple) or str(w) in done:
            continue
        # every set-turn on this warpgroup index together (`wg >= 1` inside `wg < 3`)
        done.add(str(w))
        mine = [(sc2, p) for sc2, p, q in conds
                if q is not None and not isinstance(q, tuple) and q.eq(w)]
        others = [p for _, p, q in conds if q is not None and all(p is not m for _, m in mine)]
        obs.append(_set_turn_obligation(model, st, mine, w, roles[str(w)].op.warpgroups,
                                        others))
    return [(sc, c) for sc, c, pinned in conds if pinned is None], obs


def _set_turn_obligation(model, st, mine, w, count: int, turns) -> Obligation:
    """A turn given as a set of warpgroups (`ag.when(wg != 0)`, `wg >= 1`, `wg < 2`, all of
    `mine` together) around a store whose destination does not name the warpgroup: every
    warpgroup that passes stores the same element, so at least one of w = 0 .. count - 1
    must pass (none: the unit is never stored). Two that pass store it twice: store.once's
    finding, not coverage's. A disjunction over the role's constant number of warpgroups."""
    prem = list(model.premises) + guards.unguarded(st) + \
        [t for t in turns if str(w) not in free_consts(t)]
    sel = z3.And([c for _, c in mine])
    passes = [z3.substitute(sel, (w, z3.IntVal(k))) for k in range(count)]
    info = model.vars.get(str(w))
    who = info.label if info is not None else str(w)
    at = ", ".join(str(sc.op.loc) for sc, _ in mine)

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "turn": [], "warpgroups": count}
        return (f"the store at {st.op.loc} runs for no {who} in [0, {count}) (the "
                f"condition(s) at {at}; its destination does not name the {who}): that unit "
                f"is never stored"), wit
    return Obligation("store.coverage", mine[0][0].op.loc,
                      f"the condition(s) at {at} let a {who} store", prem,
                      [("one of them stores", z3.Or(passes))],
                      _by_store(model, st, decode), minimize=list(model.params.values()))


def _turn_obligation(model, st, sc, w, e, lo, count, turns) -> Obligation:
    # premises: the store's loops and warpgroups and its other turns, not its other
    # conditions (store_guards proves those separately, over every instance)
    # a second turn on the same warpgroup (`wg == e` inside `wg == e2`) is a claim, not a
    # premise: warpgroup e must pass it too, or no warpgroup stores (e != e2)
    same = [t for t in turns if str(w) in free_consts(t)]
    prem = list(model.premises) + guards.unguarded(st) + \
        [t for t in turns if str(w) not in free_consts(t)]
    claims = [("exactly one of them stores", z3.And(e >= lo, e < lo + count))]
    if same:
        claims.append(("that one passes the other conditions on it",
                       z3.And([z3.substitute(t, (w, e)) for t in same])))

    info = model.vars.get(str(w))
    who = info.label if info is not None else str(w)

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "turn": value(zm, e)}
        if "exactly one of them stores" not in violated:
            return (f"the store at {st.op.loc} runs where the {who} is {wit['turn']} (the "
                    f"condition at {sc.op.loc}) and where another condition on the {who} "
                    f"holds, which {who} {wit['turn']} fails: no {who} stores, that unit is "
                    f"never stored"), wit
        return (f"the store at {st.op.loc} runs when the {who} is {wit['turn']}, which no "
                f"{who} in [{value(zm, lo)}, {value(zm, lo + count)}) is: that unit is never "
                f"stored"), wit
    return Obligation("store.coverage", sc.op.loc,
                      f"the condition at {sc.op.loc} lets exactly one {who} store", prem,
                      claims, _by_store(model, st, decode),
                      minimize=list(model.params.values()))


def _constant(x) -> bool:
    return isinstance(x, int) or (isinstance(x, z3.ExprRef) and z3.is_int_value(z3.simplify(x)))


def _drawn_walks(model, st, dest: list) -> list:
    """The dynamic scheduler's walk (GemmSchedule(scheduler="dynamic")): a producer draws
    each unit from a self-resetting counter, `ticket = atomic_fetch_add(W, (0,), wrap=T)`,
    once per iteration of its grid-stride loop `for t in range(g, T, P)`, and the consumers
    store the unit it handed them through the ring: a destination that reads
    ticket(w, t', g) with t' this store's own loop over the same range (the producer's loop
    index seen from the consumer: transfer/pipeline.py `pipe_peek`). atomic.tickets proves
    (its grid-stride form with D = 1: the counter's element does not read t, stop == wrap)
    that the walk's instances (g, t) draw the tickets 0 .. T - 1 once each: (g, t) ->
    ticket is a bijection from the walk's instances onto [0, T), as (g, t) -> t is (the
    walk obligation). So the units this store covers, over its instances, are the units the
    walk's index covers, and the destination with the ticket replaced by t covers what it
    covers (assume-guarantee on atomic.tickets, as store.once takes the tickets' distinctness
    from it). Only when the ticket's other instance variables are the warpgroup of a
    one-warpgroup role (one value) and the grid's ids are the store's own; any other
    application is left as it is (then coverage stays unknown)."""
    loops = {str(sc.var): sc for sc in st.site.scopes if sc.kind == "loop" and
             sc.var is not None}
    grid = {str(v) for v, _, _ in model.grid_vars}

    def bounds(loop):
        return tuple(z3.simplify(_num(model.scalar(getattr(loop, f))))
                     for f in ("start", "stop", "step"))
    for a in model.atomics:
        if a.kind != "fetch_add" or a.op.wrap is None or a.ticket is None:
            continue
        guarded = [sc for sc in a.site.scopes if sc.kind in ("if", "loop")]
        if len(guarded) != 1 or guarded[0].kind != "loop" or guarded[0].var is None:
            continue
        walk = guarded[0]
        pos = [k for k, v in enumerate(a.args) if v.eq(walk.var)]
        if len(pos) != 1 or any(str(walk.var) in free_consts(_num(o)) for o in a.offsets):
            continue
        start, stop, step = bounds(walk.op)
        wrap = z3.simplify(_num(model.scalar(a.op.wrap)))
        if not stop.eq(wrap):
            continue
        # the other instance variables: grid ids (kept: the store's own), or the warpgroup
        # of a role of one warpgroup
        roles = [sc for sc in a.site.scopes if sc.kind == "role"]
        single = {str(sc.var) for sc in roles
                  if sc.var is not None and getattr(sc.op, "warpgroups", 0) == 1}
        if any(str(v) not in grid and str(v) not in single
               for k, v in enumerate(a.args) if k != pos[0]):
            continue
        decl = a.ticket.decl()
        for app in _applications(dest, decl):
            t = app.arg(pos[0])
            loop = loops.get(str(t))
            if loop is None or bounds(loop.op) != (start, stop, step) or \
                    any(not app.arg(k).eq(v) for k, v in enumerate(a.args)
                        if k != pos[0] and str(v) in grid):
                continue
            dest = [z3.substitute(d, (app, t)) for d in dest]
    return dest


def _applications(terms: list, decl) -> list:
    """The applications of the function `decl` in `terms`, each once."""
    return [t for t in subterms(*terms, binders=False) if z3.is_app(t) and t.decl().eq(decl)]


def _counted_walks(model, st, dest: list) -> tuple[list, dict]:
    """A persistent walk spelled by this program's trip count: `for i in range(n)` with
    n = (T - S + P - 1) // P (`ag.cdiv(T - S, P)`, or written out) and the unit read as
    S + i * P, S a program id g plus terms of no loop index. C's truncating division makes n
    the count of range(S, T, P) for P >= 1 at every sign of T - S (n = ceil((T - S) / P)
    when T - S >= 0; when T - S < 0, n <= 0 and the loop runs no iteration), so the loop is
    the walk `for u in range(S, T, P)`: the destination is rewritten with g = u - i * P - (S - g),
    and where the index cancels (it is read only through the unit) the loop's variable
    stands for u, walked over [0, T) by `_walk_obligation` and `_tile_obligation` (P >= 1
    follows from the walk's "start in [0, stride)"). A dividend of any other offset from
    T - S is the same walk with another T (`(T - S) // P`: range(S, T - P + 1, P), one unit
    short per program: the tile count says so). Returns the destination and loop variable
    name -> (S, T, P) for the loops so read; a loop of another shape is left as it is."""
    grid = {str(v): v for v, _, _ in model.grid_vars}
    defs = {op.result.id: op for op in model.kernel.walk() if isinstance(op, O.Arith)}
    counted: dict = {}
    for sc in st.site.scopes:
        if sc.kind != "loop":
            continue
        start, step = (z3.simplify(_num(model.scalar(getattr(sc.op, f))))
                       for f in ("start", "step"))
        div = defs.get(getattr(sc.op.stop, "id", None))
        if not (start.eq(z3.IntVal(0)) and step.eq(z3.IntVal(1))) or div is None or \
                div.fn != "floordiv":
            continue
        P = _num(model.scalar(div.rhs))
        span = z3.simplify(_num(model.scalar(div.lhs)) - P + 1)   # T - S
        addends = span.children() if z3.is_add(span) else [span]
        S = z3.simplify(-z3.Sum([a for a in addends if free_consts(a) & set(grid)] or [0]))
        T = z3.simplify(z3.Sum([a for a in addends if not free_consts(a) & set(grid)] or [0]))
        if free_consts(T) & set(grid) or free_consts(P) & set(grid) or \
                str(sc.var) in free_consts(S) | free_consts(T) | free_consts(P):
            continue
        for name in sorted(free_consts(S) & set(grid)):
            g = grid[name]
            rest = z3.simplify(S - g)
            if name in free_consts(rest):
                continue    # g's coefficient is not 1
            i0 = fresh_int(f"{sc.var}@index")
            moved = [z3.simplify(z3.substitute(d, (sc.var, i0), (g, sc.var - i0 * P - rest)))
                     for d in dest]
            if any(str(i0) in free_consts(d) for d in moved):
                continue    # the index is read otherwise than through the unit
            dest, counted[str(sc.var)] = moved, (S, T, P)
            break
    return dest, counted


def _walk_obligation(model, sc, gs, start, step, ranges) -> Obligation:
    """The start of a persistent loop maps the program ids it uses one-to-one onto [0, step)."""
    ren = [(g, fresh_int(f"{g}@2")) for g in gs]
    start2 = z3.substitute(start, *ren)
    prem = list(model.premises) + [z3.substitute(c, *ren) for c in model.premises]
    count = z3.IntVal(1)
    for g in gs:
        count = count * _num(ranges[str(g)][2])
    claims = [("distinct program ids start at distinct units",
               z3.Or(z3.And([a == b for a, b in ren]), start != start2)),
              ("start in [0, stride)", z3.And(start >= 0, start < step)),
              ("as many program ids as the stride", count >= step)]

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "start": value(zm, start),
               "stride": value(zm, step), "programs": value(zm, count)}
        if "as many program ids as the stride" in violated:
            msg = (f"the grid has {wit['programs']} program(s) but the loop at {sc.op.loc} "
                   f"strides by {wit['stride']}: the units u with u % {wit['stride']} >= "
                   f"{wit['programs']} are never visited")
        elif "start in [0, stride)" in violated:
            msg = (f"a program starts the loop at {sc.op.loc} at unit {wit['start']}, outside "
                   f"[0, {wit['stride']}): its walk skips or repeats units")
        else:
            msg = (f"two programs start the loop at {sc.op.loc} at the same unit "
                   f"{wit['start']}: they store the same tiles")
        return msg, wit
    return Obligation("store.coverage", sc.op.loc,
                      f"the loop at {sc.op.loc} walks every unit once over the grid", prem,
                      claims, decode, minimize=list(model.params.values()))


def _offset_obligation(model, st, d, off, wv, size, los, counts, steps) -> Obligation:
    ren = [(w, fresh_int(f"{w}@2")) for w in wv]
    off2 = z3.substitute(off, *ren)
    rng = []
    for w, w2 in [(w, w) for w in wv] + ren:
        # the values a variable takes: lo, lo + step, ... (count of them)
        lo, step = los[str(w)], steps.get(str(w), 1)
        rng += [w2 >= lo, w2 < lo + counts[str(w)] * step]
        if step != 1:
            rng.append((w2 - lo) % step == 0)
    prem = list(model.premises) + rng
    claims = [("injective", z3.Or(z3.And([a == b for a, b in ren]), off != off2)),
              ("offset in [0, tile)", z3.And(off >= 0, off < size))]

    def decode(zm, violated):
        wit = {"dim": d, "tile": size, "offset": value(zm, off),
               "within": {str(w): value(zm, w) for w in wv}}
        return (f"dim {d} inside a tile: the offset {wit['offset']} from {wit['within']} "
                f"({', '.join(violated)}): the tile's {size} positions along dim {d} are not "
                f"each stored once"), wit
    return Obligation("store.coverage", st.op.loc,
                      f"dim {d} of {st.tensor.name} inside a tile at {st.op.loc}", prem,
                      claims, _by_store(model, st, decode), minimize=list(wv))


def _fixed_dim(model, st, d, base, size, ext) -> Obligation:
    """A dim no unit variable moves: one tile covers it (a launch precondition if symbolic).
    d past the tensor's dims: the offset dim of a radix pair (`_pair_radix_dims`), of
    constant extent."""
    claims = [("origin 0", base == 0), ("the tile spans the dim", ext <= size)]

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "dim": d, "tile": size,
               "extent": value(zm, ext), "origin": value(zm, base)}
        return (f"dim {d} of {st.tensor.name} is stored by one tile at {wit['origin']} of "
                f"{size} positions but has {wit['extent']}"), wit
    fix = (f"state the launch precondition {st.tensor.dims[d]} <= {size} with ag.tag_assume, "
           f"or tile dim {d} over the grid") if d < len(st.tensor.dims) else ""
    return Obligation("store.coverage", st.op.loc,
                      f"dim {d} of {st.tensor.name} stored at {st.op.loc}",
                      list(model.premises), claims, _by_store(model, st, decode),
                      minimize=list(model.params.values()), fix=fix,
                      # a radix pair's offset dim has a constant extent: no launch
                      # precondition can make a tile short of it cover it (an error)
                      warn_claims=("the tile spans the dim",) if d < len(st.tensor.dims)
                      else ())


def _divisors_of(v, terms) -> dict[int, z3.ExprRef]:
    """The divisors d (by id) of the divisions v / d and remainders v % d in `terms`, each
    shared subterm walked once (`_unit_radix` and `_digit_split` split v only where there is
    exactly one)."""
    return {t.arg(1).get_id(): t.arg(1) for t in subterms(*terms, binders=False)
            if z3.is_app(t) and t.decl().kind() in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD) and
            t.arg(0).eq(v)}


def _unit_radix(model, u, T, terms):
    """(F, T1, split) when the walked unit u, in [0, T), occurs in `terms` only as u / F and
    u % F for one launch parameter F >= 1 (a premise of the model) and T is a product with
    the factor F (T1: the product of the others); `split(t)` is t with u / F and u % F
    replaced by fresh variables (q, r), `split.parts` = (q, r). Else None.

    A split-K kernel walks units u over [0, tiles * splits) and stores unit u's tile u / S of
    split u % S: asked about u, "distinct units store distinct tiles" made z3's non-linear
    core relate u to u / S and u % S first (150-580 ms on MoE's split decode gate-up); asked
    about (q, r), it is the unsplit kernel's question about q.

    Exact: for F >= 1, u -> (u / F, u % F) maps [0, T1 * F) one-to-one onto [0, T1) x [0, F)
    (Euclidean division), so ranging (q, r) over that box ranges u over [0, T); u == u' iff
    (q, r) == (q', r'); and the terms, which read u only through u / F and u % F, are the
    same function of (q, r). No premise of the model may mention u (else None)."""
    found = _divisors_of(u, terms)
    if len(found) != 1:
        return None
    (F,) = found.values()
    if not any(F.eq(p) for p in model.params.values()) or \
            not any(p.eq(F >= 1) for p in model.premises):
        return None
    factors, todo = [], [T]
    while todo:   # T's factors: z3 builds a * b * c as (a * b) * c
        t = todo.pop()
        if z3.is_app(t) and t.decl().kind() == z3.Z3_OP_MUL:
            todo.extend(t.children())
        else:
            factors.append(t)
    at = next((i for i, f in enumerate(factors) if f.eq(F)), None)
    if at is None:
        return None
    T1 = z3.IntVal(1)
    for f in factors[:at] + factors[at + 1:]:
        T1 = T1 * f
    q, r = fresh_int(f"{u}.quotient"), fresh_int(f"{u}.remainder")

    def split(t):
        return z3.substitute(t, (u / F, q), (u % F, r))
    if any(str(u) in free_consts(split(t)) for t in terms):
        return None
    # a premise about u itself would be shared by both instances of the query and cut off
    # from (q, r): ask about u then (none of the library kernels has one)
    if any(str(u) in free_consts(p) for p in model.premises):
        return None
    split.parts = (q, r)
    return F, T1, split


def _tile_index(base, size: int):
    """(base / size, rest): the summands of `base` that are multiples of the constant `size`
    (a numeral, or a product whose numeral coefficient `size` divides) divided exactly, the
    others' sum `rest` left divided: (size * A + B) / size is A + B / size, and
    (size * A + B) % size is B % size (Euclidean division, size >= 1). Equal in value, so
    the claims on it are the same claims; a tile origin `1024 * g + 128 * x` of 128-row
    tiles gives tile index 8 * g + x, with no division left for the solver to relate
    (z3.simplify leaves the division; on the three GEMM raster lemmas split by
    `_digit_split`, 19% fewer z3 units with the division taken out than with it: 513k
    against 634k over 3 seeds each)."""
    if size <= 1:
        return base, z3.IntVal(0)
    exact, rest = [], []
    for s in summands(base):
        c, fs = (s, []) if z3.is_int_value(s) else \
            (s.arg(0), factors(s)[1:]) if z3.is_mul(s) and z3.is_int_value(s.arg(0)) else \
            (None, [])
        if c is not None and c.as_long() % size == 0:
            t = z3.IntVal(c.as_long() // size)
            for f in fs:
                t = t * f
            exact.append(t)
        else:
            rest.append(s)
    rest_sum = z3.Sum(rest) if len(rest) > 1 else rest[0] if rest else z3.IntVal(0)
    if not exact:
        return base / size, base
    q = z3.Sum(exact) if len(exact) > 1 else exact[0]
    return (q + rest_sum / size if rest else q), rest_sum


def _digit_split(model, parts, own, moving, unit_term):
    """(parts, own, moving, unit_term) with each unit variable p that the tile bases read only
    as p / F and p % F, for one term F (not a numeral) of no unit variable with a lower
    bound >= 1 under the model's premises (`LowerBounds`: the tile counts `(N + 255) / 256`
    of N >= 1), replaced by a fresh pair (q, r): p := q * F + r in its own range
    constraints, 0 <= r < F, and the bases with p / F -> q, p % F -> r; repeated on the
    parts so made (a batch's remainder decoded again by a grouped raster). Only a p whose
    range is `own` (a loop's index, a walked unit), never one a premise of the model names.

    A persistent GEMM's walked unit u in [0, tiles_m * tiles_n) is read as u / (8 * tiles_n)
    (its group) and u % (8 * tiles_n): asked about u, "distinct units store distinct tiles"
    took z3's non-linear core 0.15-0.5 s per kernel (the grouped raster's lemma, every GEMM
    and conv schedule), the core relating u to its quotient and remainder; asked about (q, r),
    20-40 ms (z3 on the dumped queries, 3 seeds).

    Exact: F >= 1 at every instance (its lower bound), and for F >= 1, p -> (p / F, p % F)
    maps the integers one-to-one onto Z x [0, F) with inverse q * F + r (Euclidean
    division): the pairs with 0 <= r < F satisfying the constraints with p := q * F + r are
    the images of the p satisfying them; p == p' iff (q, r) == (q', r'); and the bases, which
    read p only through p / F and p % F, are the same functions of (q, r). `unit_term` (the
    counterexample's units) reads p as q * F + r.

    Where F's lower bound is only 0 (a conv's row tiles `(NP / P) * ..`: a quotient by the
    variable P has no better syntactic bound, though NP = N * P), F is split too when p's own
    range is 0 <= p < F * K (`_empty_at_zero`): an instance with F == 0 has no p (p < 0 * K)
    and no r (0 <= r < 0), so the two ranges are still one-to-one there (both empty); F < 0
    is ruled out by its bound >= 0. The rowbox / halo TMA and halo direct convs' raster
    lemma: 55-185 ms unsplit, ~20 ms split (h248, docs/verify.md)."""
    premise_names: set[str] = set()
    for c in model.premises:
        premise_names |= free_consts(c)
    lb = None
    done = False
    while not done:
        done = True
        names = {str(x) for x in parts}
        for p in parts:
            if str(p) in premise_names or not any(str(p) in free_consts(c) for c in own):
                continue
            found = _divisors_of(p, [b for _, b, _ in moving])
            if len(found) != 1:
                continue
            (F,) = found.values()
            if free_consts(F) & names or z3.is_int_value(F):
                continue
            q, r = fresh_int(f"{p}.quotient"), fresh_int(f"{p}.remainder")
            split = [(d, z3.substitute(b, (p / F, q), (p % F, r)), size)
                     for d, b, size in moving]
            if any(str(p) in free_consts(b) for _, b, _ in split):
                continue
            lb = lb or LowerBounds(list(model.premises))
            low = lb.of(F)
            if low is None or low < 0 or (low < 1 and not _empty_at_zero(p, F, own)):
                continue
            whole = q * F + r
            own = [z3.substitute(c, (p, whole)) for c in own] + [r >= 0, r < F]
            moving = split
            unit_term = {k: z3.substitute(t, (p, whole)) for k, t in unit_term.items()}
            parts = [x for x in parts if not x.eq(p)] + [q, r]
            done = False
            break
    return parts, own, moving, unit_term


def _factor_ids(t) -> set[int]:
    """The ids of t's non-numeral factors after z3.simplify (a product flattened; t itself
    otherwise)."""
    t = z3.simplify(t)
    return {c.get_id() for c in (t.children() if z3.is_mul(t) else [t])
            if not z3.is_int_value(c)}


def _empty_at_zero(p, F, own) -> bool:
    """Whether `own` bounds p as 0 <= p and p < E for a product E with each non-numeral
    factor of F among its own (after z3.simplify). Then no p satisfies `own` where F == 0:
    F, a non-zero numeral times its factors (F is no numeral: `_digit_split`), is 0 only
    where one of those factors is, and then so is E."""
    if not any(z3.is_ge(c) and c.arg(0).eq(p) and z3.is_int_value(c.arg(1))
               and c.arg(1).as_long() == 0 for c in own):
        return False
    need = _factor_ids(F)
    return bool(need) and any(z3.is_lt(c) and c.arg(0).eq(p) and need <= _factor_ids(c.arg(1))
                              for c in own)


def _tile_obligation(model, st, moving, units, walked, counts, exts=None) -> Obligation:
    """Unit variables -> tile index: injective into the output's tile box, with as many
    units as tiles (NIA: raster orders divide by symbolic group sizes). A walked unit read
    only as its quotient and remainder by a launch parameter is asked about as that pair
    (`_unit_radix`)."""
    radices = {}
    for sc in st.site.scopes:
        if sc.kind == "loop" and str(sc.var) in walked:
            rx = _unit_radix(model, sc.var, walked[str(sc.var)][1], [b for _, b, _ in moving])
            if rx is not None:
                radices[str(sc.var)] = rx
    # the variables the query ranges over: a radix unit's (quotient, remainder), or the unit
    parts = [p for u in units
             for p in (radices[str(u)][2].parts if str(u) in radices else (u,))]
    # the unit each instance is, as a term of those variables (for the counterexample)
    unit_term = {str(u): radices[str(u)][2].parts[0] * radices[str(u)][0] +
                 radices[str(u)][2].parts[1] if str(u) in radices else u for u in units}
    for _, _, split in radices.values():
        moving = [(d, split(base), size) for d, base, size in moving]
    # the unit variables' ranges: a walked loop's index is any unit in [0, T); the rest keep
    # their own constraints (the grid's program ids are in the premises)
    own = []
    n_units = z3.IntVal(1)
    for sc in st.site.scopes:
        if sc.kind == "loop" and str(sc.var) in radices:
            F, T1, split = radices[str(sc.var)]
            q, r = split.parts
            own += [q >= 0, q < T1, r >= 0, r < F]
            n_units = n_units * walked[str(sc.var)][1]
        elif sc.kind == "loop" and str(sc.var) in walked:
            T = walked[str(sc.var)][1]
            own += [sc.var >= 0, sc.var < T]
            n_units = n_units * T
        elif sc.kind == "loop" and any(sc.var is u for u in units):
            own += list(sc.constraints)
            n_units = n_units * model.trip_term(sc.op)
    for u in units:
        if str(u) not in walked and not any(sc.var is u for sc in st.site.scopes):
            n_units = n_units * _num(counts[str(u)])
    # a unit read only as its quotient and remainder by a size term (a grouped raster's
    # `u / (8 * tiles_n)`, a batch's `u / (tiles_m * tiles_n)`): asked about as that pair
    parts, own, moving, unit_term = _digit_split(model, parts, own, moving, unit_term)
    # the second instance: each of the query's variables renamed
    ren = [(p, fresh_int(f"{p}@2")) for p in parts]

    def sub(t):
        return z3.substitute(t, *ren) if ren else t
    # a walked loop's index is any unit in [0, T) here (`own`), not the iteration of one
    # program: a premise of the model that mentions it (a drawn unit's ties to its producer's
    # instance, transfer/pipeline.py `pipe_peek`; an atomic's ticket inside the walk) relates
    # it to that program's id and the instance's auxiliaries, which the second copy would
    # share with the first (it renames the units only): two units of one program would be
    # compared, never units of two. Left out: fewer premises, a claim over more pairs.
    walked_names = set(walked)
    kept = [p for p in model.premises if not free_consts(p) & walked_names]
    prem = kept + [sub(c) for c in kept] + own + [sub(c) for c in own]
    qs, boxes, aligned = [], [], []
    for d, base, size in moving:
        ext = exts[d] if exts is not None else _num(st.tensor.extent(model, d))
        q, rest = _tile_index(base, size)
        qs.append(q)
        boxes.append((ext + size - 1) / size if size > 1 else ext)
        if size > 1:
            aligned.append(rest % size == 0)
    n_tiles = z3.IntVal(1)
    for b in boxes:
        n_tiles = n_tiles * b
    claims = [("distinct units store distinct tiles",
               z3.Or(z3.And([u == v for u, v in ren]), z3.Or([q != sub(q) for q in qs])))]
    if aligned:
        claims.append(("tile origins on the tile grid", z3.And(aligned)))
    claims += [("tile index inside the output", z3.And([z3.And(q >= 0, q < b)
                                                        for q, b in zip(qs, boxes)])),
               ("as many units as tiles", n_units >= n_tiles)]

    def label(u) -> str:
        info = model.vars.get(str(u))
        return info.label if info is not None else str(u)

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "units": value(zm, n_units),
               "tiles": value(zm, n_tiles),
               "unit": {label(u): value(zm, unit_term[str(u)]) for u in units},
               "tile": tuple(value(zm, q) for q in qs)}
        if "distinct units store distinct tiles" in violated:
            other = {label(u): value(zm, sub(unit_term[str(u)])) for u in units}
            wit["other_unit"] = other
            msg = (f"units {wit['unit']} and {other} both store tile {wit['tile']} of "
                   f"{st.tensor.name}: another tile is never stored")
        elif "as many units as tiles" in violated:
            msg = (f"{wit['units']} units are walked but {st.tensor.name} has {wit['tiles']} "
                   f"tiles: some tile is never stored")
        elif "no unit outside the output without spare units" in violated:
            msg = (f"unit {wit['unit']} stores tile {wit['tile']}, outside the output's "
                   f"{[value(zm, b) for b in boxes]} tiles (masked away), and the "
                   f"{wit['units']} units are no more than the {wit['tiles']} tiles: some "
                   f"tile of {st.tensor.name} is never stored")
        elif "tile index inside the output" in violated:
            msg = (f"unit {wit['unit']} stores tile {wit['tile']}, outside the output's "
                   f"{[value(zm, b) for b in boxes]} tiles (masked away): the count does not "
                   f"show coverage")
        else:
            msg = f"a tile origin is not a multiple of the tile ({', '.join(violated)})"
        return msg, wit
    units_named = {str(p) for p in parts} | {str(v) for _, v in ren}
    tile = Obligation("store.coverage", st.op.loc,
                      f"tiles of {st.tensor.name} stored at {st.op.loc}: each once", prem,
                      claims, _by_store(model, st, decode),
                      minimize=list(model.params.values()),
                      timeout_ms=4 * solver_timeout(), tier="NIA",
                      warn_claims=("tile index inside the output",),
                      lemma=_raster_lemma(prem, claims[0], units_named))
    # A unit whose tile lies outside the output is masked away: only a warning above, since a
    # grid with spare units (more units than tiles) is right. With no more units than tiles
    # it is an error: at most (units - 1) tiles are left for the output's `tiles`, so one is
    # never stored (no injectivity needed). An aligned origin outside the box is a tile wholly
    # outside the output (q < 0: origin <= -size; q >= box: origin >= box * size >= extent),
    # so the unit stores no element; a misaligned one is the claim above's error. Its own
    # query, so the witness has units <= tiles (the one above may pick spare units); implied,
    # not solved, once the tile index is proven inside.
    inside = dict(claims)["tile index inside the output"]
    outside = Obligation("store.coverage", st.op.loc,
                         f"tiles of {st.tensor.name} stored at {st.op.loc}: none outside the "
                         f"output with no spare units", prem,
                         [("no unit outside the output without spare units",
                           z3.Or(inside, n_units > n_tiles, z3.Not(z3.And(aligned))))],
                         _by_store(model, st, decode), minimize=list(model.params.values()),
                         timeout_ms=4 * solver_timeout(), tier="NIA",
                         implied_by=((tile, ("tile index inside the output",)),),
                         implied_why="a tile index inside the output satisfies the claim")
    return tile, outside


def _raster_lemma(premises, claim, units: set[str]) -> Lemma | None:
    """"distinct units store distinct tiles" over free sizes (obligation.Lemma): each
    division of the claim and of the units' premises that reads no unit (the raster's tile
    counts, `(63 + KG) / 64`) is a fresh variable, one per value up to z3.simplify (the
    premises spell `(KG + 64 - 1) / 64`), with the side condition that it is >= 0. The
    lemma's premises: the units' premises so rewritten, those variables >= 0, and the
    obligation's premises over the constants left (the group count G). The 22 conv
    schedules' instances are 4 lemmas up to renaming (by their group and tile sizes and
    cluster), 18 distinct queries before (the launch parameters' facts and the size terms'
    spelling differ per kernel). None when no such division occurs."""
    name, c = claim
    unit_prem = [p for p in premises if free_consts(p) & units]
    sizes = _unit_free_divisions([c] + unit_prem, units)
    if not sizes:
        return None
    groups: dict[int, list] = {}
    for t in sizes:
        groups.setdefault(z3.simplify(t).get_id(), []).append(t)
    pairs, facts, side = [], [], []
    for grp in groups.values():
        v = fresh_int("raster.size")
        pairs += [(t, v) for t in grp]
        facts.append(v >= 0)
        side.append((f"the raster's size {grp[0]} is >= 0", grp[0] >= 0))
    general = z3.substitute(c, *pairs)
    prem = [z3.substitute(p, *pairs) for p in unit_prem]
    fresh = {str(v) for _, v in pairs}
    left: set[str] = set()
    for t in prem + [general]:
        left |= free_consts(t)
    left -= units | fresh
    seen: set[int] = set()
    for p in premises:
        names = free_consts(p)
        if names and names <= left and p.get_id() not in seen:
            seen.add(p.get_id())
            prem.append(p)
    return Lemma(tuple(prem + facts), ((name, general),), (name,), tuple(side))


def _unit_free_divisions(terms, units: set[str]) -> list[z3.ExprRef]:
    """The outermost integer divisions in `terms` that read none of `units`."""
    return outermost(terms, lambda t: z3.is_app(t) and t.decl().kind() == z3.Z3_OP_IDIV and
                     not free_consts(t) & units, binders=False)
