"""grid.cluster: a clustered grid dimension is a multiple of the cluster size for every shape.

Job (bug class 14): the CTAs of a thread-block cluster launch together; a grid extent that is
not a multiple of the cluster (`ag.grid(ag.cdiv(M, BM), ..., cluster=2)` with an odd number of
row tiles) cannot launch at all (the driver refuses it: runtime/driver.py), and a launcher that
rounded it up would run a partial cluster whose missing peer never multicasts its half of B nor
releases its slots: a hang. The model assumes whole clusters (pid = c · cluster + rank with the
cluster inside the grid), so this is proven separately, for all shapes (LIA over the shape
parameters): extent % cluster == 0.
"""

from __future__ import annotations

from argus.verify import witness as W
from argus.verify.model import Model, _num
from argus.verify.obligation import Obligation


def obligations(model: Model) -> tuple[list[Obligation], list]:
    g = model.grid
    if g is None or model.cluster_size == 1:
        return [], []
    obs = []
    for d, e in enumerate(g.extents):
        c = model.cluster[d] if d < len(model.cluster) else 1
        if c == 1:
            continue
        ext = _num(model.scalar(e))
        prem = [p for p in model.premises if not _mentions_grid(model, p)]

        def decode(zm, violated, ext=ext, d=d, c=c):
            wit = {"shapes": W.shapes(model, zm), "dim": d, "extent": zm.eval(ext).as_long(),
                   "cluster": c, "launch": str(g.loc), "extent_value": str(g.extents[d])}
            # a property of the launch (the grid the host computes), not of an op a thread
            # runs: said so, with the ag.grid line and the extent's value (the user's name)
            who, words = W.nobody(f"the launch sizes the grid at {g.loc} (ag.grid, dimension "
                                  f"{d} = {g.extents[d]}) before any thread starts")
            wit.update(who)
            return (f"with {wit['shapes']} grid dimension {d} has {wit['extent']} CTAs, not a "
                    f"multiple of the cluster size {c}: the last cluster is partial (the launch "
                    f"fails, or a CTA waits forever for a peer that does not exist) "
                    f"({words})"), wit
        obs.append(Obligation("grid.cluster", g.loc, f"grid dimension {d} at {g.loc} in "
                              f"clusters of {c}", prem,
                              [(f"extent % {c} == 0", ext % c == 0)], decode,
                              minimize=list(model.params.values()),
                              fix=f"round the extent up to whole clusters: "
                                  f"ag.cdiv(extent, {c}) * {c}"))
    return obs, []


def _mentions_grid(model: Model, term) -> bool:
    from argus.verify.tagdomain import mentions

    return any(mentions(term, v) for v, _, _ in model.grid_vars)
