"""The `argus` command: demo, compile, run, bench, verify, prebuild, kernelbench, optimize.

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
    """FILE::KERNEL (or FILE, when the file has exactly one kernel) → (module, KernelFunction).

    Aliases count once: `KERNEL = gemm` beside `def gemm` is one kernel."""
    from argus.demo import load_example
    from argus.errors import ArgusError
    from argus.kernel_api import KernelFunction

    path, _, name = spec.partition("::")
    module = load_example(path)
    kernels = {k: v for k, v in vars(module).items() if isinstance(v, KernelFunction)}
    if name:
        if name not in kernels:
            raise ArgusError(f"{path} has no kernel {name!r}; it has "
                             f"{', '.join(sorted(kernels)) or 'none'}",
                             fix=f"name one of them as {path}::KERNEL")
        return module, kernels[name]
    distinct = {id(v): v for v in kernels.values()}
    if len(distinct) != 1:
        raise ArgusError(f"{path} has kernels {', '.join(sorted(kernels)) or 'none'}",
                         fix=f"name one as {path}::KERNEL")
    return module, next(iter(distinct.values()))


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

    module = load_example(args.example)
    if not gpu_available() and not args.interpret:
        print(f"argus {args.command}: no Hopper GPU found\n  fix: pass --interpret to run "
              f"{args.example} in the numpy interpreter", file=sys.stderr)
        return 2
    r = run_example(module, size=args.size, device="cpu" if args.interpret else "cuda",
                    bench=bench)
    print(format_table([r]))
    if bench and r.mode != "gpu":
        print("no timing: the interpreter's speed says nothing about the GPU's; "
              "`argus bench` times on a Hopper GPU only")
    if r.tflops:
        print(f"ours {r.tflops:.1f} TFLOP/s, baseline {r.baseline_tflops:.1f} TFLOP/s")
    return 0 if r.ok else 1


# -- argus prebuild ----------------------------------------------------------------------------
# `argus prebuild [--kind bf16:nk:tma ...] [--list]`: compile the kernels argus.ops.matmul's
# untuned path picks (argus/ops/prebuild.py) into ARGUS_CACHE_DIR, so a shape's first call
# skips the verifier and NVRTC. Needs NVRTC, not a GPU. --list prints them without compiling.

def _prebuild_kind(text: str):
    from argus.ops.prebuild import Kind

    parts = text.split(":")
    if len(parts) != 3 or parts[0] not in ("bf16", "f16") or parts[1] not in ("nk", "kn") \
            or parts[2] not in ("tma", "direct"):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not DTYPE:LAYOUT:EPILOGUE, e.g. bf16:nk:tma (dtype bf16 or f16, "
            f"layout nk for x @ W.T or kn for x @ W, epilogue tma or direct)")
    return Kind(parts[0], parts[0], parts[1], parts[2] == "tma")


def cmd_prebuild(args) -> int:
    from argus.ops.prebuild import COMMON_KINDS, common_schedules, prebuild_matmul

    kinds = tuple(args.kind) or COMMON_KINDS

    def name(kind) -> str:
        return f"{kind.in_dtype}:{kind.b_layout}:{'tma' if kind.tma_store_ok else 'direct'}"

    if args.list:
        for kind in kinds:
            for schedule in common_schedules(kind):
                print(f"{name(kind)}  {schedule}")
        return 0
    built = prebuild_matmul(kinds, progress=lambda row: print(
        f"{name(row.kind)}  {row.seconds:6.2f} s  {row.schedule}", flush=True))
    print(f"{len(built)} kernels in the cache (ARGUS_CACHE_DIR), "
          f"{sum(r.seconds for r in built):.1f} s")
    return 0


def _register_prebuild(subparsers) -> None:
    p = subparsers.add_parser("prebuild", help="compile the untuned matmul's kernels ahead of "
                                               "time into the cache (needs NVRTC, not a GPU)")
    p.add_argument("--kind", action="append", type=_prebuild_kind, default=[],
                   help="DTYPE:LAYOUT:EPILOGUE, e.g. bf16:nk:tma (repeatable; default: bf16 and "
                        "f16, both layouts, both epilogues)")
    p.add_argument("--list", action="store_true", help="print the kernels, compile nothing")
    p.set_defaults(func=cmd_prebuild)


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
    if not file.is_file() or file.suffix != ".py":
        raise SystemExit(f"argus verify: {path} is not a Python file"
                         if file.is_file() else f"argus verify: no such file {path}")
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
    if not args.no_lower and hasattr(kernel_fn, "lower"):
        # a kernel lowering rejects is a finding about the kernel (exit 1), reported like one
        from argus.errors import ArgusError, Diagnostic, Loc, TraceError
        try:
            kernel_fn = kernel_fn.lower()
        except TraceError:
            raise                                  # the DSL rejects it: exit 2
        except ArgusError as e:
            loc = getattr(e, "loc", None) or Loc.unknown()
            text = str(e).split("\n  fix:")[0].removeprefix(f"{loc}: ")
            d = Diagnostic("error", "lower", f"lowering rejects the kernel: {text}", loc,
                           getattr(kernel_fn, "name", ""), {"pass_error": type(e).__name__},
                           getattr(e, "fix", "") or "")
            if args.json:
                print(json.dumps([d.to_json()], indent=1))
            else:
                print(f"kernel {d.kernel}: lowering failed, nothing verified\n\nVIOLATED:")
                print("  " + str(d).replace("\n", "\n  "))
            return 1
    report = verify.run(kernel_fn, include_proven=True, timeout_ms=args.timeout_ms)
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


EXIT_STATUS = """exit status (every command):
  0    done: the kernels are correct, nothing is violated, a correct candidate was found
  1    it ran and the answer is no: a wrong result, a violated invariant, no correct candidate
  2    it cannot run as asked: a missing or non-Python file, a syntax error in it, no such
       kernel, a kernel the DSL rejects, a bad option, a GPU-only request without a GPU
  3    an internal error in Argus: rerun with --debug and report the traceback
  130  interrupted (Ctrl-C)
errors print one line (what, where) and a fix; --debug prints the traceback as well."""

EXIT_OK, EXIT_NO, EXIT_USAGE, EXIT_INTERNAL, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def run_command(func, args, *, verb: str, debug: bool = False) -> int:
    """Run one command; turn an exception into one line on stderr and an exit status.

    With `debug` the exception propagates (the traceback). A closed pipe (`| head`) ends the
    command quietly."""
    try:
        return int(func(args) or 0)
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_OK
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"argus {verb}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except SystemExit as exc:            # raise SystemExit("message") inside a command
        if debug or not isinstance(exc.code, str):
            raise
        print(exc.code, file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:  # noqa: BLE001 - every error becomes one line and a status
        if debug:
            raise
        status, text = describe_error(exc)
        try:
            print(f"argus {verb}: {text}", file=sys.stderr)
        except BrokenPipeError:
            pass
        return status


def describe_error(exc: BaseException) -> tuple[int, str]:
    """(exit status, one line + fix) for an exception escaping a command.

    Argus errors, syntax errors and missing files are the user's to fix (status 2). Anything
    else is placed at the deepest frame outside the standard library and installed packages:
    in the user's file it is the user's to fix (2), in Argus it is a bug (3)."""
    from argus.errors import ArgusError

    if isinstance(exc, ArgusError):
        return EXIT_USAGE, str(exc)
    if isinstance(exc, SyntaxError):
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else "<unknown>"
        return EXIT_USAGE, (f"syntax error in {where}: {exc.msg}\n  fix: correct that line "
                            f"(`python -m py_compile {exc.filename}` shows the same error)")
    if isinstance(exc, (FileNotFoundError, IsADirectoryError, NotADirectoryError,
                        PermissionError)):
        return EXIT_USAGE, _with_fix(str(exc), "check the path (examples/ lists the examples)")
    if isinstance(exc, ValueError) and _raised_by_argus(exc):   # Argus checking an input
        return EXIT_USAGE, _with_fix(str(exc), "see `argus COMMAND --help` and docs/dsl.md")
    frame = _deepest_own_frame(exc)
    kind = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
    if frame is None or _in_argus(frame.filename):
        where = f" (at {_short(frame.filename)}:{frame.lineno})" if frame else ""
        return EXIT_INTERNAL, (f"internal error: {kind}{where}\n  fix: rerun with --debug "
                               f"for the traceback and report it")
    return EXIT_USAGE, (f"{kind} (raised at {frame.filename}:{frame.lineno} in "
                        f"{frame.name})\n  fix: correct that code; --debug shows the traceback")


def _with_fix(text: str, fix: str) -> str:
    return text if "fix:" in text else f"{text}\n  fix: {fix}"


_ARGUS_DIR = Path(__file__).resolve().parent


def _in_argus(filename: str) -> bool:
    return Path(filename).resolve().is_relative_to(_ARGUS_DIR)


def _short(filename: str) -> str:
    path = Path(filename).resolve()
    return str(path.relative_to(_ARGUS_DIR.parent)) if _in_argus(filename) else filename


def _deepest_own_frame(exc: BaseException):
    """The innermost traceback frame in Argus or in the user's code (not the standard library
    nor an installed package)."""
    import sysconfig
    import traceback

    libraries = {str(Path(sysconfig.get_paths()[k]).resolve())
                 for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    own = [f for f in traceback.extract_tb(exc.__traceback__)
           if not f.filename.startswith("<")
           and not any(str(Path(f.filename).resolve()).startswith(lib) for lib in libraries)]
    return own[-1] if own else None


def _raised_by_argus(exc: BaseException) -> bool:
    """True when Argus's own code raised it (a `raise` statement checking an input), not a
    library that Argus called."""
    import traceback

    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and _in_argus(frames[-1].filename)


def _silence_stdout() -> None:
    """After `| head` closed the pipe: point stdout at /dev/null so that the interpreter's
    final flush does not raise again (the recipe of the Python signal module's docs)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def main(argv: list[str] | None = None) -> int:
    from argus import __version__

    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv                 # accepted anywhere: `argus run x --debug` too
    argv = [a for a in argv if a != "--debug"]
    parser = argparse.ArgumentParser(prog="argus", description=__doc__, epilog=EXIT_STATUS,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"argus {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show the Python traceback of an error (anywhere on the line)")
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
    _register_prebuild(sub)
    for module_name in ("argus.bench.kernelbench.cli", "argus.agent.cli"):
        try:
            module = __import__(module_name, fromlist=["register"])
        except ImportError:
            continue
        if hasattr(module, "register"):
            module.register(sub)

    args = parser.parse_args(argv)
    return run_command(args.func, args, verb=args.command, debug=debug)


if __name__ == "__main__":
    sys.exit(main())
