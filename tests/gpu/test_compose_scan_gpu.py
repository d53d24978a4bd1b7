"""GPU tier for the compose scan template's schedules and the pooling tail paths: every kernel
compiled for sm_90a by NVRTC and run on the device, against torch in float64 (strict fp32 bound).
The speed of the schedules is scripts/gpu_scan_bench.py's job, not a test's."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _reference(x, fn, reverse, exclusive):
    r = x.double().flip(1) if reverse else x.double()
    r = r.cumsum(1) if fn == "sum" else r.cumprod(1)
    if exclusive:
        r = torch.cat((torch.full_like(r[:, :1], 0.0 if fn == "sum" else 1.0), r[:, :-1]), 1)
    return r.flip(1) if reverse else r


@pytest.mark.parametrize("variant,rows,bn", [("lanes", 8, 32), ("lanes", 256, 4),
                                             ("in_thread", 16, 16), ("in_thread", 32, 8)])
@pytest.mark.parametrize("segments", [1, 0, 5])
@pytest.mark.parametrize("fn,reverse,exclusive", [("sum", False, False), ("sum", True, True),
                                                  ("prod", False, True)])
def test_scan_rows_schedules_on_the_gpu(variant, rows, bn, segments, fn, reverse, exclusive):
    from argus.compose.scan import ScanSchedule, scan_rows

    torch.manual_seed(0)
    shape = (1000, 3001)                  # partial CTAs, blocks and segments
    x = torch.rand(shape, device="cuda") if fn == "sum" else \
        1.0 + 1e-4 * torch.randn(shape, device="cuda")
    y = torch.full_like(x, float("nan"))
    ran = scan_rows(x, y, fn, reverse, exclusive, ScanSchedule(variant, rows, bn, segments))
    torch.cuda.synchronize()
    r = _reference(x, fn, reverse, exclusive)
    err = ((y.double() - r).norm() / r.norm()).item()
    assert err <= 1e-5, (ran, err)


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
