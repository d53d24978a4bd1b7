"""Kernels written the way a held-out corpus author might write them (issue 13, "Verifier 2"):
the corpus's shapes (tests/mutations/kernels.py) in other spellings, each with seeded bugs
marked `# BUG:<name>` and correct variants in unusual but legal styles; the plain GEMM pieces
(setup, producer, K loop) are tests/mutations/ring_gemm.py's. Kept apart from kernels.py so
the corpus file's line numbers do not move."""

from __future__ import annotations

import argus as ag
from tests.mutations import ring_gemm as G

INF = float("inf")


def make_gemm_styles(bug: str | None = None, stages: int = 3):
    """C = A @ B^T, 1 producer + 2 consumer warpgroups, in spellings the corpus lacks."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="gemm_styles")
    def gemm_styles(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                    C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    if bug == "a_k_from_stage":
                        ag.tma.load(sA[st], A, (pid_m * BM, st * BK))  # BUG:a_k_from_stage
                    elif bug == "reversed_k_off_by_one":
                        ag.tma.load(sA[st], A, (pid_m * BM, (k_tiles - k) * BK))  # BUG:reversed_k_off_by_one
                    else:
                        ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if bug == "reversed_k_off_by_one":
                        ag.tma.load(sB[st], B, (pid_n * BN, (k_tiles - k) * BK))
                    else:
                        ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    a = sA[st].rows_of(wg * 64, 64)
                    if bug == "b_slot_from_k":
                        ag.wgmma(a, sB[(k + 1) % stages], acc)  # BUG:b_slot_from_k
                    elif bug == "slot_from_k_legal":
                        ag.wgmma(a, sB[k % stages], acc)
                    else:
                        ag.wgmma(a, sB[st], acc)
            if bug == "store_n_from_pid_m":
                ag.store(C, (pid_m * BM + wg * 64, pid_m * BN), acc.to(ag.bf16))  # BUG:store_n_from_pid_m
            else:
                ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return gemm_styles


def make_gemm_unrolled(bug: str | None = None):
    """K = 256 fixed: the K loop unrolled by Python (4 steps), one-stage pipeline ring."""
    BM, BN, BK, KT = 128, 128, 64, 4

    @ag.kernel(name="gemm_unrolled")
    def gemm_unrolled(A: ag.Tensor["M", 256, ag.bf16], B: ag.Tensor["N", 256, ag.bf16],
                      C: ag.Tensor["M", "N", ag.bf16]):
        M = A.shape[0]
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((1, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((1, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(1, consumers=2)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in range(KT):
                with pipe.produce() as st:
                    if bug == "unrolled_a_k_repeat" and k == 3:
                        ag.tma.load(sA[st], A, (pid_m * BM, 2 * BK))  # BUG:unrolled_a_k_repeat
                    else:
                        ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if bug == "unrolled_a_k_repeat" and k == 3:
                        ag.tma.load(sB[st], B, (pid_n * BN, 2 * BK))
                    else:
                        ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in range(KT):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return gemm_unrolled


def make_persistent_acc(bug: str | None = None, stages: int = 3, num_sms: int = 132):
    """A persistent GEMM (row-major tile order), the accumulator carried per tile."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="persistent_acc")
    def persistent_acc(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                       C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        m_tiles, n_tiles = ag.cdiv(M, BM), ag.cdiv(N, BN)
        total = m_tiles * n_tiles
        programs = ag.minimum(total, num_sms)
        (pid,) = ag.grid(programs)
        k_tiles = ag.cdiv(K, BK)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        with ag.role("producer", warpgroups=1, regs=40):
            for unit in ag.range(pid, total, programs):
                tm, tn = unit // n_tiles, unit % n_tiles
                for k in ag.range(k_tiles):
                    with pipe.produce() as st:
                        ag.tma.load(sA[st], A, (tm * BM, k * BK))
                        ag.tma.load(sB[st], B, (tn * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)  # BUG:acc_not_reset
            for unit in ag.range(pid, total, programs):
                tm, tn = unit // n_tiles, unit % n_tiles
                if bug != "acc_not_reset":
                    acc = ag.zeros((64, BN), ag.f32)
                for k in ag.range(k_tiles):
                    with pipe.consume() as st:
                        ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
                if bug == "tile_n_swapped":
                    ag.store(C, (tm * BM + wg * 64, tm * BN), acc.to(ag.bf16))  # BUG:tile_n_swapped
                else:
                    ag.store(C, (tm * BM + wg * 64, tn * BN), acc.to(ag.bf16))

    return persistent_acc


def make_cluster_b(bug: str | None = None, stages: int = 3):
    """2x1 clusters sharing the B tile: each CTA loads half its rows and multicasts them."""
    BM, BN, BK, CS = 128, 128, 64, 2
    part = BN // CS

    @ag.kernel(name="cluster_b")
    def cluster_b(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                  C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n = ag.grid(ag.cdiv(M, CS * BM) * CS, ag.cdiv(N, BN), cluster=CS)
        rank = ag.cluster_rank()
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if bug == "multicast_rows_unranked":
                        ag.tma.load(sB[st].rows_of(rank * part, part), B, (pid_n * BN, k * BK), multicast=True)  # BUG:multicast_rows_unranked
                    elif bug == "multicast_other_rank":
                        ag.tma.load(sB[st].rows_of((1 - rank) * part, part), B, (pid_n * BN + rank * part, k * BK), multicast=True)  # BUG:multicast_other_rank
                    else:
                        ag.tma.load(sB[st].rows_of(rank * part, part), B,
                                    (pid_n * BN + rank * part, k * BK), multicast=True)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return cluster_b


def make_online_softmax2(bug: str | None = None, BN: int = 1024):
    """Online softmax over a row in blocks (examples/softmax_online.py), other spellings."""

    @ag.kernel(threads=256, name="online_softmax2")
    def online_softmax2(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        N = X.shape[1]
        blocks = ag.cdiv(N, BN)
        m = ag.full((1, 1), -INF)
        l_sum = ag.full((1, 1), 0.0)
        for j in ag.range(blocks):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            m_new = ag.maximum(m, x.max(axis=1))
            if bug == "block_exp_old_max":
                l_sum = l_sum * ag.exp(m - m_new) + ag.exp(x - m).sum(axis=1)  # BUG:block_exp_old_max
            else:
                l_sum = l_sum * ag.exp(m - m_new) + ag.exp(x - m_new).sum(axis=1)
            m = m_new
        inv = 1.0 / l_sum
        for j in ag.range(blocks):
            if bug == "reversed_blocks_legal":
                jj = blocks - 1 - j
            else:
                jj = j
            x = ag.load(X, (row, jj * BN), (1, BN), other=-INF)
            ag.store(Y, (row, jj * BN), ag.exp(x - m) * inv)

    return online_softmax2


def make_col_sum(bug: str | None = None, ROWS: int = 16, BN: int = 128):
    """Column sums and maxima of X [R, N] over blocks of ROWS rows (a reduction over the
    non-last axis); masked rows load as each reduction's identity."""

    @ag.kernel(threads=256, name="col_sum")
    def col_sum(X: ag.Tensor["R", "N", ag.f32], S: ag.Tensor[1, "N", ag.f32],
                MX: ag.Tensor[1, "N", ag.f32]):
        R, N = X.shape
        (pid,) = ag.grid(ag.cdiv(N, BN))
        if bug == "rows_skip_last_block":
            blocks = ag.cdiv(R, ROWS) - 1  # BUG:rows_skip_last_block
        else:
            blocks = ag.cdiv(R, ROWS)
        acc = ag.full((1, BN), 0.0)
        hi = ag.full((1, BN), -INF)
        for b in ag.range(blocks):
            if bug == "reversed_rows_legal":
                r0 = (blocks - 1 - b) * ROWS
            else:
                r0 = b * ROWS
            x = ag.load(X, (r0, pid * BN), (ROWS, BN))
            acc = acc + x.sum(axis=0)
            if bug == "max_fill_inf":
                y = ag.load(X, (r0, pid * BN), (ROWS, BN), other=INF)  # BUG:max_fill_inf
            else:
                y = ag.load(X, (r0, pid * BN), (ROWS, BN), other=-INF)
            hi = ag.maximum(hi, y.max(axis=0))
        ag.store(S, (0, pid * BN), acc)
        ag.store(MX, (0, pid * BN), hi)

    return col_sum


def make_row_min_when(bug: str | None = None, BN: int = 512, ROWS: int = 4):
    """Row minima of X [M, N]; the store guarded by an `ag.when` that holds for every CTA."""

    @ag.kernel(threads=128, name="row_min_when")
    def row_min_when(X: ag.Tensor["M", "N", ag.f32], L: ag.Tensor["M", 1, ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
        lo = ag.full((ROWS, 1), INF)
        for j in ag.range(ag.cdiv(X.shape[1], BN)):
            if bug == "min_fill_neg_inf":
                y = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN), other=-INF)  # BUG:min_fill_neg_inf
            else:
                y = ag.load(X, (pid * ROWS, j * BN), (ROWS, BN), other=INF)
            lo = ag.minimum(lo, y.min(axis=1))
        with ag.when(pid * ROWS < X.shape[0]):
            ag.store(L, (pid * ROWS, 0), lo)

    return row_min_when


def make_gemm_static_n(bug: str | None = None, stages: int = 2):
    """C[M, 256] = A[M, K] @ B[256, K]^T: N fixed (two 128-column tiles), the grid's second
    axis spelled as a literal 2."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="gemm_static_n")
    def gemm_static_n(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor[256, "K", ag.bf16],
                      C: ag.Tensor["M", 256, ag.bf16]):
        r = G.ring_gemm(A, B, stages, n_tiles=2)
        pid_m, pid_n = r.pid_m, r.pid_n
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            G.mainloop(r, wg, acc)
            if bug == "n_tiles_swapped":
                ag.store(C, (pid_m * BM + wg * 64, (1 - pid_n) * BN), acc.to(ag.bf16))  # BUG:n_tiles_swapped
            else:
                ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return gemm_static_n


def make_attn_static_d(bug: str | None = None, kv: str = "SK"):
    """S = Q K^T then O = P V for one 64-row Q block and one 64-key block (head dim 64 fixed:
    Q, K, V are [S, 64]), P in registers; the head dim is an integer dim. kv="S": self-attention
    spelled with one dim name for the query and the key length."""

    def attn_static_d(Q, K, V, O):
        S, SK = Q.shape[0], K.shape[0]
        ag.tag_assume(lambda: ag.sym(SK) <= 64)   # one key block
        (pid,) = ag.grid(ag.cdiv(S, 64))
        sQ = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        sK = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        sV = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(1)
        with ag.role("producer", warpgroups=1, regs=40):
            with pipe.produce() as st:
                ag.tma.load(sQ[st], Q, (pid * 64, 0))
                ag.tma.load(sK[st], K, (0, 0))
                ag.tma.load(sV[st], V, (0, 0))
        with ag.role("consumer", warpgroups=1, regs=232):
            o = ag.zeros((64, 64), ag.f32)
            l_sum = ag.full((64, 1), 1.0)
            with pipe.consume() as st:
                s = ag.zeros((64, 64), ag.f32)
                ag.wgmma(sQ[st], sK[st], s)
                s = ag.where(ag.arange(64)[None, :] < SK, s, -INF)
                m = s.max(axis=1)
                p = ag.exp(s - m)
                l_sum = p.sum(axis=1)
                if bug == "pv_k_transposed":
                    ag.wgmma(p.to(ag.bf16), sV[st], o)  # BUG:pv_k_transposed
                elif bug == "pv_v_is_k":
                    ag.wgmma(p.to(ag.bf16), sK[st], o, trans_b=True)  # BUG:pv_v_is_k
                else:
                    ag.wgmma(p.to(ag.bf16), sV[st], o, trans_b=True)
            ag.store(O, (pid * 64, 0), (o / l_sum).to(ag.bf16))

    attn_static_d.__annotations__ = {"Q": ag.Tensor["S", 64, ag.bf16],
                                     "K": ag.Tensor[kv, 64, ag.bf16],
                                     "V": ag.Tensor[kv, 64, ag.bf16],
                                     "O": ag.Tensor["S", 64, ag.bf16]}
    return ag.kernel(attn_static_d, name="attn_static_d")


def make_self_attn(bug: str | None = None):
    """make_attn_static_d with Q, K and V all [S, 64] (one length name)."""
    return make_attn_static_d(bug, kv="S")


def make_split_k_gemm(bug: str | None = None, splits: int = 4, stages: int = 3):
    """Split-K: the grid's third axis splits the K tiles into `splits` contiguous ranges; each
    CTA adds its partial product into the fp32 C with an atomic add."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="split_k_gemm")
    def split_k_gemm(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                     C: ag.Tensor["M", "N", ag.f32]):
        M, K = A.shape
        N = B.shape[0]
        pid_m, pid_n, sp = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN), splits)
        k_tiles = ag.cdiv(K, BK)
        per = ag.cdiv(k_tiles, splits)
        k0 = sp * per
        if bug == "split_range_overlap":
            k1 = ag.minimum(k0 + per + 1, k_tiles)  # BUG:split_range_overlap
        elif bug == "split_per_floor":
            k1 = ag.minimum(k0 + k_tiles // splits, k_tiles)  # BUG:split_per_floor
        else:
            k1 = ag.minimum(k0 + per, k_tiles)
        steps = ag.maximum(k1 - k0, 0)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        with ag.role("producer", warpgroups=1, regs=40):
            for i in ag.range(steps):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, (k0 + i) * BK))
                    ag.tma.load(sB[st], B, (pid_n * BN, (k0 + i) * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for i in ag.range(steps):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.atomic_add(C, (pid_m * BM + wg * 64, pid_n * BN), acc)

    return split_k_gemm


def make_gemm_tma_epilogue(bug: str | None = None, stages: int = 3):
    """C = A @ B^T with a TMA-store epilogue: each consumer warpgroup writes its 64 rows into a
    staging tile with stmatrix and stores it with one bulk copy."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="gemm_tma_epi")
    def gemm_tma_epi(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                     C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages)
        pid_m, pid_n = r.pid_m, r.pid_n
        sC = ag.smem((2, 64, BN), ag.bf16)
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            G.mainloop(r, wg, acc)
            if bug == "staging_other_wg":
                ag.stmatrix(sC[1 - wg], acc.to(ag.bf16))  # BUG:staging_other_wg
            else:
                ag.stmatrix(sC[wg], acc.to(ag.bf16))
            if bug == "tma_store_rows_no_wg":
                ag.tma.store(C, (pid_m * BM, pid_n * BN), sC[wg])  # BUG:tma_store_rows_no_wg
            else:
                ag.tma.store(C, (pid_m * BM + wg * 64, pid_n * BN), sC[wg])

    return gemm_tma_epi


def make_gemm_bias(bug: str | None = None, stages: int = 2):
    """C = A @ B^T + bias[None, :], the accumulator zeroed per tile, bias added in the
    epilogue."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="gemm_bias")
    def gemm_bias(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                  bias: ag.Tensor[1, "N", ag.f32], C: ag.Tensor["M", "N", ag.bf16]):
        r = G.ring_gemm(A, B, stages)
        pid_m, pid_n, sA, sB = r.pid_m, r.pid_n, r.sA, r.sB
        G.produce(r, A, B)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(r.k_tiles):
                with r.ring.consume() as st:
                    if bug == "acc_reset_in_k":
                        acc = ag.zeros((64, BN), ag.f32)  # BUG:acc_reset_in_k
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            if bug == "bias_from_pid_m":
                b = ag.load(bias, (0, pid_m * BN), (1, BN))  # BUG:bias_from_pid_m
            else:
                b = ag.load(bias, (0, pid_n * BN), (1, BN))
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), (acc + b).to(ag.bf16))

    return gemm_bias


def make_row_mean(bug: str | None = None, BN: int = 1024):
    """Row means of X [M, N] (N <= BN: one block a row), masked columns loaded as 0."""

    @ag.kernel(threads=256, name="row_mean")
    def row_mean(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", 1, ag.f32]):
        (row,) = ag.grid(X.shape[0])
        N = X.shape[1]
        ag.tag_assume(lambda: ag.sym(N) <= BN)
        x = ag.load(X, (row, 0), (1, BN))
        if bug == "mean_over_block":
            y = x.sum(axis=1) / BN  # BUG:mean_over_block
        else:
            y = x.sum(axis=1) / N
        ag.store(Y, (row, 0), y)

    return row_mean


def make_batched_add(bug: str | None = None):
    """Z[b] = X[b] + Y[b] over a 3-d grid (column blocks, row blocks, batch)."""

    @ag.kernel(threads=128, name="batched_add")
    def batched_add(X: ag.Tensor["B", "M", "N", ag.f32], Y: ag.Tensor["B", "M", "N", ag.f32],
                    Z: ag.Tensor["B", "M", "N", ag.f32]):
        BT, M, N = X.shape
        pid_n, pid_m, b = ag.grid(ag.cdiv(N, 256), ag.cdiv(M, 4), BT)
        x = ag.load(X, (b, pid_m * 4, pid_n * 256), (4, 256))
        if bug == "y_batch_zero":
            y = ag.load(Y, (0, pid_m * 4, pid_n * 256), (4, 256))  # BUG:y_batch_zero
        else:
            y = ag.load(Y, (b, pid_m * 4, pid_n * 256), (4, 256))
        if bug == "grid_rows_floor":
            pass
        ag.store(Z, (b, pid_m * 4, pid_n * 256), x + y)

    return batched_add


def make_col_stride(bug: str | None = None, ROWS: int = 8, BN: int = 256):
    """Column minima of X [R, N] over ROWS-row blocks, walked with a Python-unrolled pair of
    loads per iteration (two row blocks an iteration)."""

    @ag.kernel(threads=256, name="col_stride")
    def col_stride(X: ag.Tensor["R", "N", ag.f32], L: ag.Tensor[1, "N", ag.f32]):
        R, N = X.shape
        (pid,) = ag.grid(ag.cdiv(N, BN))
        lo = ag.full((1, BN), INF)
        for b in ag.range(ag.cdiv(R, 2 * ROWS)):
            for h in range(2):
                if bug == "pair_offset_half":
                    r0 = b * ROWS + h * ROWS  # BUG:pair_offset_half
                else:
                    r0 = b * 2 * ROWS + h * ROWS
                y = ag.load(X, (r0, pid * BN), (ROWS, BN), other=INF)
                lo = ag.minimum(lo, y.min(axis=0))
        ag.store(L, (0, pid * BN), lo)

    return col_stride


def make_row_sum_unrolled(bug: str | None = None, BN: int = 512):
    """Row sums of X [M, N], two column blocks an iteration (a Python-unrolled pair), the
    last pair partly masked."""

    @ag.kernel(threads=256, name="row_sum_unrolled")
    def row_sum_unrolled(X: ag.Tensor["M", "N", ag.f32], S: ag.Tensor["M", 1, ag.f32]):
        (row,) = ag.grid(X.shape[0])
        acc = ag.full((1, 1), 0.0)
        if bug == "pairs_floor":
            pairs = X.shape[1] // (2 * BN)  # BUG:pairs_floor
        else:
            pairs = ag.cdiv(X.shape[1], 2 * BN)
        for j in ag.range(pairs):
            for h in range(2):
                if bug == "second_block_repeats" and h == 1:
                    x = ag.load(X, (row, j * 2 * BN), (1, BN))  # BUG:second_block_repeats
                else:
                    x = ag.load(X, (row, (2 * j + h) * BN), (1, BN))
                acc = acc + x.sum(axis=1)
        ag.store(S, (row, 0), acc)

    return row_sum_unrolled


def make_fa_small(bug: str | None = None, BN: int = 64):
    """FlashAttention forward (head dim 64, non-causal): Q once through a one-stage pipeline,
    K and V through a 2-stage ring, running max m and sum l carried over the KV blocks."""

    @ag.kernel(name="fa_small")
    def fa_small(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", "SK", 64, ag.bf16],
                 V: ag.Tensor["BH", "SK", 64, ag.bf16], O: ag.Tensor["BH", "S", 64, ag.bf16]):
        S, SK = Q.shape[1], K.shape[1]
        pid, bh = ag.grid(ag.cdiv(S, 64), Q.shape[0])
        blocks = ag.cdiv(SK, BN)
        sQ = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        sK = ag.smem((2, BN, 64), ag.bf16, swizzle=128)
        sV = ag.smem((2, BN, 64), ag.bf16, swizzle=128)
        q_pipe = ag.pipeline(1, consumers=1)
        kv_pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1):
            with q_pipe.produce() as qs:
                ag.tma.load(sQ[qs], Q, (bh, pid * 64, 0))
            for j in ag.range(blocks):
                with kv_pipe.produce() as st:
                    ag.tma.load(sK[st], K, (bh, j * BN, 0))
                    ag.tma.load(sV[st], V, (bh, j * BN, 0))
        with ag.role("consumer", warpgroups=1):
            m = ag.full((64, 1), -INF)
            l_sum = ag.full((64, 1), 0.0)
            o = ag.zeros((64, 64))
            with q_pipe.consume() as qs:
                for j in ag.range(blocks):
                    with kv_pipe.consume() as st:
                        s = ag.wgmma(sQ[qs], sK[st], ag.zeros((64, BN)))
                        s = ag.where(j * BN + ag.arange(BN)[None, :] < SK,
                                     s * 1.4426950408889634, -INF)
                        m_new = ag.maximum(m, s.max(axis=1))
                        m_use = ag.where(m_new == -INF, 0.0, m_new)
                        if bug == "p_old_max":
                            p = ag.exp2(s - ag.where(m == -INF, 0.0, m))  # BUG:p_old_max
                        else:
                            p = ag.exp2(s - m_use)
                        if bug == "alpha_inverted":
                            alpha = ag.exp2(m_use - m)  # BUG:alpha_inverted
                        else:
                            alpha = ag.exp2(m - m_use)
                        l_sum = l_sum * alpha + p.sum(axis=1)
                        o = ag.wgmma(p.to(ag.bf16), sV[st], o * alpha, trans_b=True)
                        if bug != "max_not_carried":
                            m = m_new
                        else:
                            m = m  # BUG:max_not_carried
            o = o / ag.where(l_sum == 0.0, 1.0, l_sum)
            ag.store(O, (bh, pid * 64, 0), o.to(ag.bf16))

    return fa_small
