"""The one device script: GPU tests, example correctness, GEMM speed vs cuBLAS, SASS checks,
and with --bench the bf16 GEMM sweep (scripts/gpu_gemm_bench.py) and the fp8 benchmark
(scripts/gpu_fp8_bench.py) as subprocesses.

Run on the H200 from the repo root (python3 scripts/gpu_run_all.py --out DIR [--bench]). It
prints a short table last and writes results.json and results.md into --out. Every number it
prints is measured in this run on this card: ours and the PyTorch baseline side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def log(msg: str) -> None:
    print(msg, flush=True)


def env_info() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda,
            "gpu": torch.cuda.get_device_name(), "capability": torch.cuda.get_device_capability(),
            "sms": torch.cuda.get_device_properties(0).multi_processor_count}
    try:
        info["commit"] = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT,
                                        capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        info["commit"] = "unknown"
    return info


def run_pytest(out: Path) -> dict:
    t = time.time()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu", "tests", "-x",
                           "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True,
                          timeout=240)
    (out / "pytest_gpu.log").write_text(proc.stdout + proc.stderr)
    tail = (proc.stdout.strip().splitlines() or ["(no output)"])[-1]
    log(f"pytest -m gpu: rc={proc.returncode} {tail} ({time.time() - t:.0f} s)")
    return {"rc": proc.returncode, "summary": tail}


def benchmarks(out: Path, quick: bool) -> dict:
    """The sweep scripts in subprocesses (each writes its own tables under out/); returns the
    summary line each prints (geomean and minimum ratio) or why it failed."""
    runs = {"bf16 GEMM sweep": ["scripts/gpu_gemm_bench.py", "--out", str(out / "gemm")]
            + (["--quick"] if quick else []),
            "fp8 GEMM": ["scripts/gpu_fp8_bench.py", "--out", str(out / "fp8")]}
    summaries = {}
    for name, argv in runs.items():
        t = time.time()
        try:
            proc = subprocess.run([sys.executable, *argv], cwd=ROOT, capture_output=True,
                                  text=True, timeout=900)
            text = proc.stdout + proc.stderr
            found = [line for line in text.splitlines() if "geomean" in line]
            summaries[name] = (found[-1].strip() if found and proc.returncode == 0
                               else f"rc={proc.returncode}: {text.strip().splitlines()[-1:]}")
        except subprocess.TimeoutExpired:
            summaries[name] = "timed out after 900 s"
        log(f"{name}: {summaries[name]} ({time.time() - t:.0f} s)")
    return summaries


def examples(out: Path) -> list[dict]:
    from argus.demo import load_example, run_example

    rows = []
    for name in ("elementwise", "softmax", "gemm"):
        for size in ("small", "large"):
            for seed in (1, 2):
                try:
                    r = run_example(load_example(name), size=size, seed=seed, device="cuda")
                    rows.append({"example": name, "size": size, "seed": seed, "shape": r.shape,
                                 "rel_error": r.rel_error, "ok": r.ok,
                                 "registers": r.registers, "spills": r.spills})
                    log(f"example {name} {size} seed {seed}: rel err {r.rel_error:.2e} "
                        f"{'ok' if r.ok else 'WRONG'}")
                except Exception as e:  # noqa: BLE001 - record and continue
                    traceback.print_exc()
                    rows.append({"example": name, "size": size, "seed": seed, "error": repr(e),
                                 "ok": False})
    return rows


def gemm_perf(shapes, out: Path, variants: dict) -> list[dict]:
    rows = []
    for name, overrides in variants.items():
        rows += _gemm_perf(shapes, name, overrides)
    return rows


def _gemm_perf(shapes, variant: str, overrides: dict) -> list[dict]:
    from argus.compiler import compile_kernel
    from argus.demo import load_example

    gemm = load_example("gemm")
    compiled = compile_kernel(gemm.KERNEL, s=gemm.GemmSchedule(**overrides))
    rows = []
    for (M, N, K) in shapes:
        try:
            rows.append(_gemm_case(gemm, compiled, variant, M, N, K))
        except Exception as e:  # noqa: BLE001 - e.g. a TMA-store epilogue on an unaligned C
            log(f"gemm [{variant}] {M}x{N}x{K}: {type(e).__name__}: {str(e).splitlines()[0]}")
    return rows


def _gemm_case(gemm, compiled, variant, M, N, K) -> dict:
    import torch

    from argus.bench.timing import measure
    from argus.demo import relative_error

    a, b, c = gemm.make_inputs((M, N, K), seed=M + N + K, device="cuda")
    compiled(a, b, c)
    torch.cuda.synchronize()
    err = relative_error(c, gemm.reference(a.cpu(), b.cpu(), c.cpu()).cuda()) \
        if M * N * K <= 4096 ** 3 else relative_error(c, (a.float() @ b.float().T))
    ours = measure(lambda: compiled(a, b, c), trials=100, warmup=20)
    base = measure(lambda: torch.mm(a, b.T), trials=100, warmup=20)
    flops = 2 * M * N * K
    row = {"variant": variant, "M": M, "N": N, "K": K, "rel_error": err,
           "ours_ms": ours.median_ms, "cublas_ms": base.median_ms,
           "ours_tflops": flops / ours.median_ms / 1e9,
           "cublas_tflops": flops / base.median_ms / 1e9,
           "ratio": base.median_ms / ours.median_ms}
    log(f"gemm [{variant}] {M}x{N}x{K}: ours {row['ours_tflops']:.0f} TFLOP/s, torch.mm "
        f"{row['cublas_tflops']:.0f}, ratio {row['ratio']:.2f}, rel err {err:.1e}")
    return row


def sass_check(out: Path) -> dict:
    from argus.compiler import compile_kernel
    from argus.demo import load_example
    from argus.runtime.sass import disassemble, instruction_histogram

    compiled = compile_kernel(load_example("gemm").KERNEL)
    sass = disassemble(compiled.binary.cubin)
    if sass is None:
        return {"sass": "no disassembler found"}
    (out / "gemm.sass").write_text(sass)
    hist = instruction_histogram(sass)
    res = compiled.resources
    info = {"HGMMA": sum(v for k, v in hist.items() if k.startswith("HGMMA")),
            "HMMA": sum(v for k, v in hist.items() if k.startswith("HMMA")),
            "registers": res.registers, "spill_bytes": res.spill_stores + res.spill_loads,
            "local_ld_st": sum(v for k, v in hist.items() if k.startswith(("LDL", "STL")))}
    log(f"SASS: {info}")
    return info


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    parser.add_argument("--quick", action="store_true", help="fewer shapes")
    parser.add_argument("--skip-tests", action="store_true")
    parser.add_argument("--bench", action="store_true",
                        help="also run the bf16 GEMM sweep and the fp8 benchmark")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict = {"env": env_info(), "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    log(json.dumps(results))
    if not args.skip_tests:
        results["pytest_gpu"] = run_pytest(args.out)
    results["examples"] = examples(args.out)
    shapes = [(4096, 4096, 4096), (8192, 8192, 8192)]
    if not args.quick:
        shapes += [(4095, 4097, 4096), (2048, 7168, 2048), (512, 8192, 8192)]
    variants = {"persistent": {}}
    if not args.quick:
        variants["non-persistent"] = {"persistent": False}
        variants["stmatrix+TMA-store epilogue, 3 stages"] = {"epilogue": "tma", "stages": 3}
    results["gemm"] = gemm_perf(shapes, args.out, variants)
    results["sass"] = sass_check(args.out)
    if args.bench:
        results["benchmarks"] = benchmarks(args.out, quick=args.quick)
    (args.out / "results.json").write_text(json.dumps(results, indent=2, default=str))

    lines = ["", f"== {results['env']['gpu']} torch {results['env']['torch']} commit "
                 f"{results['env']['commit']} {results['date']} ==",
             "| example | size | rel err | ok |", "|---|---|---|---|"]
    for r in results["examples"]:
        lines.append(f"| {r['example']} | {r.get('shape', r['size'])} | "
                     f"{r.get('rel_error', float('nan')):.2e} | {r['ok']} |")
    lines += ["", "| GEMM bf16 variant | M x N x K | ours TFLOP/s | torch.mm TFLOP/s | ratio | "
              "rel err |", "|---|---|---|---|---|---|"]
    for r in results["gemm"]:
        lines.append(f"| {r['variant']} | {r['M']}x{r['N']}x{r['K']} | {r['ours_tflops']:.0f} | "
                     f"{r['cublas_tflops']:.0f} | {r['ratio']:.2f} | {r['rel_error']:.1e} |")
    lines.append(f"\nSASS (gemm): {results['sass']}")
    for name, summary in results.get("benchmarks", {}).items():
        lines.append(f"{name}: {summary}")
    if "pytest_gpu" in results:
        lines.append(f"pytest -m gpu: {results['pytest_gpu']}")
    text = "\n".join(lines)
    (args.out / "results.md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
