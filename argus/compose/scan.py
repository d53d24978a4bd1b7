"""The scan template: cumulative sum or product along one axis (inclusive or exclusive, forward or
reverse), any dims before and after it.

The tensor is seen as [O, L, I] (the scanned axis in the middle). A CTA takes ROWS rows of one
inner column block... for I = 1 (the common case: the last axis) a CTA takes ROWS rows and walks
L in blocks of BN: inside a block, the prefix is a masked reduction of a [ROWS, BN, BN] tile
(element j sums elements i <= j of the block: BN times the adds of a sequential scan, which a
memory-bound kernel hides at BN <= 64), and a [ROWS, 1] carry adds the totals of the blocks
before. Reverse scans walk the blocks from the end with i >= j; exclusive scans use i < j.
For I > 1 the same runs on [BL, BI] tiles with the prefix over axis 0.
"""

from __future__ import annotations

import math

import torch

from argus.compose import tile
from argus.compose.launch import copy_into
from argus.compose.launch import run as _run

_KERNELS: dict = {}


def _source(fn: str, reverse: bool, exclusive: bool, inner: bool, rows: int, bn: int) -> str:
    name = "scan"
    op = {"sum": "sum", "prod": "prod"}[fn]
    neutral = "0.0" if fn == "sum" else "1.0"
    combine = "+" if fn == "sum" else "*"
    if reverse:
        rel = ">" if exclusive else ">="
    else:
        rel = "<" if exclusive else "<="
    if not inner:   # scanned axis last: x [ROWS, BN], prefix over axis 1
        return f'''@ag.kernel(threads=256)
def {name}(X: ag.Tensor["O", "L", ag.f32], Y: ag.Tensor["O", "L", 1, ag.f32], ROWS: int = {rows},
           BN: int = {bn}):
    (p,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
    r0 = p * ROWS
    nb = ag.cdiv(X.shape[1], BN)
    carry = ag.full((ROWS, 1, 1), {neutral})
    # source element i (axis 2) enters output element j (axis 1) when i {rel} j
    tri = ag.arange(BN)[None, None, :] {rel} ag.arange(BN)[None, :, None]
    for it in ag.range(nb):
        jb = {"nb - 1 - it" if reverse else "it"}
        c0 = jb * BN
        x = ag.load(X, (r0, c0), (ROWS, BN), other={neutral})
        part = ag.where(tri, x[:, None, :], {neutral}).{op}(axis=2)
        ag.store(Y, (r0, c0, 0), part {combine} carry)
        carry = carry {combine} x.{op}(axis=1)[:, :, None]
'''
    return f'''@ag.kernel(threads=256)
def {name}(X: ag.Tensor["O", "L", "I", ag.f32], Y: ag.Tensor["O", "L", 1, "I", ag.f32],
           ROWS: int = {rows}, BN: int = {bn}):
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


def kernel(fn, reverse, exclusive, inner, rows, bn):
    key = (fn, reverse, exclusive, inner, rows, bn)
    if key not in _KERNELS:
        src = _source(*key)
        tag = "scan_" + "_".join(str(int(k)) if isinstance(k, bool) else str(k) for k in key)
        _KERNELS[key] = (tile.load_source(src, tag)["scan"], src)
    return _KERNELS[key]


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
        bn = 32
        fn, src = kernel(n.fn, n.attrs["reverse"], n.attrs["exclusive"], False, 8, bn)
        _run(fn, (x.view(o, length), y.view(o, length, 1)))
    else:
        bi = min(128, tile.pow2(inner))
        fn, src = kernel(n.fn, n.attrs["reverse"], n.attrs["exclusive"], True, 16, bi)
        _run(fn, (x.view(o, length, inner), y.view(o, length, 1, inner)))
    return y if n.dtype == torch.float32 else y.to(n.dtype)


__all__ = ["kernel", "run_scan"]
