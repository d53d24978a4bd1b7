"""Text → Kernel: the inverse of `printer.print_kernel`, used for round-trip and per-pass
text-in/text-out tests. Errors name the line and column."""

from __future__ import annotations

import json
import re
from typing import Any

from argus.errors import IRError, Loc
from argus.ir.core import Kernel, Op, Param, Region, Value
from argus.ir.ops import ALL_OPS
from argus.ir.types import parse_type

_TOKEN = re.compile(r"""
    (?P<ws>[ \t\r\n]+)
  | (?P<value>%(?:[A-Za-z_][A-Za-z_0-9]*\.)?\d+)
  | (?P<type>[a-z]+<[^<>]*>)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<number>-?(?:\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+|(?:inf|nan)(?![A-Za-z_0-9])))
  | (?P<word>[A-Za-z_][A-Za-z_0-9.]*)
  | (?P<punct>[(){},=:@])
""", re.VERBOSE)


class _Tokens:
    def __init__(self, text: str):
        self.items: list[tuple[str, str, int]] = []
        pos, line = 0, 1
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if not m:
                raise IRError(f"line {line}: unexpected text {text[pos:pos + 20]!r}")
            kind = m.lastgroup
            tok = m.group()
            if kind != "ws":
                self.items.append((kind, tok, line))
            line += tok.count("\n")
            pos = m.end()
        self.i = 0

    def peek(self) -> tuple[str, str, int]:
        return self.items[self.i] if self.i < len(self.items) else ("eof", "", -1)

    def next(self) -> tuple[str, str, int]:
        tok = self.peek()
        self.i += 1
        return tok

    def expect(self, text: str) -> None:
        kind, tok, line = self.next()
        if tok != text:
            raise IRError(f"line {line}: expected {text!r}, found {tok!r}")


class _Parser:
    def __init__(self, text: str):
        self.t = _Tokens(text)
        self.values: dict[int, Value] = {}

    def parse_value_ref(self, tok: str, line: int) -> Value:
        vid = int(tok.rsplit(".", 1)[-1].lstrip("%"))
        if vid not in self.values:
            raise IRError(f"line {line}: use of undefined value {tok}")
        return self.values[vid]

    def define(self, tok: str, type_text: str) -> Value:
        body = tok[1:]
        hint, _, num = body.rpartition(".")
        v = Value(int(num), parse_type(type_text), hint)
        self.values[v.id] = v
        return v

    def parse_type_token(self) -> str:
        kind, tok, line = self.t.next()
        if kind not in ("type", "word"):
            raise IRError(f"line {line}: expected a type, found {tok!r}")
        return tok

    def parse_literal(self) -> Any:
        kind, tok, line = self.t.next()
        if kind == "value":
            return self.parse_value_ref(tok, line)
        if kind == "number":
            if tok in ("inf", "-inf", "nan"):
                return float(tok)
            return float(tok) if any(c in tok for c in ".eE") else int(tok)
        if kind == "string":
            return json.loads(tok)
        if kind == "word":
            if tok in ("true", "false"):
                return tok == "true"
            if tok == "none":
                return None
            if tok in ("inf", "nan"):
                return float(tok)
            raise IRError(f"line {line}: unexpected word {tok!r}")
        if tok == "(":
            items = []
            while self.t.peek()[1] != ")":
                items.append(self.parse_literal())
                if self.t.peek()[1] == ",":
                    self.t.next()
            self.t.expect(")")
            return tuple(items)
        raise IRError(f"line {line}: unexpected {tok!r}")

    def parse_fields(self, close: str) -> dict[str, Any]:
        out = {}
        while self.t.peek()[1] != close:
            _, name, _ = self.t.next()
            self.t.expect("=")
            out[name] = self.parse_literal()
            if self.t.peek()[1] == ",":
                self.t.next()
        self.t.expect(close)
        return out

    def parse_loc(self) -> Loc:
        if self.t.peek()[1] != "loc":
            return Loc.unknown()
        self.t.next()
        self.t.expect("(")
        _, file_tok, _ = self.t.next()
        self.t.expect(":")
        _, line_tok, _ = self.t.next()
        self.t.expect(")")
        return Loc(json.loads(file_tok), int(line_tok))

    def parse_op(self) -> Op:
        results: list[tuple[str, str]] = []
        if self.t.peek()[0] == "value":
            while True:
                _, tok, _ = self.t.next()
                self.t.expect(":")
                results.append((tok, self.parse_type_token()))
                if self.t.peek()[1] != ",":
                    break
                self.t.next()
            self.t.expect("=")
        kind, name, line = self.t.next()
        cls = ALL_OPS.get(name)
        if cls is None:
            raise IRError(f"line {line}: unknown op {name!r}; known: {', '.join(sorted(ALL_OPS))}")
        defined = [self.define(tok, ty) for tok, ty in results]
        self.t.expect("(")
        fields = self.parse_fields(")")
        if self.t.peek()[1] == "{":
            self.t.next()
            fields.update(self.parse_fields("}"))
        while self.t.peek()[0] == "word" and self.t.i + 1 < len(self.t.items) \
                and self.t.items[self.t.i + 1][1] == "{":
            _, region_name, _ = self.t.next()
            self.t.expect("{")
            ops = []
            while self.t.peek()[1] != "}":
                ops.append(self.parse_op())
            self.t.expect("}")
            fields[region_name] = Region(tuple(ops))
        loc = self.parse_loc()
        # distribute the defined values back onto the RESULTS fields
        it = iter(defined)
        for rname in cls.RESULTS:
            if rname == "ids":
                count = len([r for r in results])
                fields[rname] = tuple(next(it) for _ in range(count))
            else:
                fields[rname] = next(it)
        try:
            return cls(**fields, loc=loc)
        except TypeError as e:
            raise IRError(f"line {line}: bad fields for {name}: {e}") from None

    def parse_kernel(self) -> Kernel:
        self.t.expect("kernel")
        self.t.expect("@")
        _, name, _ = self.t.next()
        self.t.expect("(")
        params = []
        while self.t.peek()[1] != ")":
            _, tok, _ = self.t.next()
            self.t.expect(":")
            v = self.define(tok, self.parse_type_token())
            params.append(Param(v.hint, v))
            if self.t.peek()[1] == ",":
                self.t.next()
        self.t.expect(")")
        self.t.expect("{")
        attrs = self.parse_fields("}")
        self.t.expect("{")
        ops = []
        while self.t.peek()[1] != "}":
            ops.append(self.parse_op())
        self.t.expect("}")
        return Kernel(name, tuple(params), Region(tuple(ops)), tuple(sorted(attrs.items())))


def parse_kernel(text: str) -> Kernel:
    return _Parser(text).parse_kernel()
