"""One contract for interpret and compile (issue 12) on a strided innermost dim (issue 15): the
compiled launch's argument check (CompiledKernel.bind -> check_tensor_arg) and the
interpreter's launch refuse the same tensor with the same LaunchError, raised by one function
(runtime/args.check_inner_stride), so a CPU test fails where the GPU launch would."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import argus as ag
from argus.compose import launch
from argus.errors import LaunchError


@pytest.fixture(scope="module")
def compiled():
    # the argument check only: the verifier's verdict on the selection sum is its own test's
    return ag.compile(launch.transpose, verify=False, BR=16, BC=32)


@pytest.mark.parametrize("make_x", [
    lambda dev: torch.empty(2, 40, 24, device=dev).transpose(1, 2),      # a transposed view
    lambda dev: torch.empty(2, 24, 80, device=dev)[:, :, ::2],           # a step slice
    lambda dev: torch.empty(2, 24, 1, device=dev).expand(2, 24, 40),     # an expanded dim
])
def test_interpret_and_compiled_launch_refuse_the_same_inner_stride(compiled, make_x):
    y = torch.empty(2, 40, 24)
    with pytest.raises(LaunchError) as on_gpu:   # meta: the compiled launch's checks, no GPU
        compiled.bind((make_x("meta"), y.to("meta")), device="meta")
    with pytest.raises(LaunchError) as on_cpu:
        launch.transpose.interpret(make_x("cpu"), y, BR=16, BC=32)
    assert "innermost dim has stride" in str(on_cpu.value)
    assert str(on_cpu.value) == str(on_gpu.value)


def test_interpreter_refuses_a_strided_numpy_array_the_same_way():
    x = np.zeros((2, 40, 24), np.float32).transpose(0, 2, 1)     # strides in bytes: 4, 96
    with pytest.raises(LaunchError, match=r"parameter X: the innermost dim has stride 24 "):
        launch.transpose.interpret(x, np.zeros((2, 40, 24), np.float32), BR=16, BC=32)


def test_a_unit_extent_inner_dim_is_accepted_by_both(compiled):
    # extent 1: never stepped over, its stride is free (both sides, the same rule)
    x = torch.randn(3, 5, 2)[:, :, :1]                          # inner stride 1, extent 1
    xs = torch.randn(3, 5, 4)[:, :, 1:2].as_strided((3, 5, 1), (20, 4, 7))
    for t in (x, xs):
        y = torch.full((3, 1, 5), float("nan"))
        compiled.bind((t.to("meta"), y.to("meta")), device="meta")
        launch.transpose.interpret(t, y, BR=16, BC=32)
        assert torch.equal(y, t.transpose(1, 2))
