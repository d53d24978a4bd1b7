"""The user's words in findings: variable names for values, the lines that define them, and the
role, warpgroup and thread that run a reported op.

Job: a finding is found where the symptom shows (a wgmma, a store, a produce step); the fix is
often on another line (the buffer's allocation, the loop bound's formula, the accumulator's
zeroing). This module reads, from the kernel alone,

  * the Python name of every value: the assignment target on the line of its defining op
    (`sA = ag.smem(...)`, `pid_m, pid_n = ag.grid(...)`, `for k in ag.range(...)`,
    `with pipe.consume() as st:`), read from the source file the op's location names. Only a
    value that no other op of the same line consumes takes the line's name (`a =
    sA[st].rows_of(...)` names the view, not the stage index). A kernel whose source is gone
    (parsed IR text) keeps the IR names (%s.21);
  * for a finding's location, the definitions it depends on: the operands of the ops on that
    line, one more hop through scalar arithmetic, and the bounds of the loops around them,
    each with its name and line (`defined`);
  * the role, warpgroups and thread that run the op (an op inside an `elect`, such as a TMA
    copy and the expect_tx of a produce step, is run by the elected thread 0 of its
    warpgroup; a fence by every writing thread).

`annotate(kernel, diagnostics)` rewrites IR names in messages and witnesses to the user's
names and adds `defined` / role / thread entries where a finding lacks them; a note's message
is renamed only. It never changes a severity. checker.run renames the findings' subjects and
messages the same way (`rename_text`), so Report.findings and the diagnostics agree.
"""

from __future__ import annotations

import dataclasses
import linecache
import re
from typing import Any

from argus.errors import Diagnostic, Loc
from argus.ir import ops as O
from argus.ir.core import Kernel, Op, Value

_ASSIGN = re.compile(r"^\s*([A-Za-z_][\w]*(?:\s*,\s*[A-Za-z_][\w]*)*)\s*,?\s*(?::[^=]*)?=(?!=)")
_FOR = re.compile(r"^\s*for\s+([A-Za-z_]\w*)\s+in\b")
_WITH_AS = re.compile(r"\bas\s+([A-Za-z_]\w*)\s*:")
_IR_NAME = re.compile(r"%([A-Za-z_]\w*)\.(\d+)|%(\d+)\b")
# ops whose thread is the elected one of its warpgroup in a kernel lowered before thread
# election was an op (lower/elect.py); once elected, the `elect` around an op says it
_ELECTED = (O.TmaLoad, O.Produce)


@dataclasses.dataclass
class _Scope:
    role: O.RoleOp | None
    loops: tuple[O.For, ...]
    elect: O.Elect | None = None


class Names:
    """Built once per kernel; see the module docstring."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel
        self.defs: dict[int, Op] = {}
        self.by_line: dict[tuple[str, int], list[Op]] = {}
        # the role and enclosing loops of each op of `by_line`, at the same place: an op's
        # key is its line and its place in the line's list (values; one op object placed
        # twice, or two equal ops, are two entries)
        self.line_scopes: dict[tuple[str, int], list[_Scope]] = {}
        self.params = {p.value.id: p.name for p in kernel.params}
        self._walk(kernel.body.ops, None, (), None)
        # in-place writers: TMA copies and stmatrix into a buffer, wgmma into its accumulator,
        # assign into its variable (a view's buffer is its root)
        self.root: dict[int, int] = {}
        self.writers: dict[int, list[Op]] = {}
        for op in kernel.walk():
            if isinstance(op, O.SmemSlice):
                self.root[op.result.id] = self.root.get(op.buffer.id, op.buffer.id)
        for op in kernel.walk():
            target = op.dst if isinstance(op, (O.TmaLoad, O.StMatrix, O.Assign)) else \
                op.acc if isinstance(op, O.Wgmma) else None
            if target is not None:
                self.writers.setdefault(self.root.get(target.id, target.id), []).append(op)
        self.loops_by_loc: dict[str, list[O.For]] = {}
        for op in kernel.walk():
            if isinstance(op, O.For):
                self.loops_by_loc.setdefault(str(op.loc), []).append(op)
        self.names: dict[int, str] = dict(self.params)
        for (file, line), ops in self.by_line.items():
            self._name_line(file, line, ops)
        counts: dict[str, int] = {}
        for n in self.names.values():
            counts[n] = counts.get(n, 0) + 1
        self.unique = {n for n, c in counts.items() if c == 1}

    def _walk(self, ops, role, loops, elect) -> None:
        for op in ops:
            for r in op.results():
                self.defs[r.id] = op
            for extra in ("index", "stage"):  # role index, pipeline stage: block values
                v = getattr(op, extra, None)
                if isinstance(v, Value) and v.id not in self.defs:
                    self.defs[v.id] = op
            if op.loc.line:
                self.by_line.setdefault((op.loc.file, op.loc.line), []).append(op)
                self.line_scopes.setdefault((op.loc.file, op.loc.line), []).append(
                    _Scope(role, loops, elect))
            inner_role = op if isinstance(op, O.RoleOp) else role
            inner_loops = loops + (op,) if isinstance(op, O.For) else loops
            inner_elect = op if isinstance(op, O.Elect) else elect
            for region in op.regions():
                self._walk(region.ops, inner_role, inner_loops, inner_elect)

    def _name_line(self, file: str, line: int, ops: list[Op]) -> None:
        text = linecache.getline(file, line)
        if not text:
            return
        used = {v.id for op in ops for v in op.operands()}
        m = _FOR.match(text)
        if m:
            for op in ops:
                if isinstance(op, O.For):
                    self.names.setdefault(op.var.id, m.group(1))
            return
        m = _WITH_AS.search(text)
        if m:
            for op in ops:
                for extra in ("index", "stage"):
                    v = getattr(op, extra, None)
                    if isinstance(v, Value):
                        self.names.setdefault(v.id, m.group(1))
            return
        m = _ASSIGN.match(text)
        if not m:
            return
        targets = [t.strip() for t in m.group(1).split(",") if t.strip()]
        free = [r for op in ops for r in op.results() if r.id not in used]
        if len(targets) == 1 and len(free) >= 1:
            self.names.setdefault(free[-1].id, targets[0])
        elif len(targets) == len(free):
            for t, r in zip(targets, free):
                self.names.setdefault(r.id, t)

    # -- queries ------------------------------------------------------------------------
    def name(self, vid: int) -> str | None:
        n = self.names.get(vid)
        if n is None:
            return None
        if n in self.unique or vid not in self.defs:
            return n
        return f"{n}@{self.defs[vid].loc}"

    def rename(self, text: str) -> str:
        def sub(m: re.Match) -> str:
            vid = int(m.group(2) or m.group(3))
            n = self.name(vid)
            if n is None and vid in self.root:   # an unnamed view (`sX.view().rows_of(..)`)
                buf = self.name(self.root[vid])
                n = f"a view of {buf}" if buf is not None else None
            return n if n is not None else m.group(0)
        return _IR_NAME.sub(sub, text)

    def loc_named(self, text: str) -> Loc | None:
        """The location of an op whose `str(loc)` is `text` ('file.py:12')."""
        for ops in self.by_line.values():
            if ops and str(ops[0].loc) == text:
                return ops[0].loc
        return None

    def ops_at(self, loc: Loc) -> list[Op]:
        return self.by_line.get((loc.file, loc.line), [])

    def definitions(self, loc: Loc, limit: int = 12) -> dict[str, str]:
        """name -> 'file:line' of what the ops at `loc` read, the loops around them and their
        bounds, then one more hop through scalars; only definitions on other lines. A value
        without a name of its own (the `k1 - k0` inside `steps = ag.maximum(k1 - k0, 0)`) is
        looked through to the named values it is computed from: a loop bound's formula is
        the line a wrong trip count is fixed on (a split's `k1`), not the bound's own line."""
        out: dict[str, str] = {}
        ops = self.ops_at(loc)
        later: list[int] = []
        through: set[int] = set()

        def add(vid: int, deeper: bool) -> None:
            op = self.defs.get(vid)
            if op is None:
                return
            n = self.name(vid)
            if n is not None and op.loc.line and op.loc.line != loc.line:
                out.setdefault(n, str(op.loc))
            if n is None and not isinstance(op, (O.SmemAlloc, O.PipelineCreate, O.For)) \
                    and vid not in through and len(through) < 40:
                through.add(vid)   # unnamed arithmetic: its operands, at the same depth
                for v in op.operands():
                    add(v.id, deeper)
                return
            if deeper and not isinstance(op, (O.SmemAlloc, O.PipelineCreate, O.For)):
                later.extend(v.id for v in op.operands())
        for op in ops:
            for v in op.operands():
                add(v.id, True)
        for _, sc in self._innermost(loc):
            for loop in reversed(sc.loops):
                n = self.name(loop.var.id)
                if n is not None:
                    out.setdefault(f"loop {n}", str(loop.loc))
                add(loop.stop.id, True)
        for vid in later:
            add(vid, False)
        return dict(list(out.items())[:limit])

    def sources(self, loc: Loc, limit: int = 6) -> dict[str, str]:
        """'tensor -> file:line' of the loads and TMA copies whose data reaches the ops at
        `loc` (a backward slice over results, in-place updates of accumulators and variables,
        and the copies that fill shared-memory buffers): a wrong coordinate in a stored or
        multiplied element is fixed on one of these lines."""
        out: dict[str, list[str]] = {}
        todo = [v.id for op in self.ops_at(loc) for v in op.operands()]
        seen: set[int] = set()
        while todo and len(seen) < 400:
            vid = todo.pop()
            if vid in seen:
                continue
            seen.add(vid)
            ops = ([self.defs[vid]] if vid in self.defs else []) + \
                self.writers.get(self.root.get(vid, vid), [])
            for op in ops:
                if isinstance(op, (O.Load, O.TmaLoad)):
                    t = self.params.get(op.tensor.id, str(op.tensor))
                    coords = op.coords if isinstance(op, O.TmaLoad) else op.offsets
                    used: list[str] = []
                    # the coordinates' named definitions on other lines (through the
                    # arithmetic written on the copy's own line)
                    stack, visited = list(coords), set()
                    while stack and len(visited) < 40:
                        v = stack.pop()
                        if v.id in visited:
                            continue
                        visited.add(v.id)
                        dv, n = self.defs.get(v.id), self.name(v.id)
                        if dv is None:
                            continue
                        if dv.loc.line == op.loc.line and dv.loc.file == op.loc.file:
                            stack.extend(dv.operands())
                        elif n is not None and dv.loc.line and \
                                not isinstance(dv, O.For) and f"{n} at {dv.loc}" not in used:
                            used.append(f"{n} at {dv.loc}")
                    where = str(op.loc) + (f" (coordinates from {', '.join(used[:3])})"
                                           if used else "")
                    if where not in out.setdefault(t, []):
                        out[t].append(where)
                todo.extend(v.id for v in op.operands())
        return {t: ", ".join(w) for t, w in list(out.items())[:limit]}

    def _innermost(self, loc: Loc) -> list[tuple[Op, _Scope]]:
        """The first op at `loc` inside the most roles and loops, with its scope (or none):
        lowering places ops of its own at a line's location outside them (a reduction's
        shared-memory scratch), which must not stand for the line."""
        key = (loc.file, loc.line)
        placed = list(zip(self.by_line.get(key, []), self.line_scopes.get(key, [])))

        def depth(sc: _Scope) -> int:
            return (sc.role is not None) + len(sc.loops)
        return sorted(placed, key=lambda p: -depth(p[1]))[:1]

    def who(self, loc: Loc) -> dict[str, Any]:
        placed = self._innermost(loc)
        if not placed:
            return {}
        ops = [op for op, _ in placed]
        sc = placed[0][1]
        out: dict[str, Any] = {}
        if sc.role is not None:
            out["role"] = sc.role.name
            out["warpgroup"] = 0 if sc.role.warpgroups == 1 else \
                f"each of 0..{sc.role.warpgroups - 1}"
        if sc.role is None:
            # no warp specialization: every thread of the CTA runs the op
            out["thread"] = 0
            out["threads"] = "every thread of the CTA runs it (thread 0 shown)"
            return out
        out["thread"] = 0
        elected = sc.elect is not None if self.kernel.attr("elected", False) else \
            any(isinstance(op, _ELECTED) for op in ops)
        out["threads"] = ("every thread of the warpgroup runs it (thread 0 shown)"
                          if not elected else
                          "the elected thread 0 of the warpgroup issues it"
                          if sc.elect is None or sc.elect.threads == 1 else
                          f"{sc.elect.threads} elected threads of the warpgroup run it "
                          f"(thread 0 shown)")
        return out


def _loop_keys(names: Names, x: Any) -> Any:
    """{'loop@kernels.py:62': 3} -> {'k (loop@kernels.py:62)': 3}: the loop's variable."""
    if isinstance(x, dict):
        out = {}
        for k, v in x.items():
            key = k
            if isinstance(k, str) and (k.startswith("loop@") or k in names.loops_by_loc):
                file_line = k.removeprefix("loop@")
                for op in names.loops_by_loc.get(file_line, []):
                    n = names.name(op.var.id)
                    if n is not None:
                        key = f"{n.split('@')[0]} ({k})"
                        break
            out[key] = _loop_keys(names, v)
        return out
    return x


def _rename_any(names: Names, x: Any) -> Any:
    if isinstance(x, str):
        return names.rename(x)
    if isinstance(x, dict):
        return {k: _rename_any(names, v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_rename_any(names, v) for v in x)
    return x


def build(kernel: Kernel) -> Names | None:
    """Names(kernel), or None where the kernel's names cannot be read (naming is a courtesy:
    the findings stand without it)."""
    try:
        return Names(kernel)
    except Exception:  # noqa: BLE001 - see above
        return None


def rename_text(names: Names | None, text: str) -> str:
    """`text` with the IR names of values (%s.12, %46) replaced by the user's where known."""
    return names.rename(text) if names is not None and text else text


def annotate(kernel: Kernel, diagnostics: list[Diagnostic],
             names: Names | None = None) -> list[Diagnostic]:
    """The user's names, defining lines and threads on every error/warning/unknown; a note
    (a proven invariant) gets the user's names in its message only."""
    names = names if names is not None else build(kernel)
    if names is None:
        return diagnostics
    out = []
    for d in diagnostics:
        if d.severity == "note":
            out.append(dataclasses.replace(d, message=names.rename(d.message)))
            continue
        wit = _rename_any(names, dict(d.counterexample))
        for key in ("iteration", "first", "second", "consumer"):
            if isinstance(wit.get(key), dict):
                wit[key] = _loop_keys(names, wit[key])
        defs = names.definitions(d.loc)
        # a finding about several program points (a pipeline's step counts: its produce,
        # consume and skip sites) also names what each of them reads
        for at in wit.get("related_sites", ()):
            loc = names.loc_named(at)
            if loc is not None:
                defs = {**names.definitions(loc), **defs}
        if defs:
            wit.setdefault("defined", defs)
        srcs = names.sources(d.loc)
        if srcs:
            wit.setdefault("loaded_at", srcs)
        for k, v in names.who(d.loc).items():
            if k == "warpgroup" and "warpgroup" in wit:
                continue
            wit.setdefault(k, v)
        out.append(dataclasses.replace(d, message=names.rename(d.message),
                                       counterexample=wit, fix=names.rename(d.fix)))
    return out
