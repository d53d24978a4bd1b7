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
        for op in self.ops:
            yield from op.walk()


@dataclass(frozen=True)
class Op:
    """Base class of all IR ops. Subclasses set NAME and RESULTS and declare their fields."""

    NAME: ClassVar[str] = ""
    RESULTS: ClassVar[tuple[str, ...]] = ()

    loc: Loc = field(default_factory=Loc.unknown, compare=False, kw_only=True)

    # --- generic structure -------------------------------------------------------------
    def spec_fields(self) -> list[dataclasses.Field]:
        return [f for f in dataclasses.fields(self) if f.name != "loc"]

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
        for f in self.spec_fields():
            if f.name in self.RESULTS:
                continue
            out.extend(_values_in(getattr(self, f.name)))
        return tuple(out)

    def regions(self) -> tuple[Region, ...]:
        return tuple(getattr(self, f.name) for f in self.spec_fields()
                     if isinstance(getattr(self, f.name), Region))

    def attrs(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in self.spec_fields()
                if f.name not in self.RESULTS
                and not isinstance(getattr(self, f.name), Region)
                and not _values_in(getattr(self, f.name))}

    def walk(self) -> Iterator["Op"]:
        """This op, then every op nested in its regions, in program order."""
        yield self
        for region in self.regions():
            yield from region.walk()

    def replace(self, **changes) -> "Op":
        return dataclasses.replace(self, **changes)


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
