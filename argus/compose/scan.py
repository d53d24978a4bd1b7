"""The scan template: cumulative sum or product along one axis (inclusive or exclusive, forward or
reverse), any dims before and after it.

The tensor is seen as [O, L, I] (the scanned axis in the middle). A CTA walks L in blocks of
BN with a carry (the combined blocks before, `ROWS` rows or columns at once); inside a block the
prefix is a masked reduction (element j combines elements i <= j; i >= j reversed, strict for
exclusive scans). The DSL has no scan primitive, so the cost of that reduction depends on where
the block's source axis lies in the register layout (blocked: threads along the last tile axis
first, leading axes in registers):

- I > 1 (`_inner`): the block is [ROWS of L, BN of I] with I last: each thread holds whole
  columns of the block and the masked reduction is in registers (BN >= the threads: no thread
  bit spills onto L).
- I = 1, variant "lanes" (`_rows_lanes`): x [ROWS, BN] is read as is (coalesced) and the
  [ROWS, BN, BN] masked tile has its source axis last, across lanes: log2(BN) shuffles per
  result. Small BN keeps that cheap; the carry walks L in more steps.
- I = 1, variant "in_thread" (`_rows_in_thread`): the block is read through a transposed view
  of X ([L, O, 1]: the scanned axis first, any stride is legal on a unit innermost dim) as an
  [BN, ROWS, 1] tile, so the masked [BN, ROWS, BN] tile has its source axis leading, in
  registers: no shuffles, BN adds per result, a layout conversion through shared memory, and
  loads that touch ROWS rows per warp instruction.

Segments (a two-pass scan): with few rows the walk along L is long and has few CTAs. L is then
cut into S segments (a multiple of BN each): pass 1 (`_totals`) combines each segment of each
row, pass 2 scans every segment at once, its carry starting from the segments before it (a
masked reduction of pass 1's totals). `plan` picks the variant, block and segments
(`ScanSchedule`, which a caller may also give); scripts/gpu_scan_bench.py times the choices on
a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from argus.compose import tile
from argus.compose.launch import copy_into
from argus.compose.launch import run as _run

_KERNELS: dict = {}
VARIANTS = ("lanes", "in_thread")
# CTAs that keep an H200 (132 SMs) busy on a sequential walk: below this a scan is segmented
MIN_CTAS = 2 * 132


@dataclass(frozen=True)
class ScanSchedule:
    """How a scan along an axis of I = 1 (the last axis) runs. variant: "lanes" or "in_thread"
    (module docstring); rows: rows per CTA; bn: elements of a row per block (a power of two);
    segments: pieces of L scanned at once after a totals pass (1: one pass); 0 for rows, bn or
    segments: chosen by `plan` for the shape."""

    variant: str = "lanes"
    rows: int = 0
    bn: int = 0
    segments: int = 0

    def __post_init__(self):
        if self.variant not in VARIANTS:
            raise ValueError(f"ScanSchedule.variant={self.variant!r}: one of {VARIANTS}")
        if self.bn and self.bn & (self.bn - 1):
            raise ValueError(f"ScanSchedule.bn={self.bn} is not a power of two")


# Defaults per variant (rows, bn): a [rows, bn, bn] masked tile of 16 values per thread for
# "lanes" (2 lane bits on the source axis), [bn, rows, bn] with 16 in registers per result for
# "in_thread" (16 rows per warp load).
DEFAULTS = {"lanes": (256, 4), "in_thread": (16, 16)}


def plan(schedule: ScanSchedule, rows_total: int, length: int) -> ScanSchedule:
    """The schedule with every 0 filled in for a scan of `rows_total` rows of `length`."""
    rows0, bn0 = DEFAULTS[schedule.variant]
    bn = schedule.bn or min(bn0, tile.pow2(length))
    rows = schedule.rows or rows0
    segments = schedule.segments
    if not segments:
        ctas = -(-rows_total // rows)
        blocks = -(-length // bn)
        segments = 1
        while ctas * segments < MIN_CTAS and blocks // (segments * 2) >= 8:
            segments *= 2
    segments = max(1, min(segments, -(-length // bn)))
    return ScanSchedule(schedule.variant, rows, bn, segments)


def _ops(fn: str, reverse: bool, exclusive: bool) -> tuple[str, str, str, str]:
    op = {"sum": "sum", "prod": "prod"}[fn]
    neutral = "0.0" if fn == "sum" else "1.0"
    combine = "+" if fn == "sum" else "*"
    if reverse:
        rel = ">" if exclusive else ">="
    else:
        rel = "<" if exclusive else "<="
    return op, neutral, combine, rel


def _segment_carry(op: str, neutral: str, reverse: bool, lead: str, shape: str) -> str:
    """Source lines: `carry` = the totals T[rows, S] of the segments before segment s (after it,
    reversed), combined, as a tile of `shape`; `lead` is the rows' offset."""
    before = ">" if reverse else "<"
    return f'''    t = ag.load(T, ({lead}, 0), (ROWS, SP), other={neutral})
    before = ag.arange(SP)[None, :] {before} s
    carry = ag.where(before, t, {neutral}).{op}(axis=1){shape}
'''


def _rows_lanes(fn, reverse, exclusive, segmented) -> str:
    op, neutral, combine, rel = _ops(fn, reverse, exclusive)
    t_arg = 'T: ag.Tensor["O", "S", ag.f32], ' if segmented else ""
    carry = _segment_carry(op, neutral, reverse, "r0", "[:, :, None]") if segmented else \
        f"    carry = ag.full((ROWS, 1, 1), {neutral})\n"
    grid = "p, s = ag.grid(ag.cdiv(X.shape[0], ROWS), SEGS)" if segmented else \
        "(p,) = ag.grid(ag.cdiv(X.shape[0], ROWS))\n    s = 0"
    return f'''@ag.kernel(threads=256)
def scan(X: ag.Tensor["O", "L", ag.f32], {t_arg}Y: ag.Tensor["O", "L", 1, ag.f32],
         ROWS: int = 8, BN: int = 32, SEG: int = 32, SEGS: int = 1, SP: int = 1):
    {grid}
    r0 = p * ROWS
    nb = SEG // BN
{carry}    # source element i (axis 2) enters output element j (axis 1) when i {rel} j
    tri = ag.arange(BN)[None, None, :] {rel} ag.arange(BN)[None, :, None]
    for it in ag.range(nb):
        jb = {"nb - 1 - it" if reverse else "it"}
        c0 = s * SEG + jb * BN
        x = ag.load(X, (r0, c0), (ROWS, BN), other={neutral})
        part = ag.where(tri, x[:, None, :], {neutral}).{op}(axis=2)
        ag.store(Y, (r0, c0, 0), part {combine} carry)
        carry = carry {combine} x.{op}(axis=1)[:, :, None]
'''


def _rows_in_thread(fn, reverse, exclusive, segmented) -> str:
    op, neutral, combine, rel = _ops(fn, reverse, exclusive)
    t_arg = 'T: ag.Tensor["O", "S", ag.f32], ' if segmented else ""
    carry = _segment_carry(op, neutral, reverse, "r0", "[None, :, :]") if segmented else \
        f"    carry = ag.full((1, ROWS, 1), {neutral})\n"
    grid = "p, s = ag.grid(ag.cdiv(XT.shape[1], ROWS), SEGS)" if segmented else \
        "(p,) = ag.grid(ag.cdiv(XT.shape[1], ROWS))\n    s = 0"
    return f'''@ag.kernel(threads=256)
def scan(XT: ag.Tensor["L", "O", 1, ag.f32], {t_arg}Y: ag.Tensor[1, "O", "L", ag.f32],
         ROWS: int = 16, BN: int = 16, SEG: int = 16, SEGS: int = 1, SP: int = 1):
    {grid}
    r0 = p * ROWS
    nb = SEG // BN
{carry}    # source element i (axis 0, in registers) enters output element j (axis 2) when i {rel} j
    tri = ag.arange(BN)[:, None, None] {rel} ag.arange(BN)[None, None, :]
    for it in ag.range(nb):
        jb = {"nb - 1 - it" if reverse else "it"}
        c0 = s * SEG + jb * BN
        x = ag.load(XT, (c0, r0, 0), (BN, ROWS, 1), other={neutral})     # x[i, r] = X[r, c0 + i]
        part = ag.where(tri, x, {neutral}).{op}(axis=0)                    # [1, ROWS, BN]
        ag.store(Y, (0, r0, c0), part {combine} carry)
        carry = carry {combine} x.{op}(axis=0)
'''


def _totals(fn) -> str:
    op, neutral, combine, _ = _ops(fn, False, False)
    return f'''@ag.kernel(threads=256)
def totals(X: ag.Tensor["O", "L", ag.f32], T: ag.Tensor["O", "S", ag.f32], ROWS: int = 8,
           BN: int = 256, SEG: int = 256):
    """T[r, s] = the {op} of X[r, s*SEG : (s+1)*SEG] (pass 1 of a segmented scan)."""
    p, s = ag.grid(ag.cdiv(X.shape[0], ROWS), T.shape[1])
    r0 = p * ROWS
    acc = ag.full((ROWS, 1), {neutral})
    for it in ag.range(ag.cdiv(SEG, BN)):
        c = it * BN
        x = ag.load(X, (r0, s * SEG + c), (ROWS, BN), other={neutral})
        # a block past the segment's end reads the next segment: keep only this one's columns
        x = ag.where(ag.arange(BN)[None, :] < SEG - c, x, {neutral})
        acc = acc {combine} x.{op}(axis=1)
    ag.store(T, (r0, s), acc)
'''


def _inner(fn, reverse, exclusive) -> str:
    op, neutral, combine, rel = _ops(fn, reverse, exclusive)
    return f'''@ag.kernel(threads=256)
def scan(X: ag.Tensor["O", "L", "I", ag.f32], Y: ag.Tensor["O", "L", 1, "I", ag.f32],
         ROWS: int = 16, BN: int = 256):
    o, q = ag.grid(X.shape[0], ag.cdiv(X.shape[2], BN))
    i0 = q * BN
    nb = ag.cdiv(X.shape[1], ROWS)
    carry = ag.full((1, 1, BN), {neutral})
    # source row i (axis 1) enters output row j (axis 0) when i {rel} j
    tri = ag.arange(ROWS)[None, :, None] {rel} ag.arange(ROWS)[:, None, None]
    for it in ag.range(nb):
        jb = {"nb - 1 - it" if reverse else "it"}
        l0 = jb * ROWS
        x = ag.load(X, (o, l0, i0), (ROWS, BN), other={neutral})
        part = ag.where(tri, x[None, :, :], {neutral}).{op}(axis=1)      # [ROWS, 1, BN]
        ag.store(Y, (o, l0, 0, i0), part {combine} carry)
        carry = carry {combine} x.{op}(axis=0)[:, None, :]
'''


def kernel(kind: str, fn: str, reverse: bool = False, exclusive: bool = False,
           segmented: bool = False):
    """(kernel function, DSL source) of one scan kernel: kind "lanes", "in_thread", "inner" or
    "totals"; the block sizes are constexprs of the launch."""
    key = (kind, fn, reverse, exclusive, segmented)
    if key not in _KERNELS:
        if kind == "totals":
            src, name = _totals(fn), "totals"
        elif kind == "inner":
            src, name = _inner(fn, reverse, exclusive), "scan"
        else:
            make = _rows_lanes if kind == "lanes" else _rows_in_thread
            src, name = make(fn, reverse, exclusive, segmented), "scan"
        tag = "scan_" + "_".join(str(int(k)) if isinstance(k, bool) else str(k) for k in key)
        _KERNELS[key] = (tile.load_source(src, tag)[name], src)
    return _KERNELS[key]


def scan_rows(x: torch.Tensor, y: torch.Tensor, fn: str, reverse: bool, exclusive: bool,
              schedule: ScanSchedule = ScanSchedule()) -> ScanSchedule:
    """y [O, L] = the scan of x [O, L] (both contiguous fp32) along L; returns the schedule
    run (every field filled in)."""
    o, length = x.shape
    s = plan(schedule, o, length)
    seg = -(-(-(-length // s.segments)) // s.bn) * s.bn        # a multiple of bn
    segs = -(-length // seg)
    consts = dict(ROWS=s.rows, BN=s.bn, SEG=seg, SEGS=segs, SP=tile.pow2(segs))
    extra = ()
    if segs > 1:
        totals = torch.empty(o, segs, dtype=torch.float32, device=x.device)
        tfn, _ = kernel("totals", fn)
        _run(tfn, (x, totals), ROWS=8, BN=min(256, seg), SEG=seg)
        extra = (totals,)
    sfn, _ = kernel(s.variant, fn, reverse, exclusive, segs > 1)
    if s.variant == "lanes":
        _run(sfn, (x, *extra, y.view(o, length, 1)), **consts)
    else:
        _run(sfn, (x.t().unsqueeze(-1), *extra, y.unsqueeze(0)), **consts)
    return ScanSchedule(s.variant, s.rows, s.bn, segs)


def run_scan(n, x: torch.Tensor, prog=None) -> torch.Tensor:
    axis = n.attrs["axis"]
    shape = x.shape
    o = math.prod(shape[:axis])
    length = shape[axis]
    inner = math.prod(shape[axis + 1:])
    if not x.is_contiguous() or x.dtype != torch.float32:
        buf = torch.empty(shape, dtype=torch.float32, device=x.device)
        copy_into(x if x.dtype == torch.float32 else x.float(), buf)
        x = buf
    y = torch.empty(shape, dtype=torch.float32, device=x.device)
    if inner == 1:
        schedule = (getattr(prog, "schedules", None) or {}).get("scan", ScanSchedule())
        scan_rows(x.view(o, length), y.view(o, length), n.fn, n.attrs["reverse"],
                  n.attrs["exclusive"], schedule)
    else:
        bi = min(256, tile.pow2(inner))
        fn, src = kernel("inner", n.fn, n.attrs["reverse"], n.attrs["exclusive"])
        _run(fn, (x.view(o, length, inner), y.view(o, length, 1, inner)), ROWS=16, BN=bi)
    return y if n.dtype == torch.float32 else y.to(n.dtype)


__all__ = ["DEFAULTS", "ScanSchedule", "VARIANTS", "kernel", "plan", "run_scan", "scan_rows"]
