"""argus.ops.attention_fp8 with the permuted V^T (its default when it transposes V itself:
kernel_v writes each 32-key group in the order the shuffle-free P reads, schedule
permuted_vt) in the numpy interpreter against float64 on the dequantized inputs: ragged
lengths, Skv not a multiple of 32 (the zeroed tail of the last group), causal and full,
more queries than keys, GQA, both layouts, head dims 64 / 128 / 256. Seeded: an op whose V^T
order disagrees with the kernel's P move gives wrong numbers here."""

import dataclasses
import importlib

import pytest
import torch

from argus.kernels.attention import fp8_schedule
from tests.interp.test_attention_fp8_interp import assert_close, inputs, reference, run

op = importlib.import_module("argus.ops.attention_fp8")


@pytest.fixture
def kernels_run(monkeypatch):
    """The permuted_vt argument of every attention_kernel the op builds."""
    seen = []
    real = op.attention_kernel

    def spy(D, dtype, causal, lse, permuted_vt=False):
        seen.append(permuted_vt)
        return real(D, dtype, causal, lse, permuted_vt)
    monkeypatch.setattr(op, "attention_kernel", spy)
    return seen


@pytest.mark.parametrize("B,H,HKV,S,SK,D,causal,layout", [
    (1, 2, 1, 100, 150, 128, True, "bhsd"),      # ragged, causal, GQA 2:1
    (1, 2, 2, 200, 136, 128, False, "bhsd"),     # Skv = 4 groups + 8 keys
    (2, 4, 1, 64, 33, 64, True, "bshd"),         # one key past a group, MQA, bshd
    (1, 2, 2, 130, 260, 256, True, "bhsd"),      # hd 256 (block_n 64)
    (1, 2, 1, 150, 40, 64, True, "bhsd"),        # more queries than keys: rows with no key
    (1, 1, 1, 17, 31, 128, False, "bshd"),       # a single partial group
    (1, 2, 1, 64, 256, 128, False, "bhsd"),      # whole groups only
])
def test_permuted_v_matches_float64(kernels_run, B, H, HKV, S, SK, D, causal, layout):
    q, k, v, qs, ks, vs = inputs(B, H, HKV, S, SK, D, layout=layout, seed=S + SK + D)
    out, lse = run(q, k, v, qs, ks, vs, causal, layout=layout)
    want, want_lse = reference(q, k, v, qs, ks, vs, causal, layout)
    assert_close(out, lse, want, want_lse)
    assert kernels_run == [True], "the op did not take the permuted V^T"


def test_a_schedule_without_the_flag_still_runs_permuted(kernels_run):
    # the op decides permuted_vt from the V^T it made, whatever the schedule said
    q, k, v, qs, ks, vs = inputs(1, 2, 1, 64, 70, 128, seed=3)
    s = dataclasses.replace(fp8_schedule(128, False), permuted_vt=False)
    out, lse = run(q, k, v, qs, ks, vs, False, schedule=s)
    assert_close(out, lse, *reference(q, k, v, qs, ks, vs, False))
    assert kernels_run == [True]


def test_v_given_transposed_takes_the_shuffles(kernels_run):
    q, k, v, qs, ks, vs = inputs(1, 2, 1, 64, 70, 128, seed=4)
    vt = v.transpose(-1, -2).contiguous()
    out, lse = run(q, k, vt, qs, ks, vs, True, v_transposed=True)
    assert_close(out, lse, *reference(q, k, v, qs, ks, vs, True))
    assert kernels_run == [False]


@pytest.mark.parametrize("order", ["natural", "inverse"])
def test_an_op_order_the_kernel_does_not_read_gives_wrong_numbers(monkeypatch, order):
    """Seeded: the op hands the permuted kernel V^T in natural key order, or permuted by the
    inverse map: each P element then multiplies another key's V, and the output is far off."""
    from argus.target.fragments import acc_order_k

    def wrong_v(v, layout, v_transposed, launched=None):
        vb = v if layout == "bhsd" else v.transpose(1, 2)
        SK = vb.shape[2]
        store = torch.zeros((*vb.shape[:2], vb.shape[3], -(-SK // 32) * 32), dtype=torch.uint8)
        src = vb.transpose(-1, -2).view(torch.uint8)
        if order == "natural":
            store[..., :SK] = src
        else:
            for c, key in enumerate(acc_order_k(torch.arange(store.shape[-1]).numpy())):
                if key < SK:
                    store[..., c] = src[..., int(key)]
        return store.view(v.dtype), True
    monkeypatch.setattr(op, "kernel_v", wrong_v)
    q, k, v, qs, ks, vs = inputs(1, 2, 1, 64, 96, 128, seed=5)
    out, lse = run(q, k, v, qs, ks, vs, False)
    want, want_lse = reference(q, k, v, qs, ks, vs, False)
    with pytest.raises(AssertionError):
        assert_close(out, lse, want, want_lse)
