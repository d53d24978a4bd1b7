"""The scan template: cumulative sum, product, max or min along one axis (inclusive or
exclusive, forward or reverse), any dims before and after it.

The tensor is seen as [O, L, I] (the scanned axis in the middle).

- I = 1 (`_rows`, the scans of KernelBench): one warp per CTA walks `ROWS` rows along L in
  blocks of [ROWS, BN] with the carry in registers. A block is a blocked tile of the 32
  threads (BN = 128: each lane loads and stores one 16-byte vector per row, 4 consecutive
  elements) and `ag.scan` scans it: a running combine over the lane's 4 registers, a 5-step
  `__shfl_up_sync` scan of the lanes' totals, the carry added, and the carry moved on by the
  row's total (one more shuffle). The rows of a block are independent shuffle chains (ILP).
- I > 1 (`_inner`): the block is [ROWS of L, BN of I] with I last (across the threads): each
  thread holds whole columns of the block, so `ag.scan` along L runs in its registers, the
  carry one row.

Segments (a two-pass scan, for few long rows: a walk along L per CTA would leave the GPU with
too few warps): L is cut into S segments of whole blocks; pass 1 (`_totals`) combines each
segment of each row (an elementwise accumulator of the block's shape, reduced once at the
end), pass 2 scans every segment at once, its carry starting from the totals of the segments
before it (after it, reversed). `plan` picks rows, block and segments from the shape
(`ScanSchedule`, which a caller may also give); scripts/gpu_scan_bench.py times the choices on
a GPU.

The default, a rule of the shape (no tuning): the H200 needs about 32-64 KB of loads in
flight per SM to stream at its 4.8 TB/s (Little's law at ~1 us of DRAM latency: ~4.8 MB over
132 SMs, ~36 KB each). A 32-thread CTA holds one [ROWS, 128] fp32 block of ROWS x 512 bytes;
an SM runs at most 32 CTAs (sm_90), so ROWS = 2 is 32 KB per SM, and its 8 registers per lane
let lower/prefetch.py keep a ring of 3 more blocks in flight (128 KB per SM; ROWS = 4 is 16
registers, past the ring's limit: 64 KB). Segments are added until there are CTAs for every
warp slot of the GPU (MIN_CTAS = 132 SMs x 32), keeping at least 8 blocks per segment.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from argus.compose import tile
from argus.compose.launch import copy_into
from argus.compose.launch import run as _run

_KERNELS: dict = {}
SMS = 132                       # H200
CTAS_PER_SM = 32                # sm_90's limit of resident CTAs per SM: 32 one-warp CTAs
MIN_CTAS = SMS * CTAS_PER_SM    # below this a scan of few rows is segmented
ROWS, BN = 2, 128               # the default block: 16-byte accesses, 8 registers per lane
MIN_SEGMENT_BLOCKS = 8          # a segment keeps at least this many blocks to walk
NEUTRAL = {"sum": "0.0", "prod": "1.0", "max": "float('-inf')", "min": "float('inf')"}
COMBINE = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "ag.maximum({a}, {b})",
           "min": "ag.minimum({a}, {b})"}


@dataclass(frozen=True)
class ScanSchedule:
    """How a scan along an axis of I = 1 (the last axis) runs: rows per CTA (one warp), bn
    elements of a row per block (a power of two; 128 = one 16-byte vector per lane),
    segments: pieces of L scanned at once after a totals pass (1: one pass). 0 for any field:
    chosen by `plan` for the shape."""

    rows: int = 0
    bn: int = 0
    segments: int = 0

    def __post_init__(self):
        for name in ("rows", "bn"):
            v = getattr(self, name)
            if v < 0 or (v and v & (v - 1)):
                raise ValueError(f"ScanSchedule.{name}={v} is not a power of two")
        if self.segments < 0:
            raise ValueError(f"ScanSchedule.segments={self.segments} is negative")


def plan(schedule: ScanSchedule, rows_total: int, length: int) -> ScanSchedule:
    """The schedule with every 0 filled in for a scan of `rows_total` rows of `length`
    (module docstring: the rule)."""
    bn = schedule.bn or max(32, min(BN, tile.pow2(length)))
    rows = schedule.rows or min(ROWS, tile.pow2(rows_total))
    blocks = -(-length // bn)
    segments = schedule.segments
    if not segments:
        ctas = -(-rows_total // rows)
        segments = 1
        while ctas * segments < MIN_CTAS and blocks // (segments * 2) >= MIN_SEGMENT_BLOCKS:
            segments *= 2
    return ScanSchedule(rows, bn, max(1, min(segments, blocks)))


def _rows(fn: str, reverse: bool, exclusive: bool, segmented: bool) -> str:
    neutral, op = NEUTRAL[fn], fn
    combine = COMBINE[fn].format(a="carry", b="ag.where(before, t, {n}).{op}(axis=1)")
    t_arg = 'T: ag.Tensor["O", "S", ag.f32], ' if segmented else ""
    grid = "p, s = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], SEG))" \
        if segmented else "(p,) = ag.grid(ag.cdiv(X.shape[0], ROWS))\n    s = 0"
    carry = f"    carry = ag.full((ROWS, 1), {neutral})\n"
    if segmented:   # the totals of the segments before this one (after it, reversed)
        carry += f'''    for q in ag.range(ag.cdiv(T.shape[1], TB)):
        t = ag.load(T, (r0, q * TB), (ROWS, TB), other={neutral})
        before = ag.arange(TB)[None, :] + q * TB {">" if reverse else "<"} s
        carry = {combine.format(n=neutral, op=op)}
'''
    return f'''@ag.kernel(threads=32)
def scan(X: ag.Tensor["O", "L", ag.f32], {t_arg}Y: ag.Tensor["O", "L", ag.f32],
         ROWS: int = 2, BN: int = 128, SEG: int = 128, TB: int = 32):
    {grid}
    r0 = p * ROWS
    nb = {"SEG // BN" if segmented else "ag.cdiv(X.shape[1], BN)"}
{carry}    for it in ag.range(nb):
        c0 = s * SEG + ({"nb - 1 - it" if reverse else "it"}) * BN
        x = ag.load(X, (r0, c0), (ROWS, BN), other={neutral})
        y, carry = ag.scan(x, "{fn}", 1, carry, reverse={reverse}, exclusive={exclusive})
        ag.store(Y, (r0, c0), y)
'''


def _totals(fn: str) -> str:
    neutral = NEUTRAL[fn]
    return f'''@ag.kernel(threads=32)
def totals(X: ag.Tensor["O", "L", ag.f32], T: ag.Tensor["O", "S", ag.f32], ROWS: int = 2,
           BN: int = 128, SEG: int = 128):
    """T[r, s] = the {fn} of X[r, s*SEG : (s+1)*SEG] (pass 1 of a segmented scan; SEG is a
    multiple of BN): an accumulator of the block's shape, reduced once at the end."""
    p, s = ag.grid(ag.cdiv(X.shape[0], ROWS), T.shape[1])
    r0 = p * ROWS
    acc = ag.full((ROWS, BN), {neutral})
    for it in ag.range(SEG // BN):
        x = ag.load(X, (r0, s * SEG + it * BN), (ROWS, BN), other={neutral})
        acc = {COMBINE[fn].format(a="acc", b="x")}
    ag.store(T, (r0, s), acc.{fn}(axis=1))
'''


def _inner(fn: str, reverse: bool, exclusive: bool, threads: int) -> str:
    neutral = NEUTRAL[fn]
    return f'''@ag.kernel(threads={threads})
def scan(X: ag.Tensor["O", "L", "I", ag.f32], Y: ag.Tensor["O", "L", "I", ag.f32],
         ROWS: int = 16, BN: int = 256):
    o, q = ag.grid(X.shape[0], ag.cdiv(X.shape[2], BN))
    i0 = q * BN
    nb = ag.cdiv(X.shape[1], ROWS)
    carry = ag.full((1, BN), {neutral})
    for it in ag.range(nb):
        l0 = ({"nb - 1 - it" if reverse else "it"}) * ROWS
        x = ag.load(X, (o, l0, i0), (ROWS, BN), other={neutral})
        # the block's rows are each thread's registers: the scan runs in registers
        y, carry = ag.scan(x, "{fn}", 0, carry, reverse={reverse}, exclusive={exclusive})
        ag.store(Y, (o, l0, i0), y)
'''


def kernel(kind: str, fn: str, reverse: bool = False, exclusive: bool = False,
           segmented: bool = False, threads: int = 256):
    """(kernel function, DSL source) of one scan kernel: kind "rows", "inner" (over `threads`
    threads) or "totals"; the block sizes are constexprs of the launch."""
    key = (kind, fn, reverse, exclusive, segmented) + ((threads,) if kind == "inner" else ())
    if key not in _KERNELS:
        if kind == "totals":
            src, name = _totals(fn), "totals"
        elif kind == "inner":
            src, name = _inner(fn, reverse, exclusive, threads), "scan"
        else:
            src, name = _rows(fn, reverse, exclusive, segmented), "scan"
        tag = "scan_" + "_".join(str(int(k)) if isinstance(k, bool) else str(k) for k in key)
        _KERNELS[key] = (tile.load_source(src, tag)[name], src)
    return _KERNELS[key]


def scan_rows(x: torch.Tensor, y: torch.Tensor, fn: str, reverse: bool, exclusive: bool,
              schedule: ScanSchedule = ScanSchedule()) -> ScanSchedule:
    """y [O, L] = the scan of x [O, L] (both contiguous fp32) along L; returns the schedule
    run (every field filled in; segments as launched)."""
    o, length = x.shape
    s = plan(schedule, o, length)
    blocks = -(-length // s.bn)
    seg = -(-blocks // s.segments) * s.bn           # whole blocks per segment
    segs = -(-length // seg)
    consts = dict(ROWS=s.rows, BN=s.bn, SEG=seg)
    if segs > 1:
        totals = torch.empty(o, segs, dtype=torch.float32, device=x.device)
        tfn, _ = kernel("totals", fn)
        _run(tfn, (x, totals), **consts)
        sfn, _ = kernel("rows", fn, reverse, exclusive, True)
        _run(sfn, (x, totals, y), TB=max(32, min(128, tile.pow2(segs))), **consts)
    else:
        sfn, _ = kernel("rows", fn, reverse, exclusive, False)
        _run(sfn, (x, y), **consts)
    return ScanSchedule(s.rows, s.bn, segs)


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
        # one column of I per thread (BN = the threads: no thread bit on L, the scan stays in
        # registers), 32 to 256 threads as I needs
        threads = min(256, max(32, tile.pow2(inner)))
        fn, src = kernel("inner", n.fn, n.attrs["reverse"], n.attrs["exclusive"],
                         threads=threads)
        _run(fn, (x.view(o, length, inner), y.view(o, length, inner)), ROWS=16, BN=threads)
    return y if n.dtype == torch.float32 else y.to(n.dtype)


__all__ = ["MIN_CTAS", "ScanSchedule", "kernel", "plan", "run_scan", "scan_rows"]
