"""The Argus agent: plans optimizations of a kernel with dense feedback (verifier counterexamples,
correctness, timings or cost-model estimates) and keeps what it learns.

    from argus.agent import compose, optimize, OptimizeConfig
    task = compose("../shared/kernelbench/level1/1_Square_matrix_multiplication_.py")
    result = optimize(task, "runs/mm", OptimizeConfig(iterations=20))
    print(result.best.candidate.params_dict, result.best.outcome.time_ms)

Pieces (one job per file): knowledge.py + cards/ (the technique cards), task.py and composer.py
(what a task is, and KernelBench -> op family), families/ (schedule spaces, legality, rendering),
cost_model.py, candidate.py, evaluate.py + worker.py (stage-by-stage evaluation in a subprocess),
planner.py, bandit.py, llm/ (planners), store.py (experience SQLite; publishes measured GEMM
winners to argus.ops's tuning cache), loop.py, report.py + plot.py (outputs), cli.py (`argus
optimize`). See docs/agent.md. Names are imported lazily so that importing one piece (e.g.
`argus.agent.store`) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "optimize": "argus.agent.loop", "OptimizeConfig": "argus.agent.result",
    "Optimizer": "argus.agent.loop", "RunResult": "argus.agent.result",
    "compose": "argus.agent.composer", "NoTemplate": "argus.agent.composer",
    "TaskSpec": "argus.agent.task", "make_signature": "argus.agent.task",
    "load_cards": "argus.agent.knowledge", "retrieve": "argus.agent.knowledge",
    "Card": "argus.agent.knowledge",
    "ExperienceStore": "argus.agent.store", "best_schedule": "argus.agent.store",
    "BanditPlanner": "argus.agent.bandit", "LLMPlanner": "argus.agent.llm.policy",
    "LLMConfig": "argus.agent.llm.providers", "Planner": "argus.agent.planner",
    "ScriptedPlanner": "argus.agent.planner", "Candidate": "argus.agent.candidate",
    "Outcome": "argus.agent.candidate", "Step": "argus.agent.candidate",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'argus.agent' has no attribute {name!r}")
