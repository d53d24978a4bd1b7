"""GPU tier for launch specialization on alignment (analysis/alignment.py): an aligned launch
runs the variant without run-time alignment tests, and a misaligned view (offset by one
element, an odd row stride) runs a variant that keeps them, with the right answer in every
case (against float64 on the same random data)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _compiled():
    from argus.compiler import compile_kernel
    from tests.golden.test_launch_specialization import _copy

    return compile_kernel(_copy())


@pytest.mark.parametrize("case", ["aligned", "x offset by one", "y offset by one",
                                  "odd row stride", "ragged"])
def test_every_launch_specialization_gives_the_right_answer(case):
    ck = _compiled()
    g = torch.Generator().manual_seed(7)
    M, N = (64, 2048) if case != "ragged" else (37, 1500)
    base_x = torch.randn(M, N + 3, generator=g).cuda()
    base_y = torch.full((M, N + 3), float("nan"), device="cuda")
    x, y = base_x[:, :N], base_y[:, :N]          # row stride N + 3: odd
    if case in ("aligned", "ragged"):
        x, y = base_x[:, :N].contiguous(), torch.full((M, N), float("nan"), device="cuda")
    elif case == "x offset by one":
        x, y = base_x[:, 1:N + 1], torch.full((M, N), float("nan"), device="cuda")
    elif case == "y offset by one":
        x, y = base_x[:, :N].contiguous(), base_y[:, 1:N + 1]
    ck(x, y)
    torch.cuda.synchronize()
    ref = x.double() * 2.0
    assert torch.equal(y.double(), ref), (y.double() - ref).abs().max()
    spec = ck.specialization((x, y), {"M": M, "N": N})
    source, _binary = ck.variant(spec)
    if case == "aligned":
        assert "aligned_to" not in source.text and "X[" not in source.text
    if case == "x offset by one":
        assert "ag::aligned_to(X" in source.text and "ag::aligned_to(Y" not in source.text


def test_elementwise_example_at_8192_runs_the_specialized_variant(examples):
    ex = examples("elementwise")
    x, bias, y = ex.make_inputs("large", device="cuda")
    ck = ex.KERNEL.compile(**ex.constexprs(x, bias, y))
    ck(x, bias, y)
    torch.cuda.synchronize()
    ref = ex.reference(x.cpu(), bias.cpu(), y.cpu())
    err = (y.double().cpu() - ref).abs().max().item()
    assert err < 1e-5, err
    spec = ck.specialization((x, bias, y), ck.bind((x, bias, y)))
    assert spec.aligned == ("X", "Y", "bias") and spec in ck._variants  # built by the launch
    source, _binary = ck.variant(spec)
    assert "aligned_to" not in source.text and "X[" not in source.text
