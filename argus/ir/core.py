"""The IR's building blocks: Value, Region, Op base class and Kernel.

Every op is a frozen dataclass. Its fields are the spec: fields holding a `Value` (or a tuple
of Values) are operands, fields named in `RESULTS` are the values it defines, `Region` fields
are nested regions, everything else is an attribute. The printer, the parser, the
well-formedness check and the rewrite engine all work from that one classification, so adding
an op is adding a dataclass.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar, Iterator

from argus.errors import Loc
from argus.ir.types import Type


@dataclass(frozen=True)
class Value:
    """An SSA name. `id` is unique within a kernel; `hint` is a readable name for printing."""

    id: int
    type: Type
    hint: str = ""

    def __str__(self) -> str:
        return f"%{self.hint}.{self.id}" if self.hint else f"%{self.id}"


@dataclass(frozen=True)
class Region:
    """An ordered list of ops (a block). Regions nest: loops, predicates, roles, pipeline stages."""

    ops: tuple["Op", ...] = ()

    def walk(self) -> Iterator["Op"]:
        """Every op, then the ops nested in its regions, in program order (pre-order). An
        explicit stack of iterators: the passes and the verifier walk kernels thousands of
        times per compile, and nested generators cost a frame per level per op."""
        stack = [iter(self.ops)]
        while stack:
            for op in stack[-1]:
                yield op
                names = _region_names(type(op))
                if names:
                    inner = [getattr(op, n) for n in names]
                    inner = [r for r in inner if isinstance(r, Region)]
                    if inner:
                        stack.append(iter([o for r in inner for o in r.ops]))
                        break
            else:
                stack.pop()


@dataclass(frozen=True)
class Op:
    """Base class of all IR ops. Subclasses set NAME and RESULTS and declare their fields."""

    NAME: ClassVar[str] = ""
    RESULTS: ClassVar[tuple[str, ...]] = ()

    loc: Loc = field(default_factory=Loc.unknown, compare=False, kw_only=True)

    # --- generic structure -------------------------------------------------------------
    # The classification of an op class's fields is computed once per class (_fields_of):
    # dataclasses.fields() builds a new tuple per call, and these are called per op per walk.
    def spec_fields(self) -> list[dataclasses.Field]:
        return list(_fields_of(type(self))[0])

    def results(self) -> tuple[Value, ...]:
        out = []
        for name in self.RESULTS:
            v = getattr(self, name)
            if isinstance(v, Value):
                out.append(v)
            elif isinstance(v, tuple):
                out.extend(x for x in v if isinstance(x, Value))
        return tuple(out)

    def operands(self) -> tuple[Value, ...]:
        out: list[Value] = []
        for name in _fields_of(type(self))[1]:
            v = getattr(self, name)
            if isinstance(v, Value):
                out.append(v)
            elif isinstance(v, tuple):
                out.extend(_values_in(v))
        return tuple(out)

    def regions(self) -> tuple[Region, ...]:
        names = _region_names(type(self))
        if not names:
            return ()
        return tuple(r for r in (getattr(self, n) for n in names) if isinstance(r, Region))

    def attrs(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _fields_of(type(self))[1]
                if not isinstance(getattr(self, name), Region)
                and not _values_in(getattr(self, name))}

    def walk(self) -> Iterator["Op"]:
        """This op, then every op nested in its regions, in program order."""
        yield self
        regions = self.regions()
        if regions:
            yield from Region(tuple(op for r in regions for op in r.ops)).walk()

    def replace(self, **changes) -> "Op":
        return dataclasses.replace(self, **changes)


_FIELDS: dict[type, tuple[tuple[dataclasses.Field, ...], tuple[str, ...], tuple[str, ...]]] = {}


def _fields_of(cls: type) -> tuple[tuple[dataclasses.Field, ...], tuple[str, ...],
                                   tuple[str, ...]]:
    """(spec fields, names of the fields that are not results, names of the fields that may
    hold a Region) of an op class, computed once. A field may hold a Region when it is
    declared one (`body: Region`); a value is still checked to be a Region where it is read,
    so the answer is the one dataclasses.fields() and isinstance would give."""
    out = _FIELDS.get(cls)
    if out is None:
        spec = tuple(f for f in dataclasses.fields(cls) if f.name != "loc")
        others = tuple(f.name for f in spec if f.name not in cls.RESULTS)
        regions = tuple(f.name for f in spec if f.name not in cls.RESULTS
                        and "Region" in (f.type if isinstance(f.type, str) else
                                         getattr(f.type, "__name__", str(f.type))))
        out = _FIELDS[cls] = (spec, others, regions)
    return out


def _region_names(cls: type) -> tuple[str, ...]:
    return _fields_of(cls)[2]


def _values_in(x: Any) -> list[Value]:
    if isinstance(x, Value):
        return [x]
    if isinstance(x, tuple):
        out: list[Value] = []
        for item in x:
            out.extend(_values_in(item))
        return out
    return []


@dataclass(frozen=True)
class Param:
    """A kernel parameter: a global tensor or a runtime scalar (shape symbols, strides)."""

    name: str
    value: Value


@dataclass(frozen=True)
class Kernel:
    """A traced kernel: parameters, a body region and kernel-level attributes.

    attrs holds launch facts: `threads` (per CTA), `grid` (tuple of Values computed in the body
    prologue from shape parameters), `cluster` (tuple of ints), `constexprs` (the compile-time
    values it was traced with), plus what lowering passes add (`smem_bytes`, …).
    """

    name: str
    params: tuple[Param, ...]
    body: Region
    attrs: tuple[tuple[str, Any], ...] = ()

    def attr(self, key: str, default: Any = None) -> Any:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_attrs(self, **updates: Any) -> "Kernel":
        merged = dict(self.attrs)
        merged.update(updates)
        return dataclasses.replace(self, attrs=tuple(sorted(merged.items())))

    def walk(self) -> Iterator[Op]:
        yield from self.body.walk()

    def param(self, name: str) -> Param:
        for p in self.params:
            if p.name == name:
                return p
        raise KeyError(name)


def map_values(op: Op, fn) -> Op:
    """Rebuild `op` (and its nested regions) with every Value v replaced by fn(v)."""

    def conv(x):
        if isinstance(x, Value):
            return fn(x)
        if isinstance(x, tuple):
            return tuple(conv(i) for i in x)
        if isinstance(x, Region):
            return Region(tuple(map_values(o, fn) for o in x.ops))
        return x

    changes = {f.name: conv(getattr(op, f.name)) for f in op.spec_fields()}
    return dataclasses.replace(op, **changes)


def map_kernel_values(kernel: Kernel, fn) -> Kernel:
    """`map_values` over a whole kernel, parameters included."""
    params = tuple(Param(p.name, fn(p.value)) for p in kernel.params)
    body = Region(tuple(map_values(op, fn) for op in kernel.body.ops))
    return dataclasses.replace(kernel, params=params, body=body)
