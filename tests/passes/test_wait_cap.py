"""lower/sync.py `_retire` with more than WGMMA_WAIT_MAX groups committed after the one an op
must see retired (h313: FP8 P V in up to seven V^T atoms beside S): the wait asks for at most
WGMMA_WAIT_MAX newer groups, so it also retires the oldest of those newer ones (never fewer
than the op needs), and the synchronization verifies."""

from __future__ import annotations

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.target.limits import WGMMA_WAIT_MAX

NEWER = WGMMA_WAIT_MAX + 1     # groups committed after S's


@ag.kernel
def s_then_many_groups(K: ag.Tensor["BH", "SK", 64, ag.bf16],
                       V: ag.Tensor["BH", "SK", 64, ag.bf16],
                       O_: ag.Tensor["BH", 64, 64, ag.f32], S_: ag.Tensor["BH", 64, 64, ag.f32]):
    """S issued first, then NEWER groups into O in the same step, then S read in the step."""
    (bh,) = ag.grid(K.shape[0])
    sK = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    sV = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(2, consumers=1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sK[st], K, (bh, 0, 0))
            ag.tma.load(sV[st], V, (bh, 0, 0))
    with ag.role("consumer", warpgroups=1):
        o = ag.zeros((64, 64))
        t = ag.zeros((64, 64))
        with pipe.consume() as st:
            s = ag.wgmma(sK[st], sK[st], ag.zeros((64, 64)))
            for _ in range(NEWER):
                o = ag.wgmma(sK[st], sV[st], o, trans_b=True)
            t = s * 2.0
        ag.store(S_, (bh, 0, 0), t)
        ag.store(O_, (bh, 0, 0), o)


def test_the_wait_before_reading_s_asks_for_at_most_the_limit():
    kernel = lower_only(s_then_many_groups)
    waits = [w for w in kernel.walk() if isinstance(w, O.WgmmaWait)]
    # S is the oldest of NEWER + 1 groups: wait NEWER would be exact, the limit retires S
    # and the first O group
    assert waits[0].pending == WGMMA_WAIT_MAX == NEWER - 1, [w.pending for w in waits]
    assert max(w.pending for w in waits) <= WGMMA_WAIT_MAX
    sync = [f for f in verify.run(kernel).findings if f.code.startswith("sync")]
    assert sync and [(f.code, f.status) for f in sync if f.status != "proven"] == []
