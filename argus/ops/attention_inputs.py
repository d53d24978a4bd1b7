"""The input checks of argus.ops.attention and argus.ops.attention_decode (one module below both,
so the two ops share them without importing each other): every input the kernels cannot compute
right raises a LaunchError that says what and how to fix it."""

from __future__ import annotations

from argus.errors import LaunchError
from argus.kernels.attention import HEAD_DIMS
from argus.runtime.args import check_on_one_gpu

_WHO = "argus.ops.attention"
_DTYPES = {"torch.bfloat16", "torch.float16"}
LAYOUTS = ("bhsd", "bshd")


def check(q, k, v, *, layout: str = "bhsd", device: bool = True) -> None:
    """Raise a LaunchError for inputs the kernel cannot compute right. Shapes and dtypes are
    checked before devices, so the messages are the same for CPU tensors (device=False skips
    the device checks: the interpreter runs on CPU tensors)."""
    import torch

    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"{_WHO}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if layout not in LAYOUTS:
        raise LaunchError(f"{_WHO}: layout={layout!r} is not one of {LAYOUTS}",
                          fix="'bhsd' for [batch, heads, seq, head_dim], 'bshd' for [batch, "
                              "seq, heads, head_dim]")
    if str(q.dtype) not in _DTYPES or k.dtype != q.dtype or v.dtype != q.dtype:
        fp8 = "float8" in str(q.dtype)
        raise LaunchError(f"{_WHO}: q, k and v must all be bfloat16 or all float16, got "
                          f"{q.dtype}, {k.dtype}, {v.dtype}",
                          fix="FP8 (e4m3) inputs with per-tensor scales go to "
                              "argus.ops.attention_fp8(q, k, v, q_scale=, k_scale=, v_scale=)"
                          if fp8 else "cast them, e.g. q.bfloat16(), k.bfloat16(), "
                                      "v.bfloat16()")
    dims = "[B, H, S, D]" if layout == "bhsd" else "[B, S, H, D]"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise LaunchError(f"{_WHO}: {name} has shape {tuple(t.shape)}; layout={layout!r} "
                              f"takes 4-d tensors {dims}",
                              fix="add the missing batch or head dimension with unsqueeze")
    if tuple(k.shape) != tuple(v.shape):
        raise LaunchError(f"{_WHO}: k {tuple(k.shape)} and v {tuple(v.shape)} differ; they must "
                          f"have the same shape {dims}")
    qb, kb = _bhsd(q, layout), _bhsd(k, layout)
    head_dim = q.shape[-1]
    if head_dim not in HEAD_DIMS:
        raise LaunchError(f"{_WHO}: head dim {head_dim} is not supported (the kernel takes "
                          f"{HEAD_DIMS})", fix="pad q, k and v with zeros to the next "
                                               "supported head dim, or use torch SDPA")
    if k.shape[-1] != head_dim:
        raise LaunchError(f"{_WHO}: q has head dim {head_dim}, k and v have {k.shape[-1]}; "
                          f"they must match")
    if qb.shape[0] != kb.shape[0]:
        raise LaunchError(f"{_WHO}: batch sizes differ: q {qb.shape[0]}, k/v {kb.shape[0]}",
                          fix="repeat the smaller batch to one batch size "
                              "(x.expand(...).contiguous())")
    hq, hkv = qb.shape[1], kb.shape[1]
    if hkv == 0 or hq % hkv:
        raise LaunchError(f"{_WHO}: q has {hq} heads, k and v {hkv}; the query heads must be "
                          f"a multiple of the key/value heads (GQA / MQA)",
                          fix=f"check the head dimension of the layout ({layout!r}: heads are "
                              f"dim {1 if layout == 'bhsd' else 2})")
    if device:
        check_on_one_gpu(_WHO, (("q", q), ("k", k), ("v", v)),
                         fix_cpu="{name}.cuda(), or torch SDPA on the CPU")


def _bhsd(t, layout: str):
    """The [B, H, S, D] view of a tensor in `layout` (a permuted view, never a copy)."""
    return t if layout == "bhsd" else t.transpose(1, 2)


def _check_strides(named) -> None:
    """TMA reads each tensor through a tensor map: unit inner stride, 16-byte aligned pointer
    and outer strides (dims of extent 1 are never stepped over), positive: a tensor map has
    no stride 0 (an expand()ed dim), argus/runtime/tma.py."""
    for name, t in named:
        # shape and strides read once: each tensor attribute costs a dispatch, and this runs
        # on every call (it was 45 us of the op's host time for q, k, v)
        eb, strides, shape = t.element_size(), t.stride(), t.shape
        bad = strides[-1] != 1 or t.data_ptr() % 16 or any(
            (strides[d] * eb) % 16 or strides[d] <= 0
            for d in range(len(shape) - 1) if shape[d] > 1)
        if bad:
            raise LaunchError(f"{_WHO}: {name} (shape {tuple(t.shape)}, strides {t.stride()}) "
                              f"cannot be read by TMA: it needs a contiguous head dim, a "
                              f"16-byte aligned pointer and outer strides that are positive "
                              f"multiples of 16 bytes (no expand()ed dim)",
                              fix=f"pass {name}.contiguous()")
