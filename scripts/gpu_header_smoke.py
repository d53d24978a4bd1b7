#!/usr/bin/env python3
"""Run the hand-written reference GEMM (examples/cuda/gemm_reference.cu) on a Hopper GPU.

One job: prove on the card that the device header argus_sm90.cuh and argus.runtime work end to
end (NVRTC compile -> cubin -> TMA maps -> cuLaunchKernelEx on torch's stream), that the GEMM is
correct (relative Frobenius error against a float64 reference, the output pre-filled with NaN so
an unwritten element fails), and how fast it is next to torch.mm (cuBLAS) in the same run.

Run from the repo root:  python3 scripts/gpu_header_smoke.py   (--quick: skip 8192^3)
It prints the environment, the compile report, the SASS check, and a short table LAST.
Exit status: 0 when every shape is correct, 1 otherwise; 3 when a kernel hangs (the script
then exits at once so the card is not held).
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SOURCE = ROOT / "examples" / "cuda" / "gemm_reference.cu"
KERNEL = "argus_gemm_bf16_tn"
BM, BN, BK, STAGES, THREADS = 128, 256, 64, 4, 384
# Must equal gemm::SMEM_BYTES in gemm_reference.cu: ring + barriers + 1024 B alignment slack.
SMEM_BYTES = STAGES * (BM * BK * 2 + BN * BK * 2) + 2 * STAGES * 8 + 1024
HANG_SECONDS = 30.0

# (M, N, K, timed). K must be a multiple of 8 (TMA row strides are multiples of 16 bytes).
SHAPES = [
    (4096, 4096, 4096, True),
    (8192, 8192, 8192, True),
    (1000, 1234, 4096, True),     # partial M and N tiles, even N (bf16-pair stores)
    (1000, 1233, 4104, False),    # odd N (scalar stores), K tail of 8 (TMA zero fill)
    (77, 300, 136, False),        # smaller than one tile in M; 3 K steps, the last partial
    (128, 256, 64, False),        # exactly one tile, one K step
]


def log(msg: str = "") -> None:
    print(msg, flush=True)


def compile_reference() -> Any:
    from argus.runtime import compile_cuda

    return compile_cuda(SOURCE.read_text(), [KERNEL], filename=SOURCE.name)


def prepare_gemm(binary: Any, a: Any, b: Any, c: Any) -> Callable[..., None]:
    """C[M,N] = A[M,K] @ B[N,K]^T: TMA maps built once, a LaunchPlan returned."""
    from argus.runtime import make_tensor_map, prepare_launch

    m, k = a.shape
    n = b.shape[0]
    # Boxes in tensor.shape order: 128 rows (resp. 256) x 64 columns = one 128B swizzle row.
    tma_a = make_tensor_map(a, box=(BM, BK), swizzle_bytes=128, name="A")
    tma_b = make_tensor_map(b, box=(BN, BK), swizzle_bytes=128, name="B")
    grid = math.ceil(m / BM) * math.ceil(n / BN)
    return prepare_launch(binary, KERNEL, grid=(grid,), block=(THREADS,),
                          args=[tma_a, tma_b, c, m, n, k], smem_bytes=SMEM_BYTES)


def wait_or_exit(what: str, timeout: float = HANG_SECONDS) -> None:
    """Wait for the current stream with a deadline: a deadlocked mbarrier protocol would
    otherwise hang the script (and the card) forever."""
    import torch

    event = torch.cuda.Event()
    event.record()
    start = time.time()
    while not event.query():
        if time.time() - start > timeout:
            log(f"HANG: {what} did not finish within {timeout:.0f} s (mbarrier deadlock or a "
                "wrong expect_tx byte count?); exiting")
            os._exit(3)
        time.sleep(0.001)
    torch.cuda.synchronize()


def relative_error(a: Any, b: Any, c: Any) -> float:
    """||C - A B^T||_F / ||A B^T||_F with the reference in float64 (NaN if C has NaN)."""
    ref = a.double() @ b.double().t()
    return float((c.double() - ref).norm() / ref.norm().clamp_min(1e-30))


def time_fn(fn: Callable[[], Any], trials: int) -> tuple[float, str]:
    """Median milliseconds of fn() and the clock used. Prefers Argus' one timing implementation
    (argus.bench.timing: CUDA events, L2 flushed before each trial); falls back to plain
    back-to-back CUDA events when that module is absent."""
    import torch

    try:
        from argus.bench.timing import measure
    except ImportError:
        measure = None
    if measure is not None:
        try:
            timing = measure(fn, trials=trials, warmup=10, allow_few_trials=True)
        except TypeError:  # its signature changed: use the local clock below
            pass
        else:
            return timing.median_ms, f"argus.bench.timing ({timing.clock}, L2 flushed)"
    for _ in range(10):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(trials)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends)), \
        "CUDA events, back to back, no L2 flush"


def environment() -> None:
    import torch

    major, minor = torch.cuda.get_device_capability()
    log(f"torch {torch.__version__} (CUDA {torch.version.cuda}), "
        f"{torch.cuda.get_device_name()} sm_{major}{minor}, "
        f"{torch.cuda.get_device_properties(0).multi_processor_count} SMs")
    try:
        import cuda.bindings

        log(f"cuda-bindings {cuda.bindings.__version__}")
    except ImportError as exc:
        log(f"cuda-bindings: NOT IMPORTABLE ({exc})")
    from argus.runtime.toolkit import find_tool, load_nvrtc

    try:
        info = load_nvrtc()
        log(f"NVRTC {info.version[0]}.{info.version[1]} from {info.library}")
    except Exception as exc:  # noqa: BLE001 - report and continue with the nvcc fallback
        log(f"NVRTC unavailable: {exc}")
    log(f"nvcc: {find_tool('nvcc')}; cuobjdump: {find_tool('cuobjdump')}; "
        f"nvdisasm: {find_tool('nvdisasm')}")


def sass_report(binary: Any) -> tuple[str, bool]:
    from argus.runtime import check_sass, disassemble

    sass = disassemble(binary.cubin)
    if sass is None:
        return "SASS: no disassembler found (cuobjdump/nvdisasm); skipped", True
    check = check_sass(sass, want=("HGMMA", "UTMALDG"), forbid=("HMMA", "LDL", "STL"))
    hist = check.histogram
    text = (f"SASS: HGMMA x{hist.get('HGMMA', 0)}, UTMALDG x{hist.get('UTMALDG', 0)}, "
            f"SYNCS x{hist.get('SYNCS', 0)}, LDL x{hist.get('LDL', 0)}, "
            f"STL x{hist.get('STL', 0)}, HMMA x{hist.get('HMMA', 0)}; {check}")
    return text, check.ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="skip 8192^3")
    parser.add_argument("--trials", type=int, default=30, help="timed runs per measurement")
    opts = parser.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        log("no CUDA device visible to torch; this script needs a Hopper GPU")
        return 1
    torch.cuda.init()
    environment()
    if torch.cuda.get_device_capability() != (9, 0):
        log("WARNING: not an sm_90 device; the sm_90a cubin will not load")

    from argus.runtime import function_attributes

    t0 = time.time()
    binary = compile_reference()
    res = binary.resource(KERNEL)
    log(f"compiled with {binary.compiler} in {time.time() - t0:.2f} s "
        f"({'cache hit' if binary.from_cache else 'fresh'}): {res.summary()}")
    attrs = function_attributes(binary, KERNEL)
    log(f"driver: {attrs.registers} registers, {attrs.local_bytes} B local memory per thread, "
        f"{attrs.static_smem} B static smem, binary version {attrs.binary_version}")
    sass_text, sass_ok = sass_report(binary)
    log(sass_text)

    rows = []
    all_ok = sass_ok and not res.spills and attrs.local_bytes == 0
    torch.manual_seed(0)
    for m, n, k, timed in SHAPES:
        if opts.quick and m * n * k >= 8192**3:
            continue
        label = f"{m}x{n}x{k}"
        try:
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
            c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
            gemm = prepare_gemm(binary, a, b, c)
            gemm(sync=False)
            wait_or_exit(f"GEMM {label}")
            err = relative_error(a, b, c)
            torch_err = relative_error(a, b, torch.mm(a, b.t()))
            ok = math.isfinite(err) and err < 1e-2
            ours_tf = torch_tf = None
            clock = ""
            if timed:
                flops = 2.0 * m * n * k
                ours_ms, clock = time_fn(gemm, opts.trials)
                wait_or_exit(f"timing GEMM {label}")
                torch_ms, _ = time_fn(lambda a=a, b=b: torch.mm(a, b.t()), opts.trials)
                ours_tf, torch_tf = flops / ours_ms / 1e9, flops / torch_ms / 1e9
            rows.append((label, ours_tf, torch_tf, err, torch_err, ok))
            log(f"{label}: rel err {err:.2e} (torch.mm {torch_err:.2e})"
                + (f", {ours_tf:.1f} vs torch.mm {torch_tf:.1f} TFLOP/s [{clock}]" if timed
                   else ""))
            all_ok &= ok
        except Exception:  # noqa: BLE001 - one bad shape must not hide the others' results
            log(f"{label}: FAILED\n{traceback.format_exc()}")
            rows.append((label, None, None, float("nan"), float("nan"), False))
            all_ok = False
            if "CUDA_ERROR" in traceback.format_exc():
                break  # a faulted context poisons every later launch

    def fmt(x: float | None, spec: str) -> str:
        return "-".rjust(int(spec.split(".")[0])) if x is None else format(x, spec)

    log()
    log(f"reference GEMM ({KERNEL}, 128x256x64 tile, 4 stages, 384 threads): "
        f"{res.registers} regs, spills {res.spill_stores}/{res.spill_loads} B, "
        f"local {attrs.local_bytes} B; {sass_text}")
    log(f"{'M x N x K':<18} {'ours TF/s':>10} {'torch.mm TF/s':>14} {'ratio':>6} "
        f"{'rel.err':>9} {'torch err':>9}  ok")
    for label, ours_tf, torch_tf, err, torch_err, ok in rows:
        ratio = ours_tf / torch_tf if ours_tf and torch_tf else None
        log(f"{label:<18} {fmt(ours_tf, '10.1f')} {fmt(torch_tf, '14.1f')} "
            f"{fmt(ratio, '6.2f')} {err:9.2e} {torch_err:9.2e}  {'yes' if ok else 'NO'}")
    log(f"SMOKE {'PASS' if all_ok else 'FAIL'}")
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
