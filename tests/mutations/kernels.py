"""Base kernels of the mutation corpus, written in the DSL: a warp-specialized GEMM, an
attention-like kernel (S = Q K^T, row statistics, P V), an MoE-like grouped GEMM whose weight
tile is chosen by expert, and elementwise/softmax-like kernels.

Each factory takes `bug=None` (the correct kernel) or the name of one seeded bug; the mutated
line carries a `# BUG:<name>` marker so tests can check the verifier's program point. Trace
time Python `if`s pick the variant: the IR of a variant differs from the base only there.
"""

from __future__ import annotations

import argus as ag

INF = float("inf")


def make_gemm(bug: str | None = None, stages: int = 4, consumers: int = 2):
    """C[M, N] = A[M, K] @ B[N, K]^T; 1 producer + `consumers` consumer warpgroups."""
    BM, BN, BK = 64 * consumers, 128, 64

    @ag.kernel(name="ws_gemm")
    def ws_gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        if bug == "grid_too_small":
            grid_m = ag.cdiv(M, 2 * BM)  # BUG:grid_too_small
        else:
            grid_m = ag.cdiv(M, BM)
        pid_m, pid_n = ag.grid(grid_m, ag.cdiv(N, BN))
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        arrivals = 1 if bug == "pipeline_consumers" else consumers
        pipe = ag.pipeline(stages, consumers=arrivals)  # BUG:pipeline_consumers
        if bug == "k_tiles_floor":
            k_tiles = K // BK  # BUG:k_tiles_floor
        else:
            k_tiles = ag.cdiv(K, BK)
        producers = 2 if bug == "two_producers" else 1
        with ag.role("producer", warpgroups=producers, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:  # BUG:two_producers
                    if bug == "a_swapped_coords":
                        ag.tma.load(sA[st], A, (k * BK, pid_m * BM))  # BUG:a_swapped_coords
                    elif bug == "a_wrong_row":
                        ag.tma.load(sA[st], A, (pid_m * BM + 64, k * BK))  # BUG:a_wrong_row
                    elif bug == "k_double_count":
                        ag.tma.load(sA[st], A, (pid_m * BM, (k // 2) * BK))  # BUG:k_double_count
                    elif bug == "k_reversed_legal":
                        ag.tma.load(sA[st], A, (pid_m * BM, (k_tiles - 1 - k) * BK))
                    elif bug == "a_k_half":
                        ag.tma.load(sA[st], A, (pid_m * BM, k * (BK // 2)))  # BUG:a_k_half
                    else:
                        ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if bug == "b_wrong_k":
                        ag.tma.load(sB[st], B, (pid_n * BN, k * BK + BK))  # BUG:b_wrong_k
                    elif bug == "b_wrong_n":
                        ag.tma.load(sB[st], B, (pid_n * BN + 64, k * BK))  # BUG:b_wrong_n
                    elif bug == "k_double_count":
                        ag.tma.load(sB[st], B, (pid_n * BN, (k // 2) * BK))
                    elif bug == "k_reversed_legal":
                        ag.tma.load(sB[st], B, (pid_n * BN, (k_tiles - 1 - k) * BK))
                    else:
                        ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        nwg = consumers + 1 if bug == "view_out_of_buffer" else consumers
        with ag.role("consumer", warpgroups=nwg, regs=232 if nwg <= 2 else 152) as wg:  # 3 x 232 + 40 exceeds the 64K file
            acc = ag.zeros((64, BN), ag.f32)
            k_steps = k_tiles - 1 if bug == "consumer_skips_last_k" else k_tiles
            for k in ag.range(k_steps):  # BUG:consumer_skips_last_k
                with pipe.consume() as st:
                    if bug == "wrong_operand_slice":
                        a = sA[st].rows_of(0, 64)  # BUG:wrong_operand_slice
                    elif bug == "view_out_of_buffer":
                        a = sA[st].rows_of(wg * 64, 64)  # BUG:view_out_of_buffer
                    else:
                        a = sA[st].rows_of(wg * 64, 64)
                    if bug == "read_wrong_stage":
                        ag.wgmma(a, sB[(st + 1) % stages], acc)  # BUG:read_wrong_stage
                    elif bug == "b_is_a_buffer":
                        ag.wgmma(a, sA[st], acc)  # BUG:b_is_a_buffer
                    elif bug != "wgmma_after_consume":
                        ag.wgmma(a, sB[st], acc)
                if bug == "wgmma_after_consume":
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)  # BUG:wgmma_after_consume
            if bug == "store_missing_wg_offset":
                ag.store(C, (pid_m * BM, pid_n * BN), acc.to(ag.bf16))  # BUG:store_missing_wg_offset
            elif bug == "store_swapped_offsets":
                ag.store(C, (pid_n * BN, pid_m * BM + wg * 64), acc.to(ag.bf16))  # BUG:store_swapped_offsets
            else:
                ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return ws_gemm


def make_persistent_gemm(bug: str | None = None, stages: int = 3, group_m: int = 4,
                         num_sms: int = 132):
    """The library GEMM's tile scheduler, spelled out: a persistent grid of min(tiles, SMs)
    CTAs, each walking units pid, pid + programs, ...; a unit is a tile in grouped raster
    order (group_m tiles down M before moving along N, the last group shorter)."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="persistent_gemm")
    def persistent_gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                        C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        m_tiles, n_tiles = ag.cdiv(M, BM), ag.cdiv(N, BN)
        total = m_tiles * n_tiles
        programs = ag.minimum(total, num_sms)
        (pid,) = ag.grid(programs)
        stride = programs + 1 if bug == "stride_past_grid" else programs  # BUG:stride_past_grid
        k_tiles = ag.cdiv(K, BK)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)

        def tile_of(unit):
            width = group_m * n_tiles
            first_m = (unit // width) * group_m
            group_size = ag.minimum(m_tiles - first_m, group_m)
            within = unit % width
            if bug == "raster_full_groups":
                tile_n = within // group_m  # BUG:raster_full_groups
            else:
                tile_n = within // group_size
            if bug == "raster_row_repeat":
                tile_m = first_m + within % group_m // 2 * 2  # BUG:raster_row_repeat
            else:
                tile_m = first_m + within % group_size
            return tile_m, tile_n

        with ag.role("producer", warpgroups=1, regs=40):
            for unit in ag.range(pid, total, stride):
                tile_m, tile_n = tile_of(unit)
                for k in ag.range(k_tiles):
                    with pipe.produce() as st:
                        ag.tma.load(sA[st], A, (tile_m * BM, k * BK))
                        ag.tma.load(sB[st], B, (tile_n * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for unit in ag.range(pid, total, stride):
                tile_m, tile_n = tile_of(unit)
                acc = ag.zeros((64, BN), ag.f32)
                for k in ag.range(k_tiles):
                    with pipe.consume() as st:
                        ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
                ag.store(C, (tile_m * BM + wg * 64, tile_n * BN), acc.to(ag.bf16))

    return persistent_gemm


def make_attention(bug: str | None = None):
    """One Q block of 64 rows per CTA, KV blocks of 64 through a 2-stage ring; head dim 64.
    S = Q K^T, P = exp(S - rowmax(S)) through shared memory, O += P V (V MN-major: one
    [64 kv][64 d] column atom). Row statistics are checked with tag assertions."""

    @ag.kernel(name="attention")
    def attention(Q: ag.Tensor["Sq", "D", ag.bf16], K: ag.Tensor["Skv", "D", ag.bf16],
                  V: ag.Tensor["Skv", "D", ag.bf16], Lse: ag.Tensor["Sq", 1, ag.f32],
                  O: ag.Tensor["Sq", "D", ag.bf16]):
        Sq, Skv = Q.shape[0], K.shape[0]
        ag.tag_assume(lambda: ag.sym(Q.shape[1]) <= 64)  # head dim 64: one tile wide
        (pid,) = ag.grid(ag.cdiv(Sq, 64))
        sQ = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        sK = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sV = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        sP = ag.smem((64, 64), ag.bf16, swizzle=128)
        qpipe = ag.pipeline(1)
        kvpipe = ag.pipeline(2)
        kv_tiles = ag.cdiv(Skv, 64)
        with ag.role("producer", warpgroups=1, regs=40):
            with qpipe.produce() as qs:
                if bug == "q_wrong_rows":
                    ag.tma.load(sQ[qs], Q, (pid * 64 + 64, 0))  # BUG:q_wrong_rows
                else:
                    ag.tma.load(sQ[qs], Q, (pid * 64, 0))
            for j in ag.range(kv_tiles):
                with kvpipe.produce() as st:
                    if bug == "k_next_block":
                        ag.tma.load(sK[st], K, (j * 64 + 64, 0))  # BUG:k_next_block
                    else:
                        ag.tma.load(sK[st], K, (j * 64, 0))
                    if bug == "v_wrong_rows":
                        ag.tma.load(sV[st], V, (j * 64 + 64, 0))  # BUG:v_wrong_rows
                    else:
                        ag.tma.load(sV[st], V, (j * 64, 0))
        with ag.role("consumer", warpgroups=1, regs=232):
            o = ag.zeros((64, 64), ag.f32)
            with qpipe.consume() as qs:
                for j in ag.range(kv_tiles):
                    with kvpipe.consume() as st:
                        s = ag.zeros((64, 64), ag.f32)
                        ag.wgmma(sQ[qs], sK[st], s)
                        # keys past Skv are zero-filled by TMA: -inf before the row max
                        s = ag.where(j * 64 + ag.arange(64)[None, :] < Skv, s, -INF)
                        if bug == "rowmax_wrong_axis":
                            m = s.max(axis=0)  # BUG:rowmax_wrong_axis
                            ag.tag_assert(ag.tag(m).sq == ag.tag(s).sq,
                                          message="the row max belongs to the row it rescales")
                        else:
                            m = s.max(axis=1)
                            ag.tag_assert(ag.tag(m).sq == ag.tag(s).sq,
                                          message="the row max belongs to the row it rescales")
                        if bug == "lse_wrong_row":
                            lse = ag.load(Lse, (pid * 64 + 1, 0), (64, 1))  # BUG:lse_wrong_row
                        else:
                            lse = ag.load(Lse, (pid * 64, 0), (64, 1))
                        p = ag.exp(s - m) * lse
                        ag.stmatrix(sP.view(), p.to(ag.bf16))
                        if bug == "v_stage_mixed":
                            ag.wgmma(sP.view(), sV[(st + 1) % 2], o, trans_b=True)  # BUG:v_stage_mixed
                        else:
                            ag.tag_assert(ag.tag(sP.view()).skv == ag.tag(sV[st]).skv,
                                          message="P's key index is V's row")
                            ag.wgmma(sP.view(), sV[st], o, trans_b=True)
            if bug == "o_wrong_rows":
                ag.store(O, (pid * 64 + 64, 0), o.to(ag.bf16))  # BUG:o_wrong_rows
            else:
                ag.store(O, (pid * 64, 0), o.to(ag.bf16))

    return attention


def make_moe(bug: str | None = None, tiles_per_expert: int = 4, axiom: bool = True):
    """Grouped expert GEMM over tokens permuted so that expert e owns rows
    [e * CAP, (e + 1) * CAP) (CAP = tiles_per_expert * 128, DeepGEMM's contiguous layout):
    Y[t, :] = X[t, :] @ W[e(t)]^T with W stacked as [E * NE, H]. route(t) is the router's
    (opaque) token -> expert map; the permute kernel guarantees route(t) == t // CAP."""
    BM, BN, BK = 128, 128, 64
    CAP = tiles_per_expert * BM
    NE = 256  # output features per expert
    route = ag.opaque("route")

    @ag.kernel(name="moe_gemm")
    def moe_gemm(X: ag.Tensor["T", "H", ag.bf16], W: ag.Tensor["EN", "H", ag.bf16],
                 Y: ag.Tensor["T", "NO", ag.bf16]):
        T, H = X.shape
        ag.tag_assume(lambda: ag.sym(Y.shape[1]) <= NE)  # one expert's output features
        ag.tag_tensor(X, expert=lambda t, h: route(t))
        ag.tag_tensor(W, expert=lambda r, h: r // NE)
        if axiom:
            ag.tag_assume(lambda t: route(t) == t // CAP)
        pid_m, pid_n = ag.grid(ag.cdiv(T, BM), NE // BN)
        if bug == "expert_from_pid_n":
            e = pid_n  # BUG:expert_from_pid_n
        elif bug == "expert_mod":
            e = pid_m % tiles_per_expert  # BUG:expert_mod
        elif bug == "expert_plus_one":
            e = pid_m // tiles_per_expert + 1  # BUG:expert_plus_one
        else:
            e = pid_m // tiles_per_expert
        sX = ag.smem((3, BM, BK), ag.bf16, swizzle=128)
        sW = ag.smem((3, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(3, consumers=2)
        k_tiles = ag.cdiv(H, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    if bug == "x_wrong_k":
                        ag.tma.load(sX[st], X, (pid_m * BM, k * BK + BK))  # BUG:x_wrong_k
                    else:
                        ag.tma.load(sX[st], X, (pid_m * BM, k * BK))
                    ag.tma.load(sW[st], W, (e * NE + pid_n * BN, k * BK))  # BUG:expert_mod BUG:expert_from_pid_n
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sX[st].rows_of(wg * 64, 64), sW[st], acc)
            if bug == "y_wrong_rows":
                ag.store(Y, (pid_m * BM + wg * 64 + BM, pid_n * BN), acc.to(ag.bf16))  # BUG:y_wrong_rows
            else:
                ag.store(Y, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return moe_gemm


def make_bias_gelu(bug: str | None = None):
    @ag.kernel(threads=256, name="bias_act")
    def bias_act(X: ag.Tensor["M", "N", ag.f32], bias: ag.Tensor[1, "N", ag.f32],
                 Y: ag.Tensor["M", "N", ag.f32]):
        ROWS, BN = 4, 1024
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
        x = ag.load(X, (pid_m * ROWS, pid_n * BN), (ROWS, BN))
        if bug == "bias_wrong_offset":
            b = ag.load(bias, (0, 0), (1, BN))  # BUG:bias_wrong_offset
        else:
            b = ag.load(bias, (0, pid_n * BN), (1, BN))
        y = ag.relu(x + b)
        if bug == "store_wrong_rows":
            ag.store(Y, (pid_m * ROWS + 1, pid_n * BN), y)  # BUG:store_wrong_rows
        else:
            ag.store(Y, (pid_m * ROWS, pid_n * BN), y)

    return bias_act


def make_select_transpose(bug: str | None = None):
    """Y = X^T through a one-hot selection, as argus/compose/launch.py's transpose: element
    (i, j, k) of the [R, C, R] tile keeps x[i, j] where i == k, and the sum over i places it at
    (j, k). The sum adds zeros only where the mask pins i to k; a mask that keeps several i, or
    pins i to another index, stores mixed or foreign rows."""
    @ag.kernel(threads=128, name="select_transpose")
    def select_transpose(X: ag.Tensor["B", "R", "C", ag.f32],
                         Y: ag.Tensor["B", "C", "R", ag.f32]):
        BR, BC = 16, 32
        pid_r, pid_c, b = ag.grid(ag.cdiv(X.shape[1], BR), ag.cdiv(X.shape[2], BC), X.shape[0])
        x = ag.load(X, (b, pid_r * BR, pid_c * BC), (BR, BC))
        i = ag.arange(BR)[:, None, None]
        k = ag.arange(BR)[None, None, :]
        if bug == "mask_keeps_prefix":
            sel = i <= k  # BUG:mask_keeps_prefix
        elif bug == "mask_next_row":
            sel = i == k + 1  # BUG:mask_next_row
        elif bug == "mask_column":
            sel = i == ag.arange(BC)[None, :, None]  # BUG:mask_column
        elif bug == "mask_drops_column":
            sel = (i == k) & (k < BR - 1)  # BUG:mask_drops_column
        elif bug == "mask_never":
            sel = i == k + BR  # BUG:mask_never
        elif bug == "mask_wraps":
            sel = (i * 65536) * 65536 == (k * 65536) * 65536  # BUG:mask_wraps
        else:
            sel = i == k
        t = ag.where(sel, x[:, :, None], 0.0).sum(axis=0)          # [1, BC, BR]
        ag.store(Y, (b, pid_c * BC, pid_r * BR), t)

    return select_transpose


def make_softmax(bug: str | None = None):
    @ag.kernel(threads=256, name="row_softmax")
    def row_softmax(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        ROWS, BN = 2, 1024
        (pid,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
        ag.tag_assume(lambda: ag.sym(X.shape[1]) <= BN)  # the launcher picks BN >= N
        if bug == "fill_default_zero":
            x = ag.load(X, (pid * ROWS, 0), (ROWS, BN))  # BUG:fill_default_zero
        else:
            x = ag.load(X, (pid * ROWS, 0), (ROWS, BN), other=-INF)
        if bug == "max_of_other_rows":
            x2 = ag.load(X, (pid * ROWS + 1, 0), (ROWS, BN), other=-INF)  # BUG:max_of_other_rows
            m = x2.max(axis=1)
        else:
            m = x.max(axis=1)
        e = ag.exp(x - m)
        s = e.sum(axis=1)
        ag.store(Y, (pid * ROWS, 0), e / s)

    return row_softmax


def make_cluster_gemm(bug: str | None = None, stages: int = 4):
    """2x1 thread-block clusters: the two CTAs of a cluster compute vertically adjacent
    128 x 128 tiles of C = A @ B^T with the same B tile, so each CTA loads half of the B rows
    and multicasts them into both CTAs (the library GEMM's cluster_m=2 scheme, non-persistent)."""
    BM, BN, BK, CS = 128, 128, 64, 2
    part = BN // CS

    @ag.kernel(name="cluster_gemm")
    def cluster_gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                     C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        if bug == "grid_not_multiple":
            grid_m = ag.cdiv(M, BM)  # BUG:grid_not_multiple
        else:
            grid_m = ag.cdiv(M, CS * BM) * CS
        pid_m, pid_n = ag.grid(grid_m, ag.cdiv(N, BN), cluster=CS)
        rank = ag.cluster_rank()
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    if bug == "a_rank_rows":
                        ag.tma.load(sA[st], A, (pid_m * BM + rank * 64, k * BK))  # BUG:a_rank_rows
                    else:
                        ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if bug == "multicast_overlap":
                        ag.tma.load(sB[st].rows_of(0, part), B, (pid_n * BN, k * BK), multicast=True)  # BUG:multicast_overlap
                    else:
                        ag.tma.load(sB[st].rows_of(rank * part, part), B,
                                    (pid_n * BN + rank * part, k * BK), multicast=True)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return cluster_gemm


def make_batched_kn_gemm(bug: str | None = None, stages: int = 4):
    """C[b] = A[b] @ B[b] with B [Bt, K, N] (N contiguous): wgmma reads B MN-major, stored as
    one [BK][64] column box per 64 columns of the tile (the library's batched "kn" GEMM)."""
    BM, BN, BK = 128, 128, 64
    blocks = BN // 64

    @ag.kernel(name="batched_kn_gemm")
    def batched_kn_gemm(A: ag.Tensor["Bt", "M", "K", ag.bf16],
                        B: ag.Tensor["Bt", "K", "N", ag.bf16],
                        C: ag.Tensor["Bt", "M", "N", ag.bf16]):
        BT, M, K = A.shape
        N = B.shape[2]
        pid_m, pid_n, pid_b = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN), BT)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, blocks * BK, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_b, pid_m * BM, k * BK))
                    for j in range(blocks):
                        if bug == "b_batch_zero":
                            ag.tma.load(sB[st].rows_of(j * BK, BK), B, (0, k * BK, pid_n * BN + 64 * j))  # BUG:b_batch_zero
                        else:
                            ag.tma.load(sB[st].rows_of(j * BK, BK), B,
                                        (pid_b, k * BK, pid_n * BN + 64 * j))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc, trans_b=True)
            if bug == "c_wrong_batch":
                ag.store(C, (pid_b + 1, pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))  # BUG:c_wrong_batch
            else:
                ag.store(C, (pid_b, pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return batched_kn_gemm


def make_fa_qonce(bug: str | None = None, BN: int = 64, stages: int = 2, causal: bool = False):
    """FlashAttention forward, the FA3 shape: the producer loads the Q tile once through a
    one-stage pipeline and streams K and V through a ring; the consumer waits for Q once, keeps
    reading it for every KV block (S = Q K^T), keeps m and l as loop-carried row statistics and
    multiplies P (registers) by V. One consume step of the Q pipeline per CTA, with a wgmma
    group kept in flight: a deadlock only with two or more steps. Head dim 64. `causal`: query
    i sees keys j <= i + SK - S (bottom-right aligned), blocks past the diagonal are not
    loaded, and a tag assertion states what the mask keeps."""
    D, atoms = 64, 1

    @ag.kernel(name="fa_qonce")
    def fa_qonce(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", "SK", 64, ag.bf16],
                 V: ag.Tensor["BH", "SK", 64, ag.bf16], O: ag.Tensor["BH", "S", 64, ag.bf16]):
        S, SK = Q.shape[1], K.shape[1]
        pid, bh = ag.grid(ag.cdiv(S, 64), Q.shape[0])
        q0 = pid * 64
        blocks = ag.cdiv(SK, BN)
        if causal:   # the last row's last key is q0 + 63 + SK - S
            if bug == "causal_blocks_short":
                blocks = ag.minimum(blocks, ag.maximum(ag.cdiv(q0 + SK - S, BN), 0))  # BUG:causal_blocks_short
            else:
                blocks = ag.minimum(blocks, ag.maximum(ag.cdiv(q0 + 64 + SK - S, BN), 0))
        sQ = ag.smem((1, atoms * 64, 64), ag.bf16, swizzle=128)
        sK = ag.smem((stages, atoms * BN, 64), ag.bf16, swizzle=128)
        sV = ag.smem((stages, atoms * BN, 64), ag.bf16, swizzle=128)
        q_pipe = ag.pipeline(1, consumers=1)
        kv_pipe = ag.pipeline(stages, consumers=1)
        with ag.role("producer", warpgroups=1):
            with q_pipe.produce() as qs:
                for a in range(atoms):
                    if bug == "q_wrong_rows":
                        ag.tma.load(sQ[qs].rows_of(a * 64, 64), Q, (bh, q0 + 64, 64 * a))  # BUG:q_wrong_rows
                    else:
                        ag.tma.load(sQ[qs].rows_of(a * 64, 64), Q, (bh, q0, 64 * a))
            for j in ag.range(blocks):
                with kv_pipe.produce() as st:
                    for a in range(atoms):
                        ag.tma.load(sK[st].rows_of(a * BN, BN), K, (bh, j * BN, 64 * a))
                        if bug == "v_next_block":
                            ag.tma.load(sV[st].rows_of(a * BN, BN), V, (bh, j * BN + BN, 64 * a))  # BUG:v_next_block
                        else:
                            ag.tma.load(sV[st].rows_of(a * BN, BN), V, (bh, j * BN, 64 * a))
        with ag.role("consumer", warpgroups=1):
            m = ag.full((64, 1), -INF)
            l_sum = ag.full((64, 1), 0.0)
            o = ag.zeros((64, D))
            with q_pipe.consume() as qs:
                kv_steps = blocks - 1 if bug == "kv_skips_last" else blocks  # BUG:kv_skips_last
                for j in ag.range(kv_steps):
                    with kv_pipe.consume() as st:
                        s = ag.zeros((64, BN))
                        for a in range(atoms):
                            if bug == "k_stage_mixed":
                                s = ag.wgmma(sQ[qs].rows_of(a * 64, 64), sK[(st + 1) % stages].rows_of(a * BN, BN), s)  # BUG:k_stage_mixed
                            else:
                                s = ag.wgmma(sQ[qs].rows_of(a * 64, 64),
                                             sK[st].rows_of(a * BN, BN), s)
                        key = j * BN + ag.arange(BN)[None, :]
                        if causal:
                            row = q0 + ag.arange(64)[:, None] + (SK - S)   # its last key
                            if bug == "mask_off_by_one":
                                valid = (key < SK) & (key < row)  # BUG:mask_off_by_one
                            elif bug == "mask_block_offset":
                                valid = (ag.arange(BN)[None, :] < SK) & (ag.arange(BN)[None, :] <= row)  # BUG:mask_block_offset
                            else:
                                valid = (key < SK) & (key <= row)
                            s = ag.where(valid, s * 1.4426950408889634, -INF)
                            # the mask keeps exactly the keys up to the query's diagonal
                            ag.tag_assert((ag.tag(s).live == 1) == ag.tag_all(
                                ag.tag(s).sk <= ag.tag(s).s + ag.sym(SK) - ag.sym(S),
                                ag.tag(s).sk < ag.sym(SK)), message="causal mask")
                            # the loop reaches every key a row may see: with reduce.coverage's
                            # each-key-once, every allowed key exactly once
                            ag.tag_assert(ag.tag_any(
                                ag.sym(blocks) * BN >= ag.sym(SK),
                                ag.sym(blocks) * BN > ag.tag(s).s + ag.sym(SK) - ag.sym(S)),
                                message="the KV loop reaches every key the query may see")
                        elif bug == "mask_fill_zero":
                            s = ag.where(key < SK, s * 1.4426950408889634, 0.0)  # BUG:mask_fill_zero
                        elif bug == "no_mask":
                            s = s * 1.4426950408889634  # BUG:no_mask
                        else:
                            s = ag.where(key < SK, s * 1.4426950408889634, -INF)
                        m_new = ag.maximum(m, s.max(axis=1))
                        m_use = ag.where(m_new == -INF, 0.0, m_new)
                        p = ag.exp2(s - m_use)
                        if bug == "rescale_new_max":
                            alpha = ag.exp2(m_use - m_use)  # BUG:rescale_new_max
                        else:
                            alpha = ag.exp2(m - m_use)
                        if bug == "l_not_rescaled":
                            l_sum = l_sum + p.sum(axis=1)  # BUG:l_not_rescaled
                        else:
                            l_sum = l_sum * alpha + p.sum(axis=1)
                        if bug == "o_not_rescaled":
                            o = ag.wgmma(p.to(ag.bf16), sV[st], o, trans_b=True)  # BUG:o_not_rescaled
                        else:
                            o = ag.wgmma(p.to(ag.bf16), sV[st], o * alpha, trans_b=True)
                        m = m_new
            if bug != "no_final_division":
                o = o / ag.where(l_sum == 0.0, 1.0, l_sum)
            if bug == "o_wrong_head":
                ag.store(O, (bh + 1, q0, 0), o.to(ag.bf16))  # BUG:o_wrong_head
            elif bug == "no_final_division":
                ag.store(O, (bh, q0, 0), o.to(ag.bf16))  # BUG:no_final_division
            else:
                ag.store(O, (bh, q0, 0), o.to(ag.bf16))

    return fa_qonce


def make_online_softmax(bug: str | None = None, BN: int = 1024):
    """Row softmax for rows of any length (examples/softmax_online.py): one CTA per row walks
    it in blocks of BN columns, keeping the running max m and sum l as loop-carried values."""

    @ag.kernel(threads=256, name="online_softmax")
    def online_softmax(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        N = X.shape[1]
        if bug == "blocks_skip_last":
            blocks = ag.cdiv(N, BN) - 1  # BUG:blocks_skip_last
        elif bug == "blocks_floor":
            blocks = N // BN  # BUG:blocks_floor
        else:
            blocks = ag.cdiv(N, BN)
        m = ag.full((1, 1), -INF)
        l_sum = ag.full((1, 1), 0.0)
        for j in ag.range(blocks):
            if bug == "max_fill_zero":
                x = ag.load(X, (row, j * BN), (1, BN), other=0.0)  # BUG:max_fill_zero
            elif bug == "block_offset_half":
                x = ag.load(X, (row, j * (BN // 2)), (1, BN), other=-INF)  # BUG:block_offset_half
            else:
                x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            if bug == "max_other_row":
                x2 = ag.load(X, (row + 1, j * BN), (1, BN), other=-INF)  # BUG:max_other_row
                m_new = ag.maximum(m, x2.max(axis=1))
            else:
                m_new = ag.maximum(m, x.max(axis=1))
            if bug == "sum_without_shift":
                e = ag.exp(x)
                l_sum = l_sum * ag.exp(m - m_new) + ag.exp(e - 1.0).sum(axis=1)  # BUG:sum_without_shift
            else:
                l_sum = l_sum * ag.exp(m - m_new) + ag.exp(x - m_new).sum(axis=1)
            m = m_new
        inv = 1.0 / l_sum
        for j in ag.range(ag.cdiv(N, BN)):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            if bug == "store_next_block":
                ag.store(Y, (row, j * BN + BN), ag.exp(x - m) * inv)  # BUG:store_next_block
            else:
                ag.store(Y, (row, j * BN), ag.exp(x - m) * inv)

    return online_softmax


def make_row_stats(bug: str | None = None, BN: int = 1024, ROWS: int = 2):
    """Per-row sum of squares (RMSNorm's statistic) and minimum, over blocks of BN columns;
    out-of-bounds columns load as the reduction's identity."""

    @ag.kernel(threads=256, name="row_stats")
    def row_stats(X: ag.Tensor["M", "N", ag.f32], S: ag.Tensor["M", 1, ag.f32],
                  L: ag.Tensor["M", 1, ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
        blocks = ag.cdiv(X.shape[1], BN)
        ss = ag.full((ROWS, 1), 0.0)
        lo = ag.full((ROWS, 1), INF)
        for j in ag.range(blocks):
            if bug == "sum_fill_one":
                x = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN), other=1.0)  # BUG:sum_fill_one
            else:
                x = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN))
            ss = ss + (x * x).sum(axis=1)
            if bug == "min_fill_zero":
                y = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN))  # BUG:min_fill_zero
            elif bug == "min_block_stride":
                y = ag.load(X, (pid * ROWS, j * 2 * BN), (ROWS, BN), other=INF)  # BUG:min_block_stride
            else:
                y = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN), other=INF)
            lo = ag.minimum(lo, y.min(axis=1))
        if bug == "ss_wrong_row":
            ag.store(S, (pid * ROWS + 1, 0), ss)  # BUG:ss_wrong_row
        else:
            ag.store(S, (pid * ROWS, 0), ss)
        ag.store(L, (pid * ROWS, 0), lo)

    return row_stats


def make_col_max(bug: str | None = None, ROWS: int = 16, BN: int = 128):
    """A column max over the rows of X [64, 1000] in [ROWS, BN] blocks, loaded with the default
    fill 0, as compose fuses a max over a non-innermost axis (KernelBench L1/49, L2/24): the
    last block's columns past 1000 are masked, but on the axis the max keeps, and their results
    are stored masked too, so the 0 never reaches an output. The bugs move the masked elements
    where it does: onto the reduced axis (rows past the end in the last row block), or into the
    output (an output padded to whole blocks stores the masked columns' results)."""
    rows = 60 if bug == "rows_partial" else 64
    width = 1024 if bug == "out_padded" else 1000

    def col_max(X, OUT):
        (pid,) = ag.grid(ag.cdiv(1000, BN))
        acc = ag.full((1, BN), -INF)
        for b in ag.range(ag.cdiv(rows, ROWS)):
            if bug == "rows_partial":
                x = ag.load(X, (b * ROWS, pid * BN), (ROWS, BN))  # BUG:rows_partial
            else:
                x = ag.load(X, (b * ROWS, pid * BN), (ROWS, BN))
            acc = ag.maximum(acc, x.max(axis=0))
        if bug == "out_padded":
            ag.store(OUT, (0, pid * BN), acc)  # BUG:out_padded
        else:
            ag.store(OUT, (0, pid * BN), acc)

    # the sizes are the factory's (string annotations cannot name them under `from __future__`)
    col_max.__annotations__ = {"X": ag.Tensor[rows, 1000, ag.f32],
                               "OUT": ag.Tensor[1, width, ag.f32]}
    return ag.kernel(col_max, threads=256, name="col_max")


def make_split_k_sum(bug: str | None = None):
    """The second half of split-K (argus/kernels/split_k_sum.py): C = P[0] + ... + P[3], the
    fp32 partial products of 4 K slices, added in a fixed order."""
    ROWS, BN, splits = 2, 512, 4

    @ag.kernel(threads=256, name="split_k_sum")
    def split_k_sum(P: ag.Tensor[4, "M", "N", ag.f32], C: ag.Tensor["M", "N", ag.bf16]):
        pid_m, pid_n = ag.grid(ag.cdiv(C.shape[0], ROWS), ag.cdiv(C.shape[1], BN))
        row0, col0 = pid_m * ROWS, pid_n * BN
        total = ag.load(P, (0, row0, col0), (ROWS, BN))
        last = splits - 1 if bug == "missing_slice" else splits  # BUG:missing_slice
        for s in range(1, last):
            if bug == "slice_twice" and s == 2:
                total = total + ag.load(P, (s - 1, row0, col0), (ROWS, BN))  # BUG:slice_twice
            else:
                total = total + ag.load(P, (s, row0, col0), (ROWS, BN))
        ag.store(C, (row0, col0), total.to(ag.bf16))

    return split_k_sum


def make_row_max_ring(bug: str | None = None, BN: int = 1024, ROWS: int = 2):
    """A row max over 8192 columns in blocks of BN (KernelBench L1/99's composed pattern): the
    blocks divide the row, so no load is ever masked and the default fill 0 is never reduced.
    Lowered, its loads go through lower/prefetch.py's register ring (blocks loaded up to 3
    iterations ahead, past the end in the last ones, and never reduced)."""
    width = 8000 if bug == "ring_partial_block" else 8192

    def row_max_ring(X, OUT):
        (pid,) = ag.grid(64 // ROWS)
        acc = ag.full((ROWS, 1), -INF)
        blocks = ag.cdiv(width, BN)
        for j in ag.range(blocks + (bug == "ring_past_end")):  # BUG:ring_past_end
            if bug == "ring_partial_block":
                x = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN), other=0.0)  # BUG:ring_partial_block
            else:
                x = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN), other=0.0)
            acc = ag.maximum(acc, x.max(axis=1))
        ag.store(OUT, (pid * ROWS, 0), acc)

    # the width is the factory's (string annotations cannot name it under `from __future__`)
    row_max_ring.__annotations__ = {"X": ag.Tensor[64, width, ag.f32],
                                    "OUT": ag.Tensor[64, 1, ag.f32]}
    return ag.kernel(row_max_ring, threads=256, name="row_max_ring")


def make_row_logsumexp(bug: str | None = None, BN: int = 1024):
    """logsumexp's sum pass as compose fuses it (KernelBench L2/42, 43, 84, 92): the row max,
    finished by an earlier kernel, is read from MX in every block and sum(exp(x - max)) is
    carried over the blocks; Y = log(sum) + max. Lowered, the max's load (offsets fixed over
    the loop) is hoisted before the loop by lower/prefetch.py, the blocks of X are ringed."""

    @ag.kernel(threads=256, name="row_logsumexp")
    def row_logsumexp(X: ag.Tensor["M", "N", ag.f32], MX: ag.Tensor["M", "B", ag.f32],
                      Y: ag.Tensor["M", 1, ag.f32]):
        (row,) = ag.grid(X.shape[0])
        acc = ag.full((1, 1), 0.0)
        for j in ag.range(ag.cdiv(X.shape[1], BN)):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            if bug == "max_per_block":
                m = ag.load(MX, (row, j), (1, 1))  # BUG:max_per_block
            else:
                m = ag.load(MX, (row, 0), (1, 1))
            acc = acc + ag.exp(x - m).sum(axis=1)
        ag.store(Y, (row, 0), ag.log(acc) + ag.load(MX, (row, 0), (1, 1)))

    return row_logsumexp


def make_kl_div(bug: str | None = None, BN: int = 1024):
    """KL divergence's row sum as compose fuses it (KernelBench L1/98): the sum of
    where(t > 0, t * log(t), 0) - t * log(p) over blocks of BN columns of rows of 4000 (the
    last block partial, no index mask). The `where` is a predicate on data values, not a mask:
    at the masked columns t = 0 (the fill), so it picks 0, and p's fill 1 makes t * log(p) 0:
    every masked column adds 0."""

    def kl_div(P, T, OUT):
        (row,) = ag.grid(64)
        acc = ag.full((1, 1), 0.0)
        for j in ag.range(ag.cdiv(4000, BN)):
            t = ag.load(T, (row, j * BN), (1, BN))
            if bug == "log_fill_zero":
                p = ag.load(P, (row, j * BN), (1, BN))  # BUG:log_fill_zero
            else:
                p = ag.load(P, (row, j * BN), (1, BN), other=1.0)
            if bug == "where_ge_zero":
                pos = t >= 0.0  # BUG:where_ge_zero
            else:
                pos = t > 0.0
            ent = ag.where(pos, t * ag.log(ag.where(pos, t, 1.0)), 0.0)
            acc = acc + (ent - t * ag.log(p)).sum(axis=1)
        ag.store(OUT, (row, 0), acc)

    kl_div.__annotations__ = {"P": ag.Tensor[64, 4000, ag.f32], "T": ag.Tensor[64, 4000, ag.f32],
                              "OUT": ag.Tensor[64, 1, ag.f32]}
    return ag.kernel(kl_div, threads=256, name="kl_div")


def make_rms_peeled(bug: str | None = None, BN: int = 1024):
    """RMSNorm's statistic, sum(x * x) over a row, with the first block peeled off the loop
    (reduced before it, as the accumulator's initial value) and the rest reduced in the loop,
    which lower/prefetch.py pipelines through its register ring."""

    @ag.kernel(threads=256, name="rms_peeled")
    def rms_peeled(X: ag.Tensor["M", "N", ag.f32], S: ag.Tensor["M", 1, ag.f32]):
        (row,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        x0 = ag.load(X, (row, 0), (1, BN))
        ss = (x0 * x0).sum(axis=1)
        if bug == "peel_skip_last":
            last = blocks - 1  # BUG:peel_skip_last
        else:
            last = blocks
        for j in ag.range(0 if bug == "peel_loop_from_zero" else 1, last):  # BUG:peel_loop_from_zero
            x = ag.load(X, (row, j * BN), (1, BN))
            ss = ss + (x * x).sum(axis=1)
        ag.store(S, (row, 0), ss)

    return rms_peeled


def make_split_k_loop(bug: str | None = None, splits: int = 4):
    """The second half of split-K with the partials added in a runtime loop: C = P[0], then
    C += P[s] for s in ag.range(1, splits)."""

    @ag.kernel(threads=256, name="split_k_loop")
    def split_k_loop(P: ag.Tensor[4, "M", "N", ag.f32], C: ag.Tensor["M", "N", ag.f32]):
        pid_m, pid_n = ag.grid(ag.cdiv(C.shape[0], 2), ag.cdiv(C.shape[1], 512))
        row0, col0 = pid_m * 2, pid_n * 512
        total = ag.load(P, (0, row0, col0), (2, 512))
        first = 0 if bug == "loop_from_zero" else 1
        last = splits - 1 if bug == "loop_skips_last" else splits
        for s in ag.range(first, last):  # BUG:loop_from_zero BUG:loop_skips_last (the bounds)
            total = total + ag.load(P, (s, row0, col0), (2, 512))
        ag.store(C, (row0, col0), total)

    return split_k_loop


def make_guarded_store(bug: str | None = None):
    """Y = relu(X) stored under an `ag.when`: the clean kernel's condition (the row block starts
    inside X) holds for every CTA of the grid, so coverage stands. The bugs store only where a
    value read at run time allows it (a flag, a per-row-block count, an atomic's old value:
    store.coverage cannot count such instances), or skip the ragged last row block."""

    @ag.kernel(threads=128, name="guarded_store")
    def guarded_store(X: ag.Tensor["M", "N", ag.f32], F: ag.Tensor["RB", ag.i32],
                      CNT: ag.Tensor["RB", ag.i32], Y: ag.Tensor["M", "N", ag.f32]):
        ROWS, BN = 4, 256
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
        y = ag.relu(ag.load(X, (pid_m * ROWS, pid_n * BN), (ROWS, BN)))
        if bug == "flag_positive":
            cond = ag.load_scalar(F, (0,)) > 0
        elif bug == "count_positive":
            cond = ag.load_scalar(F, (pid_m,)) > 0
        elif bug == "first_ticket":
            cond = ag.atomic_fetch_add(CNT, (pid_m,)) == 0
        elif bug == "tail_skipped":
            cond = pid_m * ROWS + ROWS <= X.shape[0]
        else:
            cond = pid_m * ROWS < X.shape[0]
        with ag.when(cond):  # BUG:flag_positive BUG:count_positive BUG:first_ticket BUG:tail_skipped
            ag.store(Y, (pid_m * ROWS, pid_n * BN), y)

    return guarded_store


def make_last_split_stores(bug: str | None = None, splits: int = 4):
    """Split-K's fix-up in one launch, as the fused decode combine does it: each split pid_s
    stores its partial, draws a ticket from its tile's counter (wrap = splits: the counter
    resets itself), and the split that draws the last ticket sums the partials into C. Exactly
    one split per tile passes the condition (atomic.tickets), so C is covered. Bug: the
    condition compares the ticket with `splits`, which no arrival draws (0 .. splits - 1): C
    is never written."""

    @ag.kernel(threads=128, name="last_split_stores")
    def last_split_stores(X: ag.Tensor["S", "M", "N", ag.f32],
                          P: ag.Tensor["S", "M", "N", ag.f32],
                          CNT: ag.Tensor["MB", "NB", ag.i32], C: ag.Tensor["M", "N", ag.f32]):
        ROWS, BN = 4, 256
        pid_m, pid_n, pid_s = ag.grid(ag.cdiv(C.shape[0], ROWS), ag.cdiv(C.shape[1], BN),
                                      splits)
        ag.tag_assume(lambda: ag.sym(X.shape[0]) == splits)
        # a counter for every tile (a shorter CNT: those tiles draw -1 and never store C)
        ag.require(ag.sym(CNT.shape[0]) * ROWS >= ag.sym(C.shape[0]), "a counter row per tile")
        ag.require(ag.sym(CNT.shape[1]) * BN >= ag.sym(C.shape[1]), "a counter per tile column")
        r0, c0 = pid_m * ROWS, pid_n * BN
        ag.store(P, (pid_s, r0, c0), ag.load(X, (pid_s, r0, c0), (ROWS, BN)))
        ag.fence()
        ticket = ag.atomic_fetch_add(CNT, (pid_m, pid_n), wrap=splits)
        last = splits if bug == "ticket_past_last" else splits - 1
        with ag.when(ticket == last):  # BUG:ticket_past_last
            ag.fence()
            total = ag.load(P, (0, r0, c0), (ROWS, BN))
            for s in range(1, splits):
                total = total + ag.load(P, (s, r0, c0), (ROWS, BN))
            ag.store(C, (r0, c0), total)

    return last_split_stores
