"""argus/compose/precision.py: the per-convolution tf32-or-split choice of the relaxed track.

The rule is a self-check by emulation (the chain in float64, one convolution's tf32 error
magnified TF32_GAIN times, HEAVY_GAIN on the heavy draws drawn again up to the judge's output
size, KernelBench's relaxed rule on the solver's own draws), so the
tests build synthetic chains whose verdict is known from how their ops treat an absolute
error, check the emulation against an independent tf32 convolution, and the rule's ratio
against torch.allclose. The level-2 tasks (13 that fail the relaxed track as tf32 on the
judge's large-magnitude set, and passing ones) are checked when ../shared/kernelbench is there.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from argus.compose import precision as P
from argus.compose.conv import ConvRun


def _tf32_bits(t: torch.Tensor) -> torch.Tensor:
    # independent of argus.ops.conv.round_to_tf32: round half away from zero on the
    # magnitude's bits, through integer arithmetic in int64
    bits = t.float().view(torch.int32).to(torch.int64)
    sign = bits & (1 << 31)
    mag = bits & 0x7FFFFFFF
    mag = ((mag + (1 << 12)) >> 13) << 13
    return (sign | mag).to(torch.int32).view(torch.float32)


def _task(model_cls, shape, init=()):
    return types.SimpleNamespace(Model=model_cls, get_init_inputs=lambda: list(init),
                                 get_inputs=lambda: [torch.rand(shape)])


class _Chain(nn.Module):
    def __init__(self, after, channels=16, out=32, k=3):
        super().__init__()
        self.conv = nn.Conv2d(channels, out, k)
        self.after = after
        self.norm = nn.GroupNorm(4, out)        # a submodule: float64 with the model

    def forward(self, x):
        if self.after is None:
            return torch.tanh(self.norm(self.conv(x)))
        return self.after(self.conv(x))


def _choice(after, shape=(4, 16, 24, 24)):
    (c,) = P.choose_conv_precisions(_task(lambda: _Chain(after), shape))
    return c


def test_relaxed_ratio_is_allclose():
    g = torch.Generator().manual_seed(0)
    for scale in (1e-3, 1.0, 1e3):
        r = torch.randn(500, generator=g, dtype=torch.float64) * scale
        rms = float(r.square().mean().sqrt())
        for size in (1e-4, 3e-3, 1e-2, 3e-2):
            y = r + torch.randn(500, generator=g, dtype=torch.float64) * size * max(1, rms)
            ok = torch.allclose(y, r, rtol=1e-2, atol=1e-2 * max(1.0, rms))
            assert (P.relaxed_ratio(y, r) <= 1) == ok, (scale, size)
    r = torch.tensor([1.0, float("inf"), 2.0], dtype=torch.float64)
    assert P.relaxed_ratio(r.clone(), r) == 0.0
    assert P.relaxed_ratio(torch.tensor([1.0, 3.0, 2.0]), r) == math.inf
    assert P.relaxed_ratio(torch.tensor([1.0, float("inf"), float("nan")]), r) == math.inf


def test_emulation_is_the_tf32_convolution():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 8, 10, 10, generator=g).double()
    w = torch.randn(12, 8, 3, 3, generator=g).double()
    b = torch.randn(12, generator=g).double()
    want = F.conv2d(_tf32_bits(x).double(), _tf32_bits(w).double(), b, padding=1)
    exact = F.conv2d(x, w, b, padding=1)
    with P._Emulate(frozenset({0}), gain=1.0) as mode:
        got = F.conv2d(x, w, b, padding=1)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    with P._Emulate(frozenset({0}), gain=3.0):
        got3 = F.conv2d(x, w, b, padding=1)
    torch.testing.assert_close(got3 - exact, 3 * (want - exact), rtol=0, atol=1e-11)
    assert mode.seen == [(12, 8, 3, 3)] and mode.outputs == exact.numel()
    assert (want - exact).abs().max() > 0        # tf32 does change the result
    with P._Emulate(frozenset({1})):              # the second call only
        same = F.conv2d(x, w, b, padding=1)
        other = F.conv_transpose2d(x, w.transpose(0, 1).contiguous())
    assert torch.equal(same, exact)
    assert not torch.equal(other, F.conv_transpose2d(x, w.transpose(0, 1).contiguous()))


def test_homogeneous_chain_keeps_tf32():
    c = _choice(lambda y: torch.relu(y) * 2.0 + 0.1)
    assert c.precision == "tf32" and c.ratio <= 1, c
    # (the heavy draw's name tells how often it was drawn: "heavy x2")
    assert {k.split(" ")[0] for k, _ in c.draws} >= {"task", "normal", "heavy", "large"}


@pytest.mark.parametrize("after", [torch.tanh, lambda y: torch.softmax(y, dim=1),
                                   lambda y: torch.sigmoid(y) + 0.5,
                                   lambda y: F.gelu(torch.clamp(y, max=0.0))],
                         ids=["tanh", "softmax", "sigmoid", "gelu-of-negative"])
def test_bounded_op_after_the_conv_takes_the_split(after):
    c = _choice(after)
    assert c.precision == "split", c
    assert c.draw.startswith("large") and c.ratio > 1
    # not an op table: the same chain passes on unit-scale draws
    assert max(q for k, q in c.draws if k == "normal") <= 1


def test_scale_before_the_bounded_op_decides_not_the_op():
    # tanh of the conv scaled down by 1e-4 is nearly linear: the absolute error shrinks with
    # the values, so tf32 passes; the same tanh on the raw conv fails (above)
    c = _choice(lambda y: torch.tanh(y * 1e-4))
    assert c.precision == "tf32", c


def test_norm_before_the_bounded_op_keeps_tf32():
    c = _choice(None)           # _Chain without `after`: tanh(GroupNorm(conv(x)))
    assert c.precision == "tf32", c


class _TwoConvs(nn.Module):
    def __init__(self):
        super().__init__()
        self.first = nn.Conv2d(8, 16, 3, padding=1)
        self.second = nn.Conv2d(16, 16, 3, padding=1)

    def forward(self, x):
        # the first conv feeds a tanh (amplifies); the second sees tanh's bounded output and
        # is followed by a ReLU (does not)
        return torch.relu(self.second(torch.tanh(self.first(x))))


def test_per_convolution_choice_and_schedules():
    task = _task(_TwoConvs, (2, 8, 20, 20))
    first, second = P.choose_conv_precisions(task)
    assert (first.index, first.weight, first.precision) == (0, "first.weight", "split")
    assert (second.index, second.weight, second.precision) == (1, "second.weight", "tf32")

    from argus.compose.runtime import Program

    torch.manual_seed(0)
    prog = Program.build(_TwoConvs(), [torch.rand(2, 8, 20, 20)],
                         {"conv": ConvRun(precision="tf32")})
    schedules, choices = P.conv_schedules(prog.plan, task, prog.schedules)
    assert schedules["conv0"] == ConvRun() and "conv1" not in schedules
    assert [c.precision for c in choices] == ["split", "tf32"]
    prog.schedules = schedules
    runs = list(prog.conv_runs().values())
    assert runs == [ConvRun(), ConvRun(precision="tf32")]
    # nothing checked when tf32 is not asked for
    assert P.conv_schedules(prog.plan, task, {}) == ({}, ())


class _PoolOfTanh(nn.Module):
    """A max-pool of tanh(conv): at inputs x1e3 almost every window holds an element far up
    tanh's positive side (exactly 1.0 in float64: no error at all); the tf32 error reaches
    the output only in the rare windows whose elements all lie below it, and fails there
    (L2/82 in miniature: 3x3 windows instead of 4x4, so that the rare ones are 1 in 1e3)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 4, 3)
        self.pool = nn.MaxPool2d(3)

    def forward(self, x):
        return self.pool(torch.tanh(self.conv(x)))


def _pool_of_tanh(batch=64):
    return _task(_PoolOfTanh, (batch, 2, 24, 24))


def test_rare_failure_is_found_by_drawing_again():
    (c,) = P.choose_conv_precisions(_pool_of_tanh())
    assert c.precision == "split" and c.ratio > 1, c
    grown = [(k, q) for k, q in c.draws if " x" in k and not k.startswith("heavy")]
    # the draw that failed was drawn again, at most as many times as the judge's output
    # (batch 64) holds the check's (batch 2)
    assert grown and max(q for _, q in grown) == c.ratio, c.draws
    assert all(1 < int(k.rsplit(" x", 1)[1]) <= 32 for k, _ in grown), c.draws
    assert "x" in c.draw


def test_rare_failure_is_missed_without_drawing_again(monkeypatch):
    # the same chain, the check's first sample alone: every draw stays within the allowance
    # (why the rule draws again: the first sample meets too few of the windows that fail)
    monkeypatch.setattr(P, "RARE_MIN", 0)
    (c,) = P.choose_conv_precisions(_pool_of_tanh())
    assert c.precision == "tf32" and c.ratio <= 1, c
    # (the heavy draw is drawn again by its own rule, up to the judge's size)
    assert not any(" x" in k for k, _ in c.draws if not k.startswith("heavy")), c.draws


def test_no_drawing_again_past_the_judges_size():
    # the task's own batch is the check's: the judge meets no more windows than the check
    (c,) = P.choose_conv_precisions(_pool_of_tanh(batch=2))
    assert not any(" x" in k for k, _ in c.draws), c.draws


def test_no_drawing_again_when_the_error_reaches_every_element():
    c = _choice(lambda y: F.max_pool2d(torch.relu(y) * 2.0, 3))
    assert c.precision == "tf32", c
    assert not any(" x" in k for k, _ in c.draws if not k.startswith("heavy")), c.draws


def _heavy(c):
    (got,) = [(k, q) for k, q in c.draws if k.startswith("heavy")]
    return got


def _linear(batch):
    # the conv's output as is: its error, and so every draw's ratio, is linear in the gain
    return _task(lambda: _Chain(lambda y: y * 1.0), (batch, 16, 24, 24))


def test_margin_is_two_and_the_heavy_draw_is_checked_near_as_is(monkeypatch):
    gain, heavy_gain = P.TF32_GAIN, P.HEAVY_GAIN
    assert gain == 2.0 and 1.0 <= heavy_gain < 1.2     # the rule documented in precision.py
    (c,) = P.choose_conv_precisions(_linear(4))
    monkeypatch.setattr(P, "TF32_GAIN", 1.0)
    monkeypatch.setattr(P, "HEAVY_GAIN", 1.0)
    (plain,) = P.choose_conv_precisions(_linear(4))
    assert [k for k, _ in c.draws] == [k for k, _ in plain.draws]
    for (k, q), (_, q1) in zip(c.draws, plain.draws):
        # the same draws (the check's seeds), the error magnified per kind of draw
        want = heavy_gain if k.startswith("heavy") else gain
        assert q == pytest.approx(want * q1, rel=1e-9), (k, q, q1)


def test_heavy_draw_is_drawn_again_up_to_the_judges_size():
    # the judge's output holds 8 times the check's (batch 16 against 2): 8 draws, no more
    (c,) = P.choose_conv_precisions(_linear(16))
    assert _heavy(c)[0] == "heavy x8", c.draws
    # the other draws are not drawn again (every element errs: no rare class)
    assert all(" x" not in k for k, _ in c.draws if not k.startswith("heavy")), c.draws
    (same,) = P.choose_conv_precisions(_linear(2))
    assert _heavy(same)[0] == "heavy", same.draws       # the judge's size is the check's


def test_heavy_draws_stop_at_their_budget_and_the_shortfall_scales_the_ratio(monkeypatch):
    (alone,) = P.choose_conv_precisions(_linear(2))     # the first heavy draw alone
    monkeypatch.setattr(P, "HEAVY_MAX_MACS", 0.0)        # no redraw
    (c,) = P.choose_conv_precisions(_linear(64))
    kind, q = _heavy(c)
    # one draw of the judge's 32: its ratio scaled by sqrt(32), the growth of the largest
    # of n Student-t(2) values
    assert kind.startswith("heavy (") and kind.endswith("x5.7)"), kind
    assert q == pytest.approx(_heavy(alone)[1] * math.sqrt(32), rel=1e-9)
    monkeypatch.setattr(P, "HEAVY_MAX_MACS", 1.0)        # one redraw: spent > budget after it
    (c2,) = P.choose_conv_precisions(_linear(64))
    assert _heavy(c2)[0].startswith("heavy x2 (") and _heavy(c2)[0].endswith("x4)"), c2.draws


def test_heavy_draws_are_skipped_once_another_draw_fails():
    # tanh of the conv fails on the x1e3 draws: the split is decided, the heavy set is not
    # drawn again (its redraws would cost CPU and change nothing)
    c = _choice(torch.tanh, shape=(16, 16, 24, 24))
    assert c.precision == "split" and c.draw.startswith("large"), c
    assert _heavy(c)[0] == "heavy", c.draws


def test_inexact_elements_are_counted():
    r = torch.tensor([1.0, -2.0, float("inf"), 0.5], dtype=torch.float64)
    y = torch.tensor([1.0, -2.01, float("inf"), 0.5], dtype=torch.float64)
    q, inexact, n = P._ratio_and_inexact(y, r)
    assert (inexact, n) == (1, 3) and q == pytest.approx(P.relaxed_ratio(y, r))
    assert P._ratio_and_inexact(r.clone(), r)[:2] == (0.0, 0)


def test_mismatched_plan_falls_back_to_the_split_everywhere():
    task = _task(_TwoConvs, (2, 8, 20, 20))
    (c,) = P.choose_conv_precisions(task, [0, 1], [(16, 8, 3, 3)])
    assert c.index == -1 and c.precision == "split" and "do not match" in c.reason


def test_reduced_inputs_keep_channels_and_cut_batch_and_space():
    model = _Chain(torch.tanh)
    (shape,) = P.reduced_inputs(model, [(128, 16, 1024, 1024)])
    assert shape[:2] == (2, 16) and max(shape[2:]) < 1024
    # the sample reaches MIN_CONV_OUTPUTS: 2 x 32 channels x (extent - 2)^2
    assert 2 * 32 * (shape[2] - 2) * (shape[3] - 2) >= P.MIN_CONV_OUTPUTS
    flat = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4 * 30 * 30, 5))
    # the Linear fixes the spatial size: only the batch is cut
    assert P.reduced_inputs(flat, [(8, 3, 32, 32)]) == [(2, 3, 32, 32)]

    class FixedBatch(nn.Module):
        def forward(self, x):
            if x.shape[0] != 8:
                raise ValueError("batch 8 only")
            return x

    assert P.reduced_inputs(FixedBatch(), [(8, 3, 64, 64)]) is None


def test_solution_header_names_each_precision(tmp_path):
    from argus.compose.solution import compose_task

    src = (
        "import torch\nfrom torch import nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(8, 16, 3)\n\n"
        "    def forward(self, x):\n"
        "        return torch.tanh(self.conv(x))\n\n"
        "def get_inputs():\n    return [torch.rand(4, 8, 32, 32)]\n\n"
        "def get_init_inputs():\n    return []\n")
    path = tmp_path / "99_Conv2d_Tanh.py"
    path.write_text(src)
    comp = compose_task(path, {"conv": ConvRun(precision="tf32")})
    assert "'conv0': ConvRun(terms=6, schedule=None, precision=None)" in comp.source
    assert "conv0 (conv.weight): bf16 split (strict)" in comp.source
    # the header states the rule the check applies (gain and threshold of precision.py)
    assert f"error magnified {P.TF32_GAIN:g}x" in comp.source and "ratio <= 1)" in comp.source
    relu = tmp_path / "98_Conv2d_ReLU.py"
    relu.write_text(src.replace("torch.tanh", "torch.relu"))
    comp = compose_task(relu, {"conv": ConvRun(precision="tf32")})
    assert "'conv0'" not in comp.source and "conv0 (conv.weight): tf32" in comp.source


# --------------------------------------------------------------------------- level 2
REPO = Path(__file__).resolve().parents[2]
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))
# failed the relaxed track as one tf32 product on the H200 (2026-12-04 17:19, the judge's
# large-magnitude set; 21:05 for L2/19) and fail the self-check; L2/82 through the
# rare-element redraws (a 4x4 max-pool of tanh at inputs x1e3 fails on the rare windows
# wholly in tanh's transition); L2/19 and L2/52 through the heavy set's redraws (L2/19 failed
# the H200's heavy set at 1.51; the check's first heavy draw alone stays at 0.26-0.35)
FAILED_AS_TF32 = (5, 7, 16, 19, 21, 46, 47, 48, 49, 52, 82, 89, 91, 93)
# not among those: a ReLU + bias, a LayerNorm or InstanceNorm after the conv, a max-pool,
# hardtanh and a mean, a division and global pooling; the self-check keeps them tf32. L2/11,
# 15, 58 passed as tf32 on the H200 (12-04 21:05: worst element 0.88, 0.50, 0.37 of the
# allowance) and were split by the former 3x margin
PASSED_AS_TF32 = (1, 3, 8, 10, 11, 15, 17, 58)


def _level2(i):
    if not (KB_DIR / "level2").is_dir():
        pytest.skip(f"no KernelBench checkout at {KB_DIR}")
    from argus.compose.solution import load_module

    return load_module(next((KB_DIR / "level2").glob(f"{i}_*.py")))


@pytest.mark.slow
@pytest.mark.parametrize("i", FAILED_AS_TF32)
def test_level2_tf32_failures_take_the_split(i):
    choices = P.choose_conv_precisions(_level2(i))
    assert all(c.precision == "split" for c in choices), choices


@pytest.mark.slow
@pytest.mark.parametrize("i", PASSED_AS_TF32)
def test_level2_tf32_passes_stay_tf32(i):
    choices = P.choose_conv_precisions(_level2(i))
    assert all(c.precision == "tf32" for c in choices), choices


def test_program_runs_each_convolution_with_its_own_run(monkeypatch):
    from argus.compose import conv as conv_mod
    from argus.compose.runtime import Program

    seen = []

    def fake_run_conv(node, x, weight, bias, run=None):
        seen.append((tuple(weight.shape), run))
        return F.conv2d(x, weight, bias, padding=1)

    monkeypatch.setattr(conv_mod, "run_conv", fake_run_conv)
    torch.manual_seed(0)
    model = _TwoConvs()
    x = torch.rand(1, 8, 6, 6)
    prog = Program.build(model, [x], {"conv": ConvRun(precision="tf32"), "conv0": ConvRun()})
    with torch.no_grad():
        out = prog.run(model, [x])
        want = model(x)
    torch.testing.assert_close(out, want)
    assert seen == [((16, 8, 3, 3), ConvRun()), ((16, 16, 3, 3), ConvRun(precision="tf32"))]


def test_choice_is_cached_by_task_text(tmp_path, monkeypatch):
    from argus.compose.solution import load_module

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    path = tmp_path / "97_Conv2d_Tanh.py"
    path.write_text(
        "import torch\nfrom torch import nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.conv = nn.Conv2d(4, 8, 3)\n\n"
        "    def forward(self, x):\n"
        "        return torch.tanh(self.conv(x))\n\n"
        "def get_inputs():\n    return [torch.rand(2, 4, 16, 16)]\n\n"
        "def get_init_inputs():\n    return []\n")
    module = load_module(path)
    first = P._cached(module, lambda: P.choose_conv_precisions(module), [0])
    assert [c.precision for c in first] == ["split"]
    assert len(list((tmp_path / "cache" / "compose-precision").iterdir())) == 1

    def boom():
        raise AssertionError("computed again")

    assert P._cached(module, boom, [0]) == first            # read back, equal
    path.write_text(path.read_text().replace("torch.tanh", "torch.relu"))
    with pytest.raises(AssertionError, match="computed again"):   # new text: a new key
        P._cached(load_module(path), boom, [0])


@pytest.mark.parametrize("conv, x_shape, w_shape, kw", [
    (F.conv2d, (2, 6, 9, 11), (8, 3, 3, 2), dict(stride=2, groups=2)),
    (F.conv_transpose2d, (2, 6, 5, 7), (6, 4, 3, 2), dict(stride=2, groups=2)),
    (F.conv_transpose1d, (3, 4, 9), (4, 5, 3), dict(stride=3)),
    (F.conv_transpose3d, (1, 2, 3, 4, 5), (2, 3, 2, 3, 2), dict(stride=(2, 1, 3))),
])
def test_emulate_counts_the_multiply_adds(conv, x_shape, w_shape, kw):
    # independent count: with unpadded all-ones input and weight every product lands in the
    # output and adds 1 there, so the output's sum is the number of products
    x, w = torch.ones(x_shape, dtype=torch.float64), torch.ones(w_shape, dtype=torch.float64)
    want = int(conv(x, w, **kw).sum())
    mode = P._Emulate()
    with mode:
        conv(x, w, **kw)
    assert mode.macs == want
    # on the meta device (how reduced_inputs counts) alike
    meta = P._Emulate()
    with meta:
        conv(x.to("meta"), w.to("meta"), **kw)
    assert meta.macs == want


def test_draw_kinds_and_the_error_that_lists_them():
    x = torch.rand(64)
    gen = torch.Generator().manual_seed(0)
    for kind in set(P.DRAWS) | {"normal*7", "normal*0.5"}:
        assert P._draw(x, kind, gen).shape == x.shape
    for bad in ("uniform", "normalx", "large*2", "normal*big", "heavy*"):
        with pytest.raises(ValueError) as e:
            P._draw(x, bad, gen)
        message = str(e.value)
        assert repr(bad) in message
        # the message names every kind that is accepted, the scaled normal's form included
        for kind in {k.partition("*")[0] for k in P.DRAWS}:
            assert kind in message, (kind, message)
        assert "normal*<scale>" in message, message


# ------------------------------------------------- grouped convolutions as shifted slices
_SLICED_GRID = [
    (dims, cpg, groups, mult, stride, padding, dilation, bias)
    for dims in (1, 2, 3)
    for cpg, groups, mult in ((1, 4, 1), (1, 3, 2), (2, 2, 3), (3, 2, 1))
    for stride in (1, 2)
    for padding in (0, 1, "same", "valid")
    for dilation in (1, 2)
    for bias in (False, True)
    if not (padding == "same" and stride != 1)      # torch refuses 'same' when strided
]


@pytest.mark.parametrize("dims, cpg, groups, mult, stride, padding, dilation, bias",
                         _SLICED_GRID)
def test_sliced_grouped_conv_is_torchs(monkeypatch, dims, cpg, groups, mult, stride,
                                       padding, dilation, bias):
    # the function is general in the channels a group; the switch sends them all to it
    monkeypatch.setattr(P, "SLICED_MAX_GROUP_CHANNELS", 4)
    conv = (F.conv1d, F.conv2d, F.conv3d)[dims - 1]
    g = torch.Generator().manual_seed(dims * 1000 + cpg * 100 + groups * 10 + mult)
    x = torch.randn(2, cpg * groups, *(13, 9, 7)[:dims], generator=g, dtype=torch.float64)
    w = torch.randn(groups * mult, cpg, *(3, 2, 3)[:dims], generator=g, dtype=torch.float64)
    b = torch.randn(groups * mult, generator=g, dtype=torch.float64) if bias else None
    kw = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    want = conv(x, w, b, **kw)
    torchs = _spy(conv)
    got = P._conv(torchs, (x, w, b), dict(stride=stride, padding=padding, dilation=dilation,
                                          groups=groups))
    assert torchs.calls == [] and got.shape == want.shape     # the sliced path ran
    torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12 * float(want.abs().max()))
    if cpg == 1:
        # the same sum as torch's (its bias first), to a few ulps of the output's scale:
        # bit-equal where torch's float64 grouped conv sums taps in the naive order (the
        # Intel hosts this was written on), within 1.5 ulps on an AMD EPYC host (2026-12-06:
        # torch 2.13's CPU kernel orders the sum by the ISA), so the check's ratios, and the
        # cached choices (CHECK_VERSION), move by no more than rounding
        eps = torch.finfo(torch.float64).eps
        torch.testing.assert_close(got, want, rtol=0, atol=4 * eps * float(want.abs().max()))
    # positional arguments alike
    torch.testing.assert_close(P._conv(torchs, (x, w, b, stride, padding, dilation, groups),
                                       {}), got, rtol=0, atol=0)
    assert torchs.calls == []


def _spy(conv):
    """conv, recording its calls (under its own name, which _conv dispatches on)."""
    def spy(*args, **kwargs):
        spy.calls.append(args)
        return conv(*args, **kwargs)

    spy.__name__, spy.calls = conv.__name__, []
    return spy


def test_sliced_path_is_taken_only_where_it_applies():
    x = torch.randn(2, 8, 10, 10, dtype=torch.float64)
    dw = torch.randn(8, 1, 3, 3, dtype=torch.float64)
    conv2d, transposed = _spy(F.conv2d), _spy(F.conv_transpose2d)
    P._conv(conv2d, (x, dw), {"groups": 8})
    assert conv2d.calls == []
    # float32, the meta device, a full convolution, two channels a group, a transposed one:
    # torch's own
    P._conv(conv2d, (x.float(), dw.float()), {"groups": 8})
    P._conv(conv2d, (x.to("meta"), dw.to("meta")), {"groups": 8})
    P._conv(conv2d, (x, torch.randn(4, 8, 3, 3, dtype=torch.float64)), {})
    P._conv(conv2d, (x, torch.randn(4, 2, 3, 3, dtype=torch.float64)), {"groups": 4})
    P._conv(transposed, (x, torch.randn(8, 1, 3, 3, dtype=torch.float64)), {"groups": 8})
    assert len(conv2d.calls) == 4 and len(transposed.calls) == 1
    with pytest.raises(RuntimeError, match="same"):          # torch's error, not a result
        P._conv(F.conv2d, (x, dw), {"groups": 8, "padding": "same", "stride": 2})


class _Depthwise(nn.Module):
    """A depthwise 3x3 convolution (channel multiplier 2, bias, stride 1) into a tanh: the
    bounded op makes its choice the split, a ReLU chain after a second depthwise one keeps
    tf32; both convolutions take the sliced path."""

    def __init__(self):
        super().__init__()
        self.first = nn.Conv2d(4, 8, 3, padding=1, groups=4)
        self.second = nn.Conv2d(8, 8, (3, 1), groups=8, bias=False, dilation=2)

    def forward(self, x):
        return torch.relu(self.second(torch.tanh(self.first(x))))


def test_depthwise_choices_are_the_slow_paths(monkeypatch):
    task = _task(_Depthwise, (8, 4, 24, 24))
    fast = P.choose_conv_precisions(task)
    assert [c.precision for c in fast] == ["split", "tf32"], fast
    monkeypatch.setattr(P, "SLICED_MAX_GROUP_CHANNELS", 0)     # torch's own convolutions
    slow = P.choose_conv_precisions(task)
    # the same choices; the ratios to rounding (torch's float64 kernel orders its sums by the
    # host: bit-equal on the Intel hosts, within ulps on an AMD EPYC one)
    assert [dataclasses.replace(c, ratio=0.0, draws=()) for c in fast] == \
        [dataclasses.replace(c, ratio=0.0, draws=()) for c in slow]
    for f, s in zip(fast, slow):
        assert f.ratio == pytest.approx(s.ratio, rel=1e-9)
        assert [d for d, _ in f.draws] == [d for d, _ in s.draws]
        assert [r for _, r in f.draws] == pytest.approx([r for _, r in s.draws], rel=1e-9)


def test_ratio_of_finite_and_non_finite_references():
    # the ratio's fast path (every r finite, no masks) and the masked one agree with the rule
    # written out: a non-contiguous r, an infinite or NaN y at a finite r, a NaN r
    g = torch.Generator().manual_seed(3)
    r = (torch.randn(6, 5, generator=g, dtype=torch.float64) * 50).t()
    y = r + 0.3
    allow = 1e-2 * max(1.0, float(r.square().mean().sqrt())) + 1e-2 * r.abs()
    want = float((0.3 / allow).max())
    assert P._ratio_and_inexact(y, r) == (pytest.approx(want, rel=1e-12), 30, 30)
    for bad in (math.inf, -math.inf, math.nan):
        y2 = y.clone()
        y2[2, 1] = bad
        assert P._ratio_and_inexact(y2, r) == (math.inf, 30, 30)
    r2, y3 = r.clone(), y.clone()
    r2[0, 0] = y3[0, 0] = math.nan                     # NaN where r is NaN: not counted
    q, inexact, n = P._ratio_and_inexact(y3, r2)
    assert (inexact, n) == (29, 29) and 0 < q < math.inf


def test_sliced_conv_reads_one_element_lists_as_torch_does():
    # torch reads a one-element stride / padding / dilation list as every spatial dim's; the
    # sliced path zipped it against the dims (padding=[1] of a conv2d padded the width alone:
    # a [2, 4, 7, 9] result where torch's is [2, 4, 9, 9]). Another length: torch's error.
    g = torch.Generator().manual_seed(237)
    x = torch.randn(2, 4, 9, 9, generator=g, dtype=torch.float64)
    w = torch.randn(4, 1, 3, 3, generator=g, dtype=torch.float64)
    for kw in (dict(padding=[1]), dict(stride=[2]), dict(dilation=(2,)),
               dict(stride=[2], padding=(1,), dilation=[1])):
        conv2d = _spy(F.conv2d)
        got = P._conv(conv2d, (x, w), dict(groups=4, **kw))
        assert conv2d.calls == [], kw                              # the sliced path ran
        want = F.conv2d(x, w, groups=4, **kw)   # its shape, and its sum to a few ulps (the
        # order of torch's float64 kernel depends on the host: test_sliced_grouped_conv_is_torchs)
        torch.testing.assert_close(got, want, rtol=0, msg=str(kw),
                                   atol=4 * torch.finfo(torch.float64).eps
                                   * float(want.abs().max()))
    with pytest.raises(RuntimeError, match="stride"):
        P._conv(F.conv2d, (x, w), dict(groups=4, stride=(1, 1, 1)))
