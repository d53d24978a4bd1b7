"""Split-K for `argus.ops.matmul`: K cut into equal slices, one partial GEMM per slice, summed.

A skinny GEMM (M <= 64) has too few output tiles to put every SM to work streaming weights;
cutting K into `splits` slices multiplies the units of work. The slices need no new kernel:
slice s of A [M, K] is the strided view A[:, s*Ks:(s+1)*Ks], and stacking the slices gives a
[splits, M, Ks] tensor with strides (Ks, K, 1), which the *batched* GEMM kernel reads by TMA
like any other batch (the slice's edge is the view's edge, so a box that crosses it is zero
filled, never read from the next slice). The batched kernel writes fp32 partials P[s] and the
verifier proves k-once per slice; `split_k_sum` then adds the partials in a fixed order and
rounds once. That the slices tile [0, K) exactly is this file's job: `slices` checks it.

Tail splits (`GemmSchedule.tail_splits`) cut K only for the tiles of the persistent walk's last,
partial wave: the GEMM kernel built for them takes the same K-slice views (`tail_slices`, also
batched) beside A and B, writes the tail's fp32 partials into a compact workspace [splits, tail
tiles, bm, bn], and `tail_sum_kernel` adds them into C (`TailSplitMatmul`); with
`GemmSchedule.tail_finish="fused"` the slice that arrives last at a tail tile adds them in the
GEMM itself, counted by self-resetting arrival counters this file keeps zeroed (`_counters`).
"""

from __future__ import annotations

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.split_k_sum import MAX_SPLITS, split_k_sum_kernel, tail_sum_kernel


def _slicing_why_not(k: int, splits: int, knob: str) -> str | None:
    """Why K cannot be cut into `splits` views TMA reads (the `knob` schedule field names it),
    or None when it can: split-K and the tail splits share these rules."""
    if not 2 <= splits <= MAX_SPLITS:
        return f"{knob}={splits} is outside 2..{MAX_SPLITS}"
    if k % splits:
        return f"K={k} is not a multiple of {knob}={splits}"
    if (k // splits) % 8:
        return f"each K slice ({k // splits}) must be a multiple of 8 elements (a 16-byte TMA " \
               "stride between slices)"
    return None


def why_not(k: int, splits: int, batch: int) -> str | None:
    """Why K cannot be cut into `splits` slices for TMA, or None when it can."""
    if 2 <= splits <= MAX_SPLITS and batch != 1:
        return "split-K runs the batched kernel over K slices, so the problem itself must be " \
               "unbatched"
    return _slicing_why_not(k, splits, "split_k")


def slices(a, b, layout: str, splits: int):
    """The [splits, ...] views of A ([M, K]) and B ([N, K] for "nk", [K, N] for "kn") whose
    batch s is K slice s. Views only: nothing is copied."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"split_k.slices takes 2-d operands, got {a.dim()}-d and {b.dim()}-d")
    return tail_slices(a, b, layout, splits)


def tail_slices(a, b, layout: str, splits: int):
    """The [splits, ...] K-slice views of A ([.., M, K]) and B ([.., N, K] for "nk", [.., K, N]
    for "kn"), 2-d or batched: batch s of each is K slice s. Views only: nothing is copied."""
    k = a.shape[-1]
    if k % splits:
        raise ValueError(f"split_k.slices: K={k} is not a multiple of {splits}")
    return k_slices(a, a.dim() - 1, splits), \
        k_slices(b, b.dim() - (1 if layout == "nk" else 2), splits)


def k_slices(t, axis: int, splits: int):
    """t with its K axis `axis` cut into `splits` equal slices, stacked in front: slice s is
    t's K range [s * K/splits, (s + 1) * K/splits), reached by a stride of K/splits elements
    along K."""
    ks = t.shape[axis] // splits
    shape = list(t.shape)
    shape[axis] = ks
    return t.as_strided((splits, *shape), (ks * t.stride(axis), *t.stride()))


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


def tail_why_not(k: int, splits: int) -> str | None:
    """Why the tail of a GEMM cannot be split `splits` ways along K, or None when it can (the
    slices are views read by TMA, as for split-K; a batched problem is fine)."""
    return _slicing_why_not(k, splits, "tail_splits")


def tail_tiles(problem, schedule) -> int:
    """How many CTA tiles the last, partial wave of `schedule`'s persistent walk has on
    `problem` (0: the waves are full, nothing to split): the host's count of what
    TileScheduler.plan computes in the kernels, which sizes the workspace and the sum's grid
    (tests/unit/test_tail_splits.py checks the two agree)."""
    s, cs = schedule, schedule.cluster_m
    m_tiles, n_tiles = -(-problem.m // s.bm), -(-problem.n // s.bn)
    total = problem.batch * -(-m_tiles // cs) * n_tiles
    clusters = min(total * s.tail_splits, s.num_sms // cs)
    return (total - total // clusters * clusters) * cs


def tail_check(k: int, splits: int) -> None:
    """Raise a LaunchError saying why the tail cannot be split `splits` ways along K."""
    reason = tail_why_not(k, splits)
    if reason is not None:
        raise LaunchError(f"argus.ops.matmul: GemmSchedule(tail_splits={splits}): {reason}",
                          fix="use tail_splits=1, or a split count that divides K into slices "
                              "of a multiple of 8")


class TailSplitMatmul:
    """A compiled matmul whose last partial wave runs in K slices: the tail GEMM kernel (full
    waves into C, the tail's slices into an fp32 workspace), then `tail_sum_kernel` into C.
    Built per problem (the shapes fix how many tail tiles there are); a problem whose waves are
    full runs the plain kernel. The caller passes `kernel_for(problem, schedule)`'s result, and
    the plain kernel of the schedule without tail splits (schedules imports this module).

    Both kernels are compiled without the verifier's veto: each writes only part of C on
    purpose, which its store.coverage obligation reports as an error (the verifier does not
    know partial outputs yet); tests/unit/test_tail_splits.py runs the verifier on them and
    requires every other obligation proven or honestly unknown.

    With tail_finish="fused" there is one kernel: the last K slice of each tail tile (its
    arrival counter, Count [tail tiles, consumers] int32) adds the partials and stores C. It
    writes all of C, so it compiles with the verifier's veto like the plain kernel: the
    verifier proves its tickets (atomic.tickets' grid-stride form), C stored once by the full
    waves and the finish, and what it proves of the two-kernel form
    (tests/unit/test_tail_fused.py). The counters are zeroed once per (device, stream) and
    left zero by every complete call, so a replayed launch reuses them; a
    captured graph gets its own, zeroed by a memset node of the graph (`_counters_for`)."""

    def __init__(self, problem, schedule, kernel, run, plain):
        from argus.compiler import compile_kernel  # loaded on first use, as ag.compile does

        self.layout, self.splits, self.schedule = problem.b_layout, schedule.tail_splits, run
        self.tiles = tail_tiles(problem, schedule)
        self.fused = run.tail_finish == "fused"
        self._counters: dict = {}
        if not self.tiles:
            self.plain = plain[0].compile(s=plain[1])
            return
        self.plain = None
        if self.fused:   # C whole: verified as the plain kernel is (ARGUS_VERIFY)
            self.main, self.reduce = compile_kernel(kernel, s=run), None
            return
        self.main = compile_kernel(kernel, verify=False, s=run)
        self.reduce = compile_kernel(
            tail_sum_kernel(dtypes.from_name(problem.out_dtype), self.splits, problem.batch > 1),
            verify=False, bm=run.bm, bn=run.bn, cluster=run.cluster_m, group_m=run.group_m,
            num_sms=run.num_sms)

    def __call__(self, a, b, out):
        """Run it; return a replayable launch of both kernels that owns its workspace, or None
        when the kernels did not cache their launch plans."""
        import torch

        if self.plain is not None:
            self.plain(a, b, out)
            plan = self.plain.plan_for(a, b, out)
            return plan
        a_s, b_s = tail_slices(a, b, self.layout, self.splits)
        s = self.schedule
        partials = torch.empty(self.splits, self.tiles, s.bm, s.bn, dtype=torch.float32,
                               device=out.device)
        if self.fused:
            count = self._counters_for(out.device)
            self.main(a, b, out, a_s, b_s, partials, count)
            plan = self.main.plan_for(a, b, out, a_s, b_s, partials, count)
            if not plan:
                return None
            # argus.ops.matmul replays this on whatever stream is current then: on another
            # stream the plan is moved onto that stream's counters, since two replays of
            # different outputs at once on two streams would otherwise draw tickets from one
            # counter and a tile's last slice could sum partials not yet stored
            return per_stream(plan, out.device, count, self._counters_for,
                              keep=(partials, a_s, b_s))
        self.main(a, b, out, a_s, b_s, partials)
        self.reduce(partials, out)
        first = self.main.plan_for(a, b, out, a_s, b_s, partials)
        second = self.reduce.plan_for(partials, out)
        if not first or not second:
            return None

        def launch(partials=partials, views=(a_s, b_s)):  # the workspace lives with the launch
            first()
            second()
        return launch

    def _counters_for(self, device):
        """The fused finish's arrival counters for launches on `device`'s current stream:
        zeros when first made, and zero again after every complete launch (each counter
        resets itself after `splits` arrivals). One set per stream, so launches of this
        matmul on two streams at once never share a counter (their arrivals would mix); a
        captured graph gets its own (zeroed_per_stream)."""
        return zeroed_per_stream(self._counters, device, (self.tiles, self.schedule.consumers))


def zeroed_per_stream(kept: dict, device, shape: tuple[int, ...]):
    """An int32 tensor of `shape` for launches on `device`'s current stream, zero when made:
    `kept`'s for that stream (`_stream_key`), made on first use and kept there. The launches
    that draw from it (the fused tail finish's arrival counters, the dynamic walk's work
    word) leave it zero again when complete, so launches in one stream's order share it and
    replays need no reset; one a stream, so launches at once on two streams never share one.
    A CUDA graph being captured gets fresh zeros of its own, never kept: made by a memset
    node of the graph (and freed with its other intermediates), so its replays find them at
    zero again; graphs captured on one stream (torch.cuda.graph's shared default capture
    stream) and replayed at once on two streams would otherwise draw from one buffer."""
    import torch

    if _capturing(device):
        return torch.zeros(shape, dtype=torch.int32, device=device)
    key = _stream_key(device)
    buffer = kept.get(key)
    if buffer is None:
        buffer = kept[key] = torch.zeros(shape, dtype=torch.int32, device=device)
    return buffer


def _stream_key(device) -> tuple:
    """(device index, torch's current raw stream on it; 0 off CUDA): whose per-stream state a
    launch now uses (`zeroed_per_stream`: the fused tail finish's counters, the dynamic walk's
    work word); `per_stream` moves replays by it."""
    import torch

    if device.type != "cuda":
        return device.index, 0
    return device.index, torch.cuda.current_stream(device).cuda_stream


def per_stream(plan, device, buffer, buffer_for, keep=()):
    """A replayable launch of `plan`, prepared on `device`'s current stream with `buffer` (the
    per-stream state it draws from: the fused tail's counters, the dynamic walk's work word),
    on whatever stream is current when it is called: on the stream it was prepared on as
    prepared; on another, moved (LaunchPlan.repointed, once a stream) from `buffer` onto that
    stream's own, `buffer_for(device)`, so launches at once on two streams never share one.
    `keep`: the other tensors the plan reads, kept alive as long as the launch."""
    plans = {_stream_key(device): plan}

    def launch(buffer=buffer, keep=keep):   # they live with the launch
        stream = _stream_key(device)
        here = plans.get(stream)
        if here is None:
            mine = buffer_for(device)
            here = plans[stream] = plan.repointed({buffer.data_ptr(): mine.data_ptr()})
        here()
    return launch


def _capturing(device) -> bool:
    """Whether torch's current stream on `device` is capturing a CUDA graph."""
    import torch

    return device.type == "cuda" and torch.cuda.is_current_stream_capturing()
