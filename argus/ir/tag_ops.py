"""Tag ops: data-flow facts recorded in the IR for the verifier, never rendered as code.

Job: carry what the user says about the *identity* of data (INVARIANTS.md §3.1) from the DSL
to `argus.verify`: tag functions (plain Python traced into an expression, or opaque), extra
tag fields on the elements of global tensors, axioms about opaque functions, and assertions
at a use site. Built-in tags (an element's global coordinates, named after the tensor's shape
symbols; the loop iteration and pipeline step and stage that moved it) need no op.

Invariant kept: tag ops define no values and change no data, so a kernel's behaviour, its
lowering and its generated CUDA are the same with or without them (`strip_tags` removes them;
codegen and the interpreter skip them; `is_tag_op` tells them apart).

Expressions are strings in the small C-like language of `argus.verify.exprs` (ints, + - * / %
& ^ |, comparisons, `and`/`or`/`not`, calls of declared tag functions). Inside them `$i` names
the op's i-th operand (a scalar, or `$i.field` for a field of a tile's tags), `c0, c1, …` the
coordinates of a tensor element, `x0, x1, …` the bound variables of an axiom, and
`view($b, $s, row0, rows)` a shared-memory view (buffer, stage or `none`, first row, rows).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from argus.ir.core import Kernel, Op, Region, Value


@dataclass(frozen=True)
class TagFn(Op):
    """Declares the tag function `name` of `arity` integer arguments. An empty `body` makes it
    opaque: an uninterpreted function in the solver (e.g. a router's token -> expert map);
    otherwise `body` is an expression over its parameters a0, a1, …. Top level only, declared
    once per name, before use."""

    NAME = "tag.fn"
    name: str
    arity: int
    body: str = ""


@dataclass(frozen=True)
class TagTensor(Op):
    """Every element of global tensor `tensor` carries tag field `field` = `expr`, an
    expression over the element's coordinates c0, c1, … (outermost first) and the scalar
    operands `args` ($0, $1, …). Field names must not clash with the tensor's dims."""

    NAME = "tag.tensor"
    tensor: Value
    field: str
    expr: str
    args: tuple[Value, ...] = ()


@dataclass(frozen=True)
class TagCopy(Op):
    """Every element the TMA copy right before this op (in the same region; several tag.copy
    ops may follow one copy) writes into shared memory carries tag field `field` = `expr`, an
    expression over the element's coordinates c0, c1, ... in the copied tensor and the scalar
    operands `args` ($0, $1, ...), evaluated where the copy is issued (its loop indices): what
    the copy is for, beyond where it reads (an implicit GEMM's im2col column: the filter tap
    of the box, which the input coordinates alone do not name). Field names must not clash
    with the tensor's dims."""

    NAME = "tag.copy"
    field: str
    expr: str
    args: tuple[Value, ...] = ()


@dataclass(frozen=True)
class TagAssume(Op):
    """An axiom the verifier may use: `expr` holds for all integers x0 … x{nvars-1} (and the
    scalar operands `args`). State here what the producer of a data-dependent input guarantees,
    e.g. a permutation grouped by expert: `route(x0) == x0 / 256`. Unchecked: a wrong axiom makes
    proofs about this kernel wrong, so keep them next to the kernel that establishes them."""

    NAME = "tag.assume"
    expr: str
    nvars: int = 1
    args: tuple[Value, ...] = ()


@dataclass(frozen=True)
class TagAssert(Op):
    """`expr` must hold at this program point, for every element pairing of the tiles and views
    it names ($i.field) and all values of its scalars ($i), in every thread, iteration and CTA.
    Views are paired as the next op that reads all of them pairs them (a wgmma multiplies
    a[m, k] with b[n, k]); tiles pair element-wise with broadcasting. `message` is shown with a
    counterexample."""

    NAME = "tag.assert"
    refs: tuple[Value, ...]
    expr: str
    message: str = ""


@dataclass(frozen=True)
class Require(Op):
    """A launch precondition the kernel states on its scalar parameters (runtime scalars and
    shape symbols, the operands `args` = $0, $1, …), e.g. `$0 > 0` for a folded softmax scale:
    unlike `tag.assume` it is *checked*, on the host from the actual values before every
    launch (argus/runtime/preconditions.py; a compiled launch and the interpreter both), and
    a launch that breaks it raises LaunchError with `why`. Because it is checked, the verifier
    may take it as a premise. Top level only (a fact about the launch, not a program point);
    generates no code."""

    NAME = "require"
    expr: str
    why: str
    args: tuple[Value, ...] = ()


TAG_OPS: tuple[type[Op], ...] = (TagFn, TagTensor, TagCopy, TagAssume, TagAssert, Require)


def is_tag_op(op: Op) -> bool:
    """True for the ops of this module (they generate no code)."""
    return isinstance(op, TAG_OPS)


def strip_tags(kernel: Kernel) -> Kernel:
    """The same kernel without tag ops, at any nesting depth."""

    def region(r: Region) -> Region:
        return Region(tuple(strip(op) for op in r.ops if not is_tag_op(op)))

    def strip(op: Op) -> Op:
        changes = {f.name: region(getattr(op, f.name)) for f in op.spec_fields()
                   if isinstance(getattr(op, f.name), Region)}
        return dataclasses.replace(op, **changes) if changes else op

    return dataclasses.replace(kernel, body=region(kernel.body))


def register(all_ops: dict[str, type[Op]]) -> None:
    """Add the tag ops to the IR's op table (printer/parser use it)."""
    for cls in TAG_OPS:
        all_ops.setdefault(cls.NAME, cls)
