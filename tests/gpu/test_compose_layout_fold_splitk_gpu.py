"""GPU half of this session's compose changes (the CPU tests run them in the interpreter;
here NVCC's code runs): layout ops keep -0.0 (the transposed copy's max over -inf fills, the
-0.0 fills of broadcast copies and cat; a compiler may fold x + -0.0 to x, never x + 0.0),
the row fold of a middle-axis reduction (tests/compose/test_fold_rows.py) at a 4095-column
size, the split-K cost rule's chunks strict against float64 and bitwise repeatable, and a
composed forward's repeat launches served by prepared plans (compose.launch._COMPILED)."""
import pytest

torch = pytest.importorskip("torch")

import torch.nn as nn  # noqa: E402

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _composed(forward):
    from argus.compose.runtime import ComposedModel

    model = type("M", (nn.Module,), {"forward": forward})
    return type("New", (ComposedModel,), {"MODEL": model})()


@pytest.mark.parametrize("what", ["transpose", "broadcast", "cat"])
def test_layout_ops_keep_negative_zero(what):
    x = torch.randn(64, 96, device="cuda")
    x[x.abs() < 0.5] = -0.0
    forward = {"transpose": lambda self, a: a.t().contiguous(),
               "broadcast": lambda self, a: a[:, None, :].expand(64, 3, 96).contiguous(),
               "cat": lambda self, a: torch.cat([a, a.flip(0)], 1)}[what]
    new = _composed(forward)
    with torch.no_grad():
        y = new(x)
        ref = forward(None, x)
    torch.cuda.synchronize()
    assert torch.equal(y, ref)
    assert torch.equal(torch.signbit(y), torch.signbit(ref)) and torch.signbit(ref).any()


@pytest.mark.parametrize("fn", ["mean", "sum", "amax", "amin"])
def test_folded_middle_axis_reduction(fn):
    x = torch.randn(16, 512, 4095, device="cuda")
    forward = lambda self, a: getattr(torch, fn)(a, 1)   # noqa: E731
    new = _composed(forward)
    with torch.no_grad():
        y = new(x)
    ref = forward(None, x.double())
    prog = next(iter(new._programs.values()))
    assert any("fold" in k.facts for k in prog.launches.values())
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-5


@pytest.mark.parametrize("m, n, k", [(256, 256, 8192), (128, 128, 65536)])
def test_split_k_rule_is_strict_and_repeatable(m, n, k):
    from argus.compose.gemm import matmul, plan_chunks, plan_split

    assert plan_split(m, n, k, 1, "kn", 6)[0] > plan_chunks(k, 6)[0]
    a, b = torch.rand(m, k, device="cuda"), torch.rand(k, n, device="cuda")
    out = [matmul(a, b, torch.empty(m, n, device="cuda")) for _ in range(2)]
    ref = a.double() @ b.double()
    err = ((out[0].double() - ref).norm() / ref.norm()).item()
    assert err < 5e-6, err
    assert torch.equal(out[0], out[1])


def test_repeat_forward_uses_prepared_plans(monkeypatch):
    from argus.compose import launch

    a, b = torch.rand(4096, device="cuda"), torch.rand(4096, 4096, device="cuda")
    new = _composed(lambda self, x, y: x.unsqueeze(1) * y)
    with torch.no_grad():
        torch.testing.assert_close(new(a, b), a.unsqueeze(1) * b)
        compiles = []
        real = launch._launch
        monkeypatch.setattr(launch, "_launch", lambda *args: compiles.append(args) or
                            real(*args))
        for _ in range(3):
            y = new(a, b)
    torch.cuda.synchronize()
    assert not compiles                 # every repeat launch went through the fast path
    torch.testing.assert_close(y, a.unsqueeze(1) * b)
