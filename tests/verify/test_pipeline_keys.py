"""check_pipeline keys by stable values (issue 13, the house rule), not by object identity: the
protocol's step counters are named by the steps' program points (Site.seq), the elected steps
by their stage value, the consumer roles by their warpgroup index. So one kernel poses the same
queries in every run, and a step's election is that step's own."""

from __future__ import annotations

from argus.compiler import lower_only
from argus.ir import ops as O
from argus.verify import check_pipeline
from argus.verify.model import Model
from tests.mutations import kernels as K


def _pipe_queries(kernel) -> list[str]:
    """The pipeline obligations of a kernel as text (premises and claims), in order."""
    obs, _ = check_pipeline.obligations(Model(kernel))
    return [f"{ob.code} {ob.subject}\n" + "\n".join(map(str, ob.premises)) + "\n" +
            "\n".join(f"{n}: {c}" for n, c in ob.claims) for ob in obs]


def test_the_same_kernel_poses_the_same_queries_in_every_run():
    """Two traces of one kernel, both alive: the queries are the same text. With the counters
    named by id(step) (before), the protocol's P!/C!/T! and the cluster's Pq!/Rhere! names
    differed between the two runs."""
    for make in (lambda: K.make_gemm(None, stages=2, consumers=2),
                 lambda: K.make_cluster_gemm(None)):
        first, second = lower_only(make()), lower_only(make())
        a, b = _pipe_queries(first), _pipe_queries(second)
        assert any("P!" in q or "Pq!" in q for q in a)   # the protocol's counters are named
        assert a == b


def test_an_elected_step_is_counted_by_its_stage_value():
    """The elected steps are keyed by the step's stage value: the producer's produce step is
    in its one-thread elect, the consumers' consume steps are in none."""
    kernel = lower_only(K.make_gemm(None, stages=2, consumers=2))
    elected = check_pipeline.elected_steps(kernel)
    produce = [op for op in kernel.walk() if isinstance(op, O.Produce)]
    consume = [op for op in kernel.walk() if isinstance(op, O.Consume)]
    assert produce and consume
    assert all(elected.get(op.stage.id) == 1 for op in produce)
    assert not any(op.stage.id in elected for op in consume)
