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
    function_attributes,
    i32,
    i64,
    launch,
    pack_params,
    u32,
    u64,
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


def test_pack_params_refuses_an_explicit_width_it_would_wrap():
    # a shape symbol of 2^31 packed as i32 (Compiled.prepare) must not become -2^31
    with pytest.raises(LaunchError, match="2147483648 does not fit a i32"):
        pack_params([i32(2**31)], kernel="vt")
    with pytest.raises(LaunchError, match="-1 does not fit a u32"):
        pack_params([u32(-1)], kernel="vt")
    assert pack_params([i32(-(2**31)), u64(2**64 - 1)]).as_bytes()[0] == b"\x00\x00\x00\x80"


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


# --------------------------------------------------------------------------------------------
# The whole launch path against the real cuda.bindings signatures, without a GPU.
#
# cuda.bindings converts every argument (types, enums, handles) before it loads libcuda. On a
# machine without the driver, a call with well-typed arguments therefore fails with
# DynamicLibNotFoundError, and a badly typed one with TypeError. The proxy below calls the real
# function, accepts the first outcome as "signature OK", and returns a plausible result.
# --------------------------------------------------------------------------------------------

class _SignatureCheckingDriver:
    def __init__(self, real, fail: dict[str, int] | None = None):
        self.real = real
        self.calls: list[tuple[str, tuple]] = []
        self.fail = fail or {}

    def _result(self, name: str):
        real = self.real
        ok = real.CUresult.CUDA_SUCCESS
        if name in self.fail:
            return (real.CUresult(self.fail[name]),)
        values = {
            "cuDeviceGet": real.CUdevice(0),
            "cuDevicePrimaryCtxRetain": real.CUcontext(0x1234),
            "cuCtxGetCurrent": real.CUcontext(0),
            "cuModuleLoadData": real.CUmodule(0x10),
            "cuModuleGetFunction": real.CUfunction(0x20),
            "cuDeviceGetAttribute": 232448,
            "cuFuncGetAttribute": 0,
            "cuTensorMapEncodeTiled": real.CUtensorMap(),
            "cuGetErrorName": b"CUDA_ERROR_INVALID_VALUE",
            "cuGetErrorString": b"invalid argument",
        }
        return (ok, values[name]) if name in values else (ok,)

    def __getattr__(self, name):
        attr = getattr(self.real, name)
        if not (name.startswith("cu") and callable(attr) and not isinstance(attr, type)):
            return attr
        from cuda.pathfinder import DynamicLibNotFoundError

        def call(*args):
            try:
                attr(*args)
            except DynamicLibNotFoundError:
                pass  # arguments converted fine; only the driver library is missing
            self.calls.append((name, args))
            return self._result(name)

        return call


@pytest.fixture
def fake_gpu(monkeypatch):
    from cuda.bindings import driver as real

    from argus.runtime import context as context_mod
    from argus.runtime import driver as driver_mod

    try:
        real.cuDriverGetVersion()
        pytest.skip("a CUDA driver is installed: the real driver would run")
    except Exception as exc:  # noqa: BLE001
        if type(exc).__name__ != "DynamicLibNotFoundError":
            pytest.skip(f"unexpected driver probe result {exc!r}")
    proxy = _SignatureCheckingDriver(real)
    for mod in (context_mod, driver_mod):  # the launcher and the context plumbing it imports
        monkeypatch.setattr(mod, "_driver", lambda: proxy)
    for cache in (driver_mod._MODULES, driver_mod._FUNCTIONS, driver_mod._SMEM_OPT_IN,
                  context_mod._CONTEXTS):
        cache.clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "init", lambda: None)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)

    class _Stream:
        cuda_stream = 0x77

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: _Stream())
    yield proxy
    for cache in (driver_mod._MODULES, driver_mod._FUNCTIONS, driver_mod._SMEM_OPT_IN,
                  context_mod._CONTEXTS):
        cache.clear()


class _FakeCudaTensor:
    is_cuda = True

    def __init__(self, ptr: int):
        self.ptr = ptr
        self.device = torch.device("cuda", 0)

    def data_ptr(self) -> int:
        return self.ptr


def _cubin_binary() -> Binary:
    return Binary(cubin=b"\x7fELF-not-really", ptx="", log="", arch="sm_90a", kernels=("k",),
                  symbols=(("k", "k_sym"),), resources=(), source_hash="1", key="1" * 64,
                  compiler="test", options=())


def test_launch_path_with_real_signatures(fake_gpu):
    from argus.runtime.tma import encode_tensor_map

    spec = check_tensor_map((4096, 4096), (4096, 1), dtype="bf16", address=0x7F0000000000,
                            box=(128, 64), name="A")
    tmap = encode_tensor_map(spec, device=0, name="A")
    assert len(tmap.to_bytes()) == 128
    encode = next(args for name, args in fake_gpu.calls if name == "cuTensorMapEncodeTiled")
    assert encode[1] == 2 and encode[2] == 0x7F0000000000
    assert [int(x) for x in encode[3]] == [4096, 4096] and [int(x) for x in encode[5]] == [64, 128]

    binary = _cubin_binary()
    c = _FakeCudaTensor(0x7F0000100000)
    launch(binary, "k", grid=(8,), block=(384,), args=[tmap, c, 4096, i64(7), 1.5],
           smem_bytes=197696, cluster=(2, 1, 1), sync=True)
    names = [name for name, _ in fake_gpu.calls]
    for expected in ("cuInit", "cuDevicePrimaryCtxRetain", "cuModuleLoadData",
                     "cuModuleGetFunction", "cuDeviceGetAttribute", "cuFuncSetAttribute",
                     "cuLaunchKernelEx", "cuStreamSynchronize"):
        assert expected in names, expected
    set_attr = next(args for name, args in fake_gpu.calls if name == "cuFuncSetAttribute")
    assert set_attr[2] == 197696
    config = next(args for name, args in fake_gpu.calls if name == "cuLaunchKernelEx")[0]
    assert (config.gridDimX, config.blockDimX, config.sharedMemBytes) == (8, 384, 197696)
    assert config.numAttrs == 1 and config.attrs[0].value.clusterDim.x == 2
    assert int(config.hStream) == 0x77
    getfn = next(args for name, args in fake_gpu.calls if name == "cuModuleGetFunction")
    assert getfn[1] == b"k_sym"

    # A second launch reuses the module and the smem opt-in.
    before = names.count("cuModuleLoadData"), names.count("cuFuncSetAttribute")
    launch(binary, "k", grid=(8,), block=(384,), args=[tmap, c, 1, 2, 3.0], smem_bytes=197696)
    names = [name for name, _ in fake_gpu.calls]
    assert (names.count("cuModuleLoadData"), names.count("cuFuncSetAttribute")) == before

    attrs = function_attributes(binary, "k")
    assert attrs.registers == 0 and attrs.local_bytes == 0


def test_launch_failure_names_the_cuda_error(fake_gpu):
    fake_gpu.fail["cuLaunchKernelEx"] = 1  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(LaunchError) as info:
        launch(_cubin_binary(), "k", grid=2, block=128, args=[_FakeCudaTensor(256)])
    text = str(info.value)
    assert "launch of kernel k (grid (2, 1, 1), block (128, 1, 1), 0 B dynamic smem) failed" \
        in text
    assert "CUDA_ERROR_INVALID_VALUE (invalid argument)" in text


def test_too_much_shared_memory_is_caught_before_the_launch(fake_gpu):
    with pytest.raises(LaunchError, match="asks for 300000 B of dynamic"):
        launch(_cubin_binary(), "k", grid=1, block=128, args=[], smem_bytes=300000)
    assert "cuLaunchKernelEx" not in [name for name, _ in fake_gpu.calls]
