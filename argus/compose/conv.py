"""The convolution step: a `conv` node (nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d, their
functional forms) on Argus's implicit-GEMM kernel (argus/kernels/conv.py through
argus.ops.conv.convolve), compiled on CUDA tensors and interpreted on CPU tensors.

fp32 tasks run as the bf16 split of `ConvRun.terms` products (6: every product whose pieces sum
to at most 2, the strict track; 3 or 1: relaxed only), the bias in the kernel's fp32 epilogue.
A transposed convolution is the gradient form of argus.ops.conv (stride 1: one convolution
with flipped, channel-swapped weights; strided: one per output phase). The result is made
NCHW-contiguous by an Argus transpose ([N, pixels, K] -> [N, K, pixels]), so the fused kernels
that follow read it as a plain view.

Not Argus work (named in the solution's header): torch prepares the kernel's operands (the
channels-last copy of an NCHW input, the split pieces, the weight repack, the zero padding of
channels) and interleaves a strided transposed convolution's phases into its output.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from argus.compose.launch import run as _run
from argus.compose.launch import transpose
from argus.ops import conv as conv_ops


@dataclass(frozen=True)
class ConvRun:
    """What the agent may tune: the fp32 split (6: strict, 3 / 1: relaxed only) and the
    kernel's schedule (None: argus.ops.conv.schedule_for)."""

    terms: int = 6
    schedule: object = None


def run_conv(node, x: torch.Tensor, weight: torch.Tensor, bias, run: ConvRun | None = None
             ) -> torch.Tensor:
    """The node's convolution of x (NC + spatial dims, fp32 / bf16 / fp16) as an
    NCHW-contiguous tensor of the node's shape and dtype."""
    a = node.attrs
    run = run or ConvRun()
    terms = run.terms if x.dtype == torch.float32 else 1
    conv = functools.partial(conv_ops.convolve, terms=terms, schedule=run.schedule)
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
    """y (N, C, *spatial) -> an NCHW-contiguous tensor: an Argus transpose of the channels-last
    buffer the kernel wrote (fp32), torch's copy for other dtypes, nothing when contiguous."""
    if y.is_contiguous():
        return y
    n, c = y.shape[0], y.shape[1]
    last = y.movedim(1, -1)                                   # the buffer's own order
    if y.dtype != torch.float32 or not last.is_contiguous():
        return y.contiguous()
    out = torch.empty(y.shape, dtype=y.dtype, device=y.device)
    _run(transpose, (last.reshape(n, -1, c), out.view(n, c, -1)))
    return out


__all__ = ["ConvRun", "run_conv"]
