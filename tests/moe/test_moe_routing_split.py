"""The reworked routing kernels (argus/kernels/moe_routing.py: the grouped router's [G, E/G]
tile, the scan over expert blocks, the layout over m-tile blocks, chunks of at most
CHUNK entries) against the kernels before them (argus/kernels/moe_routing_old.py), bit for bit
in the interpreter, at sizes where the new split matters: T no multiple of anything, E 8 / 128
/ 256, k 1 / 2 / 8, renormalize on and off, logits with many ties (values on a coarse grid, so
equal scores, equal group scores and equal choices occur in most tokens)."""

import importlib

import pytest
import torch

import argus as ag
from argus.kernels import moe_routing as R
from argus.kernels import moe_routing_old as OLD

M = importlib.import_module("argus.ops.moe")


def _tied_logits(T, E, seed, levels=5):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(-levels, levels + 1, (T, E), generator=g).float() / 4)


@pytest.mark.parametrize("T,E,k,G,TG,renorm,dtype", [
    (37, 256, 8, 8, 4, True, torch.float32),     # DeepSeek-V3
    (19, 256, 8, 8, 4, False, torch.bfloat16),
    (11, 256, 1, 8, 4, True, torch.float32),
    (23, 64, 2, 4, 2, True, torch.float32),
    (9, 32, 4, 4, 2, False, torch.float32),      # 8 experts a group
])
def test_grouped_sigmoid_router_is_bit_identical(T, E, k, G, TG, renorm, dtype):
    logits = _tied_logits(T, E, seed=T + E).to(dtype)
    g = torch.Generator().manual_seed(E)
    # a bias on the same grid: biased choices tie too
    bias = torch.randint(-2, 3, (E,), generator=g).float() / 8
    be = R.block_experts(E)
    ids = torch.full((T, k), -7, dtype=torch.int32)
    w = torch.full((T, k), -7.0)
    R.topk_sigmoid_grouped_kernel(ag.bf16 if dtype == torch.bfloat16 else ag.f32, k, renorm,
                                  be, G, TG, 2.5).interpret(
        logits.reshape(T * G, E // G), logits, bias.view(G, E // G), ids, w)
    old_ids, old_w = torch.full_like(ids, -7), torch.full_like(w, -7.0)
    OLD.topk_sigmoid_grouped_kernel(ag.bf16 if dtype == torch.bfloat16 else ag.f32, k, renorm,
                                    be, G, TG, 2.5).interpret(logits, bias.view(1, E), old_ids,
                                                              old_w)
    assert torch.equal(ids, old_ids)
    assert torch.equal(w, old_w)


def test_grouped_sigmoid_router_nan_ranks_first():
    """A NaN score ranks above every number (torch.topk's rule, and the old kernel's)."""
    T, E, k, G, TG = 3, 256, 8, 8, 4
    logits = _tied_logits(T, E, seed=1)
    logits[0, 77] = float("nan")
    logits[2, 5] = logits[2, 200] = float("nan")
    bias = torch.zeros(1, E)
    be = R.block_experts(E)
    out = [(torch.full((T, k), -7, dtype=torch.int32), torch.full((T, k), -7.0))
           for _ in range(2)]
    R.topk_sigmoid_grouped_kernel(ag.f32, k, False, be, G, TG, 1.0).interpret(
        logits.reshape(T * G, E // G), logits, bias.view(G, E // G), *out[0])
    OLD.topk_sigmoid_grouped_kernel(ag.f32, k, False, be, G, TG, 1.0).interpret(
        logits, bias, *out[1])
    assert torch.equal(out[0][0], out[1][0])
    assert torch.equal(out[0][1].isnan(), out[1][1].isnan())
    assert torch.equal(out[0][1].nan_to_num(-1), out[1][1].nan_to_num(-1))
