"""Imports flow one way (ARCHITECTURE.md §2). This test reads every import of every module under
argus/ (module level, inside functions, under `if TYPE_CHECKING`, and in every cli.py alike)
and fails on an import that runs against the layering, or on an import circle.

The units are the top-level packages (`dsl`, `ops`, …) and the top-level modules (`compiler`,
`cli`, …) of argus/. From the bottom up:

1. utilities: config, errors, dtypes, schedule_space (legal ranges declared as data), numerics
   (numerical rules several layers apply alike), build_memo (the memo type of the caches of
   built kernels, keyed on config's build choices). Anyone may import them; they import only
   each other.
2. leaves, in this order: layout, target. A leaf imports utilities and the leaves before it
   (target uses layout), never a stage or anything above.
3. stages, in pipeline order: dsl, ir, analysis, verify, lower, codegen, runtime. Any stage may
   import ir (the IR is what the stages share; the interpreter in runtime executes it), the
   leaves and the utilities. ir imports no other stage. dsl imports no stage but ir: it only
   traces. No stage imports dsl: stages read IR, never the tracer. Past those two, a stage may
   import the stages before it (it consumes what they produce), never one after it.
4. top-level modules: compiler, compiled, kernel_api, demo and the package's __init__ (the
   public API `import argus as ag`). They may import every stage, leaf and utility and each
   other, nothing of the library above them.
5. the library, in this order: kernels, ops, compose, bench, agent. Each imports everything
   below it and the library packages before it: kernels never import ops, compose, bench or
   agent; ops never import compose, bench or agent (the agent writes the tuning cache through
   an ops API; ops and the bench share the timer that lives in runtime/).
6. the `argus` command: cli and __main__ may import anything. A cli.py inside a package is an
   ordinary module of that package and keeps its package's rules.

Importing `argus.x.y` also runs argus/__init__.py; such implied parent imports are not edges
here (otherwise everything would import the public API). A new top-level package or module
must be placed in one of the lists below before this test passes.

Circles: no module may reach itself through imports (any kind above), inside a package too; a
function-level import that only hides a circle is still a circle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "argus"

UTILITIES = ["config", "errors", "dtypes", "schedule_space", "numerics", "build_memo"]
LEAVES = ["layout", "target"]
STAGES = ["dsl", "ir", "analysis", "verify", "lower", "codegen", "runtime"]
TOP_MODULES = ["__init__", "compiler", "compiled", "kernel_api", "demo"]
LIBRARY = ["kernels", "ops", "compose", "bench", "agent"]
ENTRY = ["cli", "__main__"]


def allowed(here: str, there: str) -> str | None:
    """None when unit `here` may import unit `there`, else the rule it breaks (in words)."""
    if here == there or there in UTILITIES:
        return None
    if here in UTILITIES:
        return "utilities import only utilities"
    if here in LEAVES:
        if there in LEAVES and LEAVES.index(there) < LEAVES.index(here):
            return None
        return f"a leaf imports only utilities and the leaves before it ({', '.join(LEAVES)})"
    if here in STAGES:
        if there in LEAVES or there == "ir":
            return None
        if there not in STAGES:
            return "a stage imports only stages, leaves and utilities (compile/run sit on top)"
        if here == "ir":
            return "ir imports no stage"
        if here == "dsl":
            return "dsl imports no stage but ir (it only traces)"
        if there == "dsl":
            return "no stage imports dsl (stages read IR)"
        if STAGES.index(there) > STAGES.index(here):
            return f"a stage imports only the stages before it ({' -> '.join(STAGES)})"
        return None
    if here in TOP_MODULES:
        if there in LEAVES or there in STAGES or there in TOP_MODULES:
            return None
        return "top-level modules import nothing of the library or the command above them"
    if here in LIBRARY:
        if there in LEAVES or there in STAGES or there in TOP_MODULES:
            return None
        if there in LIBRARY and LIBRARY.index(there) < LIBRARY.index(here):
            return None
        return f"the library imports only the packages before it ({' -> '.join(LIBRARY)})"
    if here in ENTRY:
        return None
    return f"unit {here} is not placed in the layering; add it to a list in this test"


def module_name(rel: Path) -> str:
    """argus/ops/tune.py -> argus.ops.tune; argus/ops/__init__.py -> argus.ops."""
    parts = ("argus",) + rel.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, module: str, is_package: bool, known: set[str]):
    """(imported argus module, line) for every import in `source`, wherever it stands. A name
    taken `from` a package is that package's submodule when one exists, else the package."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([node.module] if node.module else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if sub in known else base), node.lineno


def unit_of(module: str) -> str:
    """argus.ops.tune -> ops; argus.compiler -> compiler; argus -> __init__."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def graph(files: dict[Path, str]) -> dict[str, list[tuple[str, int]]]:
    """Module -> [(imported argus module, line)] for sources keyed by path relative to argus/."""
    names = {module_name(rel): rel for rel in files}
    out: dict[str, list[tuple[str, int]]] = {}
    for name, rel in names.items():
        edges = []
        for target, line in imported_modules(files[rel], name, rel.name == "__init__.py",
                                             set(names)):
            if target == "argus" or target.startswith("argus."):
                while target not in names and "." in target:  # argus.x.Name -> argus.x
                    target = target.rpartition(".")[0]
                edges.append((target, line))
        out[name] = edges
    return out


def back_edges(files: dict[Path, str]) -> list[str]:
    """Every import that breaks the layering, as `path:line here -> there: rule`."""
    problems = []
    for name, edges in graph(files).items():
        here = unit_of(name)
        for target, line in edges:
            why = allowed(here, unit_of(target))
            if why:
                problems.append(f"{name}:{line} imports {target} ({here} -> "
                                f"{unit_of(target)}): {why}")
    return sorted(problems)


def circles(files: dict[Path, str]) -> list[str]:
    """One line per import circle between modules (strongly connected components, Tarjan)."""
    g = {m: sorted({t for t, _ in edges if t != m}) for m, edges in graph(files).items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[str] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(" <-> ".join(sorted(component)))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(found)


def _package_files() -> dict[Path, str]:
    return {p.relative_to(PKG): p.read_text() for p in sorted(PKG.rglob("*.py"))}


def test_no_backward_imports():
    problems = back_edges(_package_files())
    assert not problems, ("imports against the layering (ARCHITECTURE.md §2; the rules are in "
                          "this test's docstring); fix: move the code that needs the import up "
                          "to a layer that may import it, or pass what it needs in as an "
                          "argument:\n" + "\n".join(problems))


def test_no_import_circles():
    found = circles(_package_files())
    assert not found, ("import circles (each line: modules that import each other, maybe "
                       "through others); fix: move what both need into a module below both:\n"
                       + "\n".join(found))


def test_the_check_can_fail():
    """Synthetic bad imports of every kind are reported; clean ones are not."""
    files = {
        Path("__init__.py"): "from argus.kernel_api import kernel\n",
        Path("errors.py"): "",
        Path("compiler.py"): "from argus import lower, errors\n",
        Path("kernel_api.py"): "def compile(self):\n    from argus import compiler\n",
        Path("dsl/__init__.py"): "",
        Path("dsl/kernel.py"): ("from argus.ir import ops\n"
                                "def compile(self):\n"
                                "    from argus.compiler import compile_kernel\n"),
        Path("ir/__init__.py"): "",
        Path("lower/__init__.py"): "from argus.ir import ops\n",
        Path("verify/__init__.py"): "",
        Path("verify/cli.py"): "from argus.dsl.kernel import KernelDef\n",
        Path("layout/__init__.py"): "import argus.runtime\n",
        Path("runtime/__init__.py"): "",
        Path("kernels/__init__.py"): "import argus as ag\n",
        Path("ops/__init__.py"): "from argus import kernels\n",
        Path("ops/a.py"): "from argus.ops import b\nfrom argus.agent.store import best\n",
        Path("ops/b.py"): "def f():\n    from argus.ops.a import g\n",
        Path("agent/__init__.py"): "",
        Path("agent/store.py"): "from argus.ops import a\nfrom argus.bench import timing\n",
        Path("bench/__init__.py"): "",
        Path("bench/timing.py"): "",
        Path("interp/__init__.py"): "",
    }
    problems = back_edges(files)
    expected = [
        "argus.dsl.kernel:3 imports argus.compiler (dsl -> compiler)",   # function-level
        "argus.verify.cli:1 imports argus.dsl.kernel (verify -> dsl)",   # a cli.py
        "argus.layout:1 imports argus.runtime (layout -> runtime)",
        "argus.ops.a:2 imports argus.agent.store (ops -> agent)",
    ]
    for line in expected:
        assert any(p.startswith(line) for p in problems), (line, problems)
    assert len(problems) == len(expected), problems      # nothing clean is reported
    assert allowed("interp", "ir") is not None            # an unplaced package fails too
    assert circles(files) == ["argus.agent.store <-> argus.ops.a <-> argus.ops.b"]
