"""Seeded bugs of the four classes the held-out check found missed (issue 13, Verifier 2), in
spellings other than tests/mutations/heldout_kernels.py's, each marked `# BUG:<name>`, with
correct variants that must stay clean:

  * a permutation of a fixed (integer) dim: a column tile or a head-dim half swapped;
  * two same-shape tiles combined element by element at different batches (`X[b] + Y[0]`);
  * a running max never advanced (`m = m`) in an online softmax;
  * a mean divided by the block width instead of the reduced extent.

Kept apart from kernels.py and heldout_kernels.py so their line numbers do not move."""

from __future__ import annotations

import argus as ag

INF = float("inf")


def make_scale_fixed_cols(bug: str | None = None):
    """Y[M, 256] = 2 X[M, 256] over two 128-column tiles: the column tile from pid_n."""

    @ag.kernel(threads=128, name="scale_fixed_cols")
    def scale_fixed_cols(X: ag.Tensor["M", 256, ag.f32], Y: ag.Tensor["M", 256, ag.f32]):
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], 4), 2)
        if bug == "next_col_tile":
            x = ag.load(X, (pid_m * 4, ((pid_n + 1) % 2) * 128), (4, 128))  # BUG:next_col_tile
        else:
            x = ag.load(X, (pid_m * 4, pid_n * 128), (4, 128))
        ag.store(Y, (pid_m * 4, pid_n * 128), x * 2.0)

    return scale_fixed_cols


def make_head_halves(bug: str | None = None):
    """O[BH, S, 128] = Q[BH, S, 128] + V[BH, S, 128] in two 64-wide head-dim chunks, the
    second half stored first."""

    @ag.kernel(threads=128, name="head_halves")
    def head_halves(Q: ag.Tensor["BH", "S", 128, ag.f32], V: ag.Tensor["BH", "S", 128, ag.f32],
                    O: ag.Tensor["BH", "S", 128, ag.f32]):
        pid, bh = ag.grid(ag.cdiv(Q.shape[1], 4), Q.shape[0])
        for h in range(2):
            q = ag.load(Q, (bh, pid * 4, h * 64), (4, 64))
            v = ag.load(V, (bh, pid * 4, h * 64), (4, 64))
            if bug == "halves_swapped":
                ag.store(O, (bh, pid * 4, (1 - h) * 64), q + v)  # BUG:halves_swapped
            else:
                ag.store(O, (bh, pid * 4, h * 64), q + v)

    return head_halves


def make_transpose_fixed(bug: str | None = None):
    """Y = X^T for X [64, 64] (one CTA): rows and columns of one extent, which goes where is
    the kernel's (clean: no integer dim is linked when two fields have its extent)."""

    @ag.kernel(threads=128, name="transpose_fixed")
    def transpose_fixed(X: ag.Tensor[64, 64, ag.f32], Y: ag.Tensor[64, 64, ag.f32]):
        (pid,) = ag.grid(1)
        x = ag.load(X, (0, 0), (64, 64))
        ag.store(Y, (0, 0), x, transposed=True)

    return transpose_fixed


def make_residual_batched(bug: str | None = None):
    """H[b, s] = X[b, s] * G[b, s] + R[b, s] per row block, one batch per CTA row of the grid;
    W (no batch dim) is broadcast to every batch (clean)."""

    @ag.kernel(threads=128, name="residual_batched")
    def residual_batched(X: ag.Tensor["B", "S", "D", ag.f32], G: ag.Tensor["B", "S", "D", ag.f32],
                         R: ag.Tensor["B", "S", "D", ag.f32], W: ag.Tensor["S", "D", ag.f32],
                         H: ag.Tensor["B", "S", "D", ag.f32]):
        pid_s, bt = ag.grid(ag.cdiv(X.shape[1], 4), X.shape[0])
        D = X.shape[2]
        ag.tag_assume(lambda: ag.sym(D) == 256)
        x = ag.load(X, (bt, pid_s * 4, 0), (4, 256))
        w = ag.load(W, (pid_s * 4, 0), (4, 256))
        if bug == "gate_batch_zero":
            g = ag.load(G, (0, pid_s * 4, 0), (4, 256))  # BUG:gate_batch_zero
        else:
            g = ag.load(G, (bt, pid_s * 4, 0), (4, 256))
        r = ag.load(R, (bt, pid_s * 4, 0), (4, 256))
        ag.store(H, (bt, pid_s * 4, 0), x * g * w + r)

    return residual_batched


def make_row_softmax_stale(bug: str | None = None, BN: int = 512):
    """Row softmax in one pass over blocks of the row (an online max and sum), then a second
    pass writing exp(x - m) / l."""

    @ag.kernel(threads=256, name="row_softmax_stale")
    def row_softmax_stale(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        run_max = ag.full((1, 1), -INF)
        run_sum = ag.full((1, 1), 0.0)
        for j in ag.range(blocks):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            block_max = ag.maximum(run_max, x.max(axis=1))
            run_sum = run_sum * ag.exp(run_max - block_max) + \
                ag.exp(x - block_max).sum(axis=1)
            if bug == "max_kept":
                run_max = run_max  # BUG:max_kept
            else:
                run_max = block_max
        for j in ag.range(blocks):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            ag.store(Y, (row, j * BN), ag.exp(x - run_max) / run_sum)

    return row_softmax_stale


def make_row_mean_looped(bug: str | None = None, BN: int = 256):
    """Row means of X [M, N] over cdiv(N, BN) blocks, the tail masked with 0."""

    @ag.kernel(threads=256, name="row_mean_looped")
    def row_mean_looped(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", 1, ag.f32]):
        (row,) = ag.grid(X.shape[0])
        N = X.shape[1]
        blocks = ag.cdiv(N, BN)
        acc = ag.full((1, 1), 0.0)
        for j in ag.range(blocks):
            acc = acc + ag.load(X, (row, j * BN), (1, BN), other=0.0).sum(axis=1)
        if bug == "mean_over_blocks":
            y = acc / (blocks * BN)  # BUG:mean_over_blocks
        else:
            y = acc / N
        ag.store(Y, (row, 0), y)

    return row_mean_looped


def make_rms_rows(bug: str | None = None, BN: int = 1024):
    """RMS norm of rows of X [M, N] with N <= BN: four rows a CTA, one masked block a row."""

    @ag.kernel(threads=256, name="rms_rows")
    def rms_rows(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 4))
        N = X.shape[1]
        ag.tag_assume(lambda: ag.sym(N) <= BN)
        x = ag.load(X, (pid * 4, 0), (4, BN), other=0.0)
        if bug == "ms_over_block":
            ms = (x * x).sum(axis=1) / BN  # BUG:ms_over_block
        else:
            ms = (x * x).sum(axis=1) / N
        ag.store(Y, (pid * 4, 0), x * ag.rsqrt(ms + 1e-6))

    return rms_rows


def make_col_mean_recip(bug: str | None = None, ROWS: int = 64):
    """Column means of X [R, 128] (R <= ROWS: one masked block a column), spelled as a
    multiplication by the reciprocal."""

    @ag.kernel(threads=128, name="col_mean_recip")
    def col_mean_recip(X: ag.Tensor["R", 128, ag.f32], Y: ag.Tensor[1, 128, ag.f32]):
        (pid,) = ag.grid(1)
        R = X.shape[0]
        ag.tag_assume(lambda: ag.sym(R) <= ROWS)
        x = ag.load(X, (0, 0), (ROWS, 128), other=0.0)
        if bug == "times_block_recip":
            y = x.sum(axis=0) * (1.0 / ROWS)  # BUG:times_block_recip
        else:
            y = x.sum(axis=0) / R
        ag.store(Y, (0, 0), y)

    return col_mean_recip


def make_gemm_fixed_n_load(bug: str | None = None, stages: int = 2):
    """C[M, 256] = A @ B[256, K]^T with the column tile chosen at B's load (the store is
    right): the wrong B rows reach C's columns through the accumulator's tags."""
    BM, BN, BK = 128, 128, 64

    @ag.kernel(name="gemm_fixed_n_load")
    def gemm_fixed_n_load(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor[256, "K", ag.bf16],
                          C: ag.Tensor["M", 256, ag.bf16]):
        M, K = A.shape
        pid_m, pid_n = ag.grid(ag.cdiv(M, BM), 2)
        sA = ag.smem((stages, BM, BK), ag.bf16, swizzle=128)
        sB = ag.smem((stages, BN, BK), ag.bf16, swizzle=128)
        pipe = ag.pipeline(stages, consumers=2)
        k_tiles = ag.cdiv(K, BK)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(k_tiles):
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (pid_m * BM, k * BK))
                    if bug == "b_other_half":
                        ag.tma.load(sB[st], B, ((1 - pid_n) * BN, k * BK))  # BUG:b_other_half
                    else:
                        ag.tma.load(sB[st], B, (pid_n * BN, k * BK))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            acc = ag.zeros((64, BN), ag.f32)
            for k in ag.range(k_tiles):
                with pipe.consume() as st:
                    ag.wgmma(sA[st].rows_of(wg * 64, 64), sB[st], acc)
            ag.store(C, (pid_m * BM + wg * 64, pid_n * BN), acc.to(ag.bf16))

    return gemm_fixed_n_load


def make_row_lse_no_update(bug: str | None = None, BN: int = 512):
    """Row log-sum-exp in one online pass; the bug drops the running max's update (no
    `m = m` line at all)."""

    @ag.kernel(threads=256, name="row_lse_no_update")
    def row_lse_no_update(X: ag.Tensor["M", "N", ag.f32], L: ag.Tensor["M", 1, ag.f32]):
        (row,) = ag.grid(X.shape[0])
        blocks = ag.cdiv(X.shape[1], BN)
        m = ag.full((1, 1), -INF)
        s = ag.full((1, 1), 0.0)
        for j in ag.range(blocks):
            x = ag.load(X, (row, j * BN), (1, BN), other=-INF)
            mx = ag.maximum(m, x.max(axis=1))  # BUG:lse_max_dropped
            s = s * ag.exp(m - mx) + ag.exp(x - mx).sum(axis=1)
            if bug != "lse_max_dropped":
                m = mx
        ag.store(L, (row, 0), m + ag.log(s))

    return row_lse_no_update


def make_layernorm_rows(bug: str | None = None, BN: int = 1024):
    """LayerNorm of rows of X [M, N] (N <= BN, one masked block a row), two reductions."""

    @ag.kernel(threads=256, name="layernorm_rows")
    def layernorm_rows(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        N = X.shape[1]
        ag.tag_assume(lambda: ag.sym(N) <= BN)
        x = ag.load(X, (row, 0), (1, BN), other=0.0)
        if bug == "ln_mean_over_block":
            mean = x.sum(axis=1) / BN  # BUG:ln_mean_over_block
        else:
            mean = x.sum(axis=1) / N
        d = ag.where(ag.arange(BN)[None, :] < N, x - mean, 0.0)
        var = (d * d).sum(axis=1) / N
        ag.store(Y, (row, 0), d * ag.rsqrt(var + 1e-5))

    return layernorm_rows


def make_avg_pool_2x2(bug: str | None = None, tied: bool = True):
    """A 2 x 2 average pool, Y[H/2, W/2] from X[H, W], one output element a CTA: the loop walks
    the window's rows (kh) while each step sums a 2-wide window of W. The sum is carried over
    a loop that does not walk the summed field (W) over [0, W), so its count is the window's
    4, not W's extent (the review of 2026-12-04 found it reported as reduce.mean).
    Bugs: "pool_divisor" divides by 2 (the block width, not the window's 4 elements);
    "pool_row_repeat" sums row ro * 2 at both steps (the window's second row never read, the
    first counted twice: the divisor 4 is right, the elements are not). tied=False drops the
    shape assumptions (X's H, W = 2 x Y's): a window may then reach past X's edge, where
    the count is the padding convention's (not a bug: unknown)."""

    @ag.kernel(threads=128, name="avg_pool_2x2")
    def avg_pool_2x2(X: ag.Tensor["H", "W", ag.f32], Y: ag.Tensor["HO", "WO", ag.f32]):
        ro, wo = ag.grid(Y.shape[0], Y.shape[1])
        if tied:
            ag.tag_assume(lambda: ag.sym(X.shape[0]) == 2 * ag.sym(Y.shape[0]))
            ag.tag_assume(lambda: ag.sym(X.shape[1]) == 2 * ag.sym(Y.shape[1]))
        acc = ag.full((1, 1), 0.0)
        for kh in ag.range(2):
            if bug == "pool_row_repeat":
                row = ag.load(X, (ro * 2, wo * 2), (1, 2))   # BUG:pool_row_repeat
                acc = acc + row.sum(axis=1)
            else:
                acc = acc + ag.load(X, (ro * 2 + kh, wo * 2), (1, 2)).sum(axis=1)
        if bug == "pool_divisor":
            ag.store(Y, (ro, wo), acc / 2)   # BUG:pool_divisor
        else:
            ag.store(Y, (ro, wo), acc / 4)

    return avg_pool_2x2
