"""A reduction over the tile's rows (a middle axis) whose kept rows are not whole 16-byte
chunks folds f rows into one (compose/tile.py `fold_rows`): L1/48, mean over dim 1 of
128 x 4096 x 4095, read three rows in four 4 bytes at a time (the codegen's vector loads need a
16-byte aligned row start), and ran at 0.76x eager where the 4096-column case ran at 0.97x.
Folded, it reads [128, 1024, 16380] (every row 16-byte aligned) into [128, 1, 16380]
partials, and a second kernel sums the four 4095-column slices. Checked in the interpreter
against torch, with the facts that say what was folded."""

import pytest
import torch
import torch.nn as nn

from argus.compose import runtime, tile


class Reduce(nn.Module):
    def __init__(self, fn: str, dim: int):
        super().__init__()
        self.fn, self.dim = fn, dim

    def forward(self, a):
        if self.fn == "sum":
            return torch.sum(a, self.dim)
        if self.fn == "mean":
            return torch.mean(a, self.dim)
        if self.fn == "amax":
            return torch.amax(a, self.dim)
        if self.fn == "amin":
            return torch.amin(a, self.dim)
        return torch.prod(a, self.dim)


class ScaledRowsSum(nn.Module):
    """A leaf that broadcasts over the reduced rows ([C] against [B, R, C])."""

    def __init__(self, cols: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(cols))

    def forward(self, a):
        return (a * self.w).sum(dim=1)


def _run(model: nn.Module, x: torch.Tensor, schedule=None):
    new = type("New", (runtime.ComposedModel,), {
        "MODEL": type(model), "SCHEDULES": {"tile": schedule} if schedule else {}})
    args = (model.fn, model.dim) if isinstance(model, Reduce) else (x.shape[-1],)
    new = new(*args)
    new.load_state_dict(model.state_dict())
    with torch.no_grad():
        y = new(x)
    prog = next(iter(new._programs.values()))
    return y, [launch.facts for launch in prog.launches.values()]


@pytest.mark.parametrize("fn", ["sum", "mean", "amax", "amin", "prod"])
@pytest.mark.parametrize("shape, fold", [((3, 16, 5), 4), ((2, 12, 6), 2), ((16, 7), 4),
                                         ((2, 3, 8, 9), 4)])
def test_middle_axis_reduction_folds_rows(fn, shape, fold):
    torch.manual_seed(0)
    x = torch.randn(shape) if fn != "prod" else torch.rand(shape) + 0.5
    dim = len(shape) - 2
    model = Reduce(fn, dim)
    y, facts = _run(model, x)
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    folded = [f for f in facts if "fold" in f]
    assert len(folded) == 1 and folded[0]["fold"] == (fold, shape[-1]), facts
    # the first pass reads rows of f * C elements, whole 16-byte chunks
    (view,) = folded[0]["leaf_views"]
    assert view[-1] == fold * shape[-1] and view[-1] * 4 % 16 == 0, view
    assert view[-2] == shape[-2] // fold


@pytest.mark.parametrize("shape", [(3, 8, 8), (3, 6, 5), (3, 4, 5)])
def test_no_fold_where_rows_are_aligned_or_do_not_divide(shape):
    """C a multiple of 4 floats: nothing to gain; R not a multiple of f (6 rows of 5), or
    fewer than two folded rows (4 rows of 5): not folded, still correct."""
    x = torch.randn(shape)
    model = Reduce("sum", 1)
    y, facts = _run(model, x)
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    assert not any("fold" in f for f in facts), facts


def test_no_fold_when_a_leaf_broadcasts_over_the_rows():
    torch.manual_seed(0)
    model = ScaledRowsSum(5)
    x = torch.randn(3, 16, 5)
    y, facts = _run(model, x)
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    assert not any("fold" in f for f in facts), facts


def test_fold_gives_way_to_a_split_reduction():
    """One output row of 5 columns over 4096 rows: too few CTAs either way, so the reduction
    is split over CTAs (split-R, its own second pass) and not folded as well."""
    x = torch.randn(1, 4096, 5)
    model = Reduce("sum", 1)
    y, facts = _run(model, x)
    torch.testing.assert_close(y, model(x), rtol=1e-4, atol=1e-4)
    assert any(f["split"] > 1 for f in facts) and not any("fold" in f for f in facts), facts


def test_fold_is_a_schedule_choice():
    x = torch.randn(3, 16, 5)
    model = Reduce("sum", 1)
    y, facts = _run(model, x, tile.TileSchedule(rows=2, bn=8, fold=False))
    torch.testing.assert_close(y, model(x), rtol=1e-5, atol=1e-5)
    assert not any("fold" in f for f in facts), facts


def test_l1_48_shape_is_folded_into_16_byte_rows():
    """The task's own sizes on meta tensors (nothing runs): the first pass reads
    [128, 1024, 16380] into [3, 128, 1, 16380] (three slices of the loop), the fold pass
    [3, 128, 4, 4095] into the output."""
    prog = runtime.Program.build(Reduce("mean", 1), [torch.empty(128, 4096, 4095,
                                                                 device="meta")])
    facts = [launch.facts for launch in prog.launches.values()]
    folded = [f for f in facts if "fold" in f]
    assert len(folded) == 1
    assert folded[0]["leaf_views"] == [(128, 1024, 16380)]
    # the loop of 512 blocks split in 3 (LONG_LOOP_CTAS: 6144 CTAs, not 2048)
    assert folded[0]["out_view"] == (3, 128, 1, 16380)
    _, cfacts = folded[0]["combine"]
    assert cfacts["leaf_views"] == [(3, 128, 4, 4095)] and cfacts["out_view"] == (1, 128, 1, 4095)


@pytest.mark.parametrize("shape, folds, split", [
    ((16, 512, 4095), True, 2),     # 256 CTAs folded (64 unfolded); the loop split in two
    ((2, 4096, 4095), True, 17),    # 32 CTAs folded, short of a wave: split-R on top
    ((1, 4096, 5), False, 4),       # one folded CTA, 4 split unfolded: unfolded
    ((128, 4096, 4096), False, 9),  # L1/47-like, aligned: 512 CTAs of 2048 blocks, split 9
])
def test_fold_and_split_choices(shape, folds, split):
    """Fold where the folded kernel has at least the CTAs the unfolded one would get; split
    the loop where the grid is short of a wave (split-R) or the loop is long
    (LONG_LOOP_CTAS); one second pass either way (the fold pass combines the slices too)."""
    prog = runtime.Program.build(Reduce("sum", 1), [torch.empty(shape, device="meta")])
    (facts,) = [launch.facts for launch in prog.launches.values()]
    assert ("fold" in facts) == folds and facts["split"] == split, facts
    assert facts["ctas"] >= tile.MIN_CTAS or shape[0] * shape[-1] < 64
    _, cfacts = facts["combine"]
    assert cfacts["split"] == 1 and "fold" not in cfacts and "combine" not in cfacts


@pytest.mark.parametrize("fn", ["sum", "amax", "prod"])
@pytest.mark.parametrize("ctas", [0, 4096])
def test_long_loop_split_with_fold_in_one_second_pass(fn, ctas):
    """A folded reduction whose loop is split (the schedule's ctas: a target the 132 folded
    CTAs of 66 x 512 x 21 are short of) sums the slices and the fold in one pass, against
    torch."""
    torch.manual_seed(1)
    x = torch.rand(66, 512, 21) + 0.5
    model = Reduce(fn, 1)
    sched = tile.TileSchedule(rows=2, bn=64, ctas=ctas)
    y, facts = _run(model, x, sched)
    torch.testing.assert_close(y, model(x), rtol=2e-5, atol=1e-5)
    (main,) = [f for f in facts if "combine" in f]
    assert main["fold"] == (4, 21) and (main["split"] > 1) == bool(ctas), main


class _Sum(nn.Module):
    def forward(self, a):
        return a.sum(1)


@pytest.mark.parametrize("dtype, cols, how", [(torch.bfloat16, 64, "split"),
                                              (torch.bfloat16, 21, "fold"),
                                              (torch.float16, 21, "fold"),
                                              (torch.float16, 64, "split")])
def test_half_precision_partials_are_fp32(dtype, cols, how):
    """A split or folded bf16 / fp16 sum keeps its partials in fp32 and rounds once in the
    second pass, as torch does (before: the first pass declared bf16 partials that the runtime
    allocated as fp32, a LaunchError, which the long-loop split made reachable)."""
    torch.manual_seed(2)
    x = (torch.randn(66, 512, cols) * 4).to(dtype)
    new = type("New", (runtime.ComposedModel,), {
        "MODEL": _Sum, "SCHEDULES": {"tile": tile.TileSchedule(2, 64, 256, ctas=4096)}})()
    with torch.no_grad():
        y = new(x)
    (facts,) = [launch.facts for launch in next(iter(new._programs.values())).launches.values()]
    assert (facts["split"] > 1) if how == "split" else ("fold" in facts), facts
    assert facts["partial_dtype"] == torch.float32
    ref = x.sum(1)
    assert y.dtype == ref.dtype
    torch.testing.assert_close(y.float(), ref.float(), rtol=0, atol=0)
