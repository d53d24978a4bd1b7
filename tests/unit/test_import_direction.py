"""Imports flow one way (ARCHITECTURE.md §2): dsl → ir → analysis → verify → lower → codegen →
runtime; layout/ and target/ are leaves. A module may not import a stage to its left... nor a
leaf import a stage. This test parses every import in the package and fails on a back edge."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "argus"
ORDER = ["dsl", "ir", "analysis", "verify", "lower", "codegen", "runtime"]
LEAVES = {"layout", "target"}


def _imports(path: Path):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("argus."):
            yield node.module.split(".")[1], node.lineno
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("argus."):
                    yield alias.name.split(".")[1], node.lineno


def test_no_backward_imports():
    problems = []
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG).parts
        if len(parts) < 2:
            continue
        here = parts[0]
        if parts[-1] == "cli.py":
            continue  # command-line entry points sit on top of every stage (ARCHITECTURE §2)
        for target, line in _imports(path):
            if here in LEAVES and target in ORDER:
                problems.append(f"{path.relative_to(PKG)}:{line} leaf {here} imports {target}")
            if here in ORDER and target in ORDER and ORDER.index(target) < ORDER.index(here):
                # the runtime interpreter executes IR, and the IR is what all stages share
                if target in ("ir",):
                    continue
                problems.append(f"{path.relative_to(PKG)}:{line} {here} imports {target}")
    assert not problems, "backward imports:\n" + "\n".join(problems)
