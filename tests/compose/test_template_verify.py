"""Every kernel a composed model launches passes the verifier, as `ag.compile` runs it with
ARGUS_VERIFY=1 (the default a user has; GPU judge runs turn it off, which is how a template
the verifier refused went unnoticed: compose's transpose, issue 13/15).

Each case composes a small torch model on the CPU with `KernelFunction.interpret` recorded
(scripts/compose_verify.py's `recording`), then lowers and verifies each distinct launched
kernel: no error (an "unknown" is no refusal: compile raises only on errors), and the
template family the case is about was really launched. The KNOWN cases are false alarms that
scripts/compose_verify.py reports over KernelBench and that are not fixed yet: they xfail while
exactly that finding is reported and pass once it is fixed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from argus import verify
from argus.compose.runtime import ComposedModel

_SPEC = importlib.util.spec_from_file_location(
    "compose_verify", Path(__file__).resolve().parents[2] / "scripts" / "compose_verify.py")
cv = sys.modules.setdefault("compose_verify", importlib.util.module_from_spec(_SPEC))
if not hasattr(cv, "recording"):
    _SPEC.loader.exec_module(cv)


def launched(model: type, inputs: list, init: tuple = ()) -> dict:
    class ModelNew(ComposedModel):
        MODEL = model

    torch.manual_seed(0)
    ref = model(*init)
    new = ModelNew(*init)
    new.load_state_dict(ref.state_dict())
    launches: dict = {}
    with cv.recording(launches), torch.no_grad():
        new(*inputs)
    return launches


def assert_verifies(launches: dict, expect: str) -> None:
    names = sorted({launch.kernel.name for launch in launches.values()})
    assert any(n.startswith(expect) for n in names), f"no {expect}* kernel launched: {names}"
    bad = []
    for launch in launches.values():
        v = cv.verify_launch(launch)
        if v.status in ("error", "refused"):
            bad.append(f"{launch.label}: {', '.join(v.rules)} {v.first}")
    assert not bad, "\n".join(bad)


def fn_model(f):
    return type("M", (nn.Module,), {"forward": lambda self, a: f(a)})


# ----------------------------------------------------------------------------- direct


@pytest.mark.parametrize("consts", [{}, {"BR": 16, "BC": 32}])
def test_transpose_template_verifies(consts):
    """The one-hot selection transpose (argus/compose/launch.py): was store.coords, a false
    alarm of the sum's tag transfer (argus/verify/transfer/tiles.py `_kept_only`)."""
    from argus.compose.launch import transpose

    errors = [d for d in verify.check(transpose, lower=True, **consts) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)


@pytest.mark.parametrize("kc", [8, 64])
def test_split_cols_verifies(kc):
    """The GEMM adapter's B split (L1/11, L1/97: KC = 8 was a store.coverage error, Y's shape
    unrelated to X's; split_cols now states the launch contract with ag.tag_assume)."""
    from argus.compose.gemm import split_cols

    errors = [d for d in verify.check(split_cols, lower=True, SLOTS=(2, 1, 0, 1, 0, 0),
                                      CHUNKS=1, KC=kc, ROWS=8, BN=64) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)


# ----------------------------------------------------------------------------- composed

CASES = [
    # (id, model, inputs, init, the kernel family that must be launched)
    ("transpose_copy", fn_model(lambda a: a.transpose(0, 1).contiguous() * 2.0),
     [torch.randn(40, 24)], (), "transpose"),
    ("strided_row_copy", fn_model(lambda a: a[:, ::1, :8].contiguous() + 1.0),
     [torch.randn(3, 5, 20)], (), "fused"),
    ("elementwise", fn_model(lambda a: torch.clamp(F.gelu(a) * 0.5 + a.tanh(), -1, 1)),
     [torch.randn(37, 70)], (), "fused"),
    ("row_softmax", fn_model(lambda a: torch.softmax(a, dim=-1)),
     [torch.randn(6, 300)], (), "fused"),
    ("row_layer_norm", fn_model(lambda a: F.layer_norm(a, (a.shape[-1],))),
     [torch.randn(5, 96)], (), "fused"),
    # L1/49, 51-53, L2/6, 24, 25, 32, 58, 79, 91, 92 (fill.identity false alarm, issue 13): a
    # reduction over a non-innermost axis (rows) of blocks whose last columns are masked (15
    # columns, BN = 16) with the default fill 0: the masked columns are on an axis the
    # reduction keeps, their results' stores are masked (argus/verify/outflow.py)
    ("max_over_middle_axis", fn_model(lambda a: torch.max(a, dim=1)[0]),
     [torch.randn(16, 16, 15)], (), "fused"),
    # L1/48 (mean over dim 1 of 4095-float rows): rows folded four at a time into 16-byte
    # rows (compose/tile.py fold_rows), then the fold's second pass
    ("mean_over_middle_axis_folded", fn_model(lambda a: torch.mean(a, dim=1)),
     [torch.randn(4, 16, 33)], (), "fused0_fold"),
    ("argmin_over_middle_axis", fn_model(lambda a: torch.argmin(a, dim=1)),
     [torch.randn(16, 16, 15)], (), "fused"),
    ("softmax_over_middle_axis", fn_model(lambda a: torch.softmax(a, dim=1)),
     [torch.randn(4, 4, 215)], (), "fused"),
    ("logsumexp_over_middle_axis", fn_model(lambda a: torch.logsumexp(a, dim=1) * 2.0),
     [torch.randn(4, 4, 215)], (), "fused"),
    ("sum_last", fn_model(lambda a: a.sum(dim=-1)), [torch.randn(7, 130)], (), "fused"),
    ("cumsum", fn_model(lambda a: torch.cumsum(a, dim=1)), [torch.randn(4, 100)], (), "scan"),
    ("max_pool2d", fn_model(lambda a: F.max_pool2d(a, 2)), [torch.randn(1, 2, 8, 8)], (),
     "pool"),
    # L2/42, 43, 84, 92 (softmax.stats false alarm, issue 13): logsumexp's sum pass loads the
    # finished row max at offsets the block loop does not change; lower/prefetch.py ringed it,
    # and the ring's copies read as three maxima. Now hoisted before the loop
    ("logsumexp", fn_model(lambda a: torch.logsumexp(a, dim=1)), [torch.randn(8, 8)], (),
     "fused"),
    ("logsumexp_blocks", fn_model(lambda a: torch.logsumexp(a, dim=1)),
     [torch.randn(4, 3000)], (), "fused"),
    # L1/98 (fill.identity false alarm, issue 13): where(t > 0, t * log(t), 0) is a select on
    # data values, not an index mask (argus/verify/check_fills.py); blocks that divide the row
    # and a partial last block (masked by compose with an index where)
    ("kl_div", type("KL", (nn.Module,), {"forward": lambda self, p, t: F.kl_div(
        torch.log(p), t, reduction="batchmean")}),
     [torch.rand(4, 2048).softmax(-1), torch.rand(4, 2048).softmax(-1)], (), "fused"),
    ("kl_div_partial", type("KL", (nn.Module,), {"forward": lambda self, p, t: F.kl_div(
        torch.log(p), t, reduction="batchmean")}),
     [torch.rand(4, 1000).softmax(-1), torch.rand(4, 1000).softmax(-1)], (), "fused"),
]


@pytest.mark.parametrize("name,model,inputs,init,expect", CASES, ids=[c[0] for c in CASES])
def test_composed_kernels_verify(name, model, inputs, init, expect):
    assert_verifies(launched(model, inputs, init), expect)


@pytest.mark.slow
def test_linear_gemm_adapter_verifies():
    """nn.Linear through the bf16-split GEMM adapter: split kernels, the library GEMM."""
    class Lin(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(64, 40)

        def forward(self, a):
            return torch.relu(self.fc(a))

    assert_verifies(launched(Lin, [torch.randn(24, 64)]), "gemm")


@pytest.mark.slow
def test_conv2d_verifies():
    class Conv(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3)

        def forward(self, a):
            return self.conv(a)

    assert_verifies(launched(Conv, [torch.randn(1, 4, 10, 10)]), "conv")


# ------------------------------------------------------------------- known findings (xfail)

KNOWN: list[tuple] = [
    # (id, model, inputs, init, family, finding) per known false alarm: none left (issue 13's
    # fill.identity and softmax.stats cases verify and are CASES above)
]


@pytest.mark.parametrize("name,model,inputs,init,expect,finding", KNOWN,
                         ids=[c[0] for c in KNOWN])
def test_known_findings(name, model, inputs, init, expect, finding):
    """Xfails while the known false alarm is reported; any other error fails; clean passes."""
    try:
        assert_verifies(launched(model, inputs, init), expect)
    except AssertionError as exc:
        if finding in str(exc) and "no " + expect not in str(exc):
            pytest.xfail(f"known verifier false alarm ({finding}), not fixed yet")
        raise
