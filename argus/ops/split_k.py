"""Split-K for `argus.ops.matmul`: K cut into equal slices, one partial GEMM per slice, summed.

A skinny GEMM (M <= 64) has too few output tiles to put every SM to work streaming weights;
cutting K into `splits` slices multiplies the units of work. The slices need no new kernel:
slice s of A [M, K] is the strided view A[:, s*Ks:(s+1)*Ks], and stacking the slices gives a
[splits, M, Ks] tensor with strides (Ks, K, 1), which the *batched* GEMM kernel reads by TMA
like any other batch (the slice's edge is the view's edge, so a box that crosses it is zero
filled, never read from the next slice). The batched kernel writes fp32 partials P[s] and the
verifier proves k-once per slice; `split_k_sum` then adds the partials in a fixed order and
rounds once. That the slices tile [0, K) exactly is this file's job: `slices` checks it.
"""

from __future__ import annotations

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.split_k_sum import MAX_SPLITS, split_k_sum_kernel


def why_not(k: int, splits: int, batch: int) -> str | None:
    """Why K cannot be cut into `splits` slices for TMA, or None when it can."""
    if not 2 <= splits <= MAX_SPLITS:
        return f"split_k={splits} is outside 2..{MAX_SPLITS}"
    if batch != 1:
        return "split-K runs the batched kernel over K slices, so the problem itself must be " \
               "unbatched"
    if k % splits:
        return f"K={k} is not a multiple of split_k={splits}"
    if (k // splits) % 8:
        return f"each K slice ({k // splits}) must be a multiple of 8 elements (a 16-byte TMA " \
               "stride between slices)"
    return None


def slices(a, b, layout: str, splits: int):
    """The [splits, ...] views of A ([M, K]) and B ([N, K] for "nk", [K, N] for "kn") whose
    batch s is K slice s. Views only: nothing is copied."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"split_k.slices takes 2-d operands, got {a.dim()}-d and {b.dim()}-d")
    k = a.shape[-1]
    ks = k // splits
    if ks * splits != k:
        raise ValueError(f"split_k.slices: K={k} is not a multiple of {splits}")
    m = a.shape[0]
    a3 = a.as_strided((splits, m, ks), (ks * a.stride(1), a.stride(0), a.stride(1)))
    if layout == "nk":       # B is [N, K], K contiguous
        n = b.shape[0]
        b3 = b.as_strided((splits, n, ks), (ks * b.stride(1), b.stride(0), b.stride(1)))
    else:                    # B is [K, N], N contiguous
        n = b.shape[1]
        b3 = b.as_strided((splits, ks, n), (ks * b.stride(0), b.stride(0), b.stride(1)))
    return a3, b3


def check(k: int, splits: int, batch: int) -> None:
    """Raise a LaunchError saying why K cannot be split `splits` ways (see `why_not`)."""
    reason = why_not(k, splits, batch)
    if reason is not None:
        raise LaunchError(f"argus.ops.matmul: GemmSchedule(split_k={splits}): {reason}",
                          fix="use split_k=1, or a split count that divides K into slices "
                              "of a multiple of 8")


class SplitKMatmul:
    """A compiled split-K matmul for one problem kind: the batched kernel over the K-slice
    views into an fp32 workspace, then the fixed-order sum into `out`. The caller passes
    `argus.ops.schedules.kernel_for(problem, schedule)` as (kernel, partial_schedule): schedules
    imports this module (`why_not`), so this module does not import schedules."""

    def __init__(self, problem, schedule, kernel, partial_schedule):
        self.layout, self.splits = problem.b_layout, schedule.split_k
        self.partial = kernel.compile(s=partial_schedule)
        self.reduce = split_k_sum_kernel(dtypes.from_name(problem.out_dtype),
                                         self.splits).compile()

    def __call__(self, a, b, out):
        """Run it on 2-d operands; return a replayable launch of both kernels that owns its
        workspace, or None when the kernels did not cache their launch plans."""
        import torch

        a3, b3 = slices(a, b, self.layout, self.splits)
        partials = torch.empty(self.splits, *out.shape, dtype=torch.float32, device=out.device)
        self.partial(a3, b3, partials)
        self.reduce(partials, out)
        first = self.partial.plan_for(a3, b3, partials)
        second = self.reduce.plan_for(partials, out)
        if not first or not second:
            return None

        def launch(partials=partials):  # the workspace lives as long as this launch
            first()
            second()
        return launch
