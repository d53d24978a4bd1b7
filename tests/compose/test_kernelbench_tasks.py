"""Composed solutions of representative KernelBench task files (read from ../shared/kernelbench,
skipped when absent) against the task's own Model in float64, on the CPU in the interpreter at
reduced sizes (the judge's shrinking, a smaller budget): the solution file `compose_task`
writes is imported as the judge imports it, built with the task's init inputs, given the
reference's weights through its state dict, and run on the task's inputs and on signed ones."""

from __future__ import annotations
from pathlib import Path

import pytest
import torch
from tests.loading import load_file

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT.parent / "shared" / "kernelbench"
needs_kb = pytest.mark.skipif(not KB.exists(), reason="KernelBench tasks not found")

TASKS = [
    ("level1", "23_Softmax.py"), ("level1", "33_BatchNorm.py"), ("level1", "35_GroupNorm_.py"),
    ("level1", "17_Matmul_with_transposed_B.py"), ("level1", "51_Argmax_over_a_dimension.py"),
    ("level1", "99_TripletMarginLoss.py"), ("level1", "89_cumsum.py"),
    ("level1", "41_Max_Pooling_1D.py"), ("level1", "92_cumsum_exclusive.py"),
    ("level2", "99_Matmul_GELU_Softmax.py"), ("level2", "30_Gemm_GroupNorm_Hardtanh.py"),
    ("level2", "84_Gemm_BatchNorm_Scaling_Softmax.py"),
    ("level2", "51_Gemm_Subtract_GlobalAvgPool_LogSumExp_GELU_ResidualAdd.py"),
]


def _import(path: Path):
    return load_file(path, f"sol_{path.stem}")


@needs_kb
@pytest.mark.parametrize("level,name", TASKS)
def test_composed_solution_matches_the_task(level, name, tmp_path):
    from argus.bench.kernelbench.shrink import SizeBudget, plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose import compose_task

    path = KB / level / name
    comp = compose_task(path)
    assert comp.complete, comp.describe()
    assert "class ModelNew" in comp.source and "import argus" in comp.source
    sol = tmp_path / name
    sol.write_text(comp.source)
    solution = _import(sol)

    plan = plan_sizes(path, SizeBudget(1 << 16, 1e7))
    task = load_task(path, plan.overrides)
    torch.manual_seed(0)
    init = list(task.get_init_inputs())
    torch.manual_seed(0)
    ref = task.Model(*init)
    torch.manual_seed(0)
    new = solution.ModelNew(*init)
    assert set(new.state_dict()) == set(ref.state_dict())
    new.load_state_dict(ref.state_dict())
    ref = ref.double()
    torch.manual_seed(1)
    own = list(task.get_inputs())
    signed = [torch.randn_like(x) if isinstance(x, torch.Tensor) and x.is_floating_point()
              and x.dim() > 0 and "Loss" not in name else x for x in own]
    for xs in (own, signed):
        with torch.no_grad():
            r = ref(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                      else x for x in xs])
            y = new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
        assert tuple(y.shape) == tuple(r.shape)
        if not r.is_floating_point():
            assert torch.equal(y, r)
            continue
        err = ((y.double() - r).norm() / r.norm()).item()
        assert err <= 1e-5, (name, err)
