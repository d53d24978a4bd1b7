"""A third held-out style probe (issue 13, "Verifier 2"; 2026-12-05): kernels written from the
issue's class list without reading the corpus's kernels for their shape (a tiled two-pass
layer norm, a peeled online softmax, a runtime-split reduction, a causal row softmax written
as q - k >= 0, a middle-axis reduction, GEMMs whose pipeline has one stage or more stages than
k tiles, a cluster grid, a tail-predicated epilogue), each with seeded bugs marked
`# BUG:<name>` on the line a fix edits. Kept apart from the other kernel files so their line
numbers do not move."""

from __future__ import annotations

import argus as ag

INF = float("inf")
TAPS = 8    # conv1d_taps' filter width (module level: annotations are strings)
SLOTS = 4   # combine_loop's routed experts per token


def make_layernorm_tiled(bug: str | None = None, ROWS: int = 4, BN: int = 512):
    """LayerNorm over rows of any length, ROWS rows a CTA: pass 1 sums each row block by block,
    pass 2 sums the squared deviations (masked, so the tail's padding adds nothing), pass 3
    normalizes and stores."""

    @ag.kernel(threads=256, name="layernorm_tiled")
    def layernorm_tiled(X: ag.Tensor["M", "N", ag.f32], G: ag.Tensor[1, "N", ag.f32],
                        Y: ag.Tensor["M", "N", ag.f32]):
        M, N = X.shape
        (pid,) = ag.grid(ag.cdiv(M, ROWS))
        r0 = pid * ROWS
        nblk = ag.cdiv(N, BN)
        s = ag.zeros((ROWS, 1))
        for j in ag.range(nblk):
            s = s + ag.load(X, (r0, j * BN), (ROWS, BN), other=0.0).sum(axis=1)
        mean = s / N
        v = ag.zeros((ROWS, 1))
        if bug == "var_skips_last":
            var_blocks = nblk - 1  # BUG:var_skips_last
        else:
            var_blocks = nblk
        for j in ag.range(var_blocks):
            x = ag.load(X, (r0, j * BN), (ROWS, BN), other=0.0)
            cols = j * BN + ag.arange(BN)[None, :]
            if bug == "var_pad_not_masked":
                d = x - mean  # BUG:var_pad_not_masked
            else:
                d = ag.where(cols < N, x - mean, 0.0)
            v = v + (d * d).sum(axis=1)
        rstd = ag.rsqrt(v / N + 1e-5)
        for j in ag.range(nblk):
            x = ag.load(X, (r0, j * BN), (ROWS, BN), other=0.0)
            g = ag.load(G, (0, j * BN), (1, BN), other=0.0)
            ag.store(Y, (r0, j * BN), (x - mean) * rstd * g)

    return layernorm_tiled


def make_softmax_peeled(bug: str | None = None, BN: int = 1024):
    """Online softmax whose first block is peeled out of the loop: m and l start from block 0,
    the loop runs over blocks 1 .. nblk - 1, a second loop writes the output."""

    @ag.kernel(threads=256, name="softmax_peeled")
    def softmax_peeled(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        N = X.shape[1]
        nblk = ag.cdiv(N, BN)
        if bug == "peeled_fill_zero":
            x0 = ag.load(X, (row, 0), (1, BN), other=0.0)  # BUG:peeled_fill_zero
        else:
            x0 = ag.load(X, (row, 0), (1, BN), other=-INF)
        m = x0.max(axis=1)
        l_sum = ag.exp(x0 - m).sum(axis=1)
        for j in ag.range(2 if bug == "loop_from_two" else 1, nblk):  # BUG:loop_from_two
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            m_new = ag.maximum(m, x.max(axis=1))
            l_sum = l_sum * ag.exp(m - m_new) + ag.exp(x - m_new).sum(axis=1)
            m = m_new
        for j in ag.range(nblk):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            ag.store(Y, (row, j * BN), ag.exp(x - m) / l_sum)

    return softmax_peeled


def make_splitk_reduce(bug: str | None = None, ROWS: int = 4, BN: int = 256):
    """The reduction kernel of a split-K GEMM whose split count is a runtime dim: C = sum over
    s of P[s] (fp32 partials), a runtime loop over the splits."""

    @ag.kernel(threads=256, name="splitk_reduce")
    def splitk_reduce(P: ag.Tensor["SPLITS", "M", "N", ag.f32],
                      C: ag.Tensor["M", "N", ag.bf16]):
        SPLITS, M, N = P.shape
        pm, pn = ag.grid(ag.cdiv(M, ROWS), ag.cdiv(N, BN))
        acc = ag.zeros((ROWS, BN))
        for s in ag.range(1 if bug == "skips_slice_zero" else 0, SPLITS):  # BUG:skips_slice_zero
            if bug == "same_slice":
                acc = acc + ag.load(P, (0, pm * ROWS, pn * BN), (ROWS, BN))  # BUG:same_slice
            else:
                acc = acc + ag.load(P, (s, pm * ROWS, pn * BN), (ROWS, BN))
        ag.store(C, (pm * ROWS, pn * BN), acc.to(ag.bf16))

    return splitk_reduce


def make_causal_row_softmax(bug: str | None = None, ROWS: int = 4, BN: int = 256):
    """softmax over each query row's keys 0 .. q (a causal score matrix): key blocks past the
    diagonal are not visited, the mask is written as q - k >= 0, and a tag assertion states
    what it keeps."""

    @ag.kernel(threads=256, name="causal_row_softmax")
    def causal_row_softmax(S: ag.Tensor["Q", "K", ag.f32], P: ag.Tensor["Q", "K", ag.f32]):
        NQ, NK = S.shape
        ag.tag_assume(lambda: ag.sym(NK) == ag.sym(NQ))
        (pid,) = ag.grid(ag.cdiv(NQ, ROWS))
        q0 = pid * ROWS
        if bug == "blocks_floor":
            nblk = ag.minimum(ag.cdiv(NK, BN), (q0 + ROWS) // BN)  # BUG:blocks_floor
        else:
            nblk = ag.minimum(ag.cdiv(NK, BN), ag.cdiv(q0 + ROWS, BN))
        m = ag.full((ROWS, 1), -INF)
        l_sum = ag.zeros((ROWS, 1))
        for j in ag.range(nblk):
            s = ag.load(S, (q0, j * BN), (ROWS, BN), other=-INF)
            qi = q0 + ag.arange(ROWS)[:, None]
            ki = j * BN + ag.arange(BN)[None, :]
            if bug == "diag_excluded":
                s = ag.where(qi - ki > 0, s, -INF)  # BUG:diag_excluded
            else:
                s = ag.where(qi - ki >= 0, s, -INF)
            ag.tag_assert((ag.tag(s).live == 1) == ag.tag_all(
                ag.tag(s).k <= ag.tag(s).q, ag.tag(s).k < ag.sym(NK)), message="causal mask")
            m_new = ag.maximum(m, s.max(axis=1))
            l_sum = l_sum * ag.exp(m - m_new) + ag.exp(s - m_new).sum(axis=1)
            m = m_new
        for j in ag.range(ag.cdiv(NK, BN)):
            s = ag.load(S, (q0, j * BN), (ROWS, BN), other=-INF)
            qi = q0 + ag.arange(ROWS)[:, None]
            ki = j * BN + ag.arange(BN)[None, :]
            s = ag.where(qi - ki >= 0, s, -INF)
            ag.store(P, (q0, j * BN), ag.exp(s - m) / l_sum)

    return causal_row_softmax


def make_mid_axis_sum(bug: str | None = None, RB: int = 8, BN: int = 128):
    """Y[b, 0, c] = reduce over r of X[b, r, c]: the reduced axis is the middle one, walked in
    blocks of RB rows; `op` max needs -inf as the fill."""

    @ag.kernel(threads=128, name="mid_axis_reduce")
    def mid_axis_reduce(X: ag.Tensor["B", "R", "C", ag.f32], Y: ag.Tensor["B", 1, "C", ag.f32],
                        Z: ag.Tensor["B", 1, "C", ag.f32]):
        B, R, C = X.shape
        b, pc = ag.grid(B, ag.cdiv(C, BN))
        acc = ag.zeros((1, BN))
        mx = ag.full((1, BN), -INF)
        if bug == "rows_floor":
            steps = R // RB  # BUG:rows_floor
        else:
            steps = ag.cdiv(R, RB)
        for j in ag.range(steps):
            x = ag.load(X, (b, j * RB, pc * BN), (RB, BN), other=0.0)
            acc = acc + x.sum(axis=0)
            if bug == "max_fill_zero":
                y = ag.load(X, (b, j * RB, pc * BN), (RB, BN), other=0.0)  # BUG:max_fill_zero
            else:
                y = ag.load(X, (b, j * RB, pc * BN), (RB, BN), other=-INF)
            mx = ag.maximum(mx, y.max(axis=0))
        ag.store(Y, (b, 0, pc * BN), acc)
        ag.store(Z, (b, 0, pc * BN), mx)

    return mid_axis_reduce


def make_gemm_ring(bug: str | None = None, stages: int = 1):
    """C = A @ B^T over a runtime K through a ring of `stages` slots (one stage is legal: the
    producer waits for the consumer each step), one consumer warpgroup of 64 rows."""
    BM, BN, BK = 64, 128, 64

    @ag.kernel(name="gemm_ring")
    def gemm_ring(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                  C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        pm, pn = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        if bug == "k_tiles_floor":
            kt = K // BK  # BUG:k_tiles_floor
        else:
            kt = ag.cdiv(K, BK)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(stages, consumers=1)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(kt):
                with ring.produce() as st:
                    ag.tma.load(sA[st], A, (pm * BM, k * BK))
                    if bug == "b_from_a":
                        ag.tma.load(sB[st], A, (pn * BN, k * BK))  # BUG:b_from_a
                    else:
                        ag.tma.load(sB[st], B, (pn * BN, k * BK))
        with ag.role("consumer", warpgroups=1, regs=232):
            acc = ag.zeros((BM, BN), ag.f32)
            for k in ag.range(kt):
                with ring.consume() as st:
                    ag.wgmma(sA[st], sB[st], acc)
            ag.store(C, (pm * BM, pn * BN), acc.to(ag.bf16))

    return gemm_ring


def make_gemm_short_k(bug: str | None = None, stages: int = 4):
    """K fixed at 128 (two k tiles) through a ring of more stages than tiles."""
    BM, BN, BK, KT = 128, 128, 64, 2

    @ag.kernel(name="gemm_short_k")
    def gemm_short_k(A: ag.Tensor["M", 128, ag.bf16], B: ag.Tensor["N", 128, ag.bf16],
                     C: ag.Tensor["M", "N", ag.bf16]):
        M = A.shape[0]
        N = B.shape[0]
        pm, pn = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN))
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(stages, consumers=2)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(KT):
                with ring.produce() as st:
                    ag.tma.load(sA[st], A, (pm * BM, k * BK))
                    ag.tma.load(sB[st], B, (pn * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(KT - 1 if bug == "consume_one_short" else KT):  # BUG:consume_one_short
                with ring.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pm * BM + wg * 64, pn * BN), acc.to(ag.bf16))

    return gemm_short_k


def make_cluster_pair(bug: str | None = None, stages: int = 2):
    """Clusters of 2 CTAs along M that share A's k tile: CTA `rank` loads its half of B's rows
    and multicasts; the M grid must be a whole number of clusters."""
    BM, BN, BK, CS = 128, 128, 64, 2
    half = BN // CS

    @ag.kernel(name="cluster_pair")
    def cluster_pair(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                     C: ag.Tensor["M", "N", ag.bf16]):
        M, K = A.shape
        N = B.shape[0]
        if bug == "grid_not_cluster_multiple":
            pm, pn = ag.grid(ag.cdiv(M, BM), ag.cdiv(N, BN), cluster=CS)  # BUG:grid_not_cluster_multiple
        else:
            pm, pn = ag.grid(ag.cdiv(ag.cdiv(M, BM), CS) * CS, ag.cdiv(N, BN), cluster=CS)
        rank = ag.cluster_rank()
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        ring = ag.pipeline(stages, consumers=2)
        kt = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(kt):
                with ring.produce() as st:
                    ag.tma.load(sA[st], A, (pm * BM, k * BK))
                    ag.tma.load(sB[st].rows_of(rank * half, half), B,
                                (pn * BN + rank * half, k * BK), multicast=True)
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(kt):
                with ring.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pm * BM + wg * 64, pn * BN), acc.to(ag.bf16))

    return cluster_pair


def make_tail_epilogue(bug: str | None = None, ROWS: int = 16, BN: int = 128):
    """Y = 2 X, the full row tiles stored under one predicate and the last partial tile under
    the other (an epilogue split a hand-written kernel makes to keep full tiles unmasked)."""

    @ag.kernel(threads=128, name="tail_epilogue")
    def tail_epilogue(X: ag.Tensor["M", 128, ag.f32], Y: ag.Tensor["M", 128, ag.f32]):
        M = X.shape[0]
        (pid,) = ag.grid(ag.cdiv(M, ROWS))
        r0 = pid * ROWS
        y = ag.load(X, (r0, 0), (ROWS, BN)) * 2.0
        if bug == "full_pred_strict":
            full = r0 + ROWS < M  # BUG:full_pred_strict
        else:
            full = r0 + ROWS <= M
        with ag.when(full):
            ag.store(Y, (r0, 0), y)
        with ag.when(r0 + ROWS > M):
            ag.store(Y, (r0, 0), y)

    return tail_epilogue


def make_conv1d_taps(bug: str | None = None, P: int = 3, BO: int = 32):
    """A 1-d convolution with zero padding, each output position's taps gathered as a row
    (im2col) and reduced: Y[n, o] = sum_t X[n, o + t - P] * W[t]. Taps left of 0 or past the
    end must read 0 (the padding)."""

    @ag.kernel(threads=128, name="conv1d_taps")
    def conv1d_taps(X: ag.Tensor["NB", "L", ag.f32], W: ag.Tensor[1, TAPS, ag.f32],
                    Y: ag.Tensor["NB", "L", ag.f32]):
        NB, L = X.shape
        n, po = ag.grid(NB, ag.cdiv(L, BO))
        o = po * BO + ag.arange(BO)[:, None]           # [BO, 1]: the output positions
        tap = ag.arange(TAPS)[None, :]                 # [1, TAPS]
        if bug == "pad_reads_one":
            x = ag.gather(X, (n, o + tap - P), other=1.0)  # BUG:pad_reads_one
        else:
            x = ag.gather(X, (n, o + tap - P), other=0.0)
        w = ag.load(W, (0, 0), (1, TAPS))
        ag.store(Y, (n, po * BO), (x * w).sum(axis=1), transposed=True)

    return conv1d_taps


def make_combine_loop(bug: str | None = None, BH: int = 512):
    K = SLOTS
    """An MoE combine walking a token's K routed slots in a runtime loop: out[t] = sum over j
    of weight[t, j] * y[pos[t * K + j]]. Routing's contract (tags): the row pos[i] holds the
    data of entry i, and each entry's weight is Weights[i // K, i % K]."""

    @ag.kernel(threads=128, name="combine_loop")
    def combine_loop(Y: ag.Tensor["R", "H", ag.f32], Pos: ag.Tensor["NE", 1, ag.i32],
                     Weights: ag.Tensor["T", SLOTS, ag.f32], Out: ag.Tensor["T", "H", ag.f32]):
        position, entry_of = ag.opaque("position"), ag.opaque("entry_of")
        ag.tag_tensor(Pos, value=lambda i, zero: position(i))
        ag.tag_tensor(Y, entry=lambda r, h: entry_of(r), token=lambda r, h: entry_of(r) // K)
        ag.tag_tensor(Weights, entry=lambda t, j: t * K + j, token=lambda t, j: t)
        ag.tag_tensor(Out, token=lambda t, h: t)
        ag.tag_assume(lambda i: entry_of(position(i)) == i)
        t, blk = ag.grid(Out.shape[0], ag.cdiv(Out.shape[1], BH))
        h0 = blk * BH
        acc = ag.zeros((1, BH))
        for j in ag.range(K):
            row = ag.load_scalar(Pos, (t * K + j, 0))
            y = ag.load(Y, (row, h0), (1, BH))
            if bug == "weight_slot_zero":
                w = ag.load(Weights, (t, 0), (1, 1))  # BUG:weight_slot_zero
            else:
                w = ag.load(Weights, (t, j), (1, 1))
            acc = acc + y * w
        ag.store(Out, (t, h0), acc)

    return combine_loop


def make_layernorm_fixed(bug: str | None = None, BN: int = 512, ROWS: int = 4):
    """LayerNorm over rows of exactly 1024 columns in blocks of 512: no block is partial, so
    the deviations `x - mean` need no mask (a correct variant: the fill never reaches a sum)."""

    @ag.kernel(threads=256, name="layernorm_fixed")
    def layernorm_fixed(X: ag.Tensor["M", 1024, ag.f32], Y: ag.Tensor["M", 1024, ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
        r0 = pid * ROWS
        s = ag.zeros((ROWS, 1))
        for j in ag.range(1024 // BN):
            s = s + ag.load(X, (r0, j * BN), (ROWS, BN)).sum(axis=1)
        mean = s / 1024
        v = ag.zeros((ROWS, 1))
        for j in ag.range(1024 // BN):
            d = ag.load(X, (r0, j * BN), (ROWS, BN)) - mean
            v = v + (d * d).sum(axis=1)
        rstd = ag.rsqrt(v / 1024 + 1e-5)
        for j in ag.range(1024 // BN):
            ag.store(Y, (r0, j * BN), (ag.load(X, (r0, j * BN), (ROWS, BN)) - mean) * rstd)

    return layernorm_fixed
