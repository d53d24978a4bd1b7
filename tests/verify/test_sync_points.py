"""check_sync keys its findings and wgmma sites by program point (the path of op and region
indices from the kernel's body: a value; issue 13, the house rule), not by id(op): one op
object placed at two points is two findings, each with its own verdict, and two traces of one
kernel give the same keys."""

from __future__ import annotations

from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region
from argus.verify import check_sync
from argus.verify.model import Model
from tests.mutations import kernels as K
from tests.mutations.corpus import rewrite


def _gemm():
    return lower_only(K.make_gemm(None, stages=2, consumers=2))


def _checker(kernel) -> check_sync._Checker:
    """The walked checker of a kernel (what check_sync.obligations walks)."""
    found = []
    real = check_sync._Checker

    class Spy(real):
        def __init__(self, k):
            super().__init__(k)
            found.append(self)
    check_sync._Checker = Spy
    try:
        check_sync.obligations(Model(kernel))
    finally:
        check_sync._Checker = real
    (c,) = found
    return c


def test_one_release_object_at_two_points_is_two_findings():
    """The consume step's release placed twice (the same SlotRelease object): the first
    releases the slot, the second releases it again. By point, the first is proven and the
    second violated; keyed by id(op) (before) the two were one finding."""
    placed = []

    def twice(step: O.Consume) -> O.Consume:
        (release,) = [op for op in step.body.ops if isinstance(op, O.SlotRelease)]
        placed.append(release)
        return step.replace(body=Region(step.body.ops + (release,)))
    c = _checker(rewrite(_gemm(), O.Consume, twice))
    (release,) = placed
    arrive = {key[1]: f.status for key, f in c.findings.items() if key[0] == "sync.arrive" and
              f.loc == release.loc and "release of pipeline" in f.subject}
    first, second = sorted(arrive)
    assert first[:-1] == second[:-1] and second[-1] == first[-1] + 1   # one body, next op
    assert arrive == {first: "proven", second: "violated"}, arrive


def test_two_traces_give_the_same_keys():
    a, b = _checker(_gemm()), _checker(_gemm())
    assert a.findings and list(a.findings) == list(b.findings)
    assert all(isinstance(x, (str, int, tuple)) for key in a.findings for x in key)
    assert set(a.sites) == set(b.sites) and a.sites
