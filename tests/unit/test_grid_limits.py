"""Grid limits are one contract: a grid CUDA cannot launch (more than 65535 blocks along y or
z) is refused by the interpreter exactly as by a GPU launch, before anything runs; a long x
is fine."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus.errors import LaunchError


@ag.kernel(threads=128)
def fill_rows(Y: ag.Tensor["R", "C", ag.f32], BC: int = 128):
    c, r = ag.grid(ag.cdiv(Y.shape[1], BC), Y.shape[0])
    ag.store(Y, (r, c * BC), ag.full((1, BC), 1.0))


@ag.kernel(threads=128)
def fill_rows_y(Y: ag.Tensor["R", "C", ag.f32], BC: int = 128):
    r, c = ag.grid(Y.shape[0], ag.cdiv(Y.shape[1], BC))
    ag.store(Y, (r, c * BC), ag.full((1, BC), 1.0))


def test_a_y_extent_past_65535_is_refused_before_running():
    y = np.zeros((1, 128 * 65536), dtype=np.float32)
    with pytest.raises(LaunchError, match="65536 blocks along y") as info:
        fill_rows_y.interpret(y)
    assert "x takes 2^31 - 1" in info.value.fix
    assert not y.any()          # refused before anything ran


def test_the_same_extent_along_x_runs():
    y = np.zeros((2, 128 * 3), dtype=np.float32)
    fill_rows.interpret(y)
    assert (y == 1.0).all()
    from argus.runtime.interp.launch import check_grid, grid_extents

    kernel = fill_rows.trace()
    grid = grid_extents(kernel, {"R": 1, "C": 128 * 65536})
    assert grid[0] == 65536
    check_grid(kernel, grid)    # x takes it
