"""Compile ahead of time the kernels that `argus.ops.matmul`'s untuned path can pick, so that
the first call of a shape nobody tuned finds them in the on-disk caches (ARGUS_CACHE_DIR):
NVRTC's cubin by content hash (runtime/compile.py), the verifier's verdict by the lowered
kernel, its CUDA and this Argus's fingerprint (compiler.py `_verified_source`), and the launch
check's finding that the kernel's stores cover every output for every shape (runtime/coverage.py
`remembered`: without it the first launch builds the verifier's model and imports z3).

Why a small set covers every shape: the GEMM kernels are shape-generic (M, N, K are the
tensors' runtime extents, kernels/gemm.py), so a kernel is fixed by the dtypes, B's layout,
batched or not, and the GemmSchedule. The untuned choice (schedules.untuned: the heuristic for
skinny M, else gemm_model.pick among the candidates) lands on a dozen or so schedules per
(dtypes, layout, epilogue); `common_schedules` finds them by asking it over a grid of shapes
(powers of two, their 1.5x, LLM projection sizes, ragged sizes), which is what a user's shapes
look like. A shape outside the grid whose choice is not in the set compiles on its first call
as before.

What a first call still costs after a prebuild (CPU, host side; docs/perf/gemm.md): the
schedule choice, tracing, layout inference, lowering, rendering the CUDA, hashing it for the
three cache keys, reading three records from disk, loading NVRTC to learn its version (part of
the cubin key) and, on the GPU, loading the cubin, the TMA descriptors and the launch
(scripts/gpu_first_call.py prints each phase).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, untuned

# Extents of M (tokens), N and K the untuned choice is asked about: powers of two and their
# 1.5x from 1 to 16384, ragged sizes, and the projection sizes of common LLMs (Llama-3-8B/70B,
# Mistral, Qwen: 11008, 14336, 28672, ...). 320 is 5 tiles of 64 rows and 2.5 of 128: where
# 64-row tiles pad least, the model picks the 64x256 ping-pong (M = 281..655 in
# tests/unit/test_matmul_prebuild.py's random shapes), which no other M here shows it.
# K = 1000 and 4104 (K = 8 mod 16): K-major rows whose 2K-byte pitch starts every other row 16
# bytes into a sector, which the model's L2 term charges (gemm_model.sector_overhead): there it
# takes 2x1 clusters (B multicast halves B's bytes) where an aligned K does not.
_M = (1, 8, 16, 17, 32, 48, 64, 96, 100, 128, 192, 200, 256, 320, 384, 512, 768, 1000, 1024,
      1536, 2048, 3000, 3072, 4096, 6144, 8192, 16384)
_N = (256, 512, 768, 1024, 1536, 2048, 3072, 4096, 5000, 5120, 6144, 7168, 8192, 11008,
      14336, 16384, 28672)
_K = (256, 1000, 1024, 2048, 4096, 4104, 8192, 14336, 16384)


@dataclass(frozen=True)
class Kind:
    """A kernel family of argus.ops.matmul: what besides the schedule fixes the kernel."""

    in_dtype: str = "bf16"
    out_dtype: str = "bf16"
    b_layout: str = "nk"       # "nk": x @ W.T with W [N, K]; "kn": x @ W with W [K, N]
    tma_store_ok: bool = True  # output rows 16-byte aligned (every N % 8 == 0 for 16-bit C)

    def problem(self, m: int, n: int, k: int) -> Problem:
        return Problem(m, n, k, 1, self.in_dtype, self.out_dtype, self.b_layout,
                       self.tma_store_ok)


COMMON_KINDS = tuple(Kind(dt, dt, layout, tma) for dt in ("bf16", "f16")
                     for layout in ("nk", "kn") for tma in (True, False))


def common_schedules(kind: Kind) -> dict[GemmSchedule, Problem]:
    """Every schedule the untuned path picks for `kind` over the shape grid, each with the
    first problem that picked it (prebuild compiles that problem's kernel: the kernel depends
    on the problem only through `kind`)."""
    out: dict[GemmSchedule, Problem] = {}
    for m, n, k in itertools.product(_M, _N, _K):
        problem = kind.problem(m, n, k)
        out.setdefault(untuned(problem), problem)
    return out


@dataclass(frozen=True)
class Built:
    """One prebuilt kernel: its kind, schedule and how long this process spent on it."""

    kind: Kind
    schedule: GemmSchedule
    seconds: float


def prebuild_matmul(kinds: Iterable[Kind] = COMMON_KINDS,
                    progress: Callable[[Built], None] | None = None) -> list[Built]:
    """Compile (trace, lower, verify, NVRTC, the launch check's coverage analysis) every
    common schedule of each kind into the on-disk caches; a kernel already there costs a cache
    hit. Needs NVRTC, not a GPU."""
    built, seen = [], set()
    for kind in kinds:
        for schedule, problem in common_schedules(kind).items():
            kernel = (kind.in_dtype, kind.out_dtype, kind.b_layout, schedule)
            if kernel in seen:  # tma_store_ok does not change the kernel, only the choice
                continue
            seen.add(kernel)
            start = time.perf_counter()
            build(problem, schedule)
            row = Built(kind, schedule, time.perf_counter() - start)
            built.append(row)
            if progress is not None:
                progress(row)
    return built


def build(problem: Problem, schedule: GemmSchedule):
    """Compile the kernel `argus.ops.matmul` launches for `problem` under `schedule` (a plain
    schedule: no split-K, no tail splits) through every stage, leaving each record in the
    on-disk caches in use now: the verifier's verdict (under ARGUS_VERIFY=1), the cubin and the
    coverage finding. Returns the CompiledKernel. Needs NVRTC, not a GPU.

    Not through the kernel's in-process memo (`KernelFunction.compile`): a kernel this process
    compiled before, under another ARGUS_CACHE_DIR or with ARGUS_VERIFY=0 (which records no
    verdict), would come back from memory and leave the new cache without a verdict, so the
    first call re-verified and recompiled (tests/gpu/test_matmul_prebuild_gpu.py on the H200,
    2026-12-02, run after test_matmul_first_call_gpu.py had built the same kernels)."""
    from argus.compiler import compile_kernel
    from argus.ops.schedules import kernel_for
    from argus.runtime import coverage

    if schedule.split_k > 1 or schedule.tail_splits > 1:
        raise ValueError(f"argus.ops.prebuild.build: {schedule} splits K; prebuild compiles the "
                         f"plain kernels the untuned choice picks (common_schedules)")
    kernel, run = kernel_for(problem, schedule)
    compiled = compile_kernel(kernel, s=run)
    coverage.remembered(compiled.kernel)
    return compiled
