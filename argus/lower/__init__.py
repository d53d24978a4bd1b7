"""Lowering: one pass per file, each Kernel -> Kernel, filling in the decisions codegen renders
(and the verifier proves): TMA boxes, wgmma descriptors, the mbarrier protocol, scale-d
accumulator zeroing, the shared memory plan, the role/register plan, where a promotion's carried
update runs (carried.py), which carried A fragments are stored packed (packed.py),
every synchronization op
(sync.py) and, last, which threads of a role issue its work (elect.py)."""

from __future__ import annotations

from argus.ir.core import Kernel
from argus.lower import (accumulators, carried, elect, packed, pipeline, prefetch, roles, smem,
                         sync, tma, wgmma)

PASSES = (
    ("tma_boxes", tma.run),
    ("wgmma_descriptors", wgmma.run),
    ("pipeline_protocol", pipeline.run),
    ("accumulators", accumulators.run),
    ("prefetch", prefetch.run),
    ("smem_plan", smem.run),
    ("role_plan", roles.run),
    ("carried_updates", carried.run),
    ("packed_fragments", packed.run),
    ("sync", sync.run),
    ("elect", elect.run),
)


def run(kernel: Kernel, schedule=None, on_step=None) -> Kernel:
    """Run every pass in order. `on_step(name, kernel)` sees the IR after each (for dumps)."""
    for name, fn in PASSES:
        kernel = fn(kernel)
        if on_step is not None:
            on_step(name, kernel)
    return kernel
