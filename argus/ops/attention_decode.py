"""`argus.ops.attention_decode(q, k, v, *, causal=False, scale=None, layout="bhsd",
return_lse=False, splits=None, schedule=None)`: attention for 1..16 query tokens per sequence
against a long KV cache (decoding, speculative decoding), with the flash-decoding kernels of
argus/kernels/attention_decode.py. `argus.ops.attention` takes this path by itself whenever
the query length is at most 16 (and no prefill schedule is forced), so most callers never name
it.

Semantics are argus.ops.attention's (torch SDPA with enable_gqa=True): q [B, Hq, Sq, D], k and
v [B, Hkv, Skv, D] (layout="bshd": [B, S, H, D], read in place), bf16 or fp16, head dim 64, 128
or 256, Hq a multiple of Hkv, any Skv (no multiple-of-the-block rule). Causal masks are
FlashAttention's bottom-right convention: query token t of Sq sees keys j <= Skv - Sq + t, so
for decoding the last Sq positions are the queries; a token that sees no key (Sq > Skv) gets
zeros and LSE -inf. Sq must be at most 16 (MAX_QUERIES): longer queries are prefill.

How it runs (docs/perf/attention.md, "Decode"): the query heads of one KV head and the Sq
tokens are packed as the rows of one tile (a free view of q when its heads and tokens are
contiguous, else a small copy), so each KV block is read once for the whole GQA group; the KV
length is split over `splits` CTAs when B x Hkv alone cannot fill the SMs (`num_splits`, by
wave efficiency; `splits=` overrides it), and a combine kernel merges the splits by their
log-sum-exp. With one split the decode kernel writes the output directly. More than 128
packed rows (large groups x many tokens) run as several launches over row chunks.

Every input that cannot be right raises a LaunchError saying what and how to fix it (dtype,
head dim, shapes, mismatched heads, device, strides TMA cannot address, too many query
tokens).
"""

from __future__ import annotations

import math
from collections import OrderedDict

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.attention import LOG2E, ROWS
from argus.kernels.attention_decode import (MAX_QUERIES, MAX_SPLITS, DecodeSchedule,
                                            combine_shape, decode_combine_kernel, decode_kernel,
                                            default_decode_schedule, num_splits)
from argus.ops.attention_inputs import _bhsd, _check_strides, check

_WHO = "argus.ops.attention_decode"
_DTYPES = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16}
MAX_TILE_ROWS = 2 * ROWS        # packed rows one CTA takes (two consumer warpgroups)
_COMPILED: OrderedDict = OrderedDict()
_LAUNCHES: OrderedDict = OrderedDict()
_MEMO_SIZE = 64


def attention_decode(q, k, v, *, causal: bool = False, scale: float | None = None,
                     layout: str = "bhsd", return_lse: bool = False, splits: int | None = None,
                     schedule: DecodeSchedule | None = None):
    """softmax(scale * q k^T [+ causal mask]) v for Sq <= 16 query tokens; (out, lse) with
    return_lse=True (lse [B, Hq, Sq] fp32, natural log). See the module docstring."""
    check(q, k, v, layout=layout)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    out, lse = run_decode(q, k, v, bool(causal), float(scale), layout, bool(return_lse),
                          splits=splits, schedule=schedule, checked=True)
    return (out, lse) if return_lse else out


def run_decode(q, k, v, causal: bool, scale: float, layout: str, return_lse: bool, *,
               splits: int | None = None, schedule: DecodeSchedule | None = None,
               execute=None, checked: bool = False):
    """The eager implementation: (out in q's layout, lse [B, Hq, Sq] fp32 or an empty tensor).
    `execute(kernel_fn, compile_time, tensors, scalars)` runs one kernel; None launches it on
    the GPU (tests pass the interpreter, with CPU tensors, to check everything around the
    kernels). checked=True: the caller ran check() on these tensors already (the host path
    is on every decoding step's critical path)."""
    import torch

    if not checked:
        check(q, k, v, layout=layout, device=execute is None)
    qb, kb, vb = _bhsd(q, layout), _bhsd(k, layout), _bhsd(v, layout)
    B, H, S, D = qb.shape
    HKV, SK = kb.shape[1], kb.shape[2]
    if S > MAX_QUERIES:
        raise LaunchError(f"{_WHO}: q has {S} query tokens; the decode kernels take at most "
                          f"{MAX_QUERIES}", fix="use argus.ops.attention (prefill) for longer "
                                                "queries")
    if splits is not None and not (isinstance(splits, int) and 1 <= splits <= MAX_SPLITS):
        raise LaunchError(f"{_WHO}: splits={splits!r} must be an int in [1, {MAX_SPLITS}]",
                          fix="leave splits=None to let num_splits choose")
    if schedule is not None and not isinstance(schedule, DecodeSchedule):
        raise LaunchError(f"{_WHO}: schedule={schedule!r} is not a DecodeSchedule")
    _check_strides((("k", k), ("v", v)))
    G = H // HKV
    GS = G * S
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    lse = torch.empty((B, H, S), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse if return_lse else lse.new_empty((0,))
    if SK == 0:   # no key at all: zeros, log-sum-exp -inf
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse if return_lse else lse.new_empty((0,))
    # the packed views: row r = g * Sq + t of kv head hk is query head hk * G + g, token t
    q_rows = qb.reshape(B, HKV, GS, D)          # a view when heads and tokens are contiguous
    if not _tma_ready(q_rows):
        q_rows = q_rows.contiguous()
    ob = _bhsd(out, layout)
    try:
        o_rows, o_copy = ob.view(B, HKV, GS, D), None
    except RuntimeError:   # [B, S, H, D] with G > 1 and S > 1: rows are not one stride
        o_copy = torch.empty((B, HKV, GS, D), dtype=q.dtype, device=q.device)
        o_rows = o_copy
    l_rows = lse.view(B, HKV, GS, 1)
    dt = _DTYPES[str(q.dtype)]
    # rows in chunks of at most 128 that start at a multiple of Sq (the kernel finds a row's
    # token as r % Sq within its chunk)
    chunk = MAX_TILE_ROWS // S * S
    for r0 in range(0, GS, chunk):
        rows = min(chunk, GS - r0)
        s = schedule or default_decode_schedule(D, rows, dt)
        problems = s.problems_for(D, dt)
        if problems or rows > s.block_m:
            raise LaunchError(f"{_WHO}: {s} cannot run {rows} packed rows at head dim {D}: "
                              + "; ".join(problems or [f"it takes {s.block_m} rows"]),
                              fix="use default_decode_schedule(head_dim, rows)")
        n_splits = splits or num_splits(B * HKV, -(-SK // s.block_n))
        n_splits = min(n_splits, -(-SK // s.block_n))
        qc, oc, lc = (q_rows, o_rows, l_rows) if rows == GS else \
            (t[:, :, r0:r0 + rows] for t in (q_rows, o_rows, l_rows))
        scalars = {"qk_scale": scale * LOG2E, "q_len": S}
        if n_splits == 1:
            _execute(execute, decode_kernel(D, dt, causal, False), {"s": s},
                     (qc, kb, vb, oc, lc), scalars, q.device)
            continue
        o_part = torch.empty((B * HKV, n_splits, rows, D), dtype=torch.float32,
                             device=q.device)
        l_part = torch.empty((B * HKV, n_splits, rows, 1), dtype=torch.float32,
                             device=q.device)
        _execute(execute, decode_kernel(D, dt, causal, True), {"s": s},
                 (qc, kb, vb, o_part, l_part), scalars, q.device)
        _execute(execute, decode_combine_kernel(D, dt, *combine_shape(n_splits, D)), {},
                 (o_part, l_part, oc, lc), {}, q.device)
    if o_copy is not None:
        ob.copy_(o_copy.view(B, H, S, D))
    return out, lse if return_lse else lse.new_empty((0,))


def _tma_ready(t) -> bool:
    """Whether TMA can read `t` as it is: unit inner stride, 16-byte aligned pointer and
    outer strides, positive (an expand()ed dim has stride 0, which a tensor map cannot
    have); dims of extent 1 are never stepped over."""
    eb = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(
        (t.stride(d) * eb) % 16 == 0 and t.stride(d) > 0
        for d in range(t.dim() - 1) if t.shape[d] > 1)


def _execute(execute, kernel_fn, compile_time: dict, tensors: tuple, scalars: dict, device):
    if execute is not None:
        execute(kernel_fn, compile_time, tensors, scalars)
        return
    import torch

    key = (id(kernel_fn), tuple(sorted(compile_time.items(), key=str)), device.index)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = kernel_fn.compile(**compile_time)
        _COMPILED[key] = compiled
        if len(_COMPILED) > _MEMO_SIZE:
            _COMPILED.popitem(last=False)
    # a prepared plan holds raw pointers only (argus/ops/attention.py): kept per buffers
    launch = (key, tuple((t.data_ptr(), tuple(t.shape), t.stride()) for t in tensors),
              tuple(sorted(scalars.items())))
    plan = _LAUNCHES.get(launch)
    if plan is None:
        with torch.cuda.device(device):
            plan = compiled.prepare(*tensors, _scalars=scalars)
        _LAUNCHES[launch] = plan
        if len(_LAUNCHES) > _MEMO_SIZE:
            _LAUNCHES.popitem(last=False)
    else:
        _LAUNCHES.move_to_end(launch)
    if plan is not False:
        plan()
