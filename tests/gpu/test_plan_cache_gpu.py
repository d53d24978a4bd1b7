"""A compiled kernel's launch plans (CompiledKernel._plans, up to PLAN_CACHE_SIZE argument
signatures) are keyed by the buffers' addresses and layouts and hold packed raw pointers only
(CompiledKernel.prepare drops the LaunchPlan's argument objects): a fresh output passed to one
call is freed when its caller lets go of it, the cache notwithstanding. A plan that kept its
tensors would hold up to 32 argument sets of every kernel alive."""
import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.unit.test_grid_fold import tall  # noqa: E402

pytestmark = hopper_only()


def test_cached_plans_keep_no_argument_alive():
    compiled = tall.compile(BN=128)
    before = len(compiled._plans)
    refs = []
    for rows in (64, 65, 66):              # three signatures: three cached plans
        x = torch.randn(rows, 256, device="cuda")
        y = torch.empty_like(x)
        compiled(x, y)
        torch.cuda.synchronize()
        assert torch.equal(y, x + 1)
        refs += [weakref.ref(x), weakref.ref(y)]
    assert len(compiled._plans) == min(before + 3, compiled.PLAN_CACHE_SIZE)
    del x, y
    gc.collect()
    assert [r() for r in refs] == [None] * len(refs), "a cached plan kept a tensor alive"
    # a new tensor at a reused address with the same layout reuses the plan, and is right
    x = torch.randn(66, 256, device="cuda")
    y = torch.empty_like(x)
    compiled(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x + 1)
