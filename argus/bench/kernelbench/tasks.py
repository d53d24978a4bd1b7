"""Find KernelBench task files and load one as live objects (Model, get_inputs, get_init_inputs).

A task is `level<N>/<id>_<Name>.py` under a KernelBench directory: Argus's development split in
`../shared/kernelbench` (beside the repository) by default, `$ARGUS_KERNELBENCH_DIR` when set, or
any upstream checkout (which keeps the levels under `KernelBench/`).

Loading executes the task file's own source. Its module-level integer constants (batch_size,
dim, in_channels, ...) are "size sites": `load_task(path, overrides)` re-executes the source with
some of them replaced, which is how CPU runs shrink huge tasks (see shrink.py). Derived constants
(`bias_shape = (out_channels, 1, 1)`) are recomputed because the whole file is re-executed.

Invariant: the same (path, overrides) always yields the same module source, in every process.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import os
import re
import sys
import types
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from argus.errors import ArgusError

ENV_DIR = "ARGUS_KERNELBENCH_DIR"
_TASK_FILE = re.compile(r"^(\d+)_(.+)\.py$")


class KernelBenchError(ArgusError):
    """A KernelBench task, solution or run directory cannot be used as given."""


@dataclass(frozen=True)
class Task:
    """One task file. `key` ("L1/19") names it in reports; `sha256` pins its exact text."""

    level: int
    problem_id: int
    name: str
    path: Path
    sha256: str

    @property
    def key(self) -> str:
        return f"L{self.level}/{self.problem_id}"

    @property
    def stem(self) -> str:
        return self.path.stem

    def to_json(self) -> dict[str, object]:
        return {"key": self.key, "level": self.level, "problem_id": self.problem_id,
                "name": self.name, "path": str(self.path), "sha256": self.sha256}


def repo_root() -> Path:
    """The Argus checkout this file lives in (argus/bench/kernelbench/tasks.py -> repo)."""
    return Path(__file__).resolve().parents[3]


def default_root() -> Path:
    """Where tasks come from when no directory is given: $ARGUS_KERNELBENCH_DIR, else
    `../shared/kernelbench` beside the repository (or beside the working directory)."""
    env = os.environ.get(ENV_DIR)
    if env:
        return Path(env).expanduser()
    for candidate in (repo_root().parent / "shared" / "kernelbench",
                      Path.cwd().parent / "shared" / "kernelbench",
                      repo_root() / "shared" / "kernelbench"):
        if candidate.is_dir():
            return candidate
    return repo_root().parent / "shared" / "kernelbench"


def levels_dir(root: Path) -> Path:
    """The directory holding level1/, level2/...: root itself or root/KernelBench (upstream)."""
    root = Path(root).expanduser()
    if any((root / f"level{n}").is_dir() for n in range(1, 10)):
        return root
    if (root / "KernelBench").is_dir():
        return root / "KernelBench"
    raise KernelBenchError(
        f"no KernelBench levels under {root}: expected level1/, level2/, ... there or in "
        f"{root}/KernelBench",
        fix=f"pass --root pointing at a KernelBench checkout, or set {ENV_DIR}")


def task_from_path(path: Path | str, level: int | None = None) -> Task:
    """A Task for one file; the level comes from its `level<N>` folder when not given."""
    path = Path(path).expanduser().resolve()
    if not path.is_file():
        raise KernelBenchError(f"task file {path} does not exist",
                               fix="pass the path of a KernelBench task .py file")
    match = _TASK_FILE.match(path.name)
    problem_id = int(match.group(1)) if match else 0
    name = match.group(2) if match else path.stem
    if level is None:
        m = re.match(r"level(\d+)$", path.parent.name)
        level = int(m.group(1)) if m else 0
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    return Task(level=level, problem_id=problem_id, name=name, path=path, sha256=digest)


def discover(root: Path | str | None = None, levels: Iterable[int] | None = None,
             ids: Iterable[int] | None = None) -> list[Task]:
    """Task files under `root` (default_root()), filtered by level and problem id, sorted."""
    base = levels_dir(Path(root) if root is not None else default_root())
    wanted_levels = sorted(set(levels)) if levels else sorted(
        int(p.name[5:]) for p in base.glob("level*") if p.is_dir() and p.name[5:].isdigit())
    wanted_ids = set(ids) if ids else None
    tasks: list[Task] = []
    for level in wanted_levels:
        folder = base / f"level{level}"
        if not folder.is_dir():
            raise KernelBenchError(f"level {level} not found: {folder} is missing",
                                   fix=f"choose among the levels present in {base}")
        for path in folder.glob("*.py"):
            match = _TASK_FILE.match(path.name)
            if not match:
                continue
            if wanted_ids is not None and int(match.group(1)) not in wanted_ids:
                continue
            tasks.append(task_from_path(path, level))
    tasks.sort(key=lambda t: (t.level, t.problem_id))
    return tasks


def parse_ids(text: str | None) -> list[int] | None:
    """'1,2,5-9' -> [1, 2, 5, 6, 7, 8, 9]; None or '' -> None (all)."""
    if not text:
        return None
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            out.extend(range(int(lo), int(hi) + 1))
        else:
            out.append(int(part))
    return out


# ----------------------------------------------------------------------------- size sites


@dataclass(frozen=True)
class SizeSite:
    """A module-level integer constant in a task file: `name` or `name[i]` for tuple elements."""

    name: str
    value: int
    line: int


def _const_int(node: ast.AST) -> int | None:
    """Value of a constant integer expression (literals and + - * // ** of them), else None."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _const_int(node.operand)
        return -v if v is not None else None
    if isinstance(node, ast.BinOp):
        a, b = _const_int(node.left), _const_int(node.right)
        if a is None or b is None:
            return None
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.FloorDiv: lambda: a // b if b else None,
               ast.Pow: lambda: a ** b if 0 <= b < 64 else None}
        fn = ops.get(type(node.op))
        return fn() if fn else None
    return None


def _split_chains(tree: ast.Module) -> ast.Module:
    """`height = width = 256` -> `height = 256; width = 256`, so each name is its own site."""
    body: list[ast.stmt] = []
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) > 1 \
                and all(isinstance(t, ast.Name) for t in stmt.targets):
            for target in stmt.targets:
                one = ast.Assign(targets=[target], value=copy.deepcopy(stmt.value))
                body.append(ast.copy_location(one, stmt))
        else:
            body.append(stmt)
    tree.body = body
    return tree


def _parse(source: str) -> ast.Module:
    return _split_chains(ast.parse(source))


def _sites_in(tree: ast.Module) -> list[tuple[str, ast.Assign, ast.AST, int]]:
    """(site name, statement, value node, value) for every integer size site."""
    found = []
    for stmt in tree.body:
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        target, value = stmt.targets[0], stmt.value
        if isinstance(target, ast.Name):
            v = _const_int(value)
            if v is not None:
                found.append((target.id, stmt, value, v))
            elif isinstance(value, ast.Tuple):
                for i, elt in enumerate(value.elts):
                    ev = _const_int(elt)
                    if ev is not None:
                        found.append((f"{target.id}[{i}]", stmt, elt, ev))
        elif isinstance(target, ast.Tuple) and isinstance(value, ast.Tuple) \
                and len(target.elts) == len(value.elts):
            for t, elt in zip(target.elts, value.elts):
                ev = _const_int(elt)
                if isinstance(t, ast.Name) and ev is not None:
                    found.append((t.id, stmt, elt, ev))
    return found


def size_sites(source: str) -> dict[str, SizeSite]:
    """The integer size sites of a task's source, by name (the last assignment wins)."""
    tree = _parse(source)
    return {name: SizeSite(name, v, stmt.lineno) for name, stmt, _, v in _sites_in(tree)}


def _rewrite(source: str, overrides: dict[str, int], where: str) -> ast.Module:
    tree = _parse(source)
    if not overrides:
        return tree
    sites = _sites_in(tree)
    known = {name for name, *_ in sites}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise KernelBenchError(
            f"size override(s) {unknown} do not name integer constants of {where}",
            fix=f"use names among {sorted(known)}")
    replacements = {id(node): overrides[name] for name, _, node, _ in sites if name in overrides}

    class _Sub(ast.NodeTransformer):
        def visit(self, node: ast.AST) -> ast.AST:
            if id(node) in replacements:
                return ast.copy_location(ast.Constant(replacements[id(node)]), node)
            return super().visit(node)

    return ast.fix_missing_locations(_Sub().visit(tree))


_load_counter = 0


def load_task(path: Path | str, overrides: dict[str, int] | None = None) -> types.ModuleType:
    """Execute a task file (with size overrides) and return it as a module.

    The module is registered in sys.modules under a fresh name so that tools that look modules up
    (inspect, torch.compile) work; it has Model, get_inputs and get_init_inputs.
    """
    global _load_counter
    path = Path(path).resolve()
    source = path.read_text()
    tree = _rewrite(source, dict(overrides or {}), str(path))
    _load_counter += 1
    name = f"_kernelbench_task_{re.sub(r'[^0-9a-zA-Z_]', '_', path.stem)}_{_load_counter}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    try:
        exec(compile(tree, str(path), "exec"), module.__dict__)
    except Exception as exc:
        del sys.modules[name]
        raise KernelBenchError(f"task {path} failed to load: {type(exc).__name__}: {exc}",
                               fix="check that the task file runs with this torch version") \
            from exc
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            del sys.modules[name]
            raise KernelBenchError(f"task {path} defines no `{attr}`",
                                   fix="a KernelBench task defines Model, get_inputs and "
                                       "get_init_inputs")
    return module
