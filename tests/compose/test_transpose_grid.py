"""The compose layout transpose launches on one flat grid axis: conv_pointwise_2D at upstream
sizes transposed 2^20 pixels (65536 row tiles of 16 then), past CUDA's 65535 blocks along y."""
import pytest
import torch

import argus as ag
from argus.compose import launch
from argus.runtime.interp.launch import GRID_LIMITS, check_grid, grid_extents


def _kernel():
    # the grid only: the verifier's verdict on the kernel is its own test's business
    return ag.compile(launch.transpose, verify=False, BR=16, BC=32).kernel


@pytest.mark.parametrize("shape", [(3, 40, 70), (1, 16, 32), (2, 1, 5), (5, 33, 1)])
def test_transpose_matches_torch(shape):
    x = torch.randn(*shape)
    y = torch.full((shape[0], shape[2], shape[1]), float("nan"))
    launch.run(launch.transpose, (x, y))
    assert torch.equal(y, x.transpose(1, 2))


@pytest.mark.parametrize("b, r, c", [(16, 1 << 20, 4), (70000, 16, 32), (1, 2048, 1 << 20)])
def test_transpose_grid_fits_cuda_limits(b, r, c):
    kernel = _kernel()
    grid = grid_extents(kernel, {"B": b, "R": r, "C": c})
    tiles = b * -(-r // 16) * -(-c // 32)
    assert grid[0] == tiles and all(g == 1 for g in grid[1:])
    assert all(g <= lim for g, lim in zip(grid, GRID_LIMITS))
    check_grid(kernel, grid)
