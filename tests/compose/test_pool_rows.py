"""The pooling template's rows per CTA over narrow planes (no GPU): a row of few outputs and a
small window (KernelBench L2/11's MaxPool2d(2) over 34 x 34 planes: 17 outputs, 4 loads a
thread) runs several rows a CTA (`pool_rows_per_cta`), wide rows and large windows keep one
(L1/41-46's measured shapes). The rows are checked in the interpreter against float64 torch,
with row counts that leave the last CTA's rows partly past the end."""

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from argus.compose import pool


def test_narrow_planes_take_several_rows_a_cta():
    assert pool.pool_rows_per_cta(32, 4, 512 * 128 * 17) == 8        # L2/11: 2x2 over 34^2
    assert pool.pool_rows_per_cta(32, 8, 128 * 16 * 7 * 31) == 8     # L2/8: 2x2x2 over 62^3
    assert pool.pool_rows_per_cta(32, 4, 3) == 3                      # never more rows than exist


@pytest.mark.parametrize("bn,window", [(256, 8), (128, 27), (256, 4), (64, 27), (32, 16)])
def test_wide_rows_and_large_windows_keep_one_row(bn, window):
    # L1/41-46 (bn 256 / 128, and L1/43's 3x3x3 window at bn 64): measured best at one row
    assert pool.pool_rows_per_cta(bn, window, 10 ** 6) == 1


@pytest.mark.parametrize("bn,window", [(8, 1), (16, 9), (32, 4), (64, 8), (64, 15)])
def test_rows_bound_the_unrolled_loads(bn, window):
    rows = pool.pool_rows_per_cta(bn, window, 10 ** 6)
    assert 1 < rows <= 8 and rows * window <= 64 and rows * bn <= 512


def _node(kind, dims, shape_out, k, s, p, d):
    return SimpleNamespace(shape=shape_out, attrs={"dims": dims, "kind": kind, "kernel": k,
                                                   "stride": s, "padding": p, "dilation": d})


CASES = [
    # kind, x shape, kernel, stride, padding, dilation
    ("max", (3, 5, 34, 34), (2, 2), (2, 2), (0, 0), (1, 1)),      # L2/11's pool, 255 rows
    ("avg", (2, 3, 10, 14), (2, 2), (2, 2), (0, 0), (1, 1)),
    ("max", (2, 3, 11, 13), (3, 3), (2, 2), (1, 1), (1, 1)),      # padded tail copy (13 % 2)
    ("max", (1, 3, 6, 10, 10), (2, 2, 2), (2, 2, 2), (0, 0, 0), (1, 1, 1)),   # L2/8's pool
    ("avg", (1, 2, 5, 7, 9), (3, 3, 3), (2, 2, 2), (1, 1, 1), (1, 1, 1)),    # 27 loads: 1 row
]


@pytest.mark.parametrize("kind,shape,k,s,p,d", CASES)
def test_rows_match_float64_torch(kind, shape, k, s, p, d):
    torch.manual_seed(0)
    x = torch.randn(shape)
    x64 = x.double()
    n = len(k)
    if kind == "max":
        ref = (F.max_pool2d if n == 2 else F.max_pool3d)(x64, k, s, p, d)
    else:
        ref = (F.avg_pool2d if n == 2 else F.avg_pool3d)(x64, k, s, p)
    before = set(pool._KERNELS)
    y = pool.run_pool(_node(kind, n, tuple(ref.shape), k, s, p, d), x)
    new = [key for key in pool._KERNELS if key not in before]
    if new:        # the kernel this call built: its rows are the rule's
        bn, rows = new[0][-2:]
        n_rows = shape[0] * shape[1] * int(torch.tensor(ref.shape[2:-1]).prod())
        assert rows == pool.pool_rows_per_cta(bn, int(torch.tensor(k).prod()), n_rows)
    assert y.shape == ref.shape
    tol = 0.0 if kind == "max" else 1e-6
    assert (y.double() - ref).abs().max().item() <= tol


def test_rows_past_the_end_are_not_stored():
    # 3 rows of outputs, 8 rows a CTA's tile would be: the 5 past the end must not write
    x = torch.randn(1, 3, 2, 34)
    node = _node("max", 2, (1, 3, 1, 17), (2, 2), (2, 2), (0, 0), (1, 1))
    y = pool.run_pool(node, x)
    assert torch.equal(y, F.max_pool2d(x, 2))


@pytest.mark.parametrize("spatial_in,spatial_out,k", [
    ((34, 34), (17, 17), (2, 2)),                    # L2/11: [512, 128, 34, 34] -> 17^2
    ((14, 62, 62), (7, 31, 31), (2, 2, 2)),          # L2/8: [128, 16, 14, 62, 62] -> 7x31^2
])
def test_narrow_rows_build_for_sm90a_without_spills(spatial_in, spatial_out, k):
    from argus import codegen
    from argus.analysis import alignment
    from argus.runtime import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    from argus.runtime.compile import compile_cuda

    n = len(k)
    bn = 32
    rows = pool.pool_rows_per_cta(bn, 2 ** n, 10 ** 5)
    assert rows == 8
    src = pool._source("max", spatial_in[:-1] + (spatial_in[-1],), spatial_out, k, (2,) * n,
                       (0,) * n, (1,) * n, bn, rows)
    fn = pool.tile.load_source(src, "pool_rows_test")["pool"]
    cu = codegen.render(alignment.specialize(fn.lower(),
                                             alignment.LaunchSpecialization(("X", "Y"), ())))
    binary = compile_cuda(cu.text, [cu.name], filename=f"{cu.name}.cu", use_cache=False)
    res = binary.resource(cu.name)
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    # 2-d: 72 registers (28 one-warp CTAs an SM); 3-d, 64 loads a thread: 118 (17), each
    # thread's loads in flight together (>= 16 warps x 32 x 32 loads an SM)
    assert res.registers <= 128, res
