"""No silent partial output (issue 19, item 2): a launch whose stores provably leave part of an
output unwritten for the launched shapes is refused with a LaunchError, in the interpreter and
on the GPU, unless the kernel states the launch precondition (ag.tag_assume) or names the output
in `partial_outputs`. The issue's case: the README's old softmax, one [1, BN] tile per row, with
rows longer than BN left NaN tails and raised nothing."""

import numpy as np
import pytest
import torch

import argus as ag
from argus.runtime import coverage


def one_tile_softmax(precondition: bool = False, partial: tuple = ()):
    @ag.kernel(threads=256, partial_outputs=partial)
    def softmax(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32],
                BN: int = 4096):
        if precondition:
            ag.tag_assume(lambda: ag.sym(X.shape[1]) <= BN)
        (row,) = ag.grid(X.shape[0])
        x = ag.load(X, (row, 0), (1, BN), other=float("-inf"))
        e = ag.exp(x - x.max(axis=1))
        ag.store(Y, (row, 0), e / e.sum(axis=1))
    return softmax


def test_rows_longer_than_the_tile_are_refused_in_the_interpreter():
    x = torch.randn(3, 5000)
    y = torch.full_like(x, float("nan"))
    with pytest.raises(ag.LaunchError) as info:
        one_tile_softmax().interpret(x, y)
    text = str(info.value)
    assert "unwritten" in text and "dim 1 of Y has N = 5000" in text and "4096" in text
    assert "ag.range" in info.value.fix and "partial_outputs" in info.value.fix
    assert torch.isnan(y).all()                      # refused before anything ran


def test_launches_the_tile_covers_run_and_are_right():
    k = one_tile_softmax()
    for n in (1, 4000, 4096):
        x = torch.randn(2, n)
        y = torch.full_like(x, float("nan"))
        k.interpret(x, y)
        assert torch.allclose(y.double(), torch.softmax(x.double(), 1), atol=1e-6)
    # a wider tile chosen at compile time covers the long rows
    x = torch.randn(2, 5000)
    y = torch.full_like(x, float("nan"))
    k.interpret(x, y, BN=8192)
    assert torch.allclose(y.double(), torch.softmax(x.double(), 1), atol=1e-6)


def test_a_stated_precondition_or_partial_outputs_is_the_users_word():
    x = np.random.rand(2, 5000).astype(np.float32)
    one_tile_softmax(precondition=True).interpret(x, np.zeros_like(x))
    y = np.full_like(x, np.nan)
    one_tile_softmax(partial=("Y",)).interpret(x, y)
    assert np.isnan(y[:, 4096:]).all() and not np.isnan(y[:, :4096]).any()
    with pytest.raises(ag.TraceError, match="not tensor parameters"):
        one_tile_softmax(partial=("Z",))


def test_the_compiled_kernel_checks_the_same_requirement():
    """The GPU launcher (CompiledKernel.prepare) evaluates the lowered kernel's requirements;
    without a GPU, check them directly on the lowered IR it holds."""
    compiled = one_tile_softmax().compile()
    cov = coverage.of_kernel(compiled.kernel)
    cov.check({"M": 2, "N": 4096})
    with pytest.raises(ag.LaunchError, match="N = 5000"):
        cov.check({"M": 2, "N": 5000})
    cov.check({"M": 2, "N": 5000}, exempt=("Y",))


def test_grid_tiled_and_looped_outputs_never_need_a_check(examples):
    for name in ("elementwise", "softmax_online", "flash_attention"):
        cov = coverage.of_kernel(examples(name).KERNEL.trace())
        values = {s: 100_003 for s in ("M", "N", "BH", "S", "SK")}
        cov.check(values)                            # covers every size: nothing refused


@pytest.mark.gpu
def test_refused_on_the_gpu_too():
    from argus.demo import gpu_available

    if not gpu_available():
        pytest.skip("needs a Hopper GPU")
    x = torch.randn(3, 5000, device="cuda")
    y = torch.full_like(x, float("nan"))
    with pytest.raises(ag.LaunchError, match="unwritten"):
        one_tile_softmax()(x, y)
    assert torch.isnan(y).all()


def test_a_loop_carried_offset_is_not_refused():
    """The store's column comes from a loop-carried offset (`off = off + BN`): the count of
    loop iterations x tile does not see it, so |domain| (one tile) bounds nothing and the launch,
    which writes every column, must run (it was refused: 'reaches at most 128')."""
    @ag.kernel(threads=128)
    def copy_carried(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32],
                     BN: int = 128):
        (row,) = ag.grid(X.shape[0])
        off = row * 0
        for _j in ag.range(0, X.shape[1], BN):
            ag.store(Y, (row, off), ag.load(X, (row, off), (1, BN)))
            off = off + BN

    x = np.random.rand(2, 1000).astype(np.float32)
    y = np.full_like(x, np.nan)
    copy_carried.interpret(x, y)
    np.testing.assert_array_equal(y, x)
    # the verifier cannot prove this kernel (store.once/coverage name the carried offset as
    # unknown), so only the interpreter launches it; the requirement itself must not refuse
    coverage.of_kernel(copy_carried.trace()).check({"M": 2, "N": 1000})
