"""The dense GEMM on the dynamic persistent walk (GemmSchedule(scheduler="dynamic")) as
argus.ops.matmul runs it: the kernel plus its work counter.

Job: give every launch a Work word [1] int32 that no launch running at the same time shares
(docs/design/dynamic_scheduler.md): one per (device, stream), zero when made, and zero again
after every complete launch (the producers' atom.inc draws wrap at the unit count); a CUDA
graph being captured gets a word of its own (zeroed by a memset node of the graph), as the
fused tail's counters do (both: split_k.zeroed_per_stream). A replay on another stream is
moved onto that stream's word.

Invariant: a launch reads its word at zero and leaves it at zero, so replays need no reset.
"""

from __future__ import annotations

from argus.ops.split_k import per_stream, zeroed_per_stream


class DynamicMatmul:
    """Run `kernel` (gemm_kernel(..., dynamic=True)) under `run` with a per-stream work word;
    compiled with the verifier's veto like the plain kernel (it writes all of C)."""

    def __init__(self, kernel, run):
        from argus.compiler import compile_kernel  # loaded on first use, as ag.compile does

        self.main = compile_kernel(kernel, s=run)
        self._words: dict = {}

    def __call__(self, a, b, out):
        """Run it; return a replayable launch (on whatever stream is current when replayed),
        or None when the kernel did not cache its launch plan."""
        work = self._word_for(out.device)
        self.main(a, b, out, work)
        plan = self.main.plan_for(a, b, out, work)
        if not plan:
            return None
        return per_stream(plan, out.device, work, self._word_for)

    def _word_for(self, device):
        """The work word for launches on `device`'s current stream (a captured graph: its own)."""
        return zeroed_per_stream(self._words, device, (1,))


# the module's words for launches outside DynamicMatmul (argus.ops.moe's dynamic grouped GEMMs):
# (device index, stream) -> word, made on first use
_WORDS: dict = {}


def work_word(device):
    """A work word [1] int32 for a dynamic-walk launch on `device`'s current stream: one per
    (device, stream), zero when made and left zero by every complete launch, so launches in
    one stream's order share it; a CUDA graph being captured gets a fresh zeroed one (its
    own, made by a memset node of the graph: the graph's replays find it at zero again).
    Off CUDA (the interpreter) one word per device."""
    return zeroed_per_stream(_WORDS, device, (1,))
