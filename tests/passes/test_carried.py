"""lower/carried.py: a promotion's carried update (`assign` of `acc + partial * scale`) moves
from the end of its region to right after the value is made, where nothing in between reads
or writes the variable; the serial N-split fp8 loop needs it to promote half 0 before half 1's
wgmma without a one-trip loop around the promotion."""

import dataclasses

import argus as ag
from argus import analysis
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Value
from argus.kernels.gemm_fp8 import Fp8GemmSchedule, gemm_fp8_blockscaled_kernel
from argus.lower import carried

SPLIT = Fp8GemmSchedule(bn=256, stages=3, promote=True, n_split=2, epilogue="tma")


def _split_step(kernel) -> O.Consume:
    return next(op for op in kernel.walk() if isinstance(op, O.Consume)
                and sum(isinstance(o, O.Wgmma) for o in op.body.ops) == 2)


def test_split_step_promotes_half_0_before_half_1_is_issued():
    step = _split_step(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=SPLIT))
    ops = step.body.ops
    wgmma = [i for i, op in enumerate(ops) if isinstance(op, O.Wgmma)]
    assigns = [i for i, op in enumerate(ops) if isinstance(op, O.Assign)]
    waits = [i for i, op in enumerate(ops) if isinstance(op, O.WgmmaWait)]
    # half 0's sum is updated after the wait for its group and before half 1's wgmma
    assert any(wgmma[0] < w < a < wgmma[1] for w in waits for a in assigns), \
        [op.NAME for op in ops]
    # no one-trip loop is left in the step
    assert not any(isinstance(op, O.For) for op in ops)


def _traced_step():
    kernel = analysis.infer_layouts(gemm_fp8_blockscaled_kernel(ag.bf16).trace(s=SPLIT))
    return kernel, _split_step(kernel)


def test_pass_moves_the_promotion_of_a_partial():
    _, step = _traced_step()
    before = [op.NAME for op in step.body.ops]
    after = carried._region(step.body).ops
    moved = [i for i, op in enumerate(after) if isinstance(op, O.Assign)]
    first_wgmma = [i for i, op in enumerate(after) if isinstance(op, O.Wgmma)]
    assert before.index("assign") > first_wgmma[1]      # the DSL put both at the end
    assert first_wgmma[0] < moved[0] < first_wgmma[1]    # the pass moved half 0's up
    assert sorted(op.NAME for op in after) == sorted(before)


def test_pass_keeps_an_assign_whose_variable_is_read_in_between():
    """A reader of the variable after the new value is made must see the old value: the
    assign stays where it was."""
    _, step = _traced_step()
    ops = list(step.body.ops)
    first = next(op for op in ops if isinstance(op, O.Assign))
    at = next(i for i, op in enumerate(ops) if first.src in op.results())
    reader = O.Elementwise(Value(10 ** 6, first.dst.type), "add", (first.dst, first.dst),
                           loc=first.loc)
    ops.insert(at + 1, reader)
    region = dataclasses.replace(step.body, ops=tuple(ops))
    after = carried._region(region).ops
    assert after.index(first) > after.index(reader)
