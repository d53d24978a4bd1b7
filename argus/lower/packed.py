"""Pass: store a loop-carried wgmma A fragment packed: two bf16/f16 or four e4m3 elements a
32-bit register.

A register tile keeps one float register per element whatever its dtype (bf16/f16 values are
rounded floats, codegen/cuda/emit.tile_c); the register A operand of a wgmma is packed into
32-bit pairs at the issue. For a value used right where it is made that costs nothing (the
convert is inlined into the packing). A value carried across a region boundary (a `var` and
its `assign`s: a loop's back edge, a pipeline step) is stored, though, and in the float form
it costs twice the registers of the fragment the wgmma reads: FlashAttention's overlapped loop
(kernels/attention.py, fa3_overlap) carries P_{j-1} to the next iteration's P V, block_n / 2
float registers a thread against block_n / 4 packed (FA3 carries the packed fragment).

Rule: the values joined by `var` (its init) and `assign` (dst and src) form a web. A web is
packed (TileType.packed on every value of it) when it holds a `var` (something is carried),
every value is a tile of one packable dtype (bf16, f16 or e4m3: words are copied, not
converted) in the wgmma accumulator layout, every value is made by a `var` or a `convert`
(the rounding happens where the word is packed), and every use is a `var` init, an `assign`,
the register A operand of a wgmma, or a column window (`slice`) at whole k steps of the
fragment (32 bytes of columns: 16 bf16, 32 e4m3) read only as a wgmma's register A. Such a
window is packed too: a view of the web's words (FP8 attention at block_n 256 issues P V in
two 128-key halves). A web with any other use (elementwise math, a store, another slice)
stays in float registers: its readers take elements. The word layout: bf16/f16 registers 2w
and 2w + 1 (adjacent columns of one row: one word of the A fragment, target/fragments.py
wgmma_a_coord); e4m3 word 4kk + r holds the four registers A register r of k32 step kk
packs (AccToA8.word, byte 0 first: the shuffle-free AccOrderA8 reads it as is, AccToA8
gathers it from two quad lanes). FP8 attention carries P_{j-1} as e4m3 (block_n / 8 words a
thread, against block_n / 2 fp32 registers). Only the representation changes, not a value:
the interpreter and the verifier read the same program.
"""

from __future__ import annotations

import dataclasses

from argus.ir import ops as O
from argus.ir.core import Kernel, Value, map_kernel_values
from argus.ir.types import TileType

PACKABLE = ("bf16", "f16", "e4m3")
A_FRAGMENT_LAYOUT = "wgmma_acc"
K_STEP_BYTES = 32   # one wgmma k step of A: k16 of 16-bit, k32 of 8-bit elements


def _webs(ops) -> list[set[int]]:
    """The classes of value ids joined by var init and assign (union-find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for op in ops:
        if isinstance(op, O.Var) and isinstance(op.result.type, TileType):
            parent[find(op.result.id)] = find(op.init.id)
        elif isinstance(op, O.Assign) and isinstance(op.dst.type, TileType):
            parent[find(op.dst.id)] = find(op.src.id)
    webs: dict[int, set[int]] = {}
    for x in list(parent):
        webs.setdefault(find(x), set()).add(x)
    return list(webs.values())


def _a_operand(op: O.Op, v: Value) -> bool:
    """`op` is a wgmma reading `v` as its register A (and nothing else)."""
    return isinstance(op, O.Wgmma) and op.a.id == v.id and op.a_in_registers \
        and op.acc.id != v.id and op.b.id != v.id


def _word_view(op: O.Op, users: dict[int, list[O.Op]]) -> bool:
    """`op` is a column window of whole k steps of an A fragment, read only as a wgmma's A."""
    if not isinstance(op, O.TileSlice) or op.axis != 1:
        return False
    t = op.result.type
    cols = K_STEP_BYTES // t.dtype.bytes
    return op.start % cols == 0 and t.shape[1] % cols == 0 and \
        all(_a_operand(u, op.result) for u in users.get(op.result.id, []))


def _allowed_use(op: O.Op, v: Value, users: dict[int, list[O.Op]]) -> bool:
    """`op` reads `v` in a way a packed tile serves: carried on, read as a wgmma's A, or
    viewed at whole k steps for one."""
    if isinstance(op, O.Var):
        return op.init.id == v.id
    if isinstance(op, O.Assign):
        return True
    return _a_operand(op, v) or _word_view(op, users)


def packed_values(kernel: Kernel) -> set[int]:
    """The ids of the values this pass stores packed (the module docstring's rule)."""
    ops = list(kernel.walk())
    defs = {r.id: op for op in ops for r in op.results()}
    types = {r.id: r.type for op in ops for r in op.results()}
    users: dict[int, list[O.Op]] = {}
    for op in ops:
        for v in op.operands():
            users.setdefault(v.id, []).append(op)
    bad: set[int] = set()
    for op in ops:
        for v in op.operands():
            if isinstance(v.type, TileType) and not _allowed_use(op, v, users):
                bad.add(v.id)
    out: set[int] = set()
    for web in _webs(ops):
        if not any(isinstance(defs.get(x), O.Var) for x in web) or web & bad:
            continue
        if all(isinstance(defs.get(x), (O.Var, O.Convert))
               and isinstance(types.get(x), TileType) and types[x].dtype.name in PACKABLE
               and types[x].layout == A_FRAGMENT_LAYOUT for x in web) \
                and len({types[x].dtype.name for x in web}) == 1:
            # one dtype: var / assign copy words, so an f16 value assigned to a bf16 variable
            # (the IR checks do not refuse it) would be its f16 bits read as bf16
            out |= web
    # the word views of packed webs (their A readers take the words)
    out |= {op.result.id for op in ops if isinstance(op, O.TileSlice) and op.src.id in out
            and _word_view(op, users)}
    return out


def run(kernel: Kernel) -> Kernel:
    packed = packed_values(kernel)
    if not packed:
        return kernel

    def retype(v: Value) -> Value:
        if v.id in packed:
            return Value(v.id, dataclasses.replace(v.type, packed=True), v.hint)
        return v

    return map_kernel_values(kernel, retype)
