"""What one optimization run is told and what it produced: `OptimizeConfig` (every flag of
`argus optimize`) and `RunResult` (the steps, baselines and artifacts of a run).

One job: the data shared by loop.py, which fills a RunResult, and report.py, which writes it
out; kept apart so that neither imports the other (no import circle).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from argus.agent.candidate import Step, fastest_correct
from argus.agent.task import TaskSpec


@dataclass(frozen=True)
class OptimizeConfig:
    """Everything `argus optimize` can be told (CLI flags map one to one)."""

    iterations: int = 20
    minutes: float | None = None
    planner: str = "bandit"          # bandit | llm
    strategy: str = "thompson"       # thompson | ucb (the bandit, also as the LLM's fallback)
    feedback: str = "dense"          # dense | binary (the ablation switch)
    start: str = "auto"              # auto | naive | default
    device: str = "auto"             # auto | cpu | cuda
    timeout_s: float = 300.0         # per candidate, in the worker
    check_sets: int = 3
    track: str = "auto"              # auto | strict | relaxed
    seed: int = 0
    judge: str = "auto"              # auto (on with a GPU) | on | off: final hardened judge
    judge_timeout_s: float = 600.0
    baselines: str = "auto"          # auto | off: measure eager / torch.compile on a GPU
    baseline_timeout_s: float = 600.0
    db: str | None = None
    fresh: bool = False
    trials: int = 100
    screen_limit: int = 6
    warm_start: bool = True
    explore: str = "auto"            # auto (= on) | on | off: when nothing is predicted to be
                                     # faster, try the best-predicted untried candidates
    llm_provider: str | None = None
    llm_model: str | None = None
    llm_base_url: str | None = None
    verbose: bool = True

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class RunResult:
    run_id: str
    out_dir: Path
    task: TaskSpec
    device: str
    steps: list[Step]
    baselines: dict[str, dict[str, Any]]
    estimates: dict[str, dict[str, Any]]
    resumed_at: int | None = None
    stop_reason: str = ""
    artifacts: dict[str, Any] = field(default_factory=dict)
    judgment: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    started: float = 0.0
    seconds: float = 0.0
    config: OptimizeConfig = field(default_factory=OptimizeConfig)

    @property
    def best(self) -> Step | None:
        return fastest_correct(self.steps)

    @property
    def first_ok(self) -> Step | None:
        return next((s for s in self.steps if s.outcome.ok and s.outcome.time_ms is not None),
                    None)
