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


@pytest.mark.parametrize("splits", [1, 4])
def test_moe_decode_layer_with_pdl_is_bit_exact_and_timed(splits):
    """The MoE decode experts (Qwen3-30B-A3B's shape at one token: H 2048, I 768, E 128,
    k 8) with the decode GEMMs' PDL flag (MoeSchedule.pdl) on give the same bits as with it off,
    call after call; prints the time of one call both ways (CUDA events, 200 calls)."""

    from argus.kernels.moe import decode_schedule
    from argus.ops import moe_module as M
    T, H, I, E, k = 1, 2048, 768, 128, 8
    g = torch.Generator().manual_seed(2)
    w13 = (torch.randn(E, 2 * I, H, generator=g) / H ** 0.5).bfloat16().cuda()
    w2 = (torch.randn(E, H, I, generator=g) / I ** 0.5).bfloat16().cuda()
    x = torch.randn(T, H, generator=g).bfloat16().cuda()
    ids = torch.randperm(E, generator=g)[:k].reshape(T, k).cuda()
    weights = torch.rand(T, k, generator=g).cuda()
    outs = {}
    for pdl in (False, True):
        layer = M.Layer(T, H, I, E, k, decode_schedule(8, split_k=splits, pdl=pdl),
                        decode_schedule(8, stages=15, pdl=pdl))
        first = M.experts(x, w13, w2, ids, weights, layer)
        torch.cuda.synchronize()
        t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0.record()
        for _ in range(200):
            out = M.experts(x, w13, w2, ids, weights, layer)
        t1.record()
        torch.cuda.synchronize()
        assert torch.equal(out, first), "a later call differs from the first"
        outs[pdl] = first
        print(f"\nMoE decode experts T=1 split_k={splits} PDL={pdl}: "
              f"{t0.elapsed_time(t1) * 1e3 / 200:.2f} us per call (host launch included)")
    assert torch.equal(outs[True], outs[False])
