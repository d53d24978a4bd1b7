"""Split-K for `argus.ops.scaled_matmul` (per-tensor scales): K cut into `split_k` equal slices,
one fp32 partial product per slice, summed in slice order, scaled once, rounded once.

A weight-streaming GEMM (small M: argus/ops/fp8_schedules.py `weight_streaming`) has few output
tiles when N is small; cutting K multiplies the units of work, so that every SM streams its share
of the weights. As for the bf16 split-K (argus/ops/split_k.py), the slices need no kernel of
their own: slice s of A [M, K] is the strided view A[:, s Ks:(s + 1) Ks], stacked into [S, M, Ks]
(`split_k.k_slices`), which `gemm_fp8_partials_kernel` reads by TMA as a batch (a box that crosses
a slice's edge is zero filled, never read from the next slice) into P [S, M, N] fp32, unscaled;
`scaled_split_k_sum_kernel` then adds P[0] + P[1] + ... in fp32, multiplies by scale_a * scale_b
in fp32 (the product the unsplit kernel's epilogue applies) and rounds once to the output type.
The verifier proves per slice what it proves of the unsplit kernel; that the slices tile [0, K)
is `why_not`'s job (equal slices, each a multiple of 16 e4m3: TMA's 16-byte strides).
"""

from __future__ import annotations

import dataclasses

from argus.dtypes import DType
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_partials_kernel
from argus.kernels.split_k_sum import MAX_SPLITS, scaled_split_k_sum_kernel
from argus.ops.split_k import k_slices

# e4m3 elements in TMA's 16-byte stride unit: each slice's start must be 16-byte aligned
_SLICE_ALIGN = 16


def why_not(k: int, splits: int) -> str | None:
    """Why K cannot be cut into `splits` slices the partials kernel reads, or None."""
    if not 2 <= splits <= MAX_SPLITS:
        return f"split_k={splits} is outside 2..{MAX_SPLITS}"
    if k % splits:
        return f"K={k} is not a multiple of split_k={splits}"
    if (k // splits) % _SLICE_ALIGN:
        return (f"each K slice ({k // splits} e4m3) must be a multiple of {_SLICE_ALIGN} "
                f"elements (a 16-byte TMA stride between slices)")
    return None


class Fp8SplitK:
    """A compiled split-K scaled_matmul for one schedule and output type: the partials kernel
    over the K-slice views into a fp32 workspace, then the scaled fixed-order sum into `out`.
    Called as the op calls a compiled kernel, (a, b, scale_a, scale_b, out); the call returns
    one replayable launch of both kernels that owns that call's workspace (None when the
    kernels did not cache their plans), as argus.ops.split_k.SplitKMatmul does for matmul.
    Nothing is kept here: the op keeps the launch in its small split-K memo
    (scaled_matmul._SPLIT_LAUNCHES, matmul's _SPLIT_MEMO_SIZE entries), so a workspace
    [S, M, N] fp32 lives only while its launch is remembered, and many `out` buffers pin at
    most that many workspaces (a compiled object in _CHOSEN held the last one for good)."""

    def __init__(self, schedule: Fp8GemmSchedule, out_dtype: DType):
        self.splits = schedule.split_k
        self.schedule = schedule
        self.partial = gemm_fp8_partials_kernel().compile(
            s=dataclasses.replace(schedule, split_k=1))
        self.reduce = scaled_split_k_sum_kernel(out_dtype, self.splits).compile()

    def __call__(self, a, b, scale_a, scale_b, out):
        import torch

        a_s, b_s = k_slices(a, 1, self.splits), k_slices(b, 1, self.splits)
        partials = torch.empty(self.splits, *out.shape, dtype=torch.float32, device=out.device)
        self.partial(a_s, b_s, partials)
        self.reduce(partials, scale_a, scale_b, out)
        first = self.partial.plan_for(a_s, b_s, partials)
        second = self.reduce.plan_for(partials, scale_a, scale_b, out)
        if not first or not second:
            return None
        home = _stream_id(partials)

        def launch(partials=partials, views=(a_s, b_s)):  # the workspace lives with the launch
            # the caching allocator reuses a freed block on the stream it was allocated on
            # without waiting for other streams: a replay on another stream is recorded there,
            # so that when the memo drops this launch the block waits for that stream's work
            _record_foreign_stream(partials, home)
            first()
            second()
        return launch


def _stream_id(t):
    """torch's current raw stream on `t`'s device; None off CUDA (the interpreter's tensors)."""
    import torch

    return torch.cuda.current_stream(t.device).cuda_stream if t.is_cuda else None


def _record_foreign_stream(t, home) -> None:
    """record_stream `t` on torch's current stream when that is not `home` (its allocation's)."""
    if home is None:
        return
    import torch

    stream = torch.cuda.current_stream(t.device)
    if stream.cuda_stream != home:
        t.record_stream(stream)
