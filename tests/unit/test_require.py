"""ag.require: a launch precondition a kernel states on its scalar parameters. It is IR data
(the `require` tag op: printed, parsed, no code), the verifier takes it as a premise
(tests/verify/test_softmax_fold.py), so every launch checks it on the host from the actual
values: the interpreter here, a compiled launch in CompiledKernel.prepare / build_for (the
GPU test in tests/gpu/test_require_gpu.py), with a LaunchError naming the kernel, the
condition, the values, why, and how to fix it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.ir import tag_ops as T
from argus.ir.core import Region
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.runtime import interp, preconditions
from argus.runtime.toolkit import nvrtc_available


@ag.kernel
def scaled(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32], scale: ag.f32):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], 64))
    ag.require(ag.sym(scale) > 0, "the scale must be positive: a test kernel")
    ag.require(ag.sym(X.shape[0]) % 64 == 0, "whole blocks of 64 rows only")
    ag.store(Y, (pid * 64, 0), ag.load(X, (pid * 64, 0), (64, 64)) * scale)


def _arrays(rows=128):
    return np.ones((rows, 64), np.float32), np.zeros((rows, 64), np.float32)


def test_a_kept_precondition_launches():
    x, y = _arrays()
    scaled.interpret(x, y, 2.0)
    assert (y == 2.0).all()


@pytest.mark.parametrize("scale", [-1.0, 0.0, -0.0, float("nan")])
def test_the_interpreter_refuses_a_broken_runtime_scalar(scale):
    x, y = _arrays()
    with pytest.raises(ag.LaunchError) as e:
        scaled.interpret(x, y, scale)
    text = str(e.value)
    assert "kernel scaled" in text and "scale > 0" in text and f"scale = {scale!r}" in text
    assert "the scale must be positive: a test kernel" in text
    assert "fix: launch it only with scale > 0" in text
    assert (y == 0).all()                                  # nothing ran


def test_a_shape_symbol_precondition_is_checked_too():
    x, y = _arrays(96)
    with pytest.raises(ag.LaunchError, match=r"M % 64\) == 0 does not hold \(M = 96\)"):
        interp.run(scaled.trace(), x, y, 1.0)          # the interpreter's own entry point


def test_it_is_ir_data_that_generates_no_code():
    kernel = lower_only(scaled)
    req = [op for op in kernel.body.ops if isinstance(op, T.Require)]
    assert [op.expr for op in req] == ["($0 > 0)", "(($0 % 64) == 0)"]
    text = print_kernel(kernel)
    assert 'require(args=(%scale' in text and 'why="whole blocks of 64 rows only"' in text
    assert print_kernel(parse_kernel(text)) == text          # it parses back
    bare = dataclasses.replace(kernel, body=Region(tuple(
        op for op in kernel.body.ops if not isinstance(op, T.Require))))
    assert codegen.render(kernel).text == codegen.render(bare).text
    names = [p.text() for p in preconditions.of_kernel(kernel)]
    assert names == ["scale > 0", "(M % 64) == 0"]


def test_it_names_scalar_parameters_only():
    @ag.kernel
    def computed(X: ag.Tensor["M", 64, ag.f32], scale: ag.f32):
        (pid,) = ag.grid(1)
        ag.require(ag.sym(pid) > 0, "not a parameter")

    with pytest.raises(ag.TraceError, match="only the kernel's scalar parameters"):
        computed.trace()

    @ag.kernel
    def unwrapped(X: ag.Tensor["M", 64, ag.f32], scale: ag.f32):
        (pid,) = ag.grid(1)
        ag.require(True, "no condition")

    with pytest.raises(ag.TraceError, match="written with ag.sym"):
        unwrapped.trace()


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC is not installed")
def test_a_compiled_launch_checks_before_building(monkeypatch, tmp_path):
    """build_for (the compiled launch's checks without a GPU, on meta tensors) refuses the
    broken precondition as prepare does, before any plan exists."""
    torch = pytest.importorskip("torch")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    compiled = scaled.compile()
    x = torch.empty(128, 64, device="meta")
    y = torch.empty(128, 64, device="meta")
    with pytest.raises(ag.LaunchError, match="scale > 0 does not hold"):
        compiled.build_for(x, y, -0.5)
    compiled.build_for(x, y, 0.5)


def test_attention_refuses_a_negative_scale_where_it_folds():
    """The softmax diet's folded scale (AttentionSchedule.fold_scale) states qk_scale > 0: a
    direct launch with a negative scale is refused (argus.ops.attention.for_scale runs such a
    scale unfolded, whose kernel states nothing and accepts it)."""
    from argus.kernels.attention import attention_kernel, default_schedule
    from argus.ops.attention import for_scale

    fn = attention_kernel(64, ag.bf16, False, False)
    folded = dataclasses.replace(default_schedule(64, False), fold_scale=True)
    q = np.zeros((1, 1, 128, 64), np.float32)
    with pytest.raises(ag.LaunchError, match=r"qk_scale > 0 does not hold \(qk_scale = -0.18"):
        interp.run(fn.trace(s=folded), q, q, q, q.copy(), -0.18)
    unfolded = for_scale(folded, -0.18)
    assert not unfolded.fold_scale and for_scale(folded, 0.18) is folded
    assert preconditions.of_kernel(fn.trace(s=unfolded)) == ()


@pytest.mark.parametrize("stated", [True, False], ids=["stated", "unstated"])
def test_an_integer_precondition_is_a_verifier_premise(stated):
    """Over integer scalars a stated precondition joins the model's premises: the assertion
    below holds only because every launch checks n >= M."""
    from argus import verify

    @ag.kernel
    def covered(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32], n: ag.i32):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 64))
        if stated:
            ag.require(ag.sym(n) >= ag.sym(X.shape[0]), "n covers the rows")
        ag.tag_assert(ag.sym(n) >= ag.sym(X.shape[0]), message="n covers M")
        ag.store(Y, (pid * 64, 0), ag.load(X, (pid * 64, 0), (64, 64)))

    found = [d.severity for d in verify.check(covered) if d.code == "tag.assert"]
    assert found == ([] if stated else ["error"])
    x, y = _arrays()
    if stated:
        with pytest.raises(ag.LaunchError, match=r"n >= M does not hold \(n = 100, M = 128\)"):
            covered.interpret(x, y, 100)



def _stating(which):
    @ag.kernel
    def stating(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32], scale: ag.f32,
                n: ag.i32):
        (pid,) = ag.grid(ag.cdiv(X.shape[0], 64))
        # over the reals / z3's integers (the verifier's reading) each implies scale > 0 or n >= 1
        if which == "scale/2":
            ag.require(ag.tag_all(ag.sym(scale) // 2 >= 0, ag.sym(scale) != 0), "scale > 0")
        elif which == "n/2":
            ag.require(ag.tag_all(ag.sym(n) // 2 >= 0, ag.sym(n) != 0), "n >= 1")
        else:
            ag.require(~(ag.sym(scale) <= 0), "scale > 0")
        ag.store(Y, (pid * 64, 0), ag.load(X, (pid * 64, 0), (64, 64)) * scale)
    return stating


@pytest.mark.parametrize("which, scale, n", [
    ("scale/2", -0.5, 4), ("n/2", 1.0, -1), ("n/2", 1.0, 0.5), ("!(scale<=0)", float("nan"), 4),
    ("!(scale<=0)", float("inf"), 4)],
    ids=["float-division", "int-division", "fraction-for-an-int", "nan", "inf"])
def test_the_host_reads_a_precondition_as_the_verifier_does(which, scale, n):
    """The verifier reads a precondition over the reals (a float parameter) and z3's integers
    (`/` floors), so the host check must too: C-truncating `/` on the host accepted scale =
    -0.5 for `scale / 2 >= 0 && scale != 0` (trunc(-0.25) = -0.0), n = -1 for
    `n / 2 >= 0 && n != 0`, n = 0.5 for an i32 (0 on the device), and Python's NaN satisfied
    `!(scale <= 0)`: each a launch the verifier had assumed away (scale > 0, n >= 1)."""
    x, y = _arrays()
    kernel = _stating(which)
    with pytest.raises(ag.LaunchError, match="does not hold"):
        kernel.interpret(x, y, scale, n)
    assert (y == 0).all()
    kernel.interpret(x, y, 0.5, 1)
    assert (y == 0.5).all()


@pytest.mark.parametrize("scale", [1e-50, 1e39])
def test_a_float_is_checked_as_the_float32_launched(scale):
    """A Python float is launched as a float32 (driver.py, the interpreter's np.float32): 1e-50
    is the kernel's 0 and 1e39 its inf, so `scale > 0` (a premise: scale > 0 over the reals)
    must refuse them, though the Python float is positive."""
    x, y = _arrays()
    with pytest.raises(ag.LaunchError, match="scale > 0 does not hold"):
        scaled.interpret(x, y, scale)


@pytest.mark.parametrize("scale", [1e-46, 3e38])
def test_for_scale_unfolds_a_scale_the_float32_cannot_hold(scale):
    """argus.ops.attention folds only a scale whose float32 qk_scale (scale * log2 e, what the
    kernel gets and its ag.require checks) is positive and finite; a tiny or huge positive
    double runs unfolded instead of being refused by the precondition."""
    from argus.kernels.attention import attention_kernel, default_schedule
    from argus.ops.attention import for_scale

    folded = dataclasses.replace(default_schedule(64, False), fold_scale=True)
    chosen = for_scale(folded, scale)
    assert not chosen.fold_scale
    fn = attention_kernel(64, ag.bf16, False, False)
    assert preconditions.of_kernel(fn.trace(s=chosen)) == ()
