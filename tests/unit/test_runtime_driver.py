"""argus.runtime.driver without a GPU: parameter packing, launch-shape checks, and the absence
of import-time side effects."""

from __future__ import annotations

import ctypes
import struct
import subprocess
import sys

import pytest
import torch

from argus.errors import LaunchError
from argus.runtime import (
    Binary,
    TensorMap,
    check_tensor_map,
    f32,
    f64,
    i64,
    launch,
    pack_params,
    u32,
)


def _binary() -> Binary:
    return Binary(cubin=b"", ptx="", log="", arch="sm_90a", kernels=("k",),
                  symbols=(("k", "k"),), resources=(), source_hash="0", key="0" * 64,
                  compiler="test", options=())


def test_pack_params_by_python_type():
    t = torch.zeros(4)
    spec = check_tensor_map((256, 64), (64, 1), dtype="bf16", address=256, box=(128, 64))
    tmap = TensorMap(words=tuple(range(100, 116)), spec=spec)
    packed = pack_params([t, 7, -1, 2.5, tmap, i64(2**40), u32(2**32 - 1), f32(1.0), f64(0.5),
                          True])
    blobs = packed.as_bytes()
    assert blobs[0] == struct.pack("<Q", t.data_ptr())
    assert blobs[1] == struct.pack("<i", 7) and blobs[2] == struct.pack("<i", -1)
    assert blobs[3] == struct.pack("<f", 2.5)
    assert blobs[4] == tmap.to_bytes() and len(blobs[4]) == 128
    assert blobs[5] == struct.pack("<q", 2**40)
    assert blobs[6] == struct.pack("<I", 2**32 - 1)
    assert blobs[7] == struct.pack("<f", 1.0) and blobs[8] == struct.pack("<d", 0.5)
    assert blobs[9] == struct.pack("<i", 1)
    # The pointer array points at each blob.
    pointers = ctypes.cast(packed.address, ctypes.POINTER(ctypes.c_void_p))
    assert pointers[4] == ctypes.addressof(packed.storage[4])


def test_pack_params_errors():
    with pytest.raises(LaunchError, match="does not fit a 32-bit int") as info:
        pack_params([2**31], kernel="gemm")
    assert "i64(value)" in info.value.fix
    with pytest.raises(LaunchError, match="kernel gemm, argument 1: cannot pass a str"):
        pack_params([1, "x"], kernel="gemm")


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"grid": (0, 1), "block": 128}, "grid"),
    ({"grid": (1,), "block": (32, 32, 2)}, "more than 1024 threads"),
    ({"grid": (3, 1), "block": 128, "cluster": (2, 1)},
     r"cluster \(2, 1, 1\) does not divide grid"),
    ({"grid": (1, 1, 1, 1), "block": 128}, "1 to 3 positive integers"),
])
def test_launch_shape_errors_come_before_any_gpu_work(kwargs, match):
    with pytest.raises(LaunchError, match=match):
        launch(_binary(), "k", args=[], **kwargs)


def test_launch_with_cpu_tensor_names_the_argument():
    with pytest.raises(LaunchError, match="argument 1: tensor is on cpu"):
        launch(_binary(), "k", grid=1, block=128, args=[3, torch.zeros(4)])


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_launch_without_a_gpu_says_so():
    with pytest.raises(LaunchError, match="no CUDA device is visible to torch"):
        launch(_binary(), "k", grid=1, block=128, args=[1])


def test_importing_the_runtime_loads_neither_torch_nor_cuda():
    code = ("import sys, argus.runtime, argus.codegen.wgmma\n"
            "bad = [m for m in sys.modules if m.split('.')[0] in ('torch', 'cuda')]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
