"""Fixtures shared by the MoE tests.

`stub_launches`: argus.ops.moe's launcher replaced by one that records what it would launch,
with plans that record their replays, and workspaces kept per layer as on a GPU stream (the
replay tests: test_moe_replay.py, test_moe_fp8_scale_cache.py).

`decode_case`: one small decode layer (5 tokens, 4 experts, top-2, H = I = 128; skewed routing:
expert 0 popular, the last never chosen, so the walk meets a zero-token expert) and a way to
run its expert half in the interpreter under any pair of decode schedules, each launch's
kernel name recorded. Both files compared the layer with a flag off and on over the same
inputs; they built those inputs twice.

`assert_builds_without_spills`: NVRTC's build of a kernel for sm_90a, within shared memory and
without spills (test_moe_unit_grid.py, test_moe_dynamic_walk.py)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import pytest
import torch

from argus.compiler import lower_only
from tests.moe.test_moe_interp import _ids_skewed, _weights

from argus.ops import moe_module as M


class _Plan:
    """A recorded launch plan: replaying it logs ("replay", kernel name, stream)."""

    def __init__(self, name, log):
        self.name, self.log = name, log

    def __call__(self, stream=None):
        self.log.append(("replay", self.name, stream))


def stub_launches(monkeypatch, with_args: bool = False) -> list:
    """The log of every call's launches: ("launch", kernel name) for a launcher call (with
    its arguments last when `with_args`), ("replay", kernel name, stream) for a replayed plan.
    Workspaces are cached per layer with a replay table, on "stream 77"."""
    log: list = []
    workspaces: dict = {}
    fresh_workspace = M._workspace

    def launcher(interpret, record=None):
        def run(kernel, *args, **constexprs):
            log.append(("launch", kernel.name) + ((args,) if with_args else ()))
            if record is not None:
                record.append(_Plan(kernel.name, log))
        return run

    def workspace(layer, device, interpret):
        if layer not in workspaces:
            ws = fresh_workspace(layer, device, True)
            ws.update(programs=OrderedDict(), stream=77)
            workspaces[layer] = ws
        return workspaces[layer]

    monkeypatch.setattr(M, "_launcher", launcher)
    monkeypatch.setattr(M, "_workspace", workspace)
    return log


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


def assert_builds_without_spills(kernel, schedule) -> None:
    """`kernel` lowered under `schedule` and built by NVRTC (no cache): its dynamic shared
    memory within 227 KiB, the binary for sm_90a, no local-memory spills."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(kernel, s=schedule))
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
