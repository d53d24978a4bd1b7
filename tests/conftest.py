"""Shared test helpers: the examples directory on sys.path and a loader for example modules."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


@pytest.fixture(scope="session")
def examples():
    """Load an example module by name (examples/<name>.py)."""
    from argus.demo import load_example

    return load_example


def pytest_configure(config):
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
