"""A row reduction of a tile whose layout no load anchors (a one-hot built from an index tile
and ag.arange) gets the slice of its source's layout: layout inference used to give it
"blocked" together with the other unconstrained tiles, which codegen then refused ("reduction
result layout blocked (32, 1) is not the slice ..."). The MoE routing kernels count experts
this way (argus/kernels/moe_routing.py)."""

import numpy as np
import torch

import argus as ag


@ag.kernel(threads=128)
def column_counts(Ids: ag.Tensor["N", ag.i32], Out: ag.Tensor["E", 1, ag.i32],
                  OutRow: ag.Tensor[1, "E", ag.i32]):
    ag.grid(1)
    row = ag.zeros((1, 32), ag.i32)
    counts = ag.zeros((32, 1), ag.i32)
    for s in ag.range(0, Ids.shape[0], 32):   # carried: the sums meet blocked variables
        ids = ag.load(Ids, (s,), (32,), other=-1)
        one = ag.full((1, 1), 1, ag.i32)
        row = row + ag.where(ids[:, None] == ag.arange(32)[None, :], one, 0).sum(axis=0)
        hot = ag.arange(32)[:, None] == ids[None, :]      # [expert, entry]
        counts = counts + ag.where(hot, one, 0).sum(axis=1)
    ag.store(Out, (0, 0), counts)                         # [32, 1]: entries per expert
    ag.store(OutRow, (0, 0), row)


def test_unanchored_row_reduction_compiles_and_counts():
    ids = torch.tensor([3, 1, 3, 0, 7, 3, 1] * 6, dtype=torch.int32)
    out = torch.full((8, 1), -1, dtype=torch.int32)
    out_row = torch.full((1, 8), -1, dtype=torch.int32)
    column_counts.interpret(ids, out, out_row)   # runs compile's front end (layouts, CUDA)
    expect = np.bincount(ids.numpy(), minlength=8)
    assert out.view(-1).tolist() == expect.tolist()
    assert out_row.view(-1).tolist() == expect.tolist()
