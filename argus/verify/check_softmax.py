"""softmax.stats: an online softmax rescales and normalizes with its own running statistics.

Job (INVARIANTS.md §4 class 17, and the "missing final division" the tags cannot see): the
online softmax keeps, per row, a running max m and a running sum l = sum_j exp(s_j - m) over
the keys seen so far; the output accumulator O = sum_j exp(s_j - m) v_j is kept relative to
the *current* m. When a block raises the max to m', both are rescaled by alpha =
exp(m - m'), the block's P = exp(s - m') is added, and at the end O is divided by l. Three
things can silently go wrong and give plausible numbers: a rescale that converts from another
max than the one O (or l) is relative to (a stale or the new max, a forgotten rescale), an
addition of terms relative to two different maxima, and an output stored without the final
division (or divided by another statistic's sum).

A small forward data flow over the IR, separate from the tags (as check_fills is), gives each
tile an abstract value naming the statistic it is relative to, by *identity* (a token per
value; a `var` starts as its initial value's token and `assign` gives it the source's):

  exp(x - m) with m a broadcast row vector          REL(m)      (P, a row sum of P)
  exp(a - b) of two row vectors                      RESCALE(a -> b)   (alpha)
  REL(a) * RESCALE(a -> b)                           REL(b), online    (else: wrong statistics)
  REL(a) + REL(a), wgmma(P: REL(a), V, O: REL(a))    REL(a)            (else: mixed maxima)
  1 / l with l: REL(a)                               INV(a)
  REL(a) * INV(a), REL(a) / l with l: REL(a)         NORMALIZED        (else: other statistics)
  zeros (an accumulator's start)                     ZERO (relative to anything)

A loop is walked twice: once to learn what its carried variables hold at the end of an
iteration, whose tokens are then mapped back to the variables that carry them (the running max
assigned `m = m_new` carries m_new's token into the next iteration), and again from that head
state, reporting. An online (rescaled) accumulator that reaches a store or a shared-memory
staging write still REL is stored unnormalized. An online accumulator left relative to a max
the iteration made and no variable carries on (`m = m`: the running max never advances) is
kept as a "dropped" statistic, so the next block's rescale, converting from the variable's
stale value, is reported (with the line of the self-assignment, which tracing records no op
for); a value never rescaled may be relative to a max reloaded every block, and stays
unknown. Before those two walks the loop's first two iterations are walked from the state
it is entered with, reporting (`first_iterations`): a loop entered with a statistic made
before it (FA3's overlap order peels block 0) has a head state that loses any carried value a
bug makes disagree with the entry, which the steady walk then never looks at. Values the flow
does not recognize are unknown and never reported, so kernels without an online softmax have
no finding.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.types import TileType
from argus.verify import witness as W
from argus.verify.model import Model
from argus.verify.obligation import Finding
from argus.verify.requires import required_positive as _required_positive

ZERO, NORM = ("zero",), ("norm",)


def obligations(model: Model) -> tuple[list, list[Finding]]:
    return [], _Flow(model).findings + _fold_findings(model)


def _fold_findings(model: Model) -> list[Finding]:
    """The folded scale (FA3's softmax diet: `exp2(s * c - m)` with the running max m taken
    of the raw scores and scaled after, `maximum(m_i, max(s) * c)`): max(s) * c is the max of
    s * c only for c > 0. For c < 0 it is the row's minimum, every exponent is >= 0 and grows
    with the spread of the scores (inf, then NaN), and a masked -inf score times c is +inf.
    A compile-time c is decided here (c <= 0: violated); a runtime scalar's sign is not known
    when the kernel is compiled (the model's `>= 1` premise on scalar parameters describes
    shapes, not a float's sign), so the fold holds only under the launch precondition c > 0:
    a warning naming it (argus.ops.attention guarantees it: `for_scale` runs any other scale
    unfolded)."""
    kernel = model.kernel
    defs = model.value_defs()
    params = {p.value.id: p.name for p in kernel.params}
    roles = W.roles_by_op(kernel)   # who runs a reported op (W.issuer)
    assigned = model.assigned_sources()

    def scaled(v):
        """(tile, scalar) when v = tile * scalar with a scalar (not tile) operand."""
        op = defs.get(v.id)
        if isinstance(op, O.Elementwise) and op.fn == "mul" and len(op.args) == 2:
            a, b = op.args
            if isinstance(a.type, TileType) and not isinstance(b.type, TileType):
                return a, b
            if isinstance(b.type, TileType) and not isinstance(a.type, TileType):
                return b, a
        return None

    def max_follow(v, op) -> list:
        """What v = max(x) * c is looked for through: maximum, a masking where's branches,
        conversions and loop-carried variables (their tile operands)."""
        if scaled(v) is not None:
            return []
        nxt: list = []
        if isinstance(op, O.Elementwise) and op.fn == "max":
            nxt = list(op.args)
        elif isinstance(op, O.Elementwise) and op.fn == "where" and len(op.args) == 3:
            nxt = list(op.args[1:])
        elif isinstance(op, (O.Convert, O.ConvertLayout, O.ExpandDims)):
            nxt = [op.src]
        elif isinstance(op, O.Var):
            nxt = [op.init] + assigned.get(v.id, [])
        return [x for x in nxt if isinstance(x.type, TileType)]

    def max_scaled_by(v) -> list:
        """The scalars c with v = max(x) * c for some row max max(x) (only whether c is
        among them is asked: the walk's order does not matter)."""
        out = []
        for x, _ in model.walk_defs(v, max_follow):
            got = scaled(x)
            if got is not None and isinstance(defs.get(got[0].id), O.Reduce) and \
                    defs[got[0].id].fn == "max":
                out.append(got[1])
        return out

    out: list[Finding] = []
    done: set = set()
    for op in kernel.walk():
        if not (isinstance(op, O.Elementwise) and op.fn in ("exp", "exp2", "exp2_approx")):
            continue
        arg = defs.get(op.args[0].id)
        if not (isinstance(arg, O.Elementwise) and arg.fn == "sub" and len(arg.args) == 2):
            continue
        a, m = arg.args
        got = scaled(a)
        if got is None or not isinstance(m.type, TileType):
            continue
        c = got[1]
        if not any(x.id == c.id for x in max_scaled_by(m)):
            continue
        key = (op.loc.file, op.loc.line)
        if key in done:
            continue
        done.add(key)
        subject = f"{op.fn} at {op.loc}: exponent s * c - m with m the row max of s times c"
        const = defs.get(c.id)
        if isinstance(const, O.Const):
            if float(const.value) > 0:
                out.append(Finding("softmax.stats", op.loc, subject, "proven"))
            else:
                out.append(Finding(
                    "softmax.stats", op.loc, subject, "violated",
                    f"the scale c = {const.value} is not positive: max(s) * c is then the "
                    f"row's minimum of s * c, not its maximum, so exp(s * c - m) is not <= 1 "
                    f"(it overflows, and a masked -inf score gives +inf) (in "
                    f"{W.issuer(roles.get(id(op)), 'every thread')[1]})",
                    {**W.issuer(roles.get(id(op)), "every thread")[0],
                     "element": "every row", "scale": const.value},
                    fix="take the row max after scaling (max(s * c)), or fold only a "
                        "positive scale"))
            continue
        who = params.get(c.id) or (f"the scalar defined at {defs[c.id].loc}" if c.id in defs
                                   else "a runtime scalar")
        stated = _required_positive(kernel, c)
        if stated is not None:
            # ag.require: checked on the host before every launch (runtime/preconditions.py)
            out.append(Finding("softmax.stats", op.loc, subject + f" (c = {who} > 0 by the "
                               f"launch precondition at {stated.loc})", "proven"))
            continue
        out.append(Finding(
            "softmax.stats", op.loc, subject, "warning",
            f"the row max is taken of the raw scores and scaled after by the runtime scalar "
            f"c = {who}: max(s) * c is the max of s * c only for c > 0, which the kernel does "
            f"not check; launch it with {who} > 0 only (for c < 0 every exponent is >= 0 "
            f"and overflows; a masked -inf score times c is +inf) (in "
            f"{W.issuer(roles.get(id(op)), 'every thread')[1]})",
            {**W.issuer(roles.get(id(op)), "every thread")[0],
             "element": "every row", "precondition": f"{who} > 0"},
            fix=f"state it, ag.require(ag.sym({who}) > 0, why), so that every launch checks "
                f"it (argus.ops.attention runs any other scale unfolded: "
                f"argus.ops.attention.for_scale), or take the row max after scaling"))
    return out


class _Flow:
    def __init__(self, model: Model):
        kernel = model.kernel
        self.state: dict[int, tuple] = {}   # value id -> abstract value (absent: unknown)
        self.tok: dict[int, object] = {}     # value id -> identity token of its content
        self.const: set[int] = set()         # scalar constants and constant tiles
        self.buf: dict[int, int] = {}        # smem view id -> buffer id
        self.defs: dict[int, object] = model.value_defs()   # shared: read only
        self.findings: list[Finding] = []
        self.roles = W.roles_by_op(kernel)   # who runs a reported op (W.issuer)
        self.rel_at: dict = {}               # max token -> the exp lines made relative to it
        self.report = True
        self._seen: set = set()
        self.kernel = kernel
        self.loop_now: O.For | None = None   # the loop being walked (innermost)
        self.iteration: str | None = None    # the iteration a finding is made in, when one
        self.steady: str | None = None       # the loop whose steady state is being walked
        self.region(kernel.body)

    # -- helpers ---------------------------------------------------------------------------
    def t(self, v):
        return self.tok.get(v.id, v.id)

    def s(self, v):
        return self.state.get(v.id)

    def set(self, v, st, tok=None) -> None:
        if st is None:
            self.state.pop(v.id, None)
        else:
            self.state[v.id] = st
        if tok is not None:
            self.tok[v.id] = tok

    def name(self, tok) -> str:
        op = self.defs.get(tok) if isinstance(tok, int) else None
        if isinstance(op, O.Var):   # a variable the loop does not reassign: its first value
            return f"the variable's value from {op.loc}"
        if op is not None:
            return f"this block ({op.loc})"
        if isinstance(tok, tuple) and tok[0] == "dropped":
            op = self.defs.get(tok[1])
            at = f" ({op.loc})" if op is not None else ""
            return (f"the previous block's new max{at}, which no variable carries into the "
                    f"next iteration")
        if isinstance(tok, tuple) and tok[0] == "prev":
            op = self.defs.get(tok[1])
            return f"the block before the previous one (the value the loop at {op.loc} " \
                f"carried into the iteration before)" if op is not None else \
                "the block before the previous one"
        if isinstance(tok, tuple) and tok[0] == "head":
            op = self.defs.get(tok[1])
            return f"the previous blocks (running value carried by the loop at {op.loc})" \
                if op is not None else "the previous blocks"
        return "another statistic"

    def made(self, tok) -> str:
        """Where values relative to the max `tok` were made (the exp(x - m) lines): a term
        relative to the wrong max is fixed there (`p = exp(s - m)` with the previous m)."""
        at = self.rel_at.get(tok)
        return f" (made relative to it at {', '.join(at[:3])})" if at else ""

    def fail(self, op, what: str, witness: dict, fix: str) -> None:
        if not self.report:
            return
        key = (op.loc.file, op.loc.line, what[:40])
        if key in self._seen:
            return
        self._seen.add(key)
        who, said = W.issuer(self.roles.get(id(op)), "every thread")
        witness = {**who, **witness}
        if self.iteration is not None:
            witness.setdefault("iteration", self.iteration)
            what = f"{what} (in {self.iteration})"
        elif self.steady is not None:
            witness.setdefault("iteration", self.steady)
        self.findings.append(Finding("softmax.stats", op.loc, f"{op.NAME} at {op.loc}",
                                     "violated", f"{what} (in {said})", witness, fix=fix))

    # -- the walk --------------------------------------------------------------------------
    def region(self, r: Region) -> None:
        for op in r.ops:
            self.op(op)

    def op(self, op) -> None:
        if isinstance(op, O.For):
            self.loop(op)
            return
        if isinstance(op, O.Const):
            self.const.add(op.result.id)
        elif isinstance(op, O.Full):
            self.const.add(op.result.id)
            if op.value == 0:
                self.set(op.result, ZERO)
        elif isinstance(op, O.SmemSlice):
            self.buf[op.result.id] = self.buf.get(op.buffer.id, op.buffer.id)
        elif isinstance(op, O.StMatrix):
            self.stored(op, op.src)
            self.set_buf(op.dst, self.s(op.src), self.t(op.src))
        elif isinstance(op, O.LdMatrix):
            b = self.buf.get(op.src.id, op.src.id)
            self.set(op.result, self.state.get(b), self.tok.get(b))
        elif isinstance(op, (O.Convert, O.ConvertLayout, O.ExpandDims, O.TileSlice)):
            self.set(op.result, self.s(op.src), self.t(op.src))
            if op.src.id in self.const:
                self.const.add(op.result.id)
        elif isinstance(op, O.Var):
            self.set(op.result, self.s(op.init), self.t(op.init))
        elif isinstance(op, O.Assign):
            self.state.pop(op.dst.id, None)
            self.set(op.dst, self.s(op.src), self.t(op.src))
        elif isinstance(op, O.Elementwise):
            self.elementwise(op)
        elif isinstance(op, O.Reduce):
            src = self.s(op.src)
            if op.fn == "sum" and src is not None and src[0] == "rel":
                self.set(op.result, ("rel", src[1], False))
        elif isinstance(op, O.Wgmma):
            self.wgmma(op)
        elif isinstance(op, O.Store):
            self.stored(op, op.value)
        for region in op.regions():
            self.region(region)

    def set_buf(self, view, st, tok) -> None:
        b = self.buf.get(view.id, view.id)
        if st is None:
            self.state.pop(b, None)
        else:
            self.state[b] = st
            self.tok[b] = tok

    def loop(self, op: O.For) -> None:
        # the values defined inside the loop, by IR name (a value is made inside iff its
        # defining op is: SSA)
        made = {r.id for x in op.body.walk() for r in x.results()}
        # variables assigned in the loop, and accumulators a wgmma updates in place there
        carried = [x.dst for x in op.body.walk() if isinstance(x, O.Assign)
                   and x.dst.id in self.defs and x.dst.id not in made] + \
            [x.acc for x in op.body.walk() if isinstance(x, O.Wgmma)
             and x.acc.id in self.defs and x.acc.id not in made]
        carried = list({v.id: v for v in carried}.values())
        before_state = {v.id: self.s(v) for v in carried}
        # a head token names the variable and the loop, by its index's IR name (a value)
        heads = {v.id: ("head", v.id, op.var.id) for v in carried}
        report = self.report
        outer, self.loop_now = self.loop_now, op
        pending = self.first_iterations(op, carried, heads, made) if report else []
        self.report = False
        self.region(op.body)                      # what an iteration leaves in the carried
        end = self.mapped(carried, heads, made)
        for v in carried:
            self.set(v, _join(before_state[v.id], end[v.id]), heads[v.id])
        self.report = report
        steady, self.steady = self.steady, f"the iterations of the loop at {op.loc} (its " \
            f"steady state)"
        self.region(op.body)                      # from the head state, reporting
        self.steady = steady
        # the first iterations' findings the steady walk did not make (it keeps its words)
        for key, finding in pending:
            if key not in self._seen:
                self._seen.add(key)
                self.findings.append(finding)
        end = self.mapped(carried, heads, made)
        self.loop_now = outer
        for v in carried:
            self.set(v, end[v.id], heads[v.id])

    def first_iterations(self, op: O.For, carried, heads, made) -> list:
        """Walk the loop's first two iterations from the state it is entered with, reporting.
        The head state the steady walk starts from joins the entry with what an iteration
        leaves, and a carried statistic the two disagree on is unknown there: FA3's
        overlapped loop enters with the block peeled in front of it (a running sum relative
        to that block's max, O still zero, the carried alpha from the initial max), and a bug
        that leaves a carried value unknown or relative to the wrong max (`l = l +
        rowsum(P)`, `O + P V` with O's rescale dropped) was never looked at. The entry's
        values are the first iteration's head values, so a statistic relative to a carried
        variable's entry value is relative to that variable's head token; the second
        iteration starts from the first one's end, its new statistics mapped to the head
        tokens of the variables that carry them and the first iteration's head tokens to
        ("prev", variable) (a carried alpha converts from the max before the head's). What
        these walks report is a real mistake of that iteration (when the loop runs it). The
        state is restored after them: the learning walk starts from the entry. Their findings
        are returned as (key, finding) and kept where the steady walk, whose words the
        findings before these walks had, does not make the same one."""
        findings, seen = self.findings, self._seen
        self.findings, self._seen = [], set(seen)
        back: dict = {}
        for v in carried:
            back.setdefault(self.t(v), heads[v.id])
        state, tok, at = dict(self.state), dict(self.tok), self.iteration
        for v in carried:
            self.set(v, _remapped(self.s(v), back), heads[v.id])
        self.carry_made(back)
        self.iteration = f"the first iteration of the loop at {op.loc}{self.index(op, 0)}"
        self.region(op.body)
        back = {}
        for v in carried:
            back.setdefault(self.t(v), heads[v.id])
        for v in carried:
            if self.t(v) == heads[v.id]:
                continue   # not reassigned this iteration: the same head token again
            back.setdefault(heads[v.id], ("prev", v.id, op.var.id))
        ends = {v.id: _remapped(self.s(v), back, made) for v in carried}
        self.carry_made(back)
        for v in carried:
            self.set(v, ends[v.id], heads[v.id])
        self.iteration = f"the second iteration of the loop at {op.loc}{self.index(op, 1)}"
        self.region(op.body)
        self.state, self.tok, self.iteration = state, tok, at
        # fail's key (every `what` is longer than 40 characters)
        pending = [((f.loc.file, f.loc.line, f.message[:40]), f) for f in self.findings]
        self.findings, self._seen = findings, seen
        return pending

    def carry_made(self, back: dict) -> None:
        """The exp lines made relative to a max (`made`'s words) follow its token to the
        token it is known by in the next iteration (the order matters: a head token becomes
        ("prev", v) before a new max takes it, so both sources are read first)."""
        moved = {new: list(self.rel_at.get(old, [])) for old, new in back.items()
                 if self.rel_at.get(old)}
        for new, lines in moved.items():
            at = self.rel_at.setdefault(new, [])
            at.extend(x for x in lines if x not in at)

    def index(self, op: O.For, k: int) -> str:
        """The loop index of its k-th iteration, when its start and step are constants."""
        start, step = self.defs.get(op.start.id), self.defs.get(op.step.id)
        if isinstance(start, O.Const) and isinstance(step, O.Const):
            return f", index {int(start.value) + k * int(step.value)}"
        return ""

    def mapped(self, carried, heads, made) -> dict:
        """The carried variables' end-of-iteration states with the tokens of this iteration's
        statistics replaced by the head tokens of the variables that carry them on."""
        back = {}
        for v in carried:
            back.setdefault(self.t(v), heads[v.id])
        out = {}
        for v in carried:
            st = self.s(v)
            if st is not None and st[0] in ("rel", "inv"):
                tok = st[1]
                if tok in back:
                    st = (st[0], back[tok]) + st[2:]
                elif st[0] == "rel" and st[2] and tok in made:
                    # an online (rescaled) accumulator relative to the max this iteration
                    # made, which no variable carries on (`m = m`: the running max never
                    # advances): the next block's rescale converts from another max. A value
                    # never rescaled may be relative to a max reloaded every block (a
                    # finished max read again: row_logsumexp), so only the online one is kept
                    st = ("rel", ("dropped", tok, self.loop_now.var.id), True)
                elif tok in made or tok in heads.values():
                    st = None   # relative to something this iteration made and dropped
            out[v.id] = st
        return out

    # -- ops -------------------------------------------------------------------------------
    def elementwise(self, op: O.Elementwise) -> None:
        args, fn, res = op.args, op.fn, op.result
        tiles = [a for a in args if isinstance(a.type, TileType)]
        if fn == "where" and len(args) == 3:
            _, a, b = args
            if b.id in self.const and a.id not in self.const:
                self.set(res, self.s(a), self.t(a))
            elif a.id in self.const and b.id not in self.const:
                self.set(res, self.s(b), self.t(b))
            return
        if all(a.id in self.const for a in args):
            self.const.add(res.id)
            return
        if fn == "sub" and len(args) == 2 and all(isinstance(a.type, TileType) for a in args):
            a, b = args
            if _broadcast_row(b.type.shape, a.type.shape):
                self.set(res, ("shift", self.t(b)))
            elif tuple(a.type.shape) == tuple(b.type.shape) and 1 in a.type.shape:
                self.set(res, ("diff", self.t(a), self.t(b)))
            return
        if fn in ("sub", "add") and len(args) == 2 and args[1].id in self.const and tiles:
            # s - c, m + c: a shift by a constant (FP8's offset P_BIAS on the scores or on the
            # row max it subtracts) scales every term by one constant factor, which the
            # rescale exp(m_old - m_new) and the final division leave as it is. A sum or an
            # output plus a constant (l + 1) is no statistic: left unrecognized, as before
            st = self.s(args[0])
            if fn == "sub" or st is None or st[0] in ("shift", "diff"):
                self.set(res, st, self.t(args[0]))
            return
        if fn in ("exp", "exp2", "exp2_approx") and tiles:
            x = self.s(args[0])
            if x is not None and x[0] == "shift":
                self.set(res, ("rel", x[1], False))
                at = self.rel_at.setdefault(x[1], [])
                if str(op.loc) not in at:
                    at.append(str(op.loc))
            elif x is not None and x[0] == "diff":
                self.set(res, ("resc", x[1], x[2], str(op.loc)))
            return
        if fn == "recip" and tiles:
            x = self.s(args[0])
            if x is not None and x[0] == "rel":
                self.set(res, ("inv", x[1]))
            return
        if fn == "div" and len(args) == 2:
            a, b = args
            sa, sb = self.s(a), self.s(b)
            if a.id in self.const and sb is not None and sb[0] == "rel":
                self.set(res, ("inv", sb[1]))
            elif sa is not None and sa[0] == "rel" and sb is not None and sb[0] == "rel":
                self.normalize(op, sa, sb[1])
            elif sa is not None and sa[0] == "rel" and b.id in self.const:
                self.set(res, sa)
            return
        if fn == "mul" and len(args) == 2:
            a, b = args
            sa, sb = self.s(a), self.s(b)
            for sx, sy in ((sa, sb), (sb, sa)):
                if sy is not None and sy[0] == "resc":
                    self.rescale(op, sx, sy)
                    return
                if sy is not None and sy[0] == "inv" and sx is not None and sx[0] == "rel":
                    self.normalize(op, sx, sy[1])
                    return
            for sx, other in ((sa, b), (sb, a)):
                if sx is not None and sx[0] in ("rel", "zero", "norm") and \
                        self.s(other) is None:
                    self.set(res, sx)   # scaled by a value that is no statistic
                    return
            return
        if fn == "add" and len(args) == 2:
            a, b = args
            sa, sb = self.s(a), self.s(b)
            if sa == ZERO:
                self.set(res, sb)
            elif sb == ZERO:
                self.set(res, sa)
            elif sa is not None and sb is not None and sa[0] == "rel" and sb[0] == "rel":
                if sa[1] == sb[1]:
                    self.set(res, ("rel", sa[1], sa[2] or sb[2]))
                else:
                    one, two = (sa, sb) if sa[2] or not sb[2] else (sb, sa)
                    self.fail(op, f"adds a term relative to the max of {self.name(one[1])}"
                                  f"{self.made(one[1])} to one relative to the max of "
                                  f"{self.name(two[1])}{self.made(two[1])}: a running "
                                  f"sum must be rescaled to the new max (times exp(m_old - "
                                  f"m_new)) before the block's terms are added",
                              {"element": "every row", "left": self.name(sa[1]),
                               "right": self.name(sb[1])},
                              "rescale the running value by alpha = exp(m_old - m_new) "
                              "before adding the block's exp(s - m_new) terms")
            return

    def rescale(self, op, sx, resc) -> None:
        frm, to = resc[1], resc[2]
        if sx == ZERO and not self.report:
            # the learning walk: the accumulator's first value is rescaled like every later
            # one, so what the iteration leaves is online (rescaled) from the first block on
            self.set(op.result, ("rel", to, True))
        elif sx == ZERO:
            self.set(op.result, ZERO)
        elif sx is not None and sx[0] == "rel":
            if isinstance(sx[1], tuple) and sx[1][0] == "dropped" and sx[1] != frm:
                self.stale_max(op, sx[1], frm, resc)
            elif sx[1] != frm:
                self.fail(op, f"rescales by alpha = exp(m_a - m_b) (at {resc[3]}) with m_a the "
                              f"max of {self.name(frm)} and m_b that of {self.name(to)}, but the "
                              f"value is relative to the max of {self.name(sx[1])}"
                              f"{self.made(sx[1])}: alpha must "
                              f"convert from the max the value was computed with (the running "
                              f"max before this block) to the new one",
                          {"element": "every row", "value_relative_to": self.name(sx[1]),
                           "rescale_from": self.name(frm), "rescale_to": self.name(to),
                           "defined": {"rescale factor": resc[3]}},
                          "alpha = exp(m_prev - m_new) with m_prev the running max before "
                          "this block")
            self.set(op.result, ("rel", to, True))

    def stale_max(self, op, dropped, frm, resc) -> None:
        """The rescale of an accumulator whose max the loop dropped (module docstring): the
        running max variable keeps its old value, so alpha = exp(m - m_new) converts from it
        while the accumulator is relative to the previous block's new max."""
        from argus.verify.names import Names

        names = Names(self.kernel)
        m_name = names.name(frm) if isinstance(frm, int) else None
        new_op = self.defs.get(dropped[1])
        new_name = names.name(dropped[1]) or "the block's new max"
        loop = next((x for x in self.kernel.walk() if isinstance(x, O.For)
                     and x.var.id == dropped[2]), None)
        defined: dict = {"rescale factor": resc[3]}
        where = ""
        if m_name and loop is not None:
            line = _self_assignment(loop, m_name)
            if line is not None:
                defined[m_name] = line
                where = f"; `{m_name} = {m_name}` at {line} assigns it to itself"
            elif frm in self.defs:
                defined[m_name] = str(self.defs[frm].loc)
        who = f"`{m_name}`" if m_name else "the running max"
        self.fail(op, f"rescales by alpha = exp(m_prev - m_new) (at {resc[3]}) from {who}, "
                      f"which the loop never updates{where}: the accumulator is relative to "
                      f"{self.name(dropped)}, `{new_name}`"
                      f"{f' at {new_op.loc}' if new_op is not None else ''}, so every block "
                      f"rescales from a stale max and the earlier blocks' terms are scaled "
                      f"wrongly",
                  {"element": "every row", "iteration": "every block after the first",
                   "value_relative_to": self.name(dropped), "rescale_from": who,
                   "defined": defined},
                  f"carry the new max into the next block: {m_name or 'm'} = {new_name} at "
                  f"the end of the loop body")

    def normalize(self, op, sx, tok) -> None:
        if sx[1] != tok:
            self.fail(op, f"divides a value relative to the max of {self.name(sx[1])} by a "
                          f"row sum relative to {self.name(tok)}: the output is normalized "
                          f"with another row statistic than the one it was accumulated with",
                      {"element": "every row", "value_relative_to": self.name(sx[1]),
                       "sum_relative_to": self.name(tok)},
                      "divide by the running sum l carried with the same running max")
        self.set(op.result, NORM)

    def wgmma(self, op: O.Wgmma) -> None:
        if op.a_in_registers:
            a = self.s(op.a)
        else:
            b = self.buf.get(op.a.id, op.a.id)
            a = self.state.get(b)
        acc = self.s(op.acc)
        if a is None or a[0] != "rel":
            if acc is not None and acc != ZERO:
                self.state.pop(op.acc.id, None)
            return
        if acc == ZERO:
            self.set(op.acc, ("rel", a[1], False))
        elif acc is not None and acc[0] == "rel":
            if acc[1] != a[1]:
                self.fail(op, f"accumulates P relative to the max of {self.name(a[1])}"
                              f"{self.made(a[1])} into an accumulator relative to the max of "
                              f"{self.name(acc[1])}{self.made(acc[1])}: "
                              f"the accumulator must be rescaled to P's max first",
                          {"element": "every row", "p_relative_to": self.name(a[1]),
                           "accumulator_relative_to": self.name(acc[1])},
                          "pass o * alpha (alpha = exp(m_prev - m_new)) as the accumulator")
            self.set(op.acc, ("rel", a[1], acc[2]))
        else:
            self.state.pop(op.acc.id, None)

    def stored(self, op, v) -> None:
        st = self.s(v)
        if st is not None and st[0] == "rel" and st[2]:
            self.fail(op, f"stores an online-softmax accumulator that is still relative to "
                          f"the running max of {self.name(st[1])}: it was rescaled across "
                          f"blocks but never divided by the row sum l",
                      {"element": "every stored element"},
                      "divide by the running sum before the store: o / l")


def _self_assignment(loop: O.For, name: str) -> str | None:
    """The `file:line` of `name = name` in the loop's Python block (tracing records no op
    for it, so the source is read: the lines after the `for` indented deeper than it), or
    None."""
    import linecache
    import re

    file, first = loop.loc.file, loop.loc.line
    head = linecache.getline(file, first)
    if not file or not head.strip():
        return None
    indent = len(head) - len(head.lstrip())
    pat = re.compile(rf"^\s*{re.escape(name)}\s*=\s*{re.escape(name)}\s*(#.*)?$")
    n = first + 1
    while n < first + 2000:
        text = linecache.getline(file, n)
        if not text:
            break
        if text.strip() and len(text) - len(text.lstrip()) <= indent:
            break
        if pat.match(text.rstrip("\n")):
            return f"{file.rsplit('/', 1)[-1]}:{n}"
        n += 1
    return None


def _broadcast_row(small, big) -> bool:
    """`small` broadcasts along some axis of `big` (a row or column vector of a tile)."""
    return len(small) == len(big) and tuple(small) != tuple(big) and \
        all(s == b or s == 1 for s, b in zip(small, big))


def _remapped(st, back: dict, made=frozenset()):
    """An abstract value with the statistics' tokens in `back` replaced (rel and inv name
    one max, a rescale two); one relative to a value in `made` (made by an iteration) that
    `back` does not carry on is unknown."""
    if st is None:
        return None
    if st[0] in ("rel", "inv", "resc"):
        toks = st[1:3] if st[0] == "resc" else st[1:2]
        if any(t not in back and t in made for t in toks):
            return None
        return (st[0],) + tuple(back.get(t, t) for t in toks) + st[1 + len(toks):]
    return st


def _join(a, b):
    if a == b:
        return a
    if a == ZERO:
        return b
    if b == ZERO:
        return a
    if a is not None and b is not None and a[0] == b[0] == "rel" and a[1] == b[1]:
        return ("rel", a[1], a[2] or b[2])
    return None
