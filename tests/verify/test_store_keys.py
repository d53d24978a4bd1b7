"""store.once's maps in check_stores (the pushed-out summands' premises of a site, the blocks
of a joined box) are dicts keyed by stable values, `_key`: the site's program point
(Site.seq) and the box it stores (issue 13's house rule, as 8a60e58 and a21f623 did for
check_fills, check_wgmma and the checker), no longer identity maps (ObjectMap). A joined
box keeps its first block's point, so the key tells it apart by its shape, also for a box
of boxes (row segments of column blocks)."""

from __future__ import annotations

import argus as ag
from argus import verify
from argus.verify import check_stores as CS
from argus.verify.model import Model


@ag.kernel(threads=128, name="row_blocks")
def row_blocks(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    """Each CTA copies two rows of 64 columns, each row as four 16-column blocks: the blocks
    of a row join into a 64-wide box, the two rows' boxes into a 2 x 64 box."""
    pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], 2), ag.cdiv(X.shape[1], 64))
    for r in range(2):
        for j in range(4):
            x = ag.load(X, (pid_m * 2 + r, pid_n * 64 + j * 16), (16,))
            ag.store(Y, (pid_m * 2 + r, pid_n * 64 + j * 16), x)


def test_joined_boxes_are_keyed_by_point_and_shape():
    model = Model(row_blocks.trace())
    extra: dict = {}
    sites, tiled = CS._join_tiled([CS._unpushed(model, st, extra) for st in model.stores],
                                  extra)
    assert type(tiled) is dict and type(extra) is dict
    blocks = {CS._key(st) for st in model.stores}
    assert len(blocks) == 8 and all(isinstance(k[0], int) for k in blocks)
    # two row boxes of (64,) and the joined (2, 64) box; each a key of its own
    assert sorted(k[1] for k in tiled) == [(2, 64), (64,), (64,)], sorted(tiled)
    assert not set(tiled) & blocks
    (outer,) = sites
    assert CS._key(outer) in tiled and outer.shape == (2, 64)
    inner, _, _ = tiled[CS._key(outer)]
    assert all(CS._key(b) in tiled for b in inner)
    assert {CS._key(b) for b in inner} == {k for k in tiled if k[1] == (64,)}


def test_the_joined_box_is_one_proven_query():
    report = verify.run(row_blocks)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    once = [f for f in report.findings if f.code == "store.once"]
    assert [f.status for f in once] == ["proven"], once
    assert "2 blocks of 1" in once[0].subject, once[0].subject
