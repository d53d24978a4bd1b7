"""Kernel → text. The format is generic (derived from each op's dataclass fields) so that
`parser.parse_kernel(print_kernel(k)) == k` holds for every kernel, which the tests check.

    kernel @name(%A.0: tensor<bf16, MxK>, %M.1: i32) {threads=128} {
      %2:i32 = const {value=0} loc("file.py":12)
      %k.3:i32 = for(start=%2, stop=%M.1, step=%4) body {
        ...
      } loc("file.py":13)
    }
"""

from __future__ import annotations

import json
from typing import Any

from argus.errors import Loc
from argus.ir.core import Kernel, Op, Region, Value


def format_value(x: Any) -> str:
    if isinstance(x, Value):
        return str(x)
    if x is None:
        return "none"
    if isinstance(x, bool):
        return "true" if x else "false"
    if isinstance(x, int):
        return str(x)
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, str):
        return json.dumps(x)
    if isinstance(x, tuple):
        inner = ", ".join(format_value(i) for i in x)
        return f"({inner},)" if len(x) == 1 else f"({inner})"
    raise TypeError(f"cannot print attribute value {x!r} of type {type(x).__name__}")


def _format_loc(loc: Loc) -> str:
    return f"loc({json.dumps(loc.file)}:{loc.line})"


def _format_op(op: Op, indent: int, with_locs: bool) -> list[str]:
    pad = "  " * indent
    head = ""
    results = op.results()
    if results:
        head = ", ".join(f"{r}:{r.type}" for r in results) + " = "
    operand_fields = []
    attr_fields = []
    region_fields = []
    for f in op.spec_fields():
        if f.name in op.RESULTS:
            continue
        v = getattr(op, f.name)
        if f.metadata.get("elide_default") and v == f.default:
            continue   # an optional attribute at its default (the parser restores it)
        if isinstance(v, Region):
            region_fields.append((f.name, v))
        elif f.name in op.attrs():
            attr_fields.append(f"{f.name}={format_value(v)}")
        else:
            operand_fields.append(f"{f.name}={format_value(v)}")
    line = f"{pad}{head}{op.NAME}({', '.join(operand_fields)})"
    if attr_fields:
        line += " {" + ", ".join(attr_fields) + "}"
    lines = [line]
    for name, region in region_fields:
        lines[-1] += f" {name} {{"
        for inner in region.ops:
            lines.extend(_format_op(inner, indent + 1, with_locs))
        lines.append(f"{pad}}}")
    if with_locs:
        lines[-1] += " " + _format_loc(op.loc)
    return lines


def print_kernel(kernel: Kernel, with_locs: bool = True) -> str:
    params = ", ".join(f"{p.value}: {p.value.type}" for p in kernel.params)
    attrs = ", ".join(f"{k}={format_value(v)}" for k, v in kernel.attrs)
    lines = [f"kernel @{kernel.name}({params}) {{{attrs}}} {{"]
    for op in kernel.body.ops:
        lines.extend(_format_op(op, 1, with_locs))
    lines.append("}")
    return "\n".join(lines) + "\n"
