"""The library's fp8 GEMM: C = (A * scale_a) @ (W * scale_b)^T on Hopper's fp8 tensor cores.

A is [M, K] e4m3 (K contiguous), W is [N, K] e4m3 (K contiguous: the row-major weight of
`x @ W.T`); `scale_a` and `scale_b` are one-element float32 tensors (per-tensor scales, as
`torch._scaled_mm` takes them) and C is [M, N] bf16 / f16 / f32. PTX lets only 16-bit wgmma
operands be transposed, so both operands are K-major here (PTX ISA wgmma.mma_async, "Matrix
Descriptor"); there is no MN-major variant.

Built from the same warp-specialized skeleton as `argus.kernels.gemm`
(argus/kernels/warp_specialized.py): one producer warpgroup streams A and W tiles through a
STAGES-deep TMA ring of 128B-swizzled shared memory; each of `consumers` warpgroups multiplies
a 64-row slice with `wgmma.m64nNk32.f32.e4m3.e4m3`, BK = 128 e4m3 = one 128-byte swizzle row,
so a stage is four k32 instructions. The epilogue multiplies the accumulator by
scale_a * scale_b, read from device memory once per consumer (no host sync), and converts to
the output type. Invariant: every element of C is written once, from fp32 accumulators of all
K, by the consumer that owns its rows.

Promotion (`Fp8GemmSchedule.promote`, DeepSeek-V3 §3.3.2 / DeepGEMM): the tensor core's fp8
accumulator keeps fewer than fp32's bits, so instead of accumulating all of K in it, each
128-deep K block (one stage: four k32 wgmma) goes into a fresh wgmma accumulator (scale-d = 0),
which the CUDA cores then add into an fp32 main accumulator once that group has retired.
`gemm_fp8_blockscaled_kernel` always promotes, because that is where its scales are applied:

    C[i, j] = sum_b  scale_a[i, b] * scale_b[j // 128, b] * sum_{k in block b} A[i, k] W[j, k]

with scale_a [M, K/128] (one scale per token and 128-K block, "1x128") and scale_b
[N/128, K/128] (one per 128x128 weight block), the DeepSeek-V3 / DeepGEMM convention. The
kernel takes scale_a as its MN-major transpose [K/128, M'] (M' >= M: rows of one K block
contiguous, DeepGEMM's TMA-friendly layout); each consumer reads the 2 scales of the rows it
holds per K block straight into its accumulator's row layout, and scale_b as one scalar per
block (two where a tile straddles a 128-column weight block: selected per column).
"""

import functools
from dataclasses import dataclass, field, fields

import argus as ag
from argus.dtypes import DType
from argus.kernels.warp_specialized import (OperandRing, Staging, TileScheduler, Unit,
                                            WarpSpecializedSchedule, store_tile,
                                            store_tile_staged)

BK_BYTES = 128  # one 128-byte swizzle row of e4m3: the K depth of a stage
SCALE_BLOCK = 128  # K (and weight N) extent of one block scale: one stage of K
# promotion holds a main and a partial accumulator: 2 x bn / 2 registers per consumer thread
PROMOTE_MAX_BN = 160
# overlapped promotion holds the main one and two partials: 3 x bn / 2 registers (192 at 128)
OVERLAP_MAX_BN = 128


@dataclass(frozen=True)
class Fp8GemmSchedule(WarpSpecializedSchedule):
    """What the fp8 GEMM lets a tuner choose: the skeleton's fields (argus/kernels/
    warp_specialized.py) with bk in e4m3 elements (= bytes), one 128-byte row."""

    bk: int = BK_BYTES
    # add each 128-deep K block's wgmma partial into an fp32 accumulator on the CUDA cores
    # (the block-scaled kernel always does; for per-tensor scales it buys cuBLAS's accuracy)
    promote: bool = False
    # promotion overlapped with the next K block's wgmma (`overlapped_promoted_mma`): two
    # partials in turns, block k's wgmma issued before block k - 1 is promoted. Left out of
    # repr when False, so the keys of every earlier schedule (tuning cache, golden hashes)
    # stay as they were. Not among the tuning candidates yet: the verifier's wgmma.k-once
    # does not follow K blocks split over two overwritten partials (its sync checks pass)
    overlap: bool = field(default=False, repr=False)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        return f"{type(self).__name__}({shown}{', overlap=True' if self.overlap else ''})"

    def _problems(self) -> list[str]:
        problems = super()._problems()
        if self.overlap and not self.promote:
            problems.append("overlap overlaps promotion with the next wgmma: it needs "
                            "promote=True")
        if self.overlap and self.bn > OVERLAP_MAX_BN:
            problems.append(f"overlap keeps three {self.bm // self.consumers}x{self.bn} fp32 "
                            f"accumulators per consumer (the sum and two block partials): "
                            f"bn={self.bn} exceeds the register budget "
                            f"(bn <= {OVERLAP_MAX_BN})")
        if self.promote and self.bn > PROMOTE_MAX_BN:
            problems.append(f"promote keeps two {self.bm // self.consumers}x{self.bn} fp32 "
                            f"accumulators per consumer (the main one and the block's "
                            f"partial): bn={self.bn} exceeds the register budget "
                            f"(bn <= {PROMOTE_MAX_BN})")
        if self.pingpong:
            problems.append("pingpong is built for the bf16/fp16 GEMM only (argus/kernels/"
                            "gemm.py); the fp8 kernel runs cooperative consumers")
        if self.bk != BK_BYTES:
            problems.append(f"bk={self.bk}: a stage is one 128-byte swizzle row of e4m3, "
                            f"bk=128")
        if self.bn % 64 and self.epilogue == "tma":
            problems.append(f"the TMA-store epilogue stores 64-column blocks; bn={self.bn}")
        if self.cluster_m == 2 and (self.bn // 2) % 8:
            problems.append(f"cluster_m=2 multicasts half of W's {self.bn} rows per CTA: bn "
                            f"must be a multiple of 16")
        return problems

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the tiles (the compiler adds barriers and alignment)."""
        ring = self.stages * (self.bm + self.bn) * self.bk
        staging = self.bm * self.bn * 2 if self.epilogue == "tma" else 0
        return ring + staging


@dataclass(frozen=True)
class _Fp8Gemm:
    """What both fp8 kernels (per-tensor and block-scaled) build the same way from their
    schedule: the grid, the e4m3 operand ring, the staging buffer of the TMA-store epilogue, the
    producer role and the epilogue. Trace-time Python: the ops are recorded in the order the
    kernels recorded them before (the library replay hashes hold it)."""

    s: Fp8GemmSchedule
    sched: TileScheduler
    ring: OperandRing
    k_steps: object
    rows: int
    staging: Staging | None

    @classmethod
    def launch(cls, s: Fp8GemmSchedule, A, W, out_dtype: DType) -> "_Fp8Gemm":
        M, K = A.shape
        N = W.shape[0]
        sched = TileScheduler.launch(M, N, s.bm, s.bn, cluster=s.cluster_m,
                                     persistent=s.persistent, num_sms=s.num_sms,
                                     group_m=s.group_m)
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, ag.e4m3, s.consumers)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        # one 128B-swizzled 64 x 64 staging block per 64 columns
        staging = Staging.alloc(s.consumers, rows, s.bn, out_dtype) \
            if s.epilogue == "tma" else None
        return cls(s, sched, ring, k_steps, rows, staging)

    def produce(self, A, W) -> None:
        """The producer role: every unit's A and W tiles through the ring."""
        s = self.s
        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for unit in self.sched.units():
                self.ring.load(self.k_steps, A, W, unit, rank=self.sched.rank,
                               cluster=s.cluster_m)

    def store(self, C, unit: Unit, wg, acc, finish) -> None:
        """Warpgroup wg's rows of the unit's tile, from registers or staged for TMA."""
        s = self.s
        if self.staging is not None:
            # each block stored as soon as it is staged (the order measured on the GPU; the
            # bf16 GEMM's whole-round runs are untried here)
            store_tile_staged(C, unit, wg, acc, self.staging, bm=s.bm, bn=s.bn,
                              rows=self.rows, finish=finish, run=1)
        else:
            store_tile(C, unit, wg, acc, bm=s.bm, bn=s.bn, rows=self.rows, finish=finish)


@functools.cache
def gemm_fp8_kernel(out_dtype: DType = ag.bf16) -> ag.KernelFunction:
    """The fp8 GEMM kernel for one output type (cached: one KernelFunction per type)."""
    if out_dtype not in (ag.bf16, ag.f16, ag.f32):
        raise ValueError(f"the fp8 GEMM writes bf16, f16 or f32, not {out_dtype}")

    def gemm_fp8(A: ag.Tensor["M", "K", ag.e4m3],
                 W: ag.Tensor["N", "K", ag.e4m3],
                 ScaleA: ag.Tensor[1, ag.f32],
                 ScaleB: ag.Tensor[1, ag.f32],
                 C: ag.Tensor["M", "N", out_dtype],
                 s: Fp8GemmSchedule = Fp8GemmSchedule()):
        g = _Fp8Gemm.launch(s, A, W, out_dtype)
        g.produce(A, W)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            # per-tensor scales, read once from device memory (no host round trip)
            scale = ag.load_scalar(ScaleA, (0,)) * ag.load_scalar(ScaleB, (0,))

            def finish(tile):
                return (tile * scale).to(out_dtype)

            for unit in g.sched.units():
                if s.promote:  # per-tensor scales: the partials are added unscaled
                    acc = _promote(s)(g.ring, g.k_steps, wg)
                else:
                    acc = g.ring.mma(g.k_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                g.store(C, unit, wg, acc, finish)

    name = "gemm_fp8" if out_dtype == ag.bf16 else f"gemm_fp8_{out_dtype.name}"
    return ag.kernel(gemm_fp8, name=name)


def promoted_mma(ring: OperandRing, k_steps, wg, scales: "BlockScales | None" = None):
    """The promoting consumer's main loop for one unit: each K step (one 128-deep block) is
    multiplied into a fresh fp32 wgmma accumulator (scale-d = 0, no zeroing), which is added
    into the main fp32 accumulator on the CUDA cores, times the block's scales (`scales`, or
    none: per-tensor scales are applied in the epilogue). Returns the main accumulator. The
    scales of block k + 1 are loaded during step k (carried to the next iteration), so their
    global-memory latency hides behind a whole step rather than one stage wait."""
    rows = ring.bm // ring.consumers
    acc = ag.zeros((rows, ring.bn), ag.f32)
    if scales is None:
        for k in ag.range(k_steps):
            with ring.pipe.consume() as stage:
                part = _block_partial(ring, stage, wg, rows)
                acc = acc + part
        return acc
    per_row, left, right = scales.fetch(0)
    for k in ag.range(k_steps):
        next_row, next_left, next_right = scales.fetch(k + 1)  # past the end: zeros
        with ring.pipe.consume() as stage:
            part = _block_partial(ring, stage, wg, rows)
            acc = acc + part * scales.combine(per_row, left, right)
        per_row, left, right = next_row, next_left, next_right
    return acc


def _promote(s: Fp8GemmSchedule):
    """The promoting main loop the schedule asks for."""
    return overlapped_promoted_mma if s.overlap else promoted_mma


def overlapped_promoted_mma(ring: OperandRing, k_steps, wg,
                            scales: "BlockScales | None" = None):
    """`promoted_mma` with the tensor cores kept busy during promotion (DeepSeek-V3's
    "overlap" of WGMMA and promotion): two partial tiles take K blocks in turns, and step k
    issues block k's wgmma (overwriting its partial, scale-d = 0) *before* it promotes block
    k - 1's partial, which lower.sync then retires with wgmma.wait 1: block k stays in flight
    while the CUDA cores add block k - 1. The serial form waits for each block's group
    (wait 0) before its FFMAs, so each warpgroup's tensor-core queue ran dry every block and
    the two consumer warpgroups, released by the same full barrier, promoted at the same
    time. The loop runs two steps per iteration so each partial keeps its registers (a
    carried copy of an in-flight accumulator would make ptxas serialize the wgmma: C7514).
    Block k's scales are loaded two steps ahead of its promotion, beside the in-flight
    partial, so their global-memory latency hides behind the steps in between."""
    rows = ring.bm // ring.consumers
    acc = ag.zeros((rows, ring.bn), ag.f32)
    even = ag.zeros((rows, ring.bn), ag.f32)   # the partials of even and of odd blocks
    odd = ag.zeros((rows, ring.bn), ag.f32)
    plain = scales is None
    # the scales of the next even block and of the next odd block, loaded two steps before
    # their promotion (lower.sync lets the loads run beside the held partial); each carried
    # name is read once per iteration, so it keeps the accumulator's row layout
    er, el, eright = (None, None, None) if plain else scales.fetch(0)
    orow, ol, oright = (None, None, None) if plain else scales.fetch(1)
    with ring.pipe.consume() as stage:
        _overwrite(ring, stage, wg, rows, even)                     # block 0
    for j in ag.range((k_steps - 1) // 2):
        with ring.pipe.consume() as stage:
            _overwrite(ring, stage, wg, rows, odd)                  # block 2j + 1 ...
            acc = acc + (even if plain else even * scales.combine(er, el, eright))  # 2j
        if not plain:
            er, el, eright = scales.fetch(2 * j + 2)
        with ring.pipe.consume() as stage:
            _overwrite(ring, stage, wg, rows, even)                 # block 2j + 2 ...
            acc = acc + (odd if plain else odd * scales.combine(orow, ol, oright))  # 2j + 1
        if not plain:
            orow, ol, oright = scales.fetch(2 * j + 3)
    # `even` holds the last block (odd k_steps) or the one before it (even k_steps); the
    # tails load their scales afresh (a second read of a carried name would cost its layout)
    # one predicate and its negation (two separate compares left ptxas a path on which
    # neither tail ran and `even` stayed in flight: it serialized every wgmma, C7514)
    even_steps = k_steps % 2 == 0
    with ag.when(even_steps):
        with ring.pipe.consume() as stage:
            _overwrite(ring, stage, wg, rows, odd)                  # block k_steps - 1
            acc = acc + _scaled(even, scales, k_steps - 2)
        acc = acc + _scaled(odd, scales, k_steps - 1)
    with ag.when(even_steps == 0):
        acc = acc + _scaled(even, scales, k_steps - 1)
    return acc


def _scaled(part, scales: "BlockScales | None", k):
    """Block k's partial times its scales (loaded here), or as is for per-tensor scales."""
    return part if scales is None else part * scales.combine(*scales.fetch(k))


def _overwrite(ring: OperandRing, stage, wg, rows: int, part) -> None:
    """This step's K block of warpgroup wg's rows into `part`, overwriting it (scale-d = 0)."""
    ag.wgmma(ring.a[stage].rows_of(wg * rows, rows), ring.b[stage].rows_of(0, ring.bn), part,
             overwrite=True)


def _block_partial(ring: OperandRing, stage, wg, rows: int):
    """This step's K block of warpgroup wg's rows times the tile's columns, into a fresh
    accumulator (its first wgmma overwrites: scale-d = 0)."""
    part = ag.zeros((rows, ring.bn), ag.f32, by_wgmma=True)
    ag.wgmma(ring.a[stage].rows_of(wg * rows, rows), ring.b[stage].rows_of(0, ring.bn), part)
    return part


@dataclass(frozen=True)
class BlockScales:
    """Where warpgroup wg's block scales of one unit are: scale_a_t[k, row] for its rows (a
    column vector) and scale_b[col // 128, k] for the tile's columns, one scalar when the tile
    lies in one 128-column weight block, else the two blocks' scalars chosen per column."""

    scale_a_t: object       # [K/128, M'] f32, MN-major
    scale_b: object         # [N/128, K/128] f32
    first_row: object
    first_col: object
    rows: int
    bn: int

    @classmethod
    def of(cls, scale_a_t, scale_b, unit: Unit, wg, *, bm: int, bn: int,
           rows: int) -> "BlockScales":
        return cls(scale_a_t, scale_b, unit.m * bm + wg * rows, unit.n * bn, rows, bn)

    @property
    def straddles(self) -> bool:
        return SCALE_BLOCK % self.bn != 0   # bn-wide tiles of a divisor never straddle

    def fetch(self, k):
        """The loads of block k: (per-row scales, left weight scale, right weight scale or
        None). Rows past M and blocks past N or K read 0."""
        per_row = ag.load(self.scale_a_t, (k, self.first_row), (self.rows,))
        block = self.first_col // SCALE_BLOCK
        left = ag.load_scalar(self.scale_b, (block, k))
        right = ag.load_scalar(self.scale_b, (block + 1, k)) if self.straddles else None
        return per_row, left, right

    def combine(self, per_row, left, right):
        """The block's scale as a tile that broadcasts against a 64 x bn partial."""
        if right is None:
            return (per_row * left)[:, None]
        # columns before the next weight block's first column take the left block's scale
        split = (self.first_col // SCALE_BLOCK + 1) * SCALE_BLOCK - self.first_col
        return per_row[:, None] * ag.where(ag.arange(self.bn)[None, :] < split, left, right)


@functools.cache
def gemm_fp8_blockscaled_kernel(out_dtype: DType = ag.bf16) -> ag.KernelFunction:
    """The block-scaled fp8 GEMM for one output type (see the module docstring): 1x128
    activation scales ScaleAT [K/128, M'] (MN-major, M' >= M), 128x128 weight scales ScaleB
    [N/128, K/128]; K a multiple of 128 (the op checks it). Needs Fp8GemmSchedule(promote=True).
    """
    if out_dtype not in (ag.bf16, ag.f16, ag.f32):
        raise ValueError(f"the fp8 GEMM writes bf16, f16 or f32, not {out_dtype}")

    def gemm_fp8_blockscaled(A: ag.Tensor["M", "K", ag.e4m3],
                             W: ag.Tensor["N", "K", ag.e4m3],
                             ScaleAT: ag.Tensor["KB", "MS", ag.f32],
                             ScaleB: ag.Tensor["NB", "KB", ag.f32],
                             C: ag.Tensor["M", "N", out_dtype],
                             s: Fp8GemmSchedule = Fp8GemmSchedule(bn=128, stages=6,
                                                                  promote=True)):
        if not s.promote:
            raise ag.TraceError("block scales are applied when each K block's partial is "
                                "promoted: the block-scaled kernel needs promote=True",
                                fix="pass Fp8GemmSchedule(..., promote=True)")
        g = _Fp8Gemm.launch(s, A, W, out_dtype)
        g.produce(A, W)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            def finish(tile):
                return tile.to(out_dtype)

            for unit in g.sched.units():
                acc = _promote(s)(g.ring, g.k_steps, wg, BlockScales.of(
                    ScaleAT, ScaleB, unit, wg, bm=s.bm, bn=s.bn, rows=g.rows))
                g.store(C, unit, wg, acc, finish)

    name = "gemm_fp8_blockscaled" if out_dtype == ag.bf16 else \
        f"gemm_fp8_blockscaled_{out_dtype.name}"
    return ag.kernel(gemm_fp8_blockscaled, name=name)
