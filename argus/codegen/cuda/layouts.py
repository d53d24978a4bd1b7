"""Register layouts as codegen renders them: a RegisterLayout (target/register_layouts.py) plus
the C names of the thread parts the emitter has declared.

One job: turn "register i of thread gtid" into C coordinate expressions. Every layout decision
was made by analysis (the tile type names its layout); this file only builds and reads it.
"""

from __future__ import annotations

import functools

from argus.errors import CompileError
from argus.ir.types import TileType
from argus.target import register_layouts as RL
from argus.target.register_layouts import RegisterLayout


class Lay:
    """A register layout as codegen renders it: the RegisterLayout (target/register_layouts.py)
    plus the C names of the thread parts the emitter has declared (acc_row / acc_col)."""

    def __init__(self, rl: RegisterLayout, acc_names: bool = False):
        self.rl = rl
        self.acc_names = acc_names

    def __eq__(self, other) -> bool:
        return isinstance(other, Lay) and self.rl == other.rl

    def __hash__(self) -> int:
        return hash(self.rl)

    def __repr__(self) -> str:
        return f"{self.rl.name} {self.rl.shape}"

    @property
    def nregs(self) -> int:
        return self.rl.nregs

    @property
    def vec(self) -> int:
        return 1

    def thread_c(self, d: int) -> str:
        if self.acc_names:
            imgs = tuple(img[d] for img in self.rl.thread_bases)
            if imgs == _ACC_ROW_IMAGES:
                return "acc_row"
            if imgs == _ACC_COL_IMAGES:
                return "acc_col"
        return self.rl.thread_c(d, "gtid")

    def coord(self, i: int) -> tuple[str, ...]:
        """C expressions of the tile coordinate register i of thread gtid holds."""
        return self.rl.coord_c(i, "gtid", self.thread_c)

    def row(self, i: int) -> str:
        c = self.coord(i)
        return c[-2] if len(c) >= 2 else "0"

    def col(self, i: int) -> str:
        return self.coord(i)[-1]


class Blocked(Lay):
    """A blocked tile whose last dim is a multiple of the threads: thread t holds, per row,
    columns chunk*T*vec + t*vec + j (so `vec` consecutive registers are consecutive columns)."""

    @property
    def vec(self) -> int:
        return self.rl.thread_bases[0][-1] if self.rl.thread_bases else self.rl.shape[-1]

    @property
    def per_row(self) -> int:
        return self.rl.shape[-1] // self.rl.threads

    def col(self, i: int) -> str:
        k = i % self.per_row
        base = (k // self.vec) * self.rl.threads * self.vec + k % self.vec
        return f"(gtid * {self.vec} + {base})"


class Rows(Lay):
    """Whole rows per thread (RL.rows): registers walk each of a thread's rows in order, so
    `vec` consecutive registers starting at a multiple of vec are consecutive columns of one
    row: vec is the largest power of two up to ROWS_VEC dividing the last dim (the chunk one
    vector access covers: 16 bytes of bf16). A rank-1 rows tile's last dim is dim 0, split
    over the threads: vec 1."""

    @property
    def vec(self) -> int:
        if self.rl.rank == 1:
            return 1
        cols = self.rl.shape[-1]
        v = 1
        while v < ROWS_VEC and cols % (2 * v) == 0:
            v *= 2
        return v


# the widest chunk of a rows tile: 8 elements (16 bytes of bf16 / fp16, two 16-byte accesses
# of f32: memory.py splits a chunk into accesses of at most 16 bytes)
ROWS_VEC = 8


class Chunked(Lay):
    """A vblocks(V, run) tile (RL.vblocks), or the destination
    view of a transposed store (memory.py `_transposed_info`, `vec` given): registers
    k*V .. k*V + V - 1 are V consecutive elements of one row's last dim (chunk starts are
    multiples of V), each chunk one vector access; coordinates from the layout's bases, as
    any layout's."""

    def __init__(self, rl: RegisterLayout, acc_names: bool = False, vec: int | None = None):
        super().__init__(rl, acc_names)
        self._vec = vec

    @property
    def vec(self) -> int:
        if self._vec is not None:
            return self._vec
        return int(self.rl.name.partition("(")[2].rstrip(")").split(",")[0])


class Acc(Lay):
    """The wgmma m64nNk16 accumulator: row = 16w + g + 8((i/2)%2), col = 2q + (i%2) + 8(i/4)."""


_ACC_ROW_IMAGES = tuple(img[0] for img in RL.wgmma_acc(8).thread_bases)
_ACC_COL_IMAGES = tuple(img[1] for img in RL.wgmma_acc(8).thread_bases)


@functools.lru_cache(maxsize=4096)
def broadcast_map(src: RegisterLayout, result: RegisterLayout):
    return src.broadcast_map(result)


def layout_of(t: TileType, group_threads: int, loc, acc_names: bool = False) -> Lay:
    """The codegen view of tile type `t` over the `group_threads` threads of its group."""
    if not 1 <= len(t.shape) <= 4:
        raise CompileError(f"register tiles of rank {len(t.shape)} are not supported (1 to 4)",
                           loc)
    try:
        rl = RL.build(t.layout or "blocked", tuple(t.shape), group_threads)
    except ValueError as e:
        raise CompileError(f"register tile {t}: {e}", loc,
                           fix="give the tile a last dim that is a multiple of the threads of "
                               "its group, or a power-of-two shape") from None
    if t.layout in ("", "blocked") and t.shape[-1] % group_threads == 0:
        return Blocked(rl, acc_names)
    if t.layout in ("wgmma_acc", "wgmma_a"):
        return Acc(rl, acc_names)
    if t.layout == "rows":
        return Rows(rl, acc_names)
    if t.layout.startswith("vblocks("):
        return Chunked(rl, acc_names)
    return Lay(rl, acc_names)
