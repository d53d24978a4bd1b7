"""GPU tier: tests that run on a Hopper GPU (`pytest -m gpu`) and skip everywhere else."""

import pytest


def hopper_only() -> list:
    """A GPU-tier module's marks: `gpu`, and a skip without a Hopper (sm_90a) GPU."""
    torch = pytest.importorskip("torch")
    return [pytest.mark.gpu,
            pytest.mark.skipif(not torch.cuda.is_available()
                               or torch.cuda.get_device_capability()[0] < 9,
                               reason="needs a Hopper (sm_90a) GPU")]
