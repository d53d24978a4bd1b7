"""`argus verify FILE[::KERNEL]`: prove a kernel's invariants and print the result.

Job: the command-line face of `argus.verify.run`. Loads a Python file, finds the kernel (a
KernelFunction, by name after `::`, or the only one in the file), traces it with its default
compile-time values, lowers it (unless --no-lower), and prints the proven invariants, the
unknowns and the counterexamples. Exit status: 0 when nothing is violated, 1 on a violation,
2 when the file or kernel cannot be loaded. `--json` prints the diagnostics as JSON (the
structured form the agent consumes).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser("verify", help="prove a kernel's data-flow invariants "
                                             "(prints proofs, unknowns, counterexamples)")
    p.add_argument("target", help="path/to/file.py[::kernel_name]")
    p.add_argument("--no-lower", action="store_true",
                   help="verify the traced kernel only (skip the lowering-level invariants)")
    p.add_argument("--timeout-ms", type=int, default=None,
                   help="per-query solver budget (default 1000; ARGUS_VERIFY_TIMEOUT_MS)")
    p.add_argument("--json", action="store_true", help="print diagnostics as JSON")
    p.add_argument("--quiet", action="store_true", help="do not list proven invariants")
    p.set_defaults(func=main)


def _load(spec: str):
    from argus.dsl.kernel import KernelFunction

    path, _, name = spec.partition("::")
    file = Path(path)
    if not file.exists():
        raise SystemExit(f"argus verify: no such file {path}")
    sys.path.insert(0, str(file.resolve().parent))
    mod_name = f"argus_verify_target_{abs(hash(str(file.resolve())))}"
    module_spec = importlib.util.spec_from_file_location(mod_name, file)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[mod_name] = module
    module_spec.loader.exec_module(module)
    kernels = {k: v for k, v in vars(module).items() if isinstance(v, KernelFunction)}
    if name:
        if name not in kernels:
            raise SystemExit(f"argus verify: {path} has no kernel {name!r}; it has "
                             f"{', '.join(sorted(kernels)) or 'none'}")
        return kernels[name]
    distinct = {id(v): v for v in kernels.values()}  # aliases (KERNEL = gemm) count once
    if len(distinct) == 1:
        return next(iter(distinct.values()))
    if len(distinct) != 1:
        raise SystemExit(f"argus verify: {path} defines kernels "
                         f"{', '.join(sorted(kernels)) or '(none)'}; name one as "
                         f"{path}::KERNEL")
    return next(iter(kernels.values()))


def main(args) -> int:
    from argus import verify

    try:
        kernel_fn = _load(args.target)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    report = verify.run(kernel_fn, lower=not args.no_lower, include_proven=True,
                        timeout_ms=args.timeout_ms)
    if args.json:
        print(json.dumps([d.to_json() for d in report.diagnostics], indent=1))
    else:
        _print(report, quiet=args.quiet)
    return 1 if report.errors else 0


def _print(report, quiet: bool = False) -> None:
    notes = [d for d in report.diagnostics if d.severity == "note"]
    unknown = report.unknowns
    warnings = [d for d in report.diagnostics if d.severity == "warning"]
    errors = report.errors
    print(f"kernel {report.kernel}: {len(notes)} invariants proven, {len(unknown)} unknown, "
          f"{len(warnings)} warnings, {len(errors)} violated "
          f"({report.seconds:.2f} s, {report.stats.queries} solver queries)")
    if not quiet and notes:
        print("\nproven:")
        for d in notes:
            print(f"  {d.loc}: {d.message.removeprefix('proven: ')}")
    for title, group in (("unknown (not proven)", unknown), ("warnings", warnings),
                         ("VIOLATED", errors)):
        if group:
            print(f"\n{title}:")
            for d in group:
                print("  " + str(d).replace("\n", "\n  "))


if __name__ == "__main__":  # python -m argus.verify.cli FILE::KERNEL
    parser = argparse.ArgumentParser(prog="argus")
    sub = parser.add_subparsers(dest="command", required=True)
    register(sub)
    ns = parser.parse_args(["verify", *sys.argv[1:]])
    sys.exit(ns.func(ns))
