"""The pooling template: max or average pooling over 1-3 spatial dims with any kernel size,
stride, padding and dilation (floor mode; average pooling counts the padding, PyTorch's
default).

A CTA computes BN outputs along the last spatial dim for ROWS consecutive (batch x channel,
outer output coordinates) rows, unrolled (one row of a few dozen outputs per CTA was launch- and
latency-bound: 2M CTAs of 128 threads, half idle, for a 3-d max pool at 16x32x128^3); every
window offset is one tile load combined into the result (max, or sum then the division by the
window volume). With stride s the last input dim is seen as
[W / s, s]: input column (o + q) * s + r of output column o is element (o + q, r), so the BN
outputs of one window offset are one [BN, 1] tile load. Offsets left of 0 or past the end read
-inf (max) or 0 (average): the padding. Earlier spatial dims are scalar coordinates per CTA.
A last dim W that is not a multiple of s (a kernel of 11 over 2048 columns) is seen as its first
floor(W / s) * s columns when no window reads past them (a view, nothing copied), else it is
first copied into rows of ceil(W / s) * s columns whose tail reads as the padding (`pad_rows`).
"""

from __future__ import annotations

import math

import torch

import argus as ag
from argus.compose import tile
from argus.compose.launch import copy_into
from argus.compose.launch import run as _run

_KERNELS: dict = {}


def row_decode(j: int, spatial_out, name: str) -> list[str]:
    """Source lines decoding output row `pb * ROWS + j` of a pooling-style walk into its
    output coordinates o0..o{n-2} (all but the last spatial dim, innermost last) and the
    flattened batch-channel row `name`."""
    lines, rest = [], f"(pb * ROWS + {j})"
    for i in reversed(range(len(spatial_out) - 1)):
        lines.append(f"    o{i} = {rest} % {spatial_out[i]}")
        lines.append(f"    r{i} = {rest} // {spatial_out[i]}")
        rest = f"r{i}"
    lines.append(f"    {name} = {rest}")
    return lines


def _source(kind: str, spatial_in: tuple[int, ...], spatial_out: tuple[int, ...], k, s, p, d,
            bn: int, rows: int) -> str:
    n = len(spatial_in)
    w_in, w_out = spatial_in[-1], spatial_out[-1]
    sw = s[-1]
    other = "float('-inf')" if kind == "max" else "0.0"
    xdims = ", ".join(map(str, spatial_in[:-1] + (w_in // sw, sw)))
    ydims = ", ".join(map(str, spatial_out + (1,)))
    n_rows = f"X.shape[0] * {math.prod(spatial_out[:-1])}"
    lines = [f"@ag.kernel(threads={max(32, min(128, bn))})",
             f"def pool(X: ag.Tensor[\"NC\", {xdims}, ag.f32], "
             f"Y: ag.Tensor[\"NC\", {ydims}, ag.f32], BN: int = {bn}, ROWS: int = {rows}):",
             f"    pb, q = ag.grid(ag.cdiv({n_rows}, ROWS), ag.cdiv({w_out}, BN))",
             "    o_last = q * BN"]
    import itertools

    # ROWS output rows per CTA, unrolled: their loads are independent (in flight together)
    # and the CTA count drops ROWS-fold (one row of a few dozen outputs per CTA is
    # launch- and latency-bound). A row past the end has nc >= NC: its loads read `other`
    # and its store is masked by Y's bounds.
    for j in range(rows):
        lines += row_decode(j, spatial_out, "nc")
        lines.append(f"    acc = ag.full((BN, 1), {other})")
        for offs in itertools.product(*(range(kk) for kk in k)):
            idx = ["nc"]
            for i in range(n - 1):
                idx.append(f"o{i} * {s[i]} + {offs[i] * d[i] - p[i]}")
            t = offs[-1] * d[-1] - p[-1]
            qq, rr = t // sw, t % sw
            idx.append(f"o_last + {qq}")
            idx.append(str(rr))
            lines.append(f"    x = ag.load(X, ({', '.join(idx)}), (BN, 1), other={other})")
            lines.append("    acc = ag.maximum(acc, x)" if kind == "max" else "    acc = acc + x")
        if kind == "avg":
            lines.append(f"    acc = acc * {1.0 / math.prod(k)!r}")
        out_idx = ["nc"] + [f"o{i}" for i in range(n - 1)] + ["o_last", "0"]
        lines.append(f"    ag.store(Y, ({', '.join(out_idx)}), acc)")
    return "\n".join(lines) + "\n"


def rows_per_cta(bn: int, window: int, n_rows: int) -> int:
    """Output rows per CTA: about 512 outputs per CTA, at most 8 rows, at most 64 unrolled
    window loads per thread (window x rows: their offsets are computed ahead of the loads and
    held in registers; L1/43's 3x3x3 window at 8 rows took 214 registers, 4 CTAs an SM), never
    more rows than there are."""
    return max(1, min(8, 512 // bn, 64 // max(1, window), n_rows))


def pool_rows_per_cta(bn: int, window: int, n_rows: int) -> int:
    """Output rows per CTA of the pooling template: one where a row already gives a CTA
    enough loads in flight (bn >= NARROW_POOL_BN columns, or a window of WIDE_POOL_WINDOW
    loads a thread or more), else `rows_per_cta`'s pick (about 512 outputs a CTA, at most 8
    rows and 64 unrolled window loads a thread).

    One row: measured on the H200 (2026-12-02, scripts/gpu_pool_sweep.py, docs/perf/core2.md)
    over L1/41-46's upstream shapes (bn 256, 128, and 64 with a 27-load 3x3x3 window for
    L1/43), one row was the fastest or within 2% of it on all five (geomean 3% above
    rows_per_cta's pick; more rows only lengthen each CTA's serial tail when the grid already
    fills the machine). Several rows: a row of a small window over narrow planes is little
    work for a CTA. KernelBench L2/11's MaxPool2d(2) over [512, 128, 34, 34] at one row a CTA
    is 1.1 M one-warp CTAs (bn 32 for 17 outputs: 15 lanes idle) of 4 loads a thread:
    0.671 ms on the H200 against torch's max_pool_forward_nchw 0.228 ms on the same data
    (2026-12-04, torch.profiler), ~0.57 TB/s: bound by CTA turnover (32 resident CTAs an SM
    hold one warp each, each retires after one round trip to memory), not by DRAM. Rows a CTA
    put their loads in flight together and divide the CTA count by the rows (8: 139 K CTAs of
    32 loads a thread). Not measured yet: `python3 -u scripts/gpu_l2_slow.py` times both rules
    on L2/11's and L2/8's pools."""
    if bn >= NARROW_POOL_BN or window >= WIDE_POOL_WINDOW:
        return 1
    return rows_per_cta(bn, window, n_rows)


# the narrowest column tile (the template's power-of-two tile over the last output dim) that
# runs one row a CTA: a CTA of 128 threads (L1/46's measured bn)
NARROW_POOL_BN = 128
# the smallest window (loads a thread a row) that runs one row a CTA at any width: L1/43's
# 3x3x3 (27 loads, bn 64) measured within 2% of two rows
WIDE_POOL_WINDOW = 16


@ag.kernel(threads=256)
def pad_rows(X: ag.Tensor["R", "W", ag.f32], Y: ag.Tensor["R", "WP", ag.f32], PAD: float = 0.0,
             BN: int = 1024):
    """Y[r, :W] = X[r], Y[r, W:] = PAD (the columns past X's end read as PAD)."""
    r, j = ag.grid(Y.shape[0], ag.cdiv(Y.shape[1], BN))
    ag.store(Y, (r, j * BN), ag.load(X, (r, j * BN), (1, BN), other=PAD))


def last_width(w: int, w_out: int, k: int, s: int, p: int, d: int) -> tuple[int, bool]:
    """(columns the kernel sees, whether they must be copied with a padded tail): W when s
    divides it; the first floor(W / s) * s columns when no window reads past them (the last
    window ends at column (w_out - 1) * s - p + d * (k - 1)); else ceil(W / s) * s columns."""
    if w % s == 0:
        return w, False
    end = (w_out - 1) * s - p + d * (k - 1) + 1
    if end <= (w // s) * s:
        return (w // s) * s, False
    return -(-w // s) * s, True


def run_pool(node, x: torch.Tensor) -> torch.Tensor:
    a = node.attrs
    n = a["dims"]
    shape = tuple(x.shape)
    spatial_out = tuple(node.shape[-n:])
    nc = math.prod(shape[:-n])
    if not x.is_contiguous():
        buf = torch.empty(shape, dtype=torch.float32, device=x.device)
        copy_into(x, buf)
        x = buf
    width, padded = last_width(shape[-1], spatial_out[-1], a["kernel"][-1], a["stride"][-1],
                               a["padding"][-1], a["dilation"][-1])
    if padded:
        buf = torch.empty(*shape[:-1], width, dtype=torch.float32, device=x.device)
        rows = math.prod(shape[:-1])
        _run(pad_rows, (x.view(rows, shape[-1]), buf.view(rows, width)),
             PAD=float("-inf") if a["kind"] == "max" else 0.0,
             BN=min(1024, tile.pow2(width)))
        x = buf
    elif width != shape[-1]:
        x = x.narrow(-1, 0, width)             # a view: rows keep their stride
    spatial_in = shape[-n:-1] + (width,)
    bn = min(256, tile.pow2(spatial_out[-1]))
    rows = pool_rows_per_cta(bn, math.prod(a["kernel"]), nc * math.prod(spatial_out[:-1]))
    key = (a["kind"], spatial_in, spatial_out, a["kernel"], a["stride"], a["padding"],
           a["dilation"], bn, rows)
    if key not in _KERNELS:
        src = _source(*key)
        _KERNELS[key] = (tile.load_source(src, f"pool{len(_KERNELS)}")["pool"], src)
    fn, _ = _KERNELS[key]
    y = torch.empty(node.shape, dtype=torch.float32, device=x.device)
    sw = a["stride"][-1]
    lead = len(shape) - n                  # batch and channel dims: one merged dim (a view)
    xv = (x.flatten(0, lead - 1) if lead else x.unsqueeze(0)).unflatten(
        -1, (spatial_in[-1] // sw, sw))
    _run(fn, (xv, y.view(nc, *spatial_out, 1)))
    return y


__all__ = ["last_width", "pad_rows", "run_pool"]
