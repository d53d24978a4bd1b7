"""Estimate a kernel's run time on an H200 without a GPU: a roofline, occupancy and pipeline model.

The estimate is what the offline planner ranks candidates by before anything runs, and what the
loop reports instead of a measurement on a machine without a Hopper GPU. Every number it
returns is an `Estimate`, labelled as such; reports never present it as a timing.

GEMM (the library kernel: warp-specialized, TMA ring, wgmma, one CTA per SM because of
`__launch_bounds__(threads, 1)` and setmaxnreg) is modelled per wave of concurrently running
tiles. A k-step of one tile takes the longest of
  - tensor-core time: 2*bm*bn*bk / (peak per SM * e(bn) * e(consumers)), where e(bn) =
    bn / (bn + 72) is the issue efficiency of m64nNk16 (calibrated so that 128x256 over 128x128
    matches the published +22% step) and one consumer warpgroup loses ~18% to barrier waits;
  - operand feed: the wave's requested bytes through L2 (B counted once per 2-CTA cluster, which
    multicasts it), and its unique bytes (distinct A and B panels under the grouped raster,
    computed from the real tile order) through HBM;
  - latency: a ring of S stages delivers S fills per (TMA latency + compute), so shallow rings
    stall.
Each tile adds its epilogue (C written from registers; mostly overlapped with the TMA-store
epilogue) and, without a persistent grid, the
fill latency and CTA start-up that a persistent producer hides. Waves follow from the tile count
and the grid. Spills predicted from registers (bn/2 accumulators + ~40 live values) cost 1.5x.

Memory-bound kernels (elementwise, generic Argus kernels) are modelled by Little's law: HBM needs
about bandwidth x latency bytes in flight per SM; a CTA's threads issue all their loads before
using them, so bytes in flight = resident threads x bytes per thread, capped by occupancy
(threads, registers, CTAs per SM). Tail waves and a per-CTA scheduling cost are added.

Constants are H200 datasheet and measured figures from HOPPER.md; the model is a ranking tool
(orderings and rough factors), not a simulator. Tests pin the orderings it must get right.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MODEL_VERSION = "argus-cost-model-1"
COPY_EFFICIENCY = 0.9   # share of the measured copy bandwidth a streaming kernel sustains


@dataclass(frozen=True)
class Hardware:
    """Hopper H200 SXM figures (HOPPER.md 'Ceilings')."""

    name: str = "H200 SXM (model)"
    sms: int = 132
    bf16_flops: float = 989e12         # dense tensor rate
    fp32_flops: float = 67e12          # CUDA-core fp32 (what an fp32 cuBLAS GEMM runs on)
    hbm_bytes_s: float = 4.28e12       # measured device copy
    l2_bytes_s: float = 12e12          # L2 read bandwidth (published microbenchmarks, approx.)
    tma_latency_s: float = 1.0e-6      # TMA issue to mbarrier completion under load
    dram_latency_s: float = 0.8e-6     # load latency used by Little's law
    cta_start_s: float = 2.0e-6        # CTA launch + barrier init + tensor-map prefetch
    launch_s: float = 3.0e-6           # kernel launch as seen by event timing
    smem_per_sm: int = 233472
    smem_per_cta: int = 232448
    regs_per_sm: int = 65536
    threads_per_sm: int = 2048
    ctas_per_sm: int = 32
    cta_sched_s: float = 0.15e-6       # per-CTA scheduling/index cost on an SM slot


H200 = Hardware()


@dataclass(frozen=True)
class Estimate:
    """A modelled run time. `kind` is always "estimate": never report it as a measurement."""

    ms: float
    bound: str                      # compute | memory | latency | launch
    detail: dict[str, Any] = field(default_factory=dict)
    model: str = MODEL_VERSION
    kind: str = "estimate"

    def label(self) -> str:
        return f"{self.ms:.4f} ms (estimate, {self.model}, {self.bound}-bound)"

    def to_json(self) -> dict[str, Any]:
        return {"ms": self.ms, "bound": self.bound, "detail": self.detail, "model": self.model,
                "kind": self.kind}


def wgmma_efficiency(bn: int) -> float:
    """Issue efficiency of m64nNk16 with N = bn (calibrated: e(256)/e(128) = 1.22)."""
    return bn / (bn + 72.0)


def consumer_efficiency(consumers: int) -> float:
    """One consumer warpgroup idles the tensor core while it waits on barriers; two or more
    interleave."""
    return 0.82 if consumers <= 1 else 1.0


def grouped_tile(tile: int, m_tiles: int, n_tiles: int, group_m: int) -> tuple[int, int]:
    """The (m, n) of a tile index under the library kernel's grouped raster (kernels/gemm.py)."""
    width = group_m * n_tiles
    group = tile // width
    first_m = group * group_m
    size = min(m_tiles - first_m, group_m)
    within = tile % width
    return first_m + within % size, within // size


def predicted_spill(bn: int, consumer_regs: int) -> bool:
    """bn/2 fp32 accumulators plus ~40 addresses, counters and descriptors per thread."""
    return bn // 2 + 40 > consumer_regs


def gemm_estimate(M: int, N: int, K: int, p: dict[str, Any], hw: Hardware = H200, *,
                  glue_bytes: int = 0, glue_launches: int = 0, spills: bool | None = None,
                  batch: int = 1) -> Estimate:
    """Modelled time of the library GEMM with schedule fields `p` (see module docstring).

    glue_bytes/glue_launches: extra memory-bound work around the kernel (casts, transposes of a
    KernelBench adapter), costed at 90% of copy bandwidth plus a launch each.
    batch: independent [M, K] @ [K, N] problems in one launch (the batched kernel walks them
    batch-major, so a wave's distinct panels are counted per batch).
    """
    bm, bn, bk = int(p["bm"]), int(p["bn"]), int(p["bk"])
    if p.get("swap_ab"):   # the tile is a block of C^T: its rows run along N, its columns M
        M, N = N, M
    stages, consumers = int(p["stages"]), int(p["consumers"])
    persistent, num_sms = bool(p["persistent"]), int(p["num_sms"])
    group_m = max(1, int(p["group_m"]))
    cluster = max(1, int(p.get("cluster_m", 1)))
    m_tiles, n_tiles = math.ceil(M / bm), math.ceil(N / bn)
    per_batch = m_tiles * n_tiles
    tiles = per_batch * max(1, batch)
    k_steps = max(1, math.ceil(K / bk))
    programs = min(tiles, num_sms) if persistent else tiles
    per_program = math.ceil(tiles / programs)
    sharing = math.ceil(min(programs, hw.sms) / hw.sms) if persistent else 1
    if persistent and programs > hw.sms:
        sharing = math.ceil(programs / hw.sms)   # oversubscribed: CTAs take turns on an SM
    wave = min(programs, hw.sms)                  # tiles in flight at once (one CTA per SM)
    waves = per_program * sharing if persistent else math.ceil(tiles / hw.sms)

    peak_sm = hw.bf16_flops / hw.sms
    t_mma = 2.0 * bm * bn * bk / (peak_sm * wgmma_efficiency(bn) * consumer_efficiency(consumers))
    acc_cols = bn * max(1, (bm // max(1, consumers)) // 64)    # accumulators of one thread x 2
    spill = predicted_spill(acc_cols, int(p["consumer_regs"])) if spills is None else spills
    if spill:
        t_mma *= 1.5
    ms_seen = {(t // per_batch, *grouped_tile(t % per_batch, m_tiles, n_tiles, group_m))
               for t in range(wave)}
    uniq_m = len({(b, m) for b, m, _ in ms_seen})
    uniq_n = len({(b, n) for b, _, n in ms_seen})
    # a 2-CTA cluster loads each B tile once for both CTAs (TMA multicast)
    t_l2 = wave * (bm + bn / cluster) * bk * 2 / hw.l2_bytes_s
    t_hbm = (uniq_m * bm + uniq_n * bn) * bk * 2 / hw.hbm_bytes_s
    t_lat = (hw.tma_latency_s + t_mma) / stages
    t_step = max(t_mma, t_l2, t_hbm, t_lat)
    bound = {t_mma: "compute", t_l2: "memory", t_hbm: "memory", t_lat: "latency"}[t_step]
    out_bytes = int(p.get("out_bytes", 2))
    t_epilogue = bm * bn * out_bytes / (hw.hbm_bytes_s / hw.sms)
    if p.get("epilogue", "direct") == "tma":
        t_epilogue *= 0.3   # one bulk store per block, overlapped with the next tile's loads
    t_fill = 0.0 if persistent else hw.tma_latency_s + hw.cta_start_s
    if cluster > 1:   # cluster launch and the cross-CTA release/barrier handshakes
        t_fill += 0.3e-6
    t_zero = 0.0 if p.get("zero_by_wgmma") else 0.1e-6 * bn / 128   # zeroing + wgmma.fence
    t_tile = k_steps * t_step + t_epilogue + t_fill + t_zero
    first_fill = hw.tma_latency_s + hw.cta_start_s if persistent else 0.0
    t_kernel = waves * t_tile + first_fill + hw.launch_s
    t_glue = glue_bytes / (0.9 * hw.hbm_bytes_s) + glue_launches * hw.launch_s
    total = t_kernel + t_glue
    detail = {"tiles": tiles, "waves": waves, "k_steps": k_steps, "t_step_us": t_step * 1e6,
              "t_mma_us": t_mma * 1e6, "t_l2_us": t_l2 * 1e6, "t_hbm_us": t_hbm * 1e6,
              "t_latency_us": t_lat * 1e6, "epilogue_us": t_epilogue * 1e6,
              "fill_us": t_fill * 1e6, "glue_us": t_glue * 1e6, "predicted_spill": spill,
              "tflops": 2.0 * M * N * K * max(1, batch) / total / 1e12}
    return Estimate(total * 1e3, bound, detail)


def memory_bound_estimate(*, bytes_moved: int, flops: float = 0.0, ctas: int, threads: int,
                          elems_per_thread: int, elem_bytes: int = 4, regs: int | None = None,
                          smem: int = 0, hw: Hardware = H200) -> Estimate:
    """Modelled time of a kernel that streams `bytes_moved` through HBM (see module docstring)."""
    regs = regs if regs is not None else min(255, 20 + 2 * elems_per_thread)
    regs_alloc = 8 * math.ceil(regs / 8)
    occ = min(hw.ctas_per_sm, hw.threads_per_sm // threads,
              hw.regs_per_sm // max(1, threads * regs_alloc),
              hw.smem_per_sm // smem if smem else hw.ctas_per_sm)
    if occ < 1:
        return Estimate(math.inf, "resource", {"reason": "a CTA does not fit on an SM",
                                              "regs": regs, "threads": threads, "smem": smem})
    resident = min(occ, math.ceil(ctas / hw.sms))
    inflight = resident * threads * elems_per_thread * elem_bytes
    needed = hw.hbm_bytes_s * hw.dram_latency_s / hw.sms
    bw_fraction = min(1.0, inflight / needed)
    waves = math.ceil(ctas / (hw.sms * occ))
    fill = ctas / (waves * hw.sms * occ)          # share of slots busy, averaged over waves
    tail = 1.0 if waves > 4 else max(fill, 0.05)   # many waves hide the partial last one
    t_mem = bytes_moved / (COPY_EFFICIENCY * hw.hbm_bytes_s * bw_fraction * tail)
    t_flops = flops / hw.fp32_flops
    t_sched = ctas * hw.cta_sched_s / (hw.sms * occ)
    body = max(t_mem, t_flops)
    total = body + t_sched + hw.launch_s
    bound = "memory" if t_mem >= t_flops else "compute"
    if t_sched > body:
        bound = "launch"
    detail = {"occupancy_ctas": occ, "bytes_in_flight_per_sm": inflight,
              "bandwidth_fraction": bw_fraction, "waves": waves, "tail": tail,
              "t_mem_us": t_mem * 1e6, "t_sched_us": t_sched * 1e6,
              "gbytes_s": bytes_moved / total / 1e9}
    return Estimate(total * 1e3, bound, detail)


def roofline_ms(*, flops: float = 0.0, bytes_moved: float = 0.0, flop_rate: float | None = None,
                hw: Hardware = H200) -> float:
    """The lower bound max(flops / rate, bytes / bandwidth) in milliseconds."""
    rate = flop_rate or hw.bf16_flops
    return max(flops / rate, bytes_moved / hw.hbm_bytes_s) * 1e3


def library_gemm_ms(M: int, N: int, K: int, dtype: str, hw: Hardware = H200) -> Estimate:
    """What cuBLAS (torch.mm) is expected to take, from HOPPER.md's measured table: about 700
    TFLOP/s for large bf16 GEMMs, and ~75% of the 67 TFLOP/s CUDA-core rate for fp32 (PyTorch
    keeps TF32 off for matmul by default). Small problems are bounded by bandwidth and launch."""
    flops = 2.0 * M * N * K
    if dtype in ("bf16", "f16", "bfloat16", "float16"):
        rate, elem = 700e12, 2
    else:
        rate, elem = 0.75 * hw.fp32_flops, 4
    bytes_moved = (M * K + K * N + M * N) * elem
    t = max(flops / rate, bytes_moved / (0.85 * hw.hbm_bytes_s)) + hw.launch_s
    return Estimate(t * 1e3, "compute" if flops / rate >= bytes_moved / hw.hbm_bytes_s
                    else "memory", {"assumed_tflops": rate / 1e12})


def copy_bound_ms(bytes_moved: int, efficiency: float = COPY_EFFICIENCY,
                  hw: Hardware = H200) -> Estimate:
    """A well-written memory-bound kernel (PyTorch eager or Inductor elementwise): bytes at
    `efficiency` of the measured copy bandwidth, plus a launch."""
    t = bytes_moved / (efficiency * hw.hbm_bytes_s) + hw.launch_s
    return Estimate(t * 1e3, "memory", {"efficiency": efficiency})
