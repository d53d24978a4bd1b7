"""Read the knowledge cards' TOML on every supported Python: `tomllib` (3.11+), else `tomli`,
else a small parser for the subset the cards use.

The subset: comments, `[table]` and `[dotted.table]` headers, `key = value` with bare keys,
basic and literal strings (single- and multi-line), integers, floats, booleans, arrays (which
may span lines and end with a comma) and inline tables. Anything else raises `ValueError` naming
the line, so a card that strays outside the subset fails loudly on 3.10 instead of being
misread. A test checks that this parser and `tomllib` agree on every shipped card.
"""

from __future__ import annotations

import re
from typing import Any

try:  # Python 3.11+
    import tomllib as _toml  # type: ignore[import-not-found]
except ImportError:  # pragma: no cover - 3.10
    try:
        import tomli as _toml  # type: ignore[import-not-found,no-redef]
    except ImportError:
        _toml = None


def loads(text: str) -> dict[str, Any]:
    """Parse TOML text with the best available parser."""
    if _toml is not None:
        return _toml.loads(text)
    return loads_subset(text)


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_NUMBER = re.compile(r"[+-]?(\d[\d_]*)(\.\d[\d_]*)?([eE][+-]?\d+)?")
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "\\": "\\", "b": "\b", "f": "\f"}


class _Reader:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    @property
    def line(self) -> int:
        return self.text.count("\n", 0, self.pos) + 1

    def fail(self, what: str) -> ValueError:
        return ValueError(f"TOML (card subset) line {self.line}: {what}; fix: stay within the "
                          "subset documented in argus/agent/toml_compat.py or use Python 3.11+")

    def peek(self, n: int = 1) -> str:
        return self.text[self.pos:self.pos + n]

    def skip_space(self, newlines: bool = False) -> None:
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in " \t\r" or (newlines and c == "\n"):
                self.pos += 1
            elif c == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else end
            else:
                return

    def expect(self, s: str) -> None:
        if not self.text.startswith(s, self.pos):
            raise self.fail(f"expected {s!r}")
        self.pos += len(s)

    def key(self) -> str:
        m = _BARE_KEY.match(self.text, self.pos)
        if not m:
            raise self.fail("expected a bare key")
        self.pos = m.end()
        return m.group()

    def value(self) -> Any:
        self.skip_space()
        c = self.peek()
        if self.peek(3) == '"""':
            return self._multiline('"""', escapes=True)
        if self.peek(3) == "'''":
            return self._multiline("'''", escapes=False)
        if c == '"':
            return self._basic()
        if c == "'":
            end = self.text.find("'", self.pos + 1)
            if end < 0 or "\n" in self.text[self.pos:end]:
                raise self.fail("unterminated literal string")
            s = self.text[self.pos + 1:end]
            self.pos = end + 1
            return s
        if c == "[":
            return self._array()
        if c == "{":
            return self._inline_table()
        for word, val in (("true", True), ("false", False)):
            if self.text.startswith(word, self.pos):
                self.pos += len(word)
                return val
        m = _NUMBER.match(self.text, self.pos)
        if m and m.group():
            self.pos = m.end()
            raw = m.group().replace("_", "")
            return float(raw) if (m.group(2) or m.group(3)) else int(raw)
        raise self.fail(f"cannot read a value starting with {self.peek(10)!r}")

    def _unescape(self, s: str) -> str:
        out, i = [], 0
        while i < len(s):
            c = s[i]
            if c != "\\":
                out.append(c)
                i += 1
                continue
            nxt = s[i + 1:i + 2]
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
            elif nxt == "u":
                out.append(chr(int(s[i + 2:i + 6], 16)))
                i += 6
            elif nxt == "\n":  # line-ending backslash: trim the newline and following space
                i += 2
                while i < len(s) and s[i] in " \t\n\r":
                    i += 1
            else:
                raise self.fail(f"unknown escape \\{nxt}")
        return "".join(out)

    def _basic(self) -> str:
        i = self.pos + 1
        while i < len(self.text):
            c = self.text[i]
            if c == "\\":
                i += 2
                continue
            if c == '"':
                s = self.text[self.pos + 1:i]
                self.pos = i + 1
                return self._unescape(s)
            if c == "\n":
                break
            i += 1
        raise self.fail("unterminated string")

    def _multiline(self, quote: str, escapes: bool) -> str:
        start = self.pos + 3
        end = self.text.find(quote, start)
        if end < 0:
            raise self.fail("unterminated multi-line string")
        while self.text.startswith(quote[0], end + 3):  # up to two quotes may end the body
            end += 1
        body = self.text[start:end]
        self.pos = end + 3
        if body.startswith("\r\n"):
            body = body[2:]
        elif body.startswith("\n"):
            body = body[1:]
        return self._unescape(body) if escapes else body

    def _array(self) -> list[Any]:
        self.expect("[")
        items: list[Any] = []
        while True:
            self.skip_space(newlines=True)
            if self.peek() == "]":
                self.pos += 1
                return items
            items.append(self.value())
            self.skip_space(newlines=True)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise self.fail("expected ',' or ']' in an array")

    def _inline_table(self) -> dict[str, Any]:
        self.expect("{")
        table: dict[str, Any] = {}
        self.skip_space()
        if self.peek() == "}":
            self.pos += 1
            return table
        while True:
            self.skip_space()
            k = self.key()
            self.skip_space()
            self.expect("=")
            if k in table:
                raise self.fail(f"duplicate key {k!r}")
            table[k] = self.value()
            self.skip_space()
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() == "}":
                self.pos += 1
                return table
            else:
                raise self.fail("expected ',' or '}' in an inline table")


def loads_subset(text: str) -> dict[str, Any]:
    """Parse the card subset of TOML (see the module docstring)."""
    r = _Reader(text)
    root: dict[str, Any] = {}
    current = root
    while True:
        r.skip_space(newlines=True)
        if r.pos >= len(r.text):
            return root
        if r.peek(2) == "[[":
            raise r.fail("arrays of tables are outside the card subset")
        if r.peek() == "[":
            r.pos += 1
            r.skip_space()
            parts = [r.key()]
            while r.peek() == ".":
                r.pos += 1
                parts.append(r.key())
            r.skip_space()
            r.expect("]")
            current = root
            for part in parts:
                nxt = current.setdefault(part, {})
                if not isinstance(nxt, dict):
                    raise r.fail(f"table [{'.'.join(parts)}] redefines a value")
                current = nxt
        else:
            k = r.key()
            r.skip_space()
            r.expect("=")
            if k in current:
                raise r.fail(f"duplicate key {k!r}")
            current[k] = r.value()
        r.skip_space()
        if r.pos < len(r.text) and r.peek() != "\n":
            raise r.fail(f"unexpected text {r.peek(20)!r} after a statement")
