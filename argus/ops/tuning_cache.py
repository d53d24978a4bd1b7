"""The on-disk tuning cache of argus.ops: one JSON file per GPU name under
$ARGUS_CACHE_DIR/<kind> (default ~/.cache/argus/<kind>), mapping a problem key to the schedule
that won the tuning and its time. `kind` names the operator ("matmul", "scaled_matmul")."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

from argus import config


def cache_file(kind: str, gpu: str) -> Path:
    safe = "".join(c if c.isalnum() else "_" for c in gpu)
    return config.cache_dir() / kind / f"{safe}.json"


def load(kind: str, gpu: str) -> dict:
    """Every recorded choice for this GPU ({} when there is no readable cache)."""
    try:
        return json.loads(cache_file(kind, gpu).read_text())
    except (OSError, ValueError):
        return {}


def record(kind: str, gpu: str, key: str, schedule, ms: float, **extra) -> None:
    """Record `schedule` (a dataclass) as the choice for problem `key`, with `extra` fields
    (e.g. the fingerprint of the candidates it was chosen from)."""
    write(kind, gpu, key, {"schedule": dataclasses.asdict(schedule), "ms": ms, **extra})


def write(kind: str, gpu: str, key: str, entry: dict | None) -> None:
    """Set the entry of problem `key` to `entry` (a JSON-able dict), or remove it with None."""
    path = cache_file(kind, gpu)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = load(kind, gpu)
    if entry is None:
        if key not in data:
            return
        del data[key]
    else:
        data[key] = entry
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)
    os.replace(tmp, path)  # atomic: a concurrent reader sees the old or the new file
