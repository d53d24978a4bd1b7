"""Well-formedness of a kernel: every operand defined before use and in scope, each value
defined once, op fields of the right kinds, roles and grid placed legally. Raises IRError
naming the op and its source line."""

from __future__ import annotations

from argus.errors import IRError
from argus.ir import ops as O
from argus.ir.core import Kernel, Region, Value
from argus.ir.types import PipeType, ScalarType, SmemType, SmemViewType, TensorType, TileType


def check_kernel(kernel: Kernel) -> None:
    defined: set[int] = {p.value.id for p in kernel.params}
    if len(defined) != len(kernel.params):
        raise IRError(f"kernel {kernel.name}: duplicate parameter ids")
    grids = [op for op in kernel.body.ops if isinstance(op, O.GridIds)]
    if len(grids) > 1:
        raise IRError(f"kernel {kernel.name}: grid declared {len(grids)} times", grids[1].loc,
                      fix="call ag.grid(...) once, at the top of the kernel")
    roles = [op for op in kernel.body.ops if isinstance(op, O.RoleOp)]
    for op in kernel.walk():
        if isinstance(op, O.RoleOp) and op not in roles:
            raise IRError("ag.role must be at the top level of the kernel", op.loc,
                          fix="move the `with ag.role(...)` block out of loops and predicates")
        if isinstance(op, O.GridIds) and op not in grids:
            raise IRError("ag.grid must be at the top level of the kernel", op.loc)
    _check_region(kernel, kernel.body, set(defined), all_defined=set(defined))


def _check_region(kernel: Kernel, region: Region, scope: set[int], all_defined: set[int]) -> None:
    scope = set(scope)
    for op in region.ops:
        for v in op.operands():
            if v.id not in scope:
                raise IRError(f"kernel {kernel.name}: {op.NAME} uses {v} which is not defined "
                              f"before it in an enclosing region", op.loc)
        _check_types(op)
        for r in op.results():
            if r.id in all_defined:
                raise IRError(f"kernel {kernel.name}: value {r} defined twice", op.loc)
            all_defined.add(r.id)
        inner_scope = scope | {r.id for r in op.results()}
        for sub in op.regions():
            _check_region(kernel, sub, inner_scope, all_defined)
        scope |= {r.id for r in op.results()}


def _expect(op, value: Value | None, kinds: tuple, what: str) -> None:
    if value is None or not isinstance(value.type, kinds):
        got = "none" if value is None else str(value.type)
        raise IRError(f"{op.NAME}: {what} must be {'/'.join(k.__name__ for k in kinds)}, "
                      f"got {got}", op.loc)


def _check_types(op) -> None:
    if isinstance(op, (O.For,)):
        for v in (op.start, op.stop, op.step):
            _expect(op, v, (ScalarType,), "loop bounds")
    elif isinstance(op, O.If):
        _expect(op, op.cond, (ScalarType,), "condition")
    elif isinstance(op, (O.Produce, O.Consume)):
        _expect(op, op.pipe, (PipeType,), "pipe")
    elif isinstance(op, O.TmaLoad):
        _expect(op, op.dst, (SmemViewType,), "dst")
        _expect(op, op.tensor, (TensorType,), "tensor")
        if len(op.coords) != len(op.tensor.type.shape):
            raise IRError(f"tma.load: {len(op.coords)} coordinates for a "
                          f"{len(op.tensor.type.shape)}-d tensor", op.loc)
    elif isinstance(op, O.Wgmma):
        _expect(op, op.acc, (TileType,), "acc")
        _expect(op, op.a, (SmemViewType, TileType), "a")
        _expect(op, op.b, (SmemViewType,), "b")
    elif isinstance(op, O.SmemSlice):
        _expect(op, op.buffer, (SmemType,), "buffer")
    elif isinstance(op, (O.Load, O.LoadScalar, O.Store)):
        _expect(op, op.tensor, (TensorType,), "tensor")
        if len(op.offsets) != len(op.tensor.type.shape):
            raise IRError(f"{op.NAME}: {len(op.offsets)} offsets for a "
                          f"{len(op.tensor.type.shape)}-d tensor", op.loc)
    elif isinstance(op, O.Gather):
        _expect(op, op.tensor, (TensorType,), "tensor")
        if len(op.indices) != len(op.tensor.type.shape):
            raise IRError(f"gather: {len(op.indices)} indices for a "
                          f"{len(op.tensor.type.shape)}-d tensor", op.loc)
        for ix in op.indices:
            if isinstance(ix.type, TileType) and ix.type.dtype.is_float:
                raise IRError(f"gather: index {ix} is a {ix.type.dtype} tile, not an integer "
                              "one", op.loc)
    elif isinstance(op, O.Elementwise):
        if op.fn not in O.ELEMENTWISE_FNS:
            raise IRError(f"unknown elementwise function {op.fn!r}", op.loc)
        if len(op.args) != O.ELEMENTWISE_FNS[op.fn]:
            raise IRError(f"{op.fn} takes {O.ELEMENTWISE_FNS[op.fn]} operands, got "
                          f"{len(op.args)}", op.loc)
    elif isinstance(op, O.Reduce):
        if op.fn not in O.REDUCE_FNS:
            raise IRError(f"unknown reduction {op.fn!r}", op.loc)
        _expect(op, op.src, (TileType,), "src")
        src, res = op.src.type.shape, op.result.type.shape
        if not 0 <= op.axis < len(src) or res != tuple(1 if d == op.axis else n
                                                        for d, n in enumerate(src)):
            raise IRError(f"reduce over axis {op.axis} of a {src} tile gives {res}", op.loc)
        if op.fn in ("argmax", "argmin") and op.result.type.dtype.name != "i32":
            raise IRError(f"{op.fn} gives an i32 tile, not {op.result.type.dtype}", op.loc)
    elif isinstance(op, O.Scan):
        if op.fn not in O.SCAN_FNS:
            raise IRError(f"unknown scan {op.fn!r}", op.loc)
        _expect(op, op.src, (TileType,), "src")
        src = op.src.type.shape
        edge = tuple(1 if d == op.axis else n for d, n in enumerate(src))
        if not 0 <= op.axis < len(src) or op.result.type.shape != src or \
                op.total.type.shape != edge or op.init.type.shape != edge:
            raise IRError(f"scan over axis {op.axis} of a {src} tile needs init and total of "
                          f"{edge}, got {op.init.type.shape} and {op.total.type.shape}", op.loc)
    elif isinstance(op, O.ConvertLayout):
        _expect(op, op.src, (TileType,), "src")
        if (op.src.type.dtype, op.src.type.shape) != (op.result.type.dtype,
                                                      op.result.type.shape):
            raise IRError("convert_layout changes only the layout, not dtype or shape", op.loc)
    elif isinstance(op, O.Arange):
        t = op.result.type
        if not isinstance(t, TileType) or len(t.shape) != 1 or t.dtype.name != "i32":
            raise IRError(f"arange makes a rank-1 i32 tile, not {t}", op.loc)
    elif isinstance(op, O.ExpandDims):
        _expect(op, op.src, (TileType,), "src")
        src, res = op.src.type.shape, op.result.type.shape
        if len(res) > 4 or res != src[:op.axis] + (1,) + src[op.axis:]:
            raise IRError(f"expand_dims at axis {op.axis} of {src} gives {res}", op.loc)
