"""Why does the H200 host return some binaries without their ptxas resource report? (open since
2026-12-01: the block-scaled fp8 GEMM in gpu_fp8_bench.py --block and in
test_block_scaled_no_host_sync_and_sass, an elementwise variant, three softmax_online variants;
on the CPU machine every one of them has its report.) `Binary.resource` now falls back to the
cubin's own record, which hides the symptom; this probe looks for the cause.

The same kernels (the block-scaled GEMM's candidates at 4096x7168x2048 and two overlapped
schedules) are compiled by NVRTC without the disk cache in four phases, and each binary is
checked for its report: before CUDA is initialized, after torch initializes it, after a
scaled_matmul launch (the bench's order: the kernel compiled, its launch-specialized variant
built, then compiled again), and twice through the disk cache (the second read from disk). For
each binary it prints whether the report is there, the log's length, the ptxas entries the
log names, and for a missing report the log's tail. Runs on the CPU too (the CUDA phases are
skipped there). Writes probe.json under --out. About a minute on an H200.

    python3 scripts/gpu_ptxas_report_probe.py --out $OUT/probe
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path


def _sources():
    """(label, source) of the kernels to compile: rendered once, without the verifier."""
    import argus as ag
    from argus import codegen
    from argus.compiler import lower_only
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel
    from argus.ops.fp8_schedules import Fp8Problem, candidates

    schedules = candidates(Fp8Problem(4096, 7168, 2048, "bf16", True, True))
    schedules += [Fp8GemmSchedule(bn=128, stages=6, promote=True, overlap=True),
                  Fp8GemmSchedule(bn=128, stages=5, promote=True, overlap=True, cluster_m=2,
                                  epilogue="tma")]
    kernel = gemm_fp8_blockscaled_kernel(ag.bf16)
    return [(_short(s), codegen.render(lower_only(kernel, s=s))) for s in schedules]


def _short(schedule) -> str:
    """The fields that differ from the default schedule (what tells the candidates apart)."""
    import dataclasses

    base = type(schedule)()
    return ", ".join(f"{f.name}={getattr(schedule, f.name)!r}"
                     for f in dataclasses.fields(schedule)
                     if getattr(schedule, f.name) != getattr(base, f.name))


def _check(label: str, source, binary) -> dict:
    entries = re.findall(r"Compiling entry function '([^']+)'", binary.log)
    row = {"schedule": label, "report": any(r.name == source.name for r in binary.resources),
           "from_cache": binary.from_cache, "log_chars": len(binary.log),
           "entries_in_log": entries, "symbols": dict(binary.symbols)}
    if not row["report"]:
        row["log_tail"] = binary.log[-800:]
    return row


def _phase(name: str, sources, use_cache: bool = False) -> list[dict]:
    from argus.runtime.compile import compile_cuda

    rows = []
    for label, source in sources:
        binary = compile_cuda(source.text, [source.name], filename=f"{source.name}.cu",
                              use_cache=use_cache)
        rows.append({"phase": name, **_check(label, source, binary)})
        print(f"{name:>14}  report={'yes' if rows[-1]['report'] else 'NO '}  "
              f"log {rows[-1]['log_chars']:6d} chars  cache={binary.from_cache}  "
              f"{label}", flush=True)
        if not rows[-1]["report"]:
            print("      log tail: " + rows[-1]["log_tail"][-400:].replace("\n", "\n      "))
    return rows


def _launch() -> None:
    """One block-scaled scaled_matmul (compiles the op's choice and its launch variant)."""
    import torch

    from argus.ops import scaled_matmul

    m, n, k = 256, 512, 512
    a = torch.randn(m, k, device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn(n, k, device="cuda").to(torch.float8_e4m3fn)
    sa = torch.ones(k // 128, m, device="cuda").t()
    sb = torch.ones(n // 128, k // 128, device="cuda")
    scaled_matmul(a, w, sa, sb)
    torch.cuda.synchronize()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")) / "probe")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    from argus.runtime.toolkit import load_nvrtc

    info = load_nvrtc()
    print(f"NVRTC {info.version} at {info.library}", flush=True)
    sources = _sources()
    rows = _phase("cold", sources)
    try:
        import torch
        cuda = torch.cuda.is_available()
    except ImportError:
        cuda = False
    if cuda:
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
        rows += _phase("cuda init", sources)
        _launch()
        rows += _phase("after launch", sources)
    os.environ["ARGUS_CACHE_DIR"] = tempfile.mkdtemp(prefix="argus-probe-")
    from argus.runtime.compile import clear_memory_cache

    rows += _phase("disk write", sources, use_cache=True)
    clear_memory_cache()
    rows += _phase("disk read", sources, use_cache=True)
    missing = [r for r in rows if not r["report"]]
    result = {"nvrtc": list(info.version), "library": str(info.library), "cuda": cuda,
              "rows": rows, "missing": len(missing)}
    (args.out / "probe.json").write_text(json.dumps(result, indent=1))
    print(f"\n{len(missing)} of {len(rows)} binaries without their ptxas report"
          + (f" (phases: {sorted({r['phase'] for r in missing})})" if missing else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
