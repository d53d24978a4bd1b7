"""TMA (cp.async.bulk.tensor) tiles in shared memory: swizzle modes, where each box element
lands, and the legality rules of a box.

Job: the hardware facts of INVARIANTS.md §2.3 (PTX ISA §5.5 "Tensors" → "Swizzling Modes";
CUDA driver API `cuTensorMapEncodeTiled`): a box is written densely, row pitch = inner box
bytes, and for swizzled modes the 16-byte chunk index of the ABSOLUTE shared address is XOR-ed
with its row phase (CuTe Swizzle<B,4,3>). Written with `argus.layout.arith`, so the address
functions take Python ints, numpy arrays or z3 bit-vectors.

Invariant kept: `tma_box_coord` inverts `tma_smem_offset` exactly (the swizzle is an
involution), which is how the verifier tags every shared-memory byte a TMA wrote.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import IntEnum
from typing import Any

from argus.layout import arith
from argus.layout.swizzle import Swizzle
from argus.target import limits


class TmaSwizzle(IntEnum):
    """CUtensorMapSwizzle (CUDA driver API). NOTE: the wgmma descriptor field uses a different,
    inverted code (128B = 1 there, 3 here); see `wgmma_desc.WGMMA_SWIZZLE_FIELD`."""

    NONE = 0
    B32 = 1
    B64 = 2
    B128 = 3


_TMA_ENUM = {0: TmaSwizzle.NONE, 32: TmaSwizzle.B32, 64: TmaSwizzle.B64, 128: TmaSwizzle.B128}

# Swizzle span: the row width one XOR pattern covers (inner box bytes must not exceed it).
SWIZZLE_SPAN = {32: 32, 64: 64, 128: 128}
# Swizzle period: the pattern repeats every 8 spans (256 / 512 / 1024 B); a swizzled buffer must
# start on a period boundary for buffer-relative reasoning to match the hardware.
SWIZZLE_PERIOD = {32: 256, 64: 512, 128: 1024}
SWIZZLE_MODES = (0, 32, 64, 128)


def _check_mode(swizzle_bytes: int) -> None:
    if swizzle_bytes not in SWIZZLE_MODES:
        raise ValueError(f"swizzle mode {swizzle_bytes} B is not a Hopper mode; use 0, 32, 64 "
                         "or 128")


def tma_swizzle_enum(swizzle_bytes: int) -> TmaSwizzle:
    """CU_TENSOR_MAP_SWIZZLE_* value for a swizzle of `swizzle_bytes` (0 = none)."""
    _check_mode(swizzle_bytes)
    return _TMA_ENUM[swizzle_bytes]


def tma_swizzle_bytes(enum_value: int) -> int:
    """Inverse of `tma_swizzle_enum`."""
    for b, e in _TMA_ENUM.items():
        if e == enum_value:
            return b
    raise ValueError(f"{enum_value} is not a CUtensorMapSwizzle value (0..3)")


def swizzle_span(swizzle_bytes: int) -> int:
    _check_mode(swizzle_bytes)
    return SWIZZLE_SPAN.get(swizzle_bytes, 0)


def swizzle_period(swizzle_bytes: int) -> int:
    """Repeat of the pattern in bytes (1 for no swizzle)."""
    _check_mode(swizzle_bytes)
    return SWIZZLE_PERIOD.get(swizzle_bytes, 1)


def smem_swizzle(swizzle_bytes: int) -> Swizzle:
    """The byte-address swizzle of a mode: 32B Sw<1,4,3>, 64B Sw<2,4,3>, 128B Sw<3,4,3>."""
    _check_mode(swizzle_bytes)
    return Swizzle.for_bytes(swizzle_bytes, 1)


def tma_smem_offset(row: Any, col_bytes: Any, swizzle_bytes: int, inner_box_bytes: int,
                    base: Any = 0) -> Any:
    """Shared-memory byte address where TMA puts box byte (row, col_bytes) for a box written at
    `base`: swz(base + row*inner_box_bytes + col_bytes), swizzling the ABSOLUTE address.

    `row` is the flattened index over all outer box dims. For swizzled modes the model assumes
    inner_box_bytes <= span (check_tma_box enforces it); argus emits inner == span, the case
    validated by CUTLASS/DeepGEMM practice.
    """
    return smem_swizzle(swizzle_bytes)(base + row * inner_box_bytes + col_bytes)


def tma_box_coord(addr: Any, base: Any, swizzle_bytes: int, inner_box_bytes: int,
                  box_rows: int) -> tuple[Any, Any, Any]:
    """Inverse of `tma_smem_offset`: (row, col_bytes, inside) for a shared byte address, where
    `inside` says whether the address belongs to the box at all."""
    lin = smem_swizzle(swizzle_bytes)(addr) - base
    inside = arith.in_range(lin, 0, box_rows * inner_box_bytes)
    return arith.div(lin, inner_box_bytes), arith.mod(lin, inner_box_bytes), inside


def tma_box_problems(box_dims: Sequence[int], elem_bytes: int, swizzle_bytes: int,
                     smem_addr: int | None = None, global_addr: int | None = None,
                     global_strides_bytes: Sequence[int] = (),
                     tensor_map_addr: int | None = None) -> list[str]:
    """Every rule a tiled TMA box breaks (empty list = legal). `box_dims` innermost first;
    `global_strides_bytes` are the strides of dims 1.. in bytes (dim 0 is contiguous).

    Rules: cuTensorMapEncodeTiled (rank <= 5, box dims in [1, 256], inner box bytes a multiple
    of 16, global address 16-B aligned, strides multiples of 16 and < 2^40, tensor map 64-B
    aligned; HOPPER.md hazard 11), swizzled inner box <= span (PTX ISA §5.5), and shared
    destination aligned to 128 B, or to the swizzle period when swizzled (INVARIANTS.md §2.3).
    """
    problems: list[str] = []
    if swizzle_bytes not in SWIZZLE_MODES:
        return [f"swizzle mode {swizzle_bytes} B is not one of 0, 32, 64, 128"]
    if elem_bytes not in (1, 2, 4, 8):
        problems.append(f"element size {elem_bytes} B is not 1, 2, 4 or 8")
    if not 1 <= len(box_dims) <= limits.TMA_MAX_RANK:
        problems.append(f"box rank {len(box_dims)} is outside [1, {limits.TMA_MAX_RANK}]")
    for i, d in enumerate(box_dims):
        if not 1 <= d <= limits.TMA_BOX_DIM_MAX:
            problems.append(f"box dim {i} = {d} is outside [1, {limits.TMA_BOX_DIM_MAX}]")
    if box_dims:
        inner = box_dims[0] * elem_bytes
        if inner % limits.TMA_INNER_BOX_BYTES_MULTIPLE:
            problems.append(f"inner box = {box_dims[0]} x {elem_bytes} B = {inner} B is not a "
                            "multiple of 16 B")
        if swizzle_bytes and inner > SWIZZLE_SPAN[swizzle_bytes]:
            problems.append(
                f"inner box = {inner} B exceeds the {swizzle_bytes}B swizzle span; fix: inner "
                f"box dim <= {SWIZZLE_SPAN[swizzle_bytes] // max(1, elem_bytes)} elements, "
                "issue several boxes along the inner dim")
    if smem_addr is not None:
        align = SWIZZLE_PERIOD[swizzle_bytes] if swizzle_bytes else limits.TMA_SMEM_ALIGN
        if smem_addr % align:
            problems.append(
                f"shared destination {smem_addr:#x} is not {align}-B aligned (= {smem_addr % align}"
                f" mod {align}); TMA swizzles absolute addresses, fix: align the buffer to {align}")
    if global_addr is not None and global_addr % limits.TMA_GLOBAL_ADDR_ALIGN:
        problems.append(f"global address {global_addr:#x} is not 16-B aligned")
    for i, s in enumerate(global_strides_bytes, start=1):
        if s % limits.TMA_GLOBAL_STRIDE_ALIGN or not 0 < s < limits.TMA_GLOBAL_STRIDE_MAX:
            problems.append(f"global stride of dim {i} = {s} B is not a positive multiple of "
                            "16 B below 2^40; fix: pad the row (leading dimension)")
    if tensor_map_addr is not None and tensor_map_addr % limits.TENSOR_MAP_ALIGN:
        problems.append(f"tensor map at {tensor_map_addr:#x} is not 64-B aligned")
    return problems


def check_tma_box(box_dims: Sequence[int], elem_bytes: int, swizzle_bytes: int,
                  **kwargs: Any) -> None:
    """`tma_box_problems`, raising ValueError listing every problem found."""
    problems = tma_box_problems(box_dims, elem_bytes, swizzle_bytes, **kwargs)
    if problems:
        raise ValueError(f"illegal TMA box {list(box_dims)} ({elem_bytes} B elements, "
                         f"swizzle {swizzle_bytes}B): " + "; ".join(problems))
