"""fill.identity and tiles that never straddle the tensor's end.

A row reduction whose blocks divide the row (8192 columns in blocks of 1024, KernelBench L1/99's
composed kernel) has no masked element: fill.identity proves every reduced element in bounds
(the loads' offset ranges, through the register ring of lower/prefetch.py, whose blocks loaded
past the end are never used) instead of refusing the 0 fill. Treating such tiles as unmasked by
divisibility alone was unsound: a loop that runs one whole block past the end, with a 0 fill
under a max, must still be refused (no other check catches it), and is, with the element,
iteration and thread that read the fill."""

from pathlib import Path

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only


def _row_sum_of_shifted_squares(n: int):
    @ag.kernel(threads=256)
    def shifted(X: ag.Tensor[64, n, ag.f32], OUT: ag.Tensor[64, 1, ag.f32], BN: int = 1024):
        (p,) = ag.grid(32)
        acc = ag.full((2, 1), 0.0)
        for b in ag.range(ag.cdiv(n, BN)):
            x = ag.load(X, (p * 2, b * BN), (2, BN))
            v = x + 1e-6
            acc = acc + (v * v).sum(axis=1)
        ag.store(OUT, (p * 2, 0), acc)
    return shifted


def _fill_findings(n: int, lower: bool = True):
    kernel = _row_sum_of_shifted_squares(n)
    report = verify.run(lower_only(kernel) if lower else kernel.trace())
    return [d for d in report.diagnostics if d.code == "fill.identity"]


def _iteration(d) -> int:
    (it,) = d.counterexample["iteration"].values()
    return it


@pytest.mark.parametrize("lower", [True, False], ids=["ring", "traced"])
def test_blocks_that_divide_the_row_have_no_masked_elements(lower):
    # lowered, the loads go through lower/prefetch.py's ring (blocks 8..10 are loaded past the
    # end and never reduced); traced, the loop loads its block directly
    assert _fill_findings(8192, lower) == []


def test_a_ring_deeper_than_the_loop_is_clean():
    # 2 blocks and a ring 3 deep: the ring's third first block is past the end, never reduced
    assert _fill_findings(2048) == []


def test_a_loop_one_block_past_the_end_is_refused():
    @ag.kernel(threads=256)
    def past(X: ag.Tensor[64, 8192, ag.f32], OUT: ag.Tensor[64, 1, ag.f32], BN: int = 1024):
        (p,) = ag.grid(32)
        acc = ag.full((2, 1), float("-inf"))
        for b in ag.range(ag.cdiv(8192, BN) + 1):       # one whole block past the end
            x = ag.load(X, (p * 2, b * BN), (2, BN))     # its zeros win a max of negatives
            acc = ag.maximum(acc, x.max(axis=1))
        ag.store(OUT, (p * 2, 0), acc)

    report = verify.run(lower_only(past))
    (d,) = [d for d in report.diagnostics if d.code == "fill.identity"]
    assert d.severity == "error"
    # the block past the end is iteration 8 (columns 8192..9215), read by a named thread
    assert _iteration(d) == 8 and d.counterexample["coordinates"]["dim1"] >= 8192
    assert "thread" in d.counterexample and d.counterexample["fill"] == 0.0


@pytest.mark.parametrize("n", [8000, 8192 + 512])
@pytest.mark.parametrize("lower", [True, False], ids=["ring", "traced"])
def test_a_partial_last_block_is_still_refused(n, lower):
    found = _fill_findings(n, lower)
    assert found and all(d.severity == "error" for d in found)
    assert "1e-12" in str(found[0])
    # the element named is a masked one: the last block's column past n
    col = found[0].counterexample["coordinates"]["dim1"]
    assert col >= n and _iteration(found[0]) == (n + 1023) // 1024 - 1


def _stale_block(exact: bool):
    """A block loaded past the end before the loop reaches the max in the first iteration."""
    @ag.kernel(threads=256)
    def stale(X: ag.Tensor[64, 4096, ag.f32], OUT: ag.Tensor[64, 1, ag.f32], BN: int = 1024):
        (p,) = ag.grid(32)
        acc = ag.full((2, 1), float("-inf"))
        prev = ag.load(X, (p * 2, 4096), (2, BN))        # wholly past the end: all zeros
        for b in ag.range(4):
            acc = ag.maximum(acc, prev.max(axis=1))
            x = ag.load(X, (p * 2, b * BN), (2, BN))
            prev = x if exact else ag.maximum(prev, x)
        ag.store(OUT, (p * 2, 0), acc)
    return stale


@pytest.mark.parametrize("exact", [True, False], ids=["one_behind", "accumulated"])
def test_a_block_past_the_end_carried_into_the_loop_is_refused(exact):
    # `prev` is one iteration behind: the model knows it exactly (the past-the-end block at
    # iteration 0), or, accumulated into itself, only as a summary: then the fill is refused
    # without the range argument
    report = verify.run(_stale_block(exact).trace())
    found = [d for d in report.diagnostics if d.code == "fill.identity"]
    assert found and all(d.severity == "error" for d in found)
    if exact:
        assert _iteration(found[0]) == 0


def test_a_block_replaced_under_a_condition_is_refused():
    # the model follows the assignment under the `when` as if it always ran; the zeros of the
    # block past the end reach the max whenever it does not, so no range argument applies
    @ag.kernel(threads=256)
    def maybe(X: ag.Tensor[64, 4096, ag.f32], OUT: ag.Tensor[64, 1, ag.f32], BN: int = 1024):
        (p,) = ag.grid(32)
        x = ag.load(X, (p * 2, 4096), (2, BN))         # wholly past the end: all zeros
        with ag.when(p > 100):                           # never true
            x = ag.load(X, (p * 2, 0), (2, BN))
        ag.store(OUT, (p * 2, 0), x.max(axis=1))

    report = verify.run(maybe.trace())
    found = [d for d in report.diagnostics if d.code == "fill.identity"]
    assert found and all(d.severity == "error" for d in found)


KB_TASK = Path(__file__).resolve().parents[3] / "shared" / "kernelbench" / "level1" / \
    "99_TripletMarginLoss.py"


@pytest.mark.skipif(not KB_TASK.exists(), reason="KernelBench tasks not found")
def test_kernelbench_l1_99_composed_kernels_verify_clean():
    # the composed solution's kernels at the task's row width (8192), few rows: its row sums
    # load with the default fill 0 in blocks that divide the row (the false alarm's source)
    import torch

    from argus.compose.runtime import Program

    class Triplet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.loss = torch.nn.TripletMarginLoss(margin=1.0)

        def forward(self, a, p, n):
            return self.loss(a, p, n)
    torch.manual_seed(0)
    program = Program.build(Triplet(), [torch.rand(64, 8192) for _ in range(3)])
    fns = [fn for launch in program.launches.values()
           for fn in [launch.fn] + ([launch.facts["combine"][0]] if "combine" in launch.facts
                                    else [])]
    assert fns
    for fn in fns:
        report = verify.run(lower_only(fn))
        assert not report.errors, "\n".join(str(d) for d in report.errors)
