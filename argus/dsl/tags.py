"""Tags in the DSL: name the identity of data and state relations the verifier must prove.

    route = ag.opaque("route")                       # token -> expert, data-dependent
    ag.tag_tensor(X, expert=lambda tok, h: route(tok))
    ag.tag_assume(lambda r: route(r) == r // CAP)     # what the permute kernel guarantees
    ...
    ag.tag_assert(ag.tag(sA[st]).k == ag.tag(sB[st]).k, message="same global k")

Built-in tags need no declaration: every element loaded from a tensor carries its global
coordinates as fields named after the tensor's shape symbols (`A: Tensor["M", "K"]` gives `m`
and `k`; an integer dim i gives `dim{i}`), and data moved by TMA carries `iter` (the innermost
loop index of the copy), `step` and `stage` (the pipeline step counter and slot).

Tag functions are plain Python run on symbolic `TagExpr`s (arithmetic, comparisons, calls of
`ag.opaque` functions), so they are traced into the solver. Invariant kept: nothing here
allocates an IR value or records a non-tag op, so a kernel's generated code is byte-identical
with and without its tags (tests check it). Runtime scalars enter a tag expression through
`ag.sym(x)`; arithmetic on them *outside* `ag.sym` would record ordinary IR ops.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from argus.dsl.tracing import current, user_loc
from argus.dsl.values import Scalar, SmemBuffer, SmemView, TensorArg, Tile
from argus.errors import TraceError
from argus.ir import tag_ops as T
from argus.ir.types import ScalarType

# ----------------------------------------------------------------------------- expressions


class TagExpr:
    """A symbolic integer or boolean over tags, coordinates and runtime scalars."""

    __hash__ = object.__hash__

    def __init__(self, node: tuple):
        self.node = node

    def _bin(self, op: str, other, reverse: bool = False) -> TagExpr:
        o = as_expr(other)
        return TagExpr(("bin", op, o.node, self.node) if reverse else ("bin", op, self.node, o.node))

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __floordiv__(self, o): return self._bin("/", o)
    def __rfloordiv__(self, o): return self._bin("/", o, True)
    def __mod__(self, o): return self._bin("%", o)
    def __rmod__(self, o): return self._bin("%", o, True)
    def __and__(self, o): return self._bin("&", o)
    def __rand__(self, o): return self._bin("&", o, True)
    def __xor__(self, o): return self._bin("^", o)
    def __rxor__(self, o): return self._bin("^", o, True)
    def __or__(self, o): return self._bin("|", o)
    def __ror__(self, o): return self._bin("|", o, True)
    def __eq__(self, o): return self._bin("==", o)  # type: ignore[override]
    def __ne__(self, o): return self._bin("!=", o)  # type: ignore[override]
    def __lt__(self, o): return self._bin("<", o)
    def __le__(self, o): return self._bin("<=", o)
    def __gt__(self, o): return self._bin(">", o)
    def __ge__(self, o): return self._bin(">=", o)
    def __neg__(self): return TagExpr(("un", "-", self.node))
    def __invert__(self): return TagExpr(("un", "!", self.node))

    def __bool__(self):
        raise TraceError("a tag expression was used in Python control flow (if/and/or/not)",
                         user_loc(), fix="combine conditions with ag.tag_all(a, b) / "
                                         "ag.tag_any(a, b), or pass several to ag.tag_assert")

    def __repr__(self) -> str:
        return f"TagExpr({_render(self.node, _Refs())})"


def as_expr(x) -> TagExpr:
    if isinstance(x, TagExpr):
        return x
    if isinstance(x, bool):
        return TagExpr(("lit", int(x)))
    if isinstance(x, int):
        if x < 0:
            return TagExpr(("un", "-", ("lit", -x)))
        return TagExpr(("lit", x))
    if isinstance(x, Scalar):
        return TagExpr(("ref", x.value))
    raise TraceError(f"cannot use {type(x).__name__} in a tag expression (ints, runtime "
                     f"scalars, ag.tag(...) fields)", user_loc())


def sym(x) -> TagExpr:
    """A runtime scalar (or int) as a tag expression, so arithmetic on it stays in the tag
    expression instead of recording IR ops: `ag.tag(t).k == ag.sym(k) * 64`."""
    return as_expr(x)


def tag_all(*conds) -> TagExpr:
    """Conjunction of boolean tag expressions."""
    node = as_expr(conds[0]).node
    for c in conds[1:]:
        node = ("bin", "&&", node, as_expr(c).node)
    return TagExpr(node)


def tag_any(*conds) -> TagExpr:
    """Disjunction of boolean tag expressions."""
    node = as_expr(conds[0]).node
    for c in conds[1:]:
        node = ("bin", "||", node, as_expr(c).node)
    return TagExpr(node)


class TagRef:
    """`ag.tag(x)`: the tags of a tile or shared-memory view; fields read as attributes."""

    def __init__(self, target):
        self._target = target

    def __getattr__(self, name: str) -> TagExpr:
        if name.startswith("_"):
            raise AttributeError(name)
        return TagExpr(("field", ("ref", self._target), name))

    def field(self, name: str) -> TagExpr:
        return TagExpr(("field", ("ref", self._target), name))


def tag(x) -> TagRef:
    """The tags of a register tile or a shared-memory view (`buf[stage]`, `buf.view()`, a
    `rows_of` slice): `ag.tag(sA[st]).k`."""
    if isinstance(x, SmemBuffer):
        if len(x.type.shape) != 2:
            raise TraceError("ag.tag of a staged buffer needs a stage: ag.tag(buf[stage])",
                             user_loc())
        return TagRef(SmemView(x, None, 0, x.type.shape[0]))
    if isinstance(x, (SmemView, Tile)):
        return TagRef(x)
    raise TraceError(f"ag.tag takes a tile or a shared-memory view, got {type(x).__name__}",
                     user_loc(), fix="for a runtime scalar use ag.sym(x)")


# ----------------------------------------------------------------------------- functions


class OpaqueFn:
    """An uninterpreted integer function (e.g. a router's token -> expert map): the verifier
    knows nothing about it except what `ag.tag_assume` states."""

    def __init__(self, name: str, arity: int = 1):
        if not name.isidentifier():
            raise TraceError(f"tag function name {name!r} must be an identifier", user_loc())
        self.name = name
        self.arity = arity

    def __call__(self, *args) -> TagExpr:
        if len(args) != self.arity:
            raise TraceError(f"tag function {self.name} takes {self.arity} argument(s), got "
                             f"{len(args)}", user_loc())
        return TagExpr(("call", self, tuple(as_expr(a).node for a in args)))

    def __repr__(self) -> str:
        return f"opaque {self.name}/{self.arity}"


def opaque(name: str, arity: int = 1) -> OpaqueFn:
    """Declare an opaque (uninterpreted) tag function of `arity` integer arguments."""
    return OpaqueFn(name, arity)


def tag_fn(fn: Callable) -> Callable:
    """Mark a plain Python function as a tag function. Called on tag expressions it runs
    normally on symbolic values: that is how it is traced into the solver."""

    def traced(*args):
        out = fn(*(as_expr(a) if isinstance(a, (int, Scalar)) else a for a in args))
        return as_expr(out)
    traced.__name__ = getattr(fn, "__name__", "tag_fn")
    traced.__doc__ = fn.__doc__
    traced.__wrapped__ = fn
    return traced


# ----------------------------------------------------------------------------- recording


class _Refs:
    """Operand numbering while rendering: each distinct IR value gets one `$i`."""

    def __init__(self):
        self.values: list = []
        self.fns: dict[str, OpaqueFn] = {}

    def index(self, value) -> int:
        for i, v in enumerate(self.values):
            if v is value or v == value:
                return i
        self.values.append(value)
        return len(self.values) - 1


def _render(node: tuple, refs: _Refs) -> str:
    kind = node[0]
    if kind == "lit":
        return str(node[1])
    if kind in ("coord", "var"):
        return f"{'c' if kind == 'coord' else 'x'}{node[1]}"
    if kind == "ref":
        target = node[1]
        if isinstance(target, SmemView):
            return _render_view(target, refs)
        if isinstance(target, Tile):
            return f"${refs.index(target.value)}"
        return f"${refs.index(target)}"
    if kind == "field":
        return f"{_render(node[1], refs)}.{node[2]}"
    if kind == "call":
        fn: OpaqueFn = node[1]
        known = refs.fns.setdefault(fn.name, fn)
        if known is not fn and known.arity != fn.arity:
            raise TraceError(f"two tag functions named {fn.name!r} with different arities",
                             user_loc())
        return f"{fn.name}({', '.join(_render(a, refs) for a in node[2])})"
    if kind == "un":
        return f"{node[1]}({_render(node[2], refs)})"
    if kind == "bin":
        return f"({_render(node[2], refs)} {node[1]} {_render(node[3], refs)})"
    raise AssertionError(node)


def _render_view(view: SmemView, refs: _Refs) -> str:
    def part(x) -> str:
        if x is None:
            return "none"
        if isinstance(x, int):
            return str(x)
        if isinstance(x, Scalar):
            return f"${refs.index(x.value)}"
        raise TraceError(f"a shared-memory view index must be an int or runtime scalar, got "
                         f"{type(x).__name__}", user_loc())
    return (f"view(${refs.index(view.buffer.value)}, {part(view.stage)}, {part(view.row0)}, "
            f"{view.rows})")


def _emit_fn_decls(ctx, refs: _Refs, loc) -> None:
    declared = ctx.__dict__.setdefault("tag_fns_declared", {})
    for name, fn in refs.fns.items():
        if name in declared:
            if declared[name] != fn.arity:
                raise TraceError(f"tag function {name!r} used with arity {fn.arity} and "
                                 f"{declared[name]}", loc)
            continue
        declared[name] = fn.arity
        # declarations go to the top level so every region sees them
        ctx.builder._stack[0].append(T.TagFn(name, fn.arity, "", loc=loc))


def _call_with_symbols(fn: Callable, kind: str, what: str) -> tuple[TagExpr, int]:
    try:
        nargs = len(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        raise TraceError(f"{what} must be a Python function (lambda)", user_loc()) from None
    out = fn(*(TagExpr((kind, i)) for i in range(nargs)))
    return as_expr(out), nargs


def _coordinate_fields(ctx, tensor: TensorArg, fields: dict, loc, reserved: tuple,
                       field_word: str, fn_word: str, arity_word: str):
    """(name, rendered text, scalar refs) of each `field=lambda c0, c1, ...: expr` over an
    element's coordinates, checked as ag.tag_tensor and ag.tma.load(tags=) both need: the
    name is no dim of `tensor` and not `reserved`, the lambda takes one coordinate a dim;
    the functions it calls are declared. `fn_word` / `arity_word` name the lambda in the
    errors (formatted with `name`)."""
    dims = {d.lower() for d in tensor.value.type.shape if isinstance(d, str)}
    rank = len(tensor.value.type.shape)
    for name, fn in fields.items():
        if name.lower() in dims or name in reserved:
            raise TraceError(f"{field_word} {name!r} of {tensor.name} clashes with a built-in "
                             f"tag (its dims {sorted(dims)}, iter, step, stage)", loc,
                             fix="pick another field name")
        expr, nargs = _call_with_symbols(fn, "coord", fn_word.format(name=name))
        if nargs != rank:
            raise TraceError(f"{arity_word.format(name=name)} takes {nargs} coordinates but "
                             f"{tensor.name} has {rank} dims", loc)
        refs = _Refs()
        text = _render(expr.node, refs)
        _emit_fn_decls(ctx, refs, loc)
        yield name, text, tuple(refs.values)


def tag_tensor(tensor: TensorArg, **fields: Callable) -> None:
    """Give every element of `tensor` extra tag fields: `field=lambda c0, c1, ...: expr` over
    the element's coordinates (outermost first)."""
    ctx = current("ag.tag_tensor")
    loc = user_loc()
    if not isinstance(tensor, TensorArg):
        raise TraceError("ag.tag_tensor takes a kernel tensor parameter", loc)
    for name, text, refs in _coordinate_fields(
            ctx, tensor, fields, loc, ("iter", "step", "stage"), "tag field",
            "the tag of field {name!r}", "the tag function of {name!r}"):
        ctx.builder.append(T.TagTensor(tensor.value, name, text, refs, loc=loc))


def copy_tags(ctx, tensor: TensorArg, fields: dict, loc) -> None:
    """`ag.tma.load(..., tags={field: lambda c0, c1, ...: expr})`: one tag.copy op per field
    after the copy just appended (ir/tag_ops.py TagCopy), the lambda over the copied
    element's coordinates (outermost first) like ag.tag_tensor's; runtime scalars in it
    (`ag.sym(tap)`) are taken where the copy is issued."""
    for name, text, refs in _coordinate_fields(
            ctx, tensor, fields, loc, ("iter", "step", "stage", "tensor"), "copy tag field",
            "the copy tag {name!r}", "the copy tag {name!r}"):
        ctx.builder.append(T.TagCopy(name, text, refs, loc=loc))


def tag_assume(fn: Callable) -> None:
    """State an axiom over all integers, e.g. `ag.tag_assume(lambda r: route(r) == r // 256)`:
    what the producer of a data-dependent input guarantees. The verifier trusts it."""
    ctx = current("ag.tag_assume")
    loc = user_loc()
    expr, nvars = _call_with_symbols(fn, "var", "ag.tag_assume's argument")
    refs = _Refs()
    text = _render(expr.node, refs)
    _emit_fn_decls(ctx, refs, loc)
    ctx.builder.append(T.TagAssume(text, nvars, tuple(refs.values), loc=loc))


def require(cond, why: str) -> None:
    """A launch precondition on the kernel's scalar parameters (runtime scalars, shape symbols),
    e.g. `ag.require(ag.sym(qk_scale) > 0, "the scale is folded into exp2")`. Unlike
    `ag.tag_assume` it is checked: every launch (compiled and interpreted) evaluates it on the
    actual values first and raises LaunchError with `why` when it is false; so the verifier
    takes it as a premise. Generates no code."""
    ctx = current("ag.require")
    loc = user_loc()
    if not isinstance(cond, TagExpr):
        raise TraceError(f"ag.require takes a condition on scalar parameters written with "
                         f"ag.sym (e.g. ag.sym(scale) > 0), got {type(cond).__name__}", loc,
                         fix="wrap each runtime scalar in ag.sym(...)")
    if not why:
        raise TraceError("ag.require needs a reason (`why`): it is shown to the caller "
                         "whose launch breaks the precondition", loc)
    refs = _Refs()
    text = _render(cond.node, refs)
    if refs.fns:
        raise TraceError("ag.require's condition calls tag functions; it must be computable "
                         "on the host from the scalar arguments alone", loc)
    for v in refs.values:
        if not isinstance(getattr(v, "type", None), ScalarType) or v.id not in ctx.param_ids:
            raise TraceError("ag.require's condition may name only the kernel's scalar "
                             "parameters (runtime scalars, shape symbols), not values the "
                             "kernel computes or tiles", loc,
                             fix="state the condition on the parameters themselves")
    # top level: a fact about the launch, read before anything runs
    ctx.builder._stack[0].append(T.Require(text, why, tuple(refs.values), loc=loc))


def tag_assert(*conds, message: str = "") -> None:
    """Every condition must hold here, for all threads, elements, iterations and CTAs; the
    verifier proves it or returns a counterexample. Generates no code."""
    ctx = current("ag.tag_assert")
    loc = user_loc()
    if not conds:
        raise TraceError("ag.tag_assert needs at least one condition", loc)
    for c in conds:
        if not isinstance(c, TagExpr):
            raise TraceError(f"ag.tag_assert takes tag expressions (e.g. ag.tag(x).k == "
                             f"ag.tag(y).k), got {type(c).__name__}", loc,
                             fix="compare fields of ag.tag(...) or ag.sym(...) values")
    refs = _Refs()
    text = " && ".join(_render(c.node, refs) for c in conds)
    _emit_fn_decls(ctx, refs, loc)
    ctx.builder.append(T.TagAssert(tuple(refs.values), text, message, loc=loc))


__all__ = [
    "OpaqueFn",
    "TagExpr",
    "TagRef",
    "opaque",
    "sym",
    "tag",
    "require",
    "tag_all",
    "tag_any",
    "tag_assert",
    "tag_assume",
    "tag_fn",
    "tag_tensor",
]
