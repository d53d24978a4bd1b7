"""Composed solutions fed strided tensors (issue 15): a task whose get_inputs() returns a
transposed view, or a Model that passes one between ops. A fused kernel reads rows
contiguously, so the compiled launch refuses an inner stride other than 1 (LaunchError
"innermost dim has stride"); the interpreter now refuses it too (one contract, issue 12), and
the compose runtime copies such an input into a contiguous buffer with an Argus layout kernel
first. On the CPU: the kernels run in the interpreter."""
from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn as nn

from argus.compose import launch
from argus.compose.runtime import ComposedModel
from argus.errors import LaunchError


def _composed(model_cls):
    class ModelNew(ComposedModel):
        MODEL = model_cls
    return model_cls(), ModelNew()


class Elementwise(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


class RowSoftmax(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


class TransposeBetweenOps(nn.Module):
    def forward(self, x):
        y = torch.tanh(x)
        return torch.sigmoid(y.t()) + 0.5


class PermuteBetweenOps(nn.Module):
    def forward(self, x):
        return torch.exp(x.permute(2, 0, 1) * 0.5) - x.permute(2, 0, 1)


def _launches(monkeypatch):
    """The kernels the program launches, by name: every layout copy is an Argus kernel."""
    names = []
    real = launch.run

    def spy(kernel, tensors, **kw):
        names.append(getattr(kernel, "__name__", None) or getattr(kernel, "name", "?"))
        return real(kernel, tensors, **kw)
    monkeypatch.setattr(launch, "run", spy)
    monkeypatch.setattr(launch, "_run", spy)
    import argus.compose.runtime as rt
    monkeypatch.setattr(rt, "_run", spy)
    return names


@pytest.mark.parametrize("model, make", [
    (Elementwise, lambda: torch.randn(24, 40).t()),                 # get_inputs() -> x.t()
    (RowSoftmax, lambda: torch.randn(24, 40).t()),
    (Elementwise, lambda: torch.randn(4, 6, 40).permute(2, 0, 1)),  # any rank / permutation
    (RowSoftmax, lambda: torch.randn(3, 40, 6)[:, ::2].transpose(1, 2)),   # slice with a step
    (RowSoftmax, lambda: torch.randn(5, 24, 40).permute(2, 0, 1)),
    (RowSoftmax, lambda: torch.randn(40, 96)[:, ::4]),
    (Elementwise, lambda: torch.randn(40, 1).expand(40, 24)),       # an expanded dim
    (TransposeBetweenOps, lambda: torch.randn(24, 40)),             # a view between ops
    (PermuteBetweenOps, lambda: torch.randn(4, 6, 40)),
])
def test_composed_solution_takes_strided_inputs(model, make, monkeypatch):
    torch.manual_seed(0)
    x = make()
    ref, new = _composed(model)
    names = _launches(monkeypatch)
    with torch.no_grad():
        y = new(x)
        r = ref(x)
    prog = next(iter(new._programs.values()))
    assert not prog.unsupported, prog.unsupported
    assert tuple(y.shape) == tuple(r.shape)
    torch.testing.assert_close(y, r, rtol=2e-6, atol=2e-6)
    assert names, "the program launched no kernel"


def _copy_cases():
    base = torch.randn(3, 4, 5, 6)
    for perm in itertools.permutations(range(4)):
        yield base.permute(*perm)
    x = torch.randn(12, 20)
    yield from (x.t(), x[:, ::2], x[::3, ::2], x[:, 3:17], x.t()[2:9, ::3],
                torch.randn(7)[::2], torch.randn(5, 1).expand(5, 9),
                torch.randn(2, 3, 4, 5, 3, 2).permute(5, 3, 1, 0, 2, 4),
                torch.randn(3, 8, 10)[:, :, ::2].transpose(0, 1),
                torch.randn(2, 3, 4, 5)[..., ::2].permute(2, 0, 1, 3),
                torch.randn(6, 8)[1:5, 2], torch.randn(1, 1))


@pytest.mark.parametrize("src", list(_copy_cases()), ids=lambda t: f"{tuple(t.shape)}{tuple(t.stride())}")
def test_copy_into_any_layout_with_argus_kernels(src, monkeypatch):
    """copy_into is general (any rank, permutation, step, expanded dim) and copies with Argus
    kernels (the row copy or the transpose), never with torch: the destination starts as NaN
    and every element must come from a launch."""
    dst = torch.full(src.shape, float("nan"))
    names = _launches(monkeypatch)
    launch.copy_into(src, dst)
    assert names and set(names) <= {"transpose"} | {f"copy{r}" for r in range(2, 5)}, names
    assert torch.equal(dst, src)


def test_meta_prebuild_of_a_transposed_input(tmp_path, monkeypatch):
    """The ahead-of-time build on meta tensors (kernelbench prebuild) runs the compiled launch's
    argument checks: a transposed input raised "innermost dim has stride 64" there before the
    runtime copied it; now the copy kernel and the fused kernel build."""
    from argus.runtime import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    _, new = _composed(RowSoftmax)
    names = _launches(monkeypatch)
    with torch.no_grad():
        y = new(torch.empty(128, 64, device="meta").t())
    assert y.shape == (64, 128) and "transpose" in names
