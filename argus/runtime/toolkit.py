"""Find the CUDA compilers and tools this process can use: NVRTC (library) and nvcc / cuobjdump /
nvdisasm (executables).

One job: answer "where is X, and which version?" without side effects at import. NVRTC comes
from cuda-bindings, which locates libnvrtc with cuda-pathfinder (pip wheel `nvidia-cuda-nvrtc`,
conda, the system loader path, then CUDA_PATH / CUDA_HOME). When that fails and neither variable
is set, we also try the usual toolkit folders (/usr/local/cuda/lib64, next to nvcc) by preloading
the library, so that a plain system toolkit works without environment variables.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType


class ToolNotFound(RuntimeError):
    """A CUDA compiler or tool is not installed where we look; the message says how to fix it."""


@dataclass(frozen=True)
class NvrtcInfo:
    module: ModuleType     # cuda.bindings.nvrtc
    version: tuple[int, int]
    library: str           # absolute path of the loaded libnvrtc (its name carries the patch level)


def cuda_roots() -> list[Path]:
    """Candidate toolkit roots, most specific first: CUDA_HOME, CUDA_PATH, /usr/local/cuda*."""
    roots: list[Path] = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        value = os.environ.get(var)
        if value:
            roots.append(Path(value))
    roots.append(Path("/usr/local/cuda"))
    roots += [Path(p) for p in sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(Path(nvcc).resolve().parent.parent)
    unique: list[Path] = []
    for root in roots:
        if root not in unique:
            unique.append(root)
    return unique


def find_tool(name: str) -> str | None:
    """Absolute path of a toolkit executable (nvcc, cuobjdump, nvdisasm, ptxas) or None.

    An environment variable of the tool's name in capitals (NVDISASM=/path/to/nvdisasm, as
    the SASS scripts document) wins when it names an executable file; then PATH, then
    <root>/bin for each of `cuda_roots()` and `wheel_roots()`.
    """
    override = os.environ.get(name.upper())
    if override and os.path.isfile(override) and os.access(override, os.X_OK):
        return override
    found = shutil.which(name)
    if found:
        return found
    for root in cuda_roots() + wheel_roots():
        candidate = root / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def wheel_roots() -> list[Path]:
    """Roots of NVIDIA's pip wheels on sys.path (site-packages/nvidia/cu13, .../cuda_nvcc, ...):
    `pip install nvidia-cuda-nvdisasm` puts nvdisasm in <root>/bin there and nowhere on PATH,
    which left the SASS tests and scripts skipped on a machine that had it."""
    roots: list[Path] = []
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir():
            roots += sorted((p for p in base.iterdir() if (p / "bin").is_dir()), reverse=True)
    return roots


@functools.cache
def tool_version(path: str) -> str:
    """The `release X.Y, VZ` line of `<tool> --version`, used in cache keys."""
    try:
        out = subprocess.run([path, "--version"], check=False, capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    lines = [ln.strip() for ln in out.stdout.splitlines() if "release" in ln or ln.startswith("V")]
    return " ".join(lines) or out.stdout.strip()


def _preload_system_nvrtc() -> str | None:
    """dlopen libnvrtc (and its builtins) from a toolkit folder so cuda-pathfinder finds it as
    "already loaded". Returns the path loaded, or None."""
    for root in cuda_roots():
        for libdir in (root / "lib64", root / "lib", root / "targets" / "x86_64-linux" / "lib"):
            candidates = sorted(libdir.glob("libnvrtc.so.*[0-9]"), reverse=True)
            candidates = [c for c in candidates if "builtins" not in c.name and "alt" not in c.name]
            for lib in candidates:
                real = lib.resolve()
                parts = real.name.removeprefix("libnvrtc.so.").split(".")
                if len(parts) >= 2:
                    builtins = real.parent / f"libnvrtc-builtins.so.{parts[0]}.{parts[1]}"
                    if builtins.is_file():
                        try:
                            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
                        except OSError:
                            pass
                try:
                    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
                except OSError:
                    continue
                return str(real)
    return None


@functools.lru_cache(maxsize=1)
def load_nvrtc() -> NvrtcInfo:
    """Load NVRTC through cuda-bindings; raise ToolNotFound with a fix when impossible."""
    try:
        from cuda import pathfinder
        from cuda.bindings import nvrtc
    except ImportError as exc:
        raise ToolNotFound(
            f"the cuda-bindings package is not importable ({exc}); fix: pip install "
            "'cuda-bindings>=13,<14' 'nvidia-cuda-nvrtc>=13,<14' (or put nvcc on PATH)"
        ) from exc
    try:
        loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
    except Exception as first_error:  # DynamicLibNotFoundError and friends
        if _preload_system_nvrtc() is None:
            raise ToolNotFound(
                f"libnvrtc was not found ({first_error}); looked in the nvidia-cuda-nvrtc wheel, "
                "conda, the loader path, CUDA_PATH/CUDA_HOME and "
                f"{', '.join(str(r) for r in cuda_roots())}; fix: pip install "
                "'nvidia-cuda-nvrtc>=13,<14', or set CUDA_HOME to a CUDA 13 toolkit"
            ) from first_error
        loaded = pathfinder.load_nvidia_dynamic_lib("nvrtc")
    result = nvrtc.nvrtcVersion()
    if int(result[0]) != 0:
        raise ToolNotFound(f"libnvrtc at {loaded.abs_path} does not answer nvrtcVersion: "
                           f"{result[0]}")
    version = (int(result[1]), int(result[2]))
    return NvrtcInfo(nvrtc, version, os.path.realpath(loaded.abs_path))


def nvrtc_available() -> bool:
    try:
        load_nvrtc()
    except ToolNotFound:
        return False
    return True
