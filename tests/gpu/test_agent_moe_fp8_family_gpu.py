"""The fp8 MoE family's candidates on the GPU: its schedule through argus.ops.moe's fp8 expert
path (compiled, verified) against float64 (argus.ops.moe.reference_fp8), for its prefill start
(the split 128 x 256 with smem scales and the TMA store) and a 128 x 128 neighbour with the TMA
store, at I = 768 (the down's weight scales padded for the scale boxes). Not run on a GPU yet."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("kw", [{}, dict(bn=128, n_split=1, smem_scales=False, stages=6,
                                         quantize_out=False)],
                         ids=["start", "plain128_tma"])
def test_family_schedule_matches_float64(kw):
    from argus.agent.families import get_family
    from argus.agent.families.moe_fp8 import moe_fp8_task
    from argus.ops import moe_module as M
    from tests.gpu.test_moe_fp8_gpu import _fp8_layer
    fam = get_family("moe_fp8")
    T, E, k, H, I = 1500, 16, 4, 1024, 768
    t = moe_fp8_task(T, H, I, E, k)
    p = {**fam.default_params(t), **kw}
    assert fam.legal(t, p), fam.static_check(t, p)
    x, _, w13, s13, w2, s2 = _fp8_layer(T, E, H, I, seed=3)
    g = torch.Generator(device="cuda").manual_seed(4)
    ids = torch.rand(T, E, generator=g, device="cuda").topk(k, dim=1).indices.int()
    w = torch.rand(T, k, generator=g, device="cuda")
    out = fam.run(t, p, x, w13, w2, s13, s2, ids, w)
    torch.cuda.synchronize()
    exact = M.reference_fp8(x, w13, w2, s13, s2, ids, w)
    rel = ((out.double() - exact).norm() / exact.norm()).item()
    assert not torch.isnan(out).any() and rel < 1e-2, rel
