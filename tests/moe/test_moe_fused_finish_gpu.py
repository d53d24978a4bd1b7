"""GPU tier (`pytest -m gpu`, skipped without a Hopper GPU): the decode gate-up cut along K
with its split finish inside the GEMM (MoeSchedule.fused_finish, argus/kernels/moe.py), the
variant scripts/gpu_moe_bench.py --rule-variants times as gate-up-split{2,4}-fused. Compiled
with ARGUS_VERIFY=0: its ticket counter sits in the persistent unit loop, which the
verifier's atomic.tickets does not cover yet (tests/moe/test_moe_verify.py); the op's own
rule never picks it.

Against float64 at Qwen3-30B-A3B's sizes (one token: 8 experts x 12 weight tiles of the
gate-up, cut in 2 or 4) and on routing with empty and crowded experts; repeated calls on the
same buffers (replayed launch plans, the counters reused as every call leaves them) with new
contents; the same layer as the separate split finish kernel to within rounding."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rel as _rel  # noqa: E402
from tests.gpu.test_moe_gpu import _layer  # noqa: E402  (the fused MoE layer's seeded inputs)

pytestmark = hopper_only()


@pytest.fixture(autouse=True)
def _no_verify(monkeypatch):
    monkeypatch.setenv("ARGUS_VERIFY", "0")


def _routing(logits, k):
    p = torch.softmax(logits.double(), dim=1)
    w, ids = p.topk(k, dim=1)
    return ids, w / w.sum(dim=1, keepdim=True)


@pytest.mark.parametrize("splits", [2, 4])
def test_fused_split_finish_at_qwen3_one_token(splits):
    from argus.kernels.moe import decode_schedule
    from argus.ops import moe
    from argus.ops import moe_module as M
    from argus.ops.moe import reference
    T, E, k, H, I = 1, 128, 8, 2048, 768
    rule_gate_up, down = M.decode_schedules(T, k, E, H, I)
    fused = (decode_schedule(rule_gate_up.bn, split_k=splits, fused_finish=True), down)
    apart = (decode_schedule(rule_gate_up.bn, split_k=splits), down)
    x, w13, w2, logits = _layer(T, E, H, I, seed=splits)
    out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")
    for call in range(3):   # the first records, the others replay on new contents
        if call:
            x.copy_(torch.randn_like(x, dtype=torch.float32).bfloat16())
            logits.copy_(torch.randn_like(logits))
        moe(x, w13, w2, logits, k, schedule=fused, out=out)
        ids, w = _routing(logits, k)
        exact = reference(x, w13, w2, ids, w)
        assert _rel(out, exact) < 1e-2, call
        other = moe(x, w13, w2, logits, k, schedule=apart)
        assert _rel(out, other.double()) < 1e-2, call


def test_fused_split_finish_with_empty_and_crowded_experts():
    from argus.kernels.moe import decode_schedule
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, H, I = 40, 16, 4, 1024, 512
    x, w13, w2, _ = _layer(T, E, H, I, seed=5)
    g = torch.Generator(device="cuda").manual_seed(9)
    scores = torch.rand(T, E - 3, generator=g, device="cuda")   # experts 13..15 get nothing
    scores[:, 0] += 1.0                                           # expert 0: every token
    ids = scores.topk(k, dim=1).indices
    w = torch.rand(T, k, generator=g, device="cuda")
    for bn in (8, 16):
        out = moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w,
                  schedule=decode_schedule(bn, split_k=2, fused_finish=True))
        assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2, bn
