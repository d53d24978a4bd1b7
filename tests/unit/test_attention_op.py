"""argus.ops.attention's input checks and AttentionSchedule's legality checks (no GPU needed: the
checks on shapes and dtypes run before the device check, so CPU tensors exercise them)."""

import pytest
import torch

import argus as ag
from argus.errors import LaunchError
from argus.kernels.attention import AttentionSchedule, attention_kernel, default_schedule
from argus.ops import attention


def _qkv(B=1, H=4, HKV=2, S=16, SK=24, D=64, dtype=torch.bfloat16):
    return (torch.randn(B, H, S, D).to(dtype), torch.randn(B, HKV, SK, D).to(dtype),
            torch.randn(B, HKV, SK, D).to(dtype))


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v: (q.float(), k, v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q, k.half(), v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q[0], k, v), "4-d tensors"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 32 is not supported"),
    (lambda q, k, v: (q, k[..., :32].contiguous(), v), "differ"),
    (lambda q, k, v: (q, k[:, :1], v), "differ"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of the key/value heads"),
    (lambda q, k, v: (torch.cat([q, q]), k, v), "batch sizes differ"),
    (lambda q, k, v: (q, k, v), "Argus kernels run on a CUDA device"),
    (lambda q, k, v: ("q", k, v), "must be a torch.Tensor"),
])
def test_bad_input_gets_a_clear_error(change, words):
    q, k, v = change(*_qkv())
    with pytest.raises(LaunchError, match=words):
        attention(q, k, v)


def test_layout_names_and_bshd_heads():
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match="layout='sbhd' is not one of"):
        attention(q, k, v, layout="sbhd")
    # the same tensors read as [B, S, H, D]: 16 "heads" of q against 24 of k do not divide
    with pytest.raises(LaunchError, match="q has 16 heads, k and v 24"):
        attention(q, k, v, layout="bshd")


def test_schedule_checks():
    with pytest.raises(ValueError, match="block_m=128 needs consumers=2"):
        AttentionSchedule(block_m=128, consumers=3)
    with pytest.raises(ValueError, match="block_n=100"):
        AttentionSchedule(block_n=100)
    with pytest.raises(ValueError, match="stages=1"):
        AttentionSchedule(stages=1)
    with pytest.raises(ValueError, match="exceed the 65536"):
        AttentionSchedule(block_m=192, consumers=3)   # 3 x 240 registers
    with pytest.raises(ValueError, match="needs 2 or 3 consumer warpgroups"):
        AttentionSchedule(block_m=64, consumers=1, ordered=True)
    with pytest.raises(ValueError, match="not combined"):
        AttentionSchedule(ordered=True, intra_wg_overlap=True)
    assert "Q (64)" in " ".join(AttentionSchedule(block_n=64, ordered=True).problems_for(256))
    assert "shared memory" in " ".join(AttentionSchedule(stages=4, epilogue="tma")
                                       .problems_for(256))
    assert "registers per thread" in " ".join(AttentionSchedule(block_n=256).problems_for(256))
    for d in (64, 128, 256):
        for causal in (False, True):
            for seq_len in (None, 1, 1024, 1025, 65536):
                assert default_schedule(d, causal, seq_len).problems_for(d) == []


def test_kernel_refuses_a_schedule_that_does_not_fit():
    with pytest.raises(ag.TraceError, match="shared memory"):
        attention_kernel(256).trace(s=AttentionSchedule(stages=4, epilogue="tma"))


def test_custom_op_is_registered_with_a_fake():
    """torch.compile needs the op and its fake (shapes without running the kernel)."""
    import importlib

    op = importlib.import_module("argus.ops.attention")._op()   # registered on first use
    q, k, v = _qkv(B=2, H=4, HKV=1, S=10, SK=7)
    q_bshd = q.transpose(1, 2).contiguous()
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        out, lse = op(fq, fk, fv, True, 0.125, "bhsd", True)
        assert tuple(out.shape) == (2, 4, 10, 64) and out.dtype == torch.bfloat16
        assert tuple(lse.shape) == (2, 4, 10) and lse.dtype == torch.float32
        qs = mode.from_tensor(q_bshd)
        out, lse = op(qs, fk.transpose(1, 2), fv.transpose(1, 2), False, 0.125, "bshd", False)
        assert tuple(out.shape) == (2, 10, 4, 64) and lse.numel() == 0


def test_folded_scale_runs_unfolded_for_a_scale_that_is_not_positive():
    """fold_scale takes the row max of the raw scores (max(s) * scale = max(s * scale) only
    for scale > 0): the op runs any other scale with the same schedule unfolded."""
    import dataclasses
    import math

    from argus.ops.attention import for_scale

    folded = dataclasses.replace(default_schedule(128), approx_exp2=True, fold_scale=True)
    assert for_scale(folded, 0.125) is folded
    for scale in (0.0, -0.125, math.inf, math.nan):
        got = for_scale(folded, scale)
        assert got == dataclasses.replace(folded, fold_scale=False), scale
    plain = dataclasses.replace(default_schedule(128), fold_scale=False)
    assert for_scale(plain, -1.0) is plain


def test_eager_prefill_skips_the_custom_op(monkeypatch):
    """Outside torch.compile and autograd a prefill call runs the implementation directly,
    checked once (the custom op's dispatch was about half of the call's 88 us of host time on
    the H200); with grad-requiring inputs it still goes through the op."""
    import importlib

    mod = importlib.import_module("argus.ops.attention")   # the module, not the function
    calls = []
    monkeypatch.setattr(mod, "check", lambda *a, **kw: calls.append("check"))
    monkeypatch.setattr(mod, "_run", lambda *a, **kw: calls.append(("run", kw)) or (a[0], None))
    monkeypatch.setattr(mod, "_op", lambda: (lambda *a: calls.append("op") or (a[0], None)))
    q, k, v = _qkv(S=64, SK=64)
    mod.attention(q, k, v)
    assert calls == ["check", ("run", {"checked": True,
                                       "remember": mod._signature(q, k, v, False, None, "bhsd",
                                                                  False)})]
    calls.clear()
    mod.attention(q.requires_grad_(), k, v)
    assert calls == ["check", "op"]


def test_a_dispatch_mode_sees_the_op(monkeypatch):
    """Under a TorchDispatchMode (make_fx, FlopCounterMode) a call goes through the op, which
    the mode records; the raw launch would run outside it."""
    import importlib

    from torch.utils._python_dispatch import TorchDispatchMode

    class Passthrough(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    mod = importlib.import_module("argus.ops.attention")
    calls = []
    monkeypatch.setattr(mod, "check", lambda *a, **kw: None)
    monkeypatch.setattr(mod, "_run", lambda *a, **kw: calls.append("run") or (a[0], None))
    monkeypatch.setattr(mod, "_op", lambda: (lambda *a: calls.append("op") or (a[0], None)))
    q, k, v = _qkv(S=64, SK=64)
    with Passthrough():
        mod.attention(q, k, v)
    assert calls == ["op"]
