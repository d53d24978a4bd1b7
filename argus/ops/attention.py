"""`argus.ops.attention(q, k, v, *, causal=False, scale=None, layout="bhsd", return_lse=False)`:
FlashAttention's forward on Hopper with Argus's verified kernel (argus/kernels/attention.py).

Semantics are torch's `scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale,
enable_gqa=True)` with two documented differences, both FlashAttention's conventions:

* causal with Sq != Skv aligns the mask bottom-right: query i sees keys j <= i + Skv - Sq (the
  last query sees every key; torch aligns top-left);
* a query row that sees no key at all (causal with Sq > Skv, or Skv = 0) gets zeros, and its
  log-sum-exp is -inf.

Tensors: bf16 or fp16 on one CUDA device, head dim 64, 128 or 256, any sequence lengths (FP8
e4m3 inputs with per-tensor scales: `argus.ops.attention_fp8`, argus/ops/attention_fp8.py).
layout="bhsd": q [B, Hq, Sq, D], k and v [B, Hkv, Skv, D]; layout="bshd": q [B, Sq, Hq, D], k
and v [B, Skv, Hkv, D] (read in place through strided tensor maps, no copy; the output comes
back in the same layout). Hq must be a multiple of Hkv (GQA / MQA: query head h reads kv head
h // (Hq / Hkv)). With return_lse=True the result is (out, lse), lse [B, Hq, Sq] float32, the
natural-log log-sum-exp of each row of scale * q k^T.

The schedule is `argus.kernels.attention.default_schedule(head_dim, causal, Sq)`, the variant
measured fastest on the H200 per head dim, mask and query length (docs/perf/attention.md, run
5; the TMA-store epilogue at head dims 64 and 256 on the H100 only, 2026-12-07); `schedule=`
overrides it.

Decoding: a query of at most 16 tokens (Sq <= MAX_QUERIES; decoding and speculative decoding
against a KV cache) runs the flash-decoding kernels instead (argus/ops/attention_decode.py:
the GQA group x tokens packed into one tile per KV read, the KV length split over CTAs when the
batch does not fill the SMs, the splits merged by LSE), with the same semantics and outputs;
`schedule=` with a prefill AttentionSchedule forces the prefill kernel, a DecodeSchedule the
decode kernels. `argus.ops.attention_decode` is the same path by name (it also takes
`splits=`).

Every input that cannot be right (dtype, head dim, shapes, device, strides TMA cannot address,
heads that do not divide) raises a LaunchError that says what and how to fix it. Under
torch.compile, autograd or a TorchDispatchMode the kernel runs as the torch.library custom op
`argus::attention` (torch.compile traces through it); an eager call launches it directly,
without the op's dispatch (about half of a call's host time), and an eager call whose
signature (tensor types, shapes, strides, dtypes, devices, flags) was seen before skips the
checks and decisions, which follow from it, and replays the launch prepared for the same buffer
addresses, or moves the last one onto new addresses (pointers and tensor maps patched, after
the one address check, 16-byte alignment; `_Entry`). CUDA graphs
capture either (call it once with the same shapes before capturing: the first call compiles
the kernel and loads it, which a capture must not do).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import sys
from collections import OrderedDict

from argus import dtypes
from argus.analysis.alignment import ALIGN_BYTES
from argus.errors import LaunchError
from argus.kernels.attention import LOG2E, AttentionSchedule, attention_kernel, default_schedule
from argus.kernels.attention_decode import MAX_QUERIES, DecodeSchedule
from argus.build_memo import BuildMemo
from argus.ops.attention_decode import _eager, run_decode
from argus.ops.attention_inputs import LAYOUTS, _bhsd, _check_strides, check  # noqa: F401
from argus.runtime.driver import current_stream as _current_stream

_WHO = "argus.ops.attention"
_DTYPES = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16}
# (head dim, dtype, causal, lse, schedule, device) -> compiled kernel; bounded.
_COMPILED: BuildMemo = BuildMemo()
_MEMO_SIZE = 64
# (buffers, dtype, device, mask, scale, schedule) -> prepared launch (raw pointers, no tensor
# references); bounded.
_LAUNCHES: BuildMemo = BuildMemo()


def attention(q, k, v, *, causal: bool = False, scale: float | None = None,
              layout: str = "bhsd", return_lse: bool = False,
              schedule: AttentionSchedule | DecodeSchedule | None = None):
    """softmax(scale * q k^T [+ causal mask]) v; (out, lse) with return_lse=True. See the
    module docstring for shapes, layouts and the two conventions that differ from torch."""
    key = (_signature(q, k, v, causal, scale, layout, return_lse, schedule)
           if schedule is None or type(schedule) is AttentionSchedule else None)
    entry = _ENTRIES.get(key) if key is not None else None
    if entry is not None and (schedule is not None or _eager(q, k, v)):
        # a repeated prefill signature, launched directly as below: no check, no decision
        # (they follow from the signature), the launch prepared for these buffers (None: new
        # buffers, prepared below)
        got = entry.repeat((q, k, v))
        if got is not None:
            return got if return_lse else got[0]
    if (schedule is None or isinstance(schedule, DecodeSchedule)) and _decode_eager(q, k, v,
                                                                                  layout):
        # decoding, eager: no custom-op dispatch (15-20 us a call); a repeated signature skips
        # the checks too (run_decode checks every signature it has not seen)
        if scale is None:
            scale = 1.0 / math.sqrt(q.shape[-1])
        out, lse = run_decode(q, k, v, bool(causal), float(scale), layout, bool(return_lse),
                              schedule=schedule)
        return (out, lse) if return_lse else out
    check(q, k, v, layout=layout)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    if isinstance(schedule, DecodeSchedule):   # the decode kernels with a forced schedule
        out, lse = run_decode(q, k, v, bool(causal), float(scale), layout, bool(return_lse),
                              schedule=schedule, checked=True)
    elif schedule is not None or _eager(q, k, v):
        # eager (outside torch.compile and autograd): no custom-op dispatch, about half of the
        # call's 88 us of host time on the H200 (scripts/gpu_attention_host.py, 2026-12-03;
        # cuDNN's SDPA call: 42 us), which showed in short prefills' timed calls
        out, lse = _run(q, k, v, bool(causal), float(scale), layout, bool(return_lse), schedule,
                        checked=True, remember=key)
    else:
        out, lse = _op()(q, k, v, bool(causal), float(scale), layout, bool(return_lse))
    return (out, lse) if return_lse else out


def _decode_eager(q, k, v, layout: str) -> bool:
    """A query of at most MAX_QUERIES tokens outside torch.compile and autograd: the decode
    path runs directly (argus/ops/attention_decode.py's _eager)."""
    try:
        tokens = q.shape[2 if layout == "bhsd" else 1] if q.dim() == 4 else MAX_QUERIES + 1
    except AttributeError:
        return False              # not a tensor: check() says so
    return tokens <= MAX_QUERIES and _eager(q, k, v)


# ----------------------------------------------------------------------------- the launch


def _compiled(head_dim: int, dtype, causal: bool, lse: bool, schedule: AttentionSchedule,
              device):
    key = (head_dim, dtype, causal, lse, schedule, device.index)
    kernel = _COMPILED.get(key)
    if kernel is None:
        problems = schedule.problems_for(head_dim, dtype)
        if problems:
            raise LaunchError(f"{_WHO}: {schedule} cannot run head dim {head_dim}: "
                              + "; ".join(problems),
                              fix="use argus.kernels.attention.default_schedule(head_dim)")
        kernel = attention_kernel(head_dim, dtype, causal, lse,
                                  schedule.permuted_vt).compile(s=schedule)
        _COMPILED[key] = kernel
        if len(_COMPILED) > _MEMO_SIZE:
            _COMPILED.popitem(last=False)
    return kernel


@functools.lru_cache(maxsize=1024)  # asked on every call; numpy's float32 costs ~5 us
def for_scale(schedule: AttentionSchedule, scale: float) -> AttentionSchedule:
    """The schedule to run for this softmax scale: a schedule with fold_scale takes the row
    max of the raw scores, and max(s) * scale is the max of s * scale only for a positive
    finite scale (0 would give NaN for masked keys, a negative one the row min), so any other
    scale runs the same schedule unfolded. Decided on the float32 the kernel gets,
    qk_scale = float32(scale * LOG2E) (its ag.require checks that value): a positive double
    below ~1e-45 is a float32 0 there, one above ~2.4e38 an inf."""
    import numpy as np

    with np.errstate(over="ignore"):
        folded = float(np.float32(scale * LOG2E))
    if schedule.fold_scale and not 0.0 < folded < math.inf:
        return dataclasses.replace(schedule, fold_scale=False)
    return schedule


def _run(q, k, v, causal: bool, scale: float, layout: str, return_lse: bool,
         schedule: AttentionSchedule | None = None, checked: bool = False,
         remember: tuple | None = None):
    """The eager implementation: (out in q's layout, lse [B, Hq, Sq] fp32 or an empty tensor).
    checked=True: the caller ran check() on q, k, v already. remember: the call's signature
    (`_signature`; a call launched directly), under which the prepared launch is kept for
    repeated calls (`_Entry`)."""
    import torch

    if not checked:
        check(q, k, v, layout=layout)
    if schedule is None and _bhsd(q, layout).shape[2] <= MAX_QUERIES:
        # decoding (1..16 query tokens): split-KV with the GQA group packed per KV read
        out, lse = run_decode(q, k, v, causal, scale, layout, return_lse, checked=True)
        # the op's outputs: lse a tensor of its own (not a view of the decode workspace)
        return out, lse.clone() if return_lse else q.new_empty((0,), dtype=torch.float32)
    _check_strides((("q", q), ("k", k), ("v", v)))
    qb, kb, vb = _bhsd(q, layout), _bhsd(k, layout), _bhsd(v, layout)
    B, H, S, D = qb.shape
    SK = kb.shape[2]
    out = torch.empty_like(q, memory_format=torch.contiguous_format)
    ob = _bhsd(out, layout)
    lse = torch.empty((B, H, S) if return_lse else (0,), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if SK == 0:  # no key at all: every row is zeros, its log-sum-exp -inf
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    dtype = _DTYPES[str(q.dtype)]
    chosen = for_scale(schedule or default_schedule(D, causal, S), scale)
    kernel = _compiled(D, dtype, causal, return_lse, chosen, q.device)
    args = (qb, kb, vb, ob) + ((lse.unsqueeze(-1),) if return_lse else ())
    # A launch with a runtime scalar is prepared (shapes bound, tensor maps encoded) on every
    # call of the compiled kernel; a prepared plan holds raw pointers only, so the plan for the
    # same buffers (a loop, or a fresh output the allocator put at the same address) is kept.
    key = (tuple((a.data_ptr(), tuple(a.shape), a.stride()) for a in args), q.dtype,
           q.device.index, causal, scale, chosen)
    plan = _LAUNCHES.get(key)
    if plan is None:
        with torch.cuda.device(q.device):
            plan = kernel.prepare(*args, _scalars={"qk_scale": scale * LOG2E})
        _LAUNCHES[key] = plan
        if len(_LAUNCHES) > _MEMO_SIZE:
            _LAUNCHES.popitem(last=False)
    else:
        _LAUNCHES.move_to_end(key)
    if plan is not False:
        plan()   # on torch's current stream of the plan's device (captured by CUDA graphs)
        if remember is not None:
            made = (out, lse) if return_lse else (out,)
            remember_launches(_ENTRIES, remember, (q, k, v), made, (plan,))
    return out, lse


# ----------------------------------------------------------------------------- repeated calls
#
# A call's checks and decisions (check(), the strides, the schedule, the kernel) follow from its
# signature: the tensors' types, shapes, strides, dtypes and devices, and the flags. The one
# pointer-dependent check (16-byte aligned addresses, _check_strides) holds for a plan's buffers,
# which were checked when it was prepared, and is made again before a plan is moved onto new
# ones. So a repeated eager call with the same signature costs the key, the output allocations
# and the launch (decode does the same: attention_decode._Entry); the H200 measured 88 us of
# host time a call against cuDNN's 42.

_ENTRIES: BuildMemo = BuildMemo()


def _signature(q, k, v, causal, scale, layout, return_lse, schedule=None) -> tuple | None:
    """What a prefill call's checks and decisions depend on, without the buffers' addresses
    (schedule: None, the op's choice, or an AttentionSchedule); None when an argument is not a
    tensor or the scale not a plain number (the checked path runs and says what is wrong)."""
    try:
        if scale is not None:
            if type(scale) is int:
                scale = float(scale)
            scale = scale.hex()   # bits: -0.0 and 0.0, and NaN, each a key of their own
        return (type(q), q.shape, q.stride(), q.dtype, q.device, type(k), k.shape, k.stride(),
                k.dtype, k.device, type(v), v.shape, v.stride(), v.dtype, v.device,
                bool(causal), scale, layout, bool(return_lse), schedule)
    except (AttributeError, TypeError):
        return None


def remember_launches(entries: dict, key: tuple, inputs: tuple, made: tuple,
                      plans: tuple) -> None:
    """Keep `plans`, launched in order on `inputs` and the buffers the call allocated (`made`:
    the outputs, then any workspace), under the call's signature `key` (an op's repeated-call
    memo; argus.ops.attention_fp8 keeps its V^T and attention launches so)."""
    entry = entries.get(key)
    if entry is None:
        entry = entries[key] = _Entry(made[0].device,
                                      tuple((tuple(t.shape), t.dtype) for t in made))
        if len(entries) > _Entry.ENTRIES:
            entries.popitem(last=False)   # the oldest (a BuildMemo: keys are stored wrapped)
    entry.remember(tuple(t.data_ptr() for t in inputs + made), plans)


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One call signature: the buffers a call allocates (shape, dtype: the outputs, then any
    workspace) and the launches prepared for the buffer addresses seen (a plan holds raw
    pointers; everything else it holds follows from the signature)."""

    device: object
    buffers: tuple
    plans: OrderedDict = dataclasses.field(default_factory=OrderedDict)

    PLANS = 8        # buffer-address sets per signature (the caching allocator reuses a few)
    ENTRIES = 64

    def repeat(self, inputs: tuple) -> tuple | None:
        """The buffers allocated (outputs first) after launching the plans prepared for these
        addresses (or moved onto them), or None (the caller prepares them; the allocations go
        back to the caching allocator)."""
        import torch

        made = tuple(torch.empty(shape, dtype=dtype, device=self.device)
                     for shape, dtype in self.buffers)
        pointers = tuple(t.data_ptr() for t in inputs + made)
        plans = self.plans.get(pointers)
        if plans is None:
            plans = self.repointed(pointers)
            if plans is None:
                return None
        stream = _current_stream(self.device.index)
        for plan in plans:
            plan.launch(stream)
        return made

    def repointed(self, pointers: tuple):
        """The last plans moved onto these buffers (LaunchPlan.repointed: pointers and tensor
        maps patched, a few us against a prepare's hundreds), kept under them; None when the
        move could change more than addresses (the full checked path prepares the call):
        an address that is not 16-byte aligned (TMA's rule, _check_strides says so) or not
        aligned as the plan's was (the launch specialization, analysis/alignment.py, picks
        the kernel's variant by it), or one buffer of the plan becoming two (q is k)."""
        if not self.plans:
            return None
        old, plans = next(reversed(self.plans.items()))
        moved: dict[int, int] = {}
        for before, after in zip(old, pointers):
            if after % 16 or (before % ALIGN_BYTES == 0) != (after % ALIGN_BYTES == 0) \
                    or moved.setdefault(before, after) != after:
                return None
        if any(a is not None and a not in moved for plan in plans
               for a in plan.params.addresses):
            return None      # a buffer the signature's pointers do not name
        plans = tuple(plan.repointed(moved) for plan in plans)
        self.remember(pointers, plans)
        return plans

    def remember(self, pointers: tuple, plans: tuple) -> None:
        self.plans[pointers] = plans
        if len(self.plans) > self.PLANS:
            self.plans.popitem(last=False)


# ----------------------------------------------------------------------------- custom op

_OP = None


def _op():
    """torch.ops.argus.attention, registered once (at import when torch is loaded, else on the
    first call): a custom op is opaque to torch.compile, which calls the fake for shapes, and
    CUDA graphs capture its launch like any kernel on the current stream."""
    global _OP
    if _OP is None:
        _OP = _register()
    return _OP


def _register():
    import torch

    try:  # registered already (this module loaded twice, e.g. reloaded): use that one
        return torch.ops.argus.attention.default
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("argus::attention", mutates_args=(),
                             schema="(Tensor q, Tensor k, Tensor v, bool causal, float scale, "
                                    "str layout, bool return_lse) -> (Tensor, Tensor)")
    def attention_op(q, k, v, causal, scale, layout, return_lse):
        return _run(q, k, v, causal, scale, layout, return_lse)

    @attention_op.register_fake
    def _(q, k, v, causal, scale, layout, return_lse):
        qb = _bhsd(q, layout)
        B, H, S = qb.shape[0], qb.shape[1], qb.shape[2]
        out = torch.empty_like(q, memory_format=torch.contiguous_format)
        lse = q.new_empty((B, H, S) if return_lse else (0,), dtype=torch.float32)
        return out, lse

    return attention_op


if "torch" in sys.modules:
    _op()
