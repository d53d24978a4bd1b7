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

Card classes: measured speed differs between the H100 and the H200 (argus/ops/moe.py
card_class: CARD_H100 / CARD_H200), so every step, run and best entry carries the card class
its times belong to (the `card_class` column; the `card` column is the knowledge card that
proposed the step), and every read that ranks points (`best`, `arm_stats`, `similar_steps`,
`best_schedule`) asks for one class and sees only its rows: a time on one class never ranks
points for another. Rows written before the column existed have card_class '' (unrecorded)
and are read as the H100 class (LEGACY_CARD_CLASS): the class argus.ops.moe gives an unknown
card and a host without CUDA (where the CPU planning runs that wrote most of the stored rows
took their estimates), and the only class whose times the agent's cost models were fitted on
before the H200 model; ignoring them would drop every warm start and prior an existing store
holds. The '' is kept, not rewritten to the H100 class, so the rows stay marked as unrecorded.
Opening a store written before the column migrates it in one transaction that keeps every row
(`_migrate`: counted before and after, rolled back on a mismatch).
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

BEST_TABLE = """
CREATE TABLE IF NOT EXISTS {name} (
    signature TEXT, time_kind TEXT, family TEXT, params TEXT, source TEXT, time_ms REAL,
    run_id TEXT, step INTEGER, updated REAL, card_class TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (signature, card_class, time_kind));
"""
SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    signature TEXT PRIMARY KEY, family TEXT, bucket TEXT, spec TEXT, created REAL);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, signature TEXT, status TEXT, config TEXT, out_dir TEXT,
    started REAL, updated REAL, card_class TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS steps (
    run_id TEXT, idx INTEGER, signature TEXT, family TEXT, card TEXT, planner TEXT,
    status TEXT, time_ms REAL, time_kind TEXT, reward REAL, gain REAL, params TEXT,
    source_hash TEXT, data TEXT, created REAL, card_class TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (run_id, idx));
CREATE INDEX IF NOT EXISTS steps_by_family ON steps (family, card);
""" + BEST_TABLE.format(name="best")

# the card class of rows written before the store recorded one (module docstring)
UNRECORDED = ""


def legacy_card_class() -> str:
    """The class unrecorded rows are read as: argus.ops.moe's H100 class (module docstring)."""
    from argus.ops import moe_module

    return moe_module.CARD_H100


def card_classes(card_class: str) -> tuple[str, ...]:
    """The stored card_class values a read for `card_class` sees: its own, plus the unrecorded
    rows when it is the legacy class. Refuses '' and None: a reader names its class."""
    if not card_class:
        raise ValueError("experience store: a read that ranks points needs the card class its "
                         "times are for (argus.ops.moe CARD_H100 / CARD_H200; "
                         "argus.agent.loop.run_card_class gives a run's)")
    return (card_class, UNRECORDED) if card_class == legacy_card_class() else (card_class,)


def _in(classes: tuple[str, ...]) -> str:
    return "card_class IN (" + ", ".join("?" * len(classes)) + ")"


def _columns(db: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in db.execute(f"PRAGMA table_info({table})")}


def _migrate(db: sqlite3.Connection) -> None:
    """Bring a store written before card classes to the current schema, keeping every row:
    runs and steps get a card_class column (ALTER TABLE: rows untouched, '' each); best is
    rebuilt with card_class in its primary key (copied, then swapped). One IMMEDIATE
    transaction, re-checked inside it (two processes may open an old store at once); the row
    counts are compared before it commits, and a mismatch rolls everything back."""
    def stale() -> list[str]:
        return [t for t in ("runs", "steps", "best") if "card_class" not in _columns(db, t)]

    if not stale():
        return
    db.execute("BEGIN IMMEDIATE")
    try:
        todo = stale()
        before = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]
                  for t in ("runs", "steps", "best")}
        for table in ("runs", "steps"):
            if table in todo:
                db.execute(f"ALTER TABLE {table} ADD COLUMN card_class TEXT NOT NULL "
                           f"DEFAULT ''")
        if "best" in todo:
            cols = "signature, time_kind, family, params, source, time_ms, run_id, step, updated"
            db.execute(BEST_TABLE.format(name="best_by_card"))
            db.execute(f"INSERT INTO best_by_card ({cols}, card_class) SELECT {cols}, ? "
                       f"FROM best", (UNRECORDED,))
            db.execute("DROP TABLE best")
            db.execute("ALTER TABLE best_by_card RENAME TO best")
        after = {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in before}
        if after != before:
            raise sqlite3.DatabaseError(f"experience store migration would change the row "
                                        f"counts {before} -> {after}; nothing was changed")
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


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
        _migrate(self.db)

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
                  out_dir: str, card_class: str) -> None:
        """Open (or reopen) a run whose times are for `card_class`."""
        card_classes(card_class)                 # refuses an unnamed class
        self.register_task(task)
        now = time.time()
        with self.db:
            self.db.execute("INSERT OR IGNORE INTO runs (run_id, signature, status, config, "
                            "out_dir, started, updated, card_class) VALUES (?, ?, ?, ?, ?, ?, ?, "
                            "?)", (run_id, task.signature(), "running", json.dumps(config),
                                   out_dir, now, now, card_class))
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
    def record_step(self, run_id: str, task: TaskSpec, step: Step, card_class: str) -> None:
        """Write one completed step whose time is for `card_class` (and update that class's
        best entry) in one transaction."""
        card_classes(card_class)                 # refuses an unnamed class
        o = step.outcome
        sig = task.signature()
        src_hash = step.candidate.key if step.candidate.source else ""
        with self.db:
            self.db.execute(
                "INSERT OR REPLACE INTO steps (run_id, idx, signature, family, card, planner, "
                "status, time_ms, time_kind, reward, gain, params, source_hash, data, created, "
                "card_class) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, step.index, sig, task.family, step.card, step.planner, o.status,
                 o.time_ms, o.time_kind, step.reward, step.gain,
                 json.dumps(step.candidate.params_dict, sort_keys=True, default=str), src_hash,
                 json.dumps(step.to_json(), default=str), step.created or time.time(),
                 card_class))
            self.db.execute("UPDATE runs SET updated = ? WHERE run_id = ?", (time.time(), run_id))
            if o.ok and o.time_ms is not None and o.time_kind:
                row = self.db.execute("SELECT time_ms FROM best WHERE signature = ? AND "
                                      "card_class = ? AND time_kind = ?",
                                      (sig, card_class, o.time_kind)).fetchone()
                if row is None or o.time_ms < row["time_ms"]:
                    self.db.execute(
                        "INSERT OR REPLACE INTO best (signature, time_kind, family, params, "
                        "source, time_ms, run_id, step, updated, card_class) VALUES (?, ?, ?, ?, "
                        "?, ?, ?, ?, ?, ?)",
                        (sig, o.time_kind, task.family,
                         json.dumps(step.candidate.params_dict, sort_keys=True, default=str),
                         step.candidate.source, o.time_ms, run_id, step.index, time.time(),
                         card_class))
        if self.publish and task.family == "gemm" and o.ok and o.time_kind == "measured":
            self._publish(sig, card_class)

    def _best_row(self, signature: str, card_class: str, time_kind: str,
                  columns: str = "*") -> sqlite3.Row | None:
        """The fastest `best` row of a signature and time kind among the rows a read for
        `card_class` sees (its own and, for the legacy class, the unrecorded ones)."""
        classes = card_classes(card_class)
        return self.db.execute(f"SELECT {columns} FROM best WHERE signature = ? AND "
                               f"time_kind = ? AND {_in(classes)} ORDER BY time_ms LIMIT 1",
                               (signature, time_kind, *classes)).fetchone()

    def _publish(self, signature: str, card_class: str) -> None:
        """Hand argus.ops what `best_schedule(signature, card_class=...)` answers for the class
        that just measured, under that class (ops keeps one agent entry per problem and card
        class): the measured best when it is a schedule (no edited source), else no entry."""
        from argus.ops.schedules import record_agent_choice  # ops loads the kernel library

        row = self._best_row(signature, card_class, "measured", "params, source, time_ms")
        schedule_only = row is not None and not row["source"]
        try:
            record_agent_choice(signature, json.loads(row["params"]) if schedule_only else None,
                                row["time_ms"] if schedule_only else None, card=card_class)
        except OSError as e:  # the store keeps the result; only the shortcut for ops is lost
            warnings.warn(f"agent store: could not publish the best schedule of {signature} to "
                          f"the argus.ops tuning cache ({e}); fix: make ARGUS_CACHE_DIR "
                          f"writable", stacklevel=2)

    def steps(self, run_id: str) -> list[Step]:
        rows = self.db.execute("SELECT data FROM steps WHERE run_id = ? ORDER BY idx",
                               (run_id,)).fetchall()
        return [Step.from_json(json.loads(r["data"])) for r in rows]

    def best(self, signature: str, card_class: str,
             time_kind: str | None = None) -> dict[str, Any] | None:
        """The best entry for a signature on a card class (measured preferred over estimate)."""
        kinds = (time_kind,) if time_kind else ("measured", "estimate")
        for kind in kinds:
            row = self._best_row(signature, card_class, kind)
            if row:
                out = dict(row)
                out["params"] = json.loads(out["params"])
                return out
        return None

    def arm_stats(self, family: str, card_class: str, exclude_run: str | None = None,
                  time_kind: str | None = None) -> dict[str, tuple[int, float, float]]:
        """Per knowledge card: (count, mean gain, variance) over every recorded step of this
        family on this card class (other runs only, when exclude_run is given): the bandit's
        priors."""
        classes = card_classes(card_class)
        query = f"SELECT card, gain FROM steps WHERE family = ? AND card != '' AND {_in(classes)}"
        args: list[Any] = [family, *classes]
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

    def similar_steps(self, task: TaskSpec, card_class: str, exclude_run: str | None = None,
                      limit: int = 20) -> list[dict[str, Any]]:
        """Recent steps of the same family on similar shapes (same size bucket first) on this
        card class: rows for the LLM's experience table."""
        bucket = bucket_signature(task.signature())
        classes = card_classes(card_class)
        rows = self.db.execute(
            "SELECT s.*, t.bucket FROM steps s LEFT JOIN tasks t ON s.signature = t.signature "
            f"WHERE s.family = ? AND s.{_in(classes)} AND (? IS NULL OR s.run_id != ?) "
            "ORDER BY (t.bucket = ?) DESC, s.created DESC LIMIT ?",
            (task.family, *classes, exclude_run, exclude_run, bucket, limit)).fetchall()
        return [{"signature": r["signature"], "card": r["card"], "params": json.loads(r["params"]),
                 "status": r["status"], "time_ms": r["time_ms"], "time_kind": r["time_kind"],
                 "gain": r["gain"]} for r in rows]


def best_schedule(signature: str, *, card_class: str | None = None,
                  allow_estimates: bool = False,
                  path: str | Path | None = None) -> dict[str, Any] | None:
    """The parameters of the fastest correct candidate the agent measured for this signature
    (see task.make_signature / gemm_signature) on a card class (argus.ops.moe CARD_H100 /
    CARD_H200; None: argus.ops.moe.default_card's, the current CUDA device's class, else the
    H100 class), or None: what the default store publishes to `argus.ops`
    (ExperienceStore._publish).

    Never raises and never creates the database: a missing or unreadable store means "no entry".
    Cost-model estimates are returned only with allow_estimates=True: they are not evidence.
    A store written before card classes is read as it is (read-only: not migrated here), its
    rows as the legacy class's.
    """
    db_path = Path(path) if path else default_path()
    if not db_path.exists():
        return None
    try:
        if card_class is None:
            from argus.ops import moe_module

            card_class = moe_module.default_card()
        classes = card_classes(card_class)
        db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=5.0)
        try:
            kinds = ("measured", "estimate") if allow_estimates else ("measured",)
            legacy = "card_class" not in _columns(db, "best")
            if legacy and UNRECORDED not in classes:
                return None
            where = "" if legacy else f" AND {_in(classes)}"
            for kind in kinds:
                # the fastest entry the class sees (as _publish), a schedule only if unedited
                row = db.execute(f"SELECT params, source FROM best WHERE signature = ? AND "
                                 f"time_kind = ?{where} ORDER BY time_ms LIMIT 1",
                                 (signature, kind, *(() if legacy else classes))).fetchone()
                if row and not row[1]:
                    return json.loads(row[0])
        finally:
            db.close()
    except (sqlite3.Error, ValueError, OSError, ImportError, RuntimeError):
        return None
    return None
