"""The small C-like expression language of lowered pipeline fields and of tag ops.

Job: parse once, evaluate on Python ints (replay, decoding) and on z3 Int terms (proofs) with
the *same* meaning the CUDA emitter gives the text. Lowering writes `stage_expr` and
`parity_expr` of produce/consume in it (e.g. `n % S`, `(n / S) & 1`, `((n / S) & 1) ^ 1`), and
tag ops write tag functions, tensor tags, axioms and assertions in it.

Grammar (C precedence, loosest first):
    || or    && and    |    ^    &    == !=    < <= > >=    + -    * / %    unary - ! not
    atoms: integers, names (n, S, c0, x0, a0, loop values %12 or %i.12), $i (operand i),
    calls f(args), field access e.field, parentheses.

Invariant kept: the solver encoding is exact for the values the language is used on. `/` and
`%` are C's (truncating) and z3's (floor) at once because every counter, coordinate and index
is non-negative; where a dividend may be negative (a tag assertion's arithmetic) or a divisor
is a runtime value (a launch precondition), the caller passes `Env.divmod`, which builds the
term it means on z3 operands (Model.eval_tag_expr). Bitwise operators need one constant operand on z3 Int terms and are encoded
bit by bit (`x & 1` = x % 2, `x ^ 1` = x + 1 - 2·(x % 2)): linear integer arithmetic, never
bit-vector division (INVARIANTS.md §3.6 rule 2). Anything else raises ExprError, which the
verifier reports as "unknown", never as a proof.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import z3


class ExprError(ValueError):
    """An expression that does not parse, or has no exact encoding."""


# ----------------------------------------------------------------------------- AST


@dataclass(frozen=True)
class Num:
    value: int


@dataclass(frozen=True)
class Name:
    name: str


@dataclass(frozen=True)
class Ref:
    index: int


@dataclass(frozen=True)
class Field:
    base: Any
    name: str


@dataclass(frozen=True)
class Call:
    fn: str
    args: tuple


@dataclass(frozen=True)
class Unary:
    op: str
    arg: Any


@dataclass(frozen=True)
class Bin:
    op: str
    lhs: Any
    rhs: Any


_TOKEN = re.compile(r"""\s*(?:
    (?P<num>\d+)
  | (?P<ref>\$\d+)
  | (?P<val>%(?:[A-Za-z_][A-Za-z_0-9]*\.)?\d+)
  | (?P<name>[A-Za-z_][A-Za-z_0-9]*)
  | (?P<op>\|\||&&|==|!=|<=|>=|[-+*/%&^|<>!().,])
)""", re.VERBOSE)

# binary operators by precedence level, loosest first (C)
_LEVELS = (("||", "or"), ("&&", "and"), ("|",), ("^",), ("&",), ("==", "!="),
           ("<", "<=", ">", ">="), ("+", "-"), ("*", "/", "%"))
_CANON = {"or": "||", "and": "&&"}


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.strip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"cannot read {text[pos:pos + 12]!r} in expression {text!r}")
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        pos = m.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str]:
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "")

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if value is not None and tok[1] != value:
            raise ExprError(f"expected {value!r} but found {tok[1] or 'the end'} in {self.text!r}")
        self.i += 1
        return tok

    def parse(self):
        node = self.level(0)
        if self.peek()[0] != "eof":
            raise ExprError(f"unexpected {self.peek()[1]!r} in {self.text!r}")
        return node

    def level(self, k: int):
        if k == len(_LEVELS):
            return self.unary()
        node = self.level(k + 1)
        while self.peek()[1] in _LEVELS[k]:
            tok = self.take()[1]
            node = Bin(_CANON.get(tok, tok), node, self.level(k + 1))
        return node

    def unary(self):
        _, tok = self.peek()
        if tok in ("-", "!", "not"):
            self.take()
            return Unary("!" if tok == "not" else tok, self.unary())
        return self.postfix()

    def postfix(self):
        node = self.atom()
        while self.peek()[1] == ".":
            self.take()
            kind, name = self.take()
            if kind != "name":
                raise ExprError(f"expected a field name after '.' in {self.text!r}")
            node = Field(node, name)
        return node

    def atom(self):
        kind, tok = self.take()
        if kind == "num":
            return Num(int(tok))
        if kind == "ref":
            return Ref(int(tok[1:]))
        if kind == "val":
            return Name("%" + tok.rsplit(".", 1)[-1].lstrip("%"))
        if kind == "name":
            if tok == "not":
                return Unary("!", self.unary())
            if self.peek()[1] == "(":
                self.take("(")
                args = []
                while self.peek()[1] != ")":
                    args.append(self.level(0))
                    if self.peek()[1] == ",":
                        self.take(",")
                self.take(")")
                return Call(tok, tuple(args))
            if tok == "none":
                return Name("none")
            return Name(tok)
        if tok == "(":
            node = self.level(0)
            self.take(")")
            return node
        raise ExprError(f"unexpected {tok or 'end'} in expression {self.text!r}")


@lru_cache(maxsize=4096)
def parse(text: str):
    """The AST of `text` (cached: lowered kernels repeat the same few expressions)."""
    return _Parser(text).parse()


def names(node) -> set[str]:
    """Every free name in an AST (n, S, %12, c0 …), for checking what an expression reads."""
    if isinstance(node, Name):
        return {node.name}
    out: set[str] = set()
    for child in _children(node):
        out |= names(child)
    return out


def _children(node) -> tuple:
    if isinstance(node, Field):
        return (node.base,)
    if isinstance(node, Call):
        return node.args
    if isinstance(node, Unary):
        return (node.arg,)
    if isinstance(node, Bin):
        return (node.lhs, node.rhs)
    return ()


# ----------------------------------------------------------------------------- evaluation


def _is_z3(x) -> bool:
    return isinstance(x, z3.ExprRef)


def _const_int(x) -> int | None:
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if _is_z3(x) and z3.is_int_value(z3.simplify(x)):
        return z3.simplify(x).as_long()
    return None


def _bit(x, b: int):
    return (x / (1 << b)) % 2 if _is_z3(x) else (x >> b) & 1


def _bitwise(op: str, a, b):
    if not _is_z3(a) and not _is_z3(b):
        return {"&": a & b, "^": a ^ b, "|": a | b}[op]
    ca, cb = _const_int(a), _const_int(b)
    if ca is None and cb is None:
        raise ExprError(f"'{op}' of two symbolic values has no linear-arithmetic encoding; "
                        "one operand must be a constant")
    x, c = (b, ca) if ca is not None else (a, cb)
    if c < 0:
        raise ExprError(f"'{op}' with a negative constant {c}")
    if op == "&" and c & (c + 1) == 0:
        return x % (c + 1)  # low-bit mask
    out = x if op in ("^", "|") else 0
    for bit in range(c.bit_length()):
        if not (c >> bit) & 1:
            continue
        v = _bit(x, bit)
        if op == "&":
            out = out + (1 << bit) * v
        elif op == "^":
            out = out + (1 << bit) * (1 - 2 * v)
        else:
            out = out + (1 << bit) * (1 - v)
    return out


def _as_bool(x):
    if _is_z3(x) and z3.is_bool(x):
        return x
    if _is_z3(x):
        return x != 0
    return bool(x)


def _div(a, b):
    if _is_z3(a) or _is_z3(b):
        if _const_int(b) is None:
            raise ExprError("division by a symbolic value is not linear arithmetic")
        return a / b
    if b == 0:
        raise ExprError("division by zero")
    q = abs(a) // abs(b)  # C truncation (operands are non-negative in practice)
    return q if (a >= 0) == (b >= 0) else -q


def _mod(a, b):
    if _is_z3(a) or _is_z3(b):
        if _const_int(b) is None:
            raise ExprError("remainder by a symbolic value is not linear arithmetic")
        return a % b
    return a - _div(a, b) * b


_CMP = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
        "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, ">=": lambda a, b: a >= b}


def _mul(a, b):
    ca, cb = _const_int(a), _const_int(b)
    if _is_z3(a) and _is_z3(b) and ca is None and cb is None:
        return a * b  # non-linear; z3 still answers bounded instances (persistent tiles x Kt)
    return a * b


@dataclass
class Env:
    """What names, operands, calls and fields mean during one evaluation."""

    names: dict[str, Any]
    refs: tuple = ()
    call: Callable[[str, list], Any] | None = None
    field: Callable[[Any, str], Any] | None = None
    # `/` or `%` ('floordiv' / 'mod') on z3 operands, by a runtime divisor too, as the
    # caller means it (C's for a tag assertion, the floor for a launch precondition), or None
    # (z3's floor by a numeral only: exact for the non-negative counters of pipeline fields)
    divmod: Callable[[str, Any, Any], Any] | None = None


def evaluate(node_or_text, env: Env):
    """Evaluate an AST (or text) to a Python int/bool or a z3 term."""
    node = parse(node_or_text) if isinstance(node_or_text, str) else node_or_text
    return _eval(node, env)


def _eval(node, env: Env):
    if isinstance(node, Num):
        return node.value
    if isinstance(node, Name):
        if node.name not in env.names:
            raise ExprError(f"unknown name {node.name!r}; known here: "
                            f"{', '.join(sorted(env.names)) or 'none'}")
        return env.names[node.name]
    if isinstance(node, Ref):
        if node.index >= len(env.refs):
            raise ExprError(f"operand ${node.index} does not exist ({len(env.refs)} operands)")
        return env.refs[node.index]
    if isinstance(node, Field):
        if env.field is None:
            raise ExprError(f"field access .{node.name} is not allowed here")
        return env.field(_eval(node.base, env), node.name)
    if isinstance(node, Call):
        if env.call is None:
            raise ExprError(f"call of {node.fn}() is not allowed here")
        return env.call(node.fn, [_eval(a, env) for a in node.args])
    if isinstance(node, Unary):
        v = _eval(node.arg, env)
        if node.op == "-":
            return -v
        b = _as_bool(v)
        return z3.Not(b) if _is_z3(b) else not b
    a, b = _eval(node.lhs, env), _eval(node.rhs, env)
    op = node.op
    if op in ("&&", "||"):
        a, b = _as_bool(a), _as_bool(b)
        if _is_z3(a) or _is_z3(b):
            return z3.And(a, b) if op == "&&" else z3.Or(a, b)
        return (a and b) if op == "&&" else (a or b)
    if op in _CMP:
        return _CMP[op](a, b)
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return _mul(a, b)
    if op in ("/", "%"):
        if env.divmod is not None and (_is_z3(a) or _is_z3(b)):
            # the caller's meaning, by a runtime divisor too (Model.eval_tag_expr)
            return env.divmod("floordiv" if op == "/" else "mod", a, b)
        return _div(a, b) if op == "/" else _mod(a, b)
    return _bitwise(op, a, b)
