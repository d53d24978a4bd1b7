"""The library's GEMM kernels: C = A @ B with fp32 accumulation on Hopper's tensor cores.

One DSL kernel, specialized by a small factory (`gemm_kernel`) over what the *problem* fixes:
input and output dtypes, B's layout ("nk": B is [N, K], K contiguous — `x @ W.T` with W
[N, K] row-major; "kn": B is [K, N], N contiguous — `x @ W`), and a batch dimension. What is
tunable lives in `GemmSchedule`, the agent's and the autotuner's action space.

Warp-specialized: one producer warpgroup (40 registers) streams A and B tiles through a
STAGES-deep TMA ring into 128B-swizzled shared memory; `consumers` consumer warpgroups (232
registers) each multiply a 64-row slice of the BM x BN tile with wgmma. The compiler derives
stages, mbarrier parities and expect-tx bytes; its step counters run on across output tiles,
so the persistent variant (one CTA per SM walking tiles in grouped order) stays in phase and
its producer loads the next tile while the consumers store this one.
"""

import functools
from dataclasses import dataclass

import argus as ag
from argus.dtypes import DType
from argus.kernels.split_k_sum import MAX_SPLITS


@dataclass(frozen=True)
class GemmSchedule:
    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    producer_regs: int = 40
    consumer_regs: int = 232
    persistent: bool = True
    num_sms: int = 132      # CTAs of the persistent grid (H100/H200 SXM: 132 SMs)
    group_m: int = 8        # grouped raster: GROUP_M tiles down M before moving along N
    epilogue: str = "direct"  # "direct": st.global from registers; "tma": stmatrix + TMA store
    cluster_m: int = 1      # 2: CTA pairs on vertically adjacent tiles share B by TMA multicast
    zero_by_wgmma: bool = False  # scale-d = 0 on the first wgmma instead of zeroing registers
    k_atoms: int = 1        # 128-byte K slices per stage (longer contiguous reads of each row)
    # K cut into this many slices, each a batch of the batched kernel into an fp32 workspace,
    # then summed (argus/ops/split_k.py): more units of work for skinny GEMMs. Not a kernel
    # choice: argus.ops.matmul runs the split.
    split_k: int = 1
    # swap-AB for skinny GEMMs: the weights (W [N, K] of x @ W.T, or W [K, N] of x @ W, read
    # MN-major) are wgmma's M side (bm rows of W^T per tile) and the tokens its N side (bn of
    # them), so a stage carries bn token rows instead of 64 mostly-empty ones and more of the
    # ring holds weights; the accumulator is a block of C^T, stored transposed.
    swap_ab: bool = False
    # TMA-store epilogue: columns of the tile staged in shared memory per round (0: all bn at
    # once). Fewer columns free shared memory for another ring stage (128x176: 5 stages
    # instead of 4); each further round first waits for the previous round's bulk stores to
    # have read the staging buffer.
    store_cols: int = 0

    def __post_init__(self) -> None:
        problems = []
        if self.epilogue not in ("direct", "tma"):
            problems.append(f"epilogue={self.epilogue!r} is not 'direct' or 'tma'")
        if self.epilogue == "tma" and self.bn % 16:
            problems.append(f"the TMA-store epilogue stores blocks of 64, 32 or 16 columns; "
                            f"bn={self.bn}")
        if not isinstance(self.store_cols, int) or self.store_cols < 0:
            problems.append(f"store_cols={self.store_cols!r} must be an int >= 0 (0: stage "
                            f"the whole tile)")
        elif self.store_cols:
            width = next((w for w in (64, 32, 16) if self.bn % w == 0), 0)
            if self.epilogue != "tma":
                problems.append(f"store_cols={self.store_cols} sizes the TMA-store staging "
                                f"buffer: it needs epilogue='tma'")
            elif width and (self.store_cols % width or self.store_cols > self.bn):
                problems.append(f"store_cols={self.store_cols} must be a multiple of the "
                                f"{width}-column store block in 1..bn={self.bn}")
        if self.consumers < 1 or self.bm != 64 * self.consumers:
            problems.append(f"each consumer warpgroup owns 64 rows: bm={self.bm} needs "
                            f"consumers={self.bm // 64}")
        if self.k_atoms not in (1, 2, 4):
            problems.append(f"k_atoms={self.k_atoms} is not 1, 2 or 4")
        if self.k_atoms > 1 and self.zero_by_wgmma:
            problems.append("zero_by_wgmma needs k_atoms=1 (one wgmma call per stage)")
        if self.swap_ab and self.epilogue != "direct":
            problems.append("swap_ab stores C transposed from registers: use epilogue='direct'")
        if not 1 <= self.split_k <= MAX_SPLITS:
            problems.append(f"split_k={self.split_k} is outside 1..{MAX_SPLITS}")
        if self.split_k > 1 and self.epilogue != "direct":
            problems.append("split_k writes fp32 partials, which the TMA-store epilogue (16-bit "
                            "only) cannot stage: use epilogue='direct'")
        if self.cluster_m not in (1, 2):
            problems.append(f"cluster_m={self.cluster_m}: the kernel pairs at most 2 CTAs")
        if problems:
            raise ValueError("GemmSchedule: " + "; ".join(problems))


def tile_coords(tile, m_tiles, n_tiles, group_m: int):
    """Grouped raster order: consecutive tiles share B columns for group_m rows of tiles, so
    the B tiles they read stay in L2."""
    width = group_m * n_tiles
    group = tile // width
    first_m = group * group_m
    group_size = ag.minimum(m_tiles - first_m, group_m)
    within = tile % width
    return first_m + within % group_size, within // group_size


@functools.lru_cache(maxsize=None)
def gemm_kernel(in_dtype: DType = ag.bf16, out_dtype: DType = ag.bf16, b_layout: str = "nk",
                batched: bool = False) -> ag.KernelFunction:
    """The GEMM kernel for one problem kind (cached: one KernelFunction per kind)."""
    if b_layout not in ("nk", "kn"):
        raise ValueError(f"b_layout must be 'nk' ([N, K], K contiguous) or 'kn' ([K, N]), got "
                         f"{b_layout!r}")
    lead = ("Bt",) if batched else ()
    b_dims = ("N", "K") if b_layout == "nk" else ("K", "N")

    def gemm(A: ag.Tensor[(*lead, "M", "K", in_dtype)],
             B: ag.Tensor[(*lead, *b_dims, in_dtype)],
             C: ag.Tensor[(*lead, "M", "N", out_dtype)],
             s: GemmSchedule = GemmSchedule()):
        M, K = A.shape[-2], A.shape[-1]
        N = B.shape[-2] if b_layout == "nk" else B.shape[-1]
        cs = s.cluster_m
        # The tile's rows come from `lhs` (wgmma's A operand), its columns from `rhs`: A and B,
        # or with swap-AB B and A, in which case the tile is a block of C^T. A [K, N] B is
        # MN-major in whichever role it plays: read in 64-column atoms of [BK][64].
        lhs, rhs = (B, A) if s.swap_ab else (A, B)
        lhs_rows, rhs_rows = (N, M) if s.swap_ab else (M, N)
        mn_major_a = s.swap_ab and b_layout == "kn"
        mn_major_b = not s.swap_ab and b_layout == "kn"
        if s.split_k != 1:
            raise ag.TraceError(f"GemmSchedule(split_k={s.split_k}) is run by argus.ops.matmul "
                                f"(the batched kernel over K-slice views, then a sum), not by "
                                f"the kernel itself", fix="call argus.ops.matmul(a, b, "
                                "schedule=...), or compile the kernel with split_k=1")
        if mn_major_b and s.bn % 64:
            raise ag.TraceError(f"GemmSchedule(bn={s.bn}): an MN-major B ([K, N], N contiguous) "
                                f"is read in 64-column atoms, so bn must be a multiple of 64",
                                fix="use bn=64, 128 or 256 for x @ W with W [K, N]")
        if cs > 1 and (s.bn // cs) % 8 or (mn_major_b and (s.bn // 64) % cs):
            raise ag.TraceError(f"GemmSchedule(bn={s.bn}, cluster_m={cs}): each CTA of the "
                                f"cluster multicasts an equal share of the bn-side operand (B, "
                                f"or the tokens with swap_ab), so bn must split into "
                                f"{cs} parts of whole TMA boxes" +
                                (" (64-column atoms for an MN-major B)" if mn_major_b else ""),
                                fix="use bn=128 or 256 with cluster_m=2, or cluster_m=1")
        # A unit of work is `cs` vertically adjacent tiles, one per CTA of a cluster; the CTAs
        # of a cluster walk the same units, so their pipelines stay in step.
        m_tiles, n_tiles = ag.cdiv(lhs_rows, s.bm), ag.cdiv(rhs_rows, s.bn)
        m_units = ag.cdiv(m_tiles, cs) if cs > 1 else m_tiles
        tiles = m_units * n_tiles
        total = tiles * A.shape[0] if batched else tiles
        clusters = ag.minimum(total, s.num_sms // cs) if s.persistent else total
        (pid,) = ag.grid(clusters * cs, cluster=cs)
        rank = ag.cluster_rank() if cs > 1 else 0
        first, programs = (pid // cs, clusters) if cs > 1 else (pid, clusters)
        # A stage holds k_atoms independent BK-deep slices ("atoms"), stacked along the rows:
        # atom j of A is rows [j*bm, (j+1)*bm), of B rows [j*b_rows, (j+1)*b_rows).
        ka = s.k_atoms
        b_rows = (s.bn // 64) * s.bk if mn_major_b else s.bn
        a_rows = (s.bm // 64) * s.bk if mn_major_a else s.bm
        sA = ag.smem((s.stages, ka * a_rows, 64 if mn_major_a else s.bk), in_dtype, swizzle=128)
        if mn_major_b:  # one [BK][64] box per 64 columns of the B tile
            sB = ag.smem((s.stages, ka * b_rows, 64), in_dtype, swizzle=128)
        else:
            sB = ag.smem((s.stages, ka * b_rows, s.bk), in_dtype, swizzle=128)
        pipe = ag.pipeline(s.stages, consumers=s.consumers)
        k_tiles = ag.cdiv(K, s.bk * ka)
        rows = s.bm // s.consumers
        # TMA-store staging: one swizzled rows x width block per `width` columns: 64 (128-byte
        # swizzle), or 32 / 16 with a 64- / 32-byte swizzle for tiles such as 224 or 176 wide
        width = next(w for w in (64, 32, 16) if s.bn % w == 0)
        blocks = s.bn // width
        # blocks staged per round: all of them, or store_cols / width with further rounds
        staged = (s.store_cols or s.bn) // width
        if s.epilogue == "tma":
            sC = ag.smem((s.consumers * staged, rows, width), out_dtype, swizzle=2 * width)

        def locate(tile):
            """(batch coordinates, m tile, n tile) of a flat unit index, for this CTA."""
            if batched:
                mu, n = tile_coords(tile % tiles, m_units, n_tiles, s.group_m)
                return (tile // tiles,), mu * cs + rank, n
            mu, n = tile_coords(tile, m_units, n_tiles, s.group_m)
            return (), mu * cs + rank, n

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for tile in ag.range(first, total, programs):
                b, m, n = locate(tile)
                for k in ag.range(k_tiles):
                    with pipe.produce() as stage:
                        for atom in range(ka):
                            k0 = (k * ka + atom) * s.bk
                            a_at, b_at = atom * a_rows, atom * b_rows
                            if mn_major_a:  # one [BK][64] box per 64 rows of the tile
                                for j in range(s.bm // 64):
                                    ag.tma.load(sA[stage].rows_of(a_at + j * s.bk, s.bk), lhs,
                                                (*b, k0, m * s.bm + 64 * j))
                            else:
                                ag.tma.load(sA[stage].rows_of(a_at, s.bm), lhs,
                                            (*b, m * s.bm, k0))
                            if mn_major_b:  # each CTA loads blocks/cs column boxes for all
                                for jj in range(blocks // cs):
                                    j = rank * (blocks // cs) + jj
                                    ag.tma.load(sB[stage].rows_of(b_at + j * s.bk, s.bk), B,
                                                (*b, k0, n * s.bn + 64 * j), multicast=cs > 1)
                            elif cs > 1:  # each CTA loads 1/cs of the B rows for all
                                part = s.bn // cs
                                ag.tma.load(sB[stage].rows_of(b_at + rank * part, part), rhs,
                                            (*b, n * s.bn + rank * part, k0), multicast=True)
                            else:
                                ag.tma.load(sB[stage].rows_of(b_at, s.bn), rhs,
                                            (*b, n * s.bn, k0))

        with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
            for tile in ag.range(first, total, programs):
                b, m, n = locate(tile)
                acc = ag.zeros((rows, s.bn), ag.f32, by_wgmma=s.zero_by_wgmma)
                for k in ag.range(k_tiles):
                    with pipe.consume() as stage:
                        for atom in range(ka):
                            # this consumer's 64 rows: one [BK][64] atom if MN-major
                            a_view = sA[stage].rows_of(atom * a_rows + wg * s.bk, s.bk) \
                                if mn_major_a else sA[stage].rows_of(atom * s.bm + wg * rows, rows)
                            ag.wgmma(a_view, sB[stage].rows_of(atom * b_rows, b_rows), acc,
                                     trans_b=mn_major_b, trans_a=mn_major_a)
                if s.epilogue == "tma":
                    # all blocks into smem first, then one run of bulk stores: the copies
                    # proceed while the next tile's MMAs run (codegen defers their read-wait
                    # to the next tile's first stmatrix, or to the next round's: a staging
                    # buffer smaller than the tile is refilled once its stores have read it)
                    for first_block in range(0, blocks, staged):
                        run = range(first_block, min(blocks, first_block + staged))
                        for j in run:
                            ag.stmatrix(sC[wg * staged + j - first_block],
                                        acc[:, width * j:width * (j + 1)].to(out_dtype))
                        for j in run:
                            ag.tma.store(C, (*b, m * s.bm + wg * rows, n * s.bn + width * j),
                                         sC[wg * staged + j - first_block])
                elif s.swap_ab:  # acc is a block of C^T: rows are C's columns
                    ag.store(C, (*b, n * s.bn, m * s.bm + wg * rows), acc.to(out_dtype),
                             transposed=True)
                else:
                    ag.store(C, (*b, m * s.bm + wg * rows, n * s.bn), acc.to(out_dtype))

    default = (in_dtype, out_dtype, b_layout, batched) == (ag.bf16, ag.bf16, "nk", False)
    name = "gemm" if default else (f"gemm_{in_dtype.name}_{out_dtype.name}_{b_layout}"
                                   + ("_batched" if batched else ""))
    return ag.kernel(gemm, name=name)


gemm = gemm_kernel()
