"""verify/check_ordered.py: the ordered sections of a clean kernel are proven (turns, barriers,
pairs, skip), and seeded bugs are found: a wrong barrier thread count, mismatched barrier ids
between a section's wait and pass, a missing initial pass, a warpgroup skipping its section, a
pass without its wait, and a turn-taking consumer that consumes outside its section."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

import argus as ag
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.verify import check_ordered, solver
from argus.verify import obligation as OB
from argus.verify.model import Model


def _kernel(when=None):
    @ag.kernel
    def turns(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        with ag.role("w", warpgroups=2) as wg:
            for i in ag.range(X.shape[0]):
                if when is None:
                    with ag.ordered("s"):
                        ag.store(X, (i,), ag.full((1,), 1.0))
                else:
                    with ag.when(when(i, wg)):
                        with ag.ordered("s"):
                            ag.store(X, (i,), ag.full((1,), 1.0))
    return turns


def _findings(kernel) -> dict[str, list]:
    model = Model(kernel)
    obs, finds = check_ordered.obligations(model)
    finds = list(finds) + [OB.run(ob, solver.Stats(), 5000) for ob in obs]
    out: dict[str, list] = {}
    for f in finds:
        out.setdefault(f.status, []).append(f)
    return out


def _map(kernel, fn):
    def region(r):
        return Region(tuple(visit(op) for op in r.ops if fn(op) is not None))

    def visit(op):
        op = fn(op)
        updates = {f.name: region(getattr(op, f.name)) for f in op.spec_fields()
                   if isinstance(getattr(op, f.name), Region)}
        return dataclasses.replace(op, **updates) if updates else op
    return dataclasses.replace(kernel, body=region(kernel.body))


def test_clean_kernels_are_proven():
    for k in (lower_only(_kernel()), _kernel(lambda i, wg: i % 2 == wg).trace(),
              lower_only(gemm_kernel(), s=GemmSchedule(bm=64, bn=128, pingpong=True))):
        got = _findings(k)
        assert not got.get("violated") and not got.get("unknown"), got
        assert got.get("proven")


def test_a_warpgroup_skipping_its_section_is_found():
    got = _findings(_kernel(lambda i, wg: wg == 0).trace())
    assert [f.code for f in got["violated"]] == ["ordered.turns"]
    assert "skips its turn" in got["violated"][0].message


@pytest.mark.parametrize("bug,code", [
    ("threads", "ordered.barriers"),
    ("ids", "ordered.barriers"),
    ("initial", "ordered.barriers"),
    ("clash", "ordered.barriers"),
    ("no_wait", "ordered.pairs"),
])
def test_seeded_barrier_bugs_are_found(bug, code):
    k = lower_only(_kernel())

    def mutate(op):
        if bug == "threads" and isinstance(op, O.TurnWait):
            return op.replace(threads=128)
        if bug == "ids" and isinstance(op, O.TurnPass) and not op.initial:
            return op.replace(barriers=tuple(i + 1 for i in op.barriers))
        if bug == "initial" and isinstance(op, O.TurnPass) and op.initial:
            return None
        if bug == "clash" and isinstance(op, (O.TurnWait, O.TurnPass)):
            return op.replace(barriers=(1, 2))
        if bug == "no_wait" and isinstance(op, O.TurnWait):
            return None
        return op
    got = _findings(_map(k, mutate))
    assert code in {f.code for f in got.get("violated", [])}, got


def test_consuming_outside_the_section_while_skipping_is_found():
    k = lower_only(gemm_kernel(), s=GemmSchedule(bm=64, bn=128, pingpong=True))
    got = _findings(_map(k, lambda op: None if isinstance(op, (O.TurnWait, O.TurnPass))
                         else op))
    assert "ordered.skip" in {f.code for f in got.get("violated", [])}


def _nested(inner):
    """Ping-pong over an inner loop that an outer loop repeats: warpgroup i % 2 takes inner
    iteration i. The turns go round across the outer loop only when the inner trip count is a
    multiple of 2: with 3, warpgroup 0 runs 4 sections and warpgroup 1 only 2."""
    @ag.kernel
    def nested(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        with ag.role("w", warpgroups=2) as wg:
            for t in ag.range(2):
                for i in ag.range(inner(X)):
                    with ag.when(i % 2 == wg):
                        with ag.ordered("s"):
                            ag.store(X, (i,), ag.full((1,), 1.0))
    return nested


def test_turns_restarting_in_an_outer_loop_are_checked_across_it():
    odd = _nested(lambda X: X.shape[0])
    with pytest.raises(Exception, match="deadlock"):     # the claim is real: N = 3 hangs
        odd.interpret(torch.zeros(3))
    got = _findings(odd.trace())
    assert [f.code for f in got.get("violated", [])] == ["ordered.turns"], got
    assert "multiple of 2" in got["violated"][0].message
    got = _findings(_nested(lambda X: 4).trace())
    assert not got.get("violated") and not got.get("unknown"), got


def test_a_condition_on_unmodelled_values_is_not_proven():
    """The section runs when a float read at the warpgroup's own index is positive: the model
    knows the comparison only as a fresh variable, shared by both warpgroups, so 'every
    warpgroup alike' would be proven while warpgroup 1 never comes (the interpreter hangs)."""
    @ag.kernel
    def datadep(X: ag.Tensor[("N", ag.f32)]):
        ag.grid(1)
        with ag.role("w", warpgroups=2) as wg:
            for i in ag.range(X.shape[0]):
                with ag.when(ag.load_scalar(X, (wg,)) > 0.0):
                    with ag.ordered("s"):
                        ag.store(X, (i + 2,), ag.full((1,), 1.0))
    x = torch.zeros(4)
    x[0] = 1.0
    with pytest.raises(Exception, match="deadlock"):
        datadep.interpret(x)
    got = _findings(datadep.trace())
    assert not got.get("proven"), got
    assert [f.code for f in got["unknown"]] == ["ordered.turns"]
    assert "unmodelled" in got["unknown"][0].message


def test_a_second_site_of_one_section_name_is_found():
    """Two ping-pong loops of one name in a row (IR that ag.ordered would refuse to trace):
    each is proven alone, but with an odd trip count the second starts at warpgroup 0 while
    the turn is warpgroup 1's."""
    k = _kernel(lambda i, wg: i % 2 == wg).trace()

    def twice(op):
        if isinstance(op, O.RoleOp):
            loop = next(o for o in op.body.ops if isinstance(o, O.For))
            return dataclasses.replace(op, body=Region(op.body.ops + (loop,)))
        return op
    got = _findings(dataclasses.replace(k, body=Region(tuple(twice(op) for op in k.body.ops))))
    assert [f.code for f in got.get("violated", [])] == ["ordered.pairs"], got
    assert "opens again" in got["violated"][0].message


def _in_step_kernel():
    """Cooperative consumers (each warpgroup consumes every step) taking turns inside each
    consume step, as the staggered split fp8 promotion does with its column halves."""
    @ag.kernel
    def in_step(X: ag.Tensor[("N", 64, ag.f32)], Y: ag.Tensor[("N", 64, ag.f32)]):
        ag.grid(1)
        s = ag.smem((2, 64, 64), ag.f32)
        pipe = ag.pipeline(2, consumers=2)
        with ag.role("producer", warpgroups=1):
            for i in ag.range(4):
                with pipe.produce() as st:
                    ag.tma.load(s[st], X, (i * 64, 0))
        with ag.role("consumer", warpgroups=2) as wg:
            for i in ag.range(4):
                with pipe.consume():
                    with ag.ordered("c"):
                        ag.store(Y, (i * 64 + wg, 0), ag.full((1, 64), 1.0))
    return in_step


def test_a_section_inside_a_step_every_warpgroup_consumes_is_proven():
    got = _findings(_in_step_kernel().trace())
    assert not got.get("violated") and not got.get("unknown"), got
    assert "ordered.turns" in {f.code for f in got["proven"]}


def test_a_section_inside_a_step_of_a_skipped_pipeline_is_found():
    """The same section with a pipe.skip of that pipeline in the role (IR that ag.ordered and
    pipe.skip refuse to trace): a ping-pong warpgroup waiting for its turn while holding a
    slot can starve the turn holder."""
    k = _in_step_kernel().trace()
    pipe = next(op.pipe for op in k.walk() if isinstance(op, O.Consume))

    def skip(op):
        if isinstance(op, O.RoleOp) and op.name == "consumer":
            extra = O.PipeSkip(pipe, 1, loc=op.loc)
            return dataclasses.replace(op, body=Region(op.body.ops + (extra,)))
        return op
    got = _findings(dataclasses.replace(k, body=Region(tuple(skip(op) for op in k.body.ops))))
    pairs = [f for f in got.get("violated", []) if f.code == "ordered.pairs"]
    assert len(pairs) == 1 and "skips" in pairs[0].message, got
