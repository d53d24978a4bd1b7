"""The `argus` command: demo, compile, run, bench, verify, kernelbench, optimize.

Commands that need the whole pipeline (compile, verify) are defined here, on top of every
stage, so that no stage imports the compiler or the dsl to serve a command line (ARCHITECTURE.md
§2). The kernelbench and optimize commands register themselves from their own packages.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path


def _load_kernel(spec: str):
    """FILE::KERNEL (or FILE, when the file has exactly one kernel) → (module, KernelFunction)."""
    from argus.demo import load_example
    from argus.kernel_api import KernelFunction

    path, _, name = spec.partition("::")
    module = load_example(path)
    kernels = {k: v for k, v in vars(module).items() if isinstance(v, KernelFunction)}
    if name:
        if name not in kernels:
            raise SystemExit(f"argus: {path} has no kernel {name!r}; it has "
                             f"{', '.join(kernels) or 'none'}")
        return module, kernels[name]
    if len(kernels) != 1:
        raise SystemExit(f"argus: {path} has kernels {', '.join(kernels) or 'none'}; name one "
                         f"as {path}::KERNEL")
    return module, next(iter(kernels.values()))


def cmd_compile(args) -> int:
    from argus.compiler import compile_kernel

    module, kernel_fn = _load_kernel(args.target)
    compiled = compile_kernel(kernel_fn, dump=args.dump, verify=False if args.no_verify else None)
    print(compiled.resources.summary())
    if args.dump:
        print(f"wrote the IR after every step, CUDA, PTX, cubin and resources to {args.dump}")
    return 0


def cmd_run(args, bench: bool = False) -> int:
    from argus.demo import format_table, gpu_available, load_example, run_example

    if not gpu_available() and not args.interpret:
        print("argus: no Hopper GPU found; pass --interpret to run in the numpy interpreter",
              file=sys.stderr)
        return 2
    module = load_example(args.example)
    r = run_example(module, size=args.size, device="cpu" if args.interpret else "cuda",
                    bench=bench)
    print(format_table([r]))
    if r.tflops:
        print(f"ours {r.tflops:.1f} TFLOP/s, baseline {r.baseline_tflops:.1f} TFLOP/s")
    return 0 if r.ok else 1


# -- argus verify ------------------------------------------------------------------------------
# `argus verify FILE[::KERNEL]`: the command-line face of `argus.verify.run`. Loads a Python
# file, finds the kernel (a KernelFunction, by name after `::`, or the only one in the file),
# traces it with its default compile-time values, lowers it (unless --no-lower), and prints the
# proven invariants, the unknowns and the counterexamples. Exit status: 0 when nothing is
# violated, 1 on a violation, 2 when the file or kernel cannot be loaded. `--json` prints the
# diagnostics as JSON (the structured form the agent consumes).

def _register_verify(subparsers) -> None:
    p = subparsers.add_parser("verify", help="prove a kernel's data-flow invariants "
                                             "(prints proofs, unknowns, counterexamples)")
    p.add_argument("target", help="path/to/file.py[::kernel_name]")
    p.add_argument("--no-lower", action="store_true",
                   help="verify the traced kernel only (skip the lowering-level invariants)")
    p.add_argument("--timeout-ms", type=int, default=None,
                   help="per-query solver budget (default 1000; ARGUS_VERIFY_TIMEOUT_MS)")
    p.add_argument("--json", action="store_true", help="print diagnostics as JSON")
    p.add_argument("--quiet", action="store_true", help="do not list proven invariants")
    p.set_defaults(func=cmd_verify)


def _load_verify_target(spec: str):
    from argus.kernel_api import KernelFunction

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


def cmd_verify(args) -> int:
    from argus import verify

    try:
        kernel_fn = _load_verify_target(args.target)
    except SystemExit as e:
        print(e, file=sys.stderr)
        return 2
    report = verify.run(kernel_fn, lower=not args.no_lower, include_proven=True,
                        timeout_ms=args.timeout_ms)
    if args.json:
        print(json.dumps([d.to_json() for d in report.diagnostics], indent=1))
    else:
        _print_verify_report(report, quiet=args.quiet)
    return 1 if report.errors else 0


def _print_verify_report(report, quiet: bool = False) -> None:
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="argus", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="trace, verify, compile and run the example kernels")
    p.add_argument("--size", default="small", choices=("small", "large"))
    p.add_argument("--bench", action="store_true", help="also time them (GPU only)")
    p.set_defaults(func=lambda a: __import__("argus.demo").demo.main(size=a.size, bench=a.bench))

    p = sub.add_parser("compile", help="compile FILE::KERNEL and dump every step")
    p.add_argument("target", help="path/to/file.py::kernel_name")
    p.add_argument("--dump", type=Path, help="directory for IR, CUDA, PTX, cubin, resources")
    p.add_argument("--no-verify", action="store_true")
    p.set_defaults(func=cmd_compile)

    for name, bench in (("run", False), ("bench", True)):
        p = sub.add_parser(name, help=f"{name} an example on the GPU: correctness"
                                      + (" and time vs its PyTorch baseline" if bench else ""))
        p.add_argument("example", help="example name (gemm, softmax, elementwise) or file")
        p.add_argument("--size", default="large" if bench else "small",
                       choices=("small", "large"))
        p.add_argument("--interpret", action="store_true", help="run in the interpreter")
        p.set_defaults(func=lambda a, bench=bench: cmd_run(a, bench))

    _register_verify(sub)
    for module_name in ("argus.bench.kernelbench.cli", "argus.agent.cli"):
        try:
            module = __import__(module_name, fromlist=["register"])
        except ImportError:
            continue
        if hasattr(module, "register"):
            module.register(sub)

    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
