"""Pipeline obligations: the mbarrier protocol of every `ag.pipeline`, for unbounded counters.

Job: INVARIANTS.md §3.4 for what lowering wrote (`stage_expr`, `parity_expr`, `arrivals`,
`wgmma_in_flight`, `tx_bytes`; the construct's reference protocol when not lowered yet), in
linear integer arithmetic over the producer's step count P, the consumers' C and the releases
R (never bit-vector division: S = 3 takes seconds there, §3.6):

  pipe.producers  one producer warpgroup issues each step (one arrive.expect_tx per phase);
  pipe.totals     producer and consumer roles run the same number of steps; in a cooperative
                  consumer role (several warpgroups, no pipe.skip) every warpgroup as many
                  as the producer, one claim per warpgroup (_per_warpgroup; counts that
                  are sums over a loop whose steps per iteration vary, a persistent walk's
                  units, are paired with the producer's iteration by iteration: _Pair); in
                  a role whose warpgroups take turns without pipe.skip (_turns: fewer
                  empty-barrier arrivals than warpgroups, consume steps under a condition
                  on the warpgroup) each warpgroup's counter too (_turn_obligations; its
                  sums paired by the same rule, a producer's trip count x its steps per
                  unit too);
  pipe.arrivals   empty-barrier init count = consumer warpgroups that arrive per step (for
                  turns without pipe.skip: the warpgroups consume count x the producer's
                  steps together, sums paired iteration by iteration, _Pair with times);
  pipe.slot       every site uses the ring slot n % S of its counter n (so a step's TMA lands
                  where the consumer of the same step reads; counters continue across loops,
                  which a per-tile reset breaks unless Kt % S == 0);
  pipe.data (O1)  Inv ∧ the consumer's full-wait passes ⇒ the slot holds the tile of step C;
  pipe.no-overwrite (O2), pipe.no-early-read (O3), pipe.deadlock (O4) with
  Inv(P, C) ≡ R ≤ P ≤ R + S ∧ C ≤ P, R = C − wgmma_in_flight (releases lag the in-flight
  wgmma groups; all released when the role ends).

A violation of an inductive obligation may be unreachable, so every one is replayed from
(0, 0) by explicit-state search over all interleavings (`replay`), which reports the
reachable bug (BAD READ / OVERWRITE / DEADLOCK) with its schedule, or that none is reachable
within the bound (then the finding is "unknown", never "proven").
"""

from __future__ import annotations

from dataclasses import dataclass

import z3

from argus.ir import ops as O
from argus.verify import exprs
from argus.verify import witness as W
from argus.verify.model import Model, PipeInfo, StepInfo, _num
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import fresh_int, mentions
from argus.verify.terms import subterms

STAGE_REF = "n % S"
CONSUMER_PARITY_REF = "(n / S) & 1"
PRODUCER_PARITY_REF = "((n / S) & 1) ^ 1"


@dataclass
class Protocol:
    """The expressions one site evaluates, as text (lowered fields or the reference)."""

    stage: str
    parity: str
    lowered: bool


def protocol(step: StepInfo) -> Protocol:
    op = step.op
    ref_parity = PRODUCER_PARITY_REF if step.kind == "produce" else CONSUMER_PARITY_REF
    return Protocol(op.stage_expr or STAGE_REF, op.parity_expr or ref_parity,
                    bool(op.stage_expr or op.parity_expr))


def _names_for(model: Model, step: StepInfo, n, S: int) -> dict:
    """n and S, plus the loop/scalar values an expression may name as %id."""
    names = {"n": n, "S": S}
    for vid, term in model.sym.items():
        if isinstance(term, z3.ExprRef) and not z3.is_bool(term) or isinstance(term, int) and not isinstance(term, bool):
            names[f"%{vid}"] = term
    return names


def _ev(model: Model, step: StepInfo, text: str, n, S: int):
    return _num(exprs.evaluate(text, exprs.Env(_names_for(model, step, n, S))))


def _uses_loop_values(text: str) -> bool:
    return any(name.startswith("%") for name in exprs.names(exprs.parse(text)))


def _completed(count, slot, S):
    """Phases completed on slot `slot`'s barrier after `count` ring-ordered uses."""
    return (count + (S - 1) - slot) / S


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    for pipe in model.pipes.values():
        o, f = _pipe(model, pipe)
        obs += o
        finds += f
    return obs, finds


def _pipe(model: Model, pipe: PipeInfo):
    obs: list[Obligation] = []
    finds: list[Finding] = []
    S = pipe.stages
    create = pipe.op
    producers = [s for s in pipe.steps if s.kind == "produce"]
    consumers = [s for s in pipe.steps if s.kind == "consume"]
    subject = f"pipeline {create.result} ({S} stages) at {create.loc}"
    if not producers or not consumers:
        finds.append(Finding("pipe.totals", create.loc, subject, "violated",
                             "the pipeline has " + ("no produce step" if not producers else
                                                    "no consume step"),
                             fix="every pipeline needs a producer and a consumer role"))
        return obs, finds

    # -- who produces, who consumes ------------------------------------------------------
    for step in producers:
        role = step.site.role
        if role is not None and role.warpgroups != 1:
            finds.append(Finding("pipe.producers", step.op.loc, subject, "violated",
                                 f"role {role.name!r} has {role.warpgroups} warpgroups, and "
                                 f"each would run this produce step: {role.warpgroups} "
                                 f"arrive.expect_tx and {role.warpgroups}x the TMA bytes per "
                                 f"phase on a barrier that expects one (each warpgroup's "
                                 f"elected thread 0 arrives)",
                                 {**W.issuer(role, "the elected thread")[0],
                                  "warpgroups": role.warpgroups}))
        elif model.kernel.attr("elected", False):
            finds += _elected_producer(model, step, subject)
    # by the role's warpgroup index, its IR name (a value; each role op defines its own)
    consumer_roles = {s.site.role.index.id if s.site.role is not None else None: s.site.role
                      for s in consumers}
    # a role whose warpgroups take turns on the pipe (pipe.skip, ping-pong) releases each step
    # once, by the warpgroup whose turn it is (check_ordered proves the turns); one that takes
    # turns without pipe.skip (_turns) releases each step as often as the empty barrier counts,
    # which _turn_obligations proves (the static count would only restate the init count)
    consumer_wgs = sum(1 if _skips(create, r) else
                       create.consumers if _turns(model, create, r, consumers) else r.warpgroups
                       for r in consumer_roles.values() if r is not None) or 1
    # -- totals ----------------------------------------------------------------------------
    p_roles = {(s.site.role.name if s.site.role else None) for s in producers}
    c_roles = {(s.site.role.name if s.site.role else None) for s in consumers}
    for pr in p_roles:
        for cr in c_roles:
            tp, tc = pipe.totals.get((pr, "produce")), pipe.totals.get((cr, "consume"))
            if tp is None or tc is None or pr == cr:
                continue
            sites = [s for s in pipe.steps if (s.site.role.name if s.site.role else None)
                     in (pr, cr)]
            role = next((r for r in consumer_roles.values()
                         if r is not None and r.name == cr), None)
            if _turns(model, create, role, consumers):
                # the warpgroups take turns without pipe.skip: each step consumed by as many
                # warpgroups as the empty barrier counts, and each warpgroup's counter over
                # every step of the ring (which only pipe.skip gives a warpgroup that waits)
                for ob in _turn_obligations(model, pipe, role, pr, _num(tp), _num(tc),
                                            subject, sites):
                    (obs if isinstance(ob, Obligation) else finds).append(ob)
                continue
            if _cooperative(model, create, role, consumers):
                # every warpgroup consumes every step (the empty barrier counts one arrival
                # per warpgroup; ag.ordered inside a step pairs their turns): one claim per
                # warpgroup, which also stands for the role's total against the producer's
                ob = _per_warpgroup(model, pipe, role, pr, _num(tp), _num(tc), subject,
                                    sites)
                if ob is not None:
                    (obs if isinstance(ob, Obligation) else finds).append(ob)
                    continue
                finds.append(Finding("pipe.totals", create.loc, subject + f": every "
                                     f"warpgroup of role {cr!r} consumes every step",
                                     "proven", tier="arith"))   # the count names no wg
            ob = _totals(model, pipe, pr, cr, _num(tp), _num(tc), subject, sites)
            (obs if isinstance(ob, Obligation) else finds).append(ob)
    for site, n in pipe.peeks:
        ob = _peek_consumed(model, pipe, site, n, subject)
        (obs if isinstance(ob, Obligation) else finds).append(ob)
    # -- clusters: who writes a slot, who releases it ----------------------------------------
    multicast = [x for st in producers for x in st.op.body.walk()
                 if isinstance(x, O.TmaLoad) and x.multicast]
    cs = model.cluster_size
    want_peers = cs if multicast else 1
    # lowering derives peers (PipelineCreate.peers); before lowering the construct's reference
    # protocol releases every CTA that writes the slot
    peers = create.peers if model.lowered else want_peers
    if peers != want_peers and not (multicast and peers < want_peers):
        why = (f"peers = {peers} but the cluster has {cs} CTA(s): the consumers arrive on the "
               f"empty barriers of CTAs that do not exist" if peers > cs else
               f"peers = {peers} but no load of this pipeline multicasts: each slot is written "
               f"by this CTA alone, so its consumers release this CTA's slot only "
               f"(peers = 1); releasing {peers} CTAs couples their pipelines and makes "
               f"every empty barrier wait for arrivals its own consumers do not make")
        who, said = W.issuer(consumers[0].site.role, "the releasing thread")
        finds.append(Finding("pipe.arrivals", create.loc, subject, "violated",
                             why + f" (the release: {said})",
                             {**who, "peers": peers, "expected_peers": want_peers,
                              "cluster_size": cs, "multicast_loads": len(multicast)},
                             fix=f"PipelineCreate.peers = {want_peers}"))
        peers = want_peers
    if multicast or peers > 1:
        # coupled CTAs wait for each other's steps: they must all run the same number
        for (role_name, kind), total in pipe.totals.items():
            o, f = _cluster_totals(model, pipe, role_name, kind, _num(total), subject)
            obs += o
            finds += f
    if multicast:
        for p in producers:
            obs.append(_cluster_overwrite(model, pipe, p, peers, subject, multicast[0]))
    # -- arrivals --------------------------------------------------------------------------
    for step in consumers:
        arrivals = step.op.arrivals
        role = step.site.role
        wgs = role.warpgroups if role is not None else 1
        # the release is one arrival per consumer warpgroup, by one thread of it
        who, said = W.issuer(role, "the releasing thread")
        if create.consumers != consumer_wgs:
            finds.append(Finding("pipe.arrivals", create.loc, subject, "violated",
                                 f"the empty barriers are initialized for {create.consumers} "
                                 f"arrival(s) per phase but {consumer_wgs} consumer "
                                 f"warpgroup(s) release each step ({said}): "
                                 + ("a slot is released when the first warpgroup is done and "
                                    "refilled under the others" if create.consumers <
                                    consumer_wgs else "the phase never completes: hang"),
                                 {**who, "init_count": create.consumers,
                                  "arrivals": consumer_wgs},
                                 fix=f"ag.pipeline({S}, consumers={consumer_wgs})"))
            break
        if arrivals and arrivals != consumer_wgs * peers:
            where = f"{wgs} in role {role.name if role else 'cta'}"
            if peers > 1:
                where += f", each releasing the slot in all {peers} CTAs of the cluster"
            finds.append(Finding("pipe.arrivals", step.op.loc, subject, "violated",
                                 f"lowered consume step declares arrivals={arrivals} but "
                                 f"{consumer_wgs * peers} arrivals complete each phase of an "
                                 f"empty barrier: {consumer_wgs} consumer warpgroup(s) x "
                                 f"{peers} CTA(s) ({where}; the release: {said})",
                                 {**who, "arrivals": arrivals,
                                  "consumer_warpgroups": consumer_wgs, "peers": peers},
                                 fix=f"arrivals = {consumer_wgs * peers}"))
    # -- slots -----------------------------------------------------------------------------
    for step in pipe.steps:
        obs.append(_slot(model, pipe, step, subject))
    # -- protocol O1..O4 per (producer site, consumer site) -------------------------------
    lag = max((getattr(s.op, "wgmma_in_flight", 0) or 0) for s in consumers)
    for c in consumers:
        for p in producers:
            obs.extend(_protocol(model, pipe, p, c, lag, subject))
    return obs, finds


def elected_steps(kernel) -> dict[int, int]:
    """The pipeline steps inside an `elect`, by the step's stage value (its IR name: a
    value, one per produce/consume op) -> how many threads of its group run it (the elect's
    thread count; lower/elect.py placed it). A step outside every elect is run by every
    thread of its group."""
    out: dict[int, int] = {}
    for op in kernel.walk():
        if isinstance(op, O.Elect):
            for inner in op.body.walk():
                if isinstance(inner, (O.Produce, O.Consume)):
                    out[inner.stage.id] = op.threads
    return out


def _elected_producer(model: Model, step: StepInfo, subject: str) -> list[Finding]:
    """pipe.producers on the threads: each thread that runs a produce step arrives once on
    the slot's full barrier (arrive.expect_tx), whose init count is
    PipelineCreate.FULL_ARRIVALS; a one-warpgroup producer must run the step on exactly that
    many threads (an `elect` of one thread)."""
    role = step.site.role
    group = 128 if role is not None else model.kernel.attr("threads", 128)
    elected = elected_steps(model.kernel).get(step.op.stage.id)
    threads = elected if elected is not None else group
    want = O.PipelineCreate.FULL_ARRIVALS
    if threads == want:
        return []
    who = (f"an elect of {threads} threads" if elected is not None else
           f"no elect around it: all {group} threads of the "
           + ("warpgroup" if role is not None else "CTA"))
    return [Finding("pipe.producers", step.op.loc, subject, "violated",
                    f"{threads} threads run this produce step ({who}), each arriving with "
                    f"arrive.expect_tx on a full barrier initialized for {want} arrival per "
                    f"phase and each issuing the step's TMA copies: the phase completes "
                    f"after the first arrival with {threads}x the transaction bytes expected, "
                    f"so the slot's phases no longer follow the steps (a hang, or a consumer "
                    f"reading a slot before its bytes land)",
                    {**W.issuer(role, f"{threads} threads")[0],
                     "role": role.name if role is not None else None, "threads": threads,
                     "full_barrier_count": want},
                    fix="lower/elect.py elects one thread of the producer warpgroup "
                        "(elect(threads=1) around the role's body)")]


def _cluster_totals(model: Model, pipe: PipeInfo, role_name, kind: str, total, subject):
    """Every CTA of the cluster runs as many steps of this role as this one (else a producer
    waits forever for a peer's release, or a consumer for a peer's multicast box)."""
    rvars = model.rank_vars()
    what = f"{subject}: {kind} steps of role {role_name!r} equal in every CTA of the cluster"
    if not any(mentions(total, r) for r in rvars):
        return [], [Finding("pipe.totals", pipe.op.loc, what, "proven",
                            tier="arith")]  # the count does not depend on the rank
    ren = [(r, fresh_int(f"{r}@peer")) for r in rvars]
    other = z3.substitute(total, *ren)
    prem = list(model.premises) + [z3.substitute(c, *ren) for c in model.premises]

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "steps": value(zm, total),
               "peer_steps": value(zm, other), "cluster_rank": value(zm, model.rank_term),
               "peer_rank": value(zm, z3.substitute(_num(model.rank_term), *ren))}
        return (f"with {wit['shapes']} the {kind} role {role_name!r} of cluster rank "
                f"{wit['cluster_rank']} runs {wit['steps']} steps but that of rank "
                f"{wit['peer_rank']} runs {wit['peer_steps']}: the CTAs wait for each other's "
                f"multicast boxes and releases, so the one that runs more hangs"), wit
    return [Obligation("pipe.totals", pipe.op.loc, what, prem,
                       [("steps equal across the cluster", total == other)], decode,
                       minimize=list(model.params.values()))], []


def _cluster_overwrite(model: Model, pipe: PipeInfo, p: StepInfo, peers: int, subject: str,
                       load) -> Obligation:
    """O2 across a cluster: the producer of another CTA of the cluster multicasts its step P
    into this CTA's slot sp(P) only after this CTA's consumers released step P - S.

    The peer's producer waits on its own empty barrier, whose phases complete when the
    consumers of every CTA that releases it (codegen: each consumer warpgroup arrives on the
    empty barrier of all `peers` CTAs, whose init count is consumers x peers) have released:
    it sees R_seen = min(R_here, R_peer) releases when peers = cluster size, and R_peer alone
    when peers = 1. With its own invariant R_seen <= P <= R_seen + S and its wait passing,
    P + 1 <= R_here + S must hold."""
    S = pipe.stages
    pp = protocol(p)
    cs = model.cluster_size
    uses_loops = any(_uses_loop_values(t) for t in (pp.stage, pp.parity))
    # named by the step's program point (Site.seq): the same names in every run
    q = p.site.seq
    P, Rh, Rp, T = z3.Ints(f"Pq!{q} Rhere!{q} Rpeer!{q} Tq!{q}")
    seen = z3.If(Rp < Rh, Rp, Rh) if peers >= cs else Rp
    base = [P >= 0, T >= 0, P <= T, Rh >= 0, Rp >= 0, Rh <= T, Rp <= T,
            Rh <= P]                       # this CTA reads nothing the peer has not sent
    inv = [seen <= P, P <= seen + S]
    extra = list(model.premises) + p.site.constraints() + [p.counter == P] if uses_loops else []
    sp = _ev(model, p, pp.stage, P, S)
    ppar = _ev(model, p, pp.parity, P, S)
    p_pass = (_completed(seen, sp, S) % 2) != ppar

    def decode(zm, violated):
        Pv, rh, rp = value(zm, P), value(zm, Rh), value(zm, Rp)
        s, par = value(zm, sp), value(zm, ppar)
        wit = {"producer_step": Pv, "slot": s, "parity": par, "releases_here": rh,
               "releases_counted": value(zm, seen), "peer_releases": rp, "peers": peers,
               "cluster_size": cs, "stages": S, "this_rank": 0, "peer_rank": 1 % cs,
               "multicast_load": str(load.loc)}
        msg = (f"the producer of cluster rank {1 % cs} passes its wait on its own empty[{s}] "
               f"(parity {par}) at step {Pv} after {value(zm, seen)} release(s) "
               + ("of its own consumers only (peers = 1: no consumer releases the slots of "
                  "the other CTAs) " if peers < cs else "")
               + f"and multicasts step {Pv} (TMA at {load.loc}) into slot {s} of cluster rank 0, "
               f"whose consumers have released {rh} step(s) and still read step {Pv - S}")
        return msg, wit
    fix = ("release the slot in every CTA of the cluster: PipelineCreate.peers = cluster size "
           f"({cs}), empty barrier count = consumers x {cs}")
    return Obligation("pipe.no-overwrite", p.op.loc,
                      subject + f": O2 across the cluster at produce {p.op.loc}",
                      base + inv + extra + [p_pass, P < T],
                      [("P + 1 <= R_here + S", P + 1 <= Rh + S)], decode,
                      [P, Rh, Rp, T] + list(model.params.values()), fix=fix)


def _sums(model: Model, term) -> list:
    """The applications of Model.steps_over's sums in a step count."""
    return [t for t in subterms(term) if z3.is_app(t) and t.decl().name() in model.step_sums]


def _per_iteration(model: Model, app, t):
    """What the sum `app` = F(lo, hi, c1'..cn') adds at iteration index t."""
    var, body, args = model.step_sums[app.decl().name()]
    pairs = [(var, t)] + [(a, b) for a, b in zip(args, app.children()[2:]) if not a.eq(b)]
    return z3.substitute(body, *pairs)


UNROLL_SUMS = 64   # a step sum over at most this many iterations is written out (_unrolled)


@dataclass(frozen=True)
class _Pair:
    """Step sums of different forms paired iteration by iteration: the producer's
    a = Σ_{lo <= t < hi} p(t) against consumer counts b_1 .. b_n, each
    b_i = Σ_{lo_i <= t < hi_i} c_i(t), and `times`: equal, b_1 + .. + b_n = times x a, when
    lo_i == lo, hi_i == hi and c_1(t) + .. + c_n(t) == times x p(t) at every t of [lo, hi)
    (`claims`; then Σ_i b_i = Σ_t Σ_i c_i(t) = times x a). One consumer count (n = 1,
    times = 1) is a role's or a cooperative role's warpgroup's; the W warpgroups of a role
    that takes turns on the steps together, against the c releases per step the empty
    barrier counts, are n = W, times = c. The sums are uninterpreted applications
    (Model.steps_over), so a claim about the totals holds only given their equality
    (`given`): stated as an implication inside the claim, never as a premise, so the pairing
    claims are proven without it. `label` names the pair in the claims ("warpgroup 1: " for
    one warpgroup's count).

    A producer that runs the same steps in every iteration of its walk counts no sum but a
    trip count times them (Model.trip_steps): `trip` = (trip, per) reads a = trip x per as
    the sum Σ_{0 <= t < trip} per, paired by the same claims (a ping-pong role whose
    warpgroups take turns on the units of the producer's walk, each counting its own)."""

    model: Model
    t: z3.ArithRef          # the iteration index the per-iteration claim is about
    a: z3.ExprRef           # the producer's sum (or trip count x steps: `trip`)
    bs: tuple               # the consumers' sums
    label: str = ""
    times: int = 1
    trip: tuple | None = None   # (trip, per iteration) when a is a trip count's steps

    def _scaled(self, term):
        return term if self.times == 1 else self.times * term

    def _added(self, terms: list):
        return terms[0] if len(terms) == 1 else z3.Sum(terms)

    def _span(self) -> tuple:
        """The producer's iterations [lo, hi)."""
        if self.trip is not None:
            return z3.IntVal(0), self.trip[0]
        return self.a.children()[0], self.a.children()[1]

    def _made(self, t):
        """The producer's steps at iteration index t."""
        return self.trip[1] if self.trip is not None else _per_iteration(self.model, self.a, t)

    def claims(self) -> list:
        lo, hi = self._span()
        same = [z3.And(lo == b.children()[0], hi == b.children()[1]) for b in self.bs]
        return [(self.label + "same iterations", same[0] if len(same) == 1 else z3.And(same)),
                (self.label + "same steps in every iteration",
                 z3.Implies(z3.And(self.t >= lo, self.t < hi),
                            self._scaled(self._made(self.t)) ==
                            self._added([_per_iteration(self.model, b, self.t)
                                         for b in self.bs])))]

    def given(self, claim):
        """`claim` given the sums equal (which the two claims above prove)."""
        return z3.Implies(self._scaled(self.a) == self._added(list(self.bs)), claim)

    def violated(self, names) -> bool:
        return any(n in names for n, _ in self.claims())

    def apart(self, names) -> bool:
        """Whether the violated claims `names` say the sums walk different iterations."""
        return self.label + "same iterations" in names

    def each(self, zm) -> list:
        """Each consumer sum's steps at the iteration index, in a model."""
        return [value(zm, _per_iteration(self.model, b, self.t)) for b in self.bs]

    def at(self, zm) -> tuple:
        """(the iteration index, the producer's steps in it, the consumers' together) in a
        model."""
        return value(zm, self.t), value(zm, self._made(self.t)), sum(self.each(zm))


def _pair_sums(model: Model, tp, tcs: list, label: str = "", t=None, times: int = 1):
    """How the step count tp (a producer's) is compared with the counts tcs (consumers':
    one, or a turn-taking role's warpgroups together against `times` x tp) when they hold
    sums of steps per iteration that depend on the index (Model.steps_over): None when all
    hold the same sums (equal terms: the solver compares the rest), a _Pair when each holds
    one sum (a causal persistent walk's unit loop, whose per-unit count is the tile's KV
    blocks in the producer and, with own_blocks, a warpgroup's blocks plus its unread
    releases in the consumer), else a reason (several sums: which to pair with which is not
    read off the terms). `t`: the pair's iteration index (a fresh one if None). A producer
    count that is no sum but a trip count times the steps of every iteration
    (_trip_steps) is paired as the sum of those steps over the trip count."""
    sp, scs = _sums(model, tp), [_sums(model, tc) for tc in tcs]
    if all({x.get_id() for x in sp} == {x.get_id() for x in sc} for sc in scs):
        return None
    trip = _trip_steps(model, tp) if not sp else None
    if (len(sp) != 1 and trip is None) or any(len(sc) != 1 for sc in scs):
        return "several sums"
    return _Pair(model, t if t is not None else fresh_int("iteration"),
                 sp[0] if sp else tp, tuple(sc[0] for sc in scs), label, times, trip)


def _trip_steps(model: Model, tp):
    """(trip, per iteration) when the step count tp is exactly a loop's trip count times the
    steps of each of its iterations (Model.trip_steps: a producer whose walk runs the same
    steps per unit), else None (other steps beside it: the pairing would not account for
    them)."""
    found = [model.trip_steps[x.get_id()] for x in subterms(tp)
             if x.get_id() in model.trip_steps]
    if len(found) != 1 or not z3.eq(z3.simplify(tp - found[0][0]), z3.IntVal(0)):
        return None
    return found[0][1], found[0][2]


def _unrolled(model: Model, term):
    """`term` with every step sum over a constant number of iterations (at most UNROLL_SUMS)
    written out as the sum of its iterations' counts: exact, and linear (a ping-pong loop
    over a role's two tiles, whose warpgroup consumes one tile's steps and skips the other's,
    counts ite(h == wg, k, 0) + ite(h != wg, k', 0) per iteration h)."""
    for _ in range(8):   # nested sums: an iteration's count may hold an inner loop's sum
        subs = []
        for app in _sums(model, term):
            lo, hi = z3.simplify(app.children()[0]), z3.simplify(app.children()[1])
            if not (z3.is_int_value(lo) and z3.is_int_value(hi)) or \
                    hi.as_long() - lo.as_long() > UNROLL_SUMS:
                continue
            its = [_per_iteration(model, app, z3.IntVal(t))
                   for t in range(lo.as_long(), hi.as_long())]
            subs.append((app, z3.Sum(its) if its else z3.IntVal(0)))
        if not subs:
            break
        term = z3.substitute(term, *subs)
    return term


def _peek_consumed(model: Model, pipe: PipeInfo, site, n, subject: str):
    """pipe.totals for a pipe.peek: the step whose fill it waits for (its role's counter n
    there) is one the role consumes, n < the role's total. The producer fills only the steps
    the consumers consume (the totals above), so a peek past the role's last step (after the
    walk, or with no step to follow in its iteration) waits for a fill that never comes:
    the kernel hangs, whatever the word would have been used for."""
    role = site.role.name if site.role is not None else None
    total = pipe.totals.get((role, "consume"))
    what = subject + f": the peek at {site.op.loc}"
    if total is None:
        return Finding("pipe.totals", site.op.loc, what, "violated",
                       f"role {role!r} peeks at the pipeline but consumes no step of it: the "
                       f"fill it waits for never comes", {"role": role},
                       fix="peek in the role that consumes the pipeline, before its step")
    total = _unrolled(model, _num(total))

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "peek_step": value(zm, _num(n)),
               "consumer_steps": value(zm, total), "role": role}
        return (f"it waits for the fill of step {wit['peek_step']} (counting from 0) of role "
                f"{role!r}, which consumes {wit['consumer_steps']} step(s): that fill never "
                f"comes and the role hangs"), wit
    return Obligation("pipe.totals", site.op.loc, what,
                      list(model.premises) + site.constraints(),
                      [("the peeked step is consumed", _num(n) < total)], decode,
                      fix="peek before a consume step of the same pipeline (the unit's first "
                          "K step), not after the role's last one")


def _totals(model, pipe, pr, cr, tp, tc, subject, sites):
    loc = pipe.op.loc
    tp, tc = _unrolled(model, tp), _unrolled(model, tc)
    skips = [op for op in model.kernel.walk() if isinstance(op, O.PipeSkip)
             and op.pipe.id == pipe.op.result.id]
    premises, claims = list(model.premises), [("producer steps == consumer steps", tp == tc)]
    pair = _pair_sums(model, tp, [tc])
    if isinstance(pair, str):
        return Finding("pipe.totals", loc, subject + f": {pr} vs {cr}", "unknown",
                       "the step counts are sums over loops whose steps per iteration "
                       "depend on the index, in forms the verifier does not pair")
    if pair is not None:
        claims = pair.claims() + [("producer steps == consumer steps",
                                   pair.given(tp == tc))]

    def decode(zm, violated):
        wit = {"shapes": W.shapes(model, zm), "producer_steps": value(zm, tp),
               "consumer_steps": value(zm, tc), "producer_role": pr, "consumer_role": cr,
               "steps_at": [f"{s.kind} at {s.op.loc} in loops "
                            f"{[str(sc.op.loc) for sc in s.site.loops()]}" for s in sites]
               + [f"skip at {op.loc}" for op in skips],
               # names.annotate adds what these lines read (loop bounds, skip counts): a
               # wrong count is fixed where it is computed, not at the pipeline's line
               "related_sites": [str(s.op.loc) for s in sites] + [str(op.loc) for op in skips]}
        if model.grid is not None:
            wit["cta"] = tuple(value(zm, model.sym[v.id]) for v in model.grid.ids)
        if "same steps in every iteration" in violated or "same iterations" in violated:
            it, ps, cs = pair.at(zm)
            wit.update({"iteration_index": it, "producer_steps_in_iteration": ps,
                        "consumer_steps_in_iteration": cs})
            more = "producer" if ps > cs else "consumer"
            return waits(more, (f"with {wit['shapes']} the producer role {pr!r} runs {ps} "
                                f"steps in iteration {it} of its outer loop but consumer role "
                                f"{cr!r} runs {cs}"
                                if "same iterations" not in violated else
                                f"with {wit['shapes']} the producer role {pr!r} and consumer "
                                f"role {cr!r} walk different iterations of the loop whose "
                                f"steps per iteration vary") + f": the {more} waits forever",
                         wit), wit
        more = "producer" if value(zm, tp) > value(zm, tc) else "consumer"
        msg = (f"with {wit['shapes']} the producer role {pr!r} runs {value(zm, tp)} steps but "
               f"consumer role {cr!r} runs {value(zm, tc)}: the {more} waits forever for a "
               f"slot that is never " + ("released" if more == "producer" else "filled"))
        return waits(more, msg, wit), wit

    def waits(more, msg, wit):
        # who waits forever, from the waiting role's first step site (W.by_site: its role,
        # warpgroup and the thread that waits), not names.who's lookup of the pipeline's line
        role = pr if more == "producer" else cr
        site = next((s.site for s in sites if s.site.role is not None
                     and s.site.role.name == role), None)
        return W.by_site(model, site, msg, wit) if site is not None else msg
    return Obligation("pipe.totals", loc, subject + f": {pr} vs {cr}", premises, claims,
                      decode, minimize=list(model.params.values()))


def _skips(create: O.PipelineCreate, role: O.RoleOp | None) -> bool:
    """Whether `role` skips steps of the pipeline (pipe.skip: a ping-pong role, whose
    warpgroups take turns on the steps and whose count includes the skipped ones)."""
    return role is not None and any(isinstance(x, O.PipeSkip) and x.pipe.id == create.result.id
                                    for x in role.body.walk())


def _turns(model: Model, create: O.PipelineCreate, role: O.RoleOp | None,
           consumers: list) -> bool:
    """Whether `role`'s warpgroups take turns on the pipeline's steps without pipe.skip, as
    the IR states it: the role is the pipeline's only consumer role, its empty barrier counts
    fewer arrivals per phase than the role has warpgroups (ag.pipeline(stages): one release
    per step, a turn's), and a consume step of the role is under a condition (ag.when) on the
    role's warpgroup index. Such a role is not cooperative (every warpgroup, every step:
    _per_warpgroup's claims and message would not describe it), whatever the kernel's name."""
    if role is None or role.warpgroups < 2 or _skips(create, role) or \
            create.consumers >= role.warpgroups:
        return False
    if any(s.site.role is not None and s.site.role.name != role.name for s in consumers):
        return False
    wg = model.sym.get(role.index.id)
    return wg is not None and any(
        sc.kind == "if" and any(mentions(c, wg) for c in sc.constraints)
        for s in consumers if s.site.role is role for sc in s.site.scopes)


def _cooperative(model: Model, create: O.PipelineCreate, role: O.RoleOp | None,
                 consumers: list) -> bool:
    """Whether `role` consumes the pipeline cooperatively: several warpgroups, none of which
    skips its steps (pipe.skip) or takes turns on them (_turns: the empty barrier counts
    fewer arrivals than the role has warpgroups, and a consume step is under a condition on
    the warpgroup). Then every warpgroup consumes every step and arrives on its empty
    barrier, whose count is the role's warpgroups (pipe.arrivals)."""
    return role is not None and role.warpgroups > 1 and not _skips(create, role) and \
        not _turns(model, create, role, consumers)


def _turn_obligations(model: Model, pipe: PipeInfo, role: O.RoleOp, pr, tp, tc,
                      subject: str, sites: list) -> list:
    """A consumer role whose W warpgroups take turns on the steps without pipe.skip (_turns),
    with its count per warpgroup (wg := w, as _per_warpgroup):

      pipe.arrivals  the warpgroups consume c x the producer's steps together, c the empty
                     barrier's count (each step consumed, and its slot released, by c of
                     them: a turn condition that selects several warpgroups for one step
                     refills the slot under one of them; one that selects none hangs);
      pipe.totals    each warpgroup counts the producer's steps: a warpgroup's step counter
                     moves only on its own consume steps and pipe.skip, so one that misses
                     the others' turns waits on slot n % S of ring step n = its own count,
                     not the step its turn is for (another turn's tile, or a hang).

    Counts that are sums over a loop whose steps per iteration vary (a persistent walk whose
    units the warpgroups take in turns) are paired with the producer's iteration by
    iteration, as pipe.totals pairs them (_pair_sums): the warpgroups' sums together against
    c x the producer's, each warpgroup's against the producer's; a violated pairing names
    the iteration and its counts. A producer that runs the same steps in every unit counts
    the walk's trip count times them, paired the same way (_Pair's trip form).

    Without pipe.skip both hold only for W = 1, so every such role is refuted; the findings
    say which of the two is wrong (a turn condition, or the missing skip) and where."""
    wg = model.sym.get(role.index.id)
    wgs = role.warpgroups
    c = pipe.op.consumers
    tp = _unrolled(model, tp)
    counts = [_unrolled(model, z3.substitute(tc, (wg, z3.IntVal(w)))) if wg is not None
              else _unrolled(model, tc) for w in range(wgs)]
    loc = pipe.op.loc
    what = subject + f": the turns of consumer role {role.name!r} vs {pr}"
    # one iteration index for every pair, so a counterexample's counts are one iteration's
    t = fresh_int("iteration") if any(_sums(model, n) for n in counts) else None
    together = _pair_sums(model, tp, counts, "", t, times=c)
    each = [_pair_sums(model, tp, [n], f"warpgroup {w}: ", t) for w, n in enumerate(counts)]
    if any(isinstance(x, str) for x in [together] + each):
        return [Finding("pipe.totals", loc, what, "unknown",
                        "the warpgroups' step counts are sums over loops whose steps per "
                        "iteration depend on the index and the warpgroup, in a form the "
                        "verifier does not compare")]
    mine = [s for s in sites if s.kind == "consume" and s.site.role is role]
    loops = sorted({str(sc.op.loc) for s in mine for sc in s.site.loops()})
    conds = sorted({str(sc.op.loc) for s in mine for sc in s.site.scopes if sc.kind == "if"})
    where = (f"consume step(s) at {', '.join(str(s.op.loc) for s in mine)}"
             + (f" in the loop(s) at {', '.join(loops)}" if loops else "")
             + (f" under the turn condition(s) at {', '.join(conds)}" if conds else ""))

    def tally(zm, violated):
        """(each warpgroup's steps, the producer's, the iteration index or None, whether the
        sums walk different iterations): the totals, or one iteration's when a pairing claim
        is violated (the totals are then uninterpreted sums, whose values in a model mean
        nothing)."""
        if together is None or not any(x is not None and x.violated(violated)
                                       for x in [together] + each):
            return [value(zm, n) for n in counts], value(zm, tp), None, False
        it, made, _ = together.at(zm)
        apart = any(x is not None and x.apart(violated) for x in [together] + each)
        return together.each(zm), made, it, apart

    def witness(zm, w, per, made, it):
        # an iteration's counts under their own keys (as _per_warpgroup's), never as totals
        counted = ({"steps_by_warpgroup": dict(enumerate(per)), "producer_steps": made}
                   if it is None else
                   {"iteration_index": it, "steps_by_warpgroup_in_iteration": dict(enumerate(per)),
                    "producer_steps_in_iteration": made})
        wit = {"shapes": W.shapes(model, zm), "role": role.name, "warpgroup": w,
               "thread": "every thread of the warpgroup", **counted,
               "producer_role": pr, "empty_barrier_count": c,
               "consume_sites": [str(s.op.loc) for s in mine], "loops": loops,
               "conditions": conds,
               # names.annotate adds what these lines read (a loop bound, a turn condition)
               "related_sites": [str(s.op.loc) for s in mine] + loops + conds}
        if model.grid is not None:
            wit["cta"] = tuple(value(zm, model.sym[v.id]) for v in model.grid.ids)
        return wit

    def walked_apart(zm, w, per, made, it):
        msg = (f"with {W.shapes(model, zm)} the warpgroups of consumer role {role.name!r}, "
               f"which take turns on the steps ({where}), and the producer role {pr!r} walk "
               f"different iterations of the loop whose steps per iteration vary: a "
               f"warpgroup waits for a fill that never comes or reads another iteration's "
               f"tile (role {role.name!r}, warpgroup {w}, every thread)")
        return msg, witness(zm, w, per, made, it)

    def decode_once(zm, violated):
        per, made, it, apart = tally(zm, violated)
        more = sum(per) > c * made
        # the warpgroup named: the one that consumes most (steps of another's turn) or least
        w = (max if more else min)(range(wgs), key=lambda i: per[i])
        if apart:
            return walked_apart(zm, w, per, made, it)
        # in one iteration the warpgroups with steps are those whose turn it is: as many as
        # the barrier counts, the turn condition is right and their step count is not
        took = sum(1 for n in per if n)
        if it is not None and (took <= c if more else took >= c > 0):
            w = max(range(wgs), key=lambda i: per[i])
            why = (f"warpgroup {w}, whose turn it is, consumes "
                   + (f"more steps than the producer fills in the iteration: it reads the "
                      f"next iteration's tiles, and at the end waits forever for a fill"
                      if more else
                      f"fewer steps than the producer fills in the iteration, whose other "
                      f"slots are never released: the producer waits forever"))
        elif more:
            why = (f"the turn condition selects more than {c} warpgroup(s) for some step, "
                   f"each of which releases its slot, so the slot is refilled while "
                   f"warpgroup {w} still reads it")
        else:
            why = (f"the turn condition selects no warpgroup for some step, whose slot is "
                   f"never released: the producer waits forever")
        there = "" if it is None else f" in iteration {it} of its outer loop"
        each_ = ", ".join(f"warpgroup {i}: {n}" for i, n in enumerate(per))
        msg = (f"with {W.shapes(model, zm)} the {wgs} warpgroups of consumer role "
               f"{role.name!r}, which take turns on the steps ({where}), consume {sum(per)} "
               f"steps together{there} ({each_}) but the producer role {pr!r} produces {made} "
               f"and the empty barriers count {c} release(s) per step: {why}"
               f" (role {role.name!r}, warpgroup {w}, every thread)")
        return msg, witness(zm, w, per, made, it)

    def decode_counter(zm, violated):
        per, made, it, apart = tally(zm, violated)
        w = next((i for i, n in enumerate(per) if n != made), 0)
        if apart:
            return walked_apart(zm, w, per, made, it)
        there = "" if it is None else f" in iteration {it} of its outer loop"
        each_ = ", ".join(f"warpgroup {i}: {n}" for i, n in enumerate(per))
        msg = (f"with {W.shapes(model, zm)} warpgroup {w} of consumer role {role.name!r}, "
               f"whose warpgroups take turns on the steps ({where}; the empty barriers count "
               f"{c} release(s) per step), counts {per[w]} steps{there} but the producer role "
               f"{pr!r} produces {made} ({each_}): a warpgroup's step counter moves only on "
               f"its own consume steps and pipe.skip, none of which covers the other "
               f"warpgroups' turns, so warpgroup {w}'s step n waits on slot n % S for ring "
               f"step n, not the step its turn is for: it reads another turn's tile"
               + (" or waits forever" if per[w] < made else "")
               + f" (role {role.name!r}, warpgroup {w}, every thread)")
        return msg, witness(zm, w, per, made, it)

    once_claims = [(f"the warpgroups consume {c} x the producer's steps together",
                    _given([together] if together is not None else [],
                           z3.Sum(counts) == c * tp))]
    counter_claims = [(f"warpgroup {w} counts the producer's steps",
                       _given([x] if x is not None else [], counts[w] == tp))
                      for w, x in enumerate(each)]
    once = Obligation("pipe.arrivals", loc, what + ": each step consumed by as many "
                      "warpgroups as the empty barrier counts", list(model.premises),
                      (together.claims() if together is not None else []) + once_claims,
                      decode_once, minimize=list(model.params.values()),
                      fix=f"a turn condition that selects {c} warpgroup(s) for each step "
                          f"(e.g. ag.when(h % {wgs} == wg) over the units h), or "
                          f"ag.pipeline(..., consumers={wgs}) when every warpgroup consumes "
                          f"every step")
    counter = Obligation("pipe.totals", loc, what + ": every warpgroup's step counter "
                         "follows the ring", list(model.premises),
                         [cl for x in each if x is not None for cl in x.claims()]
                         + counter_claims, decode_counter,
                         minimize=list(model.params.values()),
                         fix="skip the other warpgroups' steps in each warpgroup: "
                             "`with ag.when(<not its turn>): ring.skip(<their steps>)` "
                             "beside the turn (the ping-pong consumers of "
                             "argus/kernels/gemm.py), so every counter follows the ring")
    return [once, counter]


def _per_warpgroup(model: Model, pipe: PipeInfo, role: O.RoleOp, pr, tp, tc, subject: str,
                   sites: list):
    """pipe.totals for a cooperative consumer role whose step count names the warpgroup index
    (a loop bound `k_tiles - wg`, a consume under `ag.when(wg == 0)`): every warpgroup w in
    [0, W) consumes as many steps as warpgroup 0 and as the producer produces, one claim per
    warpgroup with wg := w. Every step's slot is released by one arrival of each warpgroup
    (empty barrier count = W), and an ordered section inside a step (ag.ordered,
    ordered.pairs) hands the turn between warpgroups in the same step, so a warpgroup that
    consumes fewer steps hangs the producer (or, with fewer produced, the others) and leaves
    the others waiting for its turn. None when the count does not name the warpgroup (then
    it is the same for all, and _totals compares it with the producer's)."""
    wg = model.sym.get(role.index.id)
    if wg is None or not mentions(tc, wg):
        return None
    wgs = role.warpgroups
    tp = _unrolled(model, tp)
    counts = [_unrolled(model, z3.substitute(tc, (wg, z3.IntVal(w)))) for w in range(wgs)]
    loc = pipe.op.loc
    what = subject + f": every warpgroup of consumer role {role.name!r} vs {pr}"
    # a sum over a loop of symbolic length whose steps per iteration vary (a causal
    # persistent walk with own_blocks: a warpgroup's blocks plus its unread releases per
    # unit): each warpgroup's sum paired with the producer's, iteration by iteration
    # (_pair_sums, as two roles' in _totals), one iteration index for all of them
    t = fresh_int("iteration") if any(_sums(model, c) for c in counts) else None
    pairs = [_pair_sums(model, tp, [c], f"warpgroup {w}: ", t) for w, c in enumerate(counts)]
    if any(isinstance(x, str) for x in pairs):
        return Finding("pipe.totals", loc, what, "unknown",
                       "the warpgroups' step counts are sums over loops whose steps per "
                       "iteration depend on the index and the warpgroup, in a form the "
                       "verifier does not compare")
    paired = [(w, x) for w, x in enumerate(pairs) if x is not None]
    pairs = [x for _, x in paired]
    mine = [s for s in sites if s.kind == "consume" and s.site.role is role]
    claims = [c for x in pairs for c in x.claims()]
    claims += [(f"warpgroup {w} consumes as many steps as warpgroup 0",
                _given(pairs, counts[w] == counts[0])) for w in range(1, wgs)]
    claims.append(("warpgroup 0 consumes as many steps as the producer produces",
                   _given(pairs, counts[0] == tp)))

    def decode(zm, violated):
        per = [value(zm, c) for c in counts]
        made = value(zm, tp)
        # the warpgroup named: the first whose count differs from the producer's
        w = next((i for i, n in enumerate(per) if n != made), 0)
        loops = sorted({str(sc.op.loc) for s in mine for sc in s.site.loops()})
        conds = sorted({str(sc.op.loc) for s in mine for sc in s.site.scopes
                        if sc.kind == "if"})
        wit = {"shapes": W.shapes(model, zm), "role": role.name, "warpgroup": w,
               "thread": "every thread of the warpgroup",
               "steps_by_warpgroup": {i: n for i, n in enumerate(per)},
               "producer_steps": made, "producer_role": pr,
               "consume_sites": [str(s.op.loc) for s in mine], "loops": loops,
               "conditions": conds,
               # names.annotate adds what these lines read (a loop bound, a condition)
               "related_sites": [str(s.op.loc) for s in mine] + loops + conds}
        if model.grid is not None:
            wit["cta"] = tuple(value(zm, model.sym[v.id]) for v in model.grid.ids)
        each = ", ".join(f"warpgroup {i}: {n}" for i, n in enumerate(per))
        where = (f"its consume step(s) at {', '.join(wit['consume_sites'])}"
                 + (f" in the loop(s) at {', '.join(loops)}" if loops else "")
                 + (f" under the condition(s) at {', '.join(conds)}" if conds else ""))
        w, off = next(((i, x) for i, x in paired if x.violated(violated)), (w, None))
        if off is not None:
            it, ps, cs = off.at(zm)
            wit.update({"warpgroup": w, "iteration_index": it,
                        "producer_steps_in_iteration": ps, "consumer_steps_in_iteration": cs})
            same = not any(n == off.label + "same iterations" for n in violated)
            msg = (f"with {wit['shapes']} warpgroup {w} of the cooperative consumer role "
                   f"{role.name!r} ({where}) "
                   + (f"consumes {cs} steps in iteration {it} of its outer loop but the "
                      f"producer role {pr!r} produces {ps}" if same else
                      f"and the producer role {pr!r} walk different iterations of the loop "
                      f"whose steps per iteration vary")
                   + f": each step's slot is released once all {wgs} warpgroups arrive, so "
                   + ("the producer waits forever for a release" if same and cs < ps else
                      f"warpgroup {w} reads another iteration's tile or waits forever for a "
                      f"fill")
                   + f" (role {role.name!r}, warpgroup {w}, every thread)")
            return msg, wit
        msg = (f"with {wit['shapes']} warpgroup {w} of the cooperative consumer role "
               f"{role.name!r} consumes {per[w]} steps ({where}) but the producer role "
               f"{pr!r} produces {made} ({each}): each step's slot is released once all "
               f"{wgs} warpgroups arrive, and an ordered section inside a step waits for every "
               f"warpgroup's turn, so " + ("the producer waits forever for a release"
                                           if per[w] < made else
                                           f"warpgroup {w} waits forever for a fill")
               + f" (role {role.name!r}, warpgroup {w}, every thread)")
        return msg, wit
    return Obligation("pipe.totals", loc, what, list(model.premises), claims, decode,
                      minimize=list(model.params.values()),
                      fix="give every consumer warpgroup of a cooperative role the same "
                          "steps as the producer (the same loop bound, no ag.when on the "
                          "warpgroup around a consume step); a role whose warpgroups take "
                          "turns skips the others' steps with pipe.skip")


def _given(pairs: list, claim):
    """`claim` given every pair's sums equal (`_Pair.given`; the pairs' claims prove them)."""
    for x in pairs:
        claim = x.given(claim)
    return claim


def _slot(model: Model, pipe: PipeInfo, step: StepInfo, subject: str) -> Obligation:
    S = pipe.stages
    proto = protocol(step)
    n = step.counter
    got = _ev(model, step, proto.stage, n, S)
    prem = list(model.premises) + step.site.constraints()

    def decode(zm, violated):
        wit = W.context(model, zm, step.site)
        nv = value(zm, n)
        wit.update({"step": nv, "expected_slot": nv % S, "slot": value(zm, got),
                    "stage_expr": proto.stage})
        msg = (f"{step.kind} step n = {nv} ({_where(wit)}) uses slot {value(zm, got)} "
               f"(stage_expr {proto.stage!r}) but step {nv} of the ring is slot {nv % S}: the "
               f"{'TMA lands in a slot the consumer of that step does not read' if step.kind == 'produce' else 'consumer reads the slot of another step'}")
        return msg, wit
    return Obligation("pipe.slot", step.op.loc, f"{subject}, {step.kind} at {step.op.loc}",
                      prem, [("slot == n % S", got == n % S)], decode,
                      minimize=[s.var for s in step.site.scopes if s.var is not None]
                      + list(model.params.values()),
                      fix="stage = n % S, n the role's step counter continued across loops "
                          "(never reset per tile)")


def _known_total(model: Model, pipe: PipeInfo, c: StepInfo, T) -> list:
    """T is the consumer role's real step count when the model knows it as a linear term (a
    Q tile loaded once through a one-stage ring runs exactly one step: a deadlock "with 2
    steps in total" is not reachable there). pipe.totals proves the producer runs as many.
    A non-linear count (tiles x k_tiles of a persistent kernel) leaves T free: sound, and
    the replay below judges any counterexample."""
    role = c.site.role
    total = pipe.totals.get((role.name if role is not None else None, "consume"))
    if total is None:
        return []
    total = z3.simplify(_num(total))
    if not _linear(total):
        return []
    if z3.is_int_value(total):
        return [T == total]
    roles = [k for s in c.site.scopes if s.kind == "role" for k in s.constraints]
    return [T == total] + list(model.premises) + roles


def _linear(term) -> bool:
    """No product of two non-constants, no division or remainder by a non-constant."""
    for t in subterms(term):
        if z3.is_app(t):
            k = t.decl().kind()
            args = t.children()
            if k == z3.Z3_OP_MUL and sum(not z3.is_int_value(a) for a in args) > 1:
                return False
            if k in (z3.Z3_OP_IDIV, z3.Z3_OP_MOD, z3.Z3_OP_DIV, z3.Z3_OP_REM) and \
                    not z3.is_int_value(args[1]):
                return False
    return True


def _where(wit: dict) -> str:
    parts = []
    if "cta" in wit:
        parts.append(f"CTA {wit['cta']}")
    if "role" in wit:
        parts.append(f"{wit['role']} warpgroup {wit.get('warpgroup', 0)}"
                     + (f", thread {wit['thread']}" if "thread" in wit else ""))
    elif "thread" in wit:
        parts.append(f"thread {wit['thread']}")
    if "iteration" in wit:
        parts.append("iteration " + ", ".join(f"{v} of {k}" for k, v in wit["iteration"].items()))
    return "; ".join(parts)


def _protocol(model: Model, pipe: PipeInfo, p: StepInfo, c: StepInfo, lag: int, subject: str):
    """O1..O4 for one producer site and one consumer site."""
    S = pipe.stages
    pp, cp = protocol(p), protocol(c)
    uses_loops = any(_uses_loop_values(t) for t in (pp.stage, pp.parity, cp.stage, cp.parity))
    # named by the steps' program points (Site.seq): the same query text in every run
    P, C, T = z3.Ints(f"P!{p.site.seq} C!{c.site.seq} T!{c.site.seq}")
    R = z3.If(C == T, T, z3.If(C - lag > 0, C - lag, 0)) if lag else C
    base = [P >= 0, C >= 0, T >= 0, C <= T, P <= T] + _known_total(model, pipe, c, T)
    inv = [R <= P, P <= R + S, C <= P]
    extra_c: list = []
    extra_p: list = []
    if uses_loops:
        # expressions naming loop values: evaluate them at the sites' real counters
        extra_c = list(model.premises) + c.site.constraints() + [c.counter == C]
        extra_p = list(model.premises) + p.site.constraints() + [p.counter == P]
    sc = _ev(model, c, cp.stage, C, S)
    pc = _ev(model, c, cp.parity, C, S)
    sp = _ev(model, p, pp.stage, P, S)
    ppar = _ev(model, p, pp.parity, P, S)
    full_done = _completed(P, sc, S)
    empty_done = _completed(R, sp, S)
    c_pass = (full_done % 2) != pc
    p_pass = (empty_done % 2) != ppar
    last_writer = sc + (full_done - 1) * S
    obs = []
    minimize = [C, P, T] + list(model.params.values())

    def decode_factory(kind):
        def decode(zm, violated):
            Pv, Cv, Tv = value(zm, P), value(zm, C), value(zm, T)
            wit = {"producer_steps_done": Pv, "consumer_steps_done": Cv, "total_steps": Tv,
                   "stages": S, "wgmma_in_flight": lag,
                   "consumer_stage_expr": cp.stage, "consumer_parity_expr": cp.parity,
                   "producer_stage_expr": pp.stage, "producer_parity_expr": pp.parity}
            if uses_loops:
                wit.update({"consumer": W.context(model, zm, c.site)})
            if kind == "O1":
                s, par, fd = value(zm, sc), value(zm, pc), value(zm, full_done)
                held = "nothing yet (uninitialised shared memory)" if fd <= 0 else \
                    f"the tile of step {value(zm, last_writer)}"
                wit.update({"slot": s, "parity": par, "phases_completed": fd})
                msg = (f"consumer step {Cv} waits on full[{s}] for parity {par}; full[{s}] has "
                       f"completed {fd} phase(s) after {Pv} producer step(s), so the wait "
                       f"passes, but slot {s} holds {held}, not the tile of step {Cv}")
            elif kind == "O2":
                s, par = value(zm, sp), value(zm, ppar)
                wit.update({"slot": s, "parity": par, "releases": value(zm, R)})
                msg = (f"producer step {Pv} waits on empty[{s}] for parity {par}, which passes "
                       f"after {value(zm, R)} release(s), and refills slot {s} while the "
                       f"consumers still own step {Pv - S} (they have finished {Cv} step(s))")
            elif kind == "O3":
                s, par = value(zm, sc), value(zm, pc)
                wit.update({"slot": s, "parity": par})
                msg = (f"consumer step {Cv} passes its wait on full[{s}] (parity {par}) although "
                       f"the producer has issued only {Pv} step(s)")
            else:
                msg = (f"with {Tv} step(s) in total, the producer at step {Pv} and the "
                       f"consumer at step {Cv} both wait forever")
            # who waits (O1, O3: the consumers; O2: the producer; a deadlock: both), from
            # the steps' own roles (W.issuer), not names.who's lookup of the obligation's line
            prod = W.issuer(p.site.role, "the elected thread")
            cons = W.issuer(c.site.role, "every thread")
            for k, v in (prod if kind == "O2" else cons)[0].items():
                wit.setdefault(k, v)
            if kind == "O4":
                msg += f" (the producer: {prod[1]}; the consumers: {cons[1]})"
            else:
                msg += f" ({'the producer' if kind == 'O2' else 'the consumers'}: " \
                       f"{(prod if kind == 'O2' else cons)[1]})"
            return msg, wit
        return decode

    def confirm(wit):
        text, reached = replay(model, pipe, p, c, lag, wit)
        out = {"replay": text, "replay_reachable": reached}
        if reached is False:
            # the replay ran the real step sequences of every launch when they do not depend
            # on shapes, CTA or loop values: then "unreachable" is a proof, else it is unknown
            out["replay_exhaustive"] = not uses_loops and _fixed_steps(model, pipe, p, c)
        return out

    obs.append(Obligation("pipe.data", c.op.loc, subject + f": O1 at consume {c.op.loc}",
                          base + inv + extra_c + [c_pass, C < T],
                          [("slot holds step C", z3.And(full_done >= 1, last_writer == C))],
                          decode_factory("O1"), minimize, confirm=confirm))
    obs.append(Obligation("pipe.no-overwrite", p.op.loc,
                          subject + f": O2 at produce {p.op.loc}",
                          base + inv + extra_p + [p_pass, P < T],
                          [("P + 1 <= R + S", P + 1 <= R + S)], decode_factory("O2"), minimize,
                          confirm=confirm))
    obs.append(Obligation("pipe.no-early-read", c.op.loc,
                          subject + f": O3 at consume {c.op.loc}",
                          base + inv + extra_c + [c_pass, C < T], [("C + 1 <= P", C + 1 <= P)],
                          decode_factory("O3"), minimize, confirm=confirm))
    if not uses_loops:
        obs.append(Obligation("pipe.deadlock", c.op.loc, subject + ": O4",
                              base + inv + [z3.Not(z3.And(P == T, C == T))],
                              [("some role can step", z3.Or(z3.And(P < T, p_pass),
                                                            z3.And(C < T, c_pass)))],
                              decode_factory("O4"), minimize, confirm=confirm))
    return obs


# ----------------------------------------------------------------------------- replay


def _concrete(model: Model, step: StepInfo, text: str, n: int, S: int, env: dict) -> int:
    names = {"n": n, "S": S}
    names.update({f"%{vid}": v for vid, v in env.items()})
    return int(exprs.evaluate(text, exprs.Env(names)))


REPLAY_STEPS = 64   # steps per role the replay runs at most


def _role_steps(model: Model, pipe: PipeInfo, kind: str, shapes: dict,
                limit: int = REPLAY_STEPS):
    """The concrete step sequence [(site, {value id: int})] of one role instance of `kind`
    on `pipe` for the given shapes (CTA 0, warpgroup 0), in program order."""
    steps = [s for s in pipe.steps if s.kind == kind]
    if not steps:
        return []
    role = steps[0].site.role
    body = role.body if role is not None else model.kernel.body
    subs = [(model.params[k], z3.IntVal(v)) for k, v in shapes.items() if k in model.params]
    if model.grid is not None:
        subs += [(v, z3.IntVal(0)) for v, _, _ in model.grid_vars]
    if role is not None:
        subs.append((model.sym[role.index.id], z3.IntVal(0)))
    out: list = []
    by_stage = {s.op.stage.id: s for s in steps}   # by the step's stage value (IR name)

    def ev(term, env):
        t = _num(term)
        pairs = subs + [(model.sym[vid], z3.IntVal(v)) for vid, v in env.items()
                        if vid in model.sym]
        r = z3.simplify(z3.substitute(t, *pairs) if pairs else t)
        if not z3.is_int_value(r):
            raise ValueError(f"cannot evaluate {t} concretely")
        return r.as_long()

    def walk(region, env):
        for op in region.ops:
            if len(out) >= limit:
                return
            if isinstance(op, O.For):
                start, stop, step = (ev(model.scalar(v), env) for v in (op.start, op.stop,
                                                                        op.step))
                for i in range(start, stop, step):
                    walk(op.body, {**env, op.var.id: i})
            elif isinstance(op, O.If):
                if z3.is_true(z3.simplify(z3.substitute(
                        model._bool(op.cond),
                        *(subs + [(model.sym[k], z3.IntVal(v)) for k, v in env.items()])))):
                    walk(op.body, env)
            elif isinstance(op, (O.Produce, O.Consume)):
                if op.stage.id in by_stage:
                    out.append((by_stage[op.stage.id], dict(env)))
                walk(op.body, env)
            elif isinstance(op, O.Elect):
                walk(op.body, env)
    walk(body, {})
    return out


def _fixed_steps(model: Model, pipe: PipeInfo, p: StepInfo, c: StepInfo) -> bool:
    """Both roles' step counts are constants (the same for every shape and CTA)."""
    for st, kind in ((p, "produce"), (c, "consume")):
        role = st.site.role
        total = pipe.totals.get((role.name if role is not None else None, kind))
        total = z3.simplify(_num(total)) if total is not None else None
        if total is None or not z3.is_int_value(total) or total.as_long() > REPLAY_STEPS:
            return False
    return True


def replay(model: Model, pipe: PipeInfo, p: StepInfo, c: StepInfo, lag: int, wit: dict,
           max_states: int = 20000) -> tuple[str, bool | None]:
    """Explicit-state search over all interleavings of producer and consumer from (0, 0)
    with the real per-step expressions. Returns (what it found, whether a violation is
    reachable: True, False when the search finished without one, None when it could not
    decide: the state bound, or no concrete step sequence)."""
    S = pipe.stages
    shapes = dict(wit.get("shapes") or (wit.get("consumer") or {}).get("shapes") or {})
    want = max(int(wit.get("total_steps", 0) or 0), 2 * S + 2)
    prod = cons = []
    for scale in (1, 2, 4, 8, 16, 64, 256, 1024, 4096):
        # grow the shapes the witness left open until both roles run enough steps
        trial = {name: shapes.get(name, scale) for name in model.params}
        try:
            prod = _role_steps(model, pipe, "produce", trial)
            cons = _role_steps(model, pipe, "consume", trial)
        except ValueError:
            prod = cons = []
            break
        shapes_used = trial
        if min(len(prod), len(cons)) >= want:
            break
    shapes = shapes_used if prod else shapes
    synthetic = not prod or not cons
    if synthetic:
        # fall back to a plain counter sequence of the two sites
        total = max(4, int(wit.get("total_steps", 2 * S + 2) or 2 * S + 2))
        total = min(total, 4 * S + 4)
        prod = [(p, {})] * total
        cons = [(c, {})] * total
    Tp, Tc = len(prod), len(cons)

    def pr(step_i):
        site, env = prod[step_i]
        pp = protocol(site)
        return (_concrete(model, site, pp.stage, step_i, S, env),
                _concrete(model, site, pp.parity, step_i, S, env))

    def co(step_i):
        site, env = cons[step_i]
        cp = protocol(site)
        return (_concrete(model, site, cp.stage, step_i, S, env),
                _concrete(model, site, cp.parity, step_i, S, env))

    # state: (P, C); slot contents and barrier phase counts are functions of the history, which
    # for ring-ordered fills we recompute from the recorded fills/releases per slot
    start = (0, 0, (), ())
    seen = {start[:2]}
    frontier = [(start, [(0, 0)])]
    while frontier:
        nxt = []
        for (P, C, fills, rels), path in frontier:
            moves = []
            R = C if C == Tc else max(0, C - lag)
            if P < Tp:
                s, par = pr(P)
                empty_done = sum(1 for (slot, step) in _releases(cons, R, co) if slot == s)
                if empty_done % 2 != par:
                    owner = [step for (slot, step) in _owned(fills, _releases(cons, R, co))
                             if slot == s]
                    if owner:
                        return (f"OVERWRITE reachable: {_path(path)}: producer step {P} refills "
                                f"slot {s} while consumer step {owner[0]} still owns it"), True
                    moves.append((P + 1, C, fills + ((s, P),), rels))
            if C < Tc:
                s, par = co(C)
                full_done = sum(1 for f in fills if f[0] == s)
                if full_done % 2 != par:
                    last = [st for (slot, st) in fills if slot == s]
                    if not last or last[-1] != C:
                        held = "nothing (uninitialised)" if not last else f"step {last[-1]}"
                        return (f"BAD READ reachable: {_path(path)}: consumer step {C} passes "
                                f"its wait on full[{s}] and reads slot {s} holding {held}"), True
                    moves.append((P, C + 1, fills, rels))
            if not moves and not (P == Tp and C == Tc):
                return (f"DEADLOCK reachable: {_path(path)}: producer at step {P}, consumer "
                        f"at step {C}, both waiting"), True
            for (P2, C2, f2, r2) in moves:
                if (P2, C2) in seen:
                    continue
                seen.add((P2, C2))
                if len(seen) > max_states:
                    return "replay bound reached without a violation", None
                nxt.append(((P2, C2, f2, r2), path + [(P2, C2)]))
        frontier = nxt
    text = (f"no violation reachable in {Tp} producer and {Tc} consumer steps "
            f"(shapes {shapes}): the inductive counterexample is unreachable there")
    return text, (None if synthetic else False)


def _releases(cons, R, co):
    return [(co(i)[0], i) for i in range(R)]


def _owned(fills, releases):
    """(slot, step) filled but not yet released."""
    released = {step for (_, step) in releases}
    return [(slot, step) for (slot, step) in fills if step not in released]


def _path(path) -> str:
    if len(path) > 8:
        path = path[:3] + [("…",)] + path[-4:]
    return " -> ".join("(…)" if len(x) == 1 else f"({x[0]},{x[1]})" for x in path)
