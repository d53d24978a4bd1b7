"""The seeded-bug list of tests/mutations/audit.py is complete: every `# BUG:<name>` marker in
the kernel files is a bug some corpus test verifies (each of those asserts an error of an
expected code naming the thread, its warpgroup or role, and the marked line), and the corpus
spans the classes of issue 13's deliverable 5. No kernel is verified here (the corpus tests
do that); the table itself: `python -m tests.mutations.audit`."""

from __future__ import annotations

import re
from pathlib import Path

from tests.mutations import audit

HERE = Path(audit.__file__).parent
KERNEL_FILES = ["kernels.py", "moe_mutations.py", "heldout_kernels.py", "probe3_kernels.py",
                "probe4_kernels.py", "verifier2_kernels.py", "pipe_coop_kernels.py",
                "compose_kernels.py", "test_thread_guard_mutations.py",
                "test_window_store_coords.py"]

# markers whose bug is tested apart from the list, with why
ELSEWHERE = {
    ("kernels.py", "missing_slice"):
        "a Python loop's bound, consumed while tracing: no IR line; test_corpus asks for the "
        "loads added and `unrolled_at` instead",
    ("kernels.py", "wgmma_after_consume"):
        "the DSL spelling is refused when traced; the corpus's lowered rewrite moves the "
        "wgmma one line up",
    ("heldout_kernels.py", "pv_v_is_k"):
        "a warning (smem.dead: V's buffer is never read), test_heldout_style",
    ("probe4_kernels.py", "reread_after_step"):
        "refused when traced (TraceError at the line), test_probe4",
}


def test_every_marked_bug_is_listed():
    listed = {(b.file.name, b.marker) for b in audit.seeded() if b.marker}
    missing = []
    for name in KERNEL_FILES:
        for marker in sorted(set(re.findall(r"BUG:(\w+)", (HERE / name).read_text()))):
            if (name, marker) not in listed and (name, marker) not in ELSEWHERE:
                missing.append(f"{name}: BUG:{marker}")
    assert not missing, ("seeded bugs no corpus test lists (add them to the file's BUGS / "
                         "CORPUS, or to ELSEWHERE with why): " + ", ".join(missing))
    stale = [k for k in ELSEWHERE if k in listed]
    assert not stale, f"listed now, drop from ELSEWHERE: {stale}"


def test_every_listed_marker_is_in_its_file():
    for b in audit.seeded():
        if b.marker:
            assert audit.marker_lines(b.file, b.marker), f"{b.name}: no BUG:{b.marker} line"


def test_corpus_size_and_classes():
    bugs = audit.seeded()
    assert len(bugs) >= 80
    assert len({(b.corpus, b.name) for b in bugs}) == len(bugs)
    assert {b.family for b in bugs} >= {"gemm", "attention", "moe", "reduction", "elementwise",
                                        "compose"}
