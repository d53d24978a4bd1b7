"""Loop-carried values: a Python name rebound inside a traced region carries out of it.

Job: make `acc = acc + x` inside `for i in ag.range(n):` (or `with ag.when(c):`, or a pipeline
step) mean what it means in plain Python — the next iteration sees the new value, and so does
the code after the loop — although the body is traced only once.

How: tracing cannot see Python assignments, but it can see the frame that runs the body. When a
region opens, every local name bound to a Tile or a Scalar is rebound to a *shadow* handle with
a fresh value id (one per name, so two names for one value stay apart). When the region closes,
the frame's locals are read again:

  * a name still bound to its shadow was only read: its shadow id is renamed back to the
    original value everywhere in the body, and the name gets its original handle back;
  * a name bound to another Tile/Scalar of the same type was rebound: its shadow becomes a
    variable, declared before the region by `var %shadow = %init` and updated at the end of
    the body by `assign %shadow <- %new`; after the region the name refers to the variable;
  * a name first bound inside the body to a value made there is loop-local: using it after
    the region is a TraceError that says to define it before the loop.

Invariant kept: the IR states every carried value explicitly (`var` before the region,
`assign` at its end); assignments happen in parallel (a carried value read by another
carried value's update is snapshotted first), as Python's `a, b = b, a` would.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys
from types import FrameType

from argus.dsl.tracing import current, user_loc
from argus.dsl.values import Scalar, Tile
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.core import Op, Value, map_values
from argus.ir.types import TileType

_TEMPORARY_IDS = itertools.count(-1, -1)
_DSL_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


def user_frame() -> FrameType | None:
    """The innermost frame outside the DSL package and contextlib: the code whose names a
    region's body rebinds."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = os.path.abspath(frame.f_code.co_filename)
        if not filename.startswith(_DSL_DIR) and "contextlib" not in filename:
            return frame
        frame = frame.f_back
    return None


def _write_locals(frame: FrameType, updates: dict[str, object]) -> None:
    """Rebind local names of a running frame (the kernel function being traced)."""
    if not updates:
        return
    if sys.version_info >= (3, 13):  # PEP 667: f_locals is a write-through proxy
        for name, value in updates.items():
            frame.f_locals[name] = value
        return
    frame.f_locals.update(updates)  # a snapshot dict before 3.13; copy it back to the frame
    ctypes.pythonapi.PyFrame_LocalsToFast(ctypes.py_object(frame), ctypes.c_int(0))


class _OutOfScopeTile(Tile):
    """A tile made inside a region and read after it: every use is a TraceError."""

    def __init__(self, name: str, made_at, region: str):
        self._why = (name, made_at, region)

    @property
    def value(self) -> Value:  # type: ignore[override]
        name, made_at, region = self._why
        raise TraceError(f"{name} is first bound inside the {region} of line {made_at.line} "
                         f"and used after it", user_loc(),
                         fix=f"give {name} a value before the {region} (e.g. ag.zeros(...) or "
                             f"ag.full(...)), then rebind it inside; it then carries out")


class _OutOfScopeScalar(Scalar):
    """A runtime scalar made inside a region and read after it."""

    def __init__(self, name: str, made_at, region: str):
        self._why = (name, made_at, region)
        self.uniform = True

    @property
    def value(self) -> Value:  # type: ignore[override]
        name, made_at, region = self._why
        raise TraceError(f"{name} is first bound inside the {region} of line {made_at.line} "
                         f"and used after it", user_loc(),
                         fix=f"give {name} a runtime value before the {region} (e.g. "
                             f"{name} = ag.scalar(0)), then rebind it inside; it then carries "
                             f"out")


class _OutOfScopeInduction(Scalar):
    """A region's own value (a loop's index, a pipeline step's stage) read after the region.
    It never carries (CarryScope.close: `induction`), whether or not the name had a value
    before, so `name = ag.scalar(0)` before the region does not help: the fix is another."""

    def __init__(self, name: str, made_at, region: str):
        self._why = (name, made_at, region)
        self.uniform = True

    @property
    def value(self) -> Value:  # type: ignore[override]
        name, made_at, region = self._why
        if region == "pipeline step":
            raise TraceError(
                f"{name} holds the stage of the pipeline step of line {made_at.line} and is "
                f"used after that step: the step releases its slot when it ends (the producer "
                f"may refill it), so a stage never carries out of its step", user_loc(),
                fix=f"read the slot inside the step of line {made_at.line} (move this use into "
                    f"its `with` block); to use what the slot held later, compute a tile from "
                    f"it inside the step and carry the tile out (give it a value before the "
                    f"step, e.g. ag.zeros(...), and rebind it inside)")
        raise TraceError(
            f"{name} holds the index of the {region} of line {made_at.line} and is used after "
            f"it: a loop's index exists only inside the loop, and never carries out",
            user_loc(),
            fix=f"carry a count instead ({name} = ag.scalar(0) before the loop, "
                f"{name} = {name} + 1 inside: the number of iterations after it), or compute "
                f"the last index from the loop's bounds")


_OUT_OF_SCOPE = (_OutOfScopeTile, _OutOfScopeScalar, _OutOfScopeInduction)


def _out_of_scope(h, name: str, loc, region: str, induction: bool = False):
    if induction:
        return _OutOfScopeInduction(name, loc, region)
    cls = _OutOfScopeTile if isinstance(h, Tile) else _OutOfScopeScalar
    return cls(name, loc, region)


def _handles(frame: FrameType) -> dict[str, Tile | Scalar]:
    return {name: h for name, h in frame.f_locals.items()
            if isinstance(h, (Tile, Scalar)) and not isinstance(h, _OUT_OF_SCOPE)}


def _same_kind(a: Value, b: Value) -> bool:
    if isinstance(a.type, TileType) and isinstance(b.type, TileType):
        return a.type.shape == b.type.shape and a.type.dtype == b.type.dtype
    return type(a.type) is type(b.type) and a.type == b.type


def _describe(v: Value) -> str:
    return f"a {v.type.dtype} tile of shape {v.type.shape}" if isinstance(v.type, TileType) \
        else f"a runtime {v.type} scalar"


class CarryScope:
    """Opened when a region's body starts tracing, closed when it ends (see the module doc).

    `close(body_ops)` returns (ops to place before the region op, the body's ops with the
    carried updates appended)."""

    def __init__(self, region: str):
        self.region = region
        self.frame = user_frame()
        self.shadows: dict[str, tuple[Tile | Scalar, Tile | Scalar]] = {}
        if self.frame is None:
            return
        before = _handles(self.frame)
        self.before_objects = dict(self.frame.f_locals)
        self.python_numbers = {name: x for name, x in self.frame.f_locals.items()
                               if isinstance(x, (int, float)) and name not in before}
        for name, h in before.items():
            # temporary ids (negative) until close() knows which names were rebound: a kernel
            # that carries nothing is numbered exactly as if there were no shadows
            v = Value(next(_TEMPORARY_IDS), h.value.type, h.value.hint or name)
            shadow = Tile(v) if isinstance(h, Tile) else Scalar(v, uniform=h.uniform)
            self.shadows[name] = (h, shadow)
        _write_locals(self.frame, {name: s for name, (_, s) in self.shadows.items()})

    def close(self, body: list[Op], loc, induction: tuple[Value, ...] = ()) -> tuple[
            list[Op], list[Op]]:
        """`induction`: values the region binds itself (a loop index, a pipeline stage),
        which are never carried."""
        if self.frame is None:
            return [], body
        ctx = current()
        own = {v.id for v in induction}
        after = dict(self.frame.f_locals)
        rename: dict[int, Value] = {}
        carried: list[tuple[str, Tile | Scalar, Tile | Scalar, Tile | Scalar]] = []
        rebind: dict[str, object] = {}
        for name, (orig, shadow) in self.shadows.items():
            new = after.get(name, shadow)
            if new is shadow or not isinstance(new, (Tile, Scalar)) or \
                    isinstance(new, _OUT_OF_SCOPE) or new.value.id in own:
                rename[shadow.value.id] = orig.value
                if new is shadow:
                    rebind[name] = orig
                elif isinstance(new, (Tile, Scalar)) and not isinstance(new, _OUT_OF_SCOPE):
                    rebind[name] = _out_of_scope(new, name, loc, self.region,
                                                 induction=new.value.id in own)
                elif name in after and not isinstance(new, _OUT_OF_SCOPE):
                    raise TraceError(f"{name} is {_describe(orig.value)} before the "
                                     f"{self.region} and rebound to a {type(new).__name__} "
                                     f"inside it", loc,
                                     fix=f"keep {name} a {type(orig).__name__.lower()} of the "
                                         f"same shape and dtype, or use another name")
                continue
            if not _same_kind(orig.value, new.value):
                raise TraceError(f"{name} is {_describe(orig.value)} before the {self.region} "
                                 f"but {_describe(new.value)} after its body: a value carried "
                                 f"by the {self.region} keeps its shape and dtype", loc,
                                 fix=f"convert inside the body (.to(...)), or use another name "
                                     f"for the new value")
            if isinstance(orig, Scalar) and orig.uniform and not new.uniform:
                raise TraceError(f"{name} is uniform before the {self.region} but per-thread "
                                 f"after it", loc,
                                 fix="keep per-thread values in tiles, or derive them outside "
                                     "the loop")
            carried.append((name, orig, shadow, new))
        # a Python number rebound to a runtime value would have been traced as a constant in
        # every iteration: refuse rather than compute something else than Python would
        for name in self.python_numbers:
            new = after.get(name)
            if isinstance(new, (Tile, Scalar)) and not isinstance(new, _OUT_OF_SCOPE) and \
                    new.value.id not in own:
                was = self.python_numbers[name]
                kind = "tile" if isinstance(new, Tile) else "runtime scalar"
                raise TraceError(f"{name} is the Python value {was!r} before the {self.region} "
                                 f"and a {kind} inside it: the body was traced once with "
                                 f"{name} = {was!r}, so it cannot carry", loc,
                                 fix=(f"start from a tile: {name} = ag.full(shape, {was!r})"
                                      if kind == "tile" else
                                      f"start from a runtime scalar: {name} = ag.scalar({was!r})")
                                 + ", or use another name inside the body")
        # parallel assignment: an update that reads another carried variable reads a snapshot
        carried_ids: set[int] = set()
        before_ops: list[Op] = []
        updates: list[Op] = []
        snapshots: list[Op] = []
        for name, orig, shadow, new in carried:
            var = ctx.builder.fresh(shadow.value.type, name)
            rename[shadow.value.id] = var
            carried_ids.add(var.id)
            before_ops.append(O.Var(var, orig.value, loc=loc))
        # a window or an expand_dims of a variable reads the variable itself (a view, not a
        # copy), so an update that is a view of a carried variable is snapshotted too
        views = {op.result.id: rename.get(op.src.id, op.src) for op in body
                 if isinstance(op, (O.TileSlice, O.ExpandDims))}

        def reads_carried(v: Value) -> bool:
            while v.id in views:
                v = views[v.id]
            return v.id in carried_ids

        for name, orig, shadow, new in carried:
            var = rename[shadow.value.id]
            src = rename.get(new.value.id, new.value)
            if reads_carried(src):
                tmp = ctx.builder.fresh(src.type, name + "_prev")
                snapshots.append(O.Var(tmp, src, loc=loc))
                src = tmp
            updates.append(O.Assign(var, src, loc=loc))
            rebind[name] = shadow
        body = [map_values(op, lambda v: rename.get(v.id, v)) for op in body] + snapshots + \
            updates
        # every shadow handle now names its original value, or the variable it became,
        # wherever the body put it
        for orig, shadow in self.shadows.values():
            shadow.value = rename[shadow.value.id]
        # names first bound to a tile or scalar inside the body are region-local: in Python
        # they would hold the last iteration's value, which no variable keeps
        for name, h in after.items():
            if name in self.shadows or name in rebind or not isinstance(h, (Tile, Scalar)) or \
                    isinstance(h, _OUT_OF_SCOPE) or self.before_objects.get(name) is h:
                continue
            rebind[name] = _out_of_scope(h, name, loc, self.region,
                                         induction=h.value.id in own)
        _write_locals(self.frame, rebind)
        return before_ops, body
