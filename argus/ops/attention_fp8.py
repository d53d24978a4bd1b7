"""`argus.ops.attention_fp8(q, k, v, *, q_scale, k_scale, v_scale, causal=False, scale=None,
layout="bhsd", v_transposed=False, return_lse=False, schedule=None)`: FlashAttention-3's FP8
forward on Hopper with Argus's verified kernel (argus/kernels/attention.py, dtype e4m3).

q, k and v are float8_e4m3fn with per-tensor dequantization scales: the result is

    softmax(scale * (q_scale q) (k_scale k)^T [+ causal mask]) (v_scale v)

in bfloat16, with argus.ops.attention's conventions (bottom-right causal mask when Sq != Skv,
zeros and an LSE of -inf for a row that sees no key, GQA / MQA when Hq is a multiple of Hkv,
layouts "bhsd" and "bshd", lse [B, Hq, Sq] float32 with return_lse=True, the natural-log
log-sum-exp of each row of scale * q_scale * k_scale * q k^T). Head dims 64, 128 and 256.

Why a sibling of argus.ops.attention and not dtype-driven inside it: the inputs carry three
more arguments (the scales), the output dtype differs from the inputs', V is read transposed
(below), and attention's short-query path (the flash-decoding kernels, Sq <= 16) has no FP8
variant; keeping FP8 apart leaves the bf16 op's per-call host path untouched.

V is transposed: an fp8 wgmma reads both operands K-major (PTX has no transpose for 8-bit
operands), and the K of P V is the key, so the kernel reads V^T [B, Hkv, D, Skv]. By default
(v_transposed=False, v shaped like k) the op makes that copy on every call (B Hkv Skv D bytes
read and written, e.g. 16 MiB at B 8, Hkv 8, Skv 2k, D 128), padding each row to a multiple of
16 keys for TMA. On CUDA tensors an Argus kernel makes it in one pass
(argus/kernels/attention_vt.py, `_kernel_transpose`: with VT_WORDS on, the word kernel, V
moved as 32-bit words with integer shifts and masks, where V's storage can be viewed as such
words: 1.50-1.59 TB/s at D 128, S 8k-16k on an H100 (2026-12-07), against the byte kernels'
0.89-0.90 in the same run (1.05-1.11 TB/s on the H200), a copy 2.9-3.0; else the byte
kernels); on CPU tensors, or with VT_KERNEL off, two torch copy passes (8- or 4-byte words, then the bytes inside each word:
`_word_transpose`, 0.45-0.47 TB/s). They write the same bytes, except that
the byte kernels write a V byte 0xFF (NaN with the sign bit) as 0x7F (the GPU's e4m3
conversions; still NaN); the word kernel is bit-exact. A caller that keeps V transposed (a
KV cache written that way) passes v_transposed=True and v [B, Hkv, D, Skv] (whatever
`layout` says for q and k), read in place when TMA can address it (unit stride on Skv,
Skv * 1 byte rows a multiple of 16 bytes), else copied the same way.

The op's own copy writes each 32-key group of V^T in the order the kernel's P reads without
shuffles (`kernel_v`, target/fragments.py acc_order_col; rows of Skv rounded up to 32, keys
past Skv zero) and runs the schedule with permuted_vt: P's 8-bit A fragment is then S's own
registers (AccOrderA8) instead of a quad gather (AccToA8: 2 shuffles and a byte_perm per A
register). V given transposed keeps its order and the gather (docs/perf/attention.md).

The scales are Python floats or one-element tensors; a tensor is read with .item() (a host
synchronization per call, and not capturable in a CUDA graph): pass floats on a hot path. They
must be finite. The kernel takes them folded into two runtime scalars, qk_scale = scale *
log2(e) * q_scale * k_scale and o_scale = v_scale; P is quantized to e4m3 in registers as
P_SCALE * exp2(s - m) (attention.P_BIAS), so the output's error is that of e4m3 P and V:
about 2% of max |out| on random data against float64 (tests/interp/test_attention_fp8_interp.py).

Eager calls launch the kernel directly, and one whose signature (tensors' types, shapes,
strides, dtypes, devices; float scales, flags, schedule) was seen before skips the checks and
decisions and replays the V^T and attention launches prepared for the same buffers, or moves
them onto new ones (argus/ops/attention.py's _Entry; a tensor scale, or a V^T written by torch
ops, takes the checked path every call). Under torch.compile, a TorchDispatchMode or autograd
(on tensor subclasses, fake tensors) it runs as the torch.library custom op
`argus::attention_fp8` (opaque to torch.compile, which calls its fake for shapes; no backward),
with the scales as floats (a tensor scale is read with .item() first, a graph break).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections import OrderedDict

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.attention import HEAD_DIMS, LOG2E, attention_kernel, fp8_schedule
from argus.build_memo import BuildMemo
from argus.ops.attention import _compiled, for_scale, remember_launches
from argus.ops.attention_decode import _eager
from argus.ops.attention_inputs import LAYOUTS, _bhsd, _check_strides
from argus.runtime.args import check_on_one_gpu

__all__ = ["attention_fp8"]

_WHO = "argus.ops.attention_fp8"
_FP8 = "torch.float8_e4m3fn"
# The op's V^T: keys permuted for the shuffle-free P (kernel_v) whenever it transposes V itself.
# False gives the natural order and AccToA8's quad shuffles, the path before 2026-12-04: for
# scripts/gpu_attention_bench.py's `shfl` token (both ops in one run), not an API
PERMUTED_VT = True
# (buffers, device, mask, scalars, schedule) -> prepared launch; bounded
_LAUNCHES: BuildMemo = BuildMemo()
_MEMO_SIZE = 64


def attention_fp8(q, k, v, *, q_scale, k_scale, v_scale, causal: bool = False,
                  scale: float | None = None, layout: str = "bhsd", v_transposed: bool = False,
                  return_lse: bool = False, schedule=None):
    """softmax(scale * (q_scale q)(k_scale k)^T [+ causal mask]) (v_scale v) in bfloat16;
    (out, lse) with return_lse=True. See the module docstring."""
    key = _signature(q, k, v, (q_scale, k_scale, v_scale, scale), causal, layout, v_transposed,
                     return_lse, schedule)
    entry = _ENTRIES.get(key) if key is not None else None
    if entry is not None and (schedule is not None or _eager(q, k, v)):
        # a repeated signature: no check, no decision, the launches (V^T, attention)
        # prepared for these buffers or moved onto them (argus/ops/attention.py's _Entry)
        made = entry.repeat((q, k, v))
        if made is not None:
            return (made[0], made[1]) if return_lse else made[0]
    if schedule is not None or _eager(q, k, v):
        out, lse = run_fp8(q, k, v, q_scale, k_scale, v_scale, bool(causal), scale, layout,
                           bool(v_transposed), bool(return_lse), schedule=schedule,
                           remember=key)
    else:
        scales = [_scalar(n, x) for n, x in (("q_scale", q_scale), ("k_scale", k_scale),
                                             ("v_scale", v_scale))]
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else _scalar("scale", scale)
        out, lse = _op()(q, k, v, *scales, bool(causal), scale, layout, bool(v_transposed),
                         bool(return_lse))
    return (out, lse) if return_lse else out


_ENTRIES: BuildMemo = BuildMemo()     # call signature -> argus.ops.attention._Entry


def _signature(q, k, v, scales, causal, layout, v_transposed, return_lse, schedule):
    """What a call's checks and decisions depend on, without the buffers' addresses (the
    flags PERMUTED_VT and VT_KERNEL too); None when an argument is not a tensor or a scale
    not a plain number (a tensor scale is read with .item() every call: the checked path)."""
    try:
        bits = []
        for x in scales:
            if x is not None and type(x) is not float:
                if type(x) is not int:
                    return None
                x = float(x)
            bits.append(None if x is None else x.hex())
        return (type(q), q.shape, q.stride(), q.dtype, q.device, type(k), k.shape, k.stride(),
                k.dtype, k.device, type(v), v.shape, v.stride(), v.dtype, v.device,
                tuple(bits), bool(causal), layout, bool(v_transposed), bool(return_lse),
                schedule, PERMUTED_VT, VT_KERNEL)
    except (AttributeError, TypeError):
        return None


def _scalar(name: str, x) -> float:
    try:
        import torch
        if isinstance(x, torch.Tensor):
            if x.numel() != 1:
                raise LaunchError(f"{_WHO}: {name} is a tensor of {x.numel()} elements; a "
                                  f"per-tensor scale is one number",
                                  fix=f"pass a float or a one-element tensor as {name}")
            x = x.item()
        value = float(x)
    except (TypeError, ValueError):
        raise LaunchError(f"{_WHO}: {name}={x!r} is not a number",
                          fix=f"pass a float or a one-element tensor as {name}") from None
    if not math.isfinite(value):
        raise LaunchError(f"{_WHO}: {name}={value} is not finite",
                          fix="pass the finite dequantization scale the tensor was quantized "
                              "with (e.g. amax / 448)")
    return value


def check_fp8(q, k, v, *, layout: str = "bhsd", v_transposed: bool = False,
              device: bool = True) -> None:
    """Raise a LaunchError for inputs the FP8 kernel cannot compute right (device=False
    skips the device checks: the interpreter runs on CPU tensors)."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{_WHO}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if layout not in LAYOUTS:
        raise LaunchError(f"{_WHO}: layout={layout!r} is not one of {LAYOUTS}",
                          fix="'bhsd' for [batch, heads, seq, head_dim], 'bshd' for [batch, "
                              "seq, heads, head_dim]")
    if not (str(q.dtype) == str(k.dtype) == str(v.dtype) == _FP8):
        raise LaunchError(f"{_WHO}: q, k and v must all be float8_e4m3fn, got {q.dtype}, "
                          f"{k.dtype}, {v.dtype}",
                          fix="quantize them with per-tensor scales (argus.ops.quantize_fp8, "
                              "or (x / s).to(torch.float8_e4m3fn) with s = amax / 448), or "
                              "call argus.ops.attention with bfloat16 / float16")
    dims = "[B, H, S, D]" if layout == "bhsd" else "[B, S, H, D]"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            want = "[B, Hkv, D, Skv]" if name == "v" and v_transposed else dims
            raise LaunchError(f"{_WHO}: {name} has shape {tuple(t.shape)}; it must be 4-d "
                              f"{want}", fix="add the missing batch or head dimension with "
                                             "unsqueeze")
    qb, kb = _bhsd(q, layout), _bhsd(k, layout)
    vb = v.transpose(-1, -2) if v_transposed else _bhsd(v, layout)   # [B, Hkv, Skv, D]
    if tuple(kb.shape) != tuple(vb.shape):
        want = f"[B, Hkv, D, Skv] = {tuple(kb.transpose(-1, -2).shape)}" if v_transposed \
            else f"k's shape {tuple(k.shape)}"
        raise LaunchError(f"{_WHO}: v has shape {tuple(v.shape)}; with v_transposed="
                          f"{v_transposed} it must be {want}")
    head_dim = qb.shape[-1]
    if head_dim not in HEAD_DIMS:
        raise LaunchError(f"{_WHO}: head dim {head_dim} is not supported (the kernel takes "
                          f"{HEAD_DIMS})", fix="pad q, k and v with zeros to the next "
                                               "supported head dim")
    if kb.shape[-1] != head_dim:
        raise LaunchError(f"{_WHO}: q has head dim {head_dim}, k and v have {kb.shape[-1]}; "
                          f"they must match")
    if qb.shape[0] != kb.shape[0]:
        raise LaunchError(f"{_WHO}: batch sizes differ: q {qb.shape[0]}, k/v {kb.shape[0]}")
    hq, hkv = qb.shape[1], kb.shape[1]
    if hkv == 0 or hq % hkv:
        raise LaunchError(f"{_WHO}: q has {hq} heads, k and v {hkv}; the query heads must be "
                          f"a multiple of the key/value heads (GQA / MQA)")
    if device:
        check_on_one_gpu(_WHO, (("q", q), ("k", k), ("v", v)),
                         fix_cpu="{name}.cuda()")


def _tma_ok(t) -> bool:
    eb, strides = t.element_size(), t.stride()
    return strides[-1] == 1 and t.data_ptr() % 16 == 0 and all(
        (strides[d] * eb) % 16 == 0 and strides[d] > 0
        for d in range(t.dim() - 1) if t.shape[d] > 1)


def kernel_v(v, layout: str, v_transposed: bool, launched: list | None = None):
    """(V^T, permuted): what the op hands the kernel and whether its keys are permuted. V shaped
    like k: V^T [B, Hkv, D, SKV], SKV = Skv rounded up to 32, with the keys of each 32-key
    group in the order the kernel's shuffle-free P reads them (column c holds key
    acc_order_col(c), target/fragments.py; keys past Skv zero, so 0 * V stays finite where P
    is 0), written by the V^T kernel's index map on CUDA tensors (`_kernel_transpose`) or by
    `_word_transpose`'s own second pass (no extra pass); permuted True, and
    the op runs its schedule with permuted_vt (attention_kernel(..., permuted_vt=True)). V
    given transposed keeps its order (permuting it would be the copy the caller meant to
    avoid), as does a V that neither the V^T kernel (CPU tensors) nor a word pass takes:
    `transposed_v`, permuted False, and the kernel
    takes AccToA8's quad shuffles (FA3 likewise shuffles for a column-major V,
    hopper/utils.h permute_Aregs_fp8, and permutes in registers otherwise,
    permute_Cregs_fp8). launched: gets the V^T kernel's prepared launch, or None for work
    done by torch ops (which a replay of the launches would miss: run_fp8's memo)."""
    import torch

    if not v_transposed:
        keys_major = _bhsd(v, layout)                            # [B, Hkv, Skv, D]
        B, HKV, SK, D = keys_major.shape
        store = torch.empty((B, HKV, D, -(-SK // 32) * 32), dtype=v.dtype, device=v.device)
        if _kernel_transpose(keys_major, store, permuted=True, launched=launched):
            return store, True
        if _word_transpose(keys_major, store, permuted=True):
            _torch_work(launched)
            return store, True
    return transposed_v(v, layout, v_transposed, launched), False


# V^T by the Argus kernel (argus/kernels/attention_vt.py) on CUDA tensors; False gives the
# torch word passes (`_word_transpose`, the path before 2026-12-04): for
# scripts/gpu_fp8_vt_bench.py's old-versus-new run in one process, not an API
VT_KERNEL = True
# V^T by the word kernel (vt_word_kernel: 32-bit words, bit-exact) where V and V^T can be
# viewed as words; False gives the byte kernels (vt_flat_kernel / vt_kernel). On since its
# GPU run (H100, 2026-12-07 ~23:08 UTC, tree dc095e4e): tests/gpu/test_attention_vt_gpu.py's
# word-kernel cases bit-exact on every e4m3 byte, 0xFF included (191 passed with the FP8
# attention GPU tests; the one failure was the test's own V, fixed after), and `vt60`: 1.50 /
# 1.59 TB/s at S 8k / 16k, D 128 (its configuration at 2k: 1.30), against the byte kernel's
# 0.90 / 0.89 (B 8, H 16; a copy 2.89 / 2.98).
# Not an API: the switch of the bench's old-versus-new runs and of those tests
VT_WORDS = True
# (head dim, permuted, device index, key stride) -> compiled byte V^T kernel;
# ("words", head dim, permuted, device index, key stride in words) -> the word kernel
_VT_COMPILED: BuildMemo = BuildMemo()


def _kernel_transpose(x, store, permuted: bool, launched: list | None = None) -> bool:
    """store = x^T (permuted as `_word_transpose` says) by one launch of the V^T kernel, or
    False (nothing written) where it does not apply: CPU tensors (the tests' interpreter runs
    and the torch reference), VT_KERNEL off, a head dim the kernel is not built for, or a V
    whose innermost dim is not contiguous. One read of V, one write of V^T (the torch path
    reads and writes twice, through a temporary): vt_word_kernel (VT_WORDS on) where V is
    bhsd or bshd of a contiguous block and V and V^T can be viewed as 4-byte words
    (`_word_operands`),
    else vt_flat_kernel where V is such a block, else the 4-d vt_kernel
    (argus/kernels/attention_vt.py, measured there). Bytes as `_word_transpose`'s (the word
    kernel's exactly; the byte kernels write 0xFF as 0x7F: that module's docstring).
    The prepared launch is kept per buffers (as run_fp8 keeps the attention kernel's): the
    caching allocator hands the op the same V^T buffer call after call, and a launch through
    Compiled.__call__ cost ~10 us of host time a call on the H200 (the bench's kperm, the op's
    path, against kperm<n>, the kernel's plan: 86.8 against 76.0 us at S 2k, 2026-12-04)."""
    if not (VT_KERNEL and x.is_cuda) or x.shape[-1] not in HEAD_DIMS or x.stride(-1) != 1:
        return False
    key = (x.data_ptr(), tuple(x.shape), x.stride(), store.data_ptr(), tuple(store.shape),
           x.device.index, permuted, VT_WORDS)
    plan = _memoized(_VT_LAUNCHES, key, lambda: _vt_plan(x, store, permuted))
    if plan is not False:
        plan()
        if launched is not None:
            launched.append(plan)
    return True


def _torch_work(launched: list | None) -> None:
    """Mark a call's V^T as written by torch ops: no replay of its launches (run_fp8)."""
    if launched is not None:
        launched.append(None)


def _memoized(cache: OrderedDict, key, make):
    """cache[key], made by make() on a miss; the least recently used entry past _MEMO_SIZE
    dropped (the op's prepared launches: a plan per set of buffers)."""
    plan = cache.get(key)
    if plan is None:
        plan = cache[key] = make()
        if len(cache) > _MEMO_SIZE:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return plan


# (buffers, device, permuted) -> prepared V^T launch; bounded
_VT_LAUNCHES: BuildMemo = BuildMemo()


def _vt_plan(x, store, permuted: bool):
    """The prepared launch of the V^T kernel for these buffers (False: nothing to launch)."""
    import torch

    from argus.kernels.attention_vt import vt_flat_kernel, vt_kernel, vt_word_kernel

    D = x.shape[-1]
    sb, sh, sk, _ = x.stride()
    # the flat kernel reads V through its storage: x must be bhsd or bshd of a contiguous
    # block, reached from x's first element by its strides
    flat = _flat_storage(x)
    words = _word_operands(flat, store) if VT_WORDS and flat is not None else None
    if words is not None:
        # strides in words: D's multiples for bhsd and bshd (a size-1 dim's stride, maybe
        # not, is never multiplied by an index other than 0)
        step = D // 4 if sk == D else 0
        key = ("words", D, permuted, x.device.index, step)
        kernel = _VT_COMPILED.get(key)
        if kernel is None:
            kernel = _VT_COMPILED[key] = vt_word_kernel(D, permuted, key_stride=step).compile()
        with torch.cuda.device(x.device):
            return kernel.prepare(*words, _scalars={"S": x.shape[2], "H": x.shape[1],
                                                    "sb": sb // 4, "sh": sh // 4,
                                                    "sk": sk // 4})
    # key stride: D (bhsd: a compile-time constant), 0 (runtime: bshd), None (the 4-d kernel)
    stride = None if flat is None else (D if sk == D else 0)
    key = (D, permuted, x.device.index, stride)
    kernel = _VT_COMPILED.get(key)
    if kernel is None:
        kernel = _VT_COMPILED[key] = (
            vt_kernel(D, permuted) if stride is None else
            vt_flat_kernel(D, permuted, key_stride=stride)).compile()
    with torch.cuda.device(x.device):
        if flat is None:
            return kernel.prepare(x, store)
        return kernel.prepare(flat, store, _scalars={"S": x.shape[2], "sb": sb, "sh": sh,
                                                     "sk": sk})


def _word_operands(flat, store):
    """The word kernel's tensors: V's flat storage (`_flat_storage`) as int32 words and V^T
    [B, H, D, P] as int32 [B H, D/F, F, P/4] (F: word_rows_per_thread), or None where either
    cannot be viewed so (a storage offset or a base address off 4 bytes, a V^T that is not
    contiguous): then the byte kernels run."""
    import torch

    from argus.kernels.attention_vt import word_rows_per_thread

    B, H, D, P = store.shape
    if not store.is_contiguous() or P % 4 or D % 4:
        return None
    rows = word_rows_per_thread(D)
    try:
        words = flat.view(torch.uint8).view(torch.int32)
        vt = store.view(torch.uint8).view(torch.int32).view(B * H, D // rows, rows, P // 4)
    except RuntimeError:   # an offset that is no multiple of 4 bytes
        return None
    if words.data_ptr() % 4 or vt.data_ptr() % 4:
        return None
    return words, vt


def _flat_storage(x):
    """x [B, H, S, D] as the 1-d view of the n = B H S D elements from its first one, when
    those are exactly x's elements (x is bhsd or bshd of a contiguous block; a dim of size 1
    may have any stride), else None. None too where an offset could pass 2^31: the flat
    kernel's offsets (b sb + h sh + key sk + d, keys up to the 32-key padding) and its N are
    32-bit ints, which would wrap (a wrapped offset falls outside V and the gather reads 0: a
    silent zero V^T); the 4-d kernel then runs, its offsets 64-bit."""
    B, H, S, D = x.shape
    n = B * H * S * D
    padded = (B, H, -(-S // 32) * 32, D)
    if n >= 2**31 or sum((k - 1) * st for k, st in zip(padded, x.stride())) >= 2**31:
        return None
    for want in ((H * S * D, S * D, D, 1), (S * H * D, D, H * D, 1)):   # bhsd, bshd
        if n and all(size == 1 or got == w for size, got, w in zip(x.shape, x.stride(), want)):
            return x.as_strided((n,), (1,))
    return None


def transposed_v(v, layout: str, v_transposed: bool, launched: list | None = None):
    """V^T [B, Hkv, D, Skv] in natural key order: v itself when it is given transposed and
    TMA can address it, else a copy into rows padded to a multiple of 16 keys (the padding is
    never read: the tensor map's extent is Skv, TMA zero-fills past it). The copy is exact
    (NaN payloads and -0 survive; the word kernel's too) but for one byte where a byte V^T
    kernel runs (`_kernel_transpose`: a V not viewable as words): it writes 0xFF (NaN with
    the sign bit) as 0x7F, still NaN; the torch
    word path (`_word_transpose`, CPU tensors and the kernel's fallbacks) moves bytes unchanged.
    `kernel_v` gives the permuted V^T the op uses."""
    import torch

    if v_transposed and _tma_ok(v):
        return v
    keys_major = None if v_transposed else _bhsd(v, layout)    # [B, Hkv, Skv, D]
    src = v if v_transposed else keys_major.transpose(-1, -2)
    B, HKV, D, SK = src.shape
    store = torch.empty((B, HKV, D, max(16, -(-SK // 16) * 16)), dtype=v.dtype,
                        device=v.device)
    vt = store[..., :SK]
    if v_transposed or not _kernel_transpose(keys_major, store, permuted=False,
                                             launched=launched):
        _torch_work(launched)
        if v_transposed or not _word_transpose(keys_major, store):
            vt.copy_(src)
    return vt


# bytes per word of `_word_transpose`'s first pass, widest first: on the H200 (2026-12-04,
# scripts/gpu_fp8_vt_bench.py, B 8 x H 16 x D 128, S 2k / 8k / 16k) 8-byte words ran at
# 0.59-0.64 TB/s, 4-byte 0.49-0.51, 2-byte 0.35, the one-pass byte copy 0.32-0.33 (a plain copy
# of V: 3.3-4.2 TB/s)
_WORDS = (8, 4)


def _word_transpose(x, store, permuted: bool = False) -> bool:
    """store[..., :SK] = x^T for x [B, H, SK, D] (1-byte elements, D contiguous) in two passes
    of torch copies, or False (nothing written) where x cannot be viewed as 8- or 4-byte words.

    Why two passes: torch copies a transposed view element by element in the output's order,
    so one byte copy reads V at a stride of D bytes, one byte of a 32-byte sector per element
    (0.33 TB/s on the H200, 2026-12-04: 0.21 ms for a 33.5 MB V). Reading x as w-byte words
    w[s, j] = x[s, wj:wj+w] makes the strided pass move w bytes per sector read, and transposes
    whole words: t[j, s] = w[s, j], i.e. bytes t[j, s, c] = x[s, wj + c]. The second pass is a
    byte transpose of only the innermost [SK, w] block of each word row,
    out[wj + c, s] = t[j, s, c], reading at a w-byte stride. Both passes are plain copies of
    bytes (integer views of the same storage), so the result is bit-identical to torch's
    transpose. Viewing bytes as wider words is valid only for the words' own granularity: the
    word pass never splits or reorders bytes inside a word, the byte pass does that part.
    Measured (_WORDS): 8-byte words 0.59-0.64 TB/s, still far from a copy's 3.3-4.2: a DSL byte
    transpose or FA3's in-kernel transpose of V is the fast way (docs/perf/attention.md).

    permuted: store [B, H, D, SKV] (SKV = SK rounded up to 32) gets each 32-key group in the
    kernel's shuffle-free order, store[..., c] = x[..., acc_order_col(c), :]^T, keys past SK
    zero: the word pass writes t with SKV columns (its tail zeroed), and the byte pass reads
    t's keys through a view that splits each group's 32 = (h, a, q, e) [2, 2, 4, 2] and
    writes them as (h, q, a, e): acc_order_col is that bit permutation (k = 16h + 4q + 2a + e
    -> 16h + 8a + 2q + e), so the permutation costs no pass of its own."""
    return any(_transpose_as_words(x, store, width, permuted) for width in _WORDS)


def _transpose_as_words(x, store, width: int, permuted: bool = False) -> bool:
    """`_word_transpose` at one word width (2, 4 or 8 bytes), or False (nothing written)
    where D is no multiple of it or x cannot be viewed as such words; scripts/gpu_fp8_vt_bench.py
    times each width through it."""
    import torch

    dtype = {2: torch.int16, 4: torch.int32, 8: torch.int64}[width]
    B, H, SK, D = x.shape
    if D % width:
        return False
    try:
        words = x.view(torch.uint8).view(dtype)                   # [B, H, SK, D/w]
    except RuntimeError:  # unaligned storage offset or strides: not viewable as words
        return False
    keys = store.shape[-1] if permuted else SK
    t = torch.empty((B, H, D // width, keys), dtype=dtype, device=x.device)
    t[..., :SK].copy_(words.transpose(-1, -2))                    # t[j, s] = w[s, j]
    tb = t.view(torch.uint8).view(B, H, D // width, keys, width)  # tb[j, s, c] = x[s, wj+c]
    out = store.view(torch.uint8).view(B, H, D // width, width, store.shape[-1])[..., :keys]
    if not permuted:
        out.copy_(tb.transpose(-1, -2))                           # out[j, c, s] = tb[j, s, c]
        return True
    t[..., SK:].zero_()                        # keys past SK: finite, their P is 0
    # key s = 32g + 16h + 8a + 2q + e of tb goes to column 32g + 16h + 4q + 2a + e of out
    G = keys // 32
    src = tb.view(B, H, D // width, G, 2, 2, 4, 2, width)         # [.., g, h, a, q, e, c]
    src = src.permute(0, 1, 2, 8, 3, 4, 6, 5, 7)                  # [.., c, g, h, q, a, e]
    out.view(B, H, D // width, width, G, 2, 4, 2, 2).copy_(src)
    return True


def run_fp8(q, k, v, q_scale, k_scale, v_scale, causal: bool, scale, layout: str,
            v_transposed: bool, return_lse: bool, *, schedule=None, execute=None,
            remember: tuple | None = None):
    """The eager implementation: (out bf16 in q's layout, lse [B, Hq, Sq] fp32 or an empty
    tensor). `execute(kernel_fn, compile_time, tensors, scalars)` runs the kernel instead of
    the GPU launch (tests pass the interpreter, with CPU tensors). remember: the call's
    signature (`_signature`), under which its launches are kept for repeated calls when they
    are all the call's device work (a V^T written by torch ops is not)."""
    import torch

    check_fp8(q, k, v, layout=layout, v_transposed=v_transposed, device=execute is None)
    qs, ks, vs = (_scalar(n, x) for n, x in (("q_scale", q_scale), ("k_scale", k_scale),
                                             ("v_scale", v_scale)))
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1])
    scale = _scalar("scale", scale)
    if execute is None:
        _check_strides((("q", q), ("k", k)))
    qb, kb = _bhsd(q, layout), _bhsd(k, layout)
    B, H, S, D = qb.shape
    SK = kb.shape[2]
    out = torch.empty(q.shape, dtype=torch.bfloat16, device=q.device)
    ob = _bhsd(out, layout)
    lse = torch.empty((B, H, S) if return_lse else (0,), dtype=torch.float32, device=q.device)
    if out.numel() == 0:
        return out, lse
    if SK == 0:  # no key at all: every row is zeros, its log-sum-exp -inf
        out.zero_()
        lse.fill_(float("-inf"))
        return out, lse
    chosen = schedule or fp8_schedule(D, causal)
    # the schedule's permuted_vt follows how V^T was made (kernel_v): the op permutes
    # V's keys whenever it transposes V itself, whatever the schedule asked
    launched = [] if remember is not None and execute is None else None
    vt, permuted = kernel_v(v, layout, v_transposed, launched) if PERMUTED_VT else \
        (transposed_v(v, layout, v_transposed, launched), False)
    qk_scale = scale * qs * ks
    chosen = for_scale(dataclasses.replace(chosen, permuted_vt=permuted), qk_scale)
    problems = chosen.problems_for(D, dtypes.e4m3)
    if problems:
        raise LaunchError(f"{_WHO}: {chosen} cannot run head dim {D} in FP8: "
                          + "; ".join(problems),
                          fix="use argus.kernels.attention.fp8_schedule(head_dim)")
    tensors = (qb, kb, vt, ob) + ((lse.unsqueeze(-1),) if return_lse else ())
    scalars = {"qk_scale": qk_scale * LOG2E, "o_scale": vs}
    if execute is not None:
        execute(attention_kernel(D, dtypes.e4m3, causal, return_lse, permuted),
                {"s": chosen}, tensors, scalars)
        return out, lse
    kernel = _compiled(D, dtypes.e4m3, causal, return_lse, chosen, q.device)
    key = (tuple((a.data_ptr(), tuple(a.shape), a.stride()) for a in tensors),
           q.device.index, causal, tuple(scalars.values()), chosen)
    def prepare():
        with torch.cuda.device(q.device):
            return kernel.prepare(*tensors, _scalars=scalars)

    plan = _memoized(_LAUNCHES, key, prepare)
    if plan is not False:
        plan()
        if launched is not None and all(p is not None for p in launched):
            # the buffers a repeat allocates: the outputs, then V^T's (vt may be a view of it)
            made = (out, lse) if return_lse else (out,)
            if vt is not v:
                made += (vt if vt._base is None else vt._base,)
            remember_launches(_ENTRIES, remember, (q, k, v), made, (*launched, plan))
    return out, lse


# ----------------------------------------------------------------------------- custom op

_OP = None


def _op():
    """torch.ops.argus.attention_fp8, registered on first use (see the module docstring)."""
    global _OP
    if _OP is None:
        _OP = _register()
    return _OP


def _register():
    import torch

    try:  # registered already (this module loaded twice): use that one
        return torch.ops.argus.attention_fp8.default
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("argus::attention_fp8", mutates_args=(),
                             schema="(Tensor q, Tensor k, Tensor v, float q_scale, "
                                    "float k_scale, float v_scale, bool causal, float scale, "
                                    "str layout, bool v_transposed, bool return_lse) -> "
                                    "(Tensor, Tensor)")
    def attention_fp8_op(q, k, v, q_scale, k_scale, v_scale, causal, scale, layout,
                         v_transposed, return_lse):
        return run_fp8(q, k, v, q_scale, k_scale, v_scale, causal, scale, layout,
                       v_transposed, return_lse)

    @attention_fp8_op.register_fake
    def _(q, k, v, q_scale, k_scale, v_scale, causal, scale, layout, v_transposed,
          return_lse):
        check_fp8(q, k, v, layout=layout, v_transposed=v_transposed, device=False)
        B, H, S = _bhsd(q, layout).shape[:3]
        out = q.new_empty(q.shape, dtype=torch.bfloat16)
        lse = q.new_empty((B, H, S) if return_lse else (0,), dtype=torch.float32)
        return out, lse

    return attention_fp8_op


# registered at import when torch is loaded, as argus/ops/attention.py does: a first call under
# torch.compile would otherwise register the op inside the trace, which dynamo refuses
# (torch.library.Library.__init__ is on its skip list; measured on the H200 2026-12-04)
if "torch" in sys.modules:
    _op()
