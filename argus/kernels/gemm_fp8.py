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

Weight streaming (small M, argus/ops/fp8_schedules.py `weight_streaming`): `swap_ab` makes W
wgmma's A operand (the tile's bm rows are W rows) and the activations its N (bn >= M, a
multiple of 8), the accumulator a block of C^T stored transposed; `k_atoms` loads each stage as
k_atoms 128-byte K rows back to back; `split_k` runs `gemm_fp8_partials_kernel` over K-slice
views into fp32 partials, which `scaled_split_k_sum_kernel` (argus/kernels/split_k_sum.py) adds
in slice order and scales once (argus/ops/fp8_split_k.py runs the two).

Promotion (`Fp8GemmSchedule.promote`, DeepSeek-V3 §3.3.2 / DeepGEMM): the tensor core's fp8
accumulator keeps fewer than fp32's bits, so instead of accumulating all of K in it, each
128-deep K block (one stage: four k32 wgmma) goes into a fresh wgmma accumulator (scale-d = 0),
which the CUDA cores then add into an fp32 main accumulator once that group has retired.
With per-tensor scales the partial may span promote_every K steps (`interval_promoted_mma`:
fewer drains and FADDs, an error between the two; scripts/fp8_accum_model.py models it).
`gemm_fp8_blockscaled_kernel` always promotes, because that is where its scales are applied:

    C[i, j] = sum_b  scale_a[i, b] * scale_b[j // 128, b] * sum_{k in block b} A[i, k] W[j, k]

with scale_a [M, K/128] (one scale per token and 128-K block, "1x128") and scale_b
[N/128, K/128] (one per 128x128 weight block), the DeepSeek-V3 / DeepGEMM convention. The
kernel takes scale_a as its MN-major transpose [K/128, M'] (M' >= M: rows of one K block
contiguous, DeepGEMM's TMA-friendly layout); each consumer reads the 2 scales of the rows it
holds per K block straight into its accumulator's row layout, and scale_b as one scalar per
block (two where a tile straddles a 128-column weight block: selected per column).
`gemm_fp8_blockscaled_smem_kernel` (smem_scales=True) takes scale_a K-major instead and brings
both scales through shared memory with each ring stage (`SharedBlockScales`). The serial
promotion releases each stage before its FFMAs (`early_release_promoted_mma`) unless
late_release=True. `n_split=2` (`split_promoted_mma`) splits each K block's wgmma into two
column halves with their own partials and sums, one partial live at a time, so a 128 x 256
tile fits the registers (DeepGEMM's 256 x 128 budget); a block-scaled accumulator never
spans more than two weight blocks (`weight_blocks_spanned`). `stagger=True` makes the serial
early-release loop's K steps, or the serial split's column halves, ordered sections
(ag.ordered): the consumer warpgroups issue in turns and each promotes while the others'
groups run.
"""

import contextlib
import dataclasses
import functools
import math
from dataclasses import dataclass, field, fields

import argus as ag
from argus.dtypes import DType
from argus.kernels.split_k_sum import MAX_SPLITS
from argus.kernels.warp_specialized import (OperandRing, Staging, TileScheduler, Unit,
                                            WarpSpecializedSchedule, load_tile, store_tile,
                                            store_tile_staged)

BK_BYTES = 128  # one 128-byte swizzle row of e4m3: the K depth of a stage
SCALE_BLOCK = 128  # K (and weight N) extent of one block scale: one stage of K
# promotion holds a main and a partial accumulator: 2 x bn / 2 registers per consumer thread
PROMOTE_MAX_BN = 160
# block scales a TMA box holds per row: 16 bytes of f32 (TMA's least inner extent), the
# four K blocks 4j .. 4j + 3 of the K step's block 4j + i: a TMA copy's innermost coordinate
# must start 16-byte aligned (else an illegal instruction on Hopper: see SharedBlockScales), so
# the box starts at the aligned block 4j and the consumer picks column i
SCALE_BOX = 4
SB_ROWS = 128 // (4 * SCALE_BOX)   # f32 rows of SCALE_BOX in 128 B: one weight-scale stage
# the per-tensor interval promotion (promote_every > 1, `interval_promoted_mma`) holds the same
# two accumulators: 128 x 192 built without spills at 232 registers (NVRTC 13.0, sm_90a), as the
# N-split's 192 accumulator registers did; 224 spilled 40 B
INTERVAL_MAX_BN = 192
# overlapped promotion holds the main one and two partials: 3 x bn / 2 registers (192 at 128)
OVERLAP_MAX_BN = 128
# the N-split promotion's accumulator registers per consumer thread (the sums and the live
# partials): the overlapped promotion's 192, which built without spills at 232 registers
SPLIT_MAX_REGS = 192


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
    # stay as they were. Proven by the verifier's promoted-sum k-once (argus/verify/
    # promotion.py) and the block-scaled default where the TMA epilogue fits
    # (argus/ops/fp8_schedules.py)
    overlap: bool = field(default=False, repr=False)
    # serial promotion with the stage released after the promotion's FFMAs (`promoted_mma`,
    # the order measured at 794-947 TFLOP/s, docs/perf/fp8.md) instead of right after the
    # block's wgmma group has retired (`early_release_promoted_mma`, the default, DeepGEMM's
    # order); kept to measure one against the other. Out of repr when False, as overlap
    late_release: bool = field(default=False, repr=False)
    # block scales through shared memory (`SharedBlockScales`, DeepGEMM's path): the producer
    # TMA-loads each stage's activation and weight scales beside its operand tiles and the
    # consumers read them there, instead of every consumer thread loading them from global
    # memory one step ahead. Block-scaled kernel only, serial promotion (early release, or
    # n_split=2's serial form); the kernel then takes scale_a K-major
    # (`gemm_fp8_blockscaled_smem_kernel`). Out of repr when False, as overlap. Not a
    # default: on the H200 (docs/perf/fp8.md, 4dd5330) it beat the global loads in the
    # serial 128 x 128 loop (819 vs 719 TFLOP/s geomean) but not in the split 128 x 256 one
    # (864 vs 898), and neither beat the overlap default (834) at every shape
    smem_scales: bool = field(default=False, repr=False)
    # the promoting K step split along N (`split_promoted_mma`): each K block's wgmma is two
    # of bn / 2 columns, each into its own partial and added into its own fp32 accumulator,
    # the first promoted before the second is issued, so one partial is live at a time: a
    # 128 x 256 tile holds 128 + 64 accumulator registers per thread, the budget of
    # DeepGEMM's 256 x 128 tile (two 64-row waves per warpgroup, PR #81: 1500 TFLOP/s on an
    # H800 at 4096x7168x16384 against 1404 at 128 x 128). 1 or 2; out of repr when 1
    n_split: int = field(default=1, repr=False)
    # with n_split = 2: the second half's wgmma is issued before the first half is promoted
    # (both partials live: bn / 2 + bn accumulator registers, so bn <= 128 + 64); out of
    # repr when False
    split_overlap: bool = field(default=False, repr=False)
    # K steps of k_atoms 128-byte rows each (OperandRing's atoms: one TMA box of each operand
    # per atom, issued back to back): each weight row is read k_atoms * 128 contiguous bytes
    # per stage instead of 128. For weight streaming (small M: argus/ops/fp8_schedules.py
    # `weight_streaming`), where a stage of 128 bytes per row leaves the DRAM one 128-byte
    # piece of each of the tile's rows at a time. The plain loop, or with promote=True the
    # per-tensor `interval_promoted_mma` (a partial spans promote_every steps); out of repr
    # when 1
    k_atoms: int = field(default=1, repr=False)
    # swap-AB: W is wgmma's A operand (the tile's bm rows are W rows, 64 per consumer), the
    # activations its B (bn of them, a multiple of 8 >= M): the tile is a block of C^T, stored
    # transposed from registers. For small M a 64-row activation tile is mostly TMA zero fill
    # (M = 16: 48 of 64 rows), shared memory the ring could spend on W. Direct epilogue; the
    # plain loop or a serial early-release promotion (promote_every any); out of repr when False
    swap_ab: bool = field(default=False, repr=False)
    # K cut into split_k equal slices (argus/ops/split_k.py `k_slices`: views), one fp32
    # partial product per slice (`gemm_fp8_partials_kernel`, the batched kernel over the
    # slices), then `scaled_split_k_sum_kernel` adds them in slice order and applies
    # scale_a * scale_b once, in fp32. Run by argus.ops.scaled_matmul, not by a kernel itself:
    # more units of work (SMs streaming weights) when the output has few tiles. Out of repr
    # when 1
    split_k: int = field(default=1, repr=False)
    # with per-tensor promotion: the wgmma partial accumulates promote_every K blocks (the
    # first of them overwrites it, scale-d = 0) before it is added into the fp32 sum
    # (`interval_promoted_mma`); 1 is every block (promote=True as before). Fewer promotions:
    # fewer wgmma drains (wait 0) and FADDs per K block; the tensor core's accumulator keeps
    # 13 fraction bits (scripts/fp8_accum_model.py), so its error grows with the K it spans:
    # argus/ops/fp8_schedules.py `promote_every_for` picks the largest interval whose modelled
    # error is no worse than cuBLAS's. Per-tensor kernel only (a block-scaled partial takes
    # one block's scales); out of repr when 1
    promote_every: int = field(default=1, repr=False)
    # staggered consumers (the serial early-release promotion, or the serial n_split=2 one):
    # each K step's wgmma (each column half's, with n_split=2) is issued in an ordered section
    # (ag.ordered, the turn-taking of the bf16 ping-pong and of FA3's attention), so
    # warpgroup 0 issues block k, then warpgroup 1, then warpgroup 0 block k + 1, ...; the
    # turn passes right after the issue (a pass retires no wgmma), and each warpgroup waits
    # for its group and promotes it after the section, while the other warpgroup's group,
    # queued behind its own, keeps the tensor pipe busy. Without it both
    # warpgroups leave the same full barrier together, may issue together and then promote
    # together (docs/perf/fp8.md "Why the split loop stops near 1000", item 2; "Staggered
    # consumers" has the SASS and the GPU command). Out of repr when False
    stagger: bool = field(default=False, repr=False)

    def __repr__(self) -> str:
        shown = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in fields(self) if f.repr)
        extra = "".join(f", {name}=True" for name in ("overlap", "late_release",
                                                        "smem_scales") if getattr(self, name))
        if self.n_split != 1:
            extra += f", n_split={self.n_split}"
        if self.split_overlap:
            extra += ", split_overlap=True"
        for name in ("k_atoms", "split_k", "promote_every"):
            if getattr(self, name) != 1:
                extra += f", {name}={getattr(self, name)}"
        if self.swap_ab:
            extra += ", swap_ab=True"
        if self.stagger:
            extra += ", stagger=True"
        return f"{type(self).__name__}({shown}{extra})"

    @property
    def piece(self) -> int:
        """Columns of one accumulator: bn, or bn / 2 with n_split = 2."""
        return self.bn // self.n_split

    def _problems(self) -> list[str]:
        problems = super()._problems()
        if self.late_release and (self.overlap or not self.promote):
            problems.append("late_release orders the serial promotion: it needs promote=True "
                            "and overlap=False")
        if self.smem_scales and (self.overlap or self.late_release or not self.promote):
            problems.append("smem_scales reads each stage's block scales in its consume step: "
                            "it needs the serial early-release promotion (promote=True, "
                            "overlap=False, late_release=False)")
        if self.overlap and not self.promote:
            problems.append("overlap overlaps promotion with the next wgmma: it needs "
                            "promote=True")
        if self.overlap and self.bn > OVERLAP_MAX_BN:
            problems.append(f"overlap keeps three {self.bm // self.consumers}x{self.bn} fp32 "
                            f"accumulators per consumer (the sum and two block partials): "
                            f"bn={self.bn} exceeds the register budget "
                            f"(bn <= {OVERLAP_MAX_BN})")
        problems += self._split_problems()
        problems += self._interval_problems()
        problems += self._stagger_problems()
        if self.promote and self.bn > (INTERVAL_MAX_BN if self.promote_every > 1 else
                                       PROMOTE_MAX_BN) and self.n_split == 1:
            problems.append(f"promote keeps two {self.bm // self.consumers}x{self.bn} fp32 "
                            f"accumulators per consumer (the main one and the block's "
                            f"partial): bn={self.bn} exceeds the register budget "
                            f"(bn <= {PROMOTE_MAX_BN}; {INTERVAL_MAX_BN} with "
                            f"promote_every > 1)")
        if self.pingpong:
            problems.append("pingpong is built for the bf16/fp16 GEMM only (argus/kernels/"
                            "gemm.py); the fp8 kernel runs cooperative consumers")
        if self.bk != BK_BYTES:
            problems.append(f"bk={self.bk}: a stage is one 128-byte swizzle row of e4m3, "
                            f"bk=128")
        if self.piece % 16 and self.epilogue == "tma":
            problems.append(f"the TMA-store epilogue stores blocks of 64, 32 or 16 columns "
                            f"(128-, 64- or 32-byte swizzle); an accumulator of {self.piece} "
                            f"columns (bn={self.bn}, n_split={self.n_split}) is none of them")
        problems += self._streaming_problems()
        if self.cluster_m == 2 and (self.bn // 2) % 8:
            problems.append(f"cluster_m=2 multicasts half of W's {self.bn} rows per CTA: bn "
                            f"must be a multiple of 16")
        return problems

    def _interval_problems(self) -> list[str]:
        """What promote_every > 1 needs: the serial early-release promotion, one partial."""
        if self.promote_every < 1:
            return [f"promote_every={self.promote_every} < 1"]
        if self.promote_every == 1:
            return []
        if not self.promote or self.overlap or self.late_release or self.smem_scales or \
                self.n_split != 1:
            return [f"promote_every={self.promote_every} runs its own promoting loop "
                    f"(`interval_promoted_mma`: one partial accumulating promote_every K blocks, "
                    f"then one FADD into the fp32 sum): it needs promote=True and none of "
                    f"overlap, late_release, smem_scales, n_split=2"]
        return []

    def _stagger_problems(self) -> list[str]:
        """What stagger=True needs: the serial early-release loop, whose K step issues one
        wgmma group and whose promotion follows the step (`early_release_promoted_mma`), or
        the serial N-split, whose halves are issued one at a time (`split_promoted_mma`), and
        two or more consumer warpgroups to take turns."""
        if not self.stagger:
            return []
        if not self.promote or self.overlap or self.late_release or self.split_overlap or \
                self.promote_every != 1 or self.k_atoms != 1 or self.swap_ab:
            return ["stagger orders the issue of the serial early-release promotion's K steps "
                    "(`early_release_promoted_mma`), or of the serial N-split's column halves "
                    "(`split_promoted_mma`): it needs promote=True and none of overlap, "
                    "late_release, split_overlap, promote_every > 1, k_atoms > 1, swap_ab"]
        if self.consumers < 2:
            return [f"stagger makes consumer warpgroups take turns issuing their K steps: it "
                    f"needs consumers >= 2 (got {self.consumers})"]
        return []

    def _streaming_problems(self) -> list[str]:
        """What k_atoms, swap_ab and split_k (the weight-streaming fields) need."""
        problems = []
        if self.k_atoms < 1:
            problems.append(f"k_atoms={self.k_atoms} < 1")
        if not 1 <= self.split_k <= MAX_SPLITS:
            problems.append(f"split_k={self.split_k} is outside 1..{MAX_SPLITS}")
        # swap-AB promotes like the row-major tile (its ring is W's rows and the activations'
        # and the promoting loops read it the same way); only the serial early-release loop
        plain = ([name for name, on in (("split_k > 1", self.split_k > 1),) if on])
        if (self.swap_ab or self.k_atoms > 1) and self.promote and (
                self.overlap or self.late_release or self.n_split != 1 or self.smem_scales):
            plain.append("swap_ab or k_atoms > 1 with overlap, late_release, smem_scales or "
                         "n_split=2 (they promote in `interval_promoted_mma` only)")
        if plain and self.promote:
            problems.append(f"{', '.join(plain)} run the plain (not promoting) K loop: they need "
                            f"promote=False")
        if (self.swap_ab or self.split_k > 1) and self.epilogue != "direct":
            problems.append("swap_ab stores C^T blocks and split_k fp32 partials from registers: "
                            "they need epilogue='direct'")
        if (self.swap_ab or self.split_k > 1) and self.cluster_m != 1:
            problems.append("swap_ab and split_k run without clusters (cluster_m=1)")
        return problems

    def _split_problems(self) -> list[str]:
        if self.n_split not in (1, 2):
            return [f"n_split={self.n_split}: the K step is split into 1 or 2 column halves"]
        if self.n_split == 1:
            return ["split_overlap orders the two halves of n_split=2"] \
                if self.split_overlap else []
        problems = []
        if not self.promote or self.overlap or self.late_release or \
                self.smem_scales and self.split_overlap:
            problems.append("n_split=2 is a promoting loop of its own (the stage released after "
                            "the second half's wgmma): it needs promote=True and none of "
                            "overlap, late_release, smem_scales with split_overlap (the "
                            "shared-memory scales are read in the serial form's step)")
        if self.bn % 16:
            problems.append(f"n_split=2 takes halves of bn={self.bn}: each a wgmma N, a "
                            f"multiple of 8, so bn a multiple of 16")
        # per thread: bn / 2 registers of the two halves' sums, bn / 4 of each live partial
        regs = self.bn // 2 + (2 if self.split_overlap else 1) * self.bn // 4
        if regs > SPLIT_MAX_REGS:
            live = "both halves' partials" if self.split_overlap else "one half's partial"
            problems.append(f"n_split=2 keeps the {self.bm // self.consumers}x{self.bn} sum and "
                            f"{live} in registers: {regs} per thread exceeds the budget of "
                            f"{SPLIT_MAX_REGS} (bn <= {4 * SPLIT_MAX_REGS // 3} serial, "
                            f"<= {SPLIT_MAX_REGS} with split_overlap)")
        return problems

    @property
    def smem_bytes(self) -> int:
        """Shared memory of the tiles (the compiler adds barriers and alignment)."""
        ring = self.stages * (self.bm + self.bn) * self.bk * self.k_atoms
        # the TMA-store staging holds one accumulator's columns (the halves take turns)
        staging = self.bm * self.piece * 2 if self.epilogue == "tma" else 0
        scales = self.stages * (self.bm + SB_ROWS) * SCALE_BOX * 4 if self.smem_scales else 0
        return ring + staging + scales


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
    def launch(cls, s: Fp8GemmSchedule, A, W, out_dtype: DType, batch=None) -> "_Fp8Gemm":
        """`batch`: the leading extent of batched A, W and C (the K slices of split-K)."""
        M, K = A.shape[-2], A.shape[-1]
        N = W.shape[-2]
        # with swap-AB the tile's rows are W's (wgmma's A operand) and its columns A's
        rows_of, cols_of = (N, M) if s.swap_ab else (M, N)
        sched = TileScheduler.launch(rows_of, cols_of, s.bm, s.bn, batch=batch,
                                     cluster=s.cluster_m, persistent=s.persistent,
                                     num_sms=s.num_sms, group_m=s.group_m)
        ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, ag.e4m3, s.consumers,
                                 k_atoms=s.k_atoms)
        k_steps = ring.k_steps(K)
        rows = s.bm // s.consumers
        # one 128B-swizzled 64 x 64 staging block per 64 columns of one accumulator (the
        # halves of n_split = 2 take turns in it)
        staging = Staging.alloc(s.consumers, rows, s.piece, out_dtype) \
            if s.epilogue == "tma" else None
        return cls(s, sched, ring, k_steps, rows, staging)

    def produce(self, A, W, scales: "SharedBlockScales | None" = None) -> None:
        """The producer role: every unit's A and W tiles through the ring (with each stage's
        block scales when `scales` is given)."""
        s = self.s
        lhs, rhs = (W, A) if s.swap_ab else (A, W)
        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for unit in self.sched.units():
                if scales is None:
                    self.ring.load(self.k_steps, lhs, rhs, unit, rank=self.sched.rank,
                                   cluster=s.cluster_m)
                else:
                    scales.load(self.ring, self.k_steps, A, W, unit, rank=self.sched.rank,
                                cluster=s.cluster_m)

    def store(self, C, unit: Unit, wg, acc, finish) -> None:
        """Warpgroup wg's rows of the unit's tile, from registers or staged for TMA; `acc` is
        one accumulator, or with n_split = 2 the tuple of the two column halves' (each stored
        as the tile of bn / 2 columns it is: unit column index 2 n + j)."""
        s = self.s
        if isinstance(acc, tuple):
            for j, half in enumerate(acc):
                piece = Unit(unit.batch, unit.m, unit.n * len(acc) + j)
                if self.staging is not None:
                    store_tile_staged(C, piece, wg, half, self.staging, bm=s.bm, bn=s.piece,
                                      rows=self.rows, finish=finish, run=1)
                else:
                    store_tile(C, piece, wg, half, bm=s.bm, bn=s.piece, rows=self.rows,
                               finish=finish)
            return
        if self.staging is not None:
            # each block stored as soon as it is staged (the order measured on the GPU; the
            # bf16 GEMM's whole-round runs are untried here)
            store_tile_staged(C, unit, wg, acc, self.staging, bm=s.bm, bn=s.bn,
                              rows=self.rows, finish=finish, run=1)
        else:  # with swap-AB acc is a block of C^T: its rows are C's columns
            store_tile(C, unit, wg, acc, bm=s.bm, bn=s.bn, rows=self.rows, finish=finish,
                       transposed=s.swap_ab)


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
        _refuse_split(s)
        g = _Fp8Gemm.launch(s, A, W, out_dtype)
        g.produce(A, W)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            # per-tensor scales, read once from device memory (no host round trip)
            scale = ag.load_scalar(ScaleA, (0,)) * ag.load_scalar(ScaleB, (0,))

            def finish(tile):
                return (tile * scale).to(out_dtype)

            for unit in g.sched.units():
                if s.promote:  # per-tensor scales: the partials are added unscaled
                    acc = interval_promoted_mma(g.ring, g.k_steps, wg, s.promote_every) \
                        if s.promote_every > 1 or s.k_atoms > 1 else _promote(s)(g.ring,
                                                                                g.k_steps, wg)
                else:
                    acc = g.ring.mma(g.k_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                g.store(C, unit, wg, acc, finish)

    name = "gemm_fp8" if out_dtype == ag.bf16 else f"gemm_fp8_{out_dtype.name}"
    return ag.kernel(gemm_fp8, name=name)


def _refuse_interval(s: Fp8GemmSchedule) -> None:
    if s.promote_every != 1 or s.k_atoms != 1:
        raise ag.TraceError(f"Fp8GemmSchedule(promote_every={s.promote_every}, "
                            f"k_atoms={s.k_atoms}): a block-scaled partial is multiplied by "
                            f"one K block's scales when it is promoted, so it holds one K "
                            f"block",
                            fix="use promote_every=1 and k_atoms=1 with block scales (longer "
                                "partials are for per-tensor scales, gemm_fp8_kernel)")


def _refuse_split(s: Fp8GemmSchedule) -> None:
    if s.split_k != 1:
        raise ag.TraceError(f"Fp8GemmSchedule(split_k={s.split_k}) is run by "
                            f"argus.ops.scaled_matmul (gemm_fp8_partials_kernel over K-slice "
                            f"views, then scaled_split_k_sum_kernel), not by one kernel",
                            fix="call argus.ops.scaled_matmul(a, b, sa, sb, schedule=...), or "
                                "compile with split_k=1")


@functools.cache
def gemm_fp8_partials_kernel() -> ag.KernelFunction:
    """Split-K's first half: P[s] = As[s] @ Ws[s]^T in fp32, unscaled, for the K-slice views
    As [S, M, KS] and Ws [S, N, KS] of A and W (argus/ops/split_k.py `k_slices`: slice s is K
    range [s KS, (s + 1) KS), its edge the view's, so a box crossing it is zero filled, never
    read from the next slice). The batched kernel over the slices: the verifier proves per
    slice what it proves of the plain kernel (every k of the slice multiplied once, from one
    slice of A and W, into P[s]); `scaled_split_k_sum_kernel` adds P in slice order and
    applies the per-tensor scales once. The schedule is the split one's with split_k=1
    (swap_ab, k_atoms and the tile as chosen)."""

    def gemm_fp8_partials(As: ag.Tensor["S", "M", "KS", ag.e4m3],
                          Ws: ag.Tensor["S", "N", "KS", ag.e4m3],
                          P: ag.Tensor["S", "M", "N", ag.f32],
                          s: Fp8GemmSchedule = Fp8GemmSchedule(bm=64, bn=16, consumers=1,
                                                               stages=16, swap_ab=True)):
        _refuse_split(s)
        if s.promote or s.epilogue != "direct":
            raise ag.TraceError("the split-K partials are plain fp32 sums stored from "
                                "registers: promote=False, epilogue='direct'",
                                fix="pass the split schedule's tile with promote=False")
        g = _Fp8Gemm.launch(s, As, Ws, ag.f32, batch=As.shape[0])
        g.produce(As, Ws)
        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            for unit in g.sched.units():
                acc = g.ring.mma(g.k_steps, wg, zero_by_wgmma=s.zero_by_wgmma)
                g.store(P, unit, wg, acc, lambda tile: tile)

    return ag.kernel(gemm_fp8_partials, name="gemm_fp8_partials")


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


def early_release_promoted_mma(ring: OperandRing, k_steps, wg,
                               scales: "BlockScales | None" = None, *, stagger: bool = False):
    """`promoted_mma` with the stage released before the promotion (DeepGEMM's order): each
    K block's wgmma overwrites one partial (scale-d = 0) inside the pipeline step, whose end
    waits for that group and releases the slot, and the partial is added into the fp32
    accumulator, times its scales, after it; so the producer refills the slot while the CUDA
    cores promote (SASS per block: QGMMA x4, WARPGROUP.DEPBAR.LE gsb0 0x0, the release's
    SYNCS.ARRIVE, then the FFMAs; promoted_mma's release comes after the FFMAs). The scales
    of block k + 1 are loaded during step k, as in promoted_mma.

    `stagger` (Fp8GemmSchedule.stagger): each step is an ordered section (ag.ordered), so the
    consumer warpgroups issue their K steps in turns, warpgroup 0's block k before warpgroup
    1's, and warpgroup 1's before warpgroup 0's block k + 1. The step keeps its group in
    flight past its end (lower/pipeline.py), the turn passes there (a pass retires nothing:
    lower/sync.py), and the promotion after the section waits for the group: so one
    warpgroup's wait and FFMAs run while the other's group, issued behind its own, occupies
    the tensor cores."""
    rows = ring.bm // ring.consumers
    acc = ag.zeros((rows, ring.bn), ag.f32)
    part = ag.zeros((rows, ring.bn), ag.f32)

    def turn():
        return _turn(stagger, "mma")

    if scales is None:
        for k in ag.range(k_steps):
            with turn(), ring.pipe.consume() as stage:
                _overwrite(ring, stage, wg, rows, part)
            acc = acc + part
        return acc
    if isinstance(scales, SharedBlockScales):
        # the stage's scales are read from shared memory before the slot is released and
        # applied after it (carried out of the step by name: a value made inside a step is
        # local to it)
        per_row, left, right = scales.initial()
        for k in ag.range(k_steps):
            with turn(), ring.pipe.consume() as stage:
                per_row, left, right = scales.read(stage, wg, right is not None, k)
                _overwrite(ring, stage, wg, rows, part)
            acc = acc + part * scales.combine(per_row, left, right)
        return acc
    per_row, left, right = scales.fetch(0)
    for k in ag.range(k_steps):
        next_row, next_left, next_right = scales.fetch(k + 1)  # past the end: zeros
        with turn(), ring.pipe.consume() as stage:
            _overwrite(ring, stage, wg, rows, part)
        acc = acc + part * scales.combine(per_row, left, right)
        per_row, left, right = next_row, next_left, next_right
    return acc


def interval_promoted_mma(ring: OperandRing, k_steps, wg, every: int):
    """Per-tensor promotion every `every` K steps: one partial takes `every` consecutive K
    steps (k_atoms 128-deep blocks each: the first block's wgmma overwrites it, scale-d = 0;
    the others accumulate, as the plain loop does) and is then added into the fp32 sum on the
    CUDA cores, once per group.
    The blocks past the last whole group (k_steps % every of them, fewer than `every`) are
    promoted one by one (the `every` = 1 loop, `early_release_promoted_mma`). Each k of K
    reaches the sum once: the verifier's promoted-sum k-once (argus/verify/promotion.py)
    counts the accumulating wgmma between a promotion and the overwrite it reads.

    The stage of every step is released at the step's end (the plain loop's order); the
    group's last step waits for its wgmma (the promotion reads the partial), the others keep
    one group in flight. Per-tensor only: a block-scaled partial must hold one K block."""
    rows = ring.bm // ring.consumers

    def step(stage, first: bool) -> None:
        # a step of k_atoms 128-deep blocks (OperandRing.mma's views): the group's first
        # block overwrites the partial, every later one accumulates
        for atom in range(ring.k_atoms):
            ag.wgmma(ring.a[stage].rows_of(atom * ring.a_rows + wg * rows, rows),
                     ring.b[stage].rows_of(atom * ring.b_rows, ring.b_rows), part,
                     overwrite=first and atom == 0)

    acc = ag.zeros((rows, ring.bn), ag.f32)
    part = ag.zeros((rows, ring.bn), ag.f32)
    for g in ag.range(k_steps // every):
        for i in range(every):   # unrolled: the first block overwrites, the rest accumulate
            with ring.pipe.consume() as stage:
                step(stage, i == 0)
        acc = acc + part
    if every == 1:   # (k_atoms > 1) no tail: a loop that never runs is not traced
        return acc
    for t in ag.range(k_steps % every):   # the tail: fewer than `every` steps, one by one
        with ring.pipe.consume() as stage:
            step(stage, True)
        acc = acc + part
    return acc


def _promote(s: Fp8GemmSchedule):
    """The promoting main loop the schedule asks for."""
    if s.n_split == 2:
        return functools.partial(split_promoted_mma, overlap=s.split_overlap,
                                 stagger=s.stagger)
    if s.overlap:
        return overlapped_promoted_mma
    if s.late_release:
        return promoted_mma
    return functools.partial(early_release_promoted_mma, stagger=s.stagger)


def split_promoted_mma(ring: OperandRing, k_steps, wg, scales: "BlockScales | None" = None, *,
                       overlap: bool = False, stagger: bool = False):
    """The promoting main loop with each K block split into two column halves (n_split = 2):
    half j's wgmma (B rows [j bn / 2, (j + 1) bn / 2) of the stage) goes into a fresh partial
    that is added, times the block's scales, into the fp32 sum of half j.

    Serial (DeepGEMM's order for its two 64-row waves, but the stage released after both
    promotions): half 0 is issued, waited for and promoted, then half 1 is issued, waited for
    and promoted, and the stage released. Each partial is made inside the step (scale-d = 0
    on its first wgmma, `_block_partial`), so its registers are live only from its wgmma to
    its promotion and the two share registers: a 128 x 256 tile costs 128 + 64 accumulator
    registers. (A partial kept across steps, as the early-release loop's, stays live all the
    loop: the wgmma's accumulator operands are read-write, so ptxas keeps the previous
    step's values; two of them beside 128 were 256 registers and spilled.) Half 1's wgmma is
    pinned behind half 0's promotion (ag.wgmma pinned): ptxas hoisted it into half 0's FFMAs,
    both partials were live, and the 128 x 256 consumer spilled (472 B with the warp-uniform
    role index, 88 B without; issue 18, scripts/sass_fp8_k_loop.py). Both halves' scales
    are multiplied at the top of the step, before the first wgmma: no register work runs
    beside a group, so its wait is not pinned. This warpgroup's tensor cores idle while it
    promotes; the other consumer warpgroup's wgmma fill the gap.

    `overlap`: half 1 is issued before half 0 is promoted (wait 1), both partials live across
    steps (bn / 2 + bn registers, so bn <= 192), and half 1 is promoted after the stage is
    released. The scales of block k + 1 are loaded during step k: the activation scales once
    for both halves (the loaded vector is read once, as one [rows, 1] column, so it keeps the
    accumulator's row layout; read by both halves' promotions it took a blocked layout and a
    conversion through shared memory), the weight scales per half. Returns (sum of half 0,
    sum of half 1).

    `stagger` (serial form): each half's issue is an ordered section of its own ("half0",
    "half1", ag.ordered inside the consume step: every warpgroup consumes every step), so the
    tensor cores take the halves as warpgroup 0's half 0, warpgroup 1's half 0, warpgroup 0's
    half 1, ...: each warpgroup drains and promotes a half while the others' half runs,
    where without it both warpgroups may issue, drain and promote the same half together."""
    rows = ring.bm // ring.consumers
    width = ring.bn // 2
    acc0 = ag.zeros((rows, width), ag.f32)
    acc1 = ag.zeros((rows, width), ag.f32)
    plain = scales is None
    # SharedBlockScales (serial form only): each step reads its stage's scales, once per half
    shared = isinstance(scales, SharedBlockScales)
    half0 = half1 = None
    row = l0 = r0 = l1 = r1 = None
    if not plain:
        half0, half1 = scales.piece(0, width), scales.piece(1, width)
    if not plain and not shared:
        row, l0, r0 = half0.fetch(0)
        l1, r1 = half1.fetch_weights(0)

    def scaled(half, part, col, left, right):
        return part if plain else part * half.combine_column(col, left, right)

    if overlap:
        part0 = ag.zeros((rows, width), ag.f32)
        part1 = ag.zeros((rows, width), ag.f32)
    for k in ag.range(k_steps):
        if not plain and not shared:   # past the end: zeros
            next_row, next_l0, next_r0 = half0.fetch(k + 1)
            next_l1, next_r1 = half1.fetch_weights(k + 1)
        # the activation scales of both halves as one [rows, 1] column, expanded once: the
        # carried vector is read once, so it keeps the accumulator's row layout
        col = None if plain or shared else row[:, None]
        if overlap:
            with ring.pipe.consume() as stage:
                _half(ring, stage, wg, rows, 0, part0)
                _half(ring, stage, wg, rows, 1, part1)
                acc0 = acc0 + scaled(half0, part0, col, l0, r0)
            acc1 = acc1 + scaled(half1, part1, col, l1, r1)
        else:
            with ring.pipe.consume() as stage:
                col1 = col
                if shared:   # read twice: one read used by both halves took a blocked layout
                    col, l0, r0 = half0.read(stage, wg, half0.planes == 2, k)
                    col1, l1, r1 = half1.read(stage, wg, half1.planes == 2, k)
                if not plain:
                    # both halves' scales before the first wgmma: no register work runs
                    # beside a group, so its wait is not pinned (lower/sync.py)
                    scale0 = half0.combine_column(col, l0, r0)
                    scale1 = half1.combine_column(col1, l1, r1)
                with _turn(stagger, "half0"):
                    first = _half(ring, stage, wg, rows, 0)
                # promoted before half 1's wgmma is issued: lower/carried.py places the
                # carried update right after it is made, so one partial is live at a time
                acc0 = acc0 + (first if plain else first * scale0)
                # pinned behind that promotion: ptxas hoisted it into half 0's FFMAs, where
                # both partials are live (the docstring)
                with _turn(stagger, "half1"):
                    second = _half(ring, stage, wg, rows, 1, pinned=True)
                acc1 = acc1 + (second if plain else second * scale1)
        if not plain and not shared:
            row, l0, r0 = next_row, next_l0, next_r0
            l1, r1 = next_l1, next_r1
    return acc0, acc1


def _turn(stagger: bool, name: str):
    """An ordered section named `name` (Fp8GemmSchedule.stagger), or no section."""
    return ag.ordered(name) if stagger else contextlib.nullcontext()


def _half(ring: OperandRing, stage, wg, rows: int, j: int, part=None, *,
          pinned: bool = False):
    """Column half j of this step's K block for warpgroup wg's rows: into `part`, overwriting
    it (scale-d = 0), or into a fresh partial made here (returned); `pinned`: issued behind
    the work before it (ag.wgmma)."""
    width = ring.bn // 2
    a = ring.a[stage].rows_of(wg * rows, rows)
    b = ring.b[stage].rows_of(j * width, width)
    if part is not None:
        ag.wgmma(a, b, part, overwrite=True, pinned=pinned)
        return part
    fresh = ag.zeros((rows, width), ag.f32, by_wgmma=True)
    ag.wgmma(a, b, fresh, pinned=pinned)
    return fresh


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
        return (per_row, *self.fetch_weights(k))

    def fetch_weights(self, k):
        """The weight scales of block k: (left, right or None), 0 past N or K."""
        block = self.first_col // SCALE_BLOCK
        left = ag.load_scalar(self.scale_b, (block, k))
        right = ag.load_scalar(self.scale_b, (block + 1, k)) if self.straddles else None
        return left, right

    def piece(self, j: int, width: int) -> "BlockScales":
        """These scales for the j-th `width`-column piece of the tile (n_split halves)."""
        return dataclasses.replace(self, first_col=self.first_col + j * width, bn=width)

    def combine(self, per_row, left, right):
        """The block's scale as a tile that broadcasts against a 64 x bn partial."""
        if right is None:
            return (per_row * left)[:, None]
        return self.combine_column(per_row[:, None], left, right)

    def combine_column(self, column, left, right):
        """`combine` of per-row scales given as a [rows, 1] column (expanded once for two
        column halves: n_split)."""
        if right is None:
            return column * left
        # columns before the next weight block's first column take the left block's scale
        split = (self.first_col // SCALE_BLOCK + 1) * SCALE_BLOCK - self.first_col
        return column * ag.where(ag.arange(self.bn)[None, :] < split, left, right)


@dataclass(frozen=True)
class SharedBlockScales:
    """Block scales through shared memory (DeepGEMM's path): with each ring stage the producer
    TMA-loads the activation scales of the unit's bm rows for the step's K block and the
    weight scales of the tile's one or two 128-column blocks (two where a tile straddles a
    weight block, or the gate and up planes of the MoE gate-up), and the consumer reads them
    in its consume step, before the slot is released.

    A TMA box is at least 16 bytes wide, so each row of a box holds SCALE_BOX f32: the four
    K blocks 4j .. 4j + 3 around the step's block k = 4j + i (TMA's zero fill past K), of
    which the consumer reads column i. The box starts at block 4j, not k: a TMA tile copy
    whose innermost coordinate times the element size is not a multiple of 16 bytes stops
    the kernel with an illegal instruction on Hopper (cuTensorMapEncodeTiled cannot refuse
    it: coordinates are runtime values; found by Triton, triton-lang/triton#7385, and
    TileLang, tile-ai/tilelang#2527; DeepGEMM keeps the K block an outer coordinate of its
    scale copies). Loading at k trapped on the H200 at every k % 4 != 0 (issue 18,
    compute-sanitizer 2026-12-03: the scale_a copy of 1000x300x640). Hence scale_a K-major
    ([M, K/128] with 16-byte row pitches: the box is four columns of it, bm rows deep) and
    scale_b as it is ([N/128, K/128], rows 16-byte pitched). Rows past M and blocks past N
    or K read TMA's zeros, as the global loads' fill did."""

    sa: object               # SmemBuffer (stages, bm, SCALE_BOX) f32
    sb: object               # SmemBuffer (stages, SB_ROWS, SCALE_BOX) f32: planes rows used
    scale_a: object          # [M, K/128] f32 (K-major)
    scale_b: object          # [N/128, K/128] f32, or a grouped kernel's per-expert tensor
    bm: int
    bn: int
    rows: int
    planes: int              # 1, or 2: a straddling tile / the gate-up's two planes
    split: object = None     # planes == 2: the tile's first column of the second scale

    @classmethod
    def alloc(cls, s: Fp8GemmSchedule, scale_a, scale_b, *,
              planes: int | None = None) -> "SharedBlockScales":
        """The per-stage scale buffers of schedule s (allocated after the ring)."""
        planes = planes or (1 if SCALE_BLOCK % s.bn == 0 else 2)
        sa = ag.smem((s.stages, s.bm, SCALE_BOX), ag.f32)
        # a TMA destination starts on 128 B (CUDA Programming Guide, TMA alignment: the shared
        # memory address; DeepGEMM asserts it for its scale stages): a stage of `planes` rows
        # of 16 B would put stages 1.. at 16 B steps, so each stage takes SB_ROWS rows
        sb = ag.smem((s.stages, SB_ROWS, SCALE_BOX), ag.f32)
        return cls(sa, sb, scale_a, scale_b, s.bm, s.bn, s.bm // s.consumers, planes)

    def load(self, ring: OperandRing, k_steps, A, W, unit: Unit, *, rank=0,
             cluster: int = 1, b_coords=None) -> None:
        """The producer's loop for one unit: OperandRing.load's A and W tiles, and in the same
        stage (one full barrier, its bytes counted) the scale boxes of block k's group of
        SCALE_BOX blocks. `b_coords(kq)`: the weight scales' box origin for the group's first
        block kq (default: the tile's first 128-column block, kq)."""
        for k in ag.range(k_steps):
            with ring.pipe.produce() as stage:
                k0 = k * ring.bk
                load_tile(ring.a[stage], 0, A, unit.batch, unit.m, ring.bm, k0, ring.bk)
                load_tile(ring.b[stage], 0, W, unit.batch, unit.n, ring.bn, k0, ring.bk,
                          rank=rank, share=cluster)
                # the boxes start at the 16-byte aligned block 4j of k = 4j + i (`read`
                # takes column i): an unaligned innermost coordinate traps (class docstring)
                kq = k // SCALE_BOX * SCALE_BOX
                ag.tma.load(self.sa[stage], self.scale_a, (unit.m * self.bm, kq))
                coords = b_coords(kq) if b_coords is not None else \
                    (unit.n * self.bn // SCALE_BLOCK, kq)
                box = (1,) * (len(coords) - 2) + (self.planes, SCALE_BOX)
                ag.tma.load(self.sb[stage].rows_of(0, self.planes), self.scale_b, coords,
                            box=box)

    def initial(self):
        """Placeholders for `read`'s results before the first step (never used as scales)."""
        one = ag.zeros((1, 1), ag.f32)
        return (ag.zeros((self.rows, 1), ag.f32), one,
                ag.zeros((1, 1), ag.f32) if self.planes == 2 else None)

    def read(self, stage, wg, two: bool, k):
        """Warpgroup wg's scales of this stage's K block k, read from shared memory: its rows'
        activation scales [rows, 1] and the weight scale(s) [1, 1] (the second None unless
        the tile takes two: `two`), column k % SCALE_BOX of the stage's boxes (`load`)."""
        i = k % SCALE_BOX
        per_row = _column(ag.load_shared(self.sa[stage].rows_of(wg * self.rows, self.rows)), i)
        w = ag.load_shared(self.sb[stage].rows_of(0, self.planes))
        if not two:
            return per_row, _column(w, i), None
        return per_row, _column(w[0:1, :], i), _column(w[1:2, :], i)

    def read_plane(self, stage, wg, plane, k):
        """`read` with one weight scale: row `plane` (a runtime index) of the stage's weight
        box, so a warpgroup-dependent choice of block is one shared-memory address, not a
        select in every promoted element (the MoE half tile's column half,
        MoeFp8Schedule.half_tile_last). (per-row [rows, 1], weight [1, 1])."""
        i = k % SCALE_BOX
        per_row = _column(ag.load_shared(self.sa[stage].rows_of(wg * self.rows, self.rows)), i)
        return per_row, _column(ag.load_shared(self.sb[stage].rows_of(plane, 1)), i)

    def for_unit(self, first_col) -> "SharedBlockScales":
        """These buffers for the unit whose tile starts at output column `first_col`: where
        the tile straddles a weight block, its columns before the next block's first take
        the first scale."""
        if self.planes == 1:
            return self
        split = (first_col // SCALE_BLOCK + 1) * SCALE_BLOCK - first_col
        return dataclasses.replace(self, split=split)

    def piece(self, j: int, width: int) -> "SharedBlockScales":
        """These scales for the j-th `width`-column piece of the unit's tile (n_split halves):
        its columns before the second plane's first take the first plane's scale."""
        if self.planes == 1:
            return dataclasses.replace(self, bn=width)
        return dataclasses.replace(self, bn=width, split=self.split - j * width)

    def combine(self, per_row, left, right):
        """The block's scale as a tile that broadcasts against a rows x bn partial."""
        if right is None:
            return per_row * left
        return per_row * ag.where(ag.arange(self.bn)[None, :] < self.split, left, right)

    def combine_column(self, column, left, right):
        """`combine` (its per-row scales are a [rows, 1] column already)."""
        return self.combine(column, left, right)


def _column(box, i):
    """Column i (a runtime index in [0, SCALE_BOX)) of a [rows, SCALE_BOX] tile read from a
    scale box, as [rows, 1]: a select over the four one-wide windows (tile slices take
    trace-time bounds), each of which reads only the rows its user multiplies."""
    pick = box[:, SCALE_BOX - 1:SCALE_BOX]
    for j in range(SCALE_BOX - 2, -1, -1):
        pick = ag.where(ag.full((1, 1), 0, ag.i32) + i == j, box[:, j:j + 1], pick)
    return pick


def weight_blocks_spanned(width: int) -> int:
    """The most 128-column weight blocks one `width`-column accumulator can span: its first
    column is a multiple of gcd(width, 128) past a block's start, at worst 128 - gcd."""
    return -(-(SCALE_BLOCK - math.gcd(width, SCALE_BLOCK) + width) // SCALE_BLOCK)


def _check_weight_blocks(s: Fp8GemmSchedule, width: int, who: str) -> None:
    """Block scales take one or two weight scales per accumulator (`who`'s left and right):
    refuse a width whose accumulators can span three blocks (bn = 152: the tile at column 760
    spans 760..911, blocks 5, 6 and 7, and 896..911 took block 6's scale)."""
    if weight_blocks_spanned(width) > 2:
        ok = [w for w in range(8, 257, 8) if weight_blocks_spanned(w) <= 2 and w > 128]
        raise ag.TraceError(f"block scales: a {width}-column accumulator (bn={s.bn}, "
                            f"n_split={s.n_split}) can span three 128-column weight blocks, and "
                            f"{who} applies at most two weight scales to one",
                            fix=f"use bn <= 128 or one of {ok}, or n_split=2")


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
        if not s.promote or s.smem_scales:
            raise ag.TraceError("block scales are applied when each K block's partial is "
                                "promoted: the block-scaled kernel needs promote=True "
                                "(and smem_scales=False: that kernel reads scale_a K-major)",
                                fix="pass Fp8GemmSchedule(..., promote=True), or "
                                    "gemm_fp8_blockscaled_smem_kernel for smem_scales")
        _refuse_interval(s)
        _check_weight_blocks(s, s.piece, "BlockScales")
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


@functools.cache
def gemm_fp8_blockscaled_smem_kernel(out_dtype: DType = ag.bf16) -> ag.KernelFunction:
    """`gemm_fp8_blockscaled_kernel` with the block scales through shared memory
    (`SharedBlockScales`; Fp8GemmSchedule(promote=True, smem_scales=True)): ScaleA [M, K/128]
    K-major (1x128 activation scales, rows 16-byte pitched: K/128 padded to a multiple of 4 in
    the row stride), ScaleB [N/128, K/128] (rows 16-byte pitched); K a multiple of 128."""
    if out_dtype not in (ag.bf16, ag.f16, ag.f32):
        raise ValueError(f"the fp8 GEMM writes bf16, f16 or f32, not {out_dtype}")

    def gemm_fp8_blockscaled_smem(A: ag.Tensor["M", "K", ag.e4m3],
                                  W: ag.Tensor["N", "K", ag.e4m3],
                                  ScaleA: ag.Tensor["M", "KB", ag.f32],
                                  ScaleB: ag.Tensor["NB", "KB", ag.f32],
                                  C: ag.Tensor["M", "N", out_dtype],
                                  s: Fp8GemmSchedule = Fp8GemmSchedule(
                                      bn=128, stages=6, promote=True, smem_scales=True)):
        if not s.smem_scales:
            raise ag.TraceError("this kernel reads the block scales from shared memory: it "
                                "needs smem_scales=True",
                                fix="pass Fp8GemmSchedule(..., promote=True, smem_scales=True)")
        _refuse_interval(s)
        # the stage holds the weight scales of two blocks for the whole tile
        _check_weight_blocks(s, s.bn, "SharedBlockScales")
        g = _Fp8Gemm.launch(s, A, W, out_dtype)
        scales = SharedBlockScales.alloc(s, ScaleA, ScaleB)
        g.produce(A, W, scales)

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            def finish(tile):
                return tile.to(out_dtype)

            for unit in g.sched.units():
                loop = functools.partial(split_promoted_mma if s.n_split == 2 else
                                         early_release_promoted_mma, stagger=s.stagger)
                acc = loop(g.ring, g.k_steps, wg, scales.for_unit(unit.n * s.bn))
                g.store(C, unit, wg, acc, finish)

    name = "gemm_fp8_blockscaled_smem" if out_dtype == ag.bf16 else \
        f"gemm_fp8_blockscaled_smem_{out_dtype.name}"
    return ag.kernel(gemm_fp8_blockscaled_smem, name=name)
