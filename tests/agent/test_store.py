"""The experience store: steps persist per run, `best` keeps the fastest correct candidate per
signature and time kind, per-card statistics become priors, and `best_schedule` is the tuning
cache `argus.ops` consults (measured entries only, never raising)."""

from __future__ import annotations

import dataclasses

from argus.agent.candidate import Candidate, Outcome, Step
from argus.agent.store import ExperienceStore, best_schedule
from argus.agent.task import TaskSpec, bucket_signature, make_signature
from argus.kernels.gemm import GemmSchedule

TASK = TaskSpec("gemm", "mm", "argus", "x", (("M", 512), ("N", 1024), ("K", 256)), "bf16", "bf16",
                options=(("in", "bf16"), ("out", "bf16"), ("b_layout", "nk")))


def _step(i, params, status="ok", ms=None, kind="measured", card="gemm.deeper_pipeline",
          gain=0.0):
    o = Outcome(status, "measure", time_ms=ms, time_kind=kind if ms else "")
    return Step(i, "bandit", card, Candidate.of(params), o, 0.0, gain)


def test_steps_best_and_priors(tmp_path):
    fast = dataclasses.asdict(GemmSchedule(stages=3))
    slow = dataclasses.asdict(GemmSchedule(stages=2))
    with ExperienceStore(tmp_path / "x.sqlite") as store:
        store.start_run("r1", TASK, {}, str(tmp_path))
        store.record_step("r1", TASK, _step(0, slow, ms=2.0, card="start"))
        store.record_step("r1", TASK, _step(1, fast, ms=1.0, gain=0.69))
        store.record_step("r1", TASK, _step(2, slow, status="crash", gain=-1.0))
        store.record_step("r1", TASK, _step(3, slow, ms=0.5, kind="estimate", gain=0.1))
        assert [s.index for s in store.steps("r1")] == [0, 1, 2, 3]
        assert store.steps("r1")[2].outcome.status == "crash"
        best = store.best(TASK.signature())
        assert best["params"] == fast and best["time_kind"] == "measured"
        assert store.best(TASK.signature(), "estimate")["time_ms"] == 0.5
        stats = store.arm_stats("gemm")
        n, mean, _ = stats["gemm.deeper_pipeline"]
        assert n == 3 and abs(mean - (0.69 - 1.0 + 0.1) / 3) < 1e-9
        assert store.arm_stats("gemm", exclude_run="r1") == {}
        assert store.similar_steps(TASK)[0]["signature"] == TASK.signature()
    # reopening keeps everything (persistence across runs)
    with ExperienceStore(tmp_path / "x.sqlite") as store:
        assert len(store.steps("r1")) == 4


def test_best_schedule_is_the_ops_tuning_cache(tmp_path, monkeypatch):
    db = tmp_path / "agent.sqlite"
    assert best_schedule(TASK.signature(), path=db) is None          # no database: no entry
    assert not db.exists()                                           # ... and none created
    tuned = dataclasses.asdict(GemmSchedule(bm=64, bn=128, consumers=1, stages=6))
    with ExperienceStore(db) as store:
        store.start_run("r", TASK, {}, "")
        store.record_step("r", TASK, _step(0, tuned, ms=0.01))
    assert best_schedule(TASK.signature(), path=db) == tuned
    assert best_schedule("no/such/signature", path=db) is None
    (tmp_path / "broken.sqlite").write_text("not a database")
    assert best_schedule(TASK.signature(), path=tmp_path / "broken.sqlite") is None
    # argus.ops asks with its own problem key, which is the GEMM task's signature; the default
    # store publishes its measured winner there (ops never reads the agent's store), a store
    # elsewhere does not
    from argus.ops.schedules import Problem, choose

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    problem = Problem(512, 1024, 256, 1, "bf16", "bf16", "nk", True)
    assert problem.key == TASK.signature()
    assert choose(problem, "NVIDIA H200") != GemmSchedule(**tuned)   # scratch db: nothing
    monkeypatch.setenv("ARGUS_AGENT_DB", str(tmp_path / "default.sqlite"))
    with ExperienceStore() as store:
        store.start_run("r", TASK, {}, "")
        store.record_step("r", TASK, _step(0, tuned, ms=0.01))
    assert choose(problem, "NVIDIA H200") == GemmSchedule(**tuned)


def test_estimates_are_not_evidence_for_ops(tmp_path):
    db = tmp_path / "e.sqlite"
    params = dataclasses.asdict(GemmSchedule(stages=5))
    with ExperienceStore(db) as store:
        store.start_run("r", TASK, {}, "")
        store.record_step("r", TASK, _step(0, params, ms=0.3, kind="estimate"))
    assert best_schedule(TASK.signature(), path=db) is None
    assert best_schedule(TASK.signature(), path=db, allow_estimates=True) == params


def test_signatures():
    assert make_signature("elementwise", {"rows": 3, "cols": 5}, "f32", "op1") == \
        "elementwise/f32/cols5-rows3/op1"
    assert bucket_signature("1x500x1000x3:bf16->f32:kn:tma") == "1x512x1024x4:bf16->f32:kn:tma"
