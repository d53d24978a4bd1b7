"""Grids past CUDA's 65535 blocks along y or z: a kernel without clusters is launched with the
whole grid folded onto x (2^31 - 1 blocks), and codegen renders its program ids as the decode
of blockIdx.x when gridDim.y and .z are 1 (runtime/interp/launch.py `launch_grid`,
codegen/cuda/scalar.py `grid_ids`). Before, such a launch raised LaunchError (L1/87 at
upstream sizes); the GPU half is tests/gpu/test_grid_fold_gpu.py."""
import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.errors import LaunchError
from argus.runtime.interp.launch import GRID_LIMITS, check_grid, launch_grid


@ag.kernel(threads=128)
def tall(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], BN: int = 128):
    """Y = X + 1, one row per CTA along the grid's y: M rows are M CTAs along y."""
    j, i = ag.grid(ag.cdiv(X.shape[1], BN), X.shape[0])
    ag.store(Y, (i, j * BN), ag.load(X, (i, j * BN), (1, BN)) + 1.0)


@ag.kernel(threads=128)
def clustered(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], BN: int = 128):
    j, i = ag.grid(ag.cdiv(X.shape[1], BN) * 2, X.shape[0], cluster=2)
    ag.store(Y, (i, j * BN), ag.load(X, (i, j * BN), (1, BN)))


def _lowered(fn):
    return lower_only(fn)


def test_a_tall_grid_is_folded_onto_x():
    k = _lowered(tall)
    assert launch_grid(k, (3, 70000)) == (210000, 1)
    assert launch_grid(k, (3, 100)) == (3, 100)          # within the limits: as declared
    check_grid(k, (2, 70000, 5))
    assert launch_grid(k, (2, 70000, 5)) == (700000, 1, 1)


def test_folding_is_refused_with_clusters_and_past_x():
    with pytest.raises(LaunchError, match="clusters"):
        launch_grid(_lowered(clustered), (2, 70000))
    with pytest.raises(LaunchError, match="more than x"):
        launch_grid(_lowered(tall), (70000, 70000))
    assert GRID_LIMITS == (2 ** 31 - 1, 65535, 65535)


def test_codegen_decodes_the_ids_of_a_folded_launch():
    text = codegen.render(_lowered(tall)).text
    assert "gridDim.y * gridDim.z == 1u" in text and "blockIdx.x %" in text
    # a clustered kernel keeps the hardware ids (its cluster shape needs the real grid)
    text = codegen.render(_lowered(clustered)).text
    assert "blockIdx.y" in text and "gridDim.y * gridDim.z" not in text


def _decode(lin: int, ext: tuple[int, ...]) -> tuple[int, ...]:
    """What the rendered expressions compute (unsigned 32-bit, x fastest)."""
    out, inner = [], 1
    for axis, e in enumerate(ext):
        linear = lin if axis == 0 else lin // inner
        out.append(linear if axis == len(ext) - 1 else linear % e)
        inner *= e
    return tuple(out)


@pytest.mark.parametrize("ext", [(3, 70000), (1, 70000, 2), (5, 7, 70001)])
def test_the_decode_numbers_ctas_as_cuda_does(ext):
    total = int(np.prod(ext))
    for lin in [0, 1, ext[0] - 1, ext[0], total // 2, total - 1]:
        x = lin % ext[0]
        y = (lin // ext[0]) % ext[1]
        z = lin // (ext[0] * ext[1]) if len(ext) == 3 else None
        want = (x, y) if z is None else (x, y, z)
        assert _decode(lin, ext) == want


def test_the_interpreter_runs_a_tall_grid():
    x = np.random.default_rng(0).standard_normal((70000, 3)).astype(np.float32)
    y = np.full_like(x, np.nan)
    tall.interpret(x, y, BN=4)
    assert np.array_equal(y, x + 1)
