"""Load a Python file that is not on the import path (a script of scripts/, an example, a
generated KernelBench solution) as a module, for tests that call its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_file(path: Path | str, name: str | None = None) -> ModuleType:
    """The module of the file at `path`, executed once under `name` (default: its stem). Not
    put in sys.modules: each call executes the file again."""
    path = Path(path)
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module named `name` (its import-time code runs: the scripts
    keep device work under main())."""
    return load_file(ROOT / "scripts" / f"{name}.py", name)
