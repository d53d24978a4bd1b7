"""Packaging as a newcomer meets it (issue 19, items 5-7): pyproject's metadata, the pinned
lock file agreeing with the declared dependencies, CI running exactly the README's two
commands, and the README saying what a GPU user, a test runner and a checkout named `argus`
need to know."""

import re
import sys

from tests.conftest import ROOT

try:
    import tomllib
except ImportError:                     # Python 3.10
    import tomli as tomllib

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
README = (ROOT / "README.md").read_text()


def _name(requirement: str) -> str:
    return re.split(r"[<>=;\[ !~]", requirement.strip(), maxsplit=1)[0].lower()


def test_classifiers_name_every_supported_python():
    classifiers = PROJECT["classifiers"]
    assert "License :: OSI Approved :: Apache Software License" in classifiers
    assert "Environment :: GPU :: NVIDIA CUDA" in classifiers
    floor = int(PROJECT["requires-python"].removeprefix(">=3."))
    for minor in range(floor, 12):
        assert f"Programming Language :: Python :: 3.{minor}" in classifiers, minor
    assert PROJECT["keywords"]


def test_declared_dependencies_are_pinned_in_the_lock_file():
    lock = [line for line in (ROOT / "requirements-lock.txt").read_text().splitlines()
            if line.strip() and not line.startswith("#")]
    pinned = {_name(line): line for line in lock}
    for req in PROJECT["dependencies"]:
        assert _name(req) in pinned, f"{req} is declared but not pinned"
        assert "==" in pinned[_name(req)], pinned[_name(req)]
    # tomli only where the standard library lacks tomllib, in both files
    assert "python_version < '3.11'" in next(r for r in PROJECT["dependencies"]
                                             if _name(r) == "tomli")
    assert 'python_version < "3.11"' in pinned["tomli"]
    for library in ("matplotlib", "rich"):
        __import__(library)             # installed by the README's command
    if sys.version_info < (3, 11):
        __import__("tomli")


def test_ci_runs_the_readmes_two_commands():
    commands = re.search(r"```bash\n(.*?)```", README, flags=re.S).group(1).split("\n")
    ci = (ROOT / ".ci" / "run").read_text()
    for command in filter(None, commands):
        assert command in ci, command


def test_readme_says_what_a_newcomer_needs():
    assert re.search(r"test suite: about \d+ minutes on a 2-core machine", README), \
        "the README must say how long the test suite takes"
    for phrase in ('pytest -m "gpu and not slow"', "--system-site-packages",
                   "namespace package", "docs/dsl.md", "--debug"):
        assert phrase in README, phrase
