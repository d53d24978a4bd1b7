"""Every ARGUS_* environment variable, typed and documented, in one place.

Read at call time (never at import), so tests and users can change them per process.
"""

from __future__ import annotations

import os
from pathlib import Path


def _flag(name: str, default: str) -> str:
    return os.environ.get(name, default)


def dump_dir() -> Path | None:
    """ARGUS_DUMP=dir: write the IR after every pipeline step, the CUDA, PTX and cubin there."""
    value = _flag("ARGUS_DUMP", "")
    return Path(value) if value else None


def verify_level() -> int:
    """ARGUS_VERIFY: 0 skips verification in ag.compile, 1 (default) verifies the lowered
    kernel, 2 also re-verifies after every lowering pass."""
    return int(_flag("ARGUS_VERIFY", "1"))


def cache_dir() -> Path:
    """ARGUS_CACHE_DIR: the on-disk compile cache (default ~/.cache/argus)."""
    return Path(_flag("ARGUS_CACHE_DIR", str(Path.home() / ".cache" / "argus")))


def accept_golden() -> bool:
    """ARGUS_ACCEPT=1: golden-file tests rewrite their expected files instead of failing."""
    return _flag("ARGUS_ACCEPT", "0") == "1"
