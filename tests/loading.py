"""Load a Python file that is not on the import path (a script of scripts/, an example, a
generated KernelBench solution) as a module, for tests that call its functions."""

from __future__ import annotations

import importlib.util
import inspect
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


def load_edited(module: ModuleType, edits, path: Path) -> ModuleType:
    """`module`'s source with each (old, new) of `edits` replaced in turn, written to `path` and
    loaded there (load_file): a seeded bug in a library kernel. Each `old` must occur exactly
    once when its turn comes, so an edit that stops matching the library fails loudly instead
    of seeding nothing."""
    src = inspect.getsource(module)
    for old, new in edits:
        assert src.count(old) == 1, old
        src = src.replace(old, new)
    path = Path(path)
    path.write_text(src)
    return load_file(path)
