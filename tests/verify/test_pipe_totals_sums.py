"""pipe.totals over sequential loops: a producer that walks main units and then tail units runs
the sum of the two loops' steps (trips x steps per iteration, added), not their product. The
consumer's total is compared with that sum as a term over the shapes, so a consumer that runs
the product (or one loop's steps only) is refused with shapes that tell them apart, and one
that runs the sum (in one loop, or nested the same way) is proven."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only


def _walks(producer: str, consumer: str):
    """Producer and consumer walks over a = cdiv(M, 64) and b = cdiv(N, 64) steps:
    'a+b' (two loops in sequence), 'a+2b' (the second loop has two steps per iteration),
    'a*b' (nested loops), 'one:a+b' / 'one:a*b' / 'one:a+2b' (one loop of that many steps),
    'a' (the first loop only); 'sa+sb' / 'one:s(a+b)': the persistent forms, each CTA of 2
    taking every other step from its program id (trip counts that depend on the CTA)."""

    def walk(form: str, a, b, pid, step):
        if form == "sa+sb":
            for _ in ag.range(pid, a, 2):
                step()
            for _ in ag.range(pid, b, 2):
                step()
            return
        if form == "one:s(a+b)":
            for _ in ag.range(pid, a + b, 2):
                step()
            return
        if form.startswith("one:"):
            n = {"a+b": a + b, "a*b": a * b, "a+2b": a + 2 * b}[form[4:]]
            for _ in ag.range(n):
                step()
            return
        if form == "a*b":
            for _ in ag.range(a):
                for _ in ag.range(b):
                    step()
            return
        for _ in ag.range(a):
            step()
        if form == "a":
            return
        for _ in ag.range(b):
            step()
            if form == "a+2b":
                step()

    @ag.kernel
    def walks(A: ag.Tensor["M", "N", ag.bf16], C: ag.Tensor[64, 64, ag.f32]):
        (pid,) = ag.grid(2)
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2)
        a, b = ag.cdiv(A.shape[0], 64), ag.cdiv(A.shape[1], 64)
        with ag.role("producer", warpgroups=1):
            def produce():
                with pipe.produce() as st:
                    ag.tma.load(sA[st], A, (0, 0))
            walk(producer, a, b, pid, produce)
        with ag.role("consumer", warpgroups=1):
            acc = ag.zeros((64, 64), ag.f32)

            def consume():
                with pipe.consume() as st:
                    ag.wgmma(sA[st], sA[st], acc)
            walk(consumer, a, b, pid, consume)
            ag.store(C, (0, 0), acc)
    return walks


def _totals(producer: str, consumer: str, lowered: bool = False):
    kernel = _walks(producer, consumer)
    report = verify.run(lower_only(kernel) if lowered else kernel.trace(), include_proven=True)
    return [d for d in report.diagnostics if d.code == "pipe.totals"]


@pytest.mark.parametrize("producer,consumer", [
    ("a+b", "one:a+b"), ("a+b", "a+b"), ("a*b", "one:a*b"), ("a+2b", "one:a+2b"),
    ("one:a+b", "a+b"), ("sa+sb", "sa+sb")])
def test_equal_totals_are_proven(producer, consumer):
    found = _totals(producer, consumer)
    assert found and all(d.severity == "note" for d in found), [str(d) for d in found]


@pytest.mark.parametrize("producer,consumer", [
    ("a+b", "one:a*b"), ("a+b", "a*b"), ("a*b", "one:a+b"), ("a+b", "a"),
    ("a+2b", "one:a+b"), ("a+b", "a+2b"), ("sa+sb", "one:s(a+b)")])
def test_a_sum_against_a_product_or_a_part_is_refused(producer, consumer):
    errors = [d for d in _totals(producer, consumer) if d.severity == "error"]
    assert errors, [str(d) for d in _totals(producer, consumer)]
    _check_witness(errors[0].counterexample, producer, consumer)


def _check_witness(wit: dict, producer: str, consumer: str) -> None:
    """The witness's shapes (and CTA) really give different totals, recomputed here."""
    m, n = wit["shapes"]["M"], wit["shapes"]["N"]
    a, b = -(-m // 64), -(-n // 64)
    p = wit.get("cta", 0)
    p = p[0] if isinstance(p, tuple) else p

    def strided(x):   # the steps p, p + 2, ... below x
        return len(range(p, x, 2))
    count = {"a+b": a + b, "one:a+b": a + b, "a*b": a * b, "one:a*b": a * b, "a": a,
             "a+2b": a + 2 * b, "one:a+2b": a + 2 * b, "sa+sb": strided(a) + strided(b),
             "one:s(a+b)": strided(a + b)}
    assert wit["producer_steps"] == count[producer] != wit["consumer_steps"] == count[consumer]


@pytest.mark.parametrize("producer,consumer,equal", [
    ("a+2b", "one:a+2b", True), ("a+b", "one:a*b", False)])
def test_lowered_totals(producer, consumer, equal):
    # after lowering (the pipeline protocol's counters, parities and elected producer)
    found = _totals(producer, consumer, lowered=True)
    errors = [d for d in found if d.severity == "error"]
    if equal:
        assert found and not errors, [str(d) for d in found]
    else:
        assert errors
        _check_witness(errors[0].counterexample, producer, consumer)
