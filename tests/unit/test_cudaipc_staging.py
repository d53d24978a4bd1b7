"""cudaipc.StagedInputs on the CPU: the judge's side of the CUDA IPC hand-over, its CUDA
runtime calls replaced by a fake that logs them and its device buffer by a CPU byte tensor
(tests/gpu/test_kernelbench_handover_gpu.py runs the real one). What it must keep: every
tensor in one buffer at 256-byte aligned offsets with the strides it came with, the buffer
zeroed first (cudaMalloc may return memory the judge freed), the copies complete before the
handle is exported, and the buffer freed when a step fails."""

import base64
import contextlib
import ctypes

import pytest

torch = pytest.importorskip("torch")

from argus.bench.kernelbench import cudaipc  # noqa: E402
from argus.bench.kernelbench.worker import _DTYPES  # noqa: E402

PTR = 8192
STALE = 0xAB          # what a reused allocation holds before staging


class _FakeRuntime:
    def __init__(self, log, export_fails=False):
        self.log, self.export_fails = log, export_fails

    def cudaMalloc(self, ptr, nbytes):
        ptr._obj.value = PTR
        self.log.append(("malloc", nbytes))
        return 0

    def cudaIpcGetMemHandle(self, raw, ptr):
        self.log.append(("export", ptr.value))
        if self.export_fails:
            return 1
        ctypes.memmove(raw, bytes(range(64)), 64)
        return 0

    def cudaFree(self, ptr):
        self.log.append(("free", ptr.value))
        return 0

    def cudaGetErrorName(self, code):
        return b"cudaErrorInvalidValue"


@pytest.fixture
def staging(monkeypatch):
    """(log, buffers): the runtime calls in order and the CPU tensors standing for device
    buffers, by address. Tensors are accepted as if on device 0."""
    log: list = []
    buffers: dict = {}

    def bytes_tensor(ptr, nbytes, device):
        buffers[ptr] = torch.full((nbytes,), STALE, dtype=torch.uint8)
        return buffers[ptr]

    class _Stream:
        def synchronize(self):
            log.append(("synchronize",))

    monkeypatch.setattr(cudaipc, "_cudart", lambda: _FakeRuntime(log))
    monkeypatch.setattr(cudaipc, "_bytes_tensor", bytes_tensor)
    monkeypatch.setattr(cudaipc, "_handover_device", lambda values, dtypes: 0)
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda d=None: _Stream())
    return log, buffers


def test_a_cpu_tensor_is_refused_before_any_runtime_call(monkeypatch):
    def no_runtime():
        raise AssertionError("the runtime was called")

    monkeypatch.setattr(cudaipc, "_cudart", no_runtime)
    with pytest.raises(cudaipc.CudaIpcError, match="cannot be handed over"):
        cudaipc.StagedInputs([torch.zeros(3)], _DTYPES)


def test_tensors_are_staged_aligned_with_their_strides_in_a_zeroed_buffer(staging):
    log, buffers = staging
    x = torch.arange(15, dtype=torch.float32).reshape(3, 5).T    # a transposed view, 60 bytes
    h = torch.tensor([1.5, -2.0, 3.25], dtype=torch.float16)      # 6 bytes
    staged = cudaipc.StagedInputs([x, 7, h], _DTYPES)
    assert log == [("malloc", 512), ("synchronize",), ("export", PTR)]
    buffer = {"handle": base64.b64encode(bytes(range(64))).decode("ascii"), "nbytes": 512,
              "device": 0}
    assert staged.buffer == buffer
    assert staged.handles == [
        {"staged": {"offset_bytes": 0, "shape": [5, 3], "stride": [1, 5],
                    "dtype": "torch.float32", "buffer": buffer}},
        {"value": 7},
        {"staged": {"offset_bytes": 256, "shape": [3], "stride": [1],
                    "dtype": "torch.float16", "buffer": buffer}}]
    raw = buffers[PTR]
    assert torch.equal(raw[:60].view(torch.float32).as_strided((5, 3), (1, 5)), x)
    assert torch.equal(raw[256:262].view(torch.float16), h)
    assert not raw[60:256].any() and not raw[262:].any()     # padding zeroed, never stale
    staged.free()
    staged.free()                                            # once only
    assert log[-1] == ("free", PTR) and log.count(("free", PTR)) == 1


def test_the_buffer_is_freed_when_the_export_fails(staging, monkeypatch):
    """By the constructor itself (the finalizer, a backstop, is switched off here)."""
    log, _ = staging
    monkeypatch.setattr(cudaipc.StagedInputs, "__del__", lambda self: None)
    monkeypatch.setattr(cudaipc, "_cudart", lambda: _FakeRuntime(log, export_fails=True))
    with pytest.raises(cudaipc.CudaIpcError, match="cudaIpcGetMemHandle failed"):
        cudaipc.StagedInputs([torch.ones(4)], _DTYPES)
    assert log == [("malloc", 256), ("synchronize",), ("export", PTR), ("free", PTR)]
