"""CompiledKernel's launch-plan cache (compiled.py, architecture note 7) for kernels with
runtime scalars: a repeat call with the same buffers and the same scalar values reuses the
prepared launch; another value (or -0.0 for 0.0, whose bits differ) prepares its own; the
split of launch arguments into tensors and scalars is runtime/args.py's, shared with the
interpreter. No GPU: stand-in CUDA tensors and a counting `prepare`."""

from __future__ import annotations

import pytest

from argus.compiled import CompiledKernel
from argus.compiler import lower_only
from argus.errors import LaunchError
from argus.runtime import interp
from argus.runtime.args import split_runtime_args
from tests.unit import reduce_kernels as K


class _CudaTensor:
    """What the plan key reads of a torch CUDA tensor."""

    is_cuda = True
    dtype = "float32"

    def __init__(self, ptr: int, shape=(4, 256)):
        self.ptr, self.shape = ptr, shape
        self.device = type("Device", (), {"index": 0})()

    def data_ptr(self) -> int:
        return self.ptr

    def stride(self):
        return (self.shape[1], 1)


@pytest.fixture
def launches(monkeypatch):
    prepared: list[dict] = []
    ran: list[dict] = []

    def prepare(self, *tensors, _scalars=None):
        values = dict(_scalars or {})
        prepared.append(values)
        return lambda: ran.append(values)
    monkeypatch.setattr(CompiledKernel, "prepare", prepare)
    ck = CompiledKernel(K.masked, lower_only(K.masked), None, None)
    return ck, prepared, ran


def test_same_buffers_and_scalars_reuse_the_plan(launches):
    ck, prepared, ran = launches
    x, y = _CudaTensor(0x1000), _CudaTensor(0x9000)
    ck(x, y, 1, 7)
    ck(x, y, causal=1, shift=7)          # the same call by keyword
    ck(x, y, 1, shift=7)
    assert prepared == [{"causal": 1, "shift": 7}] and len(ran) == 3
    assert ck.plan_for(x, y, 1, 7) is not None and ck.plan_for(x, y, 1, 8) is None


def test_another_value_or_buffer_prepares_its_own_plan(launches):
    ck, prepared, ran = launches
    x, y = _CudaTensor(0x1000), _CudaTensor(0x9000)
    ck(x, y, 1, 7)
    ck(x, y, 0, 7)
    ck(x, y, 1, 8)
    ck(_CudaTensor(0x2000), y, 1, 7)
    ck(x, y, 1, 7)                       # the first plan again
    assert len(prepared) == 4 and len(ran) == 5
    assert ran[-1] == {"causal": 1, "shift": 7}


def test_float_scalars_are_keyed_by_their_bits(launches):
    from argus.compiled import _signature

    x = _CudaTensor(0x1000)
    assert _signature([x], {"s": 0.0}) != _signature([x], {"s": -0.0})
    assert _signature([x], {"s": 1.5}) == _signature([x], {"s": 1.5})
    assert _signature([x], {"s": 1}) != _signature([x], {"s": 1.0})


def test_arguments_split_one_way_for_the_launcher_and_the_interpreter():
    k = lower_only(K.masked)
    assert interp.split_runtime_args is split_runtime_args
    tensors, scalars = split_runtime_args(k, ("X", "Y", 1), {"shift": 3})
    assert tensors == ["X", "Y"] and scalars == {"causal": 1, "shift": 3}
    with pytest.raises(LaunchError, match="missing argument"):
        split_runtime_args(k, ("X", "Y", 1), {})
    with pytest.raises(LaunchError, match="given twice"):
        split_runtime_args(k, ("X", "Y", 1, 2), {"shift": 3})
