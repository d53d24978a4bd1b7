"""TMA copies under complementary guards inside one produce step (MoeFp8Schedule.pair_multicast).

A produce step arms its full barrier with the bytes its TMA copies deliver, so those bytes must
be known when the step is armed. A copy under a guard is allowed in one form only: two guards
at the top of the step's body that are complements of one comparison (`x > c` and `x <= c`,
`==`/`!=`, `<`/`>=`: one Arith each, on the same value and the same constant or value), each
holding only unconditional copies, the two delivering the same bytes to each CTA (a multicast
box counted once from each CTA of the cluster, as unguarded: every CTA of the cluster must then
take the same branch, which the verifier proves, `rank_free`). Exactly one of the two runs, so
the step delivers its unguarded bytes plus one branch's, whichever it is. Shared by lowering
(argus/lower/pipeline.py: the expect_tx count) and the verifier (check_layout's tma.tx-bytes).
"""

from argus.ir import ops as O
from argus.ir.core import Kernel, Region

COMPLEMENT = {"gt": "le", "le": "gt", "lt": "ge", "ge": "lt", "eq": "ne", "ne": "eq"}


def definitions(kernel: Kernel) -> dict[int, O.Op]:
    """The op defining each value id (Const and Arith: what the guard comparison needs)."""
    out = {}
    for op in kernel.walk():
        if isinstance(op, (O.Const, O.Arith)):
            out[op.result.id] = op
    return out


def _operand_key(v, defs: dict) -> tuple:
    d = defs.get(v.id)
    if isinstance(d, O.Const):
        return ("const", d.value)
    return ("value", v.id)


def box_bytes(load: O.TmaLoad) -> int:
    """The bytes of `load`'s box as its destination view and box say (the verifier's count)."""
    t = load.dst.type
    n = 1
    if load.box:
        for e in load.box:
            n *= e
    else:
        n = t.shape[0] * t.shape[1]
    return n * t.dtype.bytes


def copy_bytes(load: O.TmaLoad, cluster_size: int, size=None) -> int:
    """The bytes `load` delivers to each CTA's full barrier (a multicast box once from each
    CTA of the cluster: every CTA runs the same copy); size(load): one box's bytes (default:
    the op's `bytes`, set by lowering)."""
    one = size(load) if size is not None else load.bytes
    return one * (cluster_size if load.multicast else 1)


def guarded_pairs(body: Region, defs: dict, cluster_size: int, size=None):
    """(pairs, problem) for a produce step's body: pairs = [(If, If, bytes of either)] of the
    complementary guards holding TMA copies, or problem, a sentence saying why the step's
    guarded copies are not of the allowed form (None when they are, or when there are
    none)."""
    guarded = [op for op in body.ops if isinstance(op, O.If)
               and any(isinstance(t, O.TmaLoad) for t in op.body.walk())]
    nested = [t for op in body.ops if isinstance(op, (O.For, O.If))
              for ctl in op.body.walk() if isinstance(ctl, (O.If, O.For))
              for t in ctl.body.walk() if isinstance(t, O.TmaLoad)]
    loops = [t for op in body.ops if isinstance(op, O.For)
             for t in op.body.walk() if isinstance(t, O.TmaLoad)]
    if nested or loops:
        return [], "a TMA copy under ag.range, or under a guard inside another guard"
    if not guarded:
        return [], None
    keys = {}
    for g in guarded:
        c = defs.get(g.cond.id)
        if not isinstance(c, O.Arith) or c.fn not in COMPLEMENT:
            return [], "a guard that is not one comparison"
        if any(getattr(getattr(v, "type", None), "dtype", None) is None
               or v.type.dtype.is_float for v in (c.lhs, c.rhs)):
            # NaN fails both `x > c` and `x <= c`: neither copy would run and the step's
            # barrier would wait forever
            return [], "a guard comparing floats (NaN takes neither branch)"
        keys[g] = (c.fn, _operand_key(c.lhs, defs), _operand_key(c.rhs, defs))
    pairs, left = [], list(guarded)
    while left:
        g = left.pop(0)
        fn, lhs, rhs = keys[g]
        partner = next((h for h in left if keys[h] == (COMPLEMENT[fn], lhs, rhs)), None)
        if partner is None:
            return [], f"a guard ({fn}) without its complement in the same step"
        left.remove(partner)
        nbytes = [sum(copy_bytes(t, cluster_size, size) for t in x.body.walk()
                      if isinstance(t, O.TmaLoad)) for x in (g, partner)]
        if nbytes[0] != nbytes[1]:
            return [], (f"complementary guards whose copies deliver {nbytes[0]} and "
                        f"{nbytes[1]} bytes")
        pairs.append((g, partner, nbytes[0]))
    return pairs, None


def step_bytes(body: Region, defs: dict, cluster_size: int,
               size=None) -> tuple[int, str | None]:
    """(bytes each CTA's full barrier gets from a produce step, problem or None)."""
    pairs, problem = guarded_pairs(body, defs, cluster_size, size)
    if problem:
        return 0, problem
    inside = {id(t) for g, h, _ in pairs for x in (g, h) for t in x.body.walk()}
    plain = sum(copy_bytes(t, cluster_size, size) for t in body.walk()
                if isinstance(t, O.TmaLoad) and id(t) not in inside)
    return plain + sum(b for _, _, b in pairs), None


def rank_free(kernel: Kernel, value, cluster_size: int) -> bool:
    """Whether every CTA of a cluster computes `value` alike: no cluster rank in its def
    chain, and the grid id only as pid // cluster_size (the cluster's index: the CTAs of a
    cluster are consecutive ids). A variable's chain is its init and every assignment to it;
    loads read the same memory in every CTA only from tensors the kernel never writes (a store
    or atomic of another CTA may land between the two CTAs' reads), so a load of a written
    tensor, an atomic's result, shared-memory contents (anything reached from a buffer) and
    the thread index are refused too. Syntactic and conservative: anything else the chain
    reaches from the grid id is refused."""
    producers, assigned, written = {}, {}, set()
    for op in kernel.walk():
        for r in op.results():
            producers[r.id] = op
        if isinstance(op, O.Assign):
            assigned.setdefault(op.dst.id, []).append(op.src)
        if isinstance(op, (O.Store, O.AtomicAdd, O.AtomicFetchAdd, O.TmaStore)):
            written.add(op.tensor.id)
    seen, todo = set(), [value]
    while todo:
        v = todo.pop()
        if v.id in seen:
            continue
        seen.add(v.id)
        todo += assigned.get(v.id, [])
        op = producers.get(v.id)
        if op is None:
            continue
        if isinstance(op, (O.ClusterRank, O.GridIds, O.ThreadIndex, O.AtomicFetchAdd,
                           O.SmemAlloc, O.SmemSlice)):
            return False
        if isinstance(op, (O.Load, O.LoadScalar, O.Gather)) and op.tensor.id in written:
            return False
        if isinstance(op, O.Arith) and op.fn == "floordiv" and \
                isinstance(producers.get(op.lhs.id), O.GridIds):
            c = producers.get(op.rhs.id)
            if isinstance(c, O.Const) and c.value == cluster_size:
                continue        # the cluster's index
            return False
        todo += list(op.operands())
    return True
