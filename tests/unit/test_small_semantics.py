"""Small semantic edges where the GPU code and the interpreter must agree: max/min/relu keep
NaN (torch.maximum semantics, `max.NaN.f32`), a runtime `ag.range` step that is not positive
stops the kernel (interpreter error, device trap) instead of hanging, and a pipeline needs at
least one consumer warpgroup."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.runtime.interp import InterpError


@ag.kernel(threads=128)
def _clip(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32], BN: int = 128):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
    x = ag.load(X, (pid * BN,), (BN,))
    ag.store(Y, (pid * BN,), ag.maximum(ag.relu(x), x * 0.5))


def test_max_and_relu_propagate_nan_in_both_semantics():
    text = codegen.render(lower_only(_clip)).text
    assert "ag::max_nan(" in text and "fmaxf(" not in text
    x = np.array([1.0, np.nan, -2.0] + [0.0] * 125, dtype=np.float32)
    y = np.zeros_like(x)
    _clip.interpret(x, y)
    assert y[0] == 1.0 and np.isnan(y[1]) and y[2] == 0.0


@ag.kernel(threads=128)
def _strided(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32], S: ag.Tensor["S", ag.f32]):
    (pid,) = ag.grid(1)
    for i in ag.range(0, X.shape[0], S.shape[0]):  # a step known only at run time
        ag.store(Y, (i,), ag.load(X, (i,), (128,)))


def test_runtime_step_must_be_positive():
    text = codegen.render(lower_only(_strided)).text
    assert "__trap();  // ag.range needs a positive step" in text
    x = np.ones(256, dtype=np.float32)
    y = np.zeros_like(x)
    _strided.interpret(x, y, np.zeros(128, dtype=np.float32))
    assert (y == 1).all()
    with pytest.raises(InterpError, match="positive"):
        _strided.interpret(x, y, np.zeros(0, dtype=np.float32))


def test_pipeline_needs_a_consumer():
    @ag.kernel
    def no_consumer(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        ag.pipeline(2, consumers=0)

    with pytest.raises(TraceError, match="consumers"):
        no_consumer.trace()


def test_load_scalar_at_a_per_thread_address_is_not_uniform():
    seen = {}

    @ag.kernel
    def per_thread(T: ag.Tensor["N", ag.i32], C: ag.Tensor["N", ag.f32]):
        ag.grid(1)
        seen["shared"] = ag.load_scalar(T, (0,)).uniform
        seen["own"] = ag.load_scalar(T, (ag.thread_index(),)).uniform

    per_thread.trace()
    assert seen == {"shared": True, "own": False}
