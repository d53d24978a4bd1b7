"""TMA tensor maps for torch tensors: validate the driver's rules, then cuTensorMapEncodeTiled.

One job: `make_tensor_map(tensor, box=..., swizzle_bytes=...) -> TensorMap`, the 128-byte
descriptor a kernel receives as `const __grid_constant__ ag::TensorMap`.

Conventions: the Python side speaks torch order (outermost dimension first, like
`tensor.shape`); the descriptor and the device code speak PTX order (innermost first: c0 is the
column). `TensorMapSpec` holds the innermost-first values actually encoded.

Invariant: every rule of cuTensorMapEncodeTiled (CUDA driver API) that a tensor can break is
checked by `check_tensor_map` first, a pure function of shape / strides / dtype / address that
runs without a GPU, so the error names the tensor, the dimension and the fix instead of
CUDA_ERROR_INVALID_VALUE (HOPPER.md §2.4 hazard 11, INVARIANTS.md §2.3):
  * rank 1..5; every dim in [1, 2^32];
  * global address 16-byte aligned; innermost stride 1 element (contiguous rows);
  * every other stride a multiple of 16 bytes and < 2^40;
  * box dims in [1, 256]; inner box bytes a multiple of 16, and <= the swizzle span when
    swizzled (128B swizzle: at most 64 bf16 per row);
  * element strides (elementStrides) in [1, 8], the innermost 1 (the TMA unit ignores it);
    a strided box of N elements along a dim traverses boxDim = N * stride of them (the
    driver's own rule: "to load N elements along dim i, boxDim[i] must be set to N *
    elementStrides[i]"), which must be <= 256.
Out-of-bounds box elements are zero-filled on load (FLOAT_OOB_FILL_NONE) and still count toward
the mbarrier transaction bytes.

Not checkable here, because coordinates are runtime values: each copy's innermost coordinate
times the element size must be a multiple of 16 bytes, or the copy stops the kernel with an
illegal instruction (Hopper; triton-lang/triton#7385, tile-ai/tilelang#2527; Argus issue 18,
the fp8 kernel's f32 scale boxes at K block k). Device code keeps its innermost coordinates
aligned (argus/kernels/gemm_fp8.py, SharedBlockScales.load).
"""

from __future__ import annotations

import os

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from argus import dtypes
from argus.dtypes import DType
from argus.errors import LaunchError
from argus.runtime import context

SWIZZLE_BYTES = (0, 32, 64, 128)
L2_PROMOTION_BYTES = (0, 64, 128, 256)
MAX_RANK = 5
MAX_BOX = 256

# Argus dtype -> CUtensorMapDataType member. fp8 has no TMA type of its own: it moves as bytes.
_TMA_DTYPES = {
    "f32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32", "f16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    "bf16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16", "f64": "CU_TENSOR_MAP_DATA_TYPE_FLOAT64",
    "i32": "CU_TENSOR_MAP_DATA_TYPE_INT32", "i64": "CU_TENSOR_MAP_DATA_TYPE_INT64",
    "u32": "CU_TENSOR_MAP_DATA_TYPE_UINT32", "e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
}


@dataclass(frozen=True)
class TensorMapSpec:
    """The validated inputs of cuTensorMapEncodeTiled, innermost dimension first."""

    dtype: str
    elem_bytes: int
    address: int
    dims: tuple[int, ...]             # global extents, innermost first
    strides_bytes: tuple[int, ...]    # byte strides of dims[1:], innermost first
    box: tuple[int, ...]              # boxDim: elements traversed, innermost first
    swizzle_bytes: int
    # elementStrides, innermost first (all 1: a plain box); box[i] / elem_strides[i] land
    elem_strides: tuple[int, ...] = ()

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def box_bytes(self) -> int:
        """Bytes one load of the full box delivers (the mbarrier expect_tx contribution)."""
        total = self.elem_bytes
        for extent, stride in zip(self.box, self.elem_strides or (1,) * len(self.box)):
            total *= -(-extent // stride)
        return total


@dataclass(frozen=True)
class TensorMap:
    """An encoded CUtensorMap: 16 little-endian u64 words plus what was encoded. Holds a
    reference to its tensor so the memory it points to outlives the descriptor."""

    words: tuple[int, ...]
    spec: TensorMapSpec
    tensor: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if len(self.words) != 16:
            raise ValueError(f"a TensorMap has 16 u64 words, got {len(self.words)}")

    def to_bytes(self) -> bytes:
        return b"".join(int(w).to_bytes(8, "little") for w in self.words)


def _fail(name: str, problem: str, fix: str) -> LaunchError:
    return LaunchError(f"tensor map for {name}: {problem}", fix=fix)


def check_tensor_map(shape: Sequence[int], strides: Sequence[int], *, dtype: DType | str,
                     address: int, box: Sequence[int], swizzle_bytes: int = 128,
                     name: str = "tensor",
                     elem_strides: Sequence[int] = ()) -> TensorMapSpec:
    """Validate a TMA descriptor request (torch order: outermost first; strides in elements)
    and return the innermost-first spec to encode. Raises LaunchError saying what to fix.
    `box`: the elements that land per dim; `elem_strides` (() = all 1): every
    elem_strides[d]-th element read along dim d, so the encoded boxDim is box x stride."""
    dt = dtypes.from_name(dtype) if isinstance(dtype, str) else dtype
    shape, strides, box = tuple(int(s) for s in shape), tuple(int(s) for s in strides), \
        tuple(int(b) for b in box)
    eb = dt.bytes
    rank = len(shape)
    if dt.name not in _TMA_DTYPES:
        raise _fail(name, f"dtype {dt} has no TMA element type",
                    f"use one of {', '.join(_TMA_DTYPES)}")
    if not 1 <= rank <= MAX_RANK:
        raise _fail(name, f"rank {rank} is outside 1..{MAX_RANK} (TMA tensors have 1-5 dims)",
                    "view the tensor with fewer dims (merge contiguous dims) before mapping it")
    if len(strides) != rank:
        raise _fail(name, f"{len(strides)} strides for {rank} dims", "pass tensor.stride()")
    if len(box) != rank:
        raise _fail(name, f"box {box} has {len(box)} dims but the tensor has {rank} "
                    f"(shape {shape})", "give one box extent per tensor dim, in shape order")
    if swizzle_bytes not in SWIZZLE_BYTES:
        raise _fail(name, f"swizzle_bytes={swizzle_bytes} is not one of {SWIZZLE_BYTES}",
                    "use 128 for 128-byte rows (64 bf16), 64, 32, or 0 for no swizzle")
    for d, extent in enumerate(shape):
        if not 1 <= extent <= 2**32:
            raise _fail(name, f"dim {d} has extent {extent}; TMA needs 1 <= extent <= 2^32",
                        "do not launch on empty tensors (skip the kernel when a dim is 0)")
    if address % 16:
        raise _fail(name, f"base address {address:#x} is not 16-byte aligned "
                    f"(offset {address % 16} B)",
                    "pass a tensor whose data starts on a 16-byte boundary: .clone() it (fresh "
                    "allocations are 256-byte aligned) or slice at a multiple of 16 bytes")
    if shape[-1] > 1 and strides[-1] != 1:
        raise _fail(name, f"the innermost dim (dim {rank - 1}) has stride {strides[-1]} "
                    "elements; TMA reads it contiguously", "call .contiguous() on the tensor")

    # Byte strides of the outer dims, innermost first. A dim of extent 1 is never stepped over,
    # so its stride is free: give it a legal value instead of rejecting e.g. a [1, K] view.
    strides_bytes: list[int] = []
    natural = shape[-1] * eb
    for d in range(rank - 2, -1, -1):
        stride = strides[d] * eb
        if shape[d] == 1:
            stride = -(-natural // 16) * 16
        if stride <= 0 or stride % 16:
            per_elem = 16 // eb if eb <= 16 else 1
            raise _fail(name, f"dim {d} has a stride of {strides[d]} elements = {stride} bytes, "
                        "not a positive multiple of 16 bytes",
                        f"make every row start 16-byte aligned: pad the inner dim to a multiple "
                        f"of {per_elem} {dt} elements (e.g. K % {per_elem} == 0 for a row-major "
                        f"[M, K] operand)")
        if stride >= 2**40:
            raise _fail(name, f"dim {d} stride {stride} bytes is >= 2^40", "split the tensor")
        strides_bytes.append(stride)
        natural = stride * shape[d]

    strides_e = tuple(int(e) for e in elem_strides) or (1,) * rank
    if len(strides_e) != rank or not all(1 <= e <= 8 for e in strides_e) or strides_e[-1] != 1:
        raise _fail(name, f"elem_strides {strides_e}: one stride in [1, 8] per dim ({rank}), "
                    f"the innermost 1 (TMA ignores a stride on dim 0)",
                    "pass () for a plain box, or strides in 1..8 with the last one 1")
    for d, (extent, e) in enumerate(zip(box, strides_e)):
        if e > 1 and not 1 <= extent * e <= MAX_BOX:
            raise _fail(name, f"box dim {d} = {extent} elements at stride {e} traverses "
                        f"{extent * e} (boxDim), outside 1..{MAX_BOX}",
                        f"land at most {MAX_BOX // e} elements along dim {d}")
        if not 1 <= extent <= MAX_BOX:
            raise _fail(name, f"box dim {d} = {extent} is outside 1..{MAX_BOX}",
                        f"tile dim {d} into boxes of at most {MAX_BOX} and issue several loads")
    inner_bytes = box[-1] * eb
    if inner_bytes % 16:
        raise _fail(name, f"the inner box extent {box[-1]} x {eb} B = {inner_bytes} B is not a "
                    "multiple of 16 bytes", f"use an inner box of a multiple of {16 // eb} "
                    "elements" if eb < 16 else "use a larger inner box")
    if swizzle_bytes and inner_bytes > swizzle_bytes:
        raise _fail(name, f"the inner box is {box[-1]} {dt} = {inner_bytes} B, more than the "
                    f"{swizzle_bytes}B swizzle span",
                    f"use an inner box of at most {swizzle_bytes // eb} elements (one swizzle "
                    "row) and load wider tiles as several boxes")
    return TensorMapSpec(dtype=dt.name, elem_bytes=eb, address=int(address),
                         dims=tuple(reversed(shape)), strides_bytes=tuple(strides_bytes),
                         box=tuple(reversed(tuple(b * e for b, e in zip(box, strides_e)))),
                         swizzle_bytes=swizzle_bytes,
                         elem_strides=() if all(e == 1 for e in strides_e)
                         else tuple(reversed(strides_e)))


def default_l2_promotion() -> int:
    """128 bytes (a miss of a box row fills that row's line, not its neighbour's), or
    ARGUS_TMA_L2_PROMOTION (0, 64, 128 or 256) for a measurement, read when a launch plan is
    made. Measured on the H200 (docs/perf/attention.md, "Decode: the tensor maps' L2
    promotion"): at 256 bytes a K or V row of 256 bytes loaded as two 128-byte boxes made the
    first box fetch the whole row, so the second box's request was an extra L2 lookup (26% of
    them hits, L2 at 91% of its throughput): decode at batch >= 32 is 5.7-6.1% faster at 128,
    prefill attention at hd128 3-11%, the bf16 GEMMs the same within a run's spread.
    TileLang's TMA descriptors use 128 too."""
    text = os.environ.get("ARGUS_TMA_L2_PROMOTION", "").strip()
    if not text:
        return 128
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value not in L2_PROMOTION_BYTES:
        raise _fail("ARGUS_TMA_L2_PROMOTION", f"{text!r} is not one of {L2_PROMOTION_BYTES}",
                    "unset it, or give 0, 64, 128 or 256")
    return value


def make_tensor_map(tensor: Any, *, box: Sequence[int], swizzle_bytes: int = 128,
                    l2_promotion: int | None = None, name: str = "tensor",
                    elem_strides: Sequence[int] = ()) -> TensorMap:
    """Encode a tiled TMA descriptor for a CUDA torch tensor.

    box: the tile one TMA instruction moves, in tensor.shape order (e.g. (128, 64) for a
    128-row x 64-column bf16 tile of a row-major [M, K] matrix). Device code addresses the box
    with coordinates innermost first: tma_load_2d(&map, dst, bar, k, m).
    elem_strides (tensor.shape order; () = all 1): elementStrides, the box's elements read
    every stride-th element along their dim (check_tensor_map).
    """
    import torch

    if not isinstance(tensor, torch.Tensor):
        raise _fail(name, f"expected a torch.Tensor, got {type(tensor).__name__}",
                    "pass the tensor itself")
    if not tensor.is_cuda:
        raise _fail(name, f"the tensor is on {tensor.device}; TMA reads GPU memory",
                    f"{name}.to('cuda')")
    try:
        dt = dtypes.from_torch(tensor.dtype)
    except ValueError:
        raise _fail(name, f"torch dtype {tensor.dtype} has no Argus/TMA equivalent",
                    "convert to bfloat16, float16, float32 or float8_e4m3fn") from None
    spec = check_tensor_map(tuple(tensor.shape), tuple(tensor.stride()), dtype=dt,
                            address=tensor.data_ptr(), box=box, swizzle_bytes=swizzle_bytes,
                            name=name, elem_strides=elem_strides)

    return encode_tensor_map(spec, l2_promotion=l2_promotion, device=tensor.device.index,
                             tensor=tensor, name=name)


def encode_tensor_map(spec: TensorMapSpec, *, l2_promotion: int | None = None,
                      device: int = 0, tensor: Any = None, name: str = "tensor") -> TensorMap:
    """cuTensorMapEncodeTiled for a validated spec: the spec's element strides (1 unless
    given), no interleave, the spec's swizzle, out-of-bounds elements zero-filled (FLOAT_OOB_FILL_NONE).

    l2_promotion: the L2 fill size a miss of a box row is promoted to (bytes); None reads
    default_l2_promotion()."""
    if l2_promotion is None:
        l2_promotion = default_l2_promotion()
    if l2_promotion not in L2_PROMOTION_BYTES:
        raise _fail(name, f"l2_promotion={l2_promotion} is not one of {L2_PROMOTION_BYTES}",
                    "use 128 (default) or 256")
    context.ensure_context(device)
    driver = context._driver()
    swizzle = {0: "NONE", 32: "32B", 64: "64B", 128: "128B"}[spec.swizzle_bytes]
    l2 = {0: "NONE", 64: "L2_64B", 128: "L2_128B", 256: "L2_256B"}[l2_promotion]
    encoded = context.check_cuda(driver.cuTensorMapEncodeTiled(
        getattr(driver.CUtensorMapDataType, _TMA_DTYPES[spec.dtype]),
        spec.rank,
        spec.address,
        [driver.cuuint64_t(d) for d in spec.dims],
        [driver.cuuint64_t(s) for s in spec.strides_bytes],
        [driver.cuuint32_t(b) for b in spec.box],
        [driver.cuuint32_t(e) for e in (spec.elem_strides or (1,) * spec.rank)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        getattr(driver.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{swizzle}"),
        getattr(driver.CUtensorMapL2promotion, f"CU_TENSOR_MAP_L2_PROMOTION_{l2}"),
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    ), f"cuTensorMapEncodeTiled for {name} (dims {spec.dims}, box {spec.box}, innermost first)")
    return TensorMap(words=tuple(int(w) for w in encoded.opaque), spec=spec, tensor=tensor)
