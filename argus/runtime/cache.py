"""The on-disk compile cache: content hash -> compiled artefacts, written atomically.

One job: store and fetch JSON records by key under ARGUS_CACHE_DIR (default ~/.cache/argus).
Invariant: a record is either absent or complete. Each record is one file written to a temporary
name in the same folder and renamed into place (os.replace is atomic on POSIX), so concurrent
compiles of the same kernel, or a crash mid-write, never leave a torn entry; a record that fails
to parse is treated as a miss and overwritten.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

FORMAT_VERSION = 1


def cache_dir() -> Path:
    """ARGUS_CACHE_DIR if set, else ~/.cache/argus (read at call time, never at import)."""
    value = os.environ.get("ARGUS_CACHE_DIR")
    return Path(value).expanduser() if value else Path.home() / ".cache" / "argus"


def _record_path(key: str, root: Path | None = None) -> Path:
    base = root if root is not None else cache_dir()
    return base / "cubin" / key[:2] / f"{key}.json"


def load(key: str) -> dict[str, Any] | None:
    """The record stored under `key`, or None (absent, unreadable, or another format)."""
    path = _record_path(key)
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT_VERSION:
        return None
    return record


def store(key: str, record: dict[str, Any]) -> Path | None:
    """Write `record` under `key` atomically; returns the path, or None if the cache is not
    writable (a cache that cannot be written must never fail a compile)."""
    path = _record_path(key)
    data = dict(record, format=FORMAT_VERSION)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{key[:16]}.", suffix=".tmp", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(data, handle)
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
    except OSError:
        return None
    return path
