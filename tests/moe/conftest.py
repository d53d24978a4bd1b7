"""Fixtures shared by the MoE decode tests (tests/moe/test_moe_pdl.py, test_moe_prefetch.py).

`decode_case`: one small decode layer (5 tokens, 4 experts, top-2, H = I = 128; skewed routing:
expert 0 popular, the last never chosen, so the walk meets a zero-token expert) and a way to
run its expert half in the interpreter under any pair of decode schedules, each launch's
kernel name recorded. Both files compared the layer with a flag off and on over the same
inputs; they built those inputs twice."""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import pytest
import torch

from tests.moe.test_moe_interp import _ids_skewed, _weights

M = importlib.import_module("argus.ops.moe")


@dataclass
class DecodeCase:
    """The inputs of one decode layer (T tokens, E experts, top-k, hidden H, inter I)."""

    T: int
    E: int
    k: int
    H: int
    I: int
    x: torch.Tensor
    w13: torch.Tensor
    w2: torch.Tensor
    ids: torch.Tensor
    weights: torch.Tensor

    def run(self, gate_up, down, run=None) -> tuple[torch.Tensor, list[str]]:
        """(output [T, H], the launched kernels' names in order) of argus.ops.moe.experts in
        the interpreter with these decode schedules; `run(kernel, *args, **constexprs)`, when
        given, launches in place of the interpreter's launcher (it receives the launcher as
        its keyword `base`)."""
        names: list[str] = []
        base = M._launcher(True)

        def launch(kernel, *args, **constexprs):
            names.append(kernel.name)
            if run is not None:
                return run(kernel, *args, base=base, **constexprs)
            return base(kernel, *args, **constexprs)
        layer = M.Layer(self.T, self.H, self.I, self.E, self.k, gate_up, down)
        out = M.experts(self.x, self.w13, self.w2, self.ids, self.weights, layer,
                        interpret=True, run=launch)
        return out, names


def make_decode_case(T: int = 5, E: int = 4, k: int = 2, H: int = 128,
                     I: int = 128) -> DecodeCase:
    """A decode layer's inputs, seeded (the same tensors on every call)."""
    w13, w2 = _weights(E, H, I, seed=7)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = _ids_skewed(T, E, k, seed=9)
    weights = torch.rand(T, k, generator=g)
    return DecodeCase(T, E, k, H, I, x, w13, w2, ids, weights)


@pytest.fixture(scope="module")
def decode_case() -> DecodeCase:
    return make_decode_case()
