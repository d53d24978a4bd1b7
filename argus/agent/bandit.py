"""The offline planner: a contextual bandit over knowledge-card actions with a bounded parameter
search inside each action, pruned by the family's static check, the verifier and the cost model
before anything runs. It needs no network; it is what CI runs and the baseline an LLM planner
must beat.

Arms are the schedule cards that apply to the task (conditions over its features, the context).
Each arm keeps a Gaussian posterior over the gain it buys (log improvement over the incumbent):
prior mean from the experience store (the card's mean gain on earlier runs of this family) or,
with no history, the card's own `expected_gain`; prior weight up to PRIOR_WEIGHT pseudo-steps.
Thompson sampling draws one value per arm (or UCB scores each arm), and arms are tried in that
order. Inside an arm, `Family.expand` gives the bounded parameter search from the incumbent;
candidates already tried are skipped; in dense mode the family's static check (declared
ranges, then the lowering) drops illegal ones (recorded as pruned, with the finding as the
reason); the cost model ranks the rest and drops those predicted PRUNE_RATIO times slower
than the incumbent; then the verifier screens them in order (lower + verify in the worker, no
compile, no run), and the first one that passes is proposed.
Arms are first searched for candidates the cost model predicts to beat the incumbent; when none
has one, the planner explores (`explore`, on unless switched off): it proposes the best-predicted
untried candidate of the whole neighbourhood, every arm's expansion plus, for a family over
Schedule classes, the schedules one declared step away (`ScheduleFamily.neighbors`, which also
gives a family without cards a move set). So a run spends its budget instead of stopping at the
first step where the model predicts no gain: on a GPU the measurement may disagree with the
model, and without one each explored candidate is still verified, compiled and re-estimated with
the compiler's resources (registers, spills) that the ranking here does not know.
An arm with nothing left is skipped for this proposal; when nothing is left anywhere, the planner
returns None and the loop stops early ("nothing left to try").
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from argus.agent.candidate import Candidate, Step
from argus.agent.families import Family
from argus.agent.knowledge import Card, load_cards
from argus.agent.planner import PlanState, Proposal
from argus.agent.task import TaskSpec

PRIOR_WEIGHT = 4.0       # pseudo-observations a stored prior is worth at most
NOISE = 0.25             # observation noise of a gain (log units)
PRUNE_RATIO = 1.5        # drop candidates the cost model predicts this much slower
UCB_C = 0.6
MIN_PREDICTED_GAIN = 0.01   # first pass: candidates predicted at least 1% faster
NEIGHBORS = "space.neighbors"   # the card name of a one-step move along the declared space


@dataclass
class Arm:
    card: Card
    prior_mean: float
    prior_weight: float
    n: int = 0
    total: float = 0.0

    @property
    def mean(self) -> float:
        return (self.prior_mean * self.prior_weight + self.total) / (self.prior_weight + self.n)

    @property
    def weight(self) -> float:
        return self.prior_weight + self.n


def schedule_arms(task: TaskSpec, family: Family, cards: tuple[Card, ...] | None = None,
                  priors: dict[str, tuple[int, float, float]] | None = None) -> list[Arm]:
    """The bandit's arms for a task: applicable schedule cards, with priors."""
    features = task.features()
    arms = []
    for card in cards if cards is not None else load_cards():
        if family.applies(card) and card.applies(features):
            n, mean, _ = (priors or {}).get(card.id, (0, card.expected_gain, 0.0))
            weight = min(PRIOR_WEIGHT, float(n)) if n else 1.0
            arms.append(Arm(card, mean if n else card.expected_gain, weight))
    return arms


class BanditPlanner:
    """Thompson sampling (or UCB) over schedule cards; see the module docstring."""

    def __init__(self, task: TaskSpec, family: Family, *, strategy: str = "thompson",
                 priors: dict[str, tuple[int, float, float]] | None = None,
                 cards: tuple[Card, ...] | None = None, screen_limit: int = 6,
                 prune_ratio: float = PRUNE_RATIO, explore: bool = True):
        if strategy not in ("thompson", "ucb"):
            raise ValueError(f"strategy {strategy!r}: use 'thompson' or 'ucb'")
        self.name = "bandit"
        self.strategy = strategy
        self.task, self.family = task, family
        self.arms = {a.card.id: a for a in schedule_arms(task, family, cards, priors)}
        self.screen_limit = screen_limit
        self.prune_ratio = prune_ratio
        self.explore = explore
        self.t = 0

    # -- learning ------------------------------------------------------------------------------
    def observe(self, step: Step, state: PlanState) -> None:
        self.t += 1
        arm = self.arms.get(step.card)
        if arm is not None:
            arm.n += 1
            arm.total += max(-1.0, min(1.0, step.gain))

    def scores(self, rng: random.Random) -> list[tuple[float, Arm]]:
        out = []
        for arm in self.arms.values():
            if self.strategy == "thompson":
                score = rng.gauss(arm.mean, NOISE / math.sqrt(arm.weight))
            else:
                score = arm.mean + UCB_C * math.sqrt(math.log(self.t + 2) / arm.weight)
            out.append((score, arm))
        out.sort(key=lambda sa: (-sa[0], sa[1].card.id))
        return out

    # -- choosing ------------------------------------------------------------------------------
    def propose(self, state: PlanState, seed: int) -> Proposal | None:
        """Arms in sampled order, for a candidate the cost model predicts to beat the incumbent
        (by MIN_PREDICTED_GAIN). When no arm has one and `explore` is on, the best-predicted
        untried candidate of the whole neighbourhood: every arm's expansion and, for a family
        over Schedule classes, the schedules one declared step away (`neighbors`; the move set
        of a family without cards). The model is a guide: on a GPU the measurement may disagree
        with it, and without one each explored candidate is still verified, compiled and
        re-estimated with the compiler's resources (registers, spills), which the ranking here
        does not know."""
        rng = random.Random(seed)
        incumbent = state.incumbent_params
        inc_est = self.family.estimate(self.task, incumbent)
        pruned: list[dict[str, Any]] = []
        budget = [self.screen_limit]
        order = self.scores(rng)
        for score, arm in order:
            prop = self._from_arm(arm, score, state, incumbent, inc_est, pruned, budget)
            if prop is not None:
                return prop
        return self._explore(order, state, incumbent, inc_est, pruned, budget,
                             only_improving=not self.explore)

    def _explore(self, order: list[tuple[float, Arm]], state: PlanState,
                 incumbent: dict[str, Any], inc_est, pruned: list[dict[str, Any]],
                 budget: list[int], only_improving: bool = False) -> Proposal | None:
        """The best-predicted untried candidate of every arm's expansion and the family's
        neighbours (ties: arms in sampled order, then neighbours), legal and screened; with
        `only_improving` (exploration off), only one predicted to beat the incumbent (a
        neighbour may be: the arms' pass above does not see the neighbours)."""
        pool: dict[str, tuple[dict[str, Any], str]] = {}
        moves = [(arm.card.id, self.family.expand(self.task, arm.card, incumbent))
                 for _, arm in order]
        neighbors = getattr(self.family, "neighbors", None)
        if neighbors is not None:
            moves.append((NEIGHBORS, neighbors(self.task, incumbent)))
        for card, cands in moves:
            for c in cands:
                key = Candidate.of(c).key
                if key not in state.tried and key not in pool:
                    pool[key] = (c, card)
        ranked = []
        for i, (c, card) in enumerate(pool.values()):
            est = self.family.estimate(self.task, c)
            ranked.append((est.ms if est is not None else math.inf, i, c, card))
        ranked.sort(key=lambda r: (r[0], r[1]))
        if only_improving:
            if inc_est is None:
                return None
            ranked = [r for r in ranked if r[0] < inc_est.ms * (1 - MIN_PREDICTED_GAIN)]
        for ms, _, c, card in ranked:
            cand = Candidate.of(c, card=card)
            if state.dense:
                errors = [d for d in self.family.static_check(self.task, c)
                          if d.severity == "error"]
                if errors:
                    pruned.append(_pruned(c, card, "rule", errors[0].code,
                                          str(errors[0]).splitlines()[0]))
                    state.tried.add(cand.key)
                    continue
                # past the screening budget the candidate goes unscreened: its evaluation
                # verifies it anyway, and stopping here would leave the run's budget unspent
                if state.screen is not None and budget[0] > 0:
                    budget[0] -= 1
                    outcome = state.screen(cand)
                    if not outcome.ok:
                        first = next((d for d in outcome.diagnostics
                                      if d.get("severity") == "error"), {})
                        pruned.append(_pruned(c, card, outcome.status,
                                              first.get("code", outcome.stage),
                                              outcome.message.splitlines()[0][:300]
                                              if outcome.message else ""))
                        state.tried.add(cand.key)
                        continue
            arm = self.arms.get(card)
            who = (f"{card} (posterior mean gain {arm.mean:+.3f} over {arm.n} tries)"
                   if arm is not None else "a one-step move along the declared schedule space")
            faster = inc_est is not None and ms < inc_est.ms * (1 - MIN_PREDICTED_GAIN)
            why = ((f"the best-predicted of {len(ranked)} untried candidates, predicted to beat "
                    "the incumbent" if faster else
                    "exploring: no untried candidate is predicted to beat the incumbent; the "
                    f"best-predicted of {len(ranked)} untried ones")
                   + f", from {who}; {_diff(incumbent, c)}")
            if math.isfinite(ms):
                why += f"; cost model: {ms:.4f} ms (estimate)"
                if inc_est is not None:
                    why += f" vs incumbent {inc_est.ms:.4f} ms"
            return Proposal(cand, card, self.name, why, pruned=tuple(pruned))
        return None

    def _from_arm(self, arm: Arm, score: float, state: PlanState, incumbent: dict[str, Any],
                  inc_est, pruned: list[dict[str, Any]], budget: list[int]
                  ) -> Proposal | None:
        """The arm's best-ranked candidate predicted to beat the incumbent (legal, screened)."""
        cands = [c for c in self.family.expand(self.task, arm.card, incumbent)
                 if Candidate.of(c, card=arm.card.id).key not in state.tried]
        if not cands:
            return None
        if state.dense:
            legal = []
            for c in cands:
                errors = [d for d in self.family.static_check(self.task, c)
                          if d.severity == "error"]
                if errors:
                    pruned.append(_pruned(c, arm.card.id, "rule", errors[0].code,
                                          str(errors[0]).splitlines()[0]))
                    state.tried.add(Candidate.of(c, card=arm.card.id).key)
                else:
                    legal.append(c)
            cands = legal
        ranked = self._rank(cands, inc_est, arm, pruned, state)
        if inc_est is not None:
            ranked = [c for c in ranked if (e := self.family.estimate(self.task, c)) is not None
                      and e.ms < inc_est.ms * (1 - MIN_PREDICTED_GAIN)]
        for c in ranked:
            cand = Candidate.of(c, card=arm.card.id)
            if state.dense and state.screen is not None:
                if budget[0] <= 0:
                    return None
                budget[0] -= 1
                outcome = state.screen(cand)
                if not outcome.ok:
                    first = next((d for d in outcome.diagnostics
                                  if d.get("severity") == "error"), {})
                    pruned.append(_pruned(c, arm.card.id, outcome.status,
                                          first.get("code", outcome.stage),
                                          outcome.message.splitlines()[0][:300]
                                          if outcome.message else ""))
                    state.tried.add(cand.key)
                    continue
            why = (f"{self.strategy} picked {arm.card.id} (posterior mean gain {arm.mean:+.3f} "
                   f"over {arm.n} tries, score {score:+.3f}); {_diff(incumbent, c)}")
            est = self.family.estimate(self.task, c)
            if est is not None:
                why += f"; cost model: {est.ms:.4f} ms (estimate)"
            return Proposal(cand, arm.card.id, self.name, why, pruned=tuple(pruned))
        return None

    def _rank(self, cands: list[dict[str, Any]], inc_est, arm: Arm,
              pruned: list[dict[str, Any]], state: PlanState) -> list[dict[str, Any]]:
        """Cost-model order; in dense mode drop candidates predicted far slower (keep one)."""
        scored = []
        for c in cands:
            est = self.family.estimate(self.task, c)
            scored.append((est.ms if est is not None else math.inf, c))
        scored.sort(key=lambda ec: ec[0])
        if not scored:  # every candidate of this arm was ruled out before ranking
            return []
        if not state.dense or inc_est is None:
            return [c for _, c in scored]
        keep = [c for ms, c in scored if ms <= self.prune_ratio * inc_est.ms]
        for ms, c in scored:
            if ms > self.prune_ratio * inc_est.ms and (keep or c is not scored[0][1]):
                pruned.append(_pruned(c, arm.card.id, "cost_model", "slower",
                                      f"estimated {ms:.4f} ms vs incumbent {inc_est.ms:.4f} ms"))
                state.tried.add(Candidate.of(c, card=arm.card.id).key)
        return keep or [scored[0][1]]


def _pruned(params: dict[str, Any], card: str, by: str, code: str, why: str) -> dict[str, Any]:
    return {"key": Candidate.of(params, card=card).key, "card": card, "by": by, "code": code,
            "why": why, "params": params}


def _diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    changes = [f"{k} {old.get(k)!r}->{new[k]!r}" for k in sorted(new) if old.get(k) != new[k]]
    return "changes " + (", ".join(changes) if changes else "nothing")
