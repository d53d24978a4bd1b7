"""Register layouts as data: how a register tile is spread over the threads of its group.

Job: one object, `RegisterLayout`, that codegen, the interpreter, the verifier and layout
inference all read to know which (thread, register) holds which tile element, and the one
function (`build`) that makes it from the printable layout name kept in `TileType.layout`.

A layout of a tile of `shape` over `threads` threads (128 in a warp role, the CTA otherwise):

    coord(t, r)[d] = thread_part(t)[d] + regs[r][d]

- `thread_part` is F2-linear in the bits of the thread index t (bits 0-4: the lane, bits 5..:
  the warp): the XOR of `thread_bases[b]` over the set bits b of t. A zero image means the
  bit does not move the element: threads differing only in it hold the same values
  (replication, e.g. a row statistic every lane of a quad holds).
- `regs` is an explicit table, so extents that are not powers of two work (a 64x176
  accumulator, a 37-row tile). When every extent, the register count and the thread count
  are powers of two the whole map is an F2 layout (`f2()`), and the builders here make the
  two parts add without carries (their bits are disjoint), so the F2 form agrees with the
  table (tests check it exhaustively).

Invariant: for every layout built here, each tile element is held by exactly one register of
each thread class (threads that differ only in replicated bits form one class); the reduction
plan and the broadcast map are derived from the bases and the table, never written per layout.

Names (the text form in TileType.layout; `build` parses them):
  blocked             last dim split over the threads in chunks of `vec`, leading dims in-thread
                      (a last dim that is not a multiple of the threads: threads spill into
                      leading dims, leftover thread bits replicate)
  rowvec              = slice(blocked, last axis): every thread holds all rows (replicated)
  rows                dim 0 over the threads (thread t holds rows t, t + T, ...), every other
                      dim in-thread, row-major: each thread owns whole rows, so its registers
                      walk a row's last dim in order (a gather's per-thread runs, stored with
                      vector accesses of consecutive columns)
  wgmma_acc           the m64nNk16 f32 accumulator fragment (INVARIANTS.md §2.1)
  wgmma_a             the register A operand fragment, the accumulator pattern per k16
  slice(P,axis,n)     P (a name, for the shape with extent n along axis) reduced along axis
  expand(P,axis)      P with a unit dim inserted at axis (t[:, None])
  squeeze(P,axis)     P (for the shape with a unit dim at axis) with that dim removed
  vblocks(V,run)      a V x V block of a 2-d tile a thread (registers row-major in the block),
                      thread bits along dim 0 in steps of V for `run` steps, then along dim 1
                      in steps of V, then dim 0 again: its rows load in V-wide chunks and its
                      columns, read V at a time from V registers, are V-wide chunks of its
                      transpose (run x V elements of a transposed row a warp), so a tile stored
                      transposed in this layout needs no exchange between threads
  transpose(P)        P built for the swapped 2-d shape, its two dims relabeled: thread t and
                      register r hold element (j, i) where P's hold (i, j) (no data moves)
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

from argus.layout.f2 import F2Layout
from argus.target import fragments

LANE_BITS = 5


def _nbits(threads: int) -> int:
    return max(0, (threads - 1).bit_length())


def _pow2(x: int) -> bool:
    return x > 0 and x & (x - 1) == 0


@dataclass(frozen=True)
class ReducePlan:
    """How to reduce a tile along `axis` (the result has layout `result`).

    groups[j]: the source registers combined in-thread into result register j (in order).
    lane_masks: `shfl.xor` masks to combine over, largest first (lane bits moving along axis).
    warp_bits: thread bits >= 5 moving along axis: partials combine through shared memory.
    other_bits: thread bits that move the element along other dims (they index the partials).
    """

    axis: int
    result: "RegisterLayout"
    groups: tuple[tuple[int, ...], ...]
    lane_masks: tuple[int, ...]
    warp_bits: tuple[int, ...]
    other_bits: tuple[int, ...]
    replicated_bits: tuple[int, ...]

    def exchange_warps(self) -> int:
        """Warps whose partials meet in the shared-memory exchange (0: no exchange): every
        warp of the group when all warp bits move along the axis, else 2^(warp bits) (which
        needs a power-of-two group to index densely; ValueError otherwise)."""
        if not self.warp_bits:
            return 0
        threads = self.result.threads
        if self.warp_bits == tuple(range(LANE_BITS, len(self.result.thread_bases))):
            return threads // (1 << LANE_BITS)
        if threads & (threads - 1):
            raise ValueError(f"a reduction over some of the warps of a {threads}-thread group "
                             "needs a power-of-two group")
        return 1 << len(self.warp_bits)

    def exchange_slots(self) -> int:
        """Shared-memory slots of the exchange: one per (result register, value of the other
        thread bits, warp along the axis); 0 when the reduction stays inside warps."""
        return len(self.groups) * (1 << len(self.other_bits)) * self.exchange_warps()


@dataclass(frozen=True)
class ScanPlan:
    """How to scan a tile along `axis` inside one warp (the total has layout `result`, the
    slice along axis). groups[j]: the chunks of result register j's row, in axis order; a
    chunk is `vec` registers holding consecutive elements, and the `width` lanes of a lane
    segment (lane bits 0 .. log2(width) - 1) hold consecutive runs of a chunk, lane 0 first:
    element (chunk c, lane l, register k) sits at c * width * vec + l * vec + k."""

    axis: int
    result: "RegisterLayout"
    groups: tuple[tuple[tuple[int, ...], ...], ...]
    vec: int
    width: int


@dataclass(frozen=True)
class RegisterLayout:
    name: str
    shape: tuple[int, ...]
    threads: int
    thread_bases: tuple[tuple[int, ...], ...]   # image of thread bit b, per dim
    regs: tuple[tuple[int, ...], ...]           # offsets of register r, per dim

    def __post_init__(self) -> None:
        if len(self.thread_bases) != _nbits(self.threads):
            raise ValueError(f"{self.name}: {len(self.thread_bases)} thread bases for "
                             f"{self.threads} threads")
        for img in self.thread_bases + self.regs:
            if len(img) != len(self.shape):
                raise ValueError(f"{self.name}: image {img} for a rank-{len(self.shape)} tile")

    # -- basic facts ---------------------------------------------------------------------
    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def nregs(self) -> int:
        return len(self.regs)

    @property
    def size(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def thread_part(self, t: int) -> tuple[int, ...]:
        out = [0] * self.rank
        for b, img in enumerate(self.thread_bases):
            if (t >> b) & 1:
                out = [o ^ v for o, v in zip(out, img)]
        return tuple(out)

    def coord(self, t: int, r: int) -> tuple[int, ...]:
        """The tile coordinate that register r of thread t holds (Python ints)."""
        return tuple(a + b for a, b in zip(self.thread_part(t), self.regs[r]))

    def replicated_bits(self) -> tuple[int, ...]:
        return tuple(b for b, img in enumerate(self.thread_bases) if not any(img))

    def owners(self) -> dict[tuple[int, ...], list[tuple[int, int]]]:
        """Every coordinate -> the (thread, register) pairs that hold it (for tests and
        counterexamples)."""
        out: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for t in range(self.threads):
            for r in range(self.nregs):
                out.setdefault(self.coord(t, r), []).append((t, r))
        return out

    def check_exact(self) -> str | None:
        """None when every element is held exactly once per replica class (threads that differ
        only in replicated bits) and no thread holds an element twice, else why not."""
        rep = 1 << len(self.replicated_bits())
        owners = self.owners()
        for c in itertools.product(*(range(n) for n in self.shape)):
            got = owners.pop(c, [])
            if len(got) != rep:
                return f"element {c} is held {len(got)} times, expected {rep}"
            if len({t for t, _ in got}) != len(got):
                return f"element {c} is held twice by one thread"
        if owners:
            return f"coordinates outside the tile: {sorted(owners)[:3]}"
        return None

    # -- C expressions ----------------------------------------------------------------------
    def thread_c(self, d: int, tid: str = "gtid") -> str:
        """C expression of thread_part(tid)[d] ("" when it is 0 for every thread)."""
        nb = len(self.thread_bases)
        bits = [(b, img[d]) for b, img in enumerate(self.thread_bases) if img[d]]
        if not bits:
            return ""
        seen = 0
        additive = True
        for _, v in bits:
            if seen & v:
                additive = False
            seen |= v
        terms = []
        if additive:
            k = 0
            while k < len(bits):
                b0, v0 = bits[k]
                n = 1
                while k + n < len(bits) and bits[k + n] == (b0 + n, v0 << n):
                    n += 1
                shifted = tid if b0 == 0 else f"({tid} >> {b0})"
                if b0 + n < nb:
                    shifted = f"({shifted} & {(1 << n) - 1})" if b0 else f"({tid} & {(1 << n) - 1})"
                elif b0 == 0:
                    shifted = tid
                terms.append(shifted if v0 == 1 else f"{shifted} * {v0}")
                k += n
            return terms[0] if len(terms) == 1 else "(" + " + ".join(terms) + ")"
        for b, v in bits:
            terms.append(f"((({tid} >> {b}) & 1) * {v})")
        return "(" + " ^ ".join(terms) + ")"

    def coord_c(self, r: int, tid: str = "gtid", thread_c=None) -> tuple[str, ...]:
        """C expressions of coord(tid, r), one per dim: the thread part plus register r's
        offset. `thread_c(d)` overrides the thread part's expression (codegen names the
        accumulator's acc_row / acc_col once per role instead of re-deriving them)."""
        part = thread_c or (lambda d: self.thread_c(d, tid))
        out = []
        for d in range(self.rank):
            th, off = part(d), self.regs[r][d]
            out.append(str(off) if not th else f"({th} + {off})")
        return tuple(out)

    # -- F2 form ----------------------------------------------------------------------------
    def dim_names(self) -> tuple[str, ...]:
        return ("row", "col") if self.rank == 2 else tuple(f"d{d}" for d in range(self.rank))

    def is_f2(self) -> bool:
        return all(_pow2(n) for n in self.shape) and _pow2(self.nregs) and \
            _pow2(self.threads) and self.threads >= 32

    def f2(self) -> F2Layout:
        """{register, lane, warp} -> dims; raises ValueError unless every extent, the register
        count and the thread count are powers of two (and the table is F2-linear)."""
        if not self.is_f2():
            raise ValueError(f"layout {self.name} of shape {self.shape} over {self.threads} "
                             "threads is not an F2 layout (an extent, the register count or the "
                             "thread count is not a power of two)")
        return F2Layout.from_function(
            lambda register, lane, warp: self._coord_np(32 * warp + lane, register),
            (("register", self.nregs), ("lane", 32), ("warp", self.threads // 32)),
            tuple(zip(self.dim_names(), self.shape)))

    def _coord_np(self, t, r):
        import numpy as np
        t, r = np.asarray(t), np.asarray(r)
        table = np.asarray(self.regs, dtype=np.int64).reshape(self.nregs, self.rank)
        out = []
        for d in range(self.rank):
            part = np.zeros(np.broadcast(t, r).shape, dtype=np.int64)
            for b, img in enumerate(self.thread_bases):
                if img[d]:
                    part = part ^ (((t >> b) & 1) * img[d])
            out.append(part + table[r, d])
        return tuple(out)

    # -- reductions and broadcasts ---------------------------------------------------------
    def reduction_plan(self, axis: int) -> ReducePlan:
        """How codegen reduces along `axis` (keepdims). Raises ValueError for a layout whose
        thread bits move along `axis` and another dim at once (needs a conversion first)."""
        if not 0 <= axis < self.rank:
            raise ValueError(f"axis {axis} out of range for rank {self.rank}")
        result = slice_(self, axis)
        index = {reg: j for j, reg in enumerate(result.regs)}
        groups: list[list[int]] = [[] for _ in result.regs]
        for r, reg in enumerate(self.regs):
            groups[index[_proj(reg, (axis,))]].append(r)
        lanes, warps, other = [], [], []
        for b, img in enumerate(self.thread_bases):
            if img[axis] and any(v for d, v in enumerate(img) if d != axis):
                raise ValueError(f"layout {self.name}: thread bit {b} moves along axis {axis} "
                                 f"and another dim at once")
            if img[axis]:
                (lanes if b < LANE_BITS else warps).append(b)
            elif any(img):
                other.append(b)
        return ReducePlan(axis, result, tuple(tuple(g) for g in groups),
                          tuple(1 << b for b in reversed(lanes)), tuple(warps), tuple(other),
                          self.replicated_bits())

    def scan_plan(self, axis: int) -> ScanPlan:
        """How codegen scans along `axis` (ScanPlan). Raises ValueError unless the thread
        bits moving along axis are the lowest lane bits in order (a scan over warps would need
        a shared-memory exchange) and every row's registers are runs of equal length."""
        if not 0 <= axis < self.rank:
            raise ValueError(f"axis {axis} out of range for rank {self.rank}")
        moving = [b for b, img in enumerate(self.thread_bases) if img[axis]]
        if moving != list(range(len(moving))) or len(moving) > LANE_BITS:
            raise ValueError(f"layout {self.name}: thread bits {moving} move along axis {axis}"
                             f"; a scan needs lane bits 0..k-1 only (the axis inside a warp)")
        result = slice_(self, axis)
        index = {reg: j for j, reg in enumerate(result.regs)}
        rows: list[list[int]] = [[] for _ in result.regs]
        for r, reg in enumerate(self.regs):
            rows[index[_proj(reg, (axis,))]].append(r)
        width = 1 << len(moving)
        offsets = sorted({self.regs[r][axis] for r in rows[0]})
        vec = next((k for k in range(1, len(offsets)) if offsets[k] != k), len(offsets))
        for b in moving:
            img = self.thread_bases[b]
            if img[axis] != vec << b or any(v for d, v in enumerate(img) if d != axis):
                raise ValueError(f"layout {self.name}: lane bit {b} moves axis {axis} by "
                                 f"{img}, not by {vec << b} alone")
        groups = []
        for regs in rows:
            by_offset = {self.regs[r][axis]: r for r in regs}
            chunks = len(regs) // vec
            want = [c * width * vec + k for c in range(chunks) for k in range(vec)]
            if sorted(by_offset) != want or len(by_offset) != len(regs):
                raise ValueError(f"layout {self.name}: a row's registers sit at "
                                 f"{sorted(by_offset)} along axis {axis}, not in runs of {vec}")
            groups.append(tuple(tuple(by_offset[c * width * vec + k] for k in range(vec))
                                for c in range(chunks)))
        return ScanPlan(axis, result, tuple(groups), vec, width)

    def broadcast_map(self, result: "RegisterLayout") -> tuple[int, ...] | None:
        """For this layout as an operand of shape self.shape broadcast (numpy rules) against a
        result `result`: the operand register feeding each result register, or None when the
        same thread does not hold the needed element (a layout conversion is needed)."""
        if self.threads != result.threads or self.rank != result.rank:
            return None
        bdims = tuple(d for d in range(self.rank)
                      if self.shape[d] == 1 and result.shape[d] != 1)
        if any(self.shape[d] != result.shape[d] for d in range(self.rank) if d not in bdims):
            return None
        for mine, theirs in zip(self.thread_bases, result.thread_bases):
            if mine != _proj(theirs, bdims):
                return None
        index = {reg: j for j, reg in enumerate(self.regs)}
        out = []
        for reg in result.regs:
            j = index.get(_proj(reg, bdims))
            if j is None:
                return None
            out.append(j)
        return tuple(out)


def _proj(img: tuple[int, ...], dims: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(0 if d in dims else v for d, v in enumerate(img))


# ----------------------------------------------------------------------------- builders


def blocked_vec(cols: int, threads: int) -> int:
    """The vector width of a blocked tile whose last dim is a multiple of the threads."""
    return 4 if cols % (threads * 4) == 0 else 2 if cols % (threads * 2) == 0 else 1


def blocked(shape, threads: int, vec: int | None = None, name: str = "blocked") -> RegisterLayout:
    """The last dim split over the threads in chunks of `vec` (thread t holds columns
    chunk*T*vec + t*vec + j), leading dims in-thread, row-major register order. A last dim that
    is not a multiple of the threads (T a power of two): threads take the largest power of two
    dividing each dim, last dim first; leftover thread bits replicate."""
    shape = tuple(int(d) for d in shape)
    if not 1 <= len(shape) <= 4:
        raise ValueError(f"register tiles have rank 1 to 4, got shape {shape}")
    nb = _nbits(threads)
    rank, cols = len(shape), shape[-1]
    if cols % threads == 0:
        vec = vec or blocked_vec(cols, threads)
        if cols % (threads * vec):
            raise ValueError(f"blocked: {cols} columns are not a multiple of {threads} x {vec}")
        bases = tuple(tuple(vec << b if d == rank - 1 else 0 for d in range(rank))
                      for b in range(nb))
        per_row = cols // threads
        last = [(k // vec) * threads * vec + k % vec for k in range(per_row)]
        offsets = [list(range(n)) for n in shape[:-1]] + [last]
    else:
        if not _pow2(threads):
            raise ValueError(f"a blocked tile of shape {shape} over {threads} threads needs a "
                             f"last dim that is a multiple of {threads}")
        imgs: list[tuple[int, ...]] = []
        cover = [1] * rank
        for d in reversed(range(rank)):
            while len(imgs) < nb and shape[d] % (cover[d] * 2) == 0:
                imgs.append(tuple(cover[d] if k == d else 0 for k in range(rank)))
                cover[d] *= 2
        while len(imgs) < nb:
            imgs.append((0,) * rank)
        bases = tuple(imgs)
        offsets = [list(range(0, n, c)) for n, c in zip(shape, cover)]
    regs = tuple(itertools.product(*offsets))
    return RegisterLayout(name, shape, threads, bases, regs)


def vblocks(shape, threads: int, vec: int, run_rows: int = 1) -> RegisterLayout:
    """A `vec` x `vec` block of a 2-d tile a thread, registers row-major in the block (so
    registers k*vec .. k*vec + vec - 1 are consecutive columns of one row), the blocks of a
    thread row-major after that. Thread bits: `run_rows` steps of `vec` along dim 0 first (the
    threads whose blocks stack into one run of a column: run_rows x vec consecutive elements of
    a row of the transpose), then along dim 1, then along dim 0; leftover bits replicate.
    Every extent a power of two and a multiple of `vec`."""
    shape = tuple(int(d) for d in shape)
    if len(shape) != 2 or not all(_pow2(n) for n in shape) or not _pow2(threads) or \
            not _pow2(vec) or not _pow2(run_rows):
        raise ValueError(f"vblocks({vec}) needs a 2-d power-of-two shape and thread count, got "
                         f"{shape} over {threads}")
    if shape[0] % vec or shape[1] % vec:
        raise ValueError(f"vblocks({vec}): {shape} is not a whole number of {vec}x{vec} blocks")
    nb = _nbits(threads)
    imgs: list[tuple[int, int]] = []
    cover = [vec, vec]
    order = [0] * (run_rows.bit_length() - 1) + [1] * nb + [0] * nb
    for d in order:
        if len(imgs) < nb and shape[d] % (cover[d] * 2) == 0:
            imgs.append((cover[0], 0) if d == 0 else (0, cover[1]))
            cover[d] *= 2
    while len(imgs) < nb:
        imgs.append((0, 0))
    regs = tuple((r0 + a, c0 + b) for r0 in range(0, shape[0], cover[0])
                 for c0 in range(0, shape[1], cover[1]) for a in range(vec) for b in range(vec))
    return RegisterLayout(f"vblocks({vec},{run_rows})", shape, threads, tuple(imgs), regs)


def transpose(parent: RegisterLayout) -> RegisterLayout:
    """`parent` (2-d) with its two dims swapped: the same (thread, register) pairs, each
    holding the element at the swapped coordinate (a relabeling: no data moves)."""
    if parent.rank != 2:
        raise ValueError(f"transpose: a 2-d layout, not rank {parent.rank}")
    return RegisterLayout(f"transpose({parent.name})", parent.shape[::-1], parent.threads,
                          tuple(img[::-1] for img in parent.thread_bases),
                          tuple(r[::-1] for r in parent.regs))


def rows(shape, threads: int) -> RegisterLayout:
    """Dim 0 over the threads, everything else in-thread: thread t holds rows t, t + T, ...
    (T the threads), each whole, registers row-major (row, then the other dims in order), so
    registers k*V .. k*V + V - 1 are consecutive elements of the last dim whenever V divides
    it. Needs dim 0 a multiple of a power-of-two thread count (every thread owns rows, none
    replicates): the layout of a gather whose threads each build their own rows
    (ir.ops.Gather)."""
    shape = tuple(int(d) for d in shape)
    if not 1 <= len(shape) <= 4:
        raise ValueError(f"register tiles have rank 1 to 4, got shape {shape}")
    if not _pow2(threads) or shape[0] % threads:
        raise ValueError(f"rows: dim 0 of {shape} is not a multiple of {threads} threads "
                         f"(each thread owns whole rows; a power-of-two thread count)")
    rank = len(shape)
    bases = tuple(tuple(1 << b if d == 0 else 0 for d in range(rank))
                  for b in range(_nbits(threads)))
    offsets = [list(range(0, shape[0], threads))] + [list(range(n)) for n in shape[1:]]
    return RegisterLayout("rows", shape, threads, bases, tuple(itertools.product(*offsets)))


def replicated(shape, threads: int, name: str = "rowvec") -> RegisterLayout:
    """Every thread holds the whole tile (row-major registers)."""
    shape = tuple(shape)
    return RegisterLayout(name, shape, threads, tuple((0,) * len(shape)
                                                      for _ in range(_nbits(threads))),
                          tuple(itertools.product(*(range(n) for n in shape))))


@functools.cache
def wgmma_acc(n: int, name: str = "wgmma_acc") -> RegisterLayout:
    """The m64nNk16 f32 accumulator (target/fragments.py wgmma_acc_coord): thread bits lane0-1
    -> col 2, 4; lane2-4 -> row 1, 2, 4; warp0-1 -> row 16, 32; register i -> row
    8((i/2)%2), col (i%2) + 8(i/4)."""
    fragments._check_n(n)
    bases = []
    for b in range(7):
        t = 1 << b
        bases.append(tuple(int(x) for x in fragments.wgmma_acc_coord(t, 0)))
    regs = tuple(tuple(int(x) for x in fragments.wgmma_acc_coord(0, i)) for i in range(n // 2))
    return RegisterLayout(name, (64, n), 128, tuple(bases), regs)


def wgmma_a(k: int) -> RegisterLayout:
    """The register A operand (RS form, 16-bit) of a 64 x k tile: the accumulator pattern per
    k16 slab (fragments.wgmma_a_coord), so an accumulator slab converts in place."""
    if k % 16:
        raise ValueError(f"a register wgmma A operand has K a multiple of 16, got {k}")
    return wgmma_acc(k, "wgmma_a")


def slice_(parent: RegisterLayout, axis: int) -> RegisterLayout:
    """The layout of reducing `parent` along `axis` with keepdims: thread bits that moved along
    axis become replication, registers differing only along axis merge (first one's order)."""
    shape = tuple(1 if d == axis else n for d, n in enumerate(parent.shape))
    bases = tuple(_proj(img, (axis,)) for img in parent.thread_bases)
    regs: list[tuple[int, ...]] = []
    seen = set()
    for reg in parent.regs:
        p = _proj(reg, (axis,))
        if p not in seen:
            seen.add(p)
            regs.append(p)
    name = f"slice({parent.name},{axis},{parent.shape[axis]})"
    out = RegisterLayout(name, shape, parent.threads, bases, tuple(regs))
    if parent.name == "blocked" and axis == parent.rank - 1:
        rv = replicated(shape, parent.threads)
        if rv.thread_bases == out.thread_bases and rv.regs == out.regs:
            return rv
    return out


def expand(parent: RegisterLayout, axis: int) -> RegisterLayout:
    """`parent` with a unit dim inserted at `axis` (t[:, None] / t[None, :])."""
    def ins(img):
        return img[:axis] + (0,) + img[axis:]
    return RegisterLayout(f"expand({parent.name},{axis})",
                          parent.shape[:axis] + (1,) + parent.shape[axis:], parent.threads,
                          tuple(ins(i) for i in parent.thread_bases),
                          tuple(ins(r) for r in parent.regs))


def squeeze(parent: RegisterLayout, axis: int) -> RegisterLayout:
    """`parent` (extent 1 along `axis`) with that dim removed."""
    if parent.shape[axis] != 1:
        raise ValueError(f"squeeze: dim {axis} of {parent.shape} is not 1")

    def rm(img):
        return img[:axis] + img[axis + 1:]
    return RegisterLayout(f"squeeze({parent.name},{axis})", rm(parent.shape), parent.threads,
                          tuple(rm(i) for i in parent.thread_bases),
                          tuple(rm(r) for r in parent.regs))


def widen(parent: RegisterLayout, axis: int, extent: int) -> RegisterLayout:
    """`parent` (extent 1 along `axis`) grown to `extent` along it in registers: each thread
    also holds the `extent - 1` next elements of each of its elements along `axis`, so a
    window [0, 1) of the result (TileSlice) is `parent` in the same threads. The layout of a
    shared-memory read whose user needs only its first column (a TMA box is at least 16
    bytes wide: four f32 block scales of which a K step uses one)."""
    if parent.shape[axis] != 1:
        raise ValueError(f"widen: dim {axis} of {parent.shape} is not 1")
    regs = tuple(tuple(o + (c if d == axis else 0) for d, o in enumerate(reg))
                 for c in range(extent) for reg in parent.regs)
    return RegisterLayout(f"widen({parent.name},{axis},{extent})",
                          tuple(extent if d == axis else n for d, n in enumerate(parent.shape)),
                          parent.threads, parent.thread_bases, regs)


def broadcast_layout(result: RegisterLayout, shape) -> RegisterLayout:
    """The layout an operand of `shape` (1 where it broadcasts) needs to feed `result` with no
    conversion: `result` sliced along every broadcast dim."""
    out = result
    for d, n in enumerate(shape):
        if n == 1 and result.shape[d] != 1:
            out = slice_(out, d)
    return out


# ----------------------------------------------------------------------------- names


def _split_args(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += (ch == "(") - (ch == ")")
        cur += ch
    parts.append(cur)
    return [p.strip() for p in parts]


NAME_RE = r"[A-Za-z_]\w*(?:\([A-Za-z0-9_(),]*\))?"


@functools.cache
def build(name: str, shape: tuple[int, ...], threads: int) -> RegisterLayout:
    """The RegisterLayout named `name` for a tile of `shape` over `threads` threads. Raises
    ValueError with the reason when the name does not fit the shape."""
    shape = tuple(int(d) for d in shape)
    if name in ("", "blocked"):
        return blocked(shape, threads)
    if name == "rowvec":
        return replicated(shape, threads)
    if name == "rows":
        return rows(shape, threads)
    if name in ("wgmma_acc", "wgmma_a"):
        if len(shape) != 2 or shape[0] != 64:
            raise ValueError(f"{name} is a 64 x N fragment, not {shape}")
        if threads != 128:
            raise ValueError(f"{name} lives in one warpgroup (128 threads), not {threads}")
        return wgmma_acc(shape[1]) if name == "wgmma_acc" else wgmma_a(shape[1])
    head, _, rest = name.partition("(")
    if not rest.endswith(")"):
        raise ValueError(f"unknown register layout {name!r}")
    args = _split_args(rest[:-1])
    if head == "slice" and len(args) == 3:
        axis, extent = int(args[1]), int(args[2])
        if not 0 <= axis < len(shape) or shape[axis] != 1:
            raise ValueError(f"{name}: dim {axis} of {shape} must be 1")
        parent = build(args[0], shape[:axis] + (extent,) + shape[axis + 1:], threads)
        out = slice_(parent, axis)
        return RegisterLayout(name, out.shape, out.threads, out.thread_bases, out.regs)
    if head == "expand" and len(args) == 2:
        axis = int(args[1])
        if not 0 <= axis < len(shape) or shape[axis] != 1:
            raise ValueError(f"{name}: dim {axis} of {shape} must be 1")
        return expand(build(args[0], shape[:axis] + shape[axis + 1:], threads), axis)
    if head == "widen" and len(args) == 3:
        axis, extent = int(args[1]), int(args[2])
        if not 0 <= axis < len(shape) or shape[axis] != extent:
            raise ValueError(f"{name}: dim {axis} of {shape} must be {extent}")
        return widen(build(args[0], shape[:axis] + (1,) + shape[axis + 1:], threads), axis,
                     extent)
    if head == "vblocks" and len(args) == 2:
        return vblocks(shape, threads, int(args[0]), int(args[1]))
    if head == "transpose" and len(args) == 1:
        if len(shape) != 2:
            raise ValueError(f"{name}: a 2-d tile, not {shape}")
        return transpose(build(args[0], shape[::-1], threads))
    if head == "squeeze" and len(args) == 2:
        axis = int(args[1])
        return squeeze(build(args[0], shape[:axis] + (1,) + shape[axis:], threads), axis)
    raise ValueError(f"unknown register layout {name!r}")
