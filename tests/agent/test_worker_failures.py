"""A crashing, hanging, unverifiable or broken candidate is a recorded failure and the loop goes
on: candidates run in a worker subprocess with a time limit, the worker is restarted after a
crash or a timeout, and a verifier counterexample comes back as structured feedback before
anything is compiled."""

from __future__ import annotations

from argus.agent.candidate import Candidate
from argus.agent.composer import compose
from argus.agent.families import get_family
from argus.agent.loop import OptimizeConfig, Optimizer
from argus.agent.planner import ScriptedPlanner
from tests.agent._tasks import RELU_TASK

LOAD = "    x = ag.load(X, (row0, col0), (ROWS, BN))\n"


def test_failures_are_recorded_and_the_loop_goes_on(tmp_path):
    path = tmp_path / "19_ReLU.py"
    path.write_text(RELU_TASK)
    task = compose(path)
    family = get_family("elementwise")
    params = {"rows": 2, "bn": 512, "threads": 256}
    good = family.render_kernel(task, params)
    assert LOAD in good
    crash = good + "\nimport ctypes\nctypes.string_at(0)   # segfault at import\n"
    hang = good + "\nwhile True:\n    pass\n"
    seeded = good.replace(LOAD, LOAD + "    ag.tag_assert(ag.tag(x).m == ag.tag(x).n, "
                                       "message='seeded bug')\n")
    broken = good.replace("def elementwise(", "def elementwise((")
    script = [Candidate.of(params, crash, "llm.crash"), Candidate.of(params, hang, "llm.hang"),
              Candidate.of(params, seeded, "llm.seeded"),
              Candidate.of(params, broken, "llm.syntax"),
              Candidate.of({"rows": 4, "bn": 1024, "threads": 256},   # a good source edit
                           family.render_kernel(task, {"rows": 4, "bn": 1024, "threads": 256})
                           .replace("    y = t1\n", "    y = ag.maximum(x, 0.0)\n"),
                           "llm.good")]
    # the limit is the hang's cost; it must also cover the first candidate's cold worker
    # (imports, NVRTC, the interpreter): 12 s timed that one out at load 11 on 2 cores
    cfg = OptimizeConfig(iterations=6, device="cpu", check_sets=1, timeout_s=30,
                         db=str(tmp_path / "db.sqlite"), verbose=False)
    opt = Optimizer(task, tmp_path / "out", cfg, planner=ScriptedPlanner(script))
    result = opt.run()
    statuses = [s.outcome.status for s in result.steps]
    assert statuses == ["ok", "crash", "timeout", "verification", "source", "ok"], statuses
    crash_step, hang_step, ver_step = result.steps[1:4]
    assert "SIGSEGV" in crash_step.outcome.message
    assert f"within {cfg.timeout_s:g} s" in hang_step.outcome.message
    assert ver_step.outcome.stage == "verify" and not ver_step.outcome.resources.get("registers")
    diag = next(d for d in ver_step.outcome.diagnostics if d["severity"] == "error")
    assert diag["code"] == "tag.assert" and diag["counterexample"]     # dense feedback
    good = result.steps[5]
    assert good.outcome.ok and good.outcome.strict_ok and "ag.maximum" in good.candidate.source
    assert good.outcome.time_kind == "estimate"
    assert result.best is not None and result.best.index in (0, 5)
    md = (tmp_path / "out" / "report.md").read_text()
    assert "crash" in md and "timeout" in md and "counterexample" in md
