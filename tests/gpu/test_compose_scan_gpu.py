"""GPU tier for the compose scan template's schedules and the pooling tail paths: every kernel
compiled for sm_90a by NVRTC and run on the device, against torch in float64 (strict fp32 bound).
The speed of the schedules is scripts/gpu_scan_bench.py's job, not a test's."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _reference(x, fn, reverse, exclusive):
    """The scan in float64 (double=True) or as torch eager computes it in fp32."""
    r = x.flip(1) if reverse else x
    r = r.cumsum(1) if fn == "sum" else r.cumprod(1)
    if exclusive:
        r = torch.cat((torch.full_like(r[:, :1], 0.0 if fn == "sum" else 1.0), r[:, :-1]), 1)
    return r.flip(1) if reverse else r


def _bound(x, fn, reverse, exclusive, exact) -> float:
    """The strict fp32 bound 1e-5, or twice torch eager's own fp32 error on the same data when
    that is larger: a cumprod of 3001 factors near 1 loses ~1e-5 in fp32 whoever computes it
    (the product's rounding errors add up along the row)."""
    eager = _reference(x, fn, reverse, exclusive).double()
    return max(1e-5, 2 * ((eager - exact).norm() / exact.norm()).item())


@pytest.mark.parametrize("rows,bn", [(2, 128), (4, 128), (1, 256), (2, 32)])
@pytest.mark.parametrize("segments", [1, 0, 5])
@pytest.mark.parametrize("fn,reverse,exclusive", [("sum", False, False), ("sum", True, True),
                                                  ("prod", False, True)])
def test_scan_rows_schedules_on_the_gpu(rows, bn, segments, fn, reverse, exclusive):
    from argus.compose.scan import ScanSchedule, scan_rows

    torch.manual_seed(0)
    shape = (1000, 3001)                  # partial CTAs, blocks and segments
    x = torch.rand(shape, device="cuda") if fn == "sum" else \
        1.0 + 1e-4 * torch.randn(shape, device="cuda")
    y = torch.full_like(x, float("nan"))
    ran = scan_rows(x, y, fn, reverse, exclusive, ScanSchedule(rows, bn, segments))
    torch.cuda.synchronize()
    r = _reference(x.double(), fn, reverse, exclusive)
    err = ((y.double() - r).norm() / r.norm()).item()
    assert err <= _bound(x, fn, reverse, exclusive, r), (ran, err)


@pytest.mark.parametrize("fn,reverse,exclusive", [("max", False, False), ("min", True, True),
                                                  ("sum", True, False)])
def test_scan_primitive_on_the_gpu(fn, reverse, exclusive):
    """ag.scan compiled for sm_90a: a [3, 256] tile (two chunks of 16-byte runs per lane),
    init from memory, the total stored; against torch in float64."""
    import argus as ag

    @ag.kernel(threads=32)
    def k(X: ag.Tensor["R", "C", ag.f32], I: ag.Tensor["R", 1, ag.f32],
          Y: ag.Tensor["R", "C", ag.f32], T: ag.Tensor["R", 1, ag.f32]):
        (p,) = ag.grid(1)
        y, total = ag.scan(ag.load(X, (0, 0), (3, 256)), fn, 1, ag.load(I, (0, 0), (3, 1)),
                           reverse=reverse, exclusive=exclusive)
        ag.store(Y, (0, 0), y)
        ag.store(T, (0, 0), total)

    torch.manual_seed(0)
    x, init = torch.randn(3, 256, device="cuda"), torch.randn(3, 1, device="cuda")
    y, t = torch.zeros_like(x), torch.zeros_like(init)
    ag.compile(k, verify=False)(x, init, y, t)
    xs = torch.cat((init, x.flip(1) if reverse else x), 1).double()
    acc = xs.cumsum(1) if fn == "sum" else (xs.cummax(1) if fn == "max" else xs.cummin(1))[0]
    want = acc[:, :-1] if exclusive else acc[:, 1:]
    want = want.flip(1) if reverse else want
    assert torch.allclose(y.double(), want, rtol=1e-6, atol=1e-5)
    assert torch.allclose(t.double()[:, 0], acc[:, -1], rtol=1e-6, atol=1e-5)


def test_scan_few_long_rows_is_segmented_on_the_gpu():
    from argus.compose.scan import ScanSchedule, scan_rows

    torch.manual_seed(0)
    x = torch.randn(8, 1 << 20, device="cuda")
    y = torch.empty_like(x)
    ran = scan_rows(x, y, "sum", False, False, ScanSchedule())
    assert ran.segments > 1
    r = x.double().cumsum(1)
    assert ((y.double() - r).norm() / r.norm()).item() <= 1e-5


@pytest.mark.parametrize("make,shape", [
    (lambda: torch.nn.AvgPool2d(11), (4, 8, 256, 2048)),            # a view: no copy
    (lambda: torch.nn.MaxPool2d(3, 2, 1), (4, 8, 63, 255)),         # a padded copy
])
def test_pooling_stride_not_dividing_the_width_on_the_gpu(make, shape):
    from argus.compose.runtime import ComposedModel

    class Pool(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.p = make()

        def forward(self, x):
            return self.p(x)

    class ModelNew(ComposedModel):
        MODEL = Pool

    torch.manual_seed(0)
    x = torch.randn(shape, device="cuda")
    new = ModelNew().cuda()
    with torch.no_grad():
        y = new(x)
        r = Pool().double()(x.double())
    assert not next(iter(new._programs.values())).unsupported
    assert ((y.double() - r).norm() / r.norm()).item() <= 1e-6
