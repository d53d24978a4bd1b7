"""Transfer functions of the TMA copies: tma.load (global -> shared, async proxy) and tma.store
(shared -> global).

Job: record a TMA load as an async-proxy write into its view, tied to the enclosing produce
step (whose counter decides which consume step sees it) with the tensor and box coordinates it
copies; record a TMA store as a read of its shared-memory view and a store whose tile is that
view, resolved at the store's site.

Invariant kept: a TMA write carries its produce step, so a reader resolves it through the
pipeline (the consume step with the same counter), never by program order alone.
"""

from __future__ import annotations

from argus.ir import ops as O
from argus.ir import tag_ops as T
from argus.verify.transfer.domain import ReadSite, Rule, StoreSite, TileState, WriteSite


def tma_load(m: Model, op: O.TmaLoad, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    view = m.views[op.dst.id]
    produce = site.enclosing("produce")
    step = m.steps_by_stage.get(produce.op.stage.id) if produce else None
    info = m.tensors[op.tensor.id]
    coords = tuple(m.scalar(c) for c in op.coords)
    # the tag.copy ops right after the copy: fields of every element it writes, their
    # scalars taken here (the copy's loop indices), like its coordinates
    tags = []
    for nxt in following:
        if not isinstance(nxt, T.TagCopy):
            break
        tags.append((nxt.field, nxt.expr, tuple(m.scalar(a) for a in nxt.args)))
    if m._recording:
        m.writes.setdefault(view.buffer.id, []).append(
            WriteSite("tma", op, site, view, step, info, coords, tags=tuple(tags)))


def tma_store(m: Model, op: O.TmaStore, scopes, role, counters, following) -> None:
    site = m._site(op, scopes, role)
    view = m.views[op.src.id]
    if not m._recording:
        return
    m.reads.append(ReadSite("tma-store", op, site, view))

    def fn(idx, view=view, site=site):
        return m.read_smem(view, idx, site)
    tile = TileState((view.rows, view.cols), "", fn, op.loc, "TMA-store source")
    m.stores.append(StoreSite("tma-store", op, site, m.tensors[op.tensor.id],
                              tuple(m.scalar(c) for c in op.coords),
                              (view.rows, view.cols), tile))


def tma_prefetch(m: Model, op: O.TmaPrefetch, scopes, role, counters, following) -> None:
    """Nothing to record: the prefetch writes no shared memory and no global data, and
    the kernel reads nothing from it (its loads read the tensor as they would without it)."""


RULES: dict[type, Rule] = {
    O.TmaLoad: tma_load,
    O.TmaPrefetch: tma_prefetch,
    O.TmaStore: tma_store,
}
