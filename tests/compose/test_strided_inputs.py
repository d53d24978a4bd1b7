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


def _like(t: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """`values` laid out in memory as `t` is (same strides over a storage of t's size)."""
    storage = torch.zeros(t.untyped_storage().nbytes() // t.element_size(), dtype=values.dtype)
    view = storage.as_strided(t.shape, t.stride(), t.storage_offset())
    if 0 not in t.stride():
        view.copy_(values)
    else:                               # an expanded dim: every copy holds the same values
        index = tuple(0 if s == 0 else slice(None) for s in t.stride())
        storage.as_strided(t.shape, t.stride(), t.storage_offset())[index] = values[index]
    return view


_DTYPE_CASES = [torch.randn(3, 4, 5, 6).permute(3, 1, 0, 2), torch.randn(3, 4, 5, 6)[:, :, ::2],
                torch.randn(12, 20).t(), torch.randn(12, 20)[::3, ::2],
                torch.randn(5, 1).expand(5, 9), torch.randn(7)[::2],
                torch.randn(2, 3, 4, 5, 3, 2).permute(5, 3, 1, 0, 2, 4)]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.int32],
                         ids=str)
@pytest.mark.parametrize("case", range(len(_DTYPE_CASES)))
def test_copy_into_every_task_dtype_with_argus_kernels(dtype, case, monkeypatch):
    """The layout copies cover the dtypes composed kernels read (half types, index tensors),
    with Argus kernels of that dtype: before, anything but float32 fell back to torch's copy_
    (GPU time outside Argus). Bitwise equal; the destination starts as a value no element
    has."""
    layout = _DTYPE_CASES[case]
    # distinct signed values (positions must move, not just values); integers within +-2^24:
    # the interpreter's tiles are float32, larger index values are exact on the device only
    ramp = torch.arange(layout.numel(), dtype=torch.float64).reshape(layout.shape)
    src = _like(layout, (ramp / 8 - 3.3 if dtype.is_floating_point else ramp * 3 - 50)
                .to(dtype))
    dst = torch.full(src.shape, 9999, dtype=dtype)
    names = _launches(monkeypatch)
    launch.copy_into(src, dst)
    assert names and all(n.startswith(("copy", "transpose")) for n in names), names
    tag = str(dtype).removeprefix("torch.")
    assert all(n.endswith({"float16": "_f16", "bfloat16": "_bf16", "int64": "_i64",
                           "int32": "_i32"}[tag]) for n in names), names
    assert torch.equal(dst, src.contiguous())


@pytest.mark.parametrize("dtype", [torch.bool, torch.float64, torch.int16, torch.uint8],
                         ids=str)
def test_copy_into_refuses_a_dtype_without_kernels(dtype):
    """bool, float64 and 8/16-bit integers have no layout copy: a LaunchError that names the
    dtype, the tensor and the fix (before: a silent torch copy)."""
    src = torch.ones(4, 6, dtype=dtype).t()
    with pytest.raises(LaunchError, match=rf"no Argus copy kernel for a strided {dtype} "
                                          r"tensor of shape \(6, 4\).*fix:"):
        launch.copy_into(src, torch.empty(6, 4, dtype=dtype))


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


_SPECIALS = [-0.0, 0.0, float("-inf"), float("inf"), float("nan"), -1.5, 2.25]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("layout", ["t", "permute", "no_unit_stride"])
def test_layout_copies_keep_negative_zero_and_specials(dtype, layout):
    """A transposed copy moves bits: -0.0 stays -0.0 (the selection transpose summed each value
    with +0.0 fills, and -0.0 + 0.0 is +0.0), infinities and NaN stay. Compared bitwise (NaN:
    where it is)."""
    values = torch.tensor(_SPECIALS * 40, dtype=dtype)
    if layout == "t":
        src = values[:24 * 10].view(24, 10).t()
    elif layout == "permute":
        src = values[:4 * 6 * 10].view(4, 6, 10).permute(2, 0, 1)
    else:
        src = values[::2][:7 * 5].view(7, 5).t()        # no dim of stride 1
    dst = torch.full(src.shape, 7.0, dtype=dtype)
    launch.copy_into(src, dst)
    want = src.contiguous()
    bits = torch.int16 if dtype != torch.float32 else torch.int32
    nan = want.isnan()          # a NaN's payload is not a layout fact (bf16 rounding sets it)
    assert torch.equal(dst.isnan(), nan)
    assert torch.equal(dst.view(bits)[~nan], want.view(bits)[~nan])
    assert torch.signbit(dst[~nan]).sum() == torch.signbit(want[~nan]).sum() > 0


class _BroadcastCopy(nn.Module):
    def forward(self, x):
        return x.unsqueeze(1).expand(4, 6, 5).contiguous()


class _Cat(nn.Module):
    def forward(self, x):
        return torch.cat([x, x.flip(0), x[:2].t().reshape(2, 5) * -1.0], 0)


class _TransposedCopy(nn.Module):
    def forward(self, x):
        return x.t().contiguous()


@pytest.mark.parametrize("model", [_BroadcastCopy, _Cat, _TransposedCopy],
                         ids=lambda m: m.__name__)
def test_composed_layout_ops_keep_negative_zero(model):
    """Layout ops move bits: a broadcast copy (the tile broadcast by adding a fill), a cat (a
    sum of masked pieces) and a transposed copy keep -0.0 (each turned it into +0.0: x + 0.0
    is +0.0 for x = -0.0; the fills are -0.0 now, the transpose a max over -inf)."""
    x = torch.tensor([[-0.0, 1.0, -0.0, 2.0, -0.0]] * 4)
    x[1] = torch.tensor([0.0, -0.0, -3.0, -0.0, 0.0])
    new = type("New", (ComposedModel,), {"MODEL": model})()
    with torch.no_grad():
        y, ref = new(x), model()(x)
    assert torch.equal(y, ref)
    assert torch.equal(torch.signbit(y), torch.signbit(ref)) and torch.signbit(ref).any()
