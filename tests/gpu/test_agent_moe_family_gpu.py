"""The MoE family's candidates on the GPU: the (gate_up, down) pair through argus.ops.moe's
expert path (compiled, verified) against the float64 reference, for the family's decode point
with K splits and deeper rings and a prefill point with the TMA-store epilogue in CTA pairs."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("T,E,k,H,I,kw", [
    (4, 8, 2, 1024, 512, dict(bn=8, gate_stages=12, down_stages=15, gate_split=2,
                               down_split=2)),
    (300, 8, 2, 512, 768, dict(bm=128, bn=256, stages=3, epilogue="tma", cluster_m=2)),
])
def test_family_pair_matches_float64(T, E, k, H, I, kw):
    from argus.agent.families import get_family
    from argus.agent.families.moe import moe_task
    from argus.ops import moe_module as M
    fam = get_family("moe")
    t = moe_task(T, H, I, E, k)
    p = {**fam.default_params(t), **kw}
    assert fam.legal(t, p), fam.static_check(t, p)
    g = torch.Generator().manual_seed(T)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16().cuda()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16().cuda()
    x = torch.randn(T, H, generator=g).bfloat16().cuda()
    ids = torch.rand(T, E, generator=g).topk(k, dim=1).indices.int().cuda()
    weights = torch.rand(T, k, generator=g).cuda()
    out = fam.run(t, p, x, w13, w2, ids, weights)
    torch.cuda.synchronize()
    exact = M.reference(x, w13, w2, ids, weights)
    rel = ((out.double() - exact).norm() / exact.norm()).item()
    assert not torch.isnan(out).any() and rel < 1e-2, rel
