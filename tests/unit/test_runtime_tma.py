"""argus.runtime.tma: the CPU-side validation of TMA descriptor requests (cuTensorMapEncodeTiled
rules) and the TensorMap value type."""

from __future__ import annotations

import pytest
import torch

from argus import dtypes
from argus.errors import LaunchError
from argus.runtime import TensorMap, check_tensor_map, make_tensor_map

BASE = 0x7F0000000000  # a 256-byte aligned device-like address


def test_spec_is_innermost_first():
    spec = check_tensor_map((4096, 1000), (1000, 1), dtype=dtypes.bf16, address=BASE,
                            box=(128, 64), swizzle_bytes=128, name="A")
    assert spec.dims == (1000, 4096)
    assert spec.strides_bytes == (2000,)
    assert spec.box == (64, 128)
    assert spec.rank == 2 and spec.elem_bytes == 2
    assert spec.box_bytes == 128 * 64 * 2


def test_3d_spec_and_size_one_dims():
    spec = check_tensor_map((8, 256, 512), (256 * 512, 512, 1), dtype="bf16", address=BASE,
                            box=(1, 256, 64), name="W")
    assert spec.dims == (512, 256, 8) and spec.strides_bytes == (1024, 256 * 1024)
    # A size-1 dim's stride is never used: a [1, K] view with an odd stride is still legal.
    spec = check_tensor_map((1, 1000), (3, 1), dtype="bf16", address=BASE, box=(1, 64), name="x")
    assert spec.strides_bytes[0] % 16 == 0


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"shape": (64, 1001), "strides": (1001, 1)},
     r"dim 0 has a stride of 1001 elements = 2002 bytes.*\n  fix: .*multiple of 8 bf16"),
    ({"address": BASE + 8}, r"base address 0x7f0000000008 is not 16-byte aligned"),
    ({"strides": (1, 64)}, r"innermost dim \(dim 1\) has stride 64.*\n  fix: call \.contiguous"),
    ({"box": (300, 64)}, r"box dim 0 = 300 is outside 1\.\.256"),
    ({"box": (128, 128)},
     (r"inner box is 128 bf16 = 256 B, more than the 128B swizzle span.*\n  fix: use an inner "
      r"box of at most 64 elements")),
    ({"box": (128, 12), "swizzle_bytes": 0}, r"inner box extent 12 x 2 B = 24 B is not a multiple"),
    ({"swizzle_bytes": 96}, r"swizzle_bytes=96 is not one of"),
    ({"box": (64,)}, r"box \(64,\) has 1 dims but the tensor has 2"),
    ({"shape": (0, 64), "strides": (64, 1)}, r"dim 0 has extent 0"),
    ({"shape": (1,) * 6, "strides": (1,) * 6, "box": (1,) * 6}, r"rank 6 is outside 1\.\.5"),
    ({"dtype": "i1"}, r"dtype i1 has no TMA element type"),
])
def test_validation_errors(kwargs, match):
    args = {"shape": (256, 64), "strides": (64, 1), "dtype": "bf16", "address": BASE,
            "box": (128, 64), "swizzle_bytes": 128, "name": "A"}
    args.update(kwargs)
    with pytest.raises(LaunchError, match=match) as info:
        check_tensor_map(**args)
    assert str(info.value).startswith("tensor map for A:")


def test_swizzle_spans_for_f32_and_fp8():
    check_tensor_map((128, 32), (32, 1), dtype="f32", address=BASE, box=(64, 32))
    with pytest.raises(LaunchError, match="at most 16 elements"):
        check_tensor_map((128, 32), (32, 1), dtype="f32", address=BASE, box=(64, 32),
                         swizzle_bytes=64)
    spec = check_tensor_map((128, 256), (256, 1), dtype="e4m3", address=BASE, box=(128, 128))
    assert spec.box_bytes == 128 * 128


def test_tensor_map_bytes_roundtrip():
    spec = check_tensor_map((256, 64), (64, 1), dtype="bf16", address=BASE, box=(128, 64))
    words = tuple(range(16))
    tmap = TensorMap(words=words, spec=spec)
    blob = tmap.to_bytes()
    assert len(blob) == 128 and blob[8:16] == (1).to_bytes(8, "little")
    with pytest.raises(ValueError):
        TensorMap(words=(0,) * 15, spec=spec)


def test_make_tensor_map_rejects_cpu_tensors_before_the_driver():
    with pytest.raises(LaunchError, match=r"tensor map for B: the tensor is on cpu.*\n  fix: "
                                          r"B\.to\('cuda'\)"):
        make_tensor_map(torch.zeros(256, 64, dtype=torch.bfloat16), box=(128, 64), name="B")
    with pytest.raises(LaunchError, match="expected a torch.Tensor"):
        make_tensor_map([1, 2, 3], box=(1,), name="B")


def test_l2_promotion_default_and_its_experiment_knob(monkeypatch):
    """Tensor maps promote an L2 miss to 128 bytes unless ARGUS_TMA_L2_PROMOTION names
    another of the driver's sizes; a bad value is a LaunchError that names the variable."""
    import pytest as _pytest

    from argus.errors import LaunchError
    from argus.runtime.tma import default_l2_promotion

    monkeypatch.delenv("ARGUS_TMA_L2_PROMOTION", raising=False)
    assert default_l2_promotion() == 128
    for value in (0, 64, 128, 256):
        monkeypatch.setenv("ARGUS_TMA_L2_PROMOTION", str(value))
        assert default_l2_promotion() == value
    for bad in ("512", "x"):
        monkeypatch.setenv("ARGUS_TMA_L2_PROMOTION", bad)
        with _pytest.raises(LaunchError, match="ARGUS_TMA_L2_PROMOTION"):
            default_l2_promotion()
