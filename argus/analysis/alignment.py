"""Launch specialization on alignment: what the arguments of one launch guarantee about the
addresses of a kernel's global tile accesses, as facts codegen renders.

A blocked tile's chunk of consecutive columns is one 4-16 byte vector access only when its
address is aligned to the access. Without facts about the arguments codegen checks that per
chunk at run time (and keeps a scalar path for chunks that fail it). The launcher knows every
tensor's data pointer and strides and every shape symbol's value, so, as Triton specializes on
`tt.divisibility`, a launch states:

- `aligned`: tensors whose data pointer and every stride above the innermost dim (of dims
  longer than 1) are multiples of 16 bytes;
- `divisible`: shape symbols whose value is a multiple of 16.

`specialize(kernel, spec)` turns those into one fact per global load / store of a tile
(kernel attribute `global_access`: (tensor id, offset ids, aligned elements, whole elements)):

- aligned elements p: the address of every element at a tile column that is a multiple of p is
  aligned to p elements (p * element bytes <= 16). Proof: the address is base + bytes *
  (sum_k (offset_k + r_k) * stride_k + offset_last + c); with the tensor aligned, every stride
  term is a multiple of 16 bytes, so it is aligned exactly when offset_last + c is a multiple
  of p, and the divisibility analysis below proves offset_last is;
- whole elements p: offset_last and the innermost extent are multiples of p, so a chunk of p
  columns starting at a multiple of p is wholly inside or wholly outside the tensor.

A launch whose arguments do not give a fact (a view offset by one element, an odd row stride)
gets a variant without it: the run-time checks stay, never a wrong answer. Values the
analysis cannot follow (loads, divisions, thread indices) divide by 1.

The launch also states which tensors are `narrow`: every in-bounds element's offset from the
data pointer, sum_d (shape_d - 1) x stride_d, is below 2^31 (INDEX32_LIMIT). `specialize`
records those that a global access reads or writes as kernel attribute `index32` (tensor ids),
and codegen computes their element offsets in 32-bit unsigned arithmetic instead of 64-bit:
exact for every element an access reaches (the bounds conditions guard each one, so an
offset is used only when it is an in-bounds element's), wrapping harmlessly for those it
does not. A 64-bit offset x stride product is three IMADs and two 64-bit adds a term; the
block-scaled fp8 GEMM's scale loads in its K loop were 17 of its ~200 bookkeeping SASS
instructions per K block (scripts/sass_fp8_k_loop.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from argus.ir import ops as O
from argus.ir.core import Kernel, Value
from argus.ir.types import ScalarType, TensorType

ALIGN_BYTES = 16      # the widest vector global access (ld/st .v4 of 32-bit words)
DIVISIBILITY = 16     # a shape symbol is specialized on being a multiple of this (as Triton)
INDEX32_LIMIT = 1 << 31   # a narrow tensor's in-bounds element offsets are all below this


@dataclass(frozen=True)
class LaunchSpecialization:
    """What one launch's arguments guarantee (the compiled-variant key besides constexprs)."""

    aligned: tuple[str, ...] = ()     # tensor parameters: data pointer and strides 16-byte
    divisible: tuple[str, ...] = ()   # shape symbols: multiples of 16
    narrow: tuple[str, ...] = ()      # tensor parameters: element offsets below 2^31

    def __bool__(self) -> bool:
        return bool(self.aligned or self.divisible or self.narrow)


def of_arguments(tensors: dict[str, tuple[int, tuple[int, ...], tuple[int, ...], int]],
                 symbols: dict[str, int]) -> LaunchSpecialization:
    """The specialization of one launch. `tensors`: parameter -> (data pointer, shape, strides
    in elements, element bytes); `symbols`: shape symbol -> value."""
    aligned, narrow = [], []
    for name, (ptr, shape, strides, nbytes) in tensors.items():
        outer_ok = all(size == 1 or (stride * nbytes) % ALIGN_BYTES == 0
                       for size, stride in zip(shape[:-1], strides[:-1]))
        if ptr % ALIGN_BYTES == 0 and outer_ok:
            aligned.append(name)
        if _narrow(shape, strides):
            narrow.append(name)
    divisible = [s for s, v in symbols.items() if v % DIVISIBILITY == 0]
    return LaunchSpecialization(tuple(sorted(aligned)), tuple(sorted(divisible)),
                                tuple(sorted(narrow)))


def _narrow(shape, strides) -> bool:
    """Every in-bounds element offset of a tensor of this shape and these strides (in
    elements) is in [0, 2^31). Negative strides are not narrow (torch has none)."""
    if any(st < 0 for st in strides):
        return False
    if any(size == 0 for size in shape):
        return True                       # no element: no offset to compute
    return sum((size - 1) * st for size, st in zip(shape, strides)) < INDEX32_LIMIT


def specialize(kernel: Kernel, spec: LaunchSpecialization) -> Kernel:
    """The kernel with `spec` and the access facts it proves as attributes (same ops)."""
    div = divisibility(kernel, spec)
    names = {p.value.id: p.name for p in kernel.params}
    facts, index32 = [], []
    for op in kernel.walk():
        if isinstance(op, (O.Load, O.Gather, O.Store, O.LoadScalar, O.AtomicAdd,
                           O.AtomicFetchAdd)) \
                and names.get(op.tensor.id) in spec.narrow:
            index32.append(op.tensor.id)
        if not isinstance(op, (O.Load, O.Store)):
            continue
        t: TensorType = op.tensor.type
        nbytes = t.dtype.bytes
        last = div.get(op.offsets[-1].id, 1)
        extent = t.shape[-1]
        extent_div = extent if isinstance(extent, int) else (
            DIVISIBILITY if extent in spec.divisible else 1)
        aligned = _pow2_divisor(last, ALIGN_BYTES // nbytes) \
            if names[op.tensor.id] in spec.aligned else 1
        whole = _pow2_divisor(math.gcd(last, extent_div), ALIGN_BYTES)
        if aligned > 1 or whole > 1:
            facts.append((op.tensor.id, tuple(o.id for o in op.offsets), aligned, whole))
    return kernel.with_attrs(launch_aligned=spec.aligned, launch_divisible=spec.divisible,
                             global_access=tuple(dict.fromkeys(facts)),
                             index32=tuple(sorted(set(index32))))


def index32(kernel: Kernel, tensor: Value) -> bool:
    """Whether `tensor`'s element offsets are computed in 32 bits (a narrow tensor of this
    launch-specialized variant, `specialize`)."""
    return tensor.id in kernel.attr("index32", ())


def access_fact(kernel: Kernel, tensor: Value, offsets) -> tuple[int, int]:
    """(aligned elements, whole elements) of a global access; (1, 1) without a fact."""
    key = (tensor.id, tuple(o.id for o in offsets))
    for tid, offs, aligned, whole in kernel.attr("global_access", ()):
        if (tid, offs) == key:
            return aligned, whole
    return 1, 1


def divisibility(kernel: Kernel, spec: LaunchSpecialization) -> dict[int, int]:
    """Value id -> an integer every runtime value of that scalar is a multiple of (0: the value
    is always 0). A fixpoint over loop-carried variables (a var divides by the gcd of its
    initial value and every assignment), started from 'divides by anything'; it only ever
    lowers a value, so it settles; if it did not within its rounds every value gets 1."""
    div: dict[int, int] = {}
    for p in kernel.params:
        if isinstance(p.value.type, ScalarType):
            div[p.value.id] = DIVISIBILITY if p.name in spec.divisible else 1
    ops = list(kernel.walk())
    assigns: dict[int, list[Value]] = {}
    for op in ops:
        if isinstance(op, O.Assign):
            assigns.setdefault(op.dst.id, []).append(op.src)
    for _ in range(len(ops) + 2):
        before = dict(div)
        for op in ops:
            _transfer(op, div, assigns)
        if div == before:
            return div
    return {k: 1 for k in div}  # pragma: no cover - the lattice is finite


def _transfer(op, div: dict[int, int], assigns: dict[int, list[Value]]) -> None:
    def get(v: Value) -> int:
        return div.get(v.id, 1)

    if isinstance(op, O.Const):
        v = op.value
        div[op.result.id] = abs(int(v)) if isinstance(v, int) and not isinstance(v, bool) else 1
    elif isinstance(op, O.Arith):
        a, b = get(op.lhs), get(op.rhs)
        if op.fn in ("add", "sub", "min", "max"):
            div[op.result.id] = math.gcd(a, b)
        elif op.fn == "mul":
            div[op.result.id] = a * b
        else:
            div[op.result.id] = 1
    elif isinstance(op, O.For):
        div[op.var.id] = math.gcd(get(op.start), get(op.step))
    elif isinstance(op, O.Var) and isinstance(op.result.type, ScalarType):
        g = get(op.init)
        for src in assigns.get(op.result.id, ()):
            g = math.gcd(g, div.get(src.id, 0))  # not yet computed: optimistic, revisited
        div[op.result.id] = g
    else:
        for r in op.results():
            if isinstance(r.type, ScalarType):
                div[r.id] = 1


def _pow2_divisor(d: int, cap: int) -> int:
    """The largest power of two <= cap dividing d (d = 0 is divisible by anything)."""
    p = 1
    while p < cap and d % (2 * p) == 0:
        p *= 2
    return p

