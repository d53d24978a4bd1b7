"""The one interface every planner implements, and what a planner sees of the run.

A planner proposes the next candidate (`propose(state, seed) -> Proposal | None`; None means it
has nothing left to try) and learns from each completed step (`observe(step)`). The loop
replays recorded steps through `observe` when a run resumes, so a planner's state must be a
function of the steps it observed (plus the seed it is given per proposal).

Feedback modes: "dense" shows the planner every diagnostic, counterexample, failure class and
resource report; "binary" (the ablation switch) shows only pass/fail and, for a pass, the time.
`PlanState.visible` applies that redaction, so a planner cannot see more than the mode allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from argus.agent.candidate import Candidate, Outcome, Step, fastest_correct
from argus.agent.families import Family
from argus.agent.task import TaskSpec

FEEDBACK_MODES = ("dense", "binary")


@dataclass(frozen=True)
class Proposal:
    """A planner's choice: the candidate, the card (action) behind it, why, what happened while
    choosing (LLM retries, fallbacks), and what was pruned before anything ran."""

    candidate: Candidate
    card: str
    planner: str
    rationale: str = ""
    events: tuple[str, ...] = ()
    pruned: tuple[dict[str, Any], ...] = ()


def redact(step: Step) -> Step:
    """The step as the binary-feedback ablation shows it: pass/fail and time only."""
    o = step.outcome
    visible = Outcome(status="ok" if o.ok else "failed", stage="",
                      time_ms=o.time_ms if o.ok else None, time_kind=o.time_kind if o.ok else "")
    return Step(index=step.index, planner=step.planner, card=step.card,
                candidate=step.candidate, outcome=visible, reward=step.reward,
                gain=step.gain if o.ok else -1.0, rationale=step.rationale)


@dataclass
class PlanState:
    """What a planner may look at. `history` is already redacted in binary mode."""

    task: TaskSpec
    family: Family
    feedback: str
    start: Candidate
    baselines: dict[str, dict[str, Any]] = field(default_factory=dict)
    history: list[Step] = field(default_factory=list)
    tried: set[str] = field(default_factory=set)
    screen: Callable[[Candidate], Outcome] | None = None

    @property
    def dense(self) -> bool:
        return self.feedback == "dense"

    @property
    def incumbent(self) -> Step | None:
        """The fastest correct step so far (ties: the earliest)."""
        return fastest_correct(self.history)

    @property
    def incumbent_params(self) -> dict[str, Any]:
        best = self.incumbent
        return (best.candidate if best else self.start).params_dict

    def add(self, step: Step) -> Step:
        """Record a completed step (redacted per the feedback mode); returns what was stored."""
        visible = step if self.dense else redact(step)
        self.history.append(visible)
        self.tried.add(step.candidate.key)
        for p in step.pruned:
            if "key" in p:
                self.tried.add(p["key"])
        return visible


class Planner(Protocol):
    name: str

    def propose(self, state: PlanState, seed: int) -> Proposal | None: ...

    def observe(self, step: Step, state: PlanState) -> None: ...


class ScriptedPlanner:
    """Proposes a fixed list of candidates in order (tests, and replaying a known trajectory)."""

    name = "scripted"

    def __init__(self, candidates: list[Candidate]):
        self.candidates = list(candidates)

    def propose(self, state: PlanState, seed: int) -> Proposal | None:
        done = len(state.history) - 1   # step 0 is the start candidate
        if done >= len(self.candidates):
            return None
        cand = self.candidates[max(0, done)]
        return Proposal(cand, cand.card or "scripted", self.name, "scripted")

    def observe(self, step: Step, state: PlanState) -> None:
        pass
