"""tests/gpu/test_transposed_store_gpu.py's checks (ag.store(transposed=True) of a non-accumulator
tile: compose's transposes, copy_into's permuted views, round_nhwc) run through the numpy
interpreter on small shapes, so the GPU test's logic (sources with planted bit patterns, the
sentinel destination, the bit comparison, the tf32 model of the permute) is exercised on the
CPU; and against deliberately wrong kernels (a shifted store, a rounding copy, an unrounded
copy, a flipped bit, a hole), which the checks must report. The interpreter runs the IR, not
the CUDA: the register order codegen renders is the GPU run's to check."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import test_transposed_store_gpu as gpu  # noqa: E402
# transpose with its store offset by (rows, cols): the verifier's seeded bug, here the checks'
from tests.unit.test_transposed_store import _seeded  # noqa: E402

SMALL = [(3, 130, 67), (5, 1, 129), (4, 300, 1), (1, 1, 1), (2, 63, 65)]


@pytest.mark.parametrize("dtype", gpu.FLOATS + [torch.int32, torch.int64], ids=str)
def test_transpose_checks_pass(dtype):
    for n, shape in enumerate(SMALL):
        assert gpu.check_transpose(dtype, shape, "cpu", seed=n) is None
    if dtype == torch.float32:
        from argus.compose.launch import transpose

        for consts in gpu.F32_TILES[1:]:
            assert gpu.check_transpose(dtype, SMALL[0], "cpu", consts, kernel=transpose) is None


@pytest.mark.parametrize("dtype", gpu.FLOATS + [torch.int64], ids=str)
def test_copy_into_checks_pass_through_the_transpose(dtype, monkeypatch):
    from argus.compose import launch

    ran = []
    real = launch._run
    monkeypatch.setattr(launch, "_run",
                        lambda kernel, tensors, **c: (ran.append(kernel.name),
                                                      real(kernel, tensors, **c))[1])
    for src in gpu.permuted_sources(dtype, "cpu"):
        ran.clear()
        assert gpu.check_copy_into(src) is None
        assert any(name.startswith("transpose") for name in ran), (src.shape, src.stride(), ran)


def test_round_nhwc_checks_pass():
    from argus.kernels.conv_tf32 import round_nhwc

    for case in gpu.ROUND_CASES[:5] + [(1, 1, 1, 4)]:
        assert gpu.check_round_nhwc(case, "cpu", seed=sum(case)) is None
    for consts in gpu.F32_TILES:
        assert gpu.check_round_nhwc((3, 37, 129, 40), "cpu", round_nhwc, consts) is None
    # the interpreter's model rounds subnormals like normals (the GPU test asks the hardware)
    assert gpu.check_round_nhwc((2, 5, 130, 8), "cpu", specials=gpu.SUBNORMALS) is None


def test_sources_carry_the_planted_bits():
    x = gpu.source((2, 70, 33), torch.bfloat16, 0, "cpu")
    bits = set((x.view(torch.int16).view(-1).tolist()))
    want = {b - (1 << 16) if b >= 1 << 15 else b for b in gpu.SPECIALS[torch.bfloat16]}
    assert want <= bits
    y = gpu.source((2, 70, 33), torch.float32, 0, "cpu", gpu.ROUND_SPECIALS)
    assert int(y.view(torch.int32).view(-1)[0]) == gpu.ROUND_SPECIALS[0] - (1 << 32)


# ----------------------------------------------------------------------------- wrong kernels


@pytest.mark.parametrize("shift", [(1, 0), (0, 1)], ids=["row+1", "col+1"])
def test_a_shifted_store_is_reported(shift):
    err = gpu.check_transpose(torch.float32, (2, 70, 33), "cpu", kernel=_seeded(*shift))
    assert err is not None and "elements differ" in err, err


def test_a_rounding_copy_is_reported():
    # round_nhwc with CP = C is a transpose that rounds to tf32: [B, C, R] -> [B, R, C]
    from argus.kernels.conv_tf32 import round_nhwc

    err = gpu.check_transpose(torch.float32, (2, 70, 33), "cpu", kernel=round_nhwc)
    assert err is not None and "elements differ" in err, err


def test_an_unrounded_transpose_is_not_round_nhwc():
    from argus.compose.launch import transpose

    err = gpu.check_round_nhwc((2, 8, 70, 8), "cpu", kernel=transpose)
    assert err is not None and "elements differ" in err, err


def test_the_comparison_reports_a_flipped_bit_a_hole_and_a_misplaced_nan():
    x = gpu.source((2, 70, 33), torch.float16, 0, "cpu")
    want = x.permute(0, 2, 1).contiguous()
    assert gpu._bit_mismatch(want.clone(), want, "same") is None
    flipped = want.clone()
    flipped.view(torch.int16).view(-1)[1234] ^= 1
    assert "1 of 4620 elements differ" in gpu._bit_mismatch(flipped, want, "flipped")
    hole = want.clone()
    hole.view(-1)[-1] = gpu._sentinel((1,), torch.float16, "cpu")[0]
    assert gpu._bit_mismatch(hole, want, "hole") is not None
    # a NaN payload changed (a float copy that quiets or canonicalizes NaN)
    nan = want.clone()
    k = int(torch.isnan(nan.view(-1).float()).nonzero()[0])
    nan.view(torch.int16).view(-1)[k] ^= 1
    assert gpu._bit_mismatch(nan, want, "nan payload") is not None
