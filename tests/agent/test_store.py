"""The experience store: steps persist per run, `best` keeps the fastest correct candidate per
signature, card class and time kind, per-card statistics become priors, and `best_schedule` is
the tuning cache `argus.ops` consults (measured entries only, never raising). Every ranking read
is for one card class (H100 / H200): a time measured on one never ranks points for the other;
a store written before card classes migrates without losing a row, its rows read as the H100
class's."""

from __future__ import annotations

import dataclasses
import json
import sqlite3

import pytest

from argus.agent.candidate import Candidate, Outcome, Step
from argus.agent import store as store_module
from argus.agent.loop import Optimizer, run_card_class
from argus.agent.result import OptimizeConfig
from argus.agent.store import ExperienceStore, best_schedule
from argus.agent.task import TaskSpec, bucket_signature, make_signature
from argus.kernels.gemm import GemmSchedule

H100, H200 = "h100", "h200"         # argus.ops.moe CARD_H100 / CARD_H200 (checked below)

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
        store.start_run("r1", TASK, {}, str(tmp_path), H100)
        store.record_step("r1", TASK, _step(0, slow, ms=2.0, card="start"), H100)
        store.record_step("r1", TASK, _step(1, fast, ms=1.0, gain=0.69), H100)
        store.record_step("r1", TASK, _step(2, slow, status="crash", gain=-1.0), H100)
        store.record_step("r1", TASK, _step(3, slow, ms=0.5, kind="estimate", gain=0.1), H100)
        assert [s.index for s in store.steps("r1")] == [0, 1, 2, 3]
        assert store.steps("r1")[2].outcome.status == "crash"
        best = store.best(TASK.signature(), H100)
        assert best["params"] == fast and best["time_kind"] == "measured"
        assert store.best(TASK.signature(), H100, "estimate")["time_ms"] == 0.5
        stats = store.arm_stats("gemm", H100)
        n, mean, _ = stats["gemm.deeper_pipeline"]
        assert n == 3 and abs(mean - (0.69 - 1.0 + 0.1) / 3) < 1e-9
        assert store.arm_stats("gemm", H100, exclude_run="r1") == {}
        assert store.similar_steps(TASK, H100)[0]["signature"] == TASK.signature()
    # reopening keeps everything (persistence across runs)
    with ExperienceStore(tmp_path / "x.sqlite") as store:
        assert len(store.steps("r1")) == 4


def test_best_schedule_is_the_ops_tuning_cache(tmp_path, monkeypatch):
    db = tmp_path / "agent.sqlite"
    assert best_schedule(TASK.signature(), card_class=H100, path=db) is None    # no database
    assert not db.exists()                                           # ... and none created
    tuned = dataclasses.asdict(GemmSchedule(bm=64, bn=128, consumers=1, stages=6))
    with ExperienceStore(db) as store:
        store.start_run("r", TASK, {}, "", H100)
        store.record_step("r", TASK, _step(0, tuned, ms=0.01), H100)
    assert best_schedule(TASK.signature(), card_class=H100, path=db) == tuned
    assert best_schedule("no/such/signature", card_class=H100, path=db) is None
    (tmp_path / "broken.sqlite").write_text("not a database")
    assert best_schedule(TASK.signature(), card_class=H100,
                         path=tmp_path / "broken.sqlite") is None
    # argus.ops asks with its own problem key, which is the GEMM task's signature; the default
    # store publishes its measured winner there under the measuring class (ops never reads the
    # agent's store), a store elsewhere does not
    from argus.ops.schedules import Problem, choose

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    problem = Problem(512, 1024, 256, 1, "bf16", "bf16", "nk", True)
    assert problem.key == TASK.signature()
    assert choose(problem, "NVIDIA H100 80GB HBM3") != GemmSchedule(**tuned)  # scratch db
    monkeypatch.setenv("ARGUS_AGENT_DB", str(tmp_path / "default.sqlite"))
    with ExperienceStore() as store:
        store.start_run("r", TASK, {}, "", H100)
        store.record_step("r", TASK, _step(0, tuned, ms=0.01), H100)
    assert choose(problem, "NVIDIA H100 80GB HBM3") == GemmSchedule(**tuned)
    assert choose(problem, "NVIDIA H200") != GemmSchedule(**tuned)    # measured on an H100


def test_each_card_class_publishes_its_own_choice_to_ops(tmp_path, monkeypatch):
    """The default store hands ops each class's measured best under that class: an H200 run
    does not change what ops runs on an H100, nor an H100 run what it runs on an H200."""
    from argus.ops.schedules import Problem, choose

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("ARGUS_AGENT_DB", str(tmp_path / "default.sqlite"))
    problem = Problem(512, 1024, 256, 1, "bf16", "bf16", "nk", True)
    on_h100 = GemmSchedule(bm=64, bn=128, consumers=1, stages=6)
    on_h200 = GemmSchedule(bm=128, bn=256, stages=3)
    assert len({on_h100, on_h200, choose(problem, "NVIDIA H100")}) == 3
    with ExperienceStore() as store:
        store.start_run("a", TASK, {}, "", H100)
        store.record_step("a", TASK, _step(0, dataclasses.asdict(on_h100), ms=0.02), H100)
        store.start_run("b", TASK, {}, "", H200)
        # faster than the H100's time, and recorded last: once, this replaced the H100's entry
        store.record_step("b", TASK, _step(0, dataclasses.asdict(on_h200), ms=0.01), H200)
    assert choose(problem, "NVIDIA H100 80GB HBM3") == on_h100
    assert choose(problem, "NVIDIA H200") == on_h200
    later = GemmSchedule(bm=128, bn=128, stages=4)
    assert later not in (on_h100, on_h200)
    with ExperienceStore() as store:     # a faster H100 time later leaves the H200's alone
        store.record_step("a", TASK, _step(1, dataclasses.asdict(later), ms=0.005), H100)
    assert choose(problem, "NVIDIA H100 80GB HBM3") == later
    assert choose(problem, "NVIDIA H200") == on_h200


def test_estimates_are_not_evidence_for_ops(tmp_path):
    db = tmp_path / "e.sqlite"
    params = dataclasses.asdict(GemmSchedule(stages=5))
    with ExperienceStore(db) as store:
        store.start_run("r", TASK, {}, "", H100)
        store.record_step("r", TASK, _step(0, params, ms=0.3, kind="estimate"), H100)
    assert best_schedule(TASK.signature(), card_class=H100, path=db) is None
    assert best_schedule(TASK.signature(), card_class=H100, path=db,
                         allow_estimates=True) == params


def test_best_schedule_without_a_class_reads_the_current_devices(tmp_path, monkeypatch):
    """card_class=None is argus.ops.moe.default_card's class (the current CUDA device's), faked
    here as each class in turn: each sees its own entry, never the other's faster one."""
    from argus.ops import moe_module

    db = tmp_path / "d.sqlite"
    on_h100 = dataclasses.asdict(GemmSchedule(bm=64, bn=128, consumers=1, stages=6))
    on_h200 = dataclasses.asdict(GemmSchedule(bm=128, bn=256, stages=3))
    with ExperienceStore(db) as store:
        store.start_run("a", TASK, {}, "", H100)
        store.record_step("a", TASK, _step(0, on_h100, ms=0.02), H100)
        store.start_run("b", TASK, {}, "", H200)
        store.record_step("b", TASK, _step(0, on_h200, ms=0.01), H200)   # faster, other class
    for current, expected in ((H100, on_h100), (H200, on_h200)):
        monkeypatch.setattr(moe_module, "default_card", lambda: current)
        assert best_schedule(TASK.signature(), path=db) == expected, current
        assert best_schedule(TASK.signature(), path=db) == best_schedule(
            TASK.signature(), card_class=current, path=db)

    def no_driver():
        raise RuntimeError("CUDA driver error")
    monkeypatch.setattr(moe_module, "default_card", no_driver)
    assert best_schedule(TASK.signature(), path=db) is None    # never raises: "no entry"


def test_signatures():
    assert make_signature("elementwise", {"rows": 3, "cols": 5}, "f32", "op1") == \
        "elementwise/f32/cols5-rows3/op1"
    assert bucket_signature("1x500x1000x3:bf16->f32:kn:tma") == "1x512x1024x4:bf16->f32:kn:tma"


def test_card_classes_are_argus_ops_moes():
    from argus.ops import moe_module

    assert (H100, H200) == (moe_module.CARD_H100, moe_module.CARD_H200)
    assert store_module.legacy_card_class() == moe_module.CARD_H100
    assert store_module.card_classes(H100) == (H100, store_module.UNRECORDED)
    assert store_module.card_classes(H200) == (H200,)
    with pytest.raises(ValueError, match="card class"):
        store_module.card_classes("")


def _rankings(store, db, card_class):
    """Everything the store answers that ranks points, for one card class."""
    sig = TASK.signature()
    return (store.best(sig, card_class), store.best(sig, card_class, "estimate"),
            store.arm_stats("gemm", card_class), store.similar_steps(TASK, card_class),
            best_schedule(sig, card_class=card_class, path=db),
            best_schedule(sig, card_class=card_class, path=db, allow_estimates=True))


@pytest.mark.parametrize("mine,other", [(H100, H200), (H200, H100)])
def test_a_time_on_one_card_class_never_ranks_points_for_another(tmp_path, mine, other):
    """Steps recorded on `other` (faster, other parameters, other gains, another knowledge
    card) leave every ranking read for `mine` as it was, while `other`'s reads see them."""
    db = tmp_path / "cards.sqlite"
    slow = dataclasses.asdict(GemmSchedule(stages=2))
    mid = dataclasses.asdict(GemmSchedule(stages=3))
    fast = dataclasses.asdict(GemmSchedule(stages=5))
    with ExperienceStore(db) as store:
        store.start_run("a", TASK, {}, "", mine)
        store.record_step("a", TASK, _step(0, slow, ms=2.0, card="start"), mine)
        store.record_step("a", TASK, _step(1, mid, ms=1.0, gain=0.69), mine)
        store.record_step("a", TASK, _step(2, mid, ms=0.9, kind="estimate", gain=0.1), mine)
        before = _rankings(store, db, mine)
        assert before[0]["params"] == mid and before[2]["gemm.deeper_pipeline"][0] == 2
        store.start_run("b", TASK, {}, "", other)
        store.record_step("b", TASK, _step(0, fast, ms=0.1, card="start"), other)
        store.record_step("b", TASK, _step(1, fast, ms=0.1, gain=-2.0), other)
        store.record_step("b", TASK, _step(2, fast, ms=0.05, kind="estimate",
                                           card="gemm.swap_ab", gain=3.0), other)
        assert _rankings(store, db, mine) == before
        # ... and the other class does see its own (the reads are not simply empty)
        assert store.best(TASK.signature(), other)["params"] == fast
        assert store.best(TASK.signature(), other, "estimate")["time_ms"] == 0.05
        assert set(store.arm_stats("gemm", other)) == {"start", "gemm.deeper_pipeline",
                                                  "gemm.swap_ab"}
        assert {r["params"]["stages"] for r in store.similar_steps(TASK, other)} == {5}
        assert best_schedule(TASK.signature(), card_class=other, path=db) == fast
        assert store.run("b")["card_class"] == other


# the schema before card classes (argus/agent/store.py before h289), as an old store has it
OLD_SCHEMA = """
CREATE TABLE tasks (signature TEXT PRIMARY KEY, family TEXT, bucket TEXT, spec TEXT,
    created REAL);
CREATE TABLE runs (run_id TEXT PRIMARY KEY, signature TEXT, status TEXT, config TEXT,
    out_dir TEXT, started REAL, updated REAL);
CREATE TABLE steps (run_id TEXT, idx INTEGER, signature TEXT, family TEXT, card TEXT,
    planner TEXT, status TEXT, time_ms REAL, time_kind TEXT, reward REAL, gain REAL,
    params TEXT, source_hash TEXT, data TEXT, created REAL, PRIMARY KEY (run_id, idx));
CREATE INDEX steps_by_family ON steps (family, card);
CREATE TABLE best (signature TEXT, time_kind TEXT, family TEXT, params TEXT, source TEXT,
    time_ms REAL, run_id TEXT, step INTEGER, updated REAL, PRIMARY KEY (signature, time_kind));
"""


def _old_store(path, params):
    db = sqlite3.connect(path)
    db.executescript(OLD_SCHEMA)
    sig = TASK.signature()
    step = _step(0, params, ms=0.5, gain=0.4)
    db.execute("INSERT INTO tasks VALUES (?, ?, ?, ?, ?)", (sig, "gemm", "", TASK.dumps(), 1.0))
    db.execute("INSERT INTO runs VALUES ('old', ?, 'done', '{}', '', 1.0, 2.0)", (sig,))
    for i, kind in enumerate(("measured", "estimate")):
        db.execute("INSERT INTO steps VALUES (?, ?, ?, 'gemm', 'gemm.deeper_pipeline', "
                   "'bandit', 'ok', 0.5, ?, 0.0, 0.4, ?, '', ?, 1.0)",
                   ("old", i, sig, kind, json.dumps(params, sort_keys=True),
                    json.dumps(step.to_json())))
        db.execute("INSERT INTO best VALUES (?, ?, 'gemm', ?, '', 0.5, 'old', ?, 1.0)",
                   (sig, kind, json.dumps(params, sort_keys=True), i))
    db.commit()
    db.close()


def _rows(path):
    db = sqlite3.connect(path)
    try:
        return {t: sorted(tuple(r) for r in db.execute(
                    f"SELECT run_id, signature FROM {t}" if t != "best" else
                    "SELECT signature, time_kind, params, time_ms FROM best"))
                for t in ("runs", "steps", "best")}
    finally:
        db.close()


def test_an_old_store_migrates_without_losing_a_row_and_reads_as_h100(tmp_path):
    """A store written before card classes: best_schedule reads it as it is (H100 only);
    opening it migrates every row (same rows after, card_class '' each), and the rows rank for
    the H100 class only, where a newer H100 time competes with them."""
    db = tmp_path / "old.sqlite"
    old = dataclasses.asdict(GemmSchedule(stages=4))
    _old_store(db, old)
    rows = _rows(db)
    assert best_schedule(TASK.signature(), card_class=H100, path=db) == old    # not migrated
    assert best_schedule(TASK.signature(), card_class=H200, path=db) is None
    with ExperienceStore(db) as store:
        assert _rows(db) == rows
        for table in ("runs", "steps", "best"):
            classes = {r[0] for r in store.db.execute(f"SELECT card_class FROM {table}")}
            assert classes == {store_module.UNRECORDED}, table
        assert len(store.steps("old")) == 2
        assert store.best(TASK.signature(), H100)["params"] == old
        assert store.best(TASK.signature(), H200) is None
        assert store.arm_stats("gemm", H100)["gemm.deeper_pipeline"][0] == 2
        assert store.arm_stats("gemm", H200) == {} and store.similar_steps(TASK, H200) == []
        # an H100 time slower than the old row leaves it the best; a faster one replaces it
        slow, fast = (dataclasses.asdict(GemmSchedule(stages=n)) for n in (2, 5))
        store.start_run("new", TASK, {}, "", H100)
        store.record_step("new", TASK, _step(0, slow, ms=0.9), H100)
        assert store.best(TASK.signature(), H100)["params"] == old
        store.record_step("new", TASK, _step(1, fast, ms=0.2), H100)
        assert store.best(TASK.signature(), H100)["params"] == fast
        assert best_schedule(TASK.signature(), card_class=H100, path=db) == fast
        # a faster edited source: no schedule for ops (what _publish hands it), not the old one
        edited = Step(2, "llm", "gemm.deeper_pipeline", Candidate.of(fast, "KERNEL = ..."),
                      Outcome("ok", "measure", time_ms=0.1, time_kind="measured"), 0.0, 0.0)
        store.record_step("new", TASK, edited, H100)
        assert store.best(TASK.signature(), H100)["source"] == "KERNEL = ..."
        assert best_schedule(TASK.signature(), card_class=H100, path=db) is None
    with ExperienceStore(db) as store:                      # reopening migrates nothing again
        assert len(store.steps("old")) == 2 and len(store.steps("new")) == 3
        assert store.db.execute("SELECT COUNT(*) FROM best").fetchone()[0] == 3


def test_a_failed_migration_changes_nothing(tmp_path, monkeypatch):
    """A migration that fails part way (here: a rebuilt best table whose key drops time_kind,
    so the copy of an old store's measured and estimate rows collides) rolls back whole: the
    columns added to runs and steps before the failure are gone, every row is as it was."""
    db = tmp_path / "old.sqlite"
    _old_store(db, dataclasses.asdict(GemmSchedule(stages=4)))
    rows = _rows(db)
    monkeypatch.setattr(store_module, "BEST_TABLE", store_module.BEST_TABLE.replace(
        "PRIMARY KEY (signature, card_class, time_kind)", "PRIMARY KEY (signature, card_class)"))
    with pytest.raises(sqlite3.DatabaseError):
        ExperienceStore(db)
    assert _rows(db) == rows
    old_db = sqlite3.connect(db)
    for table in ("runs", "steps", "best"):
        assert "card_class" not in {r[1] for r in old_db.execute(f"PRAGMA table_info({table})")}
    assert "best_by_card" not in {r[0] for r in old_db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'")}
    old_db.close()


def test_a_runs_card_class(tmp_path, monkeypatch):
    """On CUDA the measuring device's class; on CPU the task's own card (moe_fp8), else the
    H100 class. A run directory measured on another class is not resumed."""
    from argus.agent.families.moe_fp8 import moe_fp8_task, task_card
    from argus.ops import moe_module

    assert run_card_class(TASK, "cpu") == H100
    assert run_card_class(moe_fp8_task(1024, 7168, 2048, 256, 8, card=H200), "cpu") == H200
    monkeypatch.setattr(moe_module, "card_of", lambda device: H200 if device.type == "cuda" else "")
    assert run_card_class(TASK, "cuda") == H200
    # on CPU a moe_fp8 task without the option (written before it) takes the class its cost
    # model reads (task_card: default_card's, faked here as a CUDA host's), a GEMM the H100's
    monkeypatch.setattr(moe_module, "default_card", lambda: H200)
    old = dataclasses.replace(moe_fp8_task(1024, 7168, 2048, 256, 8, card=H100), options=())
    assert run_card_class(old, "cpu") == task_card(old) == H200
    assert run_card_class(TASK, "cpu") == H100
    monkeypatch.undo()
    opt = Optimizer(TASK, tmp_path, OptimizeConfig(device="cpu", verbose=False))
    assert opt.card_class == H100
    state = {"run_id": "r", "signature": TASK.signature(), "task_sha256": TASK.sha256}
    for recorded, resumed in ((H100, True), (None, True), (H200, False)):
        data = {**state, **({"card_class": recorded} if recorded else {})}
        (tmp_path / "run.json").write_text(json.dumps(data))
        assert (opt._run_state() is not None) == resumed, recorded
    # an H200 run does not resume a run.json without a class, and says it was unrecorded
    said = []
    h200_task = moe_fp8_task(1024, 7168, 2048, 256, 8, card=H200)
    opt = Optimizer(h200_task, tmp_path, OptimizeConfig(device="cpu", verbose=False),
                    log=said.append)
    (tmp_path / "run.json").write_text(json.dumps(
        {"run_id": "r", "signature": h200_task.signature(), "task_sha256": h200_task.sha256}))
    assert opt._run_state() is None
    assert "measured on an unrecorded card class (read as h100)" in said[-1], said
