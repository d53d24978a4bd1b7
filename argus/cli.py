"""The `argus` command: demo, compile, run, bench, verify, kernelbench."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def _load_kernel(spec: str):
    """FILE::KERNEL (or FILE, when the file has exactly one kernel) → (module, KernelFunction)."""
    from argus.demo import load_example
    from argus.dsl.kernel import KernelFunction

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

    for module_name in ("argus.verify.cli", "argus.bench.kernelbench.cli", "argus.agent.cli"):
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
