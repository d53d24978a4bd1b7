"""One rule per torch op: how a traced call becomes primitive compose ops (graph.py).

A rule gets the IR values of the call's arguments (Nodes for tensors, Python values otherwise)
and the meta result (its shape and dtype) and returns the IR value of the result. Composite ops
are written out in primitives the way PyTorch defines them (softmax subtracts the row maximum,
variance is the mean of squared deviations from the mean, batch norm in training mode uses the
biased batch variance), so the fused kernels compute the same formula in fp32.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable

import torch
import torch.nn.functional as F

from argus.compose.graph import Graph, Node, is_number

RULES: dict[Any, Callable] = {}


def rule(*targets):
    def deco(fn):
        for t in targets:
            RULES[t] = fn
        return fn
    return deco


def _dims(x: Node, dim, all_if_none: bool = True) -> tuple[int, ...]:
    if dim is None:
        return tuple(range(len(x.shape))) if all_if_none else ()
    if isinstance(dim, (list, tuple, torch.Size)):
        return tuple(sorted(d % max(1, len(x.shape)) for d in dim))
    return (dim % max(1, len(x.shape)),)


class Lowering:
    def __init__(self, g: Graph, training: bool = True):
        self.g = g
        self.training = training

    # ------------------------------------------------------------------------------ dispatch
    def lower(self, op: str, target, args, kwargs, result):
        has_node = any(isinstance(a, Node) for a in _flat(args) + _flat(list(kwargs.values())))
        if not _tensors(result):
            return result  # sizes, numbers
        if not has_node:   # a tensor made from numbers: a constant fill, else torch
            fill = CREATE.get(target)
            if fill is not None:
                out = fill(self, result, *args, **kwargs)
                if out is not NotImplemented:
                    return out
            return self.fallback(op, target, args, kwargs, result)
        key = target if op == "call_function" else target  # method names are strings
        fn = RULES.get(key)
        if fn is not None:
            out = fn(self, result, *args, **kwargs)
            if out is not NotImplemented:
                return out
        return self.fallback(op, target, args, kwargs, result)

    def fallback(self, op, target, args, kwargs, result):
        name = target if isinstance(target, str) else getattr(target, "__name__", str(target))
        self.g.unsupported.append(str(name))
        if isinstance(result, torch.Tensor):
            return self.g.add("torch", _flat(args) + _flat(list(kwargs.values())), result.shape,
                              result.dtype, call=(op, target, args, kwargs), label=str(name))
        if isinstance(result, (tuple, list)) and all(isinstance(r, torch.Tensor) for r in result):
            whole = self.g.add("torch", _flat(args), (), result[0].dtype,
                               call=(op, target, args, kwargs), label=str(name), multi=True)
            return tuple(self.g.add("torch", (whole,), r.shape, r.dtype, item=i,
                                    label=f"{name}[{i}]") for i, r in enumerate(result))
        raise NotImplementedError(f"{name} returns {type(result).__name__}")

    # ------------------------------------------------------------------------------ helpers
    def ew(self, fn, *args, **kw):
        return self.g.ew(fn, *args, **kw)

    def const_like(self, value: float, like: Node):
        return value

    def reduce(self, fn: str, x: Node, dims, keepdim: bool, result=None):
        axes = _dims(x, dims)
        kshape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
        # torch's types: indices int64, and a sum or product of integers or booleans int64
        integral = not x.dtype.is_floating_point and not x.dtype.is_complex
        dtype = torch.int64 if fn in ("argmax", "argmin") or (
            fn in ("sum", "prod") and integral) else x.dtype
        r = self.g.add("reduce", (x,), kshape, dtype, fn=fn, axes=axes)
        if keepdim:
            return r
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        return self.view(r, shape)

    def sum(self, x, dims=None, keepdim=False):
        return self.reduce("sum", x, dims, keepdim)

    def mean(self, x, dims=None, keepdim=False):
        axes = _dims(x, dims)
        n = math.prod(x.shape[i] for i in axes)
        return self.ew("mul", self.reduce("sum", x, axes, keepdim), 1.0 / max(1, n))

    def var(self, x, dims=None, keepdim=False, correction=1):
        axes = _dims(x, dims)
        n = math.prod(x.shape[i] for i in axes)
        d = self.ew("sub", x, self.mean(x, axes, True))
        s = self.reduce("sum", self.ew("mul", d, d), axes, keepdim)
        return self.ew("div", s, float(max(n - correction, 0)))

    def view(self, x: Node, shape) -> Node:
        shape = tuple(int(s) for s in shape)
        if shape == x.shape:
            return x
        return self.g.add("view", (x,), shape, x.dtype)

    def permute(self, x: Node, dims) -> Node:
        dims = tuple(d % len(x.shape) for d in dims)
        if dims == tuple(range(len(dims))):
            return x
        return self.g.add("permute", (x,), tuple(x.shape[d] for d in dims), x.dtype, dims=dims)

    def softmax(self, x, dim, log=False):
        m = self.reduce("max", x, dim, True)
        z = self.ew("sub", x, m)
        s = self.reduce("sum", self.ew("exp", z), dim, True)
        if log:
            return self.ew("sub", z, self.ew("log", s))
        return self.ew("div", self.ew("exp", z), s)

    def logsumexp(self, x, dim, keepdim=False):
        m = self.reduce("max", x, dim, True)
        s = self.reduce("sum", self.ew("exp", self.ew("sub", x, m)), dim, True)
        out = self.ew("add", m, self.ew("log", s))
        if keepdim:
            return out
        axes = _dims(x, dim)
        return self.view(out, tuple(d for i, d in enumerate(x.shape) if i not in axes))

    def normalize(self, x, axes, eps, weight=None, bias=None, wshape=None):
        """(x - mean) / sqrt(biased var + eps) over `axes`, then the affine map."""
        d = self.ew("sub", x, self.mean(x, axes, True))
        v = self.mean(self.ew("mul", d, d), axes, True)
        y = self.ew("mul", d, self.ew("rsqrt", self.ew("add", v, float(eps))))
        if weight is not None:
            y = self.ew("mul", y, self.view(weight, wshape) if wshape else weight)
        if bias is not None:
            y = self.ew("add", y, self.view(bias, wshape) if wshape else bias)
        return y

    def channel_shape(self, x: Node, c_axis: int = 1) -> tuple[int, ...]:
        return tuple(x.shape[c_axis] if i == c_axis else 1 for i in range(c_axis, len(x.shape)))

    def reduction(self, loss: Node, reduction: str):
        if reduction == "mean":
            return self.mean(loss)
        if reduction == "sum":
            return self.sum(loss)
        if reduction == "batchmean":
            return self.ew("mul", self.sum(loss), 1.0 / loss.shape[0])
        return loss

    def matmul(self, a: Node, b: Node, result) -> Node:
        if a.op == "diag" and len(b.shape) == 2:
            return self.ew("mul", self.view(a.args[0], (a.shape[0], 1)), b)
        if b.op == "diag" and len(a.shape) == 2:
            return self.ew("mul", a, self.view(b.args[0], (1, b.shape[0])))
        for x in (a, b):
            if x.op == "diag":
                x.op, x.args = "torch", x.attrs["orig"]
        return self.g.add("matmul", (a, b), result.shape, result.dtype)


def _tensors(result) -> bool:
    if isinstance(result, torch.Tensor):
        return True
    return isinstance(result, (tuple, list)) and bool(result) and \
        all(isinstance(r, torch.Tensor) for r in result)


def _flat(x) -> list:
    out = []
    if isinstance(x, (list, tuple)):
        for v in x:
            out.extend(_flat(v))
    elif isinstance(x, dict):
        for v in x.values():
            out.extend(_flat(v))
    elif isinstance(x, Node):
        out.append(x)
    return out


def _num(x):
    return float(x) if is_number(x) else x


# ================================================================================ elementwise
_BIN = {"add": (operator.add, operator.iadd, torch.add, "add", "add_", "__add__", "__radd__"),
        "sub": (operator.sub, operator.isub, torch.sub, torch.subtract, "sub", "sub_"),
        "mul": (operator.mul, operator.imul, torch.mul, torch.multiply, "mul", "mul_"),
        "div": (operator.truediv, operator.itruediv, torch.div, torch.divide, torch.true_divide,
                "div", "div_", "true_divide"),
        "lt": (operator.lt, torch.lt, "lt"), "le": (operator.le, torch.le, "le"),
        "gt": (operator.gt, torch.gt, "gt"), "ge": (operator.ge, torch.ge, "ge"),
        "eq": (operator.eq, torch.eq, "eq"), "ne": (operator.ne, torch.ne, "ne"),
        "max": (torch.maximum, torch.fmax, "maximum"), "min": (torch.minimum, torch.fmin,
                                                                "minimum")}


def _binary(fn):
    def r(self, result, a, b, *rest, alpha=1, rounding_mode=None, out=None, **kw):
        if rounding_mode is not None or out is not None:
            return NotImplemented
        if rest and fn in ("add", "sub"):
            alpha = rest[0]
        a, b = _num(a), _num(b)
        if alpha != 1:
            b = self.ew("mul", b, float(alpha)) if isinstance(b, Node) else b * alpha
        if not isinstance(a, Node) and not isinstance(b, Node):
            return NotImplemented
        return self.ew(fn, a, b, dtype=result.dtype)
    return r


for _fn, _targets in _BIN.items():
    rule(*_targets)(_binary(_fn))


@rule(operator.neg, torch.neg, "neg", "__neg__")
def _neg(self, result, x):
    return self.ew("neg", x)


@rule(torch.rsub, "rsub")
def _rsub(self, result, a, b, alpha=1):
    return self.ew("sub", _num(b), self.ew("mul", a, float(alpha)) if alpha != 1 else a)


@rule(operator.pow, torch.pow, "pow", "pow_")
def _pow(self, result, x, e):
    if isinstance(e, Node) or not isinstance(x, Node):
        return self.ew("pow", _num(x), _num(e), dtype=result.dtype)
    e = float(e)
    if e == 2.0:
        return self.ew("mul", x, x)
    if e == 1.0:
        return x
    if e == 0.5:
        return self.ew("sqrt", x)
    if e == -1.0:
        return self.ew("div", 1.0, x)
    if e.is_integer() and 2 < e <= 4:
        y = x
        for _ in range(int(e) - 1):
            y = self.ew("mul", y, x)
        return y
    return self.ew("pow", x, e)


def _unary(fn):
    def r(self, result, x, *a, **kw):
        return self.ew(fn, x)
    return r


for _fn, _targets in {"exp": (torch.exp, "exp", "exp_"), "log": (torch.log, "log"),
                      "sqrt": (torch.sqrt, "sqrt"), "rsqrt": (torch.rsqrt, "rsqrt"),
                      "tanh": (torch.tanh, F.tanh, "tanh", "tanh_"),
                      "erf": (torch.erf, torch.special.erf, "erf"),
                      "sigmoid": (torch.sigmoid, F.sigmoid, "sigmoid", "sigmoid_"),
                      "relu": (torch.relu, F.relu, "relu", "relu_", torch.relu_),
                      "abs": (torch.abs, torch.absolute, "abs", operator.abs)}.items():
    rule(*_targets)(_unary(_fn))


@rule(torch.square, "square")
def _square(self, result, x):
    return self.ew("mul", x, x)


@rule(torch.reciprocal, "reciprocal")
def _recip(self, result, x):
    return self.ew("div", 1.0, x)


@rule(torch.log1p, "log1p")
def _log1p(self, result, x):
    return self.ew("log", self.ew("add", x, 1.0))


@rule(torch.expm1, "expm1")
def _expm1(self, result, x):
    return self.ew("sub", self.ew("exp", x), 1.0)


@rule(torch.log2, "log2")
def _log2(self, result, x):
    return self.ew("mul", self.ew("log", x), 1.0 / math.log(2.0))


@rule(torch.log10, "log10")
def _log10(self, result, x):
    return self.ew("mul", self.ew("log", x), 1.0 / math.log(10.0))


@rule(torch.sign, "sign")
def _sign(self, result, x):
    return self.ew("sub", self.ew("where", self.ew("gt", x, 0.0), 1.0, 0.0, dtype=x.dtype),
                   self.ew("where", self.ew("lt", x, 0.0), 1.0, 0.0, dtype=x.dtype))


def _clamp_node(self, x, lo, hi):
    if isinstance(lo, Node) or is_number(lo):
        x = self.ew("max", x, _num(lo))
    if isinstance(hi, Node) or is_number(hi):
        x = self.ew("min", x, _num(hi))
    return x


@rule(torch.clamp, torch.clip, "clamp", "clip", "clamp_", "clip_")
def _clamp(self, result, x, min=None, max=None):  # noqa: A002
    return _clamp_node(self, x, min, max)


@rule(torch.clamp_min, "clamp_min")
def _clamp_min(self, result, x, m):
    return _clamp_node(self, x, m, None)


@rule(torch.clamp_max, "clamp_max")
def _clamp_max(self, result, x, m):
    return _clamp_node(self, x, None, m)


@rule(torch.where)
def _where(self, result, c, a=None, b=None):
    if a is None:
        return NotImplemented
    return self.ew("where", c, _num(a), _num(b), dtype=result.dtype)


@rule(torch.masked_fill, "masked_fill", "masked_fill_")
def _masked_fill(self, result, x, mask, value):
    """x with `value` (a number or a 0-d tensor) where the boolean mask holds."""
    return self.ew("where", mask, _num(value), x, dtype=result.dtype)


@rule(torch.logical_and, operator.and_, "logical_and")
def _and(self, result, a, b):
    return self.ew("and", a, b)


@rule(torch.logical_or, operator.or_, "logical_or")
def _or(self, result, a, b):
    return self.ew("or", a, b)


@rule(torch.logical_not, operator.invert, "logical_not")
def _not(self, result, a):
    return self.ew("not", a)


# ---------------------------------------------------------------------------- activations
@rule(F.leaky_relu, "leaky_relu")
def _leaky(self, result, x, negative_slope=0.01, inplace=False):
    return self.ew("where", self.ew("gt", x, 0.0), x, self.ew("mul", x, float(negative_slope)))


@rule(F.relu6)
def _relu6(self, result, x, inplace=False):
    return _clamp_node(self, x, 0.0, 6.0)


@rule(F.elu)
def _elu(self, result, x, alpha=1.0, inplace=False):
    return self.ew("where", self.ew("gt", x, 0.0), x,
                   self.ew("mul", self.ew("sub", self.ew("exp", x), 1.0), float(alpha)))


@rule(F.celu)
def _celu(self, result, x, alpha=1.0, inplace=False):
    neg = self.ew("mul", self.ew("sub", self.ew("exp", self.ew("div", x, float(alpha))), 1.0),
                  float(alpha))
    return self.ew("where", self.ew("gt", x, 0.0), x, neg)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@rule(F.selu, torch.selu)
def _selu(self, result, x, inplace=False):
    neg = self.ew("mul", self.ew("sub", self.ew("exp", x), 1.0), SELU_ALPHA)
    return self.ew("mul", self.ew("where", self.ew("gt", x, 0.0), x, neg), SELU_SCALE)


@rule(F.gelu)
def _gelu(self, result, x, approximate="none"):
    if approximate == "tanh":
        inner = self.ew("mul", self.ew("add", x, self.ew("mul", self.ew("mul", self.ew(
            "mul", x, x), x), 0.044715)), math.sqrt(2.0 / math.pi))
        return self.ew("mul", self.ew("mul", x, 0.5), self.ew("add", self.ew("tanh", inner), 1.0))
    return self.ew("mul", self.ew("mul", x, 0.5),
                   self.ew("add", self.ew("erf", self.ew("mul", x, 1.0 / math.sqrt(2.0))), 1.0))


@rule(F.silu)
def _silu(self, result, x, inplace=False):
    return self.ew("mul", x, self.ew("sigmoid", x))


def softplus(self, x, beta=1.0, threshold=20.0):
    bx = self.ew("mul", x, float(beta)) if beta != 1 else x
    # log(1 + exp(bx)) written as max(bx, 0) + log(1 + exp(-|bx|)): no overflow
    soft = self.ew("add", self.ew("max", bx, 0.0),
                   self.ew("log", self.ew("add", self.ew("exp", self.ew("neg", self.ew(
                       "abs", bx))), 1.0)))
    if beta != 1:
        soft = self.ew("div", soft, float(beta))
    return self.ew("where", self.ew("gt", bx, float(threshold)), x, soft)


@rule(F.softplus)
def _softplus(self, result, x, beta=1.0, threshold=20.0):
    return softplus(self, x, beta, threshold)


@rule(F.mish)
def _mish(self, result, x, inplace=False):
    return self.ew("mul", x, self.ew("tanh", softplus(self, x)))


@rule(F.softsign)
def _softsign(self, result, x):
    return self.ew("div", x, self.ew("add", self.ew("abs", x), 1.0))


@rule(F.hardtanh, F.hardtanh_)
def _hardtanh(self, result, x, min_val=-1.0, max_val=1.0, inplace=False):
    return _clamp_node(self, x, float(min_val), float(max_val))


@rule(F.hardsigmoid)
def _hardsigmoid(self, result, x, inplace=False):
    return _clamp_node(self, self.ew("add", self.ew("div", x, 6.0), 0.5), 0.0, 1.0)


@rule(F.hardswish)
def _hardswish(self, result, x, inplace=False):
    return self.ew("mul", x, _clamp_node(self, self.ew("div", self.ew("add", x, 3.0), 6.0),
                                         0.0, 1.0))


@rule(F.logsigmoid)
def _logsigmoid(self, result, x):
    return self.ew("neg", softplus(self, self.ew("neg", x)))


@rule(F.threshold)
def _threshold(self, result, x, threshold, value, inplace=False):
    return self.ew("where", self.ew("gt", x, float(threshold)), x, float(value))


@rule(F.dropout, F.dropout1d, F.dropout2d, F.dropout3d, F.alpha_dropout)
def _dropout(self, result, x, p=0.5, training=True, inplace=False):
    if not training or p == 0.0:
        return x
    return NotImplemented   # stochastic: torch


# ---------------------------------------------------------------------------- index predicates
def _iota(self, shape, axis):
    return self.g.add("ew", (), shape, torch.int32, fn="iota", axis=axis % len(shape))


@rule(torch.triu, "triu")
def _triu(self, result, x, diagonal=0):
    d = self.ew("sub", _iota(self, x.shape, -1), _iota(self, x.shape, -2))
    return self.ew("where", self.ew("ge", d, float(diagonal)), x, 0.0, dtype=x.dtype)


@rule(torch.tril, "tril")
def _tril(self, result, x, diagonal=0):
    d = self.ew("sub", _iota(self, x.shape, -1), _iota(self, x.shape, -2))
    return self.ew("where", self.ew("le", d, float(diagonal)), x, 0.0, dtype=x.dtype)


# ================================================================================ reductions
def _red(fn):
    def r(self, result, x, dim=None, keepdim=False, *, dtype=None, out=None):
        if out is not None:
            return NotImplemented
        if fn == "mean":
            return self.mean(x, dim, keepdim)
        return self.reduce(fn, x, dim, keepdim)
    return r


rule(torch.sum, "sum")(_red("sum"))
rule(torch.mean, "mean")(_red("mean"))
rule(torch.prod, "prod")(_red("prod"))
rule(torch.amax, "amax")(_red("max"))
rule(torch.amin, "amin")(_red("min"))


def _arg(fn):
    def r(self, result, x, dim=None, keepdim=False):
        if dim is None:
            x, dim = self.view(x, (x.numel,)), 0
        return self.reduce(fn, x, dim, keepdim)
    return r


rule(torch.argmax, "argmax")(_arg("argmax"))
rule(torch.argmin, "argmin")(_arg("argmin"))


def _minmax(fn):
    def r(self, result, x, dim=None, keepdim=False, *, out=None):
        if isinstance(dim, (Node, float)):             # torch.max(a, b): elementwise
            return self.ew(fn, x, dim)
        if dim is None:
            return self.reduce(fn, x, None, False)
        return (self.reduce(fn, x, dim, keepdim), self.reduce("arg" + fn, x, dim, keepdim))
    return r


rule(torch.max, "max")(_minmax("max"))
rule(torch.min, "min")(_minmax("min"))


@rule(operator.getitem)
def _getitem(self, result, x, idx):
    if isinstance(x, tuple):
        return x[idx]
    if isinstance(x, Node):
        return _index(self, x, idx)
    return NotImplemented


def _index(self, x: Node, idx):
    """Basic indexing x[...] of ints, unit-step slices, None and Ellipsis as selects, slices
    and views (free: no kernel); tensor indices and strided slices run in torch."""
    items = list(idx) if isinstance(idx, tuple) else [idx]
    if any(i is Ellipsis for i in items):
        at = items.index(Ellipsis)
        used = sum(1 for i in items if i is not None and i is not Ellipsis)
        items[at:at + 1] = [slice(None)] * (len(x.shape) - used)
    dim = 0
    for i in items:
        if i is None:
            x = self.view(x, x.shape[:dim] + (1,) + x.shape[dim:])
            dim += 1
        elif isinstance(i, int) and not isinstance(i, bool):
            size = x.shape[dim]
            if not -size <= i < size:
                return NotImplemented
            x = self.g.add("select", (x,), x.shape[:dim] + x.shape[dim + 1:], x.dtype, dim=dim,
                           index=i % size)
        elif isinstance(i, slice) and i.step in (None, 1) and \
                all(v is None or isinstance(v, int) for v in (i.start, i.stop)):
            start, stop, _ = i.indices(x.shape[dim])
            length = max(0, stop - start)
            if length != x.shape[dim]:
                x = self.g.add("slice", (x,), x.shape[:dim] + (length,) + x.shape[dim + 1:],
                               x.dtype, dim=dim, start=start, length=length)
            dim += 1
        else:
            return NotImplemented
    return x


@rule(torch.var, "var")
def _var(self, result, x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    if isinstance(unbiased, (list, tuple, int)) and not isinstance(unbiased, bool):
        dim, unbiased = unbiased, True
    c = correction if correction is not None else (1 if unbiased else 0)
    return self.var(x, dim, keepdim, c)


@rule(torch.std, "std")
def _std(self, result, x, dim=None, unbiased=True, keepdim=False, *, correction=None):
    return self.ew("sqrt", _var(self, result, x, dim, unbiased, keepdim, correction=correction))


@rule(torch.norm, "norm", torch.linalg.norm, torch.linalg.vector_norm)
def _norm(self, result, x, p="fro", dim=None, keepdim=False, dtype=None, ord=None,  # noqa: A002
          out=None):
    p = ord if ord is not None else p
    if p in ("fro", 2, 2.0, None):
        return self.ew("sqrt", self.reduce("sum", self.ew("mul", x, x), dim, keepdim))
    if p in (1, 1.0):
        return self.reduce("sum", self.ew("abs", x), dim, keepdim)
    if p in (float("inf"), "inf"):
        return self.reduce("max", self.ew("abs", x), dim, keepdim)
    return NotImplemented


@rule(torch.logsumexp, "logsumexp")
def _lse(self, result, x, dim, keepdim=False):
    return self.logsumexp(x, dim, keepdim)


@rule(F.softmax, torch.softmax, "softmax")
def _softmax(self, result, x, dim=None, _stacklevel=3, dtype=None):
    return self.softmax(x, dim)


@rule(F.log_softmax, torch.log_softmax, "log_softmax")
def _log_softmax(self, result, x, dim=None, _stacklevel=3, dtype=None):
    return self.softmax(x, dim, log=True)


@rule(F.normalize)
def _normalize(self, result, x, p=2.0, dim=1, eps=1e-12, out=None):
    n = _norm(self, result, x, p, dim, True)
    return self.ew("div", x, self.ew("max", n, float(eps)))


@rule(F.cosine_similarity, torch.cosine_similarity)
def _cos(self, result, a, b, dim=1, eps=1e-8):
    w12 = self.sum(self.ew("mul", a, b), dim)
    w1 = self.sum(self.ew("mul", a, a), dim)
    w2 = self.sum(self.ew("mul", b, b), dim)
    return self.ew("div", w12, self.ew("sqrt", self.ew("max", self.ew("mul", w1, w2),
                                                       float(eps) ** 2)))


# ---------------------------------------------------------------------------- normalization
@rule(F.layer_norm)
def _layer_norm(self, result, x, normalized_shape, weight=None, bias=None, eps=1e-5):
    axes = tuple(range(len(x.shape) - len(normalized_shape), len(x.shape)))
    return self.normalize(x, axes, eps, weight, bias)


@rule(F.rms_norm)
def _rms_norm(self, result, x, normalized_shape, weight=None, eps=None):
    axes = tuple(range(len(x.shape) - len(normalized_shape), len(x.shape)))
    eps = torch.finfo(torch.float32).eps if eps is None else eps
    ms = self.mean(self.ew("mul", x, x), axes, True)
    y = self.ew("mul", x, self.ew("rsqrt", self.ew("add", ms, float(eps))))
    return self.ew("mul", y, weight) if weight is not None else y


@rule(F.batch_norm)
def _batch_norm(self, result, x, running_mean, running_var, weight=None, bias=None,
                training=False, momentum=0.1, eps=1e-5):
    cs = self.channel_shape(x)
    if training or running_mean is None:
        axes = tuple(i for i in range(len(x.shape)) if i != 1)
        return self.normalize(x, axes, eps, weight, bias, cs)
    inv = self.ew("rsqrt", self.ew("add", self.view(running_var, cs), float(eps)))
    y = self.ew("mul", self.ew("sub", x, self.view(running_mean, cs)), inv)
    if weight is not None:
        y = self.ew("mul", y, self.view(weight, cs))
    if bias is not None:
        y = self.ew("add", y, self.view(bias, cs))
    return y


@rule(F.instance_norm)
def _instance_norm(self, result, x, running_mean=None, running_var=None, weight=None,
                   bias=None, use_input_stats=True, momentum=0.1, eps=1e-5):
    if not use_input_stats:
        return NotImplemented
    axes = tuple(range(2, len(x.shape)))
    return self.normalize(x, axes, eps, weight, bias, self.channel_shape(x))


@rule(F.group_norm)
def _group_norm(self, result, x, num_groups, weight=None, bias=None, eps=1e-5):
    n, c = x.shape[0], x.shape[1]
    rest = math.prod(x.shape[2:])
    xg = self.view(x, (n, num_groups, c // num_groups, rest))
    ws = (num_groups, c // num_groups, 1)
    y = self.normalize(xg, (2, 3), eps, weight, bias, ws)
    return self.view(y, x.shape)


# ---------------------------------------------------------------------------- losses
@rule(F.mse_loss)
def _mse(self, result, a, b, size_average=None, reduce=None, reduction="mean", weight=None):
    d = self.ew("sub", a, b)
    return self.reduction(self.ew("mul", d, d), reduction)


@rule(F.l1_loss)
def _l1(self, result, a, b, size_average=None, reduce=None, reduction="mean"):
    return self.reduction(self.ew("abs", self.ew("sub", a, b)), reduction)


@rule(F.smooth_l1_loss)
def _smooth_l1(self, result, a, b, size_average=None, reduce=None, reduction="mean", beta=1.0):
    d = self.ew("abs", self.ew("sub", a, b))
    if beta == 0:
        return self.reduction(d, reduction)
    quad = self.ew("mul", self.ew("mul", d, d), 0.5 / beta)
    return self.reduction(self.ew("where", self.ew("lt", d, float(beta)), quad,
                                  self.ew("sub", d, 0.5 * beta)), reduction)


@rule(F.huber_loss)
def _huber(self, result, a, b, reduction="mean", delta=1.0, weight=None):
    d = self.ew("abs", self.ew("sub", a, b))
    quad = self.ew("mul", self.ew("mul", d, d), 0.5)
    lin = self.ew("mul", self.ew("sub", d, 0.5 * delta), float(delta))
    return self.reduction(self.ew("where", self.ew("lt", d, float(delta)), quad, lin), reduction)


@rule(F.kl_div)
def _kl(self, result, inp, target, size_average=None, reduce=None, reduction="mean",
        log_target=False):
    if log_target:
        loss = self.ew("mul", self.ew("exp", target), self.ew("sub", target, inp))
    else:  # xlogy(t, t) - t * input, with 0 where t == 0
        pos = self.ew("gt", target, 0.0)
        safe = self.ew("where", pos, target, 1.0)
        loss = self.ew("sub", self.ew("where", pos, self.ew("mul", target, self.ew("log", safe)),
                                      0.0), self.ew("mul", target, inp))
    return self.reduction(loss, reduction)


@rule(F.cross_entropy)
def _cross_entropy(self, result, x, target, weight=None, size_average=None, ignore_index=-100,
                   reduce=None, reduction="mean", label_smoothing=0.0):
    if weight is not None or label_smoothing or len(x.shape) != 2 or target.dtype.is_floating_point:
        return NotImplemented
    logp = self.softmax(x, 1, log=True)
    pick = self.ew("eq", _iota(self, x.shape, 1), self.view(target, (x.shape[0], 1)))
    nll = self.ew("neg", self.sum(self.ew("where", pick, logp, 0.0), 1))
    return self.reduction(nll, reduction)


@rule(F.nll_loss)
def _nll(self, result, x, target, weight=None, size_average=None, ignore_index=-100,
         reduce=None, reduction="mean"):
    if weight is not None or len(x.shape) != 2:
        return NotImplemented
    pick = self.ew("eq", _iota(self, x.shape, 1), self.view(target, (x.shape[0], 1)))
    return self.reduction(self.ew("neg", self.sum(self.ew("where", pick, x, 0.0), 1)),
                          reduction)


@rule(F.triplet_margin_loss)
def _triplet(self, result, a, pos, neg, margin=1.0, p=2.0, eps=1e-6, swap=False,
             size_average=None, reduce=None, reduction="mean"):
    if swap or p != 2:
        return NotImplemented

    def dist(u, v):
        d = self.ew("add", self.ew("sub", u, v), float(eps))
        return self.ew("sqrt", self.sum(self.ew("mul", d, d), -1))

    loss = self.ew("max", self.ew("add", self.ew("sub", dist(a, pos), dist(a, neg)),
                                      float(margin)),
                   0.0)
    return self.reduction(loss, reduction)


@rule(F.hinge_embedding_loss)
def _hinge_emb(self, result, x, target, margin=1.0, size_average=None, reduce=None,
               reduction="mean"):
    neg = self.ew("max", self.ew("sub", float(margin), x), 0.0)
    loss = self.ew("add", self.ew("where", self.ew("eq", target, 1.0), x, 0.0),
                   self.ew("where", self.ew("eq", target, -1.0), neg, 0.0))
    return self.reduction(loss, reduction)


@rule(F.cosine_embedding_loss)
def _cos_emb(self, result, a, b, target, margin=0.0, size_average=None, reduce=None,
             reduction="mean"):
    cos = _cos(self, None, a, b, 1, 1e-8)
    loss = self.ew("where", self.ew("eq", target, 1.0), self.ew("sub", 1.0, cos),
                   self.ew("max", self.ew("sub", cos, float(margin)), 0.0))
    return self.reduction(loss, reduction)


# ================================================================================ matmul
@rule(torch.matmul, torch.mm, torch.bmm, operator.matmul, "matmul", "mm", "bmm")
def _matmul(self, result, a, b):
    if len(a.shape) == 1 or len(b.shape) == 1:
        a2 = self.view(a, (1, a.shape[0])) if len(a.shape) == 1 else a
        b2 = self.view(b, (b.shape[0], 1)) if len(b.shape) == 1 else b
        out = self.matmul(a2, b2, torch.empty(
            torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1]),
            dtype=result.dtype, device="meta"))
        return self.view(out, result.shape)
    return self.matmul(a, b, result)


@rule(getattr)
def _getattr(self, result, x, name):
    if isinstance(x, tuple) and name in ("values", "indices"):
        return x[0 if name == "values" else 1]
    if name in ("T", "mT"):
        dims = list(range(len(x.shape)))
        if name == "T":
            dims = dims[::-1]
        else:
            dims[-1], dims[-2] = dims[-2], dims[-1]
        return self.permute(x, dims)
    return NotImplemented


@rule(torch.einsum)
def _einsum(self, result, eq, *ops):
    """A two-operand contraction over one index that is A's last and B's first, with the
    output A's free indices then B's: a matmul of the operands seen as matrices."""
    if len(ops) == 1 and isinstance(ops[0], (list, tuple)):
        ops = tuple(ops[0])
    if len(ops) != 2 or "..." in eq or "->" not in eq:
        return NotImplemented
    lhs, out = eq.replace(" ", "").split("->")
    ia, ib = lhs.split(",")
    a, b = ops
    shared = set(ia) & set(ib)
    if len(shared) != 1 or ia[-1] != ib[0] or ia[-1] in out or out != ia[:-1] + ib[1:]:
        return NotImplemented
    k = a.shape[-1]
    a2 = self.view(a, (a.numel // k, k))
    b2 = self.view(b, (k, b.numel // k))
    y = self.matmul(a2, b2, torch.empty(a2.shape[0], b2.shape[1], dtype=result.dtype,
                                        device="meta"))
    return self.view(y, result.shape)


@rule(F.scaled_dot_product_attention)
def _sdpa(self, result, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None,
          enable_gqa=False):
    if attn_mask is not None or dropout_p or enable_gqa or q.shape[:-2] != k.shape[:-2]:
        return NotImplemented
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    kt = self.permute(k, tuple(range(len(k.shape) - 2)) + (len(k.shape) - 1, len(k.shape) - 2))
    s_shape = q.shape[:-1] + (k.shape[-2],)
    s = self.matmul(q, kt, torch.empty(s_shape, dtype=result.dtype, device="meta"))
    s = self.ew("mul", s, float(scale))
    if is_causal:   # torch's top-left causal mask: key j <= query i
        keep = self.ew("ge", self.ew("sub", _iota(self, s.shape, -2), _iota(self, s.shape, -1)),
                       0.0)
        s = self.ew("where", keep, s, float("-inf"))
    return self.matmul(self.softmax(s, -1), v, result)


@rule(F.linear)
def _linear(self, result, x, w, b=None):
    y = self.matmul(x, self.permute(w, (1, 0)), result)
    return self.ew("add", y, b) if b is not None else y


@rule(torch.addmm)
def _addmm(self, result, bias, a, b, beta=1, alpha=1):
    y = self.matmul(a, b, result)
    if alpha != 1:
        y = self.ew("mul", y, float(alpha))
    return self.ew("add", y, self.ew("mul", bias, float(beta)) if beta != 1 else bias)


@rule(torch.baddbmm, "baddbmm")
def _baddbmm(self, result, bias, a, b, beta=1, alpha=1):
    return _addmm(self, result, bias, a, b, beta, alpha)


@rule(torch.diag, "diag")
def _diag(self, result, x, diagonal=0):
    if len(x.shape) == 1 and diagonal == 0:
        return self.g.add("diag", (x,), result.shape, result.dtype,
                          orig=(x,), call=("call_function", torch.diag, (x,), {}),
                          label="diag")
    return NotImplemented


# ================================================================================ layout
@rule("view", "reshape", torch.reshape, "flatten", torch.flatten, "unsqueeze", torch.unsqueeze,
      "squeeze", torch.squeeze, "view_as", "reshape_as", "unflatten", torch.unflatten)
def _view(self, result, x, *a, **k):
    return self.view(x, result.shape)


@rule("permute", torch.permute)
def _permute(self, result, x, *dims, **kw):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    dims = kw.get("dims", dims)
    return self.permute(x, dims)


@rule("transpose", torch.transpose, "swapaxes", torch.swapaxes)
def _transpose(self, result, x, d0, d1):
    dims = list(range(len(x.shape)))
    d0, d1 = d0 % len(dims), d1 % len(dims)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return self.permute(x, dims)


@rule("t", torch.t)
def _t(self, result, x):
    return self.permute(x, (1, 0)) if len(x.shape) == 2 else x


@rule("contiguous", "clone", torch.clone, "detach", "float", "type_as", "requires_grad_")
def _identity(self, result, x, *a, **k):
    if result.dtype != x.dtype:
        return self.ew("cast", x, dtype=result.dtype, shape=x.shape)
    return x


@rule("to", "type")
def _to(self, result, x, *a, **k):
    if result.dtype == x.dtype:
        return x
    return self.ew("cast", x, dtype=result.dtype, shape=x.shape)


@rule("expand", "expand_as", torch.broadcast_to)
def _expand(self, result, x, *a, **k):
    return self.g.add("ew", (x,), result.shape, x.dtype, fn="ident")


# ================================================================================ layout II
@rule("narrow", torch.narrow)
def _narrow(self, result, x, dim, start, length):
    return self.g.add("slice", (x,), result.shape, result.dtype, dim=dim % len(x.shape),
                      start=int(start), length=int(length))


@rule("select", torch.select)
def _select(self, result, x, dim, index):
    return self.g.add("select", (x,), result.shape, result.dtype, dim=dim % len(x.shape),
                      index=int(index))


@rule(torch.cat, torch.concat, torch.concatenate)
def _cat(self, result, tensors, dim=0):
    dim = dim % len(result.shape)
    out, offset = None, 0
    for t in tensors:
        if not isinstance(t, Node):
            return NotImplemented
        if t.shape[dim] == 0:
            continue
        # the piece placed at `offset` along dim: zero outside (a masked, shifted load)
        piece = self.g.add("ew", (t,), result.shape, t.dtype, fn="shift", axis=dim,
                           offset=offset)
        out = piece if out is None else self.ew("add", out, piece)
        offset += t.shape[dim]
    return out


@rule(torch.chunk, torch.split, torch.tensor_split, "chunk", "split", "tensor_split")
def _pieces(self, result, x, *args, dim=0, **kw):
    """chunk / split along dim: a tuple of slices whose lengths are the result's own."""
    if not isinstance(result, (tuple, list)) or len(args) > 2:
        return NotImplemented
    dim = int(args[1] if len(args) == 2 else dim) % len(x.shape)
    pieces, start = [], 0
    for r in result:
        length = int(r.shape[dim])
        pieces.append(x if length == x.shape[dim] else self.g.add(
            "slice", (x,), tuple(r.shape), x.dtype, dim=dim, start=start, length=length))
        start += length
    return tuple(pieces)


@rule(torch.unbind, "unbind")
def _unbind(self, result, x, dim=0):
    dim = dim % len(x.shape)
    return tuple(self.g.add("select", (x,), x.shape[:dim] + x.shape[dim + 1:], x.dtype, dim=dim,
                            index=i) for i in range(x.shape[dim]))


@rule(torch.stack)
def _stack(self, result, tensors, dim=0):
    dim = dim % len(result.shape)
    views = [self.view(t, t.shape[:dim] + (1,) + t.shape[dim:]) if isinstance(t, Node) else t
             for t in tensors]
    return _cat(self, result, views, dim)


@rule(F.glu)
def _glu(self, result, x, dim=-1):
    dim = dim % len(x.shape)
    half = x.shape[dim] // 2
    shape = x.shape[:dim] + (half,) + x.shape[dim + 1:]
    a = self.g.add("slice", (x,), shape, x.dtype, dim=dim, start=0, length=half)
    b = self.g.add("slice", (x,), shape, x.dtype, dim=dim, start=half, length=half)
    return self.ew("mul", a, self.ew("sigmoid", b))


def _fill(value_of):
    def r(self, result, *args, **kw):
        value = value_of(args, kw)
        if value is None or result.dtype not in (torch.float32, torch.float16,
                                                 torch.bfloat16):
            return NotImplemented
        return self.g.add("ew", (), result.shape, result.dtype, fn="fill", value=float(value))
    return r


CREATE = {}
for _t, _v in {torch.zeros_like: lambda a, k: 0.0, torch.ones_like: lambda a, k: 1.0,
               torch.full_like: lambda a, k: a[1] if len(a) > 1 else k.get("fill_value"),
               torch.zeros: lambda a, k: 0.0, torch.ones: lambda a, k: 1.0,
               torch.full: lambda a, k: a[1] if len(a) > 1 else k.get("fill_value"),
               "new_zeros": lambda a, k: 0.0, "new_ones": lambda a, k: 1.0,
               torch.tensor: lambda a, k: a[0] if a and is_number(a[0]) else None}.items():
    rule(_t)(_fill(_v))
    CREATE[_t] = RULES[_t]


# ================================================================================ pooling
def _tuple(v, n):
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v) if len(v) == n else tuple(int(v[0]) for _ in range(n))
    return tuple(int(v) for _ in range(n))


def _pool(kind, n):
    def r(self, result, x, kernel_size, stride=None, padding=0, *rest, **kw):
        names = (("dilation", "ceil_mode", "return_indices") if kind == "max" else
                 ("ceil_mode", "count_include_pad", "divisor_override"))
        opts = dict(zip(names, rest))
        opts.update(kw)
        if opts.get("ceil_mode") or opts.get("return_indices") or \
                opts.get("count_include_pad", True) is False or opts.get("divisor_override"):
            return NotImplemented
        k = _tuple(kernel_size, n)
        st = _tuple(stride if stride not in (None, [], ()) else kernel_size, n)
        pd = _tuple(padding, n)
        dl = _tuple(opts.get("dilation", 1), n)
        if not isinstance(result, torch.Tensor):
            return NotImplemented
        return self.g.add("pool", (x,), result.shape, result.dtype, kind=kind, dims=n,
                          kernel=k, stride=st, padding=pd, dilation=dl)
    return r


for _n in (1, 2, 3):
    rule(getattr(F, f"max_pool{_n}d"), getattr(torch, f"max_pool{_n}d"))(_pool("max", _n))
    rule(getattr(F, f"avg_pool{_n}d"), getattr(torch.nn.functional, f"avg_pool{_n}d"))(
        _pool("avg", _n))
rule(torch.avg_pool1d)(_pool("avg", 1))


def _adaptive(kind, n):
    def r(self, result, x, output_size, *a, **k):
        spatial_in, spatial_out = x.shape[-n:], tuple(result.shape[-n:])   # None: as input
        if any(o != 1 for o in spatial_out):
            # windows of one size when every output size divides its input size: the pool
            # template with kernel = stride = input / output (else the windows vary: torch)
            if any(i % o for i, o in zip(spatial_in, spatial_out)) or any(a) or any(k.values()):
                return NotImplemented
            win = tuple(i // o for i, o in zip(spatial_in, spatial_out))
            return _pool(kind, n)(self, result, x, win, win)
        axes = tuple(range(len(x.shape) - n, len(x.shape)))
        if kind == "avg":
            return self.mean(x, axes, True)
        return self.reduce("max", x, axes, True)
    return r


for _n in (1, 2, 3):
    rule(getattr(F, f"adaptive_avg_pool{_n}d"))(_adaptive("avg", _n))
    rule(getattr(F, f"adaptive_max_pool{_n}d"))(_adaptive("max", _n))


# ================================================================================ scans
def _scan(fn):
    def r(self, result, x, dim, *, dtype=None, out=None):
        return self.g.add("scan", (x,), x.shape, x.dtype, fn=fn, axis=dim % len(x.shape),
                          reverse=False, exclusive=False)
    return r


rule(torch.cumsum, "cumsum")(_scan("sum"))
rule(torch.cumprod, "cumprod")(_scan("prod"))


@rule(torch.flip, "flip")
def _flip(self, result, x, dims):
    dims = tuple(d % len(x.shape) for d in (dims if isinstance(dims, (list, tuple)) else [dims]))
    if x.op == "scan" and dims == (x.attrs["axis"],) and x.args[0].op == "flip" and \
            x.args[0].attrs["dims"] == dims:
        # flip(cumsum(flip(y))) is the reverse scan of y
        return self.g.add("scan", (x.args[0].args[0],), x.shape, x.dtype, fn=x.fn,
                          axis=dims[0], reverse=not x.attrs["reverse"],
                          exclusive=x.attrs["exclusive"])
    return self.g.add("flip", (x,), result.shape, result.dtype, dims=dims,
                      call=("call_function", torch.flip, (x, dims), {}), label="flip")


# ================================================================================ convolutions
def _conv_padding(padding, k, d, n):
    """torch's padding argument as ints; 'same' only where it is symmetric (even d * (k - 1))."""
    if padding == "valid":
        return (0,) * n
    if padding == "same":
        total = [dd * (kk - 1) for kk, dd in zip(k, d)]
        return None if any(t % 2 for t in total) else tuple(t // 2 for t in total)
    return _tuple(padding, n)


def _conv(n):
    def r(self, result, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        k = tuple(weight.shape[2:])
        st, dl = _tuple(stride, n), _tuple(dilation, n)
        if "same" == padding and set(st) != {1}:
            return NotImplemented
        pd = _conv_padding(padding, k, dl, n)
        if pd is None or not isinstance(result, torch.Tensor):
            return NotImplemented
        return self.g.add("conv", (x, weight) + ((bias,) if bias is not None else ()),
                          result.shape, result.dtype, dims=n, transposed=False, stride=st,
                          padding=pd, dilation=dl, groups=int(groups), output_padding=(0,) * n,
                          kernel=k)
    return r


def _conv_transpose(n):
    def r(self, result, x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
          dilation=1):
        if not isinstance(result, torch.Tensor) or isinstance(padding, str):
            return NotImplemented
        return self.g.add("conv", (x, weight) + ((bias,) if bias is not None else ()),
                          result.shape, result.dtype, dims=n, transposed=True,
                          stride=_tuple(stride, n), padding=_tuple(padding, n),
                          dilation=_tuple(dilation, n), groups=int(groups),
                          output_padding=_tuple(output_padding, n),
                          kernel=tuple(weight.shape[2:]))
    return r


for _n in (1, 2, 3):
    rule(getattr(F, f"conv{_n}d"), getattr(torch, f"conv{_n}d"))(_conv(_n))
    rule(getattr(F, f"conv_transpose{_n}d"), getattr(torch, f"conv_transpose{_n}d"))(
        _conv_transpose(_n))


# ================================================================================ more elementwise
@rule(torch.exp2, torch.special.exp2, "exp2")
def _exp2(self, result, x):
    return self.ew("exp", self.ew("mul", x, math.log(2.0)))


@rule(F.tanhshrink)
def _tanhshrink(self, result, x):
    return self.ew("sub", x, self.ew("tanh", x))


@rule(F.softshrink)
def _softshrink(self, result, x, lambd=0.5):
    lam = float(lambd)
    return self.ew("where", self.ew("gt", x, lam), self.ew("sub", x, lam),
                   self.ew("where", self.ew("lt", x, -lam), self.ew("add", x, lam), 0.0,
                           dtype=x.dtype))


@rule(F.hardshrink)
def _hardshrink(self, result, x, lambd=0.5):
    return self.ew("where", self.ew("gt", self.ew("abs", x), float(lambd)), x, 0.0,
                   dtype=x.dtype)


# Rounding: float -> int32 conversion truncates toward zero (C's cast, and the interpreter's),
# so trunc(x) = float(int(x)) where |x| < 2^23; larger floats are integers already (and NaN and
# inf compare false there, passing through unchanged). floor, ceil and round build on it.
def _trunc_node(self, x):
    t = self.ew("cast", self.ew("cast", x, dtype=torch.int32, shape=x.shape), dtype=x.dtype,
                shape=x.shape)
    return self.ew("where", self.ew("lt", self.ew("abs", x), 8388608.0), t, x)


def _step(self, cond, x):
    return self.ew("where", cond, 1.0, 0.0, dtype=x.dtype)


@rule(torch.trunc, torch.fix, "trunc", "fix")
def _trunc(self, result, x):
    return _trunc_node(self, x) if x.dtype.is_floating_point else x


@rule(torch.floor, "floor")
def _floor(self, result, x):
    if not x.dtype.is_floating_point:
        return x
    t = _trunc_node(self, x)
    return self.ew("sub", t, _step(self, self.ew("gt", t, x), x))


@rule(torch.ceil, "ceil")
def _ceil(self, result, x):
    if not x.dtype.is_floating_point:
        return x
    t = _trunc_node(self, x)
    return self.ew("add", t, _step(self, self.ew("lt", t, x), x))


@rule(torch.round, "round")
def _round(self, result, x, *, decimals=0):
    """Half to even, as torch: floor(x), plus one above the half, plus one at exactly the
    half when the floor is odd."""
    if decimals or not x.dtype.is_floating_point:
        return NotImplemented if decimals else x
    f = _floor(self, result, x)
    d = self.ew("sub", x, f)                      # exact: x and floor(x) are close
    odd = self.ew("ne", self.ew("mul", _trunc_node(self, self.ew("mul", f, 0.5)), 2.0), f)
    up = self.ew("or", self.ew("gt", d, 0.5), self.ew("and", self.ew("eq", d, 0.5), odd))
    return self.ew("add", f, _step(self, up, x))


@rule(torch.frac, "frac")
def _frac(self, result, x):
    return self.ew("sub", x, _trunc_node(self, x))


@rule(torch.lerp, "lerp")
def _lerp(self, result, a, b, weight):
    return self.ew("add", a, self.ew("mul", _num(weight), self.ew("sub", b, a)))


@rule(F.softmin)
def _softmin(self, result, x, dim=None, _stacklevel=3, dtype=None):
    return self.softmax(self.ew("neg", x), dim)


@rule(F.prelu)
def _prelu(self, result, x, weight):
    w = weight
    if len(x.shape) >= 2 and weight.numel > 1:       # one slope per channel (dim 1)
        w = self.view(weight, self.channel_shape(x))
    return self.ew("where", self.ew("gt", x, 0.0), x, self.ew("mul", w, x))


@rule(F.binary_cross_entropy)
def _bce(self, result, p, t, weight=None, size_average=None, reduce=None, reduction="mean"):
    if weight is not None:
        return NotImplemented
    # torch clamps each log at -100 so that p = 0 or 1 gives a finite loss
    log_p = self.ew("max", self.ew("log", p), -100.0)
    log_q = self.ew("max", self.ew("log", self.ew("sub", 1.0, p)), -100.0)
    loss = self.ew("neg", self.ew("add", self.ew("mul", t, log_p),
                                  self.ew("mul", self.ew("sub", 1.0, t), log_q)))
    return self.reduction(loss, reduction)


@rule(F.binary_cross_entropy_with_logits)
def _bce_logits(self, result, x, t, weight=None, size_average=None, reduce=None,
                reduction="mean", pos_weight=None):
    if weight is not None or pos_weight is not None:
        return NotImplemented
    # max(x, 0) - x t + log(1 + exp(-|x|)): no overflow for large |x|
    soft = self.ew("log", self.ew("add", self.ew("exp", self.ew("neg", self.ew("abs", x))),
                                  1.0))
    loss = self.ew("add", self.ew("sub", self.ew("max", x, 0.0), self.ew("mul", x, t)), soft)
    return self.reduction(loss, reduction)


@rule(F.margin_ranking_loss)
def _margin_ranking(self, result, a, b, y, margin=0.0, size_average=None, reduce=None,
                    reduction="mean"):
    loss = self.ew("max", self.ew("add", self.ew("mul", self.ew("neg", y), self.ew("sub", a, b)),
                                  float(margin)), 0.0)
    return self.reduction(loss, reduction)


@rule(F.poisson_nll_loss)
def _poisson_nll(self, result, x, t, log_input=True, full=False, size_average=None, eps=1e-8,
                 reduce=None, reduction="mean"):
    if full:
        return NotImplemented
    if log_input:
        loss = self.ew("sub", self.ew("exp", x), self.ew("mul", t, x))
    else:
        loss = self.ew("sub", x, self.ew("mul", t, self.ew("log", self.ew("add", x,
                                                                          float(eps)))))
    return self.reduction(loss, reduction)


__all__ = ["Lowering", "RULES", "rule"]
