"""The tf32 convolution's input, rounded: the fp32 activations as the channels-last operand of
the implicit-GEMM kernel (argus/kernels/conv.py, precision="tf32"), every value rounded to tf32
to nearest (ag.round_tf32: PTX cvt.rna.tf32.f32) on its way there.

Why: the kernel's producer moves X by TMA straight into shared memory and wgmma reads it from
there, so no instruction of the kernel touches an input value; the tensor core reads an
unrounded fp32 operand by dropping its 13 low bits (toward zero), a bias that does not average
out over K (normwise ~8e-4 on the H200, against ~3e-4 for cuDNN, which rounds first). The one
pass over x this kernel makes is the NCHW -> NHWC copy the op made anyway for an NCHW input
(same traffic); a channels-last input costs one extra read and write of x.

Invariant: Y[b, r, c] = round_tf32(X[b, c, r]) (`round_nhwc`: the transpose) or
round_tf32(X[b, r, c]) (`round_rows`) for c < C, and 0 for C <= c < Y.shape[2] (the channel
padding TMA's 16-byte pixel pitch needs), bit for bit; every element of Y is written.
"""

import argus as ag

__all__ = ["round_nhwc", "round_nhwc_for", "round_rows"]


def _round_transposed(X, Y, BR: int, BC: int) -> None:
    """The body of the round_nhwc kernels (plain Python at trace time): Y[b] =
    round_tf32(X[b]^T) by [BC, BR] tiles on one flat grid along x (up to 2^31 - 1 CTAs: y and
    z stop at 65535)."""
    tiles_r = ag.cdiv(Y.shape[1], BR)
    tiles_c = ag.cdiv(Y.shape[2], BC)
    (p,) = ag.grid(Y.shape[0] * tiles_r * tiles_c)
    j = p % tiles_c
    i = (p // tiles_c) % tiles_r
    b = p // (tiles_c * tiles_r)
    x = ag.load(X, (b, j * BC, i * BR), (BC, BR))                # [channels, pixels]
    ag.store(Y, (b, i * BR, j * BC), ag.round_tf32(x), transposed=True)


@ag.kernel(threads=256)
def round_nhwc(X: ag.Tensor["B", "C", "R", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
               BR: int = 64, BC: int = 64):
    """Y[b] = round_tf32(X[b]^T), zero columns past C. The [BC, BR] tile is stored transposed
    (ag.store(transposed=True)) in 4 x 4 blocks a thread: each block's rows load as 16 bytes of
    consecutive pixels, its columns store as 16 bytes of consecutive channels, and no value
    moves between threads (analysis/layouts.py `_vblocks`). The grid covers Y, so the padding
    columns (loads past C read 0) are written too; the copy moves bits and round_tf32 keeps
    -0.0, NaN and inf."""
    _round_transposed(X, Y, BR, BC)


# Narrow channel counts (CP = 4 .. 32: the first layers' 3 or 16 input channels): a 64-channel
# tile would move CP x 64 elements a CTA and leave most threads masked, so the tile narrows to
# CP channels and widens to 4096 / CP pixels (the same 16 elements a thread); at CP = 4 a
# thread's four pixels are 64 contiguous bytes of Y.
@ag.kernel(threads=256)
def round_nhwc4(X: ag.Tensor["B", "C", "R", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
                BR: int = 1024, BC: int = 4):
    """`round_nhwc` with [4, 1024] tiles (CP <= 4)."""
    _round_transposed(X, Y, BR, BC)


@ag.kernel(threads=256)
def round_nhwc8(X: ag.Tensor["B", "C", "R", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
                BR: int = 512, BC: int = 8):
    """`round_nhwc` with [8, 512] tiles (CP <= 8)."""
    _round_transposed(X, Y, BR, BC)


@ag.kernel(threads=256)
def round_nhwc16(X: ag.Tensor["B", "C", "R", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
                 BR: int = 256, BC: int = 16):
    """`round_nhwc` with [16, 256] tiles (CP <= 16)."""
    _round_transposed(X, Y, BR, BC)


@ag.kernel(threads=256)
def round_nhwc32(X: ag.Tensor["B", "C", "R", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
                 BR: int = 128, BC: int = 32):
    """`round_nhwc` with [32, 128] tiles (CP <= 32)."""
    _round_transposed(X, Y, BR, BC)


def round_nhwc_for(cp: int):
    """The round_nhwc kernel for Y's row of `cp` (padded) channels: the narrowest tile that
    spans it, 64 channels past 32."""
    for width, kernel in ((4, round_nhwc4), (8, round_nhwc8), (16, round_nhwc16),
                          (32, round_nhwc32)):
        if cp <= width:
            return kernel
    return round_nhwc


@ag.kernel(threads=256)
def round_rows(X: ag.Tensor["B", "R", "C", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
               BR: int = 8, BC: int = 128):
    """Y[b, r] = round_tf32(X[b, r]) (a channels-last input, or in place on a padded copy),
    zero columns past C."""
    tiles_r = ag.cdiv(Y.shape[1], BR)
    tiles_c = ag.cdiv(Y.shape[2], BC)
    (p,) = ag.grid(Y.shape[0] * tiles_r * tiles_c)
    j = p % tiles_c
    i = (p // tiles_c) % tiles_r
    b = p // (tiles_c * tiles_r)
    ag.store(Y, (b, i * BR, j * BC), ag.round_tf32(ag.load(X, (b, i * BR, j * BC), (BR, BC))))
