"""The scan's launch grid at sizes past CUDA's 65535 blocks along y: the inner-axis scan
(`_inner`, I > 1) puts I / BN column blocks on y, which a 2^24-element inner axis of 256-wide
blocks passes (65536). Such a grid is launched folded onto x (runtime/interp/launch.py
`launch_grid`, since ecfce73), with the program ids the same; the arithmetic is checked here
without a GPU (tracing only)."""
import pytest

from argus.compose import scan
from argus.runtime.interp.launch import GRID_LIMITS, check_grid, grid_extents, launch_grid


def _traced(**constexprs):
    fn, _ = scan.kernel("inner", "sum", threads=256)
    return fn.trace(**constexprs)


@pytest.mark.parametrize("o, length, inner", [(1, 2, (1 << 24) + 256), (3, 5, 1 << 26),
                                              (1, 1, 65535 * 256)])
def test_the_inner_scan_grid_folds_past_65535_column_blocks(o, length, inner):
    kernel = _traced(ROWS=16, BN=256)
    grid = grid_extents(kernel, {"O": o, "L": length, "I": inner})
    assert grid == (o, -(-inner // 256))
    launched = launch_grid(kernel, grid)
    assert all(g <= lim for g, lim in zip(launched, GRID_LIMITS)), launched
    assert launched[0] * launched[1] == o * -(-inner // 256)   # every CTA launched once
    assert launched == (grid if grid[1] <= 65535 else (o * grid[1], 1))
    check_grid(kernel, grid)

