#!/usr/bin/env python3
"""Write every library / conv kernel's verification verdicts as JSON (exactness checks of
verifier speed work: docs/verify.md, "Verifier speed: one query for a family of row-segment
steps").

For each kernel of scripts/verify_timings.py's set (`--set conv`, `library`: the library
schedules and the conv ones), verify.run once and record the proven and unknown counts and
every finding's code, location, subject, status and message (not its time or tier, which
vary with the load and the path a proof took). Two runs on two commits are compared with
`diff`; tests/verify/test_conv_findings_snapshot.py compares the conv set with the file
checked in. Usage: python scripts/verify_findings_snapshot.py --set conv [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def snapshot(kernel_set: str, only: tuple[str, ...] = ()) -> dict:
    """{kernel name: {"proven": n, "unknown": n, "findings": [[code, loc, subject, status,
    message], ...]}} for the set's kernels (those whose name contains a text of `only`, if
    given); a name listed twice keeps its first kernel."""
    import verify_timings as VT

    from argus import verify
    from argus.compiler import lower_only
    from argus.verify import solver

    makes = {"conv": [VT.conv], "library": [VT.library, VT.conv]}[kernel_set]
    out: dict = {}
    for make in makes:
        for name, kernel_fn, cx in make():
            if name in out or (only and not any(t in name for t in only)):
                continue
            solver.clear_cache()
            report = verify.run(lower_only(kernel_fn, **cx))
            out[name] = {
                "proven": len(report.proven), "unknown": len(report.unknowns),
                "findings": [[f.code, str(f.loc), f.subject, f.status, f.message]
                             for f in report.findings]}
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", choices=("conv", "library"), default="conv")
    ap.add_argument("--out", default="-")
    args = ap.parse_args()
    text = json.dumps(snapshot(args.set), indent=1, sort_keys=True) + "\n"
    if args.out == "-":
        sys.stdout.write(text)
    else:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
