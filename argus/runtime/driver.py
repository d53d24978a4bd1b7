"""Launch compiled kernels on torch tensors through the CUDA driver API (cuda-bindings).

One job: Binary + kernel name + launch shape + Python arguments -> a kernel running on torch's
current stream. Nothing happens at import: the driver is initialised at the first launch, after
torch has created its context, and we use that same (primary) context so torch's pointers and
streams are valid for our kernels.

Invariants:
  * every driver call's status is checked; failures raise LaunchError naming the CUDA error,
    the kernel and the launch shape;
  * a module is loaded once per (binary key, device) and kept in an explicit cache;
  * dynamic shared memory above 48 KB is opted into
    (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) before the launch that needs it, after
    a check against the device's opt-in limit;
  * parameters are packed by Python type: tensor -> device pointer (u64), int -> int32
    (range-checked; wrap in i64()/u32()/u64() for other widths), float -> float32,
    TensorMap -> its 128-byte blob by value (for `const __grid_constant__ ag::TensorMap`).
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from argus.errors import LaunchError
from argus.runtime.compile import Binary
from argus.runtime.context import _driver, _require_cuda, check_cuda, ensure_context
from argus.runtime.tma import TensorMap

# Explicit caches: (binary key, device) -> CUmodule; (binary key, device, kernel) -> CUfunction;
# same key -> dynamic smem bytes already opted into. (device -> primary context: context.py)
_MODULES: dict[tuple[str, int], Any] = {}
_FUNCTIONS: dict[tuple[str, int, str], Any] = {}
_SMEM_OPT_IN: dict[tuple[str, int, str], int] = {}


# --------------------------------------------------------------------------------------------
# Scalar parameters of explicit width
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Scalar:
    """A kernel parameter with an explicit C type (plain ints are int32, floats are float32)."""

    ctype: str      # one of _CTYPES
    value: int | float


_CTYPES: dict[str, Any] = {
    "i32": ctypes.c_int32, "u32": ctypes.c_uint32, "i64": ctypes.c_int64,
    "u64": ctypes.c_uint64, "f32": ctypes.c_float, "f64": ctypes.c_double,
}


_INT_BITS = {"i32": 32, "u32": 32, "i64": 64, "u64": 64}


def i32(value: int) -> Scalar:
    return Scalar("i32", int(value))


def u32(value: int) -> Scalar:
    return Scalar("u32", int(value))


def i64(value: int) -> Scalar:
    return Scalar("i64", int(value))


def u64(value: int) -> Scalar:
    return Scalar("u64", int(value))


def f32(value: float) -> Scalar:
    return Scalar("f32", float(value))


def f64(value: float) -> Scalar:
    return Scalar("f64", float(value))


@dataclass(frozen=True)
class PackedParams:
    """ctypes storage of each parameter and the void*[] array cuLaunchKernelEx reads."""

    storage: tuple[Any, ...]
    pointers: Any
    # per parameter: the device address it carries when it is a tensor's pointer or a tensor
    # map's global address, else None (what `repointed` may replace)
    addresses: tuple[int | None, ...] = ()

    @property
    def address(self) -> int:
        return ctypes.addressof(self.pointers)

    def as_bytes(self) -> list[bytes]:
        """Each parameter's bytes, as the kernel will see them (for tests)."""
        return [ctypes.string_at(ctypes.addressof(o), ctypes.sizeof(o)) for o in self.storage]


def pack_params(args: Sequence[Any], kernel: str = "kernel") -> PackedParams:
    """Convert Python launch arguments to the by-value blobs the driver copies."""
    storage: list[Any] = []
    addresses: list[int | None] = []
    for index, arg in enumerate(args):
        addresses.append(arg.spec.address if isinstance(arg, TensorMap) else
                         arg.data_ptr() if not isinstance(arg, Scalar) and
                         hasattr(arg, "data_ptr") and callable(arg.data_ptr) else None)
        where = f"kernel {kernel}, argument {index}"
        if isinstance(arg, Scalar):
            ctype = _CTYPES.get(arg.ctype)
            if ctype is None:
                raise LaunchError(f"{where}: unknown scalar type {arg.ctype!r}")
            # ctypes wraps an integer silently (a shape symbol or runtime scalar of 2^31
            # packed as -2^31: offsets wrap, a bounds check drops the elements)
            bits = _INT_BITS.get(arg.ctype)
            if bits is not None:
                low, high = (0, 2**bits) if arg.ctype[0] == "u" else \
                    (-(2**(bits - 1)), 2**(bits - 1))
                if not low <= arg.value < high:
                    raise LaunchError(f"{where}: {arg.value} does not fit a {arg.ctype} "
                                      f"parameter", fix="a 64-bit parameter (argus.runtime."
                                      "i64); a shape or scalar past 2^31 needs a kernel that "
                                      "takes it as long long")
            storage.append(ctype(arg.value))
        elif isinstance(arg, TensorMap):
            storage.append((ctypes.c_uint64 * 16)(*arg.words))
        elif hasattr(arg, "data_ptr") and callable(arg.data_ptr):
            storage.append(ctypes.c_uint64(arg.data_ptr()))
        elif isinstance(arg, bool):
            storage.append(ctypes.c_int32(int(arg)))
        elif isinstance(arg, int):
            if not -(2**31) <= arg < 2**31:
                raise LaunchError(f"{where}: {arg} does not fit a 32-bit int parameter",
                                  fix="wrap it as argus.runtime.i64(value) and declare the "
                                      "kernel parameter `long long`")
            storage.append(ctypes.c_int32(arg))
        elif isinstance(arg, float):
            storage.append(ctypes.c_float(arg))
        else:
            raise LaunchError(f"{where}: cannot pass a {type(arg).__name__} to a kernel",
                              fix="pass a torch tensor, an int, a float, a TensorMap, or a "
                                  "Scalar (argus.runtime.i64(...), f64(...), ...)")
    return _packed(storage, addresses)


_TMAP_BLOB = ctypes.c_uint64 * 16     # a CUtensorMap by value (64-byte aligned in the ABI)


def _packed(storage: Sequence[Any], addresses: Sequence[int | None]) -> PackedParams:
    pointers = (ctypes.c_void_p * max(1, len(storage)))(
        *[ctypes.addressof(obj) for obj in storage])
    return PackedParams(tuple(storage), pointers, tuple(addresses))


def repack(params: PackedParams, moved: dict[int, int], kernel: str = "kernel") -> PackedParams:
    """`params` with every device address in `moved` (old -> new) replaced: a tensor's pointer
    rewritten, a tensor map re-pointed by cuTensorMapReplaceAddress (its dims, strides, box,
    swizzle and L2 promotion kept: the caller vouches that the tensors at the new addresses
    have the old ones' shapes, strides and dtype, and alignment). Other parameters are shared
    with `params` (never written after packing)."""
    storage, addresses = list(params.storage), list(params.addresses)
    for index, address in enumerate(params.addresses):
        new = moved.get(address) if address is not None else None
        if new is None or new == address:
            continue
        if isinstance(storage[index], ctypes.c_uint64):
            storage[index] = ctypes.c_uint64(new)
        else:   # a tensor map's 128-byte blob, copied in and out by address (reading
            # CUtensorMap.opaque builds 16 Python objects: 5x the time)
            driver = _driver()
            tmap = driver.CUtensorMap()
            ctypes.memmove(tmap.getPtr(), storage[index], 128)
            check_cuda(driver.cuTensorMapReplaceAddress(tmap, new),
                       f"cuTensorMapReplaceAddress for kernel {kernel}, argument {index} "
                       f"(address {new:#x})", fix="the new address must keep the tensor "
                       "map's 16-byte alignment")
            storage[index] = _TMAP_BLOB()
            ctypes.memmove(storage[index], tmap.getPtr(), 128)
        addresses[index] = new
    return _packed(storage, addresses)


# --------------------------------------------------------------------------------------------
# Driver plumbing (the driver handle and the context: context.py)
# --------------------------------------------------------------------------------------------

def _current_device() -> int:
    import torch

    _require_cuda()
    return torch.cuda.current_device()


def current_stream(index: int) -> int:
    """The raw handle of torch's current stream on device `index`, for a kept LaunchPlan's
    `launch`: torch's private C accessor where there is one (one C call; torch.cuda.
    current_stream, which LaunchPlan() reads, builds a Python Stream object per call), else
    the public one. The ops that replay plans (attention, decode, the im2col route) read it
    once a call."""
    return _raw_stream()(index)


@functools.lru_cache(maxsize=None)
def _raw_stream():
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    return raw if raw is not None else (lambda i: torch.cuda.current_stream(i).cuda_stream)


def get_function(binary: Binary, kernel: str, device: int | None = None) -> Any:
    """The CUfunction of `kernel`, loading the module on `device` (default: torch's current)."""
    device = _current_device() if device is None else device
    ensure_context(device)
    key = (binary.key, device, kernel)
    if key in _FUNCTIONS:
        return _FUNCTIONS[key]
    driver = _driver()
    module = _MODULES.get((binary.key, device))
    if module is None:
        if binary.cubin:
            image = ctypes.create_string_buffer(binary.cubin, len(binary.cubin))
        else:  # PTX-only binary (compute_XX target): the driver JIT-compiles it
            image = ctypes.create_string_buffer(binary.ptx.encode() + b"\x00")
        module = check_cuda(driver.cuModuleLoadData(ctypes.addressof(image)),
                        f"cuModuleLoadData ({binary.arch} module of {', '.join(binary.kernels)})",
                        fix="the cubin targets " + binary.arch + "; run on a GPU of that "
                            "architecture (sm_90a: H100/H200)")
        _MODULES[(binary.key, device)] = module
    symbol = binary.symbol(kernel)
    function = check_cuda(driver.cuModuleGetFunction(module, symbol.encode()),
                      f"cuModuleGetFunction({symbol})")
    _FUNCTIONS[key] = function
    return function


@dataclass(frozen=True)
class FunctionAttributes:
    """What the driver says about a loaded kernel (the on-GPU resource report)."""

    registers: int
    local_bytes: int          # per-thread local memory (spills + stack)
    static_smem: int
    const_bytes: int
    max_threads: int
    max_dynamic_smem: int
    binary_version: int


def function_attributes(binary: Binary, kernel: str, device: int | None = None
                        ) -> FunctionAttributes:
    """Query CU_FUNC_ATTRIBUTE_* of a kernel (loads its module if needed)."""
    driver = _driver()
    function = get_function(binary, kernel, device)
    attr = driver.CUfunction_attribute

    def get(which: Any) -> int:
        result = driver.cuFuncGetAttribute(which, function)
        return int(check_cuda(result, f"cuFuncGetAttribute({which})"))

    return FunctionAttributes(
        registers=get(attr.CU_FUNC_ATTRIBUTE_NUM_REGS),
        local_bytes=get(attr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
        static_smem=get(attr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
        const_bytes=get(attr.CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES),
        max_threads=get(attr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        max_dynamic_smem=get(attr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
        binary_version=get(attr.CU_FUNC_ATTRIBUTE_BINARY_VERSION),
    )


def _dims(value: int | Sequence[int], what: str, kernel: str) -> tuple[int, int, int]:
    dims = (value,) if isinstance(value, int) else tuple(int(v) for v in value)
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise LaunchError(f"kernel {kernel}: {what} {value!r} must be 1 to 3 positive integers",
                          fix=f"pass {what} like (x,), (x, y) or (x, y, z) with every entry >= 1")
    return (dims + (1, 1))[:3]  # type: ignore[return-value]


def _opt_in_smem(binary: Binary, kernel: str, device: int, function: Any, smem: int) -> None:
    key = (binary.key, device, kernel)
    if smem <= 48 * 1024 or _SMEM_OPT_IN.get(key, 0) >= smem:
        return
    driver = _driver()
    handle = check_cuda(driver.cuDeviceGet(device), f"cuDeviceGet({device})")
    limit = int(check_cuda(driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, handle),
        "cuDeviceGetAttribute(MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)"))
    static = int(check_cuda(driver.cuFuncGetAttribute(
        driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function),
        "cuFuncGetAttribute(SHARED_SIZE_BYTES)"))
    if smem + static > limit:
        raise LaunchError(
            f"kernel {kernel} asks for {smem} B of dynamic + {static} B of static shared memory; "
            f"device {device} allows {limit} B per block",
            fix="use fewer pipeline stages or smaller tiles")
    check_cuda(driver.cuFuncSetAttribute(
        function, driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
        smem), f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={smem}) for {kernel}")
    _SMEM_OPT_IN[key] = smem


def _launch_device(args: Sequence[Any], kernel: str) -> int:
    """The device of the CUDA tensor arguments (all must agree), else torch's current device."""
    devices = {}
    for index, arg in enumerate(args):
        if isinstance(arg, TensorMap):
            arg = arg.tensor
        if arg is not None and hasattr(arg, "is_cuda") and hasattr(arg, "device"):
            if not arg.is_cuda:
                raise LaunchError(
                    f"kernel {kernel}, argument {index}: tensor is on {arg.device}, not on a GPU",
                    fix="move it to the GPU first: tensor.to('cuda')")
            devices.setdefault(arg.device.index, index)
    if len(devices) > 1:
        listing = ", ".join(f"argument {i} on cuda:{d}" for d, i in devices.items())
        raise LaunchError(f"kernel {kernel}: tensors on different GPUs ({listing})",
                          fix="move every tensor to one device")
    return next(iter(devices)) if devices else _current_device()


@dataclass(frozen=True)
class LaunchPlan:
    """A launch with everything but the stream resolved: function handle, launch config and
    packed parameters (it keeps the argument objects alive). Calling it costs one
    cuLaunchKernelEx, which is what benchmarks and repeated launches want. Thread-safe: each
    call sets the config's stream under the plan's lock (cached plans are shared process-wide,
    and two threads may launch one plan on different streams)."""

    kernel: str
    device: int
    function: Any = field(repr=False)
    config: Any = field(repr=False)
    params: PackedParams = field(repr=False)
    shape: str
    args: tuple[Any, ...] = field(repr=False, default=())
    lock: Any = field(repr=False, compare=False, default_factory=threading.Lock)

    def __call__(self, stream: Any = None, sync: bool = False) -> None:
        """Launch on `stream` (torch.cuda.Stream, raw CUstream int, or None for torch's
        current stream of the plan's device); sync=True waits and reports faults here."""
        if stream is None:
            import torch

            handle = torch.cuda.current_stream(self.device).cuda_stream
        elif hasattr(stream, "cuda_stream"):
            handle = stream.cuda_stream
        else:
            handle = int(stream)
        self.launch(handle)
        if sync:
            check_cuda(_driver().cuStreamSynchronize(_driver().CUstream(handle)),
                       f"kernel {self.kernel} ({self.shape}) while running",
                       fix="an illegal address or a trap inside the kernel; rerun under "
                           "compute-sanitizer to locate it")

    def repointed(self, moved: dict[int, int]) -> LaunchPlan:
        """This launch on other buffers of the same layouts: each device address in `moved`
        (old -> new) replaced in the parameters (`repack`), the function, launch shape and
        lock shared (the config's stream is set under the lock). For a repeated call on new
        buffers at a fraction of a prepare's host time; the caller checks that nothing but
        the addresses changed."""
        return LaunchPlan(kernel=self.kernel, device=self.device, function=self.function,
                          config=self.config, params=repack(self.params, moved, self.kernel),
                          shape=self.shape, lock=self.lock)

    def launch(self, handle: int) -> None:
        """Launch on the raw CUstream `handle` (an int): the hot path of ops that read torch's
        current stream themselves (one C call, where torch.cuda.current_stream builds a
        Stream object)."""
        driver = _driver()
        ensure_context(self.device)
        with self.lock:
            self.config.hStream = driver.CUstream(handle)
            status = driver.cuLaunchKernelEx(self.config, self.function, self.params.address, 0)
        if int(status[0]) != 0:
            check_cuda(status, f"launch of kernel {self.kernel} ({self.shape})")


def launch_attributes(cluster: tuple[int, int, int] | None, pdl: bool) -> list[Any]:
    """The CUlaunchAttributes of a launch (no device needed): the cluster shape, and
    programmatic stream serialization for a kernel that waits for its predecessor."""
    driver = _driver()
    attrs = []
    if cluster is not None:
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    if pdl:
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    return attrs


def prepare_launch(binary: Binary, kernel: str, *, grid: int | Sequence[int],
                   block: int | Sequence[int], args: Sequence[Any], smem_bytes: int = 0,
                   cluster: Sequence[int] | None = None, pdl: bool = False) -> LaunchPlan:
    """Check the launch shape and arguments, load the kernel on the arguments' device, opt into
    its dynamic shared memory and pack its parameters; return the ready-to-call LaunchPlan.

    cluster: thread-block cluster shape (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION); must divide
    the grid.
    pdl: programmatic dependent launch (CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION):
    the kernel may start before the previous kernel of the stream completes, once that kernel
    triggered (griddepcontrol.launch_dependents) or exited; set for, and only for, a kernel that
    waits (ag.wait_prior_grids), which is what makes the early start safe.
    """
    grid3 = _dims(grid, "grid", kernel)
    block3 = _dims(block, "block", kernel)
    if block3[0] * block3[1] * block3[2] > 1024:
        raise LaunchError(f"kernel {kernel}: block {block3} has more than 1024 threads",
                          fix="use at most 1024 threads per block")
    cluster3 = _dims(cluster, "cluster", kernel) if cluster is not None else None
    if cluster3 is not None and any(g % c for g, c in zip(grid3, cluster3)):
        raise LaunchError(f"kernel {kernel}: cluster {cluster3} does not divide grid {grid3}",
                          fix="round the grid up to a multiple of the cluster shape")
    params = pack_params(args, kernel)
    device = _launch_device(args, kernel)
    function = get_function(binary, kernel, device)
    _opt_in_smem(binary, kernel, device, function, int(smem_bytes))
    driver = _driver()

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid3
    config.blockDimX, config.blockDimY, config.blockDimZ = block3
    config.sharedMemBytes = int(smem_bytes)
    attrs = launch_attributes(cluster3, pdl)
    config.attrs = attrs
    config.numAttrs = len(attrs)
    shape = (f"grid {grid3}, block {block3}, {smem_bytes} B dynamic smem"
             + (f", cluster {cluster3}" if cluster3 else "") + (", PDL" if pdl else ""))
    return LaunchPlan(kernel=kernel, device=device, function=function, config=config,
                      params=params, shape=shape, args=tuple(args))


def launch(binary: Binary, kernel: str, *, grid: int | Sequence[int], block: int | Sequence[int],
           args: Sequence[Any], smem_bytes: int = 0, cluster: Sequence[int] | None = None,
           stream: Any = None, sync: bool = False, pdl: bool = False) -> None:
    """Launch `kernel` of `binary` with cuLaunchKernelEx on torch's current stream of the
    arguments' device (or `stream`: a torch.cuda.Stream or a raw CUstream handle int).
    sync=True waits for the kernel and reports asynchronous faults here."""
    prepare_launch(binary, kernel, grid=grid, block=block, args=args, smem_bytes=smem_bytes,
                   cluster=cluster, pdl=pdl)(stream=stream, sync=sync)
