"""GPU tier for argus.ops.attention's repeated-call path (argus/ops/attention.py _Entry): a
repeated signature replays its prepared launch, and a call on new buffers runs the last plan
moved onto them (pointers rewritten, tensor maps re-pointed by cuTensorMapReplaceAddress), with
no prepare; each result must be the fresh call's, read from the new buffers (a map left on the
old address would return the old inputs' result)."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only
from tests.gpu.test_attention_gpu import _inputs, reference

pytestmark = hopper_only()


def _close(got, want_out, layout):
    view = got if layout == "bhsd" else got.transpose(1, 2)
    err = ((view.double() - want_out).norm() / want_out.norm()).item()
    assert err < 1e-2, f"relative error {err}"


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("causal", [False, True])
def test_moved_plans_read_and_write_the_new_buffers(layout, causal):
    import importlib

    import argus.ops

    mod = importlib.import_module("argus.ops.attention")
    B, H, HKV, S, SK, D = 2, 8, 2, 384, 512, 128
    q, k, v = _inputs(B, H, HKV, S, SK, D, layout, torch.bfloat16, seed=11 + causal)
    first, lse = argus.ops.attention(q, k, v, causal=causal, layout=layout, return_lse=True)
    first, lse = first.clone(), lse.clone()
    again, lse_again = argus.ops.attention(q, k, v, causal=causal, layout=layout,
                                           return_lse=True)
    assert torch.equal(again, first) and torch.equal(lse_again, lse)
    prepared = len(mod._LAUNCHES)
    # the same values at new addresses: a moved plan, bit-equal results
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    out2, lse2 = argus.ops.attention(q2, k2, v2, causal=causal, layout=layout, return_lse=True)
    assert torch.equal(out2, first) and torch.equal(lse2, lse)
    # new values at new addresses, q at a 16-byte (not 512-byte) offset of a larger buffer
    q3, k3, v3 = _inputs(B, H, HKV, S, SK, D, layout, torch.bfloat16, seed=99 + causal)
    spare = torch.empty(q3.numel() + 8, device="cuda", dtype=torch.bfloat16)
    q3s = spare[8:].view(q3.shape)
    q3s.copy_(q3)
    assert q3s.data_ptr() % 512
    # return_lse as before: it is part of the signature (without it this call is a new one)
    out3, _ = argus.ops.attention(q3s, k3, v3, causal=causal, layout=layout, return_lse=True)
    torch.cuda.synchronize()
    assert len(mod._LAUNCHES) == prepared, "new buffers were prepared, not moved"
    views = (q3, k3, v3) if layout == "bhsd" else tuple(t.transpose(1, 2) for t in (q3, k3, v3))
    want, _ = reference(*views, causal, 1.0 / math.sqrt(D))
    _close(out3, want, layout)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_fp8_moved_plans_read_and_write_the_new_buffers(layout):
    """attention_fp8's V^T and attention launches replayed, then moved onto new buffers: the
    same values give bit-equal outputs, new values the float64 answer (q, k, v quantized with
    the same scales, so the signature repeats)."""
    import importlib

    import argus.ops
    from tests.gpu.test_attention_fp8_gpu import _inputs as fp8_inputs
    from tests.gpu.test_attention_fp8_gpu import reference as fp8_reference

    mod = importlib.import_module("argus.ops.attention_fp8")
    shape = (2, 8, 2, 384, 512, 128)
    (q, qs), (k, ks), (v, vs) = fp8_inputs(*shape, layout, seed=5)
    scales = {"q_scale": qs, "k_scale": ks, "v_scale": vs, "layout": layout}
    first = argus.ops.attention_fp8(q, k, v, **scales).clone()
    assert torch.equal(argus.ops.attention_fp8(q, k, v, **scales), first)
    prepared = len(mod._LAUNCHES)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    assert torch.equal(argus.ops.attention_fp8(q2, k2, v2, **scales), first)
    (q3, _), (k3, _), (v3, _) = fp8_inputs(*shape, layout, seed=6)
    out3 = argus.ops.attention_fp8(q3, k3, v3, **scales)
    torch.cuda.synchronize()
    assert len(mod._LAUNCHES) == prepared, "new buffers were prepared, not moved"
    t = (lambda x: x) if layout == "bhsd" else (lambda x: x.transpose(1, 2))
    want, _ = fp8_reference(*(t(x).double() * s for x, s in ((q3, qs), (k3, ks), (v3, vs))),
                            False, 1.0 / math.sqrt(128))
    err = (t(out3).double() - want).abs()
    assert err.max().item() < 0.05 * want.abs().max().item()
