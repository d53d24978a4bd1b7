"""The records the loop passes around: a `Candidate` (what to try), its `Outcome` (what happened,
stage by stage), and a `Step` (one row of the trajectory), plus the reward.

Failure classes are fixed strings (FAILURES), recorded with every failed step so that reports
and the planner can tell a verifier counterexample from a compile error, a wrong answer, a
timeout or a crash. Reward (AGENT.md): log speedup over the task's baseline for a correct
candidate, zero when it is correct but slower, FAILURE_PENALTY for any failure. The planner
learns from `gain` instead: the log speedup over the best candidate so far, which tells it
which *move* helped (reward alone is flat while every candidate is still slower than cuBLAS).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

FAILURES = {
    "source": "the candidate's DSL source failed to import or trace (Python or DSL misuse)",
    "resource": "a resource limit was exceeded (shared memory, registers, grid)",
    "verification": "the verifier found a violated invariant (with a counterexample)",
    "compile": "lowering, code generation or NVRTC failed",
    "correctness": "the output was wrong on at least one input set",
    "timeout": "the candidate did not finish within the time limit (hang?)",
    "crash": "the worker process died (segfault, illegal address, abort)",
    "error": "an internal error of the evaluation itself",
}
FAILURE_PENALTY = -1.0
STAGES = ("load", "lower", "verify", "compile", "check", "measure")


@dataclass(frozen=True)
class Candidate:
    """What to evaluate: schedule parameters, and optionally full DSL source (an LLM edit) that
    replaces the family's rendering of those parameters."""

    params: tuple[tuple[str, Any], ...]
    source: str | None = None
    card: str = ""

    @staticmethod
    def of(params: dict[str, Any], source: str | None = None, card: str = "") -> "Candidate":
        return Candidate(tuple(sorted(params.items())), source, card)

    @property
    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @property
    def key(self) -> str:
        """Identity for deduplication: the parameters, plus the source's hash when it has one."""
        text = json.dumps(self.params, sort_keys=True, default=str)
        if self.source:
            text += hashlib.sha256(self.source.encode()).hexdigest()
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        return {"params": dict(self.params), "source": self.source, "card": self.card}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Candidate":
        return Candidate.of(dict(data.get("params", {})), data.get("source"), data.get("card", ""))


@dataclass(frozen=True)
class Outcome:
    """What happened to one candidate. `status` is "ok" or a FAILURES key; `stage` is the last
    stage reached. time_kind is "measured" (GPU timing) or "estimate" (cost model), never mixed."""

    status: str
    stage: str
    message: str = ""
    diagnostics: tuple[dict[str, Any], ...] = ()
    resources: dict[str, Any] = field(default_factory=dict)
    correct: bool | None = None
    strict_ok: bool | None = None
    relaxed_ok: bool | None = None
    errors: dict[str, Any] = field(default_factory=dict)
    check_sizes: str = ""
    time_ms: float | None = None
    time_kind: str = ""
    estimate: dict[str, Any] | None = None
    timing: dict[str, Any] | None = None
    seconds: dict[str, float] = field(default_factory=dict)
    proven: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        return json.loads(json.dumps(data, default=_jsonable))

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Outcome":
        names = {f.name for f in dataclasses.fields(Outcome)}
        kw = {k: v for k, v in data.items() if k in names}
        kw["diagnostics"] = tuple(kw.get("diagnostics", ()))
        kw["proven"] = tuple(kw.get("proven", ()))
        if isinstance(kw.get("time_ms"), str):
            kw["time_ms"] = None
        return Outcome(**kw)

    def failure(self) -> str:
        """One line for a failed outcome: class, stage, the first error diagnostic's code."""
        if self.ok:
            return ""
        first = next((d for d in self.diagnostics if d.get("severity") == "error"), None)
        code = f" [{first['code']}]" if first else ""
        lines = [line for line in self.message.strip().splitlines() if line.strip()]
        if not lines:
            return f"{self.status} at {self.stage}{code}"
        # a traceback's first line says nothing; its last names the exception
        line = lines[-1] if lines[0].startswith("Traceback") else lines[0]
        return f"{self.status} at {self.stage}{code}: {line.strip()}"


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    return str(obj)


@dataclass(frozen=True)
class Step:
    """One row of the trajectory: which planner proposed what, and how it went."""

    index: int
    planner: str
    card: str
    candidate: Candidate
    outcome: Outcome
    reward: float
    gain: float
    rationale: str = ""
    events: tuple[str, ...] = ()
    pruned: tuple[dict[str, Any], ...] = ()
    wall_s: float = 0.0
    created: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {"index": self.index, "planner": self.planner, "card": self.card,
                "candidate": self.candidate.to_json(), "outcome": self.outcome.to_json(),
                "reward": self.reward, "gain": self.gain, "rationale": self.rationale,
                "events": list(self.events), "pruned": list(self.pruned),
                "wall_s": self.wall_s, "created": self.created}

    @staticmethod
    def from_json(data: dict[str, Any]) -> "Step":
        return Step(index=int(data["index"]), planner=data["planner"], card=data["card"],
                    candidate=Candidate.from_json(data["candidate"]),
                    outcome=Outcome.from_json(data["outcome"]), reward=float(data["reward"]),
                    gain=float(data["gain"]), rationale=data.get("rationale", ""),
                    events=tuple(data.get("events", ())), pruned=tuple(data.get("pruned", ())),
                    wall_s=float(data.get("wall_s", 0.0)), created=float(data.get("created", 0)))


def reward(outcome: Outcome, baseline_ms: float | None) -> float:
    """AGENT.md: log speedup over the baseline when correct (0 if slower), penalty on failure."""
    if not outcome.ok or outcome.time_ms is None:
        return FAILURE_PENALTY
    if not baseline_ms:
        return 0.0
    return max(0.0, math.log(baseline_ms / outcome.time_ms))


def gain(outcome: Outcome, incumbent_ms: float | None) -> float:
    """The planner's learning signal: log improvement over the best time so far (penalty on
    failure; 0 for the first correct candidate)."""
    if not outcome.ok or outcome.time_ms is None:
        return FAILURE_PENALTY
    if incumbent_ms is None:
        return 0.0
    return math.log(incumbent_ms / outcome.time_ms)


def fastest_correct(steps) -> Step | None:
    """The fastest correct step with a measured time (ties: the earliest), or None."""
    best = None
    for s in steps:
        if s.outcome.ok and s.outcome.time_ms is not None:
            if best is None or s.outcome.time_ms < best.outcome.time_ms:
                best = s
    return best
