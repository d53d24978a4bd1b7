"""GPU tier for programmatic dependent launch (issue 16): chains of kernels that wait for their
predecessor (ag.wait_prior_grids) and let their successor start early
(ag.allow_dependent_launch), launched back to back on one stream with
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION, give bit-exact results (every value an
exact float: a read before the predecessor's store landed shows as a wrong count), including a
kernel that loads a stable weight before its wait. Also prints the time of a chain of small
kernels with and without PDL (a print, not an assertion: the lead records it)."""

import pytest

torch = pytest.importorskip("torch")

import argus as ag  # noqa: E402
from tests.gpu import hopper_only  # noqa: E402
from tests.unit.test_pdl import consumer, producer  # noqa: E402

pytestmark = hopper_only()

BN = 1024


@ag.kernel
def step(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32], PDL: bool = False):
    """Y = X + 1; with PDL, waits for the kernel before it and lets the next one start once
    its loads are issued."""
    (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
    if PDL:
        ag.wait_prior_grids()
    x = ag.load(X, (pid * BN,), (BN,))
    if PDL:
        ag.allow_dependent_launch()
    ag.store(Y, (pid * BN,), x + 1.0)


def _chain(ck, a, b, launches: int) -> None:
    """a -> b -> a -> ...: `launches` kernels, each reading what the one before wrote."""
    for i in range(launches):
        ck(a, b) if i % 2 == 0 else ck(b, a)


@pytest.mark.parametrize("n", [BN * 132 * 4, 1 << 24, 1000])
def test_pdl_chain_is_bit_exact(n):
    ck = ag.compile(step, PDL=True)
    assert ck.source.pdl and "griddepcontrol.wait" in ck.binary.ptx
    g = torch.Generator().manual_seed(11)
    a = torch.randint(-1000, 1000, (n,), generator=g).float().cuda()
    b = torch.full((n,), float("nan"), device="cuda")
    start = a.clone()
    launches = 400                                   # even: the last one writes a
    _chain(ck, a, b, launches)
    torch.cuda.synchronize()
    assert torch.equal(a, start + launches), (a - start - launches).abs().max()
    assert torch.equal(b, start + launches - 1)


def test_producer_consumer_with_a_stable_weight_is_bit_exact():
    """producer: Y = 2 Z + 1 (waits, triggers after its load); consumer: Z = Y * W with W = 0.5
    loaded before its wait (stable): Z grows by exactly 0.5 a round."""
    cp, cc = ag.compile(producer), ag.compile(consumer)
    assert cp.source.pdl and cc.source.pdl
    n = 1 << 22
    g = torch.Generator().manual_seed(5)
    z = torch.randint(-4096, 4096, (n,), generator=g).float().cuda()
    w = torch.full((n,), 0.5, device="cuda")
    y = torch.full((n,), float("nan"), device="cuda")
    start, rounds = z.clone(), 300
    for _ in range(rounds):
        cp(z, y)
        cc(w, y, z)
    torch.cuda.synchronize()
    assert torch.equal(z, start + 0.5 * rounds), (z - start - 0.5 * rounds).abs().max()


def test_pdl_kernel_after_ordinary_work_is_correct():
    """A PDL kernel first in a stream, and right after torch's own kernels, waits for them:
    its wait returns once they completed (the attribute only relaxes PDL-aware predecessors)."""
    ck = ag.compile(step, PDL=True)
    n = 1 << 22
    for _ in range(20):
        a = torch.zeros(n, device="cuda")
        a.add_(3.0)                                   # torch's kernel, then ours at once
        b = torch.empty(n, device="cuda")
        ck(a, b)
        torch.cuda.synchronize()
        assert torch.equal(b, torch.full((n,), 4.0, device="cuda"))


def test_print_chain_timing_with_and_without_pdl():
    """Back-to-back small kernels (one wave): the per-kernel time with and without PDL."""
    n, launches = BN * 132, 2000
    for pdl in (False, True):
        ck = ag.compile(step, PDL=pdl)
        a = torch.zeros(n, device="cuda")
        b = torch.zeros(n, device="cuda")
        _chain(ck, a, b, 200)                          # build, plans, warm-up
        torch.cuda.synchronize()
        plans = (ck.plan_for(a, b), ck.plan_for(b, a))
        assert all(plans)
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.zero_()
        torch.cuda.synchronize()
        t0.record()
        for i in range(launches):
            plans[i % 2]()
        t1.record()
        torch.cuda.synchronize()
        us = t0.elapsed_time(t1) * 1e3 / launches
        print(f"\nPDL={pdl}: {us:.2f} us per kernel ({launches} back-to-back, N={n})")
        assert torch.equal(a, torch.full((n,), float(launches), device="cuda"))
