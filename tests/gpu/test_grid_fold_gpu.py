"""GPU half of tests/unit/test_grid_fold.py: grids past 65535 CTAs along y or z run folded
onto x and every CTA gets the program ids an unfolded launch would give."""
import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.unit.test_grid_fold import tall  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("rows, cols, bn", [(70000, 256, 128), (65535, 300, 128), (200000, 64, 32)])
def test_tall_grid_matches_torch(rows, cols, bn):
    x = torch.randn(rows, cols, device="cuda")
    y = torch.full_like(x, float("nan"))
    tall.compile(BN=bn)(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x + 1)


def test_compose_transpose_of_a_million_pixels():
    from argus.compose import launch

    x = torch.randn(4, 1 << 20, 16, device="cuda")
    y = torch.empty(4, 16, 1 << 20, device="cuda")
    launch.run(launch.transpose, (x, y))
    torch.cuda.synchronize()
    assert torch.equal(y, x.transpose(1, 2))
