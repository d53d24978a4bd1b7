"""Guards run inside the candidate process: tampering, global flags, poisoned memory, aliasing.

- Clocks: the objects a timer or the judge relies on (time.perf_counter, torch.cuda.Event and its
  methods, torch.cuda.synchronize, streams, the profiler, torch.save ...) are captured before the
  solution is imported; `changed_clocks` names every one that was replaced since.
- Global flags: TF32 switches, float32 matmul precision, default dtype, cuDNN and SDPA switches,
  deterministic mode, and TF32 environment overrides. A solution may not change them
  (`changed_flags`), since that would change what the reference and the baselines compute.
- Poison: while the solution runs, every tensor allocated through PyTorch's empty family
  (torch.empty, empty_like, new_empty, empty_strided, also from C++ extensions) is filled with a
  NaN bit pattern that no arithmetic produces (0x7FD5A5A5 in fp32), and on CUDA the caching
  allocator's free blocks are filled with it too. An output that reuses memory it never wrote
  (the "reuse the reference's freed output" trick) then carries the pattern, which
  `poison_count` finds.
- The same dispatch mode logs which aten operators the forward ran, evidence for whether the
  work was done by PyTorch.

Invariant: guards observe and poison; they never change what a correct solution computes.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# ----------------------------------------------------------------------------- clocks


def _clock_targets() -> list[tuple[str, Any, str]]:
    """(label, owner, attribute) of everything whose replacement would fool timing or judging."""
    from argus.bench import timing
    from argus.runtime import timing as runtime_timing  # the implementation and its clocks

    targets: list[tuple[str, Any, str]] = []
    for attr in ("perf_counter", "perf_counter_ns", "time", "time_ns", "monotonic",
                 "monotonic_ns", "process_time", "sleep"):
        targets.append((f"time.{attr}", time, attr))
    for attr in ("Event", "synchronize", "Stream", "stream", "current_stream", "default_stream",
                 "set_stream", "is_available", "get_device_name", "ExternalStream"):
        targets.append((f"torch.cuda.{attr}", torch.cuda, attr))
    for attr in ("record", "elapsed_time", "synchronize", "query", "wait", "__init__", "__new__"):
        targets.append((f"torch.cuda.Event.{attr}", torch.cuda.Event, attr))
    for attr in ("synchronize", "wait_stream", "wait_event", "record_event", "query"):
        targets.append((f"torch.cuda.Stream.{attr}", torch.cuda.Stream, attr))
    for attr in ("save", "load", "equal", "allclose"):
        targets.append((f"torch.{attr}", torch, attr))
    targets.append(("torch.profiler.profile", torch.profiler, "profile"))
    # which timed calls the judge checks is drawn from these: a solution that replaced them
    # could predict the checked calls and compute only those
    targets.append(("os.urandom", os, "urandom"))
    targets.append(("random.Random", random, "Random"))
    # shuffle and choice draw through _randbelow (a Python method, looked up per call)
    for attr in ("shuffle", "choice", "seed", "random", "getrandbits", "__init__",
                 "_randbelow", "_randbelow_with_getrandbits"):
        targets.append((f"random.Random.{attr}", random.Random, attr))
    # the worker's `import random` reads sys.modules: a module put in its place is another
    targets.append(("sys.modules['random']", sys.modules, "random"))
    targets.append(("json.dumps", json, "dumps"))
    for module in (runtime_timing, timing):
        for attr in sorted(vars(module)):
            if attr.startswith("_") and not attr.startswith("__") or attr in ("measure", "Timing"):
                targets.append((f"{module.__name__}.{attr}", module, attr))
    return targets


def capture_clocks() -> dict[str, Any]:
    """Identity snapshot of the clock and judging functions (take it before importing code)."""
    snap: dict[str, Any] = {}
    for label, owner, attr in _clock_targets():
        if isinstance(owner, dict):             # sys.modules
            snap[label] = owner.get(attr)
            continue
        snap[label] = owner.__dict__.get(attr, getattr(owner, attr, None)) \
            if isinstance(owner, type) else getattr(owner, attr, None)
    return snap


def changed_clocks(snapshot: dict[str, Any]) -> list[str]:
    """Labels whose object is no longer the one captured in `snapshot`."""
    now = capture_clocks()
    return sorted(label for label, obj in snapshot.items() if now.get(label) is not obj)


# ----------------------------------------------------------------------------- global flags

_TF32_ENV = ("NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE",
             "TORCH_CUDNN_V8_API_DISABLED", "CUBLAS_WORKSPACE_CONFIG")


def _flag_readers() -> list[tuple[str, Callable[[], Any]]]:
    b = torch.backends
    readers: list[tuple[str, Callable[[], Any]]] = [
        ("torch.backends.cuda.matmul.allow_tf32", lambda: b.cuda.matmul.allow_tf32),
        ("torch.backends.cudnn.allow_tf32", lambda: b.cudnn.allow_tf32),
        ("torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction",
         lambda: b.cuda.matmul.allow_fp16_reduced_precision_reduction),
        ("torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
         lambda: b.cuda.matmul.allow_bf16_reduced_precision_reduction),
        ("torch.backends.cudnn.enabled", lambda: b.cudnn.enabled),
        ("torch.backends.cudnn.benchmark", lambda: b.cudnn.benchmark),
        ("torch.backends.cudnn.deterministic", lambda: b.cudnn.deterministic),
        ("torch.get_float32_matmul_precision", torch.get_float32_matmul_precision),
        ("torch.get_default_dtype", torch.get_default_dtype),
        ("torch.are_deterministic_algorithms_enabled", torch.are_deterministic_algorithms_enabled),
        ("torch.backends.cuda.flash_sdp_enabled", b.cuda.flash_sdp_enabled),
        ("torch.backends.cuda.mem_efficient_sdp_enabled", b.cuda.mem_efficient_sdp_enabled),
        ("torch.backends.cuda.math_sdp_enabled", b.cuda.math_sdp_enabled),
        ("torch.backends.mkldnn.enabled", lambda: b.mkldnn.enabled),
    ]
    for path in ("cuda.matmul.fp32_precision", "cudnn.fp32_precision", "fp32_precision",
                 "cudnn.conv.fp32_precision", "mkldnn.matmul.fp32_precision"):
        def read(path: str = path) -> Any:
            obj: Any = b
            for part in path.split("."):
                obj = getattr(obj, part)
            return obj
        readers.append((f"torch.backends.{path}", read))
    if hasattr(torch, "get_default_device"):
        readers.append(("torch.get_default_device", torch.get_default_device))
    for key in _TF32_ENV:
        readers.append((f"env {key}", lambda key=key: os.environ.get(key)))
    return readers


def capture_flags() -> dict[str, str]:
    """The global numerics switches, as strings (unreadable ones are skipped)."""
    out: dict[str, str] = {}
    for name, read in _flag_readers():
        try:
            out[name] = repr(read())
        except Exception:
            continue
    return out


def changed_flags(before: dict[str, str]) -> list[str]:
    now = capture_flags()
    return sorted(f"{k}: {before[k]} -> {now.get(k)}" for k in before if now.get(k) != before[k])


# ----------------------------------------------------------------------------- poison

POISON32 = 0x7FD5A5A5  # a NaN whose payload no arithmetic produces
_PATTERNS: dict[torch.dtype, tuple[int, ...]] = {
    torch.float32: (POISON32,),
    torch.float64: (0x7FFDA5A5A5A5A5A5, (POISON32 << 32) | POISON32),
    torch.float16: (0x7ED5, 0x7FD5),
    torch.bfloat16: (0x7FD5,),
    torch.int32: (0x5A5A5A5A, POISON32),
    torch.int64: (0x5A5A5A5A5A5A5A5A, (POISON32 << 32) | POISON32),
}
_INT_VIEW = {torch.float32: torch.int32, torch.float64: torch.int64, torch.float16: torch.int16,
             torch.bfloat16: torch.int16, torch.int32: torch.int32, torch.int64: torch.int64}
_EMPTY_OPS = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
              "empty_permuted"}
_BOOKKEEPING_OPS = _EMPTY_OPS | {
    "view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "as_strided",
    "detach", "alias", "slice", "select", "unsqueeze", "squeeze", "unbind", "split", "chunk",
    "narrow", "clone", "copy_", "fill_", "zero_", "zeros", "zeros_like", "ones", "ones_like",
    "full", "full_like", "lift_fresh", "lift_fresh_copy", "_to_copy", "to", "resize_", "set_",
    "_local_scalar_dense", "contiguous", "view_as", "expand_as", "flatten", "unflatten",
    "is_same_size", "scalar_tensor", "_reshape_alias", "split_with_sizes", "movedim",
    "record_stream", "is_nonzero", "dim", "size", "stride", "numel", "item",
}


def _signed(pattern: int, bits: int) -> int:
    return pattern - (1 << bits) if pattern >= 1 << (bits - 1) else pattern


def fill_poison(t: torch.Tensor) -> None:
    """Overwrite `t` in place with the poison pattern of its dtype (no-op for other dtypes)."""
    view_dtype = _INT_VIEW.get(t.dtype)
    if view_dtype is None or t.numel() == 0:
        return
    bits = torch.iinfo(view_dtype).bits
    t.view(view_dtype).fill_(_signed(_PATTERNS[t.dtype][0], bits))


# Elements a scan over a whole tensor (`poison_count`, `same_bits`) compares at once. A bool
# tensor's sum is computed in int64, and torch first casts the WHOLE bool tensor to int64 (8
# bytes an element): one pass over KernelBench L1/87's 2^31-element output asked for 16 GiB
# beside the output's 8 and ran the candidate out of memory (issue 17). A chunk of 2^25 takes
# 32 MiB of bool and 256 MiB of int64, still 2^25 elements a launch.
SCAN_CHUNK = 1 << 25


def _dense_order(t: torch.Tensor) -> list[int]:
    """`t`'s dimensions from the largest stride to the smallest (its storage order)."""
    return sorted(range(t.dim()), key=lambda d: -t.stride(d))


def _flat_view(t: torch.Tensor, order: list[int] | None = None) -> torch.Tensor:
    """`t`'s elements as one flat view, without a copy where `t` is dense in some dimension
    order (channels-last, transposed): a scan's answer does not depend on the element order,
    and `.contiguous()` of a non-contiguous output copied all of it (8 GiB for an L1/87-sized
    channels-last result). `order`: the permutation to use (another tensor's, so two scans
    pair the same elements); a tensor not dense in it is copied."""
    if order is None:
        order = _dense_order(t)
    permuted = t.detach().permute(order)
    return (permuted if permuted.is_contiguous() else permuted.contiguous()).reshape(-1)


def poison_count(t: torch.Tensor, chunk: int | None = None) -> int:
    """How many elements of `t` hold a poison pattern (memory the solution never wrote),
    counted `chunk` elements (default SCAN_CHUNK) at a time."""
    view_dtype = _INT_VIEW.get(t.dtype)
    if view_dtype is None or t.numel() == 0:
        return 0
    chunk = chunk or SCAN_CHUNK
    bits = torch.iinfo(view_dtype).bits
    ints = _flat_view(t).view(view_dtype)
    hits = torch.zeros((), dtype=torch.int64, device=t.device)
    for i in range(0, ints.numel(), chunk):
        part = ints[i:i + chunk]
        for pattern in _PATTERNS[t.dtype]:
            hits += (part == _signed(pattern, bits)).sum()
    return int(hits.item())


def poison_cuda_free_memory(nbytes_list: list[int], device: torch.device) -> None:
    """Fill blocks the caching allocator will hand out next (sized like the outputs, plus big
    ones) with the poison pattern, then free them."""
    blocks = []
    sizes = [n for n in nbytes_list for _ in range(2)] + [64 << 20, 256 << 20]
    for nbytes in sizes:
        try:
            block = torch.empty(max(1, (nbytes + 3) // 4), dtype=torch.int32, device=device)
        except RuntimeError:  # out of memory: poison what fits
            break
        block.fill_(_signed(POISON32, 32))
        blocks.append(block)
    torch.cuda.synchronize(device)
    del blocks


class PoisonMode(TorchDispatchMode):
    """Poisons fresh allocations from the empty family and counts the aten ops that ran."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: dict[str, int] = {}
        self.argus_ops = 0  # compute ops issued from Argus's own code (an interpreter, say)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        self.ops[name] = self.ops.get(name, 0) + 1
        if name not in _BOOKKEEPING_OPS and _issued_by_argus():
            self.argus_ops += 1
        out = func(*args, **(kwargs or {}))
        if name in _EMPTY_OPS and isinstance(out, torch.Tensor):
            fill_poison(out)
        return out

    def compute_ops(self) -> dict[str, int]:
        """The ops that computed something (not allocation, views or copies)."""
        return {k: v for k, v in sorted(self.ops.items()) if k not in _BOOKKEEPING_OPS}


def _issued_by_argus() -> bool:
    """Whether a frame of the argus package (other than this harness) is on the stack."""
    frame = sys._getframe(2)
    while frame is not None:
        module = frame.f_globals.get("__name__", "")
        if (module == "argus" or module.startswith("argus.")) \
                and not module.startswith("argus.bench"):
            return True
        frame = frame.f_back
    return False


class NullMode:
    """Stands in for PoisonMode when a forward must run as it does under timing."""

    ops: dict[str, int] = {}
    argus_ops = 0

    def __enter__(self) -> "NullMode":
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def compute_ops(self) -> dict[str, int]:
        return {}


# ----------------------------------------------------------------------------- aliasing


def _span(t: torch.Tensor) -> tuple[int, int] | None:
    if t.numel() == 0:
        return None
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return (start, start + storage.nbytes())


def aliases(outputs: list[torch.Tensor], inputs: list[Any]) -> list[int]:
    """Indices of inputs whose storage an output shares (returning an input, or a view of it)."""
    hits = []
    spans_out = [s for s in (_span(o) for o in outputs) if s is not None]
    for i, x in enumerate(inputs):
        if not isinstance(x, torch.Tensor):
            continue
        span = _span(x)
        if span is None:
            continue
        if any(a < span[1] and span[0] < b for a, b in spans_out):
            hits.append(i)
    return hits


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equality (NaN-safe), for checking that inputs were not modified."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    if a.dtype == torch.bool:
        return bool(torch.equal(a, b))
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}.get(a.element_size())
    if view is None:
        return bool(torch.equal(a, b))
    # chunk by chunk: torch.equal on CUDA is eq(a, b).all(), a bool of the whole tensor
    order = _dense_order(a)   # both in a's order: the same element at the same flat index
    a_bits = _flat_view(a, order).view(view)
    b_bits = _flat_view(b, order).view(view)
    return all(bool(torch.equal(a_bits[i:i + SCAN_CHUNK], b_bits[i:i + SCAN_CHUNK]))
               for i in range(0, a_bits.numel(), SCAN_CHUNK))
