"""The experience store: one SQLite database (stdlib sqlite3) of tasks, runs, every step of every
trajectory, and the best-known kernel per task signature.

It is what makes the planner learn across runs (per-card statistics become the bandit's
priors; rows of similar tasks go into the LLM's prompt), what lets an interrupted run resume
(its steps are read back in order), and the source of the agent's entries in `argus.ops`'s
tuning cache: the default store publishes each new measured GEMM winner through
`argus.ops.schedules.record_agent_choice` (ops sits below the agent and never reads this store).

Invariants: a step is written in one transaction after it completes, so a killed run loses at
most the step in flight; `best` only ever holds a correct candidate, keyed by how its time was
obtained ("measured" on a GPU or "estimate" from the cost model), and `best_schedule` returns
measured entries only unless asked otherwise. The database path is ARGUS_AGENT_DB, else
$ARGUS_CACHE_DIR/agent/experience.sqlite.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

from argus.agent.candidate import Step
from argus.agent.task import TaskSpec, bucket_signature

SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    signature TEXT PRIMARY KEY, family TEXT, bucket TEXT, spec TEXT, created REAL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, signature TEXT, status TEXT, config TEXT, out_dir TEXT,
    started REAL, updated REAL);
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT, idx INTEGER, signature TEXT, family TEXT, card TEXT, planner TEXT,
    status TEXT, time_ms REAL, time_kind TEXT, reward REAL, gain REAL, params TEXT,
    source_hash TEXT, data TEXT, created REAL, PRIMARY KEY (run_id, idx));
CREATE INDEX IF NOT EXISTS steps_by_family ON steps (family, card);
CREATE TABLE IF NOT EXISTS best (
    signature TEXT, time_kind TEXT, family TEXT, params TEXT, source TEXT, time_ms REAL,
    run_id TEXT, step INTEGER, updated REAL, PRIMARY KEY (signature, time_kind));
"""


def default_path() -> Path:
    env = os.environ.get("ARGUS_AGENT_DB")
    if env:
        return Path(env)
    from argus import config

    return config.cache_dir() / "agent" / "experience.sqlite"


class ExperienceStore:
    """Read and write the experience database (safe to share between processes: WAL mode)."""

    def __init__(self, path: str | Path | None = None, publish: bool | None = None):
        self.path = Path(path) if path else default_path()
        # publish measured GEMM winners to argus.ops's tuning cache: by default only the default
        # store does, so a run on a scratch database leaves the user's matmul choices alone
        self.publish = (not path or self.path.resolve() == default_path().resolve()) \
            if publish is None else publish
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=30.0)
        self.db.row_factory = sqlite3.Row
        try:
            self.db.execute("PRAGMA journal_mode=WAL")
        except sqlite3.OperationalError:  # pragma: no cover - e.g. a network filesystem
            pass
        self.db.executescript(SCHEMA)
        self.db.commit()

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "ExperienceStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tasks and runs ------------------------------------------------------------------------
    def register_task(self, task: TaskSpec) -> None:
        sig = task.signature()
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?, ?)",
                            (sig, task.family, bucket_signature(sig), task.dumps(), time.time()))

    def start_run(self, run_id: str, task: TaskSpec, config: dict[str, Any],
                  out_dir: str) -> None:
        self.register_task(task)
        now = time.time()
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO runs VALUES (?, ?, ?, ?, ?, ?, ?)",
                            (run_id, task.signature(), "running", json.dumps(config), out_dir,
                             now, now))
            self.db.execute("UPDATE runs SET status = 'running', updated = ? WHERE run_id = ?",
                            (now, run_id))

    def finish_run(self, run_id: str, status: str) -> None:
        with self.db:
            self.db.execute("UPDATE runs SET status = ?, updated = ? WHERE run_id = ?",
                            (status, time.time(), run_id))

    def run(self, run_id: str) -> dict[str, Any] | None:
        row = self.db.execute("SELECT * FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return dict(row) if row else None

    # -- steps ---------------------------------------------------------------------------------
    def record_step(self, run_id: str, task: TaskSpec, step: Step) -> None:
        """Write one completed step (and update the best entry) in one transaction."""
        o = step.outcome
        sig = task.signature()
        src_hash = step.candidate.key if step.candidate.source else ""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO steps VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, step.index, sig, task.family, step.card, step.planner, o.status,
                 o.time_ms, o.time_kind, step.reward, step.gain,
                 json.dumps(step.candidate.params_dict, sort_keys=True, default=str), src_hash,
                 json.dumps(step.to_json(), default=str), step.created or time.time()))
            self.db.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (time.time(), run_id))
            if o.ok and o.time_ms is not None and o.time_kind:
                row = self.db.execute("SELECT time_ms FROM best WHERE signature = ? AND "
                                      "time_kind = ?", (sig, o.time_kind)).fetchone()
                if row is None or o.time_ms < row["time_ms"]:
                    self.db.execute(
                        "INSERT OR REPLACE INTO best VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (sig, o.time_kind, task.family,
                         json.dumps(step.candidate.params_dict, sort_keys=True, default=str),
                         step.candidate.source, o.time_ms, run_id, step.index, time.time()))
        if self.publish and task.family == "gemm" and o.ok and o.time_kind == "measured":
            self._publish(sig)

    def _publish(self, signature: str) -> None:
        """Hand argus.ops what `best_schedule(signature)` answers: the measured best when it is
        a schedule (no edited source), else no entry."""
        from argus.ops.schedules import record_agent_choice  # ops loads the kernel library

        row = self.db.execute("SELECT params, source, time_ms FROM best WHERE signature = ? AND "
                              "time_kind = 'measured'", (signature,)).fetchone()
        schedule_only = row is not None and not row["source"]
        try:
            record_agent_choice(signature, json.loads(row["params"]) if schedule_only else None,
                                row["time_ms"] if schedule_only else None)
        except OSError as e:  # the store keeps the result; only the shortcut for ops is lost
            warnings.warn(f"agent store: could not publish the best schedule of {signature} to "
                          f"the argus.ops tuning cache ({e}); fix: make ARGUS_CACHE_DIR "
                          f"writable", stacklevel=2)

    def steps(self, run_id: str) -> list[Step]:
        rows = self.db.execute("SELECT data FROM steps WHERE run_id = ? ORDER BY idx",
                               (run_id,)).fetchall()
        return [Step.from_json(json.loads(r["data"])) for r in rows]

    def best(self, signature: str, time_kind: str | None = None) -> dict[str, Any] | None:
        """The best entry for a signature (measured preferred over estimate)."""
        kinds = (time_kind,) if time_kind else ("measured", "estimate")
        for kind in kinds:
            row = self.db.execute("SELECT * FROM best WHERE signature = ? AND time_kind = ?",
                                  (signature, kind)).fetchone()
            if row:
                out = dict(row)
                out["params"] = json.loads(out["params"])
                return out
        return None

    def arm_stats(self, family: str, exclude_run: str | None = None,
                  time_kind: str | None = None) -> dict[str, tuple[int, float, float]]:
        """Per card: (count, mean gain, variance) over every recorded step of this family
        (other runs only, when exclude_run is given): the bandit's priors."""
        query = "SELECT card, gain FROM steps WHERE family = ? AND card != ''"
        args: list[Any] = [family]
        if exclude_run:
            query += " AND run_id != ?"
            args.append(exclude_run)
        if time_kind:
            query += " AND (time_kind = ? OR status != 'ok')"
            args.append(time_kind)
        gains: dict[str, list[float]] = {}
        for row in self.db.execute(query, args):
            gains.setdefault(row["card"], []).append(float(row["gain"]))
        return {card: (len(g), statistics.fmean(g), statistics.pvariance(g) if len(g) > 1
                       else 0.0) for card, g in gains.items()}

    def similar_steps(self, task: TaskSpec, exclude_run: str | None = None,
                      limit: int = 20) -> list[dict[str, Any]]:
        """Recent steps of the same family on similar shapes (same size bucket first): rows for
        the LLM's experience table."""
        bucket = bucket_signature(task.signature())
        rows = self.db.execute(
            "SELECT s.*, t.bucket FROM steps s LEFT JOIN tasks t ON s.signature = t.signature "
            "WHERE s.family = ? AND (? IS NULL OR s.run_id != ?) "
            "ORDER BY (t.bucket = ?) DESC, s.created DESC LIMIT ?",
            (task.family, exclude_run, exclude_run, bucket, limit)).fetchall()
        return [{"signature": r["signature"], "card": r["card"], "params": json.loads(r["params"]),
                 "status": r["status"], "time_ms": r["time_ms"], "time_kind": r["time_kind"],
                 "gain": r["gain"]} for r in rows]


def best_schedule(signature: str, *, allow_estimates: bool = False,
                  path: str | Path | None = None) -> dict[str, Any] | None:
    """The parameters of the fastest correct candidate the agent measured for this signature
    (see task.make_signature / gemm_signature), or None: what the default store publishes to
    `argus.ops` (ExperienceStore._publish).

    Never raises and never creates the database: a missing or unreadable store means "no entry".
    Cost-model estimates are returned only with allow_estimates=True: they are not evidence.
    """
    db_path = Path(path) if path else default_path()
    if not db_path.exists():
        return None
    try:
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0)
        try:
            kinds = ("measured", "estimate") if allow_estimates else ("measured",)
            for kind in kinds:
                row = db.execute("SELECT params FROM best WHERE signature = ? AND time_kind = ? "
                                 "AND (source IS NULL OR source = '')",
                                 (signature, kind)).fetchone()
                if row:
                    return json.loads(row[0])
        finally:
            db.close()
    except (sqlite3.Error, ValueError, OSError):
        return None
    return None
