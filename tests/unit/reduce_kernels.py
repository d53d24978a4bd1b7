"""Kernels exercising reductions, broadcasts, index tiles and runtime scalars (issue "Compiler
core 2"), shared by the CPU tests (interpreter, NVRTC, verifier, codegen structure) and the
GPU test (tests/gpu/test_layouts_reductions_gpu.py)."""

from __future__ import annotations

import argus as ag

SHAPES = {1: (512,), 2: (8, 256), 3: (2, 4, 128), 4: (2, 2, 2, 128)}
FNS = ("sum", "max", "min", "prod", "argmax", "argmin")


@ag.kernel(partial_outputs=("S", "I"))   # the reduction lands in a corner of S or I
def reduce_any(X: ag.Tensor["A", "B", "C", "D", ag.f32], S: ag.Tensor["A", "B", "C", "D", ag.f32],
               I: ag.Tensor["A", "B", "C", "D", ag.i32], rank: int = 2, axis: int = 1,
               fn: str = "sum", in_role: bool = False):
    """X viewed as a rank-`rank` tile (its last dims), reduced along `axis` with `fn`."""
    (b,) = ag.grid(1)
    shape = SHAPES[rank]

    def body():
        x = ag.load(X, (0, 0, 0, 0), shape)
        r = getattr(x, fn)(axis=axis)
        if fn.startswith("arg"):
            ag.store(I, (0, 0, 0, 0), r)
        else:
            ag.store(S, (0, 0, 0, 0), r)
    if in_role:
        with ag.role("compute", warpgroups=1):
            body()
    else:
        body()


@ag.kernel
def rmsnorm(X: ag.Tensor["M", "N", ag.f32], W: ag.Tensor["N", ag.f32],
            Y: ag.Tensor["M", "N", ag.f32], eps: ag.f32, BN: int = 1024):
    (row,) = ag.grid(X.shape[0])
    N = X.shape[1]
    x = ag.load(X, (row, 0), (1, BN))
    w = ag.load(W, (0,), (BN,))
    ms = (x * x).sum(axis=1) / N
    y = x * ag.rsqrt(ms + eps) * w[None, :]
    ag.store(Y, (row, 0), y)


@ag.kernel
def masked(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], causal: ag.i32,
           shift: ag.Scalar[ag.i32]):
    """Index tiles, comparisons, & | ~ and ag.where with runtime scalars."""
    (b,) = ag.grid(1)
    x = ag.load(X, (0, 0), (4, 256))
    rows = ag.arange(4)[:, None]
    cols = ag.arange(256)[None, :]
    keep = (cols <= rows * 64 + shift) | (ag.full((4, 1), 0.0) + causal == 0)
    y = ag.where(keep & ~(x > 2.0), x, -1.0)
    ag.store(Y, (0, 0), y)


@ag.kernel(partial_outputs=("Ix", "Cs"))   # a row argmax and a column sum in corners
def acc_softmax(A: ag.Tensor["M", "K", ag.bf16], B: ag.Tensor["N", "K", ag.bf16],
                O: ag.Tensor["M", "N", ag.f32], Mx: ag.Tensor["M", "N", ag.f32],
                Ix: ag.Tensor["M", "N", ag.i32], Cs: ag.Tensor["M", "N", ag.f32],
                N: int = 64, K: int = 64, causal: bool = True):
    """S = A @ B^T on wgmma; FlashAttention's row statistics and rescale on the accumulator:
    s - s.max(axis=1), exp, row sum, o * alpha with alpha [64, 1]; an argmax over rows and
    a column sum (axis 0, across warps through shared memory)."""
    (pid,) = ag.grid(1)
    sA = ag.smem((1, 64, K), ag.bf16, swizzle=128)
    sB = ag.smem((1, N, K), ag.bf16, swizzle=128)
    pipe = ag.pipeline(1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sA[st], A, (0, 0))
            ag.tma.load(sB[st], B, (0, 0))
    with ag.role("consumer", warpgroups=1):
        acc = ag.zeros((64, N))
        with pipe.consume() as st:
            ag.wgmma(sA[st], sB[st], acc)
        s = acc * 0.125
        if causal:
            rows = ag.arange(64)[:, None]
            cols = ag.arange(N)[None, :]
            s = ag.where(cols <= rows, s, float("-inf"))
        m = s.max(axis=1)
        p = ag.exp(s - m)
        l_ = p.sum(axis=1)
        alpha = ag.exp(m - m) * 0.5
        o = p * alpha / l_
        ag.store(O, (0, 0), o)
        ag.store(Mx, (0, 0), s - m)
        ag.store(Ix, (0, 0), acc.argmax(axis=1))
        ag.store(Cs, (0, 0), acc.sum(axis=0))
