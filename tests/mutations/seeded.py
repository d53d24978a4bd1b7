"""The shared harness of the seeded-bug files whose bugs are marked `# BUG:<name>` in a kernel
module (test_heldout_style.py over heldout_kernels.py, test_verifier2_classes.py over
verifier2_kernels.py, test_probe3/4, test_pipe_coop, test_compose_mutations): a bug is caught
when verify.check reports an error of one of the expected codes that names a thread (and,
in a kernel with warp roles, the warpgroup or role: `names_thread`) and one of the bug's
marked lines (the line a fix edits); a correct variant is clean when it has no error, no
warning and no internal error. test_corpus.py and test_moe_mutations.py ask `names_thread`
of their findings too."""

from __future__ import annotations

import re
from pathlib import Path

from argus import verify
from argus.ir import ops as O


def bug_lines(file: Path, bug: str) -> list[int]:
    """The 1-based lines of `file` marked `# BUG:<bug>`."""
    text = file.read_text().splitlines()
    return [i + 1 for i, line in enumerate(text) if re.search(rf"BUG:{bug}\b", line)]


def line_of(file, text: str) -> int:
    """The 1-based line of `file` holding `text`, which must occur on exactly one line."""
    lines = [i + 1 for i, x in enumerate(Path(file).read_text().splitlines()) if text in x]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def has_roles(kernel) -> bool:
    """The kernel is warp-specialized (ag.role): a finding must say which role's warpgroup."""
    return any(isinstance(op, O.RoleOp) for op in kernel.walk())


def names_thread(d, kernel) -> bool:
    """`d`'s witness names the thread that runs the reported op (names.annotate adds it where
    a check's witness lacks it) and, in a kernel with roles, its warpgroup or role."""
    cx = d.counterexample
    return "thread" in cx and (not has_roles(kernel) or "warpgroup" in cx or "role" in cx)


def assert_caught(kernel, codes, file: Path, bug: str) -> list:
    """`kernel` (traced) has an error of one of `codes` that names a thread (and its
    warpgroup or role where the kernel has roles) and one of the lines of `file` marked for
    `bug`; returns those errors."""
    errors = [d for d in verify.check(kernel) if d.severity == "error"]
    hits = [d for d in errors if d.code in codes]
    assert hits, (bug, [(d.code, d.message[:120]) for d in errors])
    lines = bug_lines(file, bug)
    assert lines, f"no line of {file.name} is marked BUG:{bug}"
    placed = [d for d in hits
              if any(f"{file.name}:{n}" in str(d) + str(d.loc) for n in lines)
              and names_thread(d, kernel)]
    assert placed, (f"{bug}: no {codes} error names a thread (and warpgroup or role where "
                    f"the kernel has roles) and line(s) {lines}:\n"
                    + "\n".join(str(d) for d in hits))
    return placed


def assert_clean(kernel) -> None:
    """No error, no warning, and no invariant left unchecked by an internal error."""
    found = [d for d in verify.check(kernel)
             if d.severity in ("error", "warning") or "internal error" in d.message]
    assert not found, "\n".join(str(d) for d in found)
