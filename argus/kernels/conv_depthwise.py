"""Depthwise 2-d convolution (groups = input channels) in exact fp32 on the CUDA cores: each
output element is the fp32 sum of its R * S products, no tensor core and no GEMM padding.

Why not the implicit GEMM: with one input channel per group each group is a GEMM with K = R * S
and N = the channel multiplier (1 in every KernelBench depthwise task), padded to a 64-wide
weight tile and a 32-channel K slice per tap: 1/64 of the tile's products are useful and the
kernel ran at 0.02-0.07x cuDNN under tf32 on the H200 (docs/perf/conv.md, 2baa4ab). The work is
memory bound (2 * R * S flops per output element against 8 bytes moved), so the CUDA cores in
fp32 are the right unit, and fp32 FFMA is exact, which also meets the tf32 and split tracks'
accuracy.

Layout: NCHW-contiguous input and output (what KernelBench and compose pass). The input is
read through a view [N * C, H / sh, sh, W / sw, sw] (argus.ops.conv builds it; H and W are
multiples of the strides there, zero-padded when not), so input row h = sh * a + b of tap r
lies at (a, b) with b a compile-time phase, and a tile of BH output rows x BW output columns
is read as strided rows of the view: consecutive output columns read consecutive elements of
the (WS) axis, which the threads of a warp read together (coalesced); each input row a thread
needs is loaded once per filter column and used by every output row that reads it, and the
filter columns re-read neighbouring elements through L1.

Invariant: Y[n * K + k, p, q] = act(bias[k] + sum over (r, s) of
X[n * C + k // mult, p * sh + r * dh - ph, q * sw + s * dw - pw] * W[k, r * S + s]), an
input position outside [0, H) x [0, W) read as 0 (the load's bounds), every Y element written
once (the grid covers Y; stores are masked at P and Q).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import argus as ag
from argus.kernels.conv import ACTIVATIONS, _activate, check_geometry_fields

__all__ = ["DepthwiseGeometry", "depthwise_kernel", "depthwise_tile", "input_rows"]


@dataclass(frozen=True)
class DepthwiseGeometry:
    """What the problem fixes at compile time: the filter and its index map (output (p, q), tap
    (r, s) -> input (p * stride_h + r * dil_h - pad_h, q * stride_w + s * dil_w - pad_w)) and
    the channel multiplier (output channels per input channel)."""

    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    mult: int = 1

    def __post_init__(self) -> None:
        check_geometry_fields(self, "sizes, strides, dilations and the multiplier")


# input-row loads per thread (distinct input rows x filter columns) a tile may take: NVCC
# issues them all ahead of the FMAs, ~1.3 registers each (3x3 at BH = 8: 30 loads, 84
# registers; 3x7 at BH = 4: 42 loads, 109 registers, at BH = 8: 145), and a memory-bound kernel
# wants several CTAs per SM
LOADS_PER_THREAD = 32


def input_rows(geom: DepthwiseGeometry, bh: int) -> dict:
    """{(row offset a, stride phase b): [(output row i, filter row r), ...]}: the input rows
    (view coordinates p0 + a, b) that BH output rows from p0 read, and who reads each one."""
    users: dict = {}
    for i in range(bh):
        for r in range(geom.r):
            off = r * geom.dil_h - geom.pad_h
            users.setdefault((i + off // geom.stride_h, off % geom.stride_h), []).append((i, r))
    return users


def depthwise_tile(p: int, q: int, geom: DepthwiseGeometry) -> tuple[int, int]:
    """(BH, BW) for P x Q outputs: BW output columns (a power of two in [32, 128]: one thread
    per column, a warp's loads one coalesced run) and BH output rows per thread (a power of
    two up to 8 and up to P rounded up), the most whose input rows x filter columns stay
    within LOADS_PER_THREAD (at least 1). A first choice, not measured on the H200 yet
    (scripts/gpu_conv_bench.py --cases depthwise times it)."""
    bw = 32
    while bw < min(q, 128):
        bw *= 2
    bh = 1
    while bh < min(p, 8) and len(input_rows(geom, 2 * bh)) * geom.s <= LOADS_PER_THREAD:
        bh *= 2
    return bh, bw


@functools.lru_cache(maxsize=None)
def depthwise_kernel(bias: bool = False, activation: str = "none",
                     threads: int = 128) -> ag.KernelFunction:
    """The depthwise kernel for one epilogue kind and CTA size (cached): compile-time `geom`
    (DepthwiseGeometry) and tile (BH, BW); run it with threads = BW (one column per thread,
    `depthwise_tile`)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")

    def depthwise2d(X: ag.Tensor["NC", "HS", "SH", "WS", "SW", ag.f32],   # [N*C, H/sh, sh, ..]
                    Wt: ag.Tensor["K", "T", ag.f32],                      # [K, R*S]
                    Bias: ag.Tensor["K", 1, ag.f32],                      # unread without bias
                    Y: ag.Tensor["NK", "P", "U", "Q", "V", ag.f32],       # [N*K, P, 1, Q, 1]
                    geom: DepthwiseGeometry = DepthwiseGeometry(1, 1), BH: int = 8,
                    BW: int = 128):
        g = geom
        K = Wt.shape[0]
        nk, pb, qb = ag.grid(Y.shape[0], ag.cdiv(Y.shape[1], BH), ag.cdiv(Y.shape[3], BW))
        k = nk % K
        # K = C * mult, so n * K + k over mult is n * C + k // mult: the input plane
        xr = nk // g.mult
        p0, q0 = pb * BH, qb * BW
        # the R * S weights of channel k, loaded once (scalars: registers)
        wk = [[ag.load_scalar(Wt, (k, r * g.s + t)) for t in range(g.s)] for r in range(g.r)]
        # each input row a thread's BH output rows read is loaded once per filter column and
        # feeds every (output row, filter row) pair that reads it: (BH + R - 1) * S loads per
        # thread at stride 1 instead of BH * R * S (the generated loads are not merged by NVCC:
        # each carries its own bounds predicate). Input row of output row i, tap r:
        # (p0 + i) * sh + r * dh - ph = sh * (p0 + i + off // sh) + off % sh, off = r*dh - ph.
        users = input_rows(g, BH)
        accs = [ag.full((1, 1, BW, 1), 0.0) for _ in range(BH)]
        for (row, phase), pairs in sorted(users.items()):
            for t in range(g.s):
                dw = t * g.dil_w - g.pad_w
                # floor division: a negative offset lands before column 0 (read as 0)
                x = ag.load(X, (xr, p0 + row, phase, q0 + dw // g.stride_w, dw % g.stride_w),
                            (1, 1, BW, 1), other=0.0)
                for i, r in pairs:
                    accs[i] = accs[i] + x * wk[r][t]
        for i in range(BH):
            y = accs[i]
            if bias:
                y = y + ag.load_scalar(Bias, (k, 0))
            ag.store(Y, (nk, p0 + i, 0, q0, 0), _activate(y, activation))

    epi = ("_bias" if bias else "") + ("" if activation == "none" else f"_{activation}")
    return ag.kernel(depthwise2d, threads=threads, name=f"conv2d_depthwise{epi}_{threads}")
