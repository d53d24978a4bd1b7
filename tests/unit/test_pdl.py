"""Programmatic dependent launch (issue 16): ag.wait_prior_grids (griddepcontrol.wait) and
ag.allow_dependent_launch (griddepcontrol.launch_dependents) through tracing, the IR text,
CUDA rendering and NVRTC, the interpreter, the launch attribute (set when, and only when, the
kernel waits). The verifier's pdl.* rules on these kernels: tests/verify/test_pdl.py."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus.codegen.cuda import render
from argus.ir import ops as O
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel

BN = 256


@ag.kernel
def producer(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
    """Y = 2 X + 1; waits for whatever wrote X, then lets the next kernel start."""
    (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
    ag.wait_prior_grids()
    x = ag.load(X, (pid * BN,), (BN,))
    ag.allow_dependent_launch()
    ag.store(Y, (pid * BN,), x * 2.0 + 1.0)


@ag.kernel
def consumer(W: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32], Z: ag.Tensor["N", ag.f32],
             BUG: str = ""):
    """Z = Y * W; W (a weight) is loaded before the wait, Y (the producer's output) after.
    BUG seeds one hazard: "load" reads Y before the wait, "store" writes Y before it,
    "trigger" lets the dependent start before the wait, "loop" waits inside a loop."""
    (pid,) = ag.grid(ag.cdiv(W.shape[0], BN))
    w = ag.load(W, (pid * BN,), (BN,))
    if BUG == "load":
        w = w + ag.load(Y, (pid * BN,), (BN,))
    if BUG == "store":
        ag.store(Y, (pid * BN,), w)
    if BUG == "trigger":
        ag.allow_dependent_launch()
    if BUG == "loop":
        for _ in ag.range(2):
            ag.wait_prior_grids(stable=(W,))
    else:
        ag.wait_prior_grids(stable=(W,))
    y = ag.load(Y, (pid * BN,), (BN,))
    ag.allow_dependent_launch()
    ag.store(Z, (pid * BN,), y * w)


@ag.kernel
def trigger_only(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
    ag.allow_dependent_launch()
    ag.store(Y, (pid * BN,), ag.load(X, (pid * BN,), (BN,)))


@ag.kernel
def plain(X: ag.Tensor["N", ag.f32], Y: ag.Tensor["N", ag.f32]):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], BN))
    ag.store(Y, (pid * BN,), ag.load(X, (pid * BN,), (BN,)))


def test_trace_records_the_ops_and_the_launch_flag():
    k = consumer.trace()
    waits = [op for op in k.walk() if isinstance(op, O.GridDepWait)]
    assert len(waits) == 1 and [v.id for v in waits[0].stable] == [k.param("W").value.id]
    assert sum(isinstance(op, O.GridDepLaunch) for op in k.walk()) == 1
    assert k.attr("pdl") is True
    # only the wait makes a kernel launch early: a trigger alone, or neither, does not
    assert trigger_only.trace().attr("pdl") is None and plain.trace().attr("pdl") is None


def test_ir_text_round_trips():
    k = consumer.trace()
    text = print_kernel(k)
    assert "griddep.wait" in text and "griddep.launch_dependents" in text
    assert print_kernel(parse_kernel(text)) == text


def test_stable_takes_tensor_parameters_only():
    @ag.kernel
    def bad(X: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        ag.wait_prior_grids(stable=(pid,))

    with pytest.raises(ag.TraceError, match="stable"):
        bad.trace()


def test_cuda_renders_griddepcontrol_in_program_order():
    src = render(consumer.lower())
    text = src.text
    w = text.index('asm volatile("griddepcontrol.wait;" ::: "memory");')
    t = text.index('asm volatile("griddepcontrol.launch_dependents;" ::: "memory");')
    assert w < t and src.pdl
    assert text.index("W[") < w < text.index("Y[")    # the weight's load overlaps, Y's waits
    assert not render(plain.lower()).pdl and "griddepcontrol" not in render(plain.lower()).text
    assert not render(trigger_only.lower()).pdl


def test_nvrtc_compiles_to_sm90a():
    pytest.importorskip("cuda.bindings")
    from argus.runtime import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not available")
    c = ag.compile(consumer, verify=False)
    assert "griddepcontrol.wait" in c.binary.ptx
    assert "griddepcontrol.launch_dependents" in c.binary.ptx
    assert c.source.pdl and not c.resources.spills


def test_launch_attribute_set_when_and_only_when_the_kernel_waits():
    pytest.importorskip("cuda.bindings")
    from cuda.bindings import driver as cu

    from argus.runtime.driver import launch_attributes

    pss = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    on = launch_attributes(None, render(consumer.lower()).pdl)
    assert [(a.id, a.value.programmaticStreamSerializationAllowed) for a in on] == [(pss, 1)]
    assert launch_attributes(None, render(plain.lower()).pdl) == []
    both = launch_attributes((2, 1, 1), True)
    assert [a.id for a in both] == [cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION,
                                    pss]


def test_interpreter_runs_the_chain():
    rng = np.random.default_rng(3)
    n = 1000
    x = rng.standard_normal(n).astype(np.float32)
    w = rng.standard_normal(n).astype(np.float32)
    y, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
    producer.interpret(x, y)
    consumer.interpret(w, y, z)
    want_y = x * np.float32(2) + np.float32(1)
    assert np.array_equal(y, want_y)
    assert np.array_equal(z, want_y * w)
