"""GPU tier: ag.store_shared into a 128-byte-swizzled view compiled for the H200
(tests/unit/test_store_shared_swizzled.py checks the logical result on the CPU; this checks the
generated addresses against what the hardware reads): a gathered [128, 64] bf16 tile stored
swizzled and copied out by a TMA store (which un-swizzles) equals the gather, and a wgmma in a
role multiplies an operand the CTA gathered straight into its swizzled layout (fence.proxy.async
and a CTA barrier before the roles)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def test_swizzled_store_round_trips_through_a_tma_store():
    from tests.unit.test_store_shared_swizzled import _shifted, gather_swizzled

    x = torch.randn(300, 80, device="cuda").to(torch.bfloat16)
    y = torch.full((300, 64), 7.0, device="cuda").to(torch.bfloat16)
    gather_swizzled.compile()(x, y)
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), _shifted(x.cpu(), 300))


def test_wgmma_reads_a_gathered_swizzled_operand():
    # gathered_mm (fddc09b renamed shifted_mm and made it gather X[m, k] itself, which the
    # verifier holds to the GEMM contract): A and W gathered into swizzled shared memory
    # before the roles, multiplied by the role's wgmma
    from tests.unit.test_store_shared_swizzled import gathered_mm

    x = torch.randn(200, 64, device="cuda").to(torch.bfloat16)
    w = torch.randn(64, 64, device="cuda").to(torch.bfloat16)
    y = torch.zeros(200, 64, device="cuda")
    gathered_mm.compile()(x, w, y)
    torch.cuda.synchronize()
    ref = x.cpu().double() @ w.cpu().double().T
    assert ((y.cpu().double() - ref).norm() / ref.norm()).item() < 1e-5
