"""The GPU tier's tests run only on a device, so a name they import inside a test body from
another test module or from argus (imported lazily to keep collection light) can go stale
unseen on the CPU: tests/gpu/test_store_shared_swizzled_gpu.py imported `shifted_mm` for
weeks after it was renamed, found only on the device. Every `from X import names` anywhere in
tests/gpu must name attributes that exist."""

import ast
import importlib
from pathlib import Path

import pytest

pytest.importorskip("torch")

GPU_TESTS = Path(__file__).resolve().parents[1] / "gpu"


def _lazy_imports():
    for path in sorted(GPU_TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                    node.module.split(".")[0] in ("argus", "tests"):
                yield path.name, node.lineno, node.module, [a.name for a in node.names]


def test_every_name_a_gpu_test_imports_exists():
    missing, seen = [], 0
    for file, line, module, names in _lazy_imports():
        mod = importlib.import_module(module)
        for name in names:
            seen += 1
            if name != "*" and not hasattr(mod, name):
                try:                               # a submodule: `from argus.ops import conv`
                    importlib.import_module(f"{module}.{name}")
                except ImportError:
                    missing.append(f"tests/gpu/{file}:{line}: {module} has no {name!r}")
    assert seen > 50, f"only {seen} imported names found: is the walk broken?"
    assert not missing, "\n".join(missing)
