"""Grid limits are one contract for the interpreter and a GPU launch: a grid with more than
65535 blocks along y or z is launched folded onto x (runtime/interp/launch.py `launch_grid`,
tests/unit/test_grid_fold.py); a grid that cannot be folded (more than 2^31 - 1 CTAs in all)
is refused before anything runs; a long x is fine."""

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


def test_a_y_extent_past_65535_is_folded_onto_x():
    from argus.runtime.interp.launch import grid_extents, launch_grid

    kernel = fill_rows_y.trace()
    grid = grid_extents(kernel, {"R": 1, "C": 128 * 65536})
    assert grid == (1, 65536)
    assert launch_grid(kernel, grid) == (65536, 1)


def test_a_grid_past_x_is_refused_before_running():
    from argus.runtime.interp.launch import grid_extents, launch_grid

    kernel = fill_rows_y.trace()
    grid = grid_extents(kernel, {"R": 70000, "C": 128 * 70000})
    with pytest.raises(LaunchError, match="70000 blocks along y") as info:
        launch_grid(kernel, grid)
    assert "x takes 2^31 - 1" in info.value.fix


def test_the_same_extent_along_x_runs():
    y = np.zeros((2, 128 * 3), dtype=np.float32)
    fill_rows.interpret(y)
    assert (y == 1.0).all()
    from argus.runtime.interp.launch import check_grid, grid_extents

    kernel = fill_rows.trace()
    grid = grid_extents(kernel, {"R": 1, "C": 128 * 65536})
    assert grid[0] == 65536
    check_grid(kernel, grid)    # x takes it
