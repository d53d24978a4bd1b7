"""`argus optimize` reaches the conv family from a task file (issue 17, deliverable 5): the
composer maps one bf16 / fp16 nn.Conv2d / F.conv2d to the family's TaskSpec, refuses 1-d / 3-d,
transposed and fp32 convolutions with the reason (argus.compose then takes them, as before),
the solution it writes is the task's Model through argus.ops.conv.convolve with the schedule
(checked in the interpreter against float64), the conv cards are the planner's arms for the
example layer, and the loop runs end to end on the CPU."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from argus.agent.composer import ConvRefused, _match_kernelbench, compose
from argus.agent.evaluate import import_source
from argus.agent.families import get_family
from argus.agent.families.conv import conv_task

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "conv2d_resnet.py"
FAMILY = get_family("conv")

TASK = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

N, C, H, W, K = {N}, {C}, {H}, {W}, {K}


class Model(nn.Module):
    def __init__(self):
        super().__init__()
{init}

    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn(N, C, H, W{xshape}, dtype={dtype})]


def get_init_inputs():
    return []
'''


def task_file(tmp_path, init, forward, dtype="torch.bfloat16", N=2, C=16, H=9, W=10, K=24,
              xshape="", name="conv_task"):
    path = tmp_path / f"{name}.py"
    path.write_text(TASK.format(N=N, C=C, H=H, W=W, K=K, init=init, forward=forward,
                                dtype=dtype, xshape=xshape))
    return path


FUNCTIONAL = dict(
    init="        self.weight = nn.Parameter(torch.randn(K, C // 2, 3, 3, dtype=torch.float16))\n"
         "        self.bias = nn.Parameter(torch.randn(K, dtype=torch.float16))",
    forward="F.conv2d(x, self.weight, self.bias, stride=2, padding=1, dilation=(1, 2), "
            "groups=2)", dtype="torch.float16")


def test_the_example_is_resnet50_c2_on_the_conv_family():
    t = compose(EXAMPLE)
    assert (t.family, t.origin, t.dtype, t.track) == ("conv", "kernelbench", "bf16", "strict")
    ref = conv_task(32, 64, 56, 56, 64, 3, 3, padding=1)
    assert t.dims == ref.dims and t.signature() == ref.signature()
    assert t.opts == {"bias": False, "weight": "conv.weight", "bias_param": ""}
    assert "channels-last input" in t.note
    # the start the lead tunes from is argus.ops.conv.schedule_for's (0.82x cuDNN, measured)
    assert FAMILY.default_params(t) == FAMILY.default_params(ref)


def test_an_inline_functional_fp16_conv_with_bias(tmp_path):
    t = compose(task_file(tmp_path, **FUNCTIONAL))
    assert t.family == "conv" and t.dtype == "f16"
    d = t.dims
    assert (d["N"], d["C"], d["H"], d["W"], d["K"], d["R"], d["S"]) == (2, 16, 9, 10, 24, 3, 3)
    assert (d["stride_h"], d["stride_w"], d["pad_h"], d["pad_w"], d["dil_h"], d["dil_w"],
            d["groups"]) == (2, 2, 1, 1, 1, 2, 2)
    assert t.opts["bias"] and t.opts["weight"] == "weight" and t.opts["bias_param"] == "bias"
    assert t.signature().endswith("/bias")       # another kernel than the bias-free layer
    assert not [x for x in FAMILY.static_check(t, FAMILY.default_params(t))
                if x.severity == "error"]


@pytest.mark.parametrize("init,forward,dtype,words", [
    ("        self.conv = nn.Conv2d(C, K, 3, padding=1)", "self.conv(x)", "torch.float32",
     "searches 16-bit"),
    ("        self.conv = nn.ConvTranspose2d(C, K, 3, dtype=torch.bfloat16)", "self.conv(x)",
     "torch.bfloat16", "transposed"),
    ("        self.conv = nn.Conv3d(C, K, 3, dtype=torch.bfloat16)", "self.conv(x)",
     "torch.bfloat16", "3-d"),
    ("        self.conv = nn.Conv2d(C, K, 3, padding=1)", "self.conv(x)", "torch.bfloat16",
     "torch.float32 weight"),
], ids=["fp32", "transposed", "3d", "mixed_dtypes"])
def test_convolutions_the_family_does_not_search_are_refused_with_the_reason(
        tmp_path, init, forward, dtype, words):
    shape = ", 5" if "Conv3d" in init else ""
    path = task_file(tmp_path, init, forward, dtype=dtype, xshape=shape)
    with pytest.raises(ConvRefused, match=words) as exc:
        _match_kernelbench(path)
    if "weight" not in words:      # the mixed-dtype refusal says how to fix the file instead
        assert "argus kernelbench solve" in str(exc.value)


def test_an_fp32_conv_still_goes_to_argus_compose_and_says_why(tmp_path):
    """As before the matcher existed (the composed family), with the reason in the note."""
    t = compose(task_file(tmp_path, "        self.conv = nn.Conv2d(C, K, 3, padding=1)",
                          "self.conv(x)", dtype="torch.float32"))
    assert t.family == "composed" and "not the conv family" in t.note
    assert "PARTIAL" not in t.note


def test_a_conv_followed_by_more_ops_is_not_this_family(tmp_path):
    t = compose(task_file(tmp_path, "        self.conv = nn.Conv2d(C, K, 3, dtype=torch.bfloat16)",
                          "torch.relu(self.conv(x))"))
    assert t.family == "composed"


@pytest.mark.parametrize("kind", ["module", "functional"])
def test_the_solution_is_the_tasks_model_through_convolve(tmp_path, kind):
    """ModelNew keeps the Model's parameters and runs the candidate's schedule in the
    interpreter: it matches the Model in float64 to bf16 / fp16 rounding."""
    from argus.bench.kernelbench.tasks import load_task

    path = task_file(tmp_path, "        self.conv = nn.Conv2d(C, K, 3, padding=1, "
                     "dtype=torch.bfloat16)", "self.conv(x)", C=16, H=6, W=7, K=16) \
        if kind == "module" else task_file(tmp_path, **FUNCTIONAL)
    t = compose(path)
    params = FAMILY.default_params(t)
    src = FAMILY.render_solution(t, FAMILY.render_kernel(t, params), params)
    assert "convolve(x, weight, bias" in src and "SCHEDULE = ConvSchedule(" in src
    mod = import_source(src, tmp_path, f"sol_{kind}")
    task = load_task(path)
    torch.manual_seed(0)
    ref = task.Model()
    torch.manual_seed(0)
    new = mod.ModelNew()
    x = task.get_inputs()[0]
    with torch.no_grad():
        out = new(x)
        want = ref.double()(x.double())
    assert out.shape == want.shape and out.dtype == x.dtype
    err = ((out.double() - want).norm() / want.norm()).item()
    assert err < 1e-2, err


def test_the_conv_cards_are_the_planners_arms_for_the_example():
    from argus.agent.bandit import schedule_arms
    from argus.agent.knowledge import load_cards

    t = compose(EXAMPLE)
    cards = [c for c in load_cards() if "conv" in c.families]
    assert {c.id for c in cards} >= {"conv.rowbox", "conv.tile", "conv.stages",
                                     "conv.cluster_multicast", "conv.packed_taps",
                                     "conv.tma_store", "conv.two_ctas"}
    arms = {a.card.id for a in schedule_arms(t, FAMILY)}
    # 64 channels fill a K slice: packed taps do not apply to c2; the rest do
    assert arms == {c.id for c in cards} - {"conv.packed_taps"}
    few = conv_task(2, 16, 7, 7, 24, 3, 3, padding=1)
    assert "conv.packed_taps" in {a.card.id for a in schedule_arms(few, FAMILY)}
    space = FAMILY.space(t)
    start = FAMILY.normalize(t, FAMILY.default_params(t))
    for c in cards:
        for k, v in c.edit.set:
            assert k in space and v in space[k], (c.id, k, v)
        for name in c.edit.search:
            assert any(v in space[name] for v in c.param(name).values), (c.id, name)
        on = t if c.applies(t.features()) else few
        base = FAMILY.normalize(on, FAMILY.default_params(on))
        assert any(FAMILY.legal(on, x) for x in FAMILY.expand(on, c, base)), c.id
    assert FAMILY.expand(t, next(c for c in cards if c.id == "conv.tile"), start)


@pytest.mark.slow
def test_optimize_the_example_end_to_end_on_the_cpu(tmp_path):
    """The loop on the example (the KernelBench context shrinks it for the interpreter):
    a correct best candidate and a solution through argus.ops.conv."""
    from argus.agent.loop import OptimizeConfig, optimize

    cfg = OptimizeConfig(iterations=2, device="cpu", judge="off", baselines="off",
                         check_sets=1, db=str(tmp_path / "exp.sqlite"), timeout_s=600,
                         verbose=False)
    result = optimize(compose(EXAMPLE), tmp_path / "run", cfg)
    assert result.best is not None and result.best.outcome.time_kind == "estimate"
    assert result.best.outcome.correct
    solution = (tmp_path / "run" / "solution.py").read_text()
    assert "convolve(x, weight, bias" in solution and "class ModelNew(Model)" in solution
