"""Inputs handed from the judge to a candidate process through CUDA IPC, in memory that holds
nothing else.

A CUDA IPC handle of a torch tensor opens the whole caching-allocator segment the tensor lies
in, and the judge's segments also hold its float64 references and other tasks' inputs: a
candidate that mapped one could read or overwrite them. torch.cuda.MemPool staging (tried
first) is not usable in the judge: a pool destroyed on one thread while another thread
allocates into its own pool aborts the process (`captures_underway.empty()` in the caching
allocator, seen on the H200 on 2026-12-02), and the pools' memory was not returned for the
other tasks (most big tasks then ran out of GPU memory).

So each hand-over copies its tensors into ONE buffer of its own from cudaMalloc (outside the
caching allocator), exports that buffer's IPC handle, and frees it once the candidate's
request has returned (judge.ReferenceSession.free_hand_over), else when the next hand-over
replaces it or the session closes. The candidate maps the buffer, copies each tensor into its
own memory (same strides), and unmaps it before its forward runs."""
from __future__ import annotations

import base64
import ctypes
import os
from typing import Any

import torch

_ALIGN = 256                 # every tensor starts 256-byte aligned inside the buffer
_IPC_HANDLE_BYTES = 64       # sizeof(cudaIpcMemHandle_t)
_LAZY_PEER_ACCESS = 1        # cudaIpcMemLazyEnablePeerAccess


class _IpcMemHandle(ctypes.Structure):
    """cudaIpcMemHandle_t: 64 opaque bytes, passed BY VALUE to cudaIpcOpenMemHandle (a bare
    ctypes array would be passed as a pointer: the runtime then reads garbage and answers
    cudaErrorInvalidValue, as it did on the H200)."""
    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_BYTES)]


class CudaIpcError(RuntimeError):
    """The CUDA runtime refused a call (its error code and name in the message)."""


_LIB: ctypes.CDLL | None = None


def _cudart() -> ctypes.CDLL:
    """The CUDA runtime library torch itself loaded (found in this process's memory map, so
    both sides use the runtime their torch was built with), else the usual sonames."""
    global _LIB
    if _LIB is not None:
        return _LIB
    torch.cuda.init()
    candidates: list[str] = []
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "libcudart.so" in os.path.basename(path) and path not in candidates:
                    candidates.append(path)
    except OSError:
        pass
    candidates += ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    errors = []
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
        except OSError as exc:
            errors.append(f"{name}: {exc}")
            continue
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]
        lib.cudaIpcGetMemHandle.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        lib.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(ctypes.c_void_p), _IpcMemHandle,
                                             ctypes.c_uint]
        lib.cudaIpcCloseMemHandle.argtypes = [ctypes.c_void_p]
        lib.cudaGetErrorName.restype = ctypes.c_char_p
        _LIB = lib
        return lib
    raise CudaIpcError("no CUDA runtime library could be loaded: " + "; ".join(errors))


def _check(code: int, what: str) -> None:
    if code != 0:
        name = _cudart().cudaGetErrorName(code)
        raise CudaIpcError(f"{what} failed: CUDA error {code} "
                           f"({name.decode() if name else '?'})")


class _DeviceBytes:
    """`nbytes` of device memory at `ptr` as an object torch.as_tensor can wrap (no copy,
    no ownership: the caller keeps the memory alive)."""

    def __init__(self, ptr: int, nbytes: int) -> None:
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1",
                                         "data": (ptr, False), "version": 3, "strides": None}


def _bytes_tensor(ptr: int, nbytes: int, device: int) -> torch.Tensor:
    return torch.as_tensor(_DeviceBytes(ptr, nbytes), device=f"cuda:{device}")


def _staging_layout(t: torch.Tensor) -> tuple[list[int], list[int]]:
    """The strides to stage `t` with: its own when no two of its elements share memory (a
    kernel may depend on the layout get_inputs gave; a transposed or sliced view keeps it),
    else contiguous (a broadcast view becomes dense)."""
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1)
    reach, distinct = 1, True
    for s, n in dims:               # each stride must step past everything the smaller ones reach
        if s < reach:
            distinct = False
            break
        reach = s * n
    if distinct:
        return list(t.shape), list(t.stride())
    contiguous, step = [], 1
    for n in reversed(t.shape):
        contiguous.insert(0, step)
        step *= max(n, 1)
    return list(t.shape), contiguous


# one tensor's place in the staging buffer: (byte offset, shape, stride, elements spanned)
_Slot = tuple[int, list[int], list[int], int]


def _handover_device(values: list[Any], dtypes: dict[str, torch.dtype]) -> int:
    """The one device all the hand-over's tensors are on (the current one when there are none);
    refused unless every tensor is a non-empty CUDA tensor of a dtype the candidate knows."""
    tensors = [v for v in values if isinstance(v, torch.Tensor)]
    for t in tensors:
        if t.device.type != "cuda" or t.numel() == 0 or str(t.dtype) not in dtypes:
            raise CudaIpcError(f"a {t.dtype} {t.device} tensor of {t.numel()} elements "
                               "cannot be handed over by CUDA IPC")
    devices = {t.device.index for t in tensors}
    if len(devices) > 1:
        raise CudaIpcError(f"inputs on several devices {sorted(devices)}")
    return devices.pop() if devices else torch.cuda.current_device()


def _staging_plan(values: list[Any]) -> tuple[list[_Slot | None], int]:
    """Each value's slot in the buffer (None for a plain value), every slot _ALIGN-aligned,
    and the buffer's size in bytes (at least _ALIGN: a hand-over without tensors still has a
    buffer to export)."""
    plan: list[_Slot | None] = []
    total = 0
    for v in values:
        if not isinstance(v, torch.Tensor):
            plan.append(None)
            continue
        shape, stride = _staging_layout(v)
        span = 1 + sum((n - 1) * s for n, s in zip(shape, stride))
        plan.append((total, shape, stride, span))
        total += -(-span * v.element_size() // _ALIGN) * _ALIGN
    return plan, max(total, _ALIGN)


class StagedInputs:
    """Copies of a hand-over's CUDA tensors in one cudaMalloc buffer, and the handles a
    candidate opens them by. `free()` (or the next hand-over) releases the buffer."""

    def __init__(self, values: list[Any], dtypes: dict[str, torch.dtype]) -> None:
        self.ptr: int | None = None
        self.handles: list[dict[str, Any]] = []
        device = _handover_device(values, dtypes)
        plan, nbytes = _staging_plan(values)
        with torch.cuda.device(device):
            self._allocate(nbytes, device)
            try:
                self._copy_in(values, plan, nbytes)
                handle = self._export()
            except BaseException:
                self.free()
                raise
        self.buffer = {"handle": handle, "nbytes": nbytes, "device": device}
        for h in self.handles:
            if "staged" in h:
                h["staged"]["buffer"] = self.buffer

    def _allocate(self, nbytes: int, device: int) -> None:
        """The buffer, from cudaMalloc (outside torch's caching allocator: see the module)."""
        ptr = ctypes.c_void_p()
        _check(_cudart().cudaMalloc(ctypes.byref(ptr), nbytes), "cudaMalloc")
        self.ptr, self.device = int(ptr.value or 0), device

    def _copy_in(self, values: list[Any], plan: list[_Slot | None], nbytes: int) -> None:
        """Zero the buffer, copy each tensor into its slot and record every value's handle."""
        assert self.ptr is not None
        buffer = _bytes_tensor(self.ptr, nbytes, self.device)
        # cudaMalloc may hand back memory this process freed before (the judge's
        # float64 references after empty_cache): the alignment padding and the gaps of
        # a sliced view staged with its strides are never copied to, and a candidate
        # can map the whole buffer, so it starts zeroed
        buffer.zero_()
        for v, slot in zip(values, plan):
            if slot is None:
                self.handles.append({"value": v})
                continue
            offset, shape, stride, span = slot
            size = span * v.element_size()
            dst = buffer[offset:offset + size].view(v.dtype).as_strided(shape, stride)
            dst.copy_(v.detach())
            self.handles.append({"staged": {
                "offset_bytes": offset, "shape": shape, "stride": stride,
                "dtype": str(v.dtype)}})
        # the candidate reads on its own stream in another process: the copies must be
        # complete before any handle leaves this process
        torch.cuda.current_stream(self.device).synchronize()

    def _export(self) -> str:
        """The buffer's IPC handle, base64 (it travels in the candidate's JSON request)."""
        raw = ctypes.create_string_buffer(_IPC_HANDLE_BYTES)
        _check(_cudart().cudaIpcGetMemHandle(raw, ctypes.c_void_p(self.ptr)),
               "cudaIpcGetMemHandle")
        return base64.b64encode(raw.raw).decode("ascii")

    def free(self) -> None:
        if self.ptr is not None:
            ptr, self.ptr = self.ptr, None
            with torch.cuda.device(self.device):
                _check(_cudart().cudaFree(ctypes.c_void_p(ptr)), "cudaFree")

    def __del__(self) -> None:
        try:
            self.free()
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver frees it anyway
            pass


def _staged_view_plan(h: dict[str, Any], dtypes: dict[str, torch.dtype]
                      ) -> tuple[torch.dtype, list[int], list[int], int, int]:
    """(dtype, shape, stride, byte offset, bytes spanned) of one staged input, refused
    unless it lies inside its buffer (checked before anything is mapped)."""
    dtype = dtypes[str(h["dtype"])]
    shape, stride = [int(x) for x in h["shape"]], [int(x) for x in h["stride"]]
    offset, nbytes = int(h["offset_bytes"]), int(h["buffer"]["nbytes"])
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(stride) != len(shape) or any(s < 0 for s in stride) or any(n <= 0 for n in shape):
        raise CudaIpcError("a staged input has a bad shape or stride")
    span = (1 + sum((n - 1) * s for n, s in zip(shape, stride))) * itemsize
    if offset < 0 or offset % itemsize or offset + span > nbytes:
        raise CudaIpcError("a staged input does not fit the judge's buffer")
    return dtype, shape, stride, offset, span


def open_staged(items: list[dict[str, Any]], dtypes: dict[str, torch.dtype]) -> list[Any]:
    """In the candidate: the values of a hand-over (`StagedInputs.handles`), each CUDA tensor
    copied into this process's own memory with the strides it was staged with; the judge's
    buffer is unmapped before this returns. Only plain values are read from the items."""
    plans = [_staged_view_plan(item["staged"], dtypes) if "staged" in item else None
             for item in items]
    values: list[Any] = [None] * len(items)
    mapped: list[int] = []                      # every mapping opened, closed in `finally`
    wholes: dict[str, torch.Tensor] = {}
    try:
        for i, (item, plan) in enumerate(zip(items, plans)):
            if plan is None:
                values[i] = item["value"]
                continue
            buf = item["staged"]["buffer"]
            device, nbytes = int(buf["device"]), int(buf["nbytes"])
            if buf["handle"] not in wholes:
                raw = base64.b64decode(buf["handle"])
                if len(raw) != _IPC_HANDLE_BYTES:
                    raise CudaIpcError("a staged input's IPC handle has the wrong size")
                ptr = ctypes.c_void_p()
                with torch.cuda.device(device):
                    _check(_cudart().cudaIpcOpenMemHandle(
                        ctypes.byref(ptr), _IpcMemHandle.from_buffer_copy(raw),
                        _LAZY_PEER_ACCESS), "cudaIpcOpenMemHandle")
                mapped.append(int(ptr.value or 0))
                wholes[buf["handle"]] = _bytes_tensor(mapped[-1], nbytes, device)
            dtype, shape, stride, offset, span = plan
            view = wholes[buf["handle"]][offset:offset + span].view(dtype).as_strided(
                shape, stride)
            own = torch.empty_strided(shape, stride, dtype=dtype, device=view.device)
            own.copy_(view)
            values[i] = own
    finally:
        if mapped:
            # every copy done before the judge's buffer is unmapped, also when a later one
            # failed (out of memory): a copy still reading an unmapped buffer is an illegal
            # address, a sticky error that would replace the real one
            try:
                torch.cuda.synchronize()
            finally:
                for ptr in mapped:
                    _cudart().cudaIpcCloseMemHandle(ctypes.c_void_p(ptr))
    return values
