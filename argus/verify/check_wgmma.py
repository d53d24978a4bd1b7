"""wgmma obligations on tags: operands defined, operands agree, each k exactly once.

Job: at every `wgmma(a, b, acc)` (INVARIANTS.md §3.2), for all accumulator elements (m, n),
all k inside the instruction's K, every iteration, warpgroup and CTA:
  * wgmma.defined — A[m, k] and B[n, k] were written (by the TMA copies of the very pipeline
    step this consume owns, or by an earlier shared-memory store);
  * wgmma.agree — fields present on both sides agree: the contracted coordinate (the field
    that varies with k, e.g. `k` of A["M","K"] and B["N","K"]) and every user tag (`expert`);
    a user tag is a reduction coordinate when its value can differ between two k of one
    instruction, not when its term merely mentions k; a tensor coordinate that mentions k
    always is (`_reduction_fields`: the contracted coordinate is never dropped);
  * wgmma.k-once — the map (reduction-loop iteration, k in tile) -> k is injective with image
    [0, |domain|) and |domain| >= K, so every k of [0, K) is multiplied exactly once. A
    deliberate permutation of k stays legal (the stronger "k == it*BK + kk" is not required).
All three are linear integer arithmetic over the symbolic iteration (tier LIA).
"""

from __future__ import annotations

import z3

from argus.ir import ops as O
from argus.ir.types import TileType
from argus.verify import outflow, promotion, solver
from argus.verify.wgmma_facts import (_acc_chain, _carried_across, _field_extent, _k_key,
                                      _minimize, _operands)
from argus.verify import witness as W
from argus.verify.model import Model, WgmmaSite, _num, b_index
from argus.verify.obligation import Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import (META_FIELDS, Substitution, free_consts, fresh_int,
                                    is_coordinate_field, is_integer_dim, mentions, occurring_in,
                                    substitute)


def _coords_text(zm, rec, model: Model) -> str:
    tensor_ix = rec.fields.get("tensor")
    if tensor_ix is None:
        tags = {k: value(zm, v.term) for k, v in rec.fields.items()
                if v.is_point and k not in ("iter", "step", "stage")}
        return f"computed data with tags {tags}" if tags else (rec.source or "untagged data")
    tid = list(model.tensors)[value(zm, tensor_ix.term)]
    info = model.tensors[tid]
    coords = [value(zm, rec.fields[f].term) for f in info.field_names]
    return W.fmt_elem(info.name, coords)


def obligations(model: Model, site: WgmmaSite) -> list[Obligation]:
    op = site.op
    N = op.acc.type.shape[1]
    K = op.k_extent
    m, n, kk, ra, rb, _ = _operands(model, site)
    ranges = [m >= 0, m < 64, n >= 0, n < N, kk >= 0, kk < K]
    base = list(model.premises) + site.site.constraints() + ranges + list(ra.cond) + \
        list(rb.cond)
    subject = f"wgmma at {op.loc} (a = {site.a_name}, b = {site.b.buffer})"
    # K of one instruction: 32 bytes of a row (k16 for 16-bit inputs, k8 tf32, k32 fp8)
    k_inst = 32 // op.b.type.dtype.bytes

    def decode(zm, violated):
        mv, nv, kv = value(zm, m), value(zm, n), value(zm, kk)
        wit = W.context(model, zm, site.site)
        wit.update(W.acc_thread(mv, nv))
        wit.update({"accumulator": (mv, nv), "k_in_tile": kv, "k_block": kv // k_inst,
                    "k_in_block": kv % k_inst})
        a_txt = _coords_text(zm, ra, model) if z3.is_true(zm.eval(ra.defined, True)) else \
            "nothing written there in this step"
        b_txt = _coords_text(zm, rb, model) if z3.is_true(zm.eval(rb.defined, True)) else \
            "nothing written there in this step"
        wit["a_element"] = a_txt
        wit["b_element"] = b_txt
        for key, rec in (("a_written_by", ra), ("b_written_by", rb)):
            for cond, what in rec.provenance:
                if z3.is_true(zm.eval(cond, True)):
                    wit[key] = what
                    break
        # who, from the site (W.context: the role and the solver's warpgroup) and the
        # accumulator's holder, not names.who's line lookup
        msg = (f"{W.said(wit)} (warp {wit['warp']}, lane {wit['lane']}), "
               f"accumulator {wit['register']} = tile element ({mv}, {nv}), k {kv} of the tile "
               f"(k-block {kv // k_inst}): A operand holds {a_txt}"
               f"{' (' + wit['a_written_by'] + ')' if 'a_written_by' in wit else ''}, B operand "
               f"holds {b_txt}{' (' + wit['b_written_by'] + ')' if 'b_written_by' in wit else ''}; "
               f"violated: {', '.join(violated)}")
        return msg, wit

    obs = [Obligation("wgmma.defined", op.loc, subject, base,
                      [("A element defined", ra.defined), ("B element defined", rb.defined)],
                      decode, minimize=_minimize(site) + [m, n, kk])]
    claims = []
    k_fields = []   # candidates: their terms mention kk (`_reduction_fields` decides)
    dims = []       # contracted integer dims (`_contracted_dim`): used when nothing else is
    for name in sorted(set(ra.fields) & set(rb.fields)):
        fa, fb = ra.fields[name], rb.fields[name]
        if _contracted_dim(name, fa, fb, kk):
            dims.append(name)
            continue
        if not is_coordinate_field(name) and name not in _user_fields(model):
            continue
        varies = mentions(fa.term, kk) or mentions(fb.term, kk)
        # a coordinate both operands hold constant over the whole tile is a batch index (batch,
        # head): it must agree too; one that follows m or n (Q's and K's sequence index in
        # self-attention, A @ A^T) is a free index and need not
        batch = not any(mentions(t, v) for t in (fa.term, fb.term) for v in (m, n, kk))
        if name in _user_fields(model) or varies or batch:
            claims.append((f"A.{name} == B.{name}", fa.term == fb.term))
            base = base + list(fa.cond) + list(fb.cond)
            if varies and is_coordinate_field(name):
                k_fields.append(name)
    if dims and not any(mentions(ra.fields[x].term, kk) or mentions(rb.fields[x].term, kk)
                        for x in set(ra.fields) & set(rb.fields) if x not in dims
                        and x not in META_FIELDS):
        # the only contracted coordinate is an integer dim's (A["M", 256], B["N", 256]): it
        # is the K axis. Beside a named one (a paged cache's `key` over its page rows, the
        # integer dim 2), the integer dim is a position inside it, repeated across pages
        for name in dims:
            fa, fb = ra.fields[name], rb.fields[name]
            claims.append((f"A.{name} == B.{name}", fa.term == fb.term))
            base = base + list(fa.cond) + list(fb.cond)
            k_fields.append(name)
    defined = [ra.defined, rb.defined]
    for claim in claims:  # one query per field: each stays small
        obs.append(Obligation("wgmma.agree", op.loc, subject + f": {claim[0]}", base + defined,
                              [claim], decode, minimize=_minimize(site) + [m, n, kk]))
    names = _reduction_fields(model, site, k_fields)
    for name in names:
        obs.extend(_k_once(model, site, name))
    if names:
        obs.extend(_read_mid_reduction(model, site))
    return obs


def _contracted_dim(name: str, fa, fb, kk) -> bool:
    """Whether `name` is an integer dim's field (`dim1` of A["M", 256]: no shape symbol
    names it) that both operands contract: its term follows the instruction's k on both
    sides. Such fields are no coordinate elsewhere (the `dim{i}` of two tensors need not be
    one axis: X[4, M] and Y[M, 4]), but a field both operands index by k is each operand's
    K axis at the same position, the one the product sums over: it must agree and be
    multiplied once per k like a named K (a Python-unrolled K loop over a fixed K = 256
    multiplying one k tile twice was accepted, issue 13's held-out style)."""
    return is_integer_dim(name) and fa.is_point and fb.is_point and \
        mentions(fa.term, kk) and mentions(fb.term, kk)


def _reduction_fields(model: Model, site: WgmmaSite, names: list[str]) -> list[str]:
    """The fields of `names` (shared coordinates whose term mentions the instruction's k) that
    are reduction coordinates: those whose value may differ between two k of one instruction
    with the iteration, CTA, thread and (m, n) fixed. A field proven independent of k (the
    same value at kk and at any other kk2) is no reduction index (its agreement is
    wgmma.agree's): k-once on it could only fail, since (iteration, kk) -> field is never
    injective when the instruction's K > 1. The multicast A tile of a CTA pair (MoE's
    cluster_n=2) has one: its `expert` term is an If over which CTA's TMA half wrote the row,
    guarded by `0 <= kk < 64`, which every kk meets.

    Sound: only user tags (`ag.tag_tensor` fields such as `expert`) proven independent are
    dropped, and only beside a coordinate of an operand's tensor, which is always kept. The
    contracted coordinate is never dropped: a coordinate (`k` of A["M","K"]) constant in k
    beside a tag that moves with k (one K column read K times) keeps its k-once, which
    reports the duplicate; without a coordinate candidate (paged KV, whose contracted
    coordinate is the user tag `key`) every candidate is kept. Cheap: with one candidate, or
    no tag beside a coordinate, nothing is asked; each tag is first decided by rewriting
    alone (z3's simplifier is equivalence-preserving: the records at kk and kk2, auxiliaries
    renamed apart, simplify to one term), the solver only for a tag rewriting leaves open."""
    if len(names) < 2:
        return list(names)
    op = site.op
    m, n, kk, ra, rb, _ = _operands(model, site)
    coordinates = _tensor_coordinates(model, (ra, rb))
    tags = [x for x in names if x not in coordinates]
    if not tags or len(tags) == len(names):
        return list(names)
    kk2 = fresh_int("kk")
    # the records at a second k, built as k-once builds its second instance (fresh auxiliaries)
    ra2 = model.wgmma_a(site, m, kk2)
    rb2 = model.read_smem(site.b, b_index(site.b, n, kk2, op.k_extent, op.trans_b), site.site)
    pairs = ((ra, ra2), (rb, rb2))

    def same(name: str):
        """The claim `name` of A and of B are equal at kk and kk2 (None: a record lacks it)."""
        got = [(r.fields.get(name), r2.fields.get(name)) for r, r2 in pairs]
        if any(f is None or f2 is None for f, f2 in got):
            return None
        return z3.And([f.term == f2.term for f, f2 in got]), \
            [c for f, f2 in got for c in f.cond + f2.cond]

    claims = {x: same(x) for x in tags}
    undecided = [x for x in tags
                 if claims[x] is None or not z3.is_true(z3.simplify(claims[x][0]))]
    if undecided:
        prem = list(model.premises) + site.site.constraints() + \
            [m >= 0, m < 64, n >= 0, n < op.acc.type.shape[1], kk >= 0, kk < op.k_extent,
             kk2 >= 0, kk2 < op.k_extent] + \
            [c for r, r2 in pairs for c in (r.defined, r2.defined) + r.cond + r2.cond]
        kept = []
        for x in undecided:
            if claims[x] is not None:
                claim, conds = claims[x]
                out = solver.prove(prem + conds, [(f"{x} independent of k", claim)])
                if out.status == "proven":
                    continue
            kept.append(x)   # varies with k, or not decided: k-once asks it, as before
        undecided = kept
    return [x for x in names if x in coordinates or x in undecided]


def _tensor_coordinates(model: Model, records) -> set[str]:
    """The coordinate fields (shape symbols) of the tensors the records were read from: every
    tensor's when a record's tensor is not one constant (then no field counts as a tag)."""
    out: set[str] = set()
    infos = list(model.tensors.values())
    for rec in records:
        t = rec.fields.get("tensor")
        if t is None:
            continue   # computed data (a register A operand): B's tensor names the coordinates
        t = z3.simplify(t.term)
        known = z3.is_int_value(t) and 0 <= t.as_long() < len(infos)
        for info in ([infos[t.as_long()]] if known else infos):
            out |= {x for x in info.field_names
                    if is_coordinate_field(x) or is_integer_dim(x)}
    return out


def _user_fields(model: Model) -> set[str]:
    out: set[str] = set()
    for info in model.tensors.values():
        out |= set(info.user_fields)
    return out


def _promoted_into(model: Model, acc_id: int):
    """The `var` that a partial accumulator is promoted into, or None: the partial is added
    once into a loop-carried variable, `v = v + part` or `v = v + part * s` (a scale s that
    does not read the partial), as fp8 promotion does per K block. Its sum then runs over the
    loops `v` is carried through, not only the partial's own (a K slice with a later sum)."""
    defs = model.value_defs()

    def reads(vid: int, target: int) -> bool:
        if vid == target:
            return True
        op = defs.get(vid)
        return op is not None and not isinstance(op, O.Var) and any(
            reads(a.id, target) for a in op.operands() if isinstance(a.type, TileType))

    def scaled(vid: int) -> bool:
        """vid is the partial times factors that do not read it."""
        if vid == acc_id:
            return True
        op = defs.get(vid)
        if not isinstance(op, O.Elementwise) or op.fn != "mul" or len(op.args) != 2:
            return False
        x, y = op.args
        return (scaled(x.id) and not reads(y.id, acc_id)) or \
            (scaled(y.id) and not reads(x.id, acc_id))

    found = None
    for op in model.kernel.walk():
        if not isinstance(op, O.Assign) or not reads(op.src.id, acc_id):
            continue
        add = defs.get(op.src.id)
        if found is not None or not isinstance(add, O.Elementwise) or add.fn != "add" or \
                len(add.args) != 2 or not isinstance(defs.get(op.dst.id), O.Var):
            return None   # read by another assignment, or not a plain sum: no promotion
        x, y = add.args
        if not ((x.id == op.dst.id and scaled(y.id)) or (y.id == op.dst.id and scaled(x.id))):
            return None
        found = defs[op.dst.id]
    # a variable rebound in a region nested in a loop is copied out into the enclosing
    # region's variable at the region's end (argus/dsl/carry.py): follow it outwards
    while found is not None:
        # only the carry pattern: the inner variable starts as the outer one's value
        outer = next((op for op in model.kernel.walk() if isinstance(op, O.Assign)
                      and op.src.id == found.result.id and found.init.id == op.dst.id
                      and isinstance(defs.get(op.dst.id), O.Var)), None)
        if outer is None:
            break
        found = defs[outer.dst.id]
    return found


def _reduction_loops(model: Model, site: WgmmaSite):
    """The loops the accumulator sums over: those across which it carries its value (for a
    partial promoted into a carried variable, also the ones that variable sums over). A loop
    is a reduction loop by the data flow of its accumulator, not by nesting: a persistent
    kernel's tile loop around a freshly zeroed accumulator is not one. A fact of the IR,
    decided once per site and model (`_siblings` asks it of every pair of sites)."""
    # keyed by the site's program point (Site.seq, a value; one site per wgmma op)
    memo = model.__dict__.setdefault("_wgmma_reduction_loops", {})
    got = memo.get(site.site.seq)
    if got is None:
        got = memo[site.site.seq] = _reduction_loops_of(model, site)
    return list(got)


def _reduction_loops_of(model: Model, site: WgmmaSite):
    defs = model.value_defs()
    # an overwriting wgmma (scale-d = 0) keeps nothing of its accumulator's old value, so
    # that accumulator sums over no loop, wherever it is defined: only a variable it is
    # promoted into carries its K blocks across iterations
    chains = [] if site.op.overwrite else [_acc_chain(defs, site.op.acc.id)]
    promoted = _promoted_into(model, site.op.acc.id)
    if promoted is not None:
        chains.append(_acc_chain(defs, promoted.result.id))
    return [s for s in site.site.loops()
            if any(_carried_across(c, s.op, defs) for c in chains)]


def _siblings(model: Model, site: WgmmaSite, name: str) -> list[WgmmaSite]:
    """The wgmma sites that sum into one accumulator and read the same tensor's k: together
    they must multiply every k once, so k-once is checked over their union. Either the same
    accumulator over the same reduction loops (a stage holding several K slices issues one
    wgmma per slice), or sites whose accumulators are one chain from the same initial value
    (`_acc_chain`): a loop's last iteration peeled behind it (FA3-order attention's last
    P V), each such site outside an `ag.when` the others are not in (the count takes each
    instance to run once); the same variable over other loops is such a chain too (a loop
    accumulating in place into its carried O, the peeled site after the loop into the same
    variable: early_k_release with the late rescale). A site reading another tensor
    (acc = A@B^T + X@Y^T) is a reduction of its own."""
    loops = [s.op for s in _reduction_loops(model, site)]
    key = _k_key(model, site, name)
    if key is None:
        return [site]
    defs = model.value_defs()
    root = _acc_chain(defs, site.op.acc.id)[-1]
    # the `ag.when` blocks around a site, by their condition's IR name: blocks on one
    # condition run together, which is what the count of instances below needs
    whens = {sc.op.cond.id for sc in site.site.scopes if sc.kind == "if"}
    out, own = [], []
    for other in model.wgmmas:
        if other.site.role is not site.site.role or _k_key(model, other, name) != key:
            continue
        other_loops = [s.op for s in _reduction_loops(model, other)]
        same_loops = len(other_loops) == len(loops) and \
            all(x is y for x, y in zip(other_loops, loops))
        if other.op.acc.id == site.op.acc.id and other.acc_def_seq == site.acc_def_seq \
                and same_loops:
            out.append(other)
            own.append(other)
        elif (other.op.acc.id != site.op.acc.id or not same_loops) and \
                _acc_chain(defs, other.op.acc.id)[-1] == root and \
                {sc.op.cond.id for sc in other.site.scopes if sc.kind == "if"} == whens:
            # one chain from the same initial value: another accumulator of it, or the same
            # variable accumulated in place over other loops (early_k_release's P V: inside
            # the KV loop into the loop's own O, then the peeled last one after it, h328)
            out.append(other)
    if not any(o is site for o in out):
        return [site]
    if len(own) < len(out) and not _one_continuation(model.kernel, defs, out):
        # sites of one chain count as one reduction only when the chain is the accumulator's
        # one value: a value read mid-chain (stored before the last product) would miss the
        # later sites' k, so each site's k-once stands alone
        return own
    return out


def _one_continuation(kernel, defs: dict, sites: list[WgmmaSite]) -> bool:
    """Whether every value of the sites' accumulator chains that comes before another site's
    accumulator is read only to continue the chain (by a wgmma accumulating into it in place,
    by wgmma synchronization, by an op making another value of the chains: the rescale
    `o * alpha`, a variable's initial value or assignment), or, for a variable, after all the
    sites once the chain's newest value has been assigned to it in the same region (a
    persistent walk's `o` read by the epilogue). Any other read (`acc2 = acc * 1.0;
    wgmma(.., acc2); store(acc)`) sees a partial product."""
    chains = [_acc_chain(defs, o.op.acc.id) for o in sites]
    values = {v for ch in chains for v in ch}
    before = {v for ch in chains for v in ch[1:]}
    # a rescale assigned back to a variable of the chains (`o = o * alpha` after the step
    # that retired o's wgmma: FA3's rescale_o after its wait, AttentionSchedule.rescale_late)
    # continues the chain as the rescale at the issue does (`_acc_chain` follows that one):
    # its result is a value of the chains, read once to continue them
    values |= _rescales_assigned_into(kernel, defs, values)
    # the sites' wgmma ops by program point (a value: the path of op and region indices from
    # the kernel's body, as check_fills numbers assignments); a wgmma has no result to name it
    ops = _points_of(kernel, [o.op for o in sites])
    seen: set[tuple[int, ...]] = set()
    # a value whose current content a chain op has already continued from (read by a
    # variable's initial value, a rescale, an assignment): a second such read forks the chain
    # (two accumulators from one zeros tile, each with part of K) until it is assigned anew
    consumed: set[int] = set()

    def region(r, point: tuple[int, ...], complete: set) -> set | None:
        """The variables holding the finished product at the region's end, or None when a
        value is read mid-chain or continued twice."""
        complete = set(complete)
        for i, op in enumerate(r.ops):
            if point + (i,) in ops:
                seen.add(point + (i,))
            if isinstance(op, O.Wgmma):
                reads = [v for v in op.operands() if v.id in before and v is not op.acc]
                if point + (i,) in ops and len(seen) == len(ops):
                    # the last site accumulated in place into a variable of the chains (its
                    # operand unscaled: the rescale was assigned before, rescale_late): the
                    # variable holds the finished product, as after an assignment of it
                    complete.add(op.acc.id)
            elif isinstance(op, (O.WgmmaFence, O.FenceOperands)):
                reads = []
            elif isinstance(op, O.Assign) and op.dst.id in values:
                reads = []
                if seen and len(seen) < len(ops) and op.src.id not in values:
                    # between the sites a variable of the chains takes a value made outside
                    # them (`o_old = o + 0; wgmma(.., o); o = o_old * alpha`): the k that
                    # the sites before accumulated into it is dropped, so the chain breaks
                    return None
                if op.src.id in before:
                    if op.src.id in consumed:
                        return None
                    consumed.add(op.src.id)
                consumed.discard(op.dst.id)
                if len(seen) == len(ops) and op.src.id in values and \
                        (op.src.id not in before or op.src.id in complete):
                    complete.add(op.dst.id)    # the variable now holds the finished product
                else:
                    complete.discard(op.dst.id)
            elif any(x.id in values for x in op.results()):
                reads = []
                for v in op.operands():
                    if v.id in before:
                        if v.id in consumed:
                            return None
                        consumed.add(v.id)
            else:
                reads = [v for v in op.operands() if v.id in before and v.id not in complete]
            if reads:
                return None
            for j, inner in enumerate(op.regions()):
                # one pass, in program order: a loop body that starts a fresh accumulator
                # from the same zeros each unit (a persistent walk) forks nothing at once
                got = region(inner, point + (i, j), complete)
                if got is None:
                    return None
                if isinstance(op, (O.Produce, O.Consume)):
                    complete = got             # its body runs once, every time
        return complete
    return region(kernel.body, (), set()) is not None


def _rescales_assigned_into(kernel, defs: dict, values: set[int]) -> set[int]:
    """The results of `v * factor` (v a value of the chains, the factor a tile of another
    shape: `_acc_chain`'s rescale) that an assignment stores into a variable of the chains."""
    out: set[int] = set()
    for op in kernel.body.walk():
        if not isinstance(op, O.Assign) or op.dst.id not in values:
            continue
        src = defs.get(op.src.id)
        if not isinstance(src, O.Elementwise) or src.fn != "mul" or len(src.args) != 2:
            continue
        shape = tuple(src.result.type.shape)
        full = [a for a in src.args if isinstance(a.type, TileType)
                and tuple(a.type.shape) == shape]
        if len(full) == 1 and full[0].id in values:
            out.add(op.src.id)
    return out


def _read_mid_reduction(model: Model, site: WgmmaSite) -> list[Obligation]:
    """k-once counts the k a site multiplies into its accumulator; the count means something
    only if what leaves the chain is its finished value. Inside a loop the accumulator sums
    over (`_carried_across`), every value of its chain holds a partial product at every
    iteration but the last, so an op there that reads one without continuing the chain (a
    copy the epilogue stores, `prev = acc + 0` added back after the wgmma, a partial O fed
    to anything) hands on a sum with the k of the iterations to come missing, or counts some
    k again once it flows back. `_one_continuation` asks the same of the reads between the
    sites of one chain, only where there are several (h311 review: a single site's loop, and
    the late rescale's loop variable, which is the wgmma's own operand and so no value
    `before` another site's, were never looked at). Refused here, whatever the read feeds
    (a read whose result is dead is refused too: sound, and no library kernel has one).
    A partial promoted into a sum (fp8 promotion, `acc = acc + part * s`): when promotion.py
    takes the sum (`group_of`), its `_linear` refuses such reads of the sum; else the
    per-site k-once counts the site over the loops of the variable it is promoted into, so
    the same question is asked of that variable's chain (the promotion continues it)."""
    loops = _reduction_loops(model, site)
    if not loops:
        return []
    defs = model.value_defs()
    # (the chain from its head, its values, the promotions' adds by result (IR names),
    # whether it is the sum a partial is promoted into)
    asks = []
    if not site.op.overwrite:
        chain = _acc_chain(defs, site.op.acc.id)
        asks.append((chain, _chain_values(model.kernel, defs, chain), set(), False))
    promoted = _promoted_into(model, site.op.acc.id)
    if promoted is not None and promotion.group_of(model, site) is None:
        chain = _acc_chain(defs, promoted.result.id)
        # the sum's variables: the promoted one and the copies regions make of it and assign
        # back (not every variable from the sum's initial value: a snapshot `snap = acc`
        # taken in the loop starts from that value too)
        values = _chain_values(model.kernel, defs, chain)
        # the promotions: an add of one of them and something else, assigned back into one
        adds = [defs.get(op.src.id) for op in model.kernel.walk()
                if isinstance(op, O.Assign) and op.dst.id in values]
        adds = {a.result.id for a in adds if isinstance(a, O.Elementwise) and a.fn == "add"
                and sum(x.id in values for x in a.args) == 1}
        asks.append((chain, values, adds, True))
    for chain, values, promotions, is_sum in asks:
        for loop in loops:
            if not is_sum and _overwritten_each_iteration(loop.op, chain):
                # every iteration starts the chain afresh (a partial a group's first wgmma
                # overwrites, gemm_fp8.interval_promoted_mma): refused only a read that a
                # wgmma accumulating into the chain may follow before the next overwrite
                bad = _read_before_accumulation(loop.op, values, promotions)
                if bad is not None:
                    return [_partial_read_obligation(model, site, loop, bad, is_sum,
                                                     restarted=True)]
                continue   # a loop nested in this one may still carry the chain
            if _carried_across(chain, loop.op, defs):
                bad = _partial_read(loop.op, values, promotions)
                if bad is not None:
                    return [_partial_read_obligation(model, site, loop, bad, is_sum)]
                break   # the outermost loop it sums over: the nested ones' bodies are in it
    return []


def _overwritten_each_iteration(loop: O.For, chain: list[int]) -> bool:
    """Whether `loop`'s body overwrites the chain's accumulator (a wgmma with scale-d = 0 on
    a value of `chain`) on every path through an iteration: outside any `ag.when` block and
    any nested loop (which may run zero times), the only ops here that may skip part of the
    body (a produce / consume step's body runs once each time).

    This asks whether the overwrite is on every path, not where it stands: a read before it
    in the body sees the value the previous iteration left, which `_read_before_accumulation`
    takes as finished (below); a read after it, before the iteration's other wgmma into the
    chain, is refused there."""
    return any(every and _restarts(op, chain) for op, every in _body_order(loop))


def _body_order(loop: O.For) -> list[tuple[O.Op, bool]]:
    """`loop`'s body in program order (pre-order, as Region.walk), each op with whether it
    runs on every path through an iteration (not inside an `ag.when` block or a nested loop
    of the body)."""
    out: list[tuple[O.Op, bool]] = []

    def walk(region, every: bool) -> None:
        for op in region.ops:
            out.append((op, every))
            for inner in op.regions():
                walk(inner, every and not isinstance(op, (O.If, O.For)))
    walk(loop.body, True)
    return out


def _restarts(op, values) -> bool:
    """A wgmma that overwrites (scale-d = 0) an accumulator of the chain `values`."""
    return isinstance(op, O.Wgmma) and op.overwrite and op.acc.id in values


def _read_before_accumulation(loop: O.For, values: set[int], promotions: set[int]):
    """In a loop that overwrites the chain on every path (`_overwritten_each_iteration`): the
    first op of the body that reads a value of the chain without continuing it (as
    `_partial_read`) and that a wgmma accumulating into the chain (scale-d = 1) may follow
    before an overwrite on every path does, going on around the back edge; or None.

    Why that is the partial-read rule here: the accumulator's value at an iteration's end (at
    the back edge) has every wgmma of the iteration in it, and each iteration restarts it, so
    no k of a later iteration can reach it: that value is finished, the sum of this group of
    blocks, which the k-once count (promotion.py's group) takes per iteration. A read sees
    that finished value exactly when no accumulation can come between it and the next
    restart: a read after the iteration's last accumulating wgmma (the promotion, which reads
    the group's own sum), or at the top of the body before the overwrite (the previous
    iteration's sum, as the promotion read it). A read between the overwrite and a later
    accumulating wgmma (a second K block of the group, a wgmma at the top of the body before
    the overwrite, reached around the back edge) sees a partial, as in a loop that carries
    the chain. An accumulation or overwrite inside an `ag.when` block or a nested loop may
    not run: such an accumulation counts as following the read, such an overwrite does not
    stop the search (sound: an overwrite that may be skipped restarts nothing)."""
    order = _body_order(loop)
    for i, (op, _) in enumerate(order):
        if not _reads_partial(op, values, promotions):
            continue
        for later, every in order[i + 1:] + order[:i]:
            if isinstance(later, O.Wgmma) and later.acc.id in values and not later.overwrite:
                return op
            if every and _restarts(later, values):
                break
    return None


def _chain_values(kernel, defs: dict, chain: list[int]) -> set[int]:
    """The values of an accumulator chain (`_acc_chain`) for `_read_mid_reduction`, closed
    under what continues it after the wgmma: a rescale assigned back (`o = o * alpha`,
    `_rescales_assigned_into`) and the variable a region makes of a chain value and assigns
    back into the chain (`with ag.when(c): acc = acc * f` is `v = var(acc)`, `v = v * f` in
    the block, `acc = v` after it: v takes the chain's value and hands it on, no read of a
    partial). A variable that is not assigned back (a snapshot carried out of the block) stays
    outside, so the read that fills it is still refused."""
    values = set(chain)
    while True:
        grown = values | _rescales_assigned_into(kernel, defs, values)
        grown |= {op.src.id for op in kernel.body.walk()
                  if isinstance(op, O.Assign) and op.dst.id in grown
                  and isinstance(defs.get(op.src.id), O.Var)
                  and defs[op.src.id].init.id in grown}
        if grown == values:
            return values
        values = grown


def _partial_read(loop: O.For, values: set[int], promotions: set[int]):
    """The first op in `loop`'s body that reads a value of the chain `values` without
    continuing it, or None (`_read_mid_reduction`)."""
    return next((op for op in loop.body.walk() if _reads_partial(op, values, promotions)),
                None)


def _reads_partial(op, values: set[int], promotions: set[int]) -> bool:
    """Whether `op` reads a value of the chain `values` without continuing it."""
    if isinstance(op, outflow._NO_DATA):
        return False
    reads = [v for v in op.operands() if v.id in values]
    if not reads:
        return False
    if isinstance(op, O.Wgmma):
        # accumulating into it in place continues the chain; an A or B operand does not
        return any(v is not op.acc for v in reads)
    if isinstance(op, O.Assign) and op.dst.id in values:
        return False   # the loop-carried update, a rescale assigned back (`o = o * alpha`)
    if isinstance(op, (O.Var, O.Elementwise)) and \
            any(x.id in values or x.id in promotions for x in op.results()):
        return False   # a variable of the chain taking its initial value, the rescale
    return True


def _partial_read_obligation(model: Model, site: WgmmaSite, loop, bad,
                             is_sum: bool, restarted: bool = False) -> Obligation:
    """The violated k-once of `_read_mid_reduction`: `bad` reads the chain in `loop`;
    `restarted`: a loop that overwrites the accumulator every iteration
    (`_read_before_accumulation`), where the read precedes an accumulation of the same
    iteration (or of the next, before its overwrite) rather than one of a later iteration."""
    op = site.op
    what = (f"the sum the wgmma at {op.loc} is promoted into" if is_sum else
            f"the accumulator of the wgmma at {op.loc}")
    where, missing, fix = (
        f"inside the loop at {loop.op.loc} it sums over", "the iterations still to come",
        f"read the accumulator after the loop at {loop.op.loc}")
    if restarted:
        where, missing, fix = (
            f"in the loop at {loop.op.loc}, which restarts it every iteration, where a wgmma "
            f"accumulating into it may follow before the next restart",
            "the wgmma still to come before the restart",
            "read it after the last wgmma accumulating into it before the next overwrite")

    def decode(zm, violated):
        wit = W.context(model, zm, site.site)
        wit["read_at"] = str(bad.loc)
        return W.placed(f"{what} is read at {bad.loc} {where}, by an op that does not "
                        f"continue its chain: that read sees a partial product (the k of "
                        f"{missing} are missing), and what it computes leaves k dropped or "
                        f"counted twice wherever it flows", wit), wit
    return Obligation("wgmma.k-once", op.loc, f"k of wgmma at {op.loc}: the accumulator is "
                      f"read only once its reduction is finished",
                      list(model.premises) + site.site.constraints(),
                      [("no read of a partial accumulator inside its reduction loop",
                        z3.BoolVal(False))], decode,
                      fix=f"{fix} (or fold the op into the chain: a rescale `acc = acc * f` "
                          f"assigned back)")


def _points_of(kernel, targets: list) -> set[tuple[int, ...]]:
    """The program points of the ops in `targets` (found by identity: equal wgmma ops at two
    places are two points)."""
    out: set[tuple[int, ...]] = set()

    def region(r, point: tuple[int, ...]) -> None:
        for i, op in enumerate(r.ops):
            if isinstance(op, O.Wgmma) and any(op is t for t in targets):
                out.add(point + (i,))
            for j, inner in enumerate(op.regions()):
                region(inner, point + (i, j))
    region(kernel.body, ())
    return out


def _guards(model: Model, site: WgmmaSite) -> list:
    """Conditions of the `ag.when` blocks between the outermost reduction loop and the wgmma:
    counting (iteration, k) pairs only shows coverage if the wgmma runs in every iteration."""
    loops = _reduction_loops(model, site)
    if not loops:
        return []
    inside = False
    out = []
    for scope in site.site.scopes:
        if scope is loops[0]:
            inside = True
        elif inside and scope.kind == "if":
            out.extend(scope.constraints)
    return out


def _k_once(model: Model, site: WgmmaSite, name: str) -> list[Obligation]:
    # an overwriting wgmma whose partial is promoted into an accumulator: k-once is the
    # promoted sum's (argus/verify/promotion.py), stated once for all its sites
    promoted = promotion.k_once(model, site, name)
    if promoted is not None:
        return promoted
    op = site.op
    loops = _reduction_loops(model, site)
    siblings = _siblings(model, site, name)
    index = next(i for i, s in enumerate(siblings) if s.op is op)
    several = len(siblings) > 1
    subject = (f"k of wgmma at {op.loc} over {len(loops)} loop(s)" +
               (f" and {len(siblings)} wgmma sites" if several else ""))
    # two instances that differ in (site, reduction-loop indices, k); everything else shared
    # keyed by the loop's index variable, its IR name (a value, stable while the kernel lives)
    sibling_loops = {s.op.var.id: s for o in siblings for s in _reduction_loops(model, o)}
    ren = [(s.var, fresh_int(f"{s.var}@2")) for s in sibling_loops.values()]
    sub = Substitution(ren)   # the second instance's terms (one set of C arrays for all)
    # the first instance: the site's own operand record (its obligations' m and k)
    first = _first_instance(model, site, name)
    if first is None:
        return []
    first_prem, t1, kk1, m, r1, _ = first
    obs = []
    self_pair = None   # the second instance's (own premises, k, kk) of site vs itself
    # injectivity against this site itself and every later sibling
    for other in siblings[index:]:
        second = _second_instance(model, other, m, sub, name)
        if second is None:
            continue
        prem2, t2, kk2 = second
        prem = first_prem + prem2
        if other is site:
            self_pair = second
        same_instance = z3.And([kk1 == kk2] + [a == b for s, (a, b) in
                                               zip(sibling_loops.values(), ren)
                                               if any(s.op is x.op for x in loops)]) \
            if other is site else z3.BoolVal(False)

        def decode_dup(zm, violated, kk2=kk2, other=other):
            wit = W.context(model, zm, site.site)
            i1 = {str(s.op.loc): value(zm, s.var) for s in loops}
            i2 = {str(s.op.loc): value(zm, b) for s, (_, b) in zip(sibling_loops.values(), ren)
                  if any(s.op is x.op for x in _reduction_loops(model, other))}
            k = value(zm, t1)
            wit.update({"k": k, "first": {"iteration": i1, "k_in_tile": value(zm, kk1)},
                        "second": {"iteration": i2, "k_in_tile": value(zm, kk2),
                                   "site": str(other.op.loc)}})
            return W.placed(f"global {name} = {k} is multiplied twice: at iteration {i1} "
                            f"k-in-tile {value(zm, kk1)} and at iteration {i2} k-in-tile "
                            f"{value(zm, kk2)}"
                            + (f" of the wgmma at {other.op.loc}" if other is not site else ""),
                            wit), wit
        obs.append(Obligation("wgmma.k-once", op.loc, subject + ": injective"
                              + (f" with {other.op.loc}" if other is not site else ""), prem,
                              [(f"distinct (site, iteration, k) give distinct {name}",
                                z3.Or(same_instance, t1 != t2))], decode_dup,
                              minimize=[s.var for s in loops] + [kk1]))
    # coverage: |domain| = sites x product of trip counts x K, image inside [0, |domain|),
    # |domain| >= K
    size = z3.IntVal(0)
    for o in siblings:   # each site: K values in each iteration of its reduction loops
        part = z3.IntVal(o.op.k_extent)
        for s in _reduction_loops(model, o):
            part = part * model.trip_term(s.op)
        size = size + part
    size = z3.simplify(size)
    extent = _field_extent(model, r1, name)

    def decode_range(zm, violated):
        wit = W.context(model, zm, site.site)
        k = value(zm, t1)
        d = value(zm, size)
        wit.update({"k": k, "k_in_tile": value(zm, kk1), "domain": d})
        if "k range covers the tensor" in violated:
            msg = (f"the loop multiplies {d} values of {name} but the tensor has "
                   f"{value(zm, extent)}: {name} = {d} .. {value(zm, extent) - 1} are never "
                   f"multiplied")
            if site.a_tile is not None:
                msg += (" (legal only where the A operand is zero: a causal mask's -inf "
                        "through exp; the verifier could not show A is zero there at the "
                        "iterations past the loop's end that would multiply them)")
        else:
            msg = f"{name} = {k} lies outside [0, {d}) (the {d} k values the loop visits)"
        return W.placed(msg, wit), wit

    split = _split_grid(model, site, t1, size, loops, kk1, extent) if extent is not None \
        else None
    if split is not None:
        # the reduction is split over a grid dimension (split-KV decode: each CTA owns a
        # contiguous range of K blocks, its partial is merged by another kernel): the CTA's
        # image is its own interval, and the intervals of consecutive program ids tile
        # [0, K) (a proof by induction over the program id, so no sum over the grid)
        obs.extend(_split_cover(model, site, subject, first_prem, t1, size, extent, split,
                                name, decode_range, index))
        claims = None
    else:
        claims = [(f"{name} in [0, |domain|)", z3.And(t1 >= 0, t1 < size))]
        if extent is not None and index == 0:
            claims.append(("k range covers the tensor", size >= _num(extent)))
    # An A operand computed in registers (FlashAttention's P) may skip k values on purpose:
    # a causal loop stops at the diagonal because the keys past it are masked to zero. A short
    # reduction there is proven when the skipped k are zero in A at the iterations that would
    # hold them (`_masked_past_the_loop`), else a warning (a mask the value facts do not
    # follow); from shared memory (a GEMM) it stays an error.
    cover = "k range covers the tensor"
    warn = (cover,) if site.a_tile is not None else ()
    if claims is not None:
        implied = _masked_past_the_loop(model, site, subject, loops, siblings, name, size,
                                        extent, self_pair, ren, sub) \
            if site.a_tile is not None and len(claims) == 2 else None
        if implied is None:
            obs.append(Obligation("wgmma.k-once", op.loc, subject + ": covers [0, K)",
                                  first_prem, claims, decode_range,
                                  minimize=list(model.params.values()), warn_claims=warn))
        else:
            obs.append(Obligation("wgmma.k-once", op.loc, subject + ": k in [0, |domain|)",
                                  first_prem, claims[:1], decode_range,
                                  minimize=list(model.params.values())))
            obs.append(Obligation(
                "wgmma.k-once", op.loc, subject + ": covers [0, K)", first_prem, claims[1:],
                decode_range, minimize=list(model.params.values()), warn_claims=warn,
                implied_by=implied, implied_why=(
                    "the k past the loop's end are zero in A: the map (iteration, k in tile) "
                    "-> k moves by the block's K (the sum over the loop's sites) per "
                    "iteration inside one window of that K, and at every iteration past the "
                    "last one whose k lies in [|domain|, K) the A operand is zero (a mask's "
                    "-inf through exp)")))
    guards = _guards(model, site)
    if guards:
        # the count above assumes the wgmma runs in every iteration of its reduction loops
        outer = [c for sc in site.site.scopes if sc.kind != "if" for c in sc.constraints]

        def decode_guard(zm, violated):
            wit = W.context(model, zm, site.site)
            it = {str(s.op.loc): value(zm, s.var) for s in loops}
            wit["iteration"] = it
            return W.placed(f"the wgmma is skipped at iteration {it} by an ag.when inside its "
                            f"reduction loop, so that iteration's k values are never "
                            f"multiplied", wit), wit
        obs.append(Obligation("wgmma.k-once", op.loc, subject + ": runs in every iteration",
                              list(model.premises) + outer,
                              [("every enclosing ag.when holds", z3.And(guards))],
                              decode_guard, minimize=[s.var for s in loops]))
    return obs


def _second_instance(model: Model, other: WgmmaSite, m, sub: Substitution, name: str):
    """(premises, k, k in tile) of a second instance of `other`'s A operand at row m: its
    loops' variables renamed by `sub`, a fresh k in tile, the record built afresh (auxiliaries
    of its own: two instances never share one); None when its A has no `name`. The premises
    are the instance's own, to be joined to a first instance's."""
    kk2 = fresh_int("kk")
    r2 = model.wgmma_a(other, m, kk2)
    f2 = r2.fields.get(name)
    if f2 is None:
        return None
    prem = [sub(c) for c in other.site.constraints()] + [sub(c) for c in r2.cond] + \
        [sub(c) for c in f2.cond] + [kk2 >= 0, kk2 < other.op.k_extent, sub(r2.defined)]
    return prem, sub(f2.term), kk2


def _first_instance(model: Model, site: WgmmaSite, name: str):
    """(premises, k, k in tile, m, A's record, its auxiliaries) of the site's own operand
    record (its obligations' m and k), or None when its A has no `name`."""
    m, _, kk, rec, _, own = _operands(model, site)
    f = rec.fields.get(name)
    if f is None:
        return None
    prem = list(model.premises) + site.site.constraints() + list(rec.cond) + list(f.cond) + \
        [m >= 0, m < 64, kk >= 0, kk < site.op.k_extent, rec.defined]
    return prem, f.term, kk, m, rec, own


def _masked_past_the_loop(model: Model, site: WgmmaSite, subject, loops, siblings, name, size,
                          extent, self_pair, ren, sub):
    """`implied_by` of k-once's coverage claim for an A operand in registers whose reduction
    loop stops short of K (a causal loop at the diagonal), or None when the argument does not
    apply. Obligations solved only for this (not reported themselves: the coverage claim
    is, proven from them or solved on its own), over the loop's sites (the siblings inside
    the one reduction loop; the others, a last iteration peeled behind it, are outside every
    loop) whose K sum to the block's K_b (FP8 attention's P V: one site per column atom of
    V^T, 3 x 64 keys at block_n 192, 7 x 32 at 224):

      * block-shifted: for two instances of one site, (j, kk) and (j2, kk2), the same kk
        gives k's K_b * (j - j2) apart;
      * window: k - j * K_b differs by less than K_b between any two instances of the loop's
        sites (one window of K_b values, the same for every iteration). With the injectivity
        each iteration's k are then one contiguous block of K_b, the next iteration's block
        right after it: the loop's k are one contiguous run and the iteration j + e would
        multiply k + e * K_b. (k = lo + (j - start) * K_b + kk, affine, is the common case;
        FP8 attention's P read in the accumulator's order, wgmma a_acc_order, has
        k = j * K_b + c_atom + acc_order_col(kk): a permutation inside each block, not
        affine in kk, and block-shifted all the same);
      * masked: for every site of the loop, iteration j, k in tile and e >= 1 whose
        k + e * K_b lies in [|domain|, K), A is zero at iteration j + e (its `is_zero` fact,
        transfer/values.py: a mask's -inf through a positive scale, a subtraction and exp).

    With the proven injectivity and range (the loop's and the peeled sites' k are exactly
    [0, |domain|), so the run ends at or before |domain|), every k of [|domain|, K) is the k
    of the run's last block, on one of the loop's sites, plus e * K_b: one the loop, run
    further, would multiply by zero, so skipping those iterations changes no sum. The zero
    fact is a function of the iteration and the element (index values and the model's
    variables) and of no auxiliary of the record's conditions, so it can be taken at an
    iteration the loop does not run."""
    if len(loops) != 1 or self_pair is None:
        return None
    loop = loops[0]
    if not (isinstance(model.scalar(loop.op.step), int) and model.scalar(loop.op.step) == 1):
        return None
    j = loop.var
    j2 = next((b for a, b in ren if a.eq(j)), None)
    if j2 is None:
        return None
    inside = []
    for o in siblings:
        o_loops = _reduction_loops(model, o)
        if not o_loops:
            continue   # peeled: its k are counted in |domain|, not shifted
        if len(o_loops) != 1 or o_loops[0].op is not loop.op:
            return None
        inside.append(o)
    # each site of the loop: its first instance (this site's is k-once's own) and a second
    # one at the renamed iteration (this site's: the injectivity's self pair)
    firsts, seconds = [], []
    for o in inside:
        first = _first_instance(model, o, name)
        if first is None:
            return None
        second = self_pair if o is site else _second_instance(model, o, first[3], sub, name)
        if second is None:
            return None
        zero = first[4].fields.get("is_zero")
        if zero is None or not zero.is_point:
            return None
        held = occurring_in([zero.term], first[5])
        if held and occurring_in(list(first[4].cond) + [first[4].defined], held):
            return None   # the fact reads an auxiliary the record's conditions constrain
        firsts.append(first + (zero.term,))
        seconds.append(second)
    Kb = sum(o.op.k_extent for o in inside)
    out = []
    for i, (o, (prem1, t1, kk1, m1, _, _, z)) in enumerate(zip(inside, firsts)):
        prem2, t2, kk2 = seconds[i]
        shift = Obligation("wgmma.k-once", o.op.loc, subject + ": block-shifted by iteration",
                           prem1 + prem2, [("shift", z3.Implies(kk1 == kk2,
                                                                t1 - t2 == (j - j2) * Kb))],
                           lambda zm, v: ("not block-shifted", {}))
        out.append((shift, ("shift",)))
        for o2, (_, _, _, m2, _, _, _), (prem2b, t2b, _) in \
                list(zip(inside, firsts, seconds))[i:]:
            offset = (t1 - j * Kb) - (t2b - j2 * Kb)
            same_row = [] if m2.eq(m1) else [m2 == m1]
            out.append((Obligation(
                "wgmma.k-once", o.op.loc, subject + f": one window of K with {o2.op.loc}",
                prem1 + prem2b + same_row, [("window", z3.And(offset < Kb, offset > -Kb))],
                lambda zm, v: ("not one window", {})), ("window",)))
        e = fresh_int("past")
        key = t1 + e * Kb
        masked = Obligation("wgmma.k-once", o.op.loc, subject + ": zero past the loop",
                            prem1 + [e >= 1],
                            [("masked", z3.Or(key < size, key >= _num(extent),
                                              substitute(z, (j, j + e)) != 0))],
                            lambda zm, v: ("not masked", {}))
        out.append((masked, ("masked",)))
    return tuple(out)


def _split_grid(model: Model, site: WgmmaSite, t1, size, loops, kk1, extent):
    """(program id, its extent, lo) when the k a CTA multiplies starts at an offset, and runs
    for a length, that depend on one program id that the reduction's extent does not (a
    split-K / split-KV grid dimension), else None. `lo` is k at the first iteration of every
    reduction loop and k-in-tile 0: the CTA's interval is claimed to be [lo, lo + |domain|).
    Only when lo, |domain| and the extent are terms of that program id, of the program ids
    the extent depends on and of the kernel's scalar parameters, through values read from
    memory at addresses of those alone (paged decode's sequence length seq_lens[b], its block
    table), nothing per thread or per iteration: the claims below then speak of the grid
    alone, every other program id fixed. A program id the extent depends on (paged decode's
    sequence b: its length is its own) indexes separate reductions, never the split."""
    pid_vars = [(v, hi) for v, lo, hi in model.grid_vars
                if model.vars.get(str(v)) is not None and model.vars[str(v)].kind == "pid"
                and isinstance(lo, int) and lo == 0]
    starts = [(s.var, _num(model.scalar(s.op.start))) for s in loops] + [(kk1, z3.IntVal(0))]
    lo = z3.simplify(z3.substitute(t1, *starts))
    ext = _num(extent)
    # a split's share is a function of its id (its first k and, with a shorter last split,
    # its length): a CTA whose start depends on its id but whose length does not (a walk
    # that rotates the whole K per CTA) keeps the per-CTA coverage claim
    size_s = z3.simplify(size)
    pids = [(v, hi) for v, hi in pid_vars if mentions(t1, v) and mentions(lo, v)
            and mentions(size_s, v) and not mentions(ext, v)]
    if len(pids) != 1:
        return None
    pid, hi = pids[0]
    # the other program ids are fixed between neighbouring splits; a split's range may depend
    # on one only where the extent does too (its own reduction: paged decode's sequence),
    # never on one that K does not follow (a CTA's keys shifted by its head: per-CTA claims)
    allowed = {str(v) for v in model.params.values()} | {str(pid)} | \
        {str(v) for v, _ in pid_vars if mentions(ext, v)}
    for term in (lo, size_s, ext):
        if not free_consts(term) <= allowed:
            return None
    return pid, _num(hi), lo


def _split_cover(model: Model, site: WgmmaSite, subject, first_prem, t1, size, extent, split,
                 name, decode_range, index) -> list[Obligation]:
    """k-once's coverage for a reduction split over program id `pid` (see _split_grid): each
    CTA multiplies k in [lo(pid), lo(pid) + size(pid)) (with injectivity: exactly that
    interval), the first program id starts at 0 and has keys, a CTA with keys follows one with
    keys that ends where it starts (no gap, no overlap: together with the interval claim the
    CTAs' k are disjoint), and the last CTA with keys reaches the tensor's extent. Disjointness
    is its own claim (an error even where a short coverage is a warning): the CTAs with keys
    are a prefix of the program ids whose ranges rise."""
    op = site.op
    pid, hi, lo = split
    nxt = pid + 1
    lo_n, size_n = z3.substitute(lo, (pid, nxt)), z3.substitute(size, (pid, nxt))
    lo_0, size_0 = z3.substitute(lo, (pid, z3.IntVal(0))), z3.substitute(size, (pid, z3.IntVal(0)))
    ext = _num(extent)
    cover = "k range covers the tensor"
    warn = (cover,) if site.a_tile is not None else ()
    obs = [Obligation("wgmma.k-once", op.loc, subject + f": k of this CTA in [lo, lo + |domain|)"
                      f" of program id {pid}", first_prem,
                      [(f"{name} in [lo, lo + |domain|)", z3.And(t1 >= 0, t1 >= lo,
                                                                 t1 < lo + size))],
                      decode_range, minimize=list(model.params.values()))]
    if index != 0:
        return obs

    def decode_split(zm, violated):
        wit = {"program_id": value(zm, pid), "lo": value(zm, lo), "domain": value(zm, size),
               "next_lo": value(zm, lo_n), "next_domain": value(zm, size_n),
               "extent": value(zm, ext)}
        return W.by_site(model, site.site,
                         f"program id {pid} = {wit['program_id']} multiplies {name} in "
                         f"[{wit['lo']}, {wit['lo'] + wit['domain']}), the next one "
                         f"[{wit['next_lo']}, {wit['next_lo'] + wit['next_domain']}), the "
                         f"tensor has {wit['extent']}: violated: {', '.join(violated)}",
                         wit), wit
    last = z3.And(size > 0, z3.Or(nxt >= hi, size_n <= 0))
    # disjoint: the CTAs with keys form a prefix of the program ids and their ranges rise
    # (a CTA with keys follows one with keys, above its range), so any two are disjoint; a
    # claim between consecutive CTAs with keys alone let two CTAs share keys across an empty
    # one between them (a key in two partials), which the coverage claim caught only as a
    # warning where A is in registers
    # (an empty reduction, extent 0, has nothing to cover: a paged sequence of length 0)
    claims = [("the program ids' k ranges are disjoint", z3.Implies(
        z3.And(nxt < hi, size_n > 0), z3.And(size > 0, lo_n >= lo + size))), (cover, z3.Or(
        ext <= 0, z3.And(
            lo_0 <= 0, size_0 > 0,
            z3.Implies(z3.And(nxt < hi, size_n > 0), z3.And(size > 0, lo_n == lo + size)),
            z3.Implies(last, lo + size >= ext))))]
    obs.append(Obligation("wgmma.k-once", op.loc, subject + f": covers [0, K) over program id "
                          f"{pid}", list(model.premises), claims, decode_split,
                          minimize=list(model.params.values()), warn_claims=warn))
    return obs


