"""The interpreter refuses a TMA copy whose innermost start is not 16-byte aligned, as the device
does (CUDA_ERROR_ILLEGAL_INSTRUCTION on the H200: the fp8 kernel's block-scale loads at K-block
k of an f32 tensor), so a kernel's CPU tests catch what no descriptor check can: the coordinate
is a runtime value."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import argus as ag  # noqa: E402
from argus.runtime.interp.machine import InterpError  # noqa: E402


@ag.kernel
def copy_columns(A: ag.Tensor["M", "K", ag.f32], C: ag.Tensor["M", "W", ag.f32], col: ag.i32):
    (pid,) = ag.grid(ag.cdiv(A.shape[0], 64))
    buf = ag.smem((1, 64, 4), ag.f32)
    pipe = ag.pipeline(1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(buf[st], A, (pid * 64, col))
    with ag.role("consumer", warpgroups=1):
        with pipe.consume() as st:
            ag.tma.store(C, (pid * 64, 0), buf[st])


def test_an_aligned_inner_coordinate_copies():
    a = torch.randn(64, 16)
    c = torch.zeros(64, 4)
    copy_columns.interpret(a, c, 4)
    np.testing.assert_array_equal(c.numpy(), a[:, 4:8].numpy())


@pytest.mark.parametrize("col", [1, 2, 3, 5])
def test_a_misaligned_inner_coordinate_is_refused(col):
    a = torch.randn(64, 16)
    with pytest.raises(InterpError, match=r"innermost coordinate .* not a multiple of 16"):
        copy_columns.interpret(a, torch.zeros(64, 4), col)
