"""Every seeded bug of tests/mutations in one list, and what its finding says (issue 13,
"Verifier 2", deliverable 5: each bug caught with thread and root-cause line).

`seeded()` enumerates the bugs of the structured corpora (a bug = a kernel builder, the codes
meant to catch it and, for a DSL mutation, the `# BUG:<name>` line in its kernel file):

  * corpus.py's CORPUS (kernels.py's DSL mutations and the lowered-IR field rewrites),
  * moe_mutations.py's MOE_CORPUS, the library attention and decode MUTATIONS,
  * the held-out probes (heldout_kernels.py, probe3/probe4_kernels.py), verifier2_kernels.py,
    pipe_coop_kernels.py, the thread-guard and window-store kernels, and the compose-template
    bugs (compose_kernels.py: BUGS, caught, and GAPS, not caught yet).

`audit(bug)` verifies the kernel once and answers, for the best finding of an expected code:
caught (an *error*, not a warning or unknown), names a thread (the witness has a `thread`
entry), names the warpgroup or role where the kernel has roles, and names the `# BUG:` line
(in its location or its witness). Lowered-IR rewrites have no `# BUG:` line: the op the rewrite
changed has the line of the DSL statement it lowered, which is where the finding points.

The remaining seeded bugs are written inline in their test functions (monkeypatched conv
helpers, sync rewrites of the FA3 loop, divisor and exchange probes); each of those tests
asserts its own finding and they are counted in docs/verify.md's audit section, not here.

Run `python -m tests.mutations.audit` for the table (corpus, count, caught, names thread,
names BUG line). Each bug listed here is asserted by its own corpus's test (test_corpus.py,
test_moe_mutations.py, the attention tests, seeded.assert_caught for the marked-kernel files):
an error of an expected code naming the thread (and warpgroup or role) and the `# BUG:` line;
tests/mutations/test_audit.py asserts that every `# BUG:` marker of the kernel files is a bug
listed here, so a bug added without its test fails.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from argus import verify
from argus.ir.core import Kernel
from tests.mutations import seeded as S


@dataclass(frozen=True)
class Seeded:
    corpus: str                      # the file the bug's kernel (and marker) lives in
    name: str
    family: str                      # gemm / attention / moe / reduction / elementwise /
                                     # compose
    build: Callable[[], Kernel]
    codes: tuple[str, ...]
    file: Path | None = None         # the file holding `# BUG:<marker>`
    marker: str | None = None


@dataclass(frozen=True)
class Audit:
    bug: Seeded
    caught: bool                     # an error of an expected code
    thread: bool                     # ... whose witness names a thread
    role: bool | None                # ... and its warpgroup or role (None: no roles)
    line: bool | None                # ... and the `# BUG:` line (None: no marker)
    best: object = None              # that diagnostic (for the failure message)

    @property
    def ok(self) -> bool:
        return self.caught and self.thread and self.role is not False and \
            self.line is not False


def marker_lines(file: Path, marker: str) -> list[int]:
    return S.bug_lines(file, marker)


def audit(bug: Seeded) -> Audit:
    kernel = bug.build()
    roles = S.has_roles(kernel)
    errors = [d for d in verify.check(kernel) if d.severity == "error" and d.code in bug.codes]
    lines = marker_lines(bug.file, bug.marker) if bug.marker else []
    if bug.marker:
        assert lines, f"{bug.name}: no line of {bug.file.name} is marked BUG:{bug.marker}"

    def at_line(d) -> bool:
        text = str(d) + str(d.loc)
        return any(f"{bug.file.name}:{n}" in text for n in lines)

    def thread(d) -> bool:
        return "thread" in d.counterexample

    def role(d) -> bool:
        return "warpgroup" in d.counterexample or "role" in d.counterexample

    def score(d) -> tuple:
        return (S.names_thread(d, kernel), not lines or at_line(d), thread(d))

    best = max(errors, key=score, default=None)
    if best is None:
        return Audit(bug, False, False, None if not roles else False,
                     None if not lines else False)
    return Audit(bug, True, thread(best), role(best) if roles else None,
                 at_line(best) if lines else None, best)


# ----------------------------------------------------------------------------- enumeration


def _family(name: str) -> str:
    """A probe bug's family, read from its kernel builder's name."""
    n = name.lower()
    if "moe" in n or "expert" in n or "combine" in n:
        return "moe"
    if any(w in n for w in ("attn", "fa_", "attention", "decode")):
        return "attention"
    if any(w in n for w in ("gemm", "ring", "pingpong", "cluster", "consumers", "coop",
                            "split_k", "persistent", "handoff", "set_turn", "set_staging",
                            "head_halves", "scale_fixed", "turns")):
        return "gemm"
    if any(w in n for w in ("softmax", "lse", "sum", "mean", "min", "max", "rms", "norm",
                            "splitk_reduce", "pool", "conv1d", "reduce", "var", "row",
                            "col", "window")):
        return "reduction"
    return "elementwise"


def _from_mutations(corpus: str, mutations, file: Path) -> list[Seeded]:
    return [Seeded(corpus, m.name, m.family, m.build, tuple(m.codes),
                   file if m.marker else None, m.marker) for m in mutations]


def _from_bugs(corpus: str, bugs, file: Path) -> list[Seeded]:
    out = []
    for entry in bugs:
        factory, bug, codes = entry if len(entry) == 3 else (*entry, None)
        fname = getattr(factory, "__name__", "")
        if fname == "<lambda>":     # `lambda bug: P.make_x(bug, ...)`: the builder it calls
            fname = " ".join(factory.__code__.co_names)
        out.append(Seeded(corpus, f"{fname.split()[-1] if fname else ''}/{bug}",
                          _family(fname + " " + bug),
                          (lambda f=factory, b=bug: f(b).trace()), tuple(codes), file, bug))
    return out


def seeded() -> list[Seeded]:
    from argus.compiler import lower_only
    from tests.mutations import (compose_kernels, corpus, heldout_kernels, moe_mutations,
                                 pipe_coop_kernels, probe3_kernels, probe4_kernels,
                                 test_attention_decode, test_attention_library,
                                 test_heldout_style, test_pipe_coop, test_probe3, test_probe4,
                                 test_thread_guard_mutations, test_verifier2_classes,
                                 test_window_store_coords, verifier2_kernels)

    out = _from_mutations("kernels.py", corpus.CORPUS, corpus.KERNELS_FILE)
    out += _from_mutations("moe_mutations.py", moe_mutations.MOE_CORPUS,
                           Path(moe_mutations.__file__))
    out += _from_mutations("attention (library)", test_attention_library.MUTATIONS, None)
    out += _from_mutations("attention (decode)", test_attention_decode.MUTATIONS, None)
    out += _from_bugs("heldout_kernels.py", test_heldout_style.BUGS,
                      Path(heldout_kernels.__file__))
    out += _from_bugs("probe3_kernels.py", test_probe3.BUGS, Path(probe3_kernels.__file__))
    out += _from_bugs("probe4_kernels.py", test_probe4.BUGS, Path(probe4_kernels.__file__))
    out += _from_bugs("verifier2_kernels.py", test_verifier2_classes.BUGS,
                      Path(verifier2_kernels.__file__))
    out += _from_bugs("pipe_coop_kernels.py",
                      [(f, b, ("pipe.totals",)) for f, b in test_pipe_coop.BUGS]
                      + test_pipe_coop.SET_BUGS, Path(pipe_coop_kernels.__file__))
    guard = test_thread_guard_mutations
    out += [Seeded("test_thread_guard_mutations.py", f"thread_guarded/{b}", "elementwise",
                   (lambda b=b: lower_only(guard._factory(b)(b))),
                   ("store.coverage",), Path(guard.__file__), b) for b in guard.BUGS]
    window = test_window_store_coords
    out += [Seeded("test_window_store_coords.py", f"window_sum/{b}", "reduction",
                   (lambda b=b: window.make_conv1d_same(b).trace()), ("store.coords",),
                   Path(window.__file__), b) for b in ("reversed", "cta_shift")]
    # the templates' bugs, caught or not yet (GAPS: strict xfails in test_compose_mutations)
    out += [Seeded("compose_kernels.py", f"{f.__name__}/{b}", "compose",
                   (lambda f=f, b=b: f(b).trace()), codes, Path(compose_kernels.__file__), b)
            for f, b, codes, *_ in compose_kernels.BUGS + compose_kernels.GAPS]
    return out


def table(rows: list[Audit]) -> str:
    by: dict[str, list[Audit]] = {}
    for r in rows:
        by.setdefault(r.bug.corpus, []).append(r)
    out = ["| corpus | seeded bugs | caught (error) | names thread | names warpgroup/role "
           "(kernels with roles) | names `# BUG:` line (bugs with one) |",
           "|---|---|---|---|---|---|"]

    def frac(rs, attr):
        have = [getattr(r, attr) for r in rs if getattr(r, attr) is not None]
        return f"{sum(have)}/{len(have)}" if have else "—"
    for corpus, rs in [*by.items(), ("**all**", rows)]:
        out.append(f"| {corpus} | {len(rs)} | {sum(r.caught for r in rs)} | "
                   f"{sum(r.thread for r in rs)} | {frac(rs, 'role')} | {frac(rs, 'line')} |")
    fam: dict[str, int] = {}
    for r in rows:
        fam[r.bug.family] = fam.get(r.bug.family, 0) + 1
    out.append("")
    out.append("by class: " + ", ".join(f"{k} {v}" for k, v in sorted(fam.items())))
    return "\n".join(out)


def main() -> int:
    rows = []
    for bug in seeded():
        r = audit(bug)
        rows.append(r)
        if not r.ok:
            print(f"MISS {bug.corpus} {bug.name}: caught={r.caught} thread={r.thread} "
                  f"role={r.role} line={r.line}", file=sys.stderr)
            if r.best is not None:
                print("   ", str(r.best)[:400].replace("\n", "\n    "), file=sys.stderr)
                print("    witness keys:", sorted(r.best.counterexample), file=sys.stderr)
    print(table(rows))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
