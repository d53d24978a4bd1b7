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

__all__ = ["round_nhwc", "round_rows"]


@ag.kernel(threads=256)
def round_nhwc(X: ag.Tensor["B", "C", "R", ag.f32], Y: ag.Tensor["B", "R", "CP", ag.f32],
               BR: int = 64, BC: int = 64):
    """Y[b] = round_tf32(X[b]^T), zero columns past C. The [BC, BR] tile is stored transposed
    (ag.store(transposed=True)) in 4 x 4 blocks a thread: each block's rows load as 16 bytes of
    consecutive pixels, its columns store as 16 bytes of consecutive channels, and no value
    moves between threads (analysis/layouts.py `_vblocks`). The grid covers Y, so the padding
    columns (loads past C read 0) are written too; the copy moves bits and round_tf32 keeps
    -0.0, NaN and inf."""
    # one flat grid along x (up to 2^31 - 1 CTAs): y and z stop at 65535
    tiles_r = ag.cdiv(Y.shape[1], BR)
    tiles_c = ag.cdiv(Y.shape[2], BC)
    (p,) = ag.grid(Y.shape[0] * tiles_r * tiles_c)
    j = p % tiles_c
    i = (p // tiles_c) % tiles_r
    b = p // (tiles_c * tiles_r)
    x = ag.load(X, (b, j * BC, i * BR), (BC, BR))                # [channels, pixels]
    ag.store(Y, (b, i * BR, j * BC), ag.round_tf32(x), transposed=True)


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
