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


def wgmma_a_fence() -> str:
    """ARGUS_WGMMA_A_FENCE: "auto" (default) lets lowering choose, per register-A wgmma, a
    copy of the A registers where the fragment is loop-invariant and a pin (no instruction)
    elsewhere (lower/sync.py _a_copy); "copy" copies at every one (the fence of commit
    9879b96), for timing the two against each other. One of build_choices: part of the key
    of every cache of built kernels."""
    value = _flag("ARGUS_WGMMA_A_FENCE", "auto")
    if value not in ("auto", "copy"):
        raise ValueError(f"ARGUS_WGMMA_A_FENCE={value!r}: expected 'auto' or 'copy' "
                         "(unset it for auto)")
    return value


# The variables whose values change what a kernel builds to (lowering's choices)
_BUILD_CHOICE_NAMES = ("ARGUS_WGMMA_A_FENCE",)
# os.environ's own table of encoded names and values (POSIX CPython): build_choices runs at
# every lookup of the ops' memos, on the call path, and os.environ.get encodes the name and
# decodes the value (~0.7 us a variable, measured); the table reads in ~0.05 us. Writes
# through os.environ (and pytest's monkeypatch) update it; elsewhere fall back to os.environ
_ENVIRON_TABLE = getattr(os.environ, "_data", None)
_BUILD_CHOICE_KEYS = tuple(os.environ.encodekey(n) for n in _BUILD_CHOICE_NAMES) \
    if _ENVIRON_TABLE is not None and hasattr(os.environ, "encodekey") else None


def build_choices() -> tuple:
    """The raw values (None where unset) of the ARGUS_* variables that change what a kernel
    builds to (lowering's choices; wgmma_a_fence validates its own when lowering reads it):
    part of the key of KernelFunction's compiled kernels (argus/kernel_api.py) and of
    argus.ops's memos of built kernels and their launches (argus/build_memo.py BuildMemo), so
    one process can build, keep and run both choices (a benchmark times one against the
    other)."""
    if _BUILD_CHOICE_KEYS is not None:
        return tuple(map(_ENVIRON_TABLE.get, _BUILD_CHOICE_KEYS))
    return tuple(os.environ.get(n) for n in _BUILD_CHOICE_NAMES)


def accept_golden() -> bool:
    """ARGUS_ACCEPT=1: golden-file tests rewrite their expected files instead of failing."""
    return _flag("ARGUS_ACCEPT", "0") == "1"


# ---------------------------------------------------------------------------------------------
# The rest of the ARGUS_* variables are read where they are used (the subsystems must import
# without torch or the SDKs); this table is the one place that lists them all.
# ---------------------------------------------------------------------------------------------
OTHER_VARIABLES = {
    "ARGUS_VERIFY_TIMEOUT_MS": "per-query solver timeout of the verifier (default 1000); a "
                               "timeout is reported as unknown, never as proven",
    "ARGUS_KERNELBENCH_DIR": "KernelBench task folder (default ../shared/kernelbench)",
    "ARGUS_KERNELBENCH_CACHE": "where measured eager/torch.compile baselines are cached",
    "ARGUS_AGENT_DB": "the agent's SQLite experience store (default under ARGUS_CACHE_DIR)",
    "ARGUS_AGENT_SANDBOX": "set to 1 by the agent inside its candidate worker processes",
    "ARGUS_LLM_PROVIDER": "openai | anthropic: which SDK the LLM planner uses",
    "ARGUS_LLM_MODEL": "model name for the LLM planner",
    "ARGUS_LLM_BASE_URL": "any OpenAI-compatible endpoint (vLLM, SGLang, Ollama, ...)",
    "ARGUS_LLM_TIMEOUT": "seconds per LLM request",
    "ARGUS_LLM_RETRIES": "retries per LLM request (rate limits, timeouts)",
    "ARGUS_COMMIT": "commit recorded by the GPU benchmark scripts when git is absent",
}
