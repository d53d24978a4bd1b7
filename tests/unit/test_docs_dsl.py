"""docs/dsl.md is the DSL reference (issue 19, item 1): it names every public `ag.*` name in a
section heading, mentions every parameter of every public function in that name's section,
uses every name in a snippet, and every snippet runs (in the numpy interpreter, no GPU).

When you add a public name to argus/__init__.py, give it a `### \\`ag.NAME\\`` section in
docs/dsl.md with its signature, what it means and a runnable snippet.
"""

from __future__ import annotations

import inspect
import re

import pytest

import argus as ag
from tests.conftest import ROOT

DOC = ROOT / "docs" / "dsl.md"


def public_names() -> list[str]:
    names = set(getattr(ag, "__all__", ())) | {n for n in dir(ag) if not n.startswith("_")}
    # submodules that `import argus` happens to load are not part of the DSL
    return sorted(n for n in names if not inspect.ismodule(getattr(ag, n, None)))


def sections(text: str) -> dict[str, str]:
    """`ag.NAME` -> the text of the section whose heading names it (up to the next heading)."""
    out: dict[str, str] = {}
    parts = re.split(r"^(#{2,4} .*)$", text, flags=re.M)
    for heading, body in zip(parts[1::2], parts[2::2]):
        for name in re.findall(r"`ag\.(\w+)", heading):
            out[name] = out.get(name, "") + heading + body
    return out


def snippets(text: str) -> list[tuple[int, str]]:
    """(line number, code) of every ```python block."""
    out = []
    for m in re.finditer(r"^```python\n(.*?)^```", text, flags=re.M | re.S):
        out.append((text[:m.start()].count("\n") + 2, m.group(1)))
    return out


TEXT = DOC.read_text()
SNIPPETS = snippets(TEXT)


def test_every_public_name_has_a_section():
    documented = sections(TEXT)
    missing = [n for n in public_names() if n not in documented]
    assert not missing, (
        f"docs/dsl.md has no section for ag.{', ag.'.join(missing)}: add a heading "
        f"'### `ag.NAME`' with its signature, semantics and a runnable ```python snippet")


def test_every_parameter_is_mentioned_in_its_section():
    documented = sections(TEXT)
    gaps = []
    for name in public_names():
        obj = getattr(ag, name)
        if name not in documented or not callable(obj) or inspect.isclass(obj) and \
                issubclass(obj, BaseException):
            continue
        try:
            params = inspect.signature(obj).parameters
        except (TypeError, ValueError):
            continue
        for p in params:
            if p not in ("self", "args", "kwargs") and p not in documented[name]:
                gaps.append(f"ag.{name}({p})")
    assert not gaps, f"docs/dsl.md does not mention these parameters: {', '.join(gaps)}"


def test_every_public_name_is_used_in_a_snippet():
    code = "\n".join(c for _, c in SNIPPETS)
    unused = [n for n in public_names() if not re.search(rf"\bag\.{n}\b", code)]
    assert not unused, f"no docs/dsl.md snippet uses ag.{', ag.'.join(unused)}"


@pytest.mark.parametrize("line,code", SNIPPETS, ids=[f"dsl.md:{n}" for n, _ in SNIPPETS])
def test_snippet_runs(line, code, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / f"dsl_md_line_{line}.py"
    path.write_text(code)                    # a real file: tracing reports real line numbers
    namespace = {"__name__": f"dsl_md_line_{line}", "__file__": str(path)}
    exec(compile(code, str(path), "exec"), namespace)


def test_the_readme_softmax_is_right_for_rows_longer_than_its_block():
    """Issue 19 item 2: the README's kernel walks rows of any length."""
    import torch

    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```python\n(.*?)```", readme, flags=re.S).group(1)
    kernel_src = block.split("\nsoftmax(x_cuda")[0]
    namespace: dict = {}
    exec(compile(kernel_src, "README.md", "exec"), namespace)
    softmax = namespace["softmax"]
    for n in (100, 5000):
        x = torch.randn(3, n, generator=torch.Generator().manual_seed(n)) * 4
        y = torch.full_like(x, float("nan"))
        softmax.interpret(x, y)
        assert torch.allclose(y.double(), torch.softmax(x.double(), dim=1), atol=1e-6), n
