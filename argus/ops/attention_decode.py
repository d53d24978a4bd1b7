"""`argus.ops.attention_decode(q, k, v, block_table=None, seq_lens=None, *, causal=False,
scale=None, layout="bhsd", return_lse=False, splits=None, schedule=None)`: attention for 1..16
query tokens per sequence against a long KV cache (decoding, speculative decoding), with the
flash-decoding kernels of argus/kernels/attention_decode.py. `argus.ops.attention` takes this
path by itself whenever the query length is at most 16 (and no prefill schedule is forced), so
most callers never name it.

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

Paged KV cache (vLLM / FlashInfer, issue 14): with `block_table` [B, max_pages] int32 and
`seq_lens` [B] int32 (CUDA tensors), k and v are the caches [num_pages, page_size, Hkv, D]
(page_size a power of two in 16..256 here; any larger power of two too) and sequence b's keys
are rows 0 .. seq_lens[b] - 1 of its pages block_table[b, 0], block_table[b, 1], ... in that
order (its query tokens are its last Sq keys: the causal mask is the same bottom-right one
per sequence). Lengths are read on the device (no host sync): a length past
max_pages * page_size is clamped to it, and a page id outside [0, num_pages) reads zeros (TMA
bounds), never other memory; `check_values=True` checks both on the host (a device sync),
and the interpreter always does. The splits are chosen for max_pages * page_size keys;
the verifier proves the split paged kernel (PAGED_SPLITS_VERIFIED, below: each key of a
sequence multiplied once across its splits and pages), so a paged call splits as a contiguous
one does.

Host time (a decoding step's critical path): a call whose signature (shapes, strides, dtypes,
devices, flags) was seen before skips the checks and every decision (they follow from the
signature), allocates its output and one fp32 workspace (the LSE and the split partials), and
replays the launches prepared for the same buffer addresses (`_Entry`: a few per signature;
the caching allocator hands the same addresses back in a loop). Eager calls do not go
through the torch.library op (its dispatch alone costs 15-20 us); torch.compile does.

Every input that cannot be right raises a LaunchError saying what and how to fix it (dtype,
head dim, shapes, mismatched heads, device, strides TMA cannot address, too many query
tokens).
"""

from __future__ import annotations

import math
from os import environ as _environ
from collections import OrderedDict
from dataclasses import dataclass, field, replace

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.attention import LOG2E, ROWS
from argus.kernels.attention_decode import (MAX_QUERIES, MAX_SPLITS, DecodeSchedule,
                                            combine_shape, decode_combine_kernel, decode_kernel,
                                            default_decode_schedule, fused_combine_pays,
                                            num_splits, with_fused_combine)
from argus.build_memo import BuildMemo
from argus.ops.attention_inputs import _bhsd, _check_strides, check
from argus.runtime.driver import current_stream as _current_stream

_WHO = "argus.ops.attention_decode"
_DTYPES = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16}
MAX_TILE_ROWS = 2 * ROWS        # packed rows one CTA takes (two consumer warpgroups)
PAGE_SIZES = tuple(1 << i for i in range(4, 16))   # powers of two from 16
_COMPILED: BuildMemo = BuildMemo()
_MEMO_SIZE = 64
_ALIGN = 64                     # fp32 elements: workspace pieces start 256-byte aligned


def attention_decode(q, k, v, block_table=None, seq_lens=None, *, causal: bool = False,
                     scale: float | None = None, layout: str = "bhsd", return_lse: bool = False,
                     splits: int | None = None, schedule: DecodeSchedule | None = None,
                     check_values: bool = False):
    """softmax(scale * q k^T [+ causal mask]) v for Sq <= 16 query tokens; (out, lse) with
    return_lse=True (lse [B, Hq, Sq] fp32, natural log). With block_table and seq_lens, k and
    v are paged caches [num_pages, page_size, Hkv, D]. See the module docstring."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if block_table is not None and not _eager(q, k, v) and splits is None and schedule is None:
        # traced (torch.compile): the paged path as one opaque op
        out, lse = _paged_op()(q, k, v, block_table, seq_lens, bool(causal), float(scale),
                               layout, bool(return_lse))
        return (out, lse) if return_lse else out
    out, lse = run_decode(q, k, v, bool(causal), float(scale), layout, bool(return_lse),
                          block_table=block_table, seq_lens=seq_lens, splits=splits,
                          schedule=schedule, check_values=check_values)
    return (out, lse) if return_lse else out


def _eager(q, k=None, v=None) -> bool:
    """Whether a call runs the implementation directly instead of through a torch.library
    op: everywhere but under torch.compile (which traces the op), on tensor subclasses (fake
    tensors of a tracer), under a TorchDispatchMode, and where autograd would record the call
    (the op then says that it has no backward). The op's dispatch costs 15-20 us of host time
    a call."""
    import torch

    if type(q) is not torch.Tensor or torch.compiler.is_compiling():
        return False
    # a TorchDispatchMode (make_fx tracing, FlopCounterMode, debug modes) sees only the op:
    # the raw launch would run outside it
    if torch._C._len_torch_dispatch_stack():
        return False
    return not torch.is_grad_enabled() or not (
        q.requires_grad or getattr(k, "requires_grad", False) or
        getattr(v, "requires_grad", False))


def run_decode(q, k, v, causal: bool, scale: float, layout: str, return_lse: bool, *,
               block_table=None, seq_lens=None, splits: int | None = None,
               schedule: DecodeSchedule | None = None, execute=None, checked: bool = False,
               check_values: bool = False):
    """The eager implementation: (out in q's layout, lse [B, Hq, Sq] fp32 or None).
    `execute(kernel_fn, compile_time, tensors, scalars)` runs one kernel; None launches it on
    the GPU (tests pass the interpreter, with CPU tensors, to check everything around the
    kernels). On the GPU a repeated signature takes `_repeat` (no checks, no decisions: they
    follow from the signature). checked=True: the caller ran check() on q, k, v already."""
    paged = block_table is not None or seq_lens is not None
    if execute is None and not check_values:
        key = _signature(q, k, v, block_table, seq_lens, causal, scale, layout, splits,
                         schedule)
        entry = _ENTRIES.get(key)
        if entry is not None:
            got = entry.repeat(q, k, v, block_table, seq_lens, return_lse)
            if got is not None:
                return got
    else:
        key = entry = None
    if paged:
        _check_paged(q, k, v, block_table, seq_lens, layout, device=execute is None)
    elif not checked:
        check(q, k, v, layout=layout, device=execute is None)
    if check_values or (paged and execute is not None):
        _check_page_values(k, block_table, seq_lens)
    if splits is not None and not (isinstance(splits, int) and 1 <= splits <= MAX_SPLITS):
        raise LaunchError(f"{_WHO}: splits={splits!r} must be an int in [1, {MAX_SPLITS}]",
                          fix="leave splits=None to let num_splits choose")
    if schedule is not None and not isinstance(schedule, DecodeSchedule):
        raise LaunchError(f"{_WHO}: schedule={schedule!r} is not a DecodeSchedule")
    if not paged:
        _check_strides((("k", k), ("v", v)))
    call = _Call(q, k, v, block_table, seq_lens, causal, scale, layout, splits, schedule)
    if execute is not None:
        out, ws = call.allocate()
        call.run(out, ws, execute)
        return out, call.lse(ws, return_lse)
    if entry is None and key is not None:
        entry = _Entry(call.out_shape, q.dtype, q.device, call.ws_numel, call.lse_shape)
        _ENTRIES[key] = entry
        if len(_ENTRIES) > _Entry.ENTRIES:
            _ENTRIES.popitem(last=False)
    out, ws = call.allocate()
    plans = []
    stream = _current_stream(q.device.index)    # the plans' device (torch's stream)

    def launch(*args):
        # launched as prepared, inside call.run: a plan holds raw pointers only, and run's
        # temporaries (a copy of q, the packed output copied back into out after the last
        # launch) live only there; launched after run returns, the copy-back read the output
        # copy before any kernel wrote it (NaN on the device) and q's copy was freed
        plan = _prepare(*args, device=q.device)
        plans.append(plan)
        if plan is not False:
            plan(stream)

    copied = call.run(out, ws, launch)
    if entry is not None and not copied:   # launches that read q, k, v where they are
        entry.remember(_pointers(q, k, v, block_table, seq_lens, out, ws), plans)
    return out, call.lse(ws, return_lse)


# ----------------------------------------------------------------------------- repeated calls


def _signature(q, k, v, block_table, seq_lens, causal, scale, layout, splits, schedule):
    """What a call's checks and decisions depend on (not the buffers' addresses, nor the
    contents of block_table and seq_lens, which the kernel reads on the device); None for
    arguments that are not tensors (the checked path says what is wrong)."""
    try:
        key = (q.shape, q.stride(), q.dtype, q.get_device(), k.shape, k.stride(), k.dtype,
               k.get_device(), v.shape, v.stride(), v.dtype, v.get_device(), causal, scale,
               layout, splits, schedule, _verify_flag())
        if block_table is not None or seq_lens is not None:
            key += (block_table.shape, block_table.stride(), block_table.dtype,
                    block_table.get_device(), seq_lens.shape, seq_lens.stride(),
                    seq_lens.dtype, seq_lens.get_device())
        return key
    except (AttributeError, TypeError):
        return None


def _verify_flag() -> str | None:
    """ARGUS_VERIFY as set (a plan prepared from a kernel built unverified is not replayed
    for a call made with verification on; the paged split choice depends on it too)."""
    return _environ.get("ARGUS_VERIFY")


def _pointers(q, k, v, block_table, seq_lens, out, ws) -> tuple:
    return (q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), ws.data_ptr(),
            None if block_table is None else block_table.data_ptr(),
            None if seq_lens is None else seq_lens.data_ptr())


_ENTRIES: BuildMemo = BuildMemo()
_COUNTERS: dict = {}    # (device, stream, B, HKV) -> the fused kernel's counters (_Call.counters)


@dataclass(frozen=True)
class _Entry:
    """One call signature's allocations and prepared launches (keyed by every buffer's
    address: a plan holds raw pointers, and everything else it holds follows from the
    signature). A repeated call costs the key, two allocations and the launches."""

    out_shape: tuple
    dtype: object
    device: object
    ws_numel: int
    lse_shape: tuple
    plans: OrderedDict = field(default_factory=OrderedDict)

    PLANS = 8        # buffer-address sets per signature (the caching allocator reuses a few)
    ENTRIES = 64

    def repeat(self, q, k, v, block_table, seq_lens, return_lse):
        """(out, lse) after launching the plans prepared for these addresses, or None (the
        caller prepares them; the two allocations go back to the caching allocator)."""
        import torch

        out = torch.empty(self.out_shape, dtype=self.dtype, device=self.device)
        ws = torch.empty(self.ws_numel, dtype=torch.float32, device=self.device)
        plans = self.plans.get(_pointers(q, k, v, block_table, seq_lens, out, ws))
        if plans is None:
            return None
        stream = _current_stream(self.device.index)
        for plan in plans:
            plan(stream)
        return out, (ws[:_numel(self.lse_shape)].view(self.lse_shape) if return_lse
                     else None)

    def remember(self, pointers: tuple, plans: list) -> None:
        self.plans[pointers] = tuple(p for p in plans if p is not False)
        if len(self.plans) > self.PLANS:
            self.plans.popitem(last=False)


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _prepare(kernel_fn, compile_time: dict, tensors: tuple, scalars: dict, *, device):
    """The launch plan of one kernel on these tensors (compiled once per kernel, device and
    verification level: a kernel built with ARGUS_VERIFY=0 is not handed to a verified call)."""
    import torch

    from argus import config

    key = (id(kernel_fn), tuple(sorted(compile_time.items(), key=str)), device.index,
           config.verify_level())
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = kernel_fn.compile(**compile_time)
        _COMPILED[key] = compiled
        if len(_COMPILED) > _MEMO_SIZE:
            _COMPILED.popitem(last=False)
    with torch.cuda.device(device):
        return compiled.prepare(*tensors, _scalars=scalars)


# ----------------------------------------------------------------------------- one call


class _Call:
    """A call's decisions (from its signature only): the packed views, the row chunks, each
    chunk's schedule and splits, and the workspace layout: [lse (B * Hq * Sq) | LP | OP] in
    fp32, one allocation (the chunks run in stream order, so they share the partials)."""

    def __init__(self, q, k, v, block_table, seq_lens, causal, scale, layout, splits,
                 schedule):
        self.q, self.k, self.v = q, k, v
        self.bt, self.sl = block_table, seq_lens
        self.causal, self.layout = causal, layout
        self.paged = block_table is not None
        qb = _bhsd(q, layout)
        B, H, S, D = qb.shape
        if self.paged:
            pages, page_size, HKV, _ = k.shape
            keys = block_table.shape[1] * page_size         # the most keys of a sequence
        else:
            page_size = 0
            HKV, keys = _bhsd(k, layout).shape[1], _bhsd(k, layout).shape[2]
        if S > MAX_QUERIES:
            raise LaunchError(f"{_WHO}: q has {S} query tokens; the decode kernels take at most "
                              f"{MAX_QUERIES}", fix="use argus.ops.attention (prefill) for "
                                                    "longer queries")
        self.B, self.H, self.S, self.D, self.HKV, self.keys = B, H, S, D, HKV, keys
        self.page_size = page_size
        self.GS = H // HKV * S
        self.dt = _DTYPES[str(q.dtype)]
        self.scalars = {"qk_scale": scale * LOG2E, "q_len": S}
        self.out_shape = tuple(q.shape)
        self.lse_shape = (B, H, S)
        # rows in chunks of at most 128 that start at a multiple of Sq (the kernel finds a
        # row's token as r % Sq within its chunk)
        chunk = MAX_TILE_ROWS // S * S
        self.chunks = []
        most = 0
        for r0 in range(0, self.GS, chunk):
            rows = min(chunk, self.GS - r0)
            s = schedule or default_decode_schedule(D, rows, self.dt, page_size)
            problems = s.problems_for(D, self.dt)
            if page_size and page_size % s.block_n:
                problems.append(f"block_n={s.block_n} does not divide page_size={page_size}")
            if problems or rows > s.block_m:
                raise LaunchError(f"{_WHO}: {s} cannot run {rows} packed rows at head dim {D}"
                                  + (f", page size {page_size}" if page_size else "") + ": "
                                  + "; ".join(problems or [f"it takes {s.block_m} rows"]),
                                  fix="use default_decode_schedule(head_dim, rows"
                                      + (", page_size=page_size)" if page_size else ")"))
            blocks = -(-keys // s.block_n)
            n = min(splits or num_splits(B * HKV, blocks, ctas_per_sm=s.ctas_per_sm),
                    max(1, blocks))
            if self.paged and splits is None and not _paged_splits_run():
                n = 1            # the one paged kernel the verifier proves (see below)
            if s.fused_combine and self.paged:
                raise LaunchError(f"{_WHO}: {s} merges its splits in the split kernel "
                                  f"(fused_combine), which is built for a contiguous cache "
                                  f"only", fix="use fused_combine=False with a paged cache")
            if s.fused_combine and n == 1:
                s = replace(s, fused_combine=False)   # one split: the direct kernel
            if schedule is None and fused_combine_pays(s, n, rows, D, self.paged):
                s = with_fused_combine(s, D, self.dt)  # one launch where the merge is short
            if (s.stagger or s.streams > 1) and (n > 1 or self.paged):
                raise LaunchError(f"{_WHO}: {s} reorders the walk of the direct kernel, but "
                                  f"this call runs " + (f"{n} splits" if n > 1 else
                                                        "a paged cache"),
                                  fix="pass splits=1 with a staggered or two-stream schedule "
                                      "(contiguous K and V), or stagger=0 and streams=1")

            self.chunks.append((r0, rows, s, n))
            if n > 1:
                most = max(most, B * HKV * n * rows * (D + 1))
        lse = _numel(self.lse_shape)
        self.lse_pad = -(-lse // _ALIGN) * _ALIGN
        self.ws_numel = max(1, self.lse_pad + most + _ALIGN)

    def counters(self, ws):
        """The fused kernel's arrival counters [B, HKV, 2] int32 (ws's device): zeros once,
        then left zero by every launch (each counter resets itself after its SPLITS
        arrivals), so they are kept per (device, stream, B, HKV) and never freed (prepared
        launch plans hold their address). Two calls running at once on one stream cannot
        happen; on two streams they get two sets. The interpreter gets fresh zeros."""
        import torch

        shape = (self.B, self.HKV, 2)
        if not ws.is_cuda:
            return torch.zeros(shape, dtype=torch.int32)
        key = (ws.device.index, _current_stream(ws.device.index), *shape)
        cnt = _COUNTERS.get(key)
        if cnt is None:
            cnt = _COUNTERS[key] = torch.zeros(shape, dtype=torch.int32, device=ws.device)
        return cnt

    def allocate(self):
        import torch

        out = torch.empty(self.out_shape, dtype=self.q.dtype, device=self.q.device)
        ws = torch.empty(self.ws_numel, dtype=torch.float32, device=self.q.device)
        return out, ws

    def lse(self, ws, return_lse: bool):
        n = _numel(self.lse_shape)
        return ws[:n].view(self.lse_shape) if return_lse else None

    def run(self, out, ws, execute) -> bool:
        """Run every launch through `execute`; True when a copy of q or of the output was
        made (a launch that reads or writes a temporary: not replayable by address)."""
        B, H, S, D, HKV, GS = self.B, self.H, self.S, self.D, self.HKV, self.GS
        lse = ws[:B * H * S].view(B, H, S)
        if out.numel() == 0:
            return False
        if self.keys == 0 or (self.paged and self.keys == 0):
            out.zero_()
            lse.fill_(float("-inf"))
            return True
        qb = _bhsd(self.q, self.layout)
        q_rows = qb.reshape(B, HKV, GS, D)          # a view when heads and tokens are contiguous
        # a copy ([B, S, H, D] with G > 1 and S > 1) is this call's: never replayed
        copied = q_rows.untyped_storage().data_ptr() != qb.untyped_storage().data_ptr()
        if not _tma_ready(q_rows):
            q_rows, copied = q_rows.contiguous(), True
        ob = _bhsd(out, self.layout)
        try:
            o_rows, o_copy = ob.view(B, HKV, GS, D), None
        except RuntimeError:   # [B, S, H, D] with G > 1 and S > 1: rows are not one stride
            o_copy = out.new_empty((B, HKV, GS, D))
            o_rows, copied = o_copy, True
        l_rows = lse.view(B, HKV, GS, 1)
        if self.paged:
            kv = (self.k.transpose(1, 2), self.v.transpose(1, 2), self.bt, self.sl.view(B, 1))
        else:
            kv = (_bhsd(self.k, self.layout), _bhsd(self.v, self.layout))
        ps = self.page_size
        for r0, rows, s, n in self.chunks:
            qc, oc, lc = (q_rows, o_rows, l_rows) if rows == GS else \
                (t[:, :, r0:r0 + rows] for t in (q_rows, o_rows, l_rows))
            if n == 1:
                execute(decode_kernel(D, self.dt, self.causal, False, ps), {"s": s},
                        (qc, *kv, oc, lc), self.scalars)
                continue
            base = self.lse_pad
            l_part = ws[base:base + B * HKV * n * rows].view(B * HKV, n, rows, 1)
            base = -(-(base + l_part.numel()) // _ALIGN) * _ALIGN
            o_part = ws[base:base + B * HKV * n * rows * D].view(B * HKV, n, rows, D)
            if s.fused_combine:   # the last split of each row tile merges: one launch
                execute(decode_kernel(D, self.dt, self.causal, True, ps, True),
                        {"s": s, "splits_pad": combine_shape(n, D)[0]},
                        (qc, *kv, o_part, l_part, oc, lc, self.counters(ws)), self.scalars)
                continue
            execute(decode_kernel(D, self.dt, self.causal, True, ps), {"s": s},
                    (qc, *kv, o_part, l_part), self.scalars)
            execute(decode_combine_kernel(D, self.dt, *combine_shape(n, D)), {},
                    (o_part, l_part, oc, lc), {})
        if o_copy is not None:
            ob.copy_(o_copy.view(B, H, S, D))
        return copied


# The split paged kernel is proven since issue 13 closed its gap (wgmma.k-once's coverage over
# the split program id: each split's first key comes from the sequence's length, read on the
# device, and the logical key's extent is that length, attention_decode._tag_pages);
# tests/verify/test_attention_decode_verifies.py::test_paged_split_kernel_verifies_clean.
# False (a switch kept for a kernel change the verifier does not prove yet) runs one split
# (the direct kernel) for a paged call with verification on.
PAGED_SPLITS_VERIFIED = True


def _paged_splits_run() -> bool:
    from argus import config

    return PAGED_SPLITS_VERIFIED or config.verify_level() == 0


def _tma_ready(t) -> bool:
    """Whether TMA can read `t` as it is: unit inner stride, 16-byte aligned pointer and
    outer strides, positive (an expand()ed dim has stride 0, which a tensor map cannot
    have); dims of extent 1 are never stepped over."""
    eb = t.element_size()
    return t.stride(-1) == 1 and t.data_ptr() % 16 == 0 and all(
        (t.stride(d) * eb) % 16 == 0 and t.stride(d) > 0
        for d in range(t.dim() - 1) if t.shape[d] > 1)


# ----------------------------------------------------------------------------- paged inputs


def _check_paged(q, k, v, block_table, seq_lens, layout: str, device: bool = True) -> None:
    """Raise a LaunchError for paged inputs the kernels cannot compute right (shapes, dtypes
    and strides before devices, so CPU tensors get the same messages)."""
    import torch

    from argus.ops.attention_inputs import LAYOUTS
    from argus.kernels.attention import HEAD_DIMS

    named = (("q", q), ("k_cache", k), ("v_cache", v), ("block_table", block_table),
             ("seq_lens", seq_lens))
    for name, t in named:
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{_WHO}: {name} must be a torch.Tensor, got {type(t).__name__}",
                              fix="pass block_table [batch, max_pages] and seq_lens [batch], "
                                  "int32, together" if name in ("block_table", "seq_lens")
                              else "")
    if layout not in LAYOUTS:
        raise LaunchError(f"{_WHO}: layout={layout!r} is not one of {LAYOUTS}",
                          fix="'bhsd' for q [batch, heads, seq, head_dim], 'bshd' for [batch, "
                              "seq, heads, head_dim]")
    if str(q.dtype) not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        raise LaunchError(f"{_WHO}: q, k_cache and v_cache must all be bfloat16 or all "
                          f"float16, got {q.dtype}, {k.dtype}, {v.dtype}",
                          fix="cast them (the caches once, where they are allocated)")
    if q.dim() != 4:
        raise LaunchError(f"{_WHO}: q has shape {tuple(q.shape)}; layout={layout!r} takes a 4-d "
                          f"q", fix="add the missing batch or head dimension with unsqueeze")
    for name, t in named[1:3]:
        if t.dim() != 4:
            raise LaunchError(f"{_WHO}: {name} has shape {tuple(t.shape)}; a paged cache is "
                              f"[num_pages, page_size, kv_heads, head_dim]")
    if tuple(k.shape) != tuple(v.shape):
        raise LaunchError(f"{_WHO}: k_cache {tuple(k.shape)} and v_cache {tuple(v.shape)} "
                          f"differ; they must have the same shape")
    B, H, S, D = _bhsd(q, layout).shape
    pages, page_size, HKV, kd = k.shape
    if D not in HEAD_DIMS:
        raise LaunchError(f"{_WHO}: head dim {D} is not supported (the kernel takes "
                          f"{HEAD_DIMS})", fix="pad q and the caches with zeros to the next "
                                               "supported head dim")
    if kd != D:
        raise LaunchError(f"{_WHO}: q has head dim {D}, the caches have {kd}; they must match")
    if HKV == 0 or H % HKV:
        raise LaunchError(f"{_WHO}: q has {H} heads, the caches {HKV} kv heads; the query heads "
                          f"must be a multiple of the kv heads (GQA / MQA)",
                          fix="the caches are [num_pages, page_size, kv_heads, head_dim]")
    if page_size not in PAGE_SIZES:
        raise LaunchError(f"{_WHO}: page_size {page_size} (k_cache.shape[1]) is not a power of "
                          f"two >= 16", fix="allocate the caches with pages of 16, 32, 64, 128 "
                                            "or 256 tokens")
    _check_strides((("k_cache", k), ("v_cache", v)))
    for name, t, dims in (("block_table", block_table, "[batch, max_pages]"),
                          ("seq_lens", seq_lens, "[batch]")):
        if t.dtype != torch.int32:
            raise LaunchError(f"{_WHO}: {name} is {t.dtype}; it must be torch.int32",
                              fix=f"{name}.int()")
        if t.dim() != len(dims.split(",")) or t.shape[0] != B:
            raise LaunchError(f"{_WHO}: {name} has shape {tuple(t.shape)}; it must be {dims} "
                              f"with batch = {B} (q's)")
    if not device:
        return
    for name, t in named:
        if not t.is_cuda:
            raise LaunchError(f"{_WHO}: {name} is on {t.device}; Argus kernels run on a CUDA "
                              f"device (sm_90a)", fix=f"{name}.cuda()")
        if t.device != q.device:
            raise LaunchError(f"{_WHO}: {name} is on {t.device}, q on {q.device}",
                              fix="move every input to one GPU")


def _check_page_values(k_cache, block_table, seq_lens) -> None:
    """The values the kernel reads on the device: 0 <= seq_lens[b] <= max_pages * page_size
    and every page a sequence uses in [0, num_pages) (a host copy: a sync on the GPU)."""
    pages, page_size = k_cache.shape[0], k_cache.shape[1]
    lens = seq_lens.cpu()
    table = block_table.cpu()
    most = table.shape[1] * page_size
    for b in range(lens.shape[0]):
        n = int(lens[b])
        if not 0 <= n <= most:
            raise LaunchError(f"{_WHO}: seq_lens[{b}] = {n} is outside [0, {most}] (max_pages "
                              f"{table.shape[1]} x page_size {page_size})",
                              fix="give the block table enough columns for the longest "
                                  "sequence")
        used = table[b, :-(-n // page_size)]
        bad = ((used < 0) | (used >= pages)).nonzero()
        if bad.numel():
            i = int(bad[0, 0])
            raise LaunchError(f"{_WHO}: block_table[{b}, {i}] = {int(used[i])} is not a page "
                              f"of the caches (num_pages {pages}); sequence {b} has {n} keys, "
                              f"so it uses its first {used.numel()} pages",
                              fix="fill the block table with page ids in [0, num_pages)")


_PAGED_OP = None


def _paged_op():
    """torch.ops.argus.attention_decode_paged, registered on first use (torch.compile traces
    it as one op; its fake gives the shapes)."""
    global _PAGED_OP
    if _PAGED_OP is None:
        _PAGED_OP = _register_paged()
    return _PAGED_OP


def _register_paged():
    import torch

    try:
        return torch.ops.argus.attention_decode_paged.default
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("argus::attention_decode_paged", mutates_args=(),
                             schema="(Tensor q, Tensor k_cache, Tensor v_cache, "
                                    "Tensor block_table, Tensor seq_lens, bool causal, "
                                    "float scale, str layout, bool return_lse) -> "
                                    "(Tensor, Tensor)")
    def paged_op(q, k_cache, v_cache, block_table, seq_lens, causal, scale, layout, return_lse):
        out, lse = run_decode(q, k_cache, v_cache, causal, scale, layout, return_lse,
                              block_table=block_table, seq_lens=seq_lens)
        return out, lse.clone() if return_lse else out.new_empty((0,), dtype=torch.float32)

    @paged_op.register_fake
    def _(q, k_cache, v_cache, block_table, seq_lens, causal, scale, layout, return_lse):
        qb = _bhsd(q, layout)
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        return out, q.new_empty(tuple(qb.shape[:3]) if return_lse else (0,),
                                dtype=torch.float32)

    return paged_op
