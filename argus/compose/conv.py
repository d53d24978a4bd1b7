"""The convolution step: a `conv` node (nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d, their
functional forms) on Argus's implicit-GEMM kernel (argus/kernels/conv.py through
argus.ops.conv.convolve), compiled on CUDA tensors and interpreted on CPU tensors.

fp32 tasks run as the bf16 split of `ConvRun.terms` products (6: every product whose pieces sum
to at most 2, the strict track; 3 or 1: relaxed only), the bias in the kernel's fp32 epilogue;
or, with `ConvRun.precision = "tf32"` (relaxed track only, opt-in), as ONE product of the fp32
data read as tf32: the arithmetic of PyTorch eager's own cuDNN convolution (allow_tf32 is on by
default for cuDNN), as accurate as eager, not fp32-accurate.
A transposed convolution is the gradient form of argus.ops.conv (stride 1: one convolution
with flipped, channel-swapped weights; strided: one per output phase, interleaved into the
output by Argus kernels: argus/kernels/conv_interleave.py). The result is NCHW-contiguous, so
the fused kernels that follow read it as a plain view. The implicit GEMM writes it
channels-first from its epilogue (argus.ops.conv.convolve(nchw=True), conv_kernel's nchw
store: no transpose pass, as cuDNN's fprop writes NCHW directly), and so does the im2col route
from NCHW_IM2COL_IMAGE_BYTES an image up (argus.ops.conv.im2col_nchw: one GEMM an image).
Three routes still return channels-last: a 16-bit narrow layer's TMA-store epilogue, the
im2col route below that bound (one channels-last GEMM a chunk) and the 16-bit pointwise route
(a 1x1 convolution as one GEMM); `_nchw` makes those NCHW with Argus's layout copy
(argus/compose/launch.py copy_into: the tile transpose, ag.store(transposed=True)), so the
layout pass is Argus GPU time too.

The fp32 input is packed by Argus kernels (`pack_split`: the NCHW -> NHWC transpose, then
`split_pieces` writes each slot's bf16 piece into its channels). Not Argus work (named in the
solution's header): the weight's repack and split (torch, once per parameter and version: the
cache of argus.ops.conv), a bf16 / fp16 NCHW input's copy to channels-last (argus.ops.conv's
F.pad(...).contiguous(), or the 1x1 route's reshape) and a copy when W is not a multiple of
the stride.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

import argus as ag
from argus.compose.gemm import bf16_pieces
from argus.compose.launch import run as _run
from argus.compose.launch import _COPY_DTYPES, copy_into, transpose
from argus.compose.pool import row_decode
from argus.ops import conv as conv_ops


@dataclass(frozen=True)
class ConvRun:
    """What the agent may tune: the fp32 split (6: strict, 3 / 1: relaxed only) and the
    kernel's schedule (None: argus.ops.conv.schedule_for). precision="tf32": fp32 tasks run
    as one tf32 product instead of the split (`terms` unused; relaxed track only: about
    1e-3 relative, cuDNN's own TF32 accuracy); 16-bit tasks are unaffected."""

    terms: int = 6
    schedule: object = None
    precision: str | None = None

    def __post_init__(self) -> None:
        if self.precision not in (None, "tf32"):
            raise ValueError(f"ConvRun(precision={self.precision!r}): the one choice is "
                             f"'tf32' (None: the bf16 split of `terms` products)")


def run_conv(node, x: torch.Tensor, weight: torch.Tensor, bias, run: ConvRun | None = None
             ) -> torch.Tensor:
    """The node's convolution of x (NC + spatial dims, fp32 / bf16 / fp16) as an
    NCHW-contiguous tensor of the node's shape and dtype."""
    a = node.attrs
    run = run or ConvRun()
    if depthwise(node, x) and a["dims"] == 3:
        # 1-d and 2-d take argus.ops.conv's depthwise route below (its own kernel, exact fp32,
        # the split's terms unused): faster than this template on every row measured on the
        # H200 (docs/perf/conv.md, 2026-12-03: 1.97x vs 1.29x cuDNN on L1/82); 3-d stays here
        return run_depthwise(node, x, weight, bias)
    terms = run.terms if x.dtype == torch.float32 else 1
    if run.precision == "tf32" and x.dtype == torch.float32:
        # one tf32 product on the fp32 data: no split, no packing
        conv = functools.partial(conv_ops.convolve, schedule=run.schedule, precision="tf32",
                                 nchw=True)
    else:
        conv = functools.partial(conv_ops.convolve, terms=terms, schedule=run.schedule,
                                 pack_x=pack_split if x.dtype == torch.float32 else None,
                                 nchw=True)
    dims = a["dims"]
    if a["transposed"]:
        fn = {1: conv_ops.conv_transpose1d, 2: conv_ops.conv_transpose2d,
              3: conv_ops.conv_transpose3d}[dims]
        # conv_transpose1d runs as 2-d on a unit height itself: `run` sees 2-d / 3-d problems
        y = fn(x, weight, bias, a["stride"], a["padding"], a["output_padding"], a["groups"],
               a["dilation"], run=conv)
    else:
        y = _nd(conv, dims)(x, weight, bias, a["stride"], a["padding"], a["dilation"],
                            a["groups"])
    return _nchw(y.to(node.dtype) if y.dtype != node.dtype else y)


@ag.kernel(threads=128)
def split_pieces(X: ag.Tensor["G", "P", "CG", ag.f32], Y: ag.Tensor["G", "S", "P", "CG", ag.bf16],
                 SLOTS: tuple = (0,), ROWS: int = 32, BC: int = 64):
    """Y[g, t, p, c] = piece SLOTS[t] of X[g, p, c]: x0 = bf16(x), x1 = bf16(x - x0),
    x2 = bf16(x - x0 - x1) (each remainder exact in fp32; argus.ops.conv's split). A tile of
    ROWS pixels x BC channels of one group per CTA; stores are masked at the pixel and channel
    extents, so each slot's piece lands in its own Cg columns only. The pixel blocks (all
    images' pixels: the long axis) are the grid's x, which alone may exceed 65535."""
    i, g, j = ag.grid(ag.cdiv(X.shape[1], ROWS), X.shape[0], ag.cdiv(X.shape[2], BC))
    x = ag.load(X, (g, i * ROWS, j * BC), (ROWS, BC))
    pieces = bf16_pieces(x, max(SLOTS) + 1)
    for t, which in enumerate(SLOTS):
        ag.store(Y, (g, t, i * ROWS, j * BC), pieces[which])


def pack_split(x5: torch.Tensor, slots, groups: int, chunk_images: int | None = None
               ) -> torch.Tensor:
    """argus.ops.conv's `pack_x` on Argus kernels: the fp32 input [N, C, D, H, W] as the split
    kernel operand, the contiguous bf16 [N, D, H, W, groups * Cg'] whose group g holds the
    pieces of its Cg channels per slot side by side (slot t: piece slots[t][0]), zero-padded
    to Cg' (a multiple of 8). NCHW -> NHWC by the Argus transpose, then `split_pieces`, in
    chunks of images (argus.ops.conv.image_chunks: at most PACK_CHUNK_BYTES of fp32
    temporaries, argus.ops.conv says why; or `chunk_images` images a chunk): each chunk's
    pieces land in its own slice of the result, the same bytes as one pass (every value's
    pieces depend on that value alone)."""
    N, C, D, H, W = x5.shape
    cg, count = C // groups, len(slots)
    width = count * cg + (-(count * cg) % 8)
    dhw = D * H * W
    # zeros: the channels past count * cg of each group are the TMA pitch padding
    alloc = torch.zeros if width != count * cg else torch.empty
    out = alloc(N * dhw * groups * width, dtype=torch.bfloat16, device=x5.device)
    chunks = conv_ops.image_chunks(N, C * dhw * 4, conv_ops.PACK_CHUNK_BYTES, chunk_images,
                                   strides=(x5.stride(0),))
    if not chunks:
        return out.view(N, D, H, W, groups * width)
    most = max(n1 - n0 for n0, n1 in chunks)
    # one buffer of the largest chunk each, reused (stream order: a chunk's kernels are done
    # with it before the next chunk's are launched)
    nhwc_buf = torch.empty(most, dhw, C, dtype=torch.float32, device=x5.device)
    copy_buf = (None if x5.is_contiguous() else
                torch.empty(most, C, D, H, W, dtype=torch.float32, device=x5.device))
    bc = min(64, max(8, 1 << (cg - 1).bit_length()))
    constexprs = dict(SLOTS=tuple(i for i, _ in slots), ROWS=max(1, 2048 // bc // 2), BC=bc)
    for n0, n1 in chunks:
        xs = x5[n0:n1]
        if copy_buf is not None:
            copy_into(xs, copy_buf[:n1 - n0])
            xs = copy_buf[:n1 - n0]
        nhwc = nhwc_buf[:n1 - n0]
        _run(transpose, (xs.reshape(n1 - n0, C, dhw), nhwc))
        pixels = (n1 - n0) * dhw
        y = out.as_strided((groups, count, pixels, cg), (width, cg, groups * width, 1),
                           n0 * dhw * groups * width)
        xg = nhwc.view(pixels, groups, cg).permute(1, 0, 2)
        _run(split_pieces, (xg, y), **constexprs)
    return out.view(N, D, H, W, groups * width)


def _nd(conv, dims: int):
    """convolve for a `dims`-d problem: 1-d as 2-d on a unit height (exact)."""
    if dims != 1:
        return conv

    def conv1d(x, w, b, stride, padding, dilation, groups):
        (s,), (p,), (d,) = (_one(v) for v in (stride, padding, dilation))
        return conv(x.unsqueeze(2), w.unsqueeze(2), b, (1, s), (0, p), (1, d),
                    groups).squeeze(2)
    return conv1d


def _one(v) -> tuple:
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def _nchw(y: torch.Tensor) -> torch.Tensor:
    """y (N, C, *spatial) -> an NCHW-contiguous tensor, nothing done when it is one already:
    Argus's layout copy (copy_into: the tile transpose of the channels-last buffer a route
    wrote, for fp32 and the 16-bit types alike, so that a composed solution's layout pass is
    an Argus kernel, not torch's `.contiguous()`); torch's copy only for a dtype the layout
    copies have no kernel for (none a convolution returns: fp32, bf16, fp16)."""
    if y.is_contiguous():
        return y
    if y.dtype not in _COPY_DTYPES:
        return y.contiguous()
    out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    copy_into(y, out)
    return out


# ------------------------------------------------------------------------- depthwise
_DEPTHWISE: dict = {}


def depthwise(node, x: torch.Tensor) -> bool:
    """A depthwise convolution (groups = input channels, one input channel per group) in fp32
    whose last spatial dim splits into [W / stride, stride]: the CUDA-core template, exact
    fp32. (As a GEMM each group would be an N = multiplier GEMM padded to a 64-wide tile.)"""
    a = node.attrs
    w_in = x.shape[-1]
    return (not a["transposed"] and a["groups"] == x.shape[1] and x.dtype == torch.float32
            and node.dtype == torch.float32 and w_in % a["stride"][-1] == 0)


def _depthwise_source(spatial_in, spatial_out, k, s, p, d, channels: int, mult: int,
                      bias: bool, bn: int, rows: int) -> str:
    """The pooling template's walk (argus/compose/pool.py: ROWS output rows per CTA, BN outputs
    along the last spatial dim, the last input dim seen as [W / s, s], padding read as 0) with
    a weighted sum: output channel k of image n reads input channel k // mult, and every
    window offset adds x * w[k, offset]."""
    import itertools
    import math

    n = len(spatial_in)
    sw = s[-1]
    xdims = ", ".join(map(str, spatial_in[:-1] + (spatial_in[-1] // sw, sw)))
    ydims = ", ".join(map(str, spatial_out + (1,)))
    taps = math.prod(k)
    k_out = channels * mult
    n_rows = f"Y.shape[0] * {math.prod(spatial_out[:-1])}"
    bias_arg = ", B: ag.Tensor[\"K\", 1, ag.f32]" if bias else ""
    lines = [f"@ag.kernel(threads={max(32, min(128, bn))})",
             f"def depthwise(X: ag.Tensor[\"NC\", {xdims}, ag.f32], "
             f"Wt: ag.Tensor[\"K\", {taps}, ag.f32]{bias_arg}, "
             f"Y: ag.Tensor[\"NK\", {ydims}, ag.f32], BN: int = {bn}, ROWS: int = {rows}):",
             f"    pb, q = ag.grid(ag.cdiv({n_rows}, ROWS), ag.cdiv({spatial_out[-1]}, BN))",
             "    o_last = q * BN"]
    for j in range(rows):
        lines += row_decode(j, spatial_out, "nk")
        lines.append(f"    kk = nk % {k_out}")
        # a row past the end has nk >= N * K, so xr >= N * C: its loads read 0, its store is
        # masked by Y's bounds
        lines.append(f"    xr = nk // {k_out} * {channels} + kk // {mult}")
        lines.append("    acc = ag.full((BN, 1), 0.0)")
        for t, offs in enumerate(itertools.product(*(range(kk) for kk in k))):
            idx = ["xr"] + [f"o{i} * {s[i]} + {offs[i] * d[i] - p[i]}" for i in range(n - 1)]
            last = offs[-1] * d[-1] - p[-1]
            idx += [f"o_last + {last // sw}", str(last % sw)]
            lines.append(f"    x = ag.load(X, ({', '.join(idx)}), (BN, 1), other=0.0)")
            lines.append(f"    acc = acc + x * ag.load(Wt, (kk, {t}), (1, 1))")
        if bias:
            lines.append("    acc = acc + ag.load(B, (kk, 0), (1, 1))")
        out_idx = ["nk"] + [f"o{i}" for i in range(n - 1)] + ["o_last", "0"]
        lines.append(f"    ag.store(Y, ({', '.join(out_idx)}), acc)")
    return "\n".join(lines) + "\n"


def run_depthwise(node, x: torch.Tensor, weight: torch.Tensor, bias) -> torch.Tensor:
    """The depthwise template on x (NC + spatial, fp32): the result NCHW-contiguous."""
    import math

    from argus.compose import pool, tile
    from argus.compose.launch import copy_into

    a = node.attrs
    dims = a["dims"]
    spatial_in, spatial_out = tuple(x.shape[-dims:]), tuple(node.shape[-dims:])
    channels, k_out = x.shape[1], node.shape[1]
    if not x.is_contiguous():
        buf = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        copy_into(x, buf)
        x = buf
    bn = min(256, tile.pow2(spatial_out[-1]))
    n_rows = node.shape[0] * k_out * math.prod(spatial_out[:-1])
    rows = pool.rows_per_cta(bn, math.prod(a["kernel"]), n_rows)
    key = (spatial_in, spatial_out, a["kernel"], a["stride"], a["padding"], a["dilation"],
           channels, k_out // channels, bias is not None, bn, rows)
    if key not in _DEPTHWISE:
        src = _depthwise_source(*key)
        _DEPTHWISE[key] = tile.load_source(src, f"depthwise{len(_DEPTHWISE)}")["depthwise"]
    sw = a["stride"][-1]
    xv = x.view(x.shape[0] * channels, *spatial_in[:-1], spatial_in[-1] // sw, sw)
    wt = weight.detach().reshape(k_out, -1).float().contiguous()
    y = torch.empty(node.shape, dtype=torch.float32, device=x.device)
    yv = y.view(node.shape[0] * k_out, *spatial_out, 1)
    args = (xv, wt) + ((bias.detach().float().reshape(k_out, 1).contiguous(),)
                       if bias is not None else ()) + (yv,)
    _run(_DEPTHWISE[key], args)
    return y


__all__ = ["ConvRun", "depthwise", "pack_split", "run_conv", "run_depthwise", "split_pieces"]
