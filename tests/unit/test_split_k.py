"""Split-K (GemmSchedule.split_k): the K-slice views are exact, the batched kernel over them
plus `split_k_sum` equals the unsplit product in the interpreter, the sum is in a fixed order,
and illegal splits are refused with a reason."""

from __future__ import annotations

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import LaunchError, TraceError
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.kernels.split_k_sum import split_k_sum_kernel
from argus.ops import split_k
from argus.ops.schedules import Problem, candidates, kernel_for


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16()


@pytest.mark.parametrize("layout", ["nk", "kn"])
def test_slices_are_views_of_each_k_range(layout):
    a = _rand(5, 96 + 8, seed=1)[:, :96]                 # a row pitch wider than K
    b = _rand(7, 96, seed=2) if layout == "nk" else _rand(96, 7, seed=2)
    a3, b3 = split_k.slices(a, b, layout, 3)
    assert a3.data_ptr() == a.data_ptr() and b3.data_ptr() == b.data_ptr()
    for s in range(3):
        assert torch.equal(a3[s], a[:, 32 * s:32 * (s + 1)])
        want = b[:, 32 * s:32 * (s + 1)] if layout == "nk" else b[32 * s:32 * (s + 1)]
        assert torch.equal(b3[s], want)


@pytest.mark.parametrize("k,splits,batch,reason", [
    (1024, 1, 1, "outside"), (1024, 17, 1, "outside"), (1000, 3, 1, "not a multiple"),
    (1000, 2, 1, "multiple of 8"), (1024, 2, 4, "unbatched")])
def test_illegal_splits_say_why(k, splits, batch, reason):
    assert reason in split_k.why_not(k, splits, batch)
    with pytest.raises(LaunchError, match="split_k"):
        split_k.check(k, splits, batch)
    assert split_k.why_not(1024, 4, 1) is None


@pytest.mark.parametrize("layout,m,n,k,splits,schedule", [
    ("nk", 20, 200, 384, 3, GemmSchedule(bm=64, bn=64, consumers=1, stages=2)),
    # K slices of 72: a slice ends inside a 64-deep stage, whose tail reads zeros
    ("kn", 9, 130, 216, 3, GemmSchedule(bm=64, bn=64, consumers=1, stages=3)),
    ("nk", 70, 96, 256, 4, GemmSchedule(bm=64, bn=32, consumers=1, stages=2, k_atoms=2)),
])
def test_split_gemm_matches_float64_in_the_interpreter(layout, m, n, k, splits, schedule):
    a, w = _rand(m, k, seed=m), _rand(n, k, seed=n)
    b = w if layout == "nk" else w.T.contiguous()
    a3, b3 = split_k.slices(a, b, layout, splits)
    partials = torch.full((splits, m, n), float("nan"))
    gemm_kernel(ag.bf16, ag.f32, layout, True).interpret(a3, b3, partials, s=schedule)
    exact = a.double() @ w.double().T
    for s in range(splits):      # each partial is its own slice's product, nothing more
        ks = k // splits
        part = a[:, s * ks:(s + 1) * ks].double() @ w[:, s * ks:(s + 1) * ks].double().T
        assert torch.allclose(partials[s].double(), part, rtol=1e-5, atol=1e-4)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    split_k_sum_kernel(ag.bf16, splits).interpret(partials, c)
    assert not torch.isnan(c).any()
    assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3


def test_the_sum_is_in_a_fixed_order_and_rounds_once():
    g = torch.Generator().manual_seed(5)
    p = torch.randn(4, 3, 700, generator=g) * torch.tensor([1e4, 1.0, -1e4, 1e-3])[:, None, None]
    for out, dtype in ((ag.f32, torch.float32), (ag.bf16, torch.bfloat16)):
        c = torch.full((3, 700), float("nan"), dtype=dtype)
        split_k_sum_kernel(out, 4).interpret(p, c)
        want = (((p[0] + p[1]) + p[2]) + p[3]).to(dtype)   # fp32, s = 0, 1, 2, 3
        assert torch.equal(c, want)


def test_the_sum_kernel_verifies_clean():
    for splits in (2, 16):
        report = verify.run(lower_only(split_k_sum_kernel(ag.bf16, splits)))
        assert not report.errors, "\n".join(str(d) for d in report.errors)
        assert "store.coords" in {o.code for o in report.proven}


def test_slices_refuse_batched_operands():
    with pytest.raises(ValueError, match="2-d"):
        split_k.slices(_rand(1, 16, 64, seed=1), _rand(1, 8, 64, seed=2), "nk", 2)


def test_the_gemm_kernel_refuses_a_split_schedule():
    with pytest.raises(TraceError, match="split_k"):
        gemm_kernel().trace(s=GemmSchedule(split_k=2))
    with pytest.raises(ValueError, match="split_k"):
        GemmSchedule(split_k=17)
    with pytest.raises(ValueError, match="TMA-store"):
        GemmSchedule(split_k=2, epilogue="tma")
    with pytest.raises(ValueError, match="splits"):
        split_k_sum_kernel(ag.bf16, 1)


def test_skinny_problems_get_legal_split_candidates_and_their_kernel():
    p = Problem(16, 8192, 8192, 1, "bf16", "bf16", "nk", True)
    splits = [s for s in candidates(p) if s.split_k > 1]
    assert splits
    for s in splits:
        assert split_k.why_not(p.k, s.split_k, p.batch) is None and s.epilogue == "direct"
        kernel, run = kernel_for(p, s)
        assert kernel.name.endswith("_f32_nk_batched") and run.split_k == 1
    # K that no split divides into 8-element slices: no split candidates
    odd = Problem(16, 8192, 8190, 1, "bf16", "bf16", "nk", True)
    assert not [s for s in candidates(odd) if s.split_k > 1]
    # large problems are never split
    assert not [s for s in candidates(Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True))
                if s.split_k > 1]
