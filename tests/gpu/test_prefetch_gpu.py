"""GPU tier for lower/prefetch.py's register ring: loops whose loads run `depth` blocks ahead,
rendered depth + 1 times per trip, give float64's answer on the device, for trip counts that are
not a multiple of the unroll, shorter than the ring, and for aligned and unaligned launches
(the unaligned one runs the variant with run-time alignment checks)."""

import pytest

torch = pytest.importorskip("torch")

from argus.ir import ops as O  # noqa: E402
from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _softmax64(x):
    return torch.softmax(x.double(), dim=1)


@pytest.mark.parametrize("bn", [1024, 2048, 4096])
@pytest.mark.parametrize("rows, cols", [(9, 5000), (3, 1500), (130, 8192), (5, 20000)])
def test_looped_softmax_matches_float64(bn, rows, cols):
    """The ring's documented rule (lower/prefetch.py): a loop is pipelined when one block of
    its loads is at most MAX_BLOCK_REGS registers per thread. A [1, BN] fp32 block over the
    example's 256 threads is BN / 256 registers: BN 1024 and 2048 (4, 8) get the ring, BN 4096
    (16, measured slower with any ring) is left as written; both forms must give float64's
    answer."""
    from argus.compiler import compile_kernel
    from argus.demo import load_example
    from argus.lower import prefetch

    ex = load_example("softmax_online")
    compiled = compile_kernel(ex.KERNEL, BN=bn)
    ringed = [op.unroll > 1 for op in compiled.kernel.walk() if isinstance(op, O.For)]
    regs_per_block = bn // compiled.kernel.attr("threads")
    assert ringed == [regs_per_block <= prefetch.MAX_BLOCK_REGS] * 2, \
        (f"BN {bn} ({regs_per_block} registers per block, ring limit "
         f"{prefetch.MAX_BLOCK_REGS}): loops ringed {ringed}")
    g = torch.Generator().manual_seed(rows * cols + bn)
    x = (torch.randn(rows, cols, generator=g) * 4).cuda()
    y = torch.full_like(x, float("nan"))
    compiled(x, y)
    torch.cuda.synchronize()
    err = ((y.double() - _softmax64(x)).norm() / _softmax64(x).norm()).item()
    assert err < 1e-5


def test_looped_softmax_unaligned_view_matches_float64():
    from argus.compiler import compile_kernel
    from argus.demo import load_example

    ex = load_example("softmax_online")
    compiled = compile_kernel(ex.KERNEL, BN=2048)
    g = torch.Generator().manual_seed(11)
    base = (torch.randn(7, 6001, generator=g) * 4).cuda()
    x = base[:, 1:]                      # 4-byte aligned rows: the checked variant
    y = torch.full((7, 6000), float("nan"), device="cuda")
    compiled(x, y)
    torch.cuda.synchronize()
    assert torch.allclose(y.double(), _softmax64(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("cols", [512, 5000, 9000])
def test_two_rings_and_a_step_of_two_match_float64(cols):
    from argus.compiler import compile_kernel
    from tests.passes.test_prefetch import row_dot

    g = torch.Generator().manual_seed(cols)
    x, w = (torch.randn(33, cols, generator=g).cuda() for _ in range(2))
    y = torch.full((33, 1), float("nan"), device="cuda")
    compile_kernel(row_dot)(x, w, y)
    torch.cuda.synchronize()
    ref = (x.double() * w.double()).sum(1, keepdim=True)
    assert torch.allclose(y.double(), ref, atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("rows, cols", [(9, 5000), (3, 1000), (130, 8192)])
def test_hoisted_row_max_logsumexp_matches_float64(rows, cols):
    """logsumexp's sum pass (KernelBench L2/42, 43, 84, 92): the row max's load, the same block
    in every iteration, is hoisted before the loop (issue 13), X's blocks are ringed."""
    from argus.compiler import compile_kernel
    from tests.passes.test_prefetch import row_logsumexp

    compiled = compile_kernel(row_logsumexp)
    loop = next(op for op in compiled.kernel.walk() if isinstance(op, O.For))
    assert not any(isinstance(op, O.Load) and op.tensor.hint == "MX" for op in loop.body.ops)
    g = torch.Generator().manual_seed(rows * cols)
    x = (torch.randn(rows, cols, generator=g) * 4).cuda()
    mx = x.max(dim=1, keepdim=True).values
    y = torch.full((rows, 1), float("nan"), device="cuda")
    compiled(x, mx, y)
    torch.cuda.synchronize()
    ref = torch.logsumexp(x.double(), dim=1, keepdim=True)
    assert torch.allclose(y.double(), ref, atol=1e-5, rtol=1e-6)
