"""The on-disk compile cache: content hash -> compiled artefacts, written atomically.

One job: store and fetch JSON records by key under ARGUS_CACHE_DIR (default ~/.cache/argus),
one folder per kind of record: "cubin" (runtime/compile.py: NVRTC's output by content hash) and
"verified" (argus/compiler.py: the verifier's verdict on one lowered kernel and its CUDA, for
this Argus, `argus_fingerprint`) and "coverage" (runtime/coverage.py: a kernel's stores found to
cover its outputs for every launch, for this Argus).
Invariant: a record is either absent or complete. Each record is one file written to a temporary
name in the same folder and renamed into place (os.replace is atomic on POSIX), so concurrent
compiles of the same kernel, or a crash mid-write, never leave a torn entry; a record that fails
to parse is treated as a miss and overwritten.
"""

from __future__ import annotations

import functools
import hashlib
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


def _record_path(key: str, root: Path | None = None, kind: str = "cubin") -> Path:
    base = root if root is not None else cache_dir()
    return base / kind / key[:2] / f"{key}.json"


@functools.cache
def argus_fingerprint() -> str:
    """sha256 of this Argus: the text of every Python file and device header of the package and
    the z3 installed beside it. A record whose meaning depends on what the compiler does (the
    verifier's verdict) is keyed by it, so an edited or upgraded Argus never trusts an older
    one's records. Read once per process (about 20 ms on the 2-core development machine)."""
    import importlib.util

    package = Path(__file__).resolve().parents[1]
    digest = hashlib.sha256()
    for path in sorted([*package.rglob("*.py"), *package.rglob("*.cuh")]):
        digest.update(str(path.relative_to(package)).encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    # z3 by the names and sizes of its files (its library among them), without importing it
    # or reading package metadata (importlib.metadata costs ~60 ms, three times the rest)
    spec = importlib.util.find_spec("z3")
    if spec is None or not spec.origin:
        digest.update(b"no z3")
    else:
        z3_dir = Path(spec.origin).parent
        for path in sorted(z3_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                digest.update(f"{path.relative_to(z3_dir)}:{path.stat().st_size}".encode())
    return digest.hexdigest()


def load(key: str, kind: str = "cubin") -> dict[str, Any] | None:
    """The record stored under `key`, or None (absent, unreadable, or another format)."""
    path = _record_path(key, kind=kind)
    try:
        with open(path, encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("format") != FORMAT_VERSION:
        return None
    return record


def exists(key: str, kind: str = "cubin") -> bool:
    """Whether a record file is stored under `key` (one stat; its content is not read)."""
    return _record_path(key, kind=kind).is_file()


def store(key: str, record: dict[str, Any], kind: str = "cubin") -> Path | None:
    """Write `record` under `key` atomically; returns the path, or None if the cache is not
    writable (a cache that cannot be written must never fail a compile)."""
    path = _record_path(key, kind=kind)
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
