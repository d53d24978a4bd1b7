"""Tensors derived from a weight (a repack, a split into bf16 pieces, a flipped or per-phase
copy), kept per owner and version, so a module's parameters are prepared once and not on every
forward. One store serves every such cache (argus.compose.gemm's parameter pieces,
argus.ops.conv's weight repacks and transposed-convolution weights, argus.ops.matmul's tf32
operands, argus.ops.moe's broadcast / padded fp8 weight scales), so one purge, one byte bound
and one CUDA-graph guard hold for all of them.

Invariant: a kept tensor is returned only for the same owner object (the tensor, or the base of
a view: checked through a weak reference, so a new tensor at a freed address or id is never
taken for the old one), the same version counter (an in-place update, an optimizer step,
load_state_dict's copy_ bump it; views share it), data pointer, shape, strides and dtype, and
the same `what` (the caller's description of the derivation). Keeping a new version drops the
owner's earlier ones of the same `what` (their memory back at once). Not seen: a write through
`param.data`, which has a version counter of its own.

- Dead owners (their model freed) are forgotten at the next lookup, not once newer entries
  have pushed them out (each dead copy of a 32768 x 32768 weight's pieces is 6.4 GB). A weak
  reference's callback only flags that one died; the purge runs in the next lookup (a callback
  that deleted entries could run in the middle of an iteration of the store, which raises).
- The store is bounded by bytes per device (a quarter of the GPU's memory; 8 GB off a GPU),
  least recently used first, not by entries: a model with more weights than a count bound,
  called layer after layer, would evict each weight's entry before its next use and never hit.
- While torch.compile traces, nothing is looked up or kept: the tensors are fakes (no data
  pointer) and the derivation belongs in the traced graph.
- While a CUDA graph is captured on the current stream nothing is used or kept: a hit would
  capture a read of the kept tensor, so a replay after an in-place update of the weight would
  compute with the old one (a graph reads the weight's current memory, the derivation
  included), and a tensor made in a capture is only recorded, not computed, until the graph
  is replayed (an eager call that hit it would read memory never written).
"""

from __future__ import annotations

import weakref
from collections import OrderedDict

SHARE = 0.25              # of a GPU's memory, for all kept tensors on it
OFF_GPU_BYTES = 8e9

# (cache name, id(owner), version, data_ptr, shape, strides, dtype, what) -> (ref, tensor)
_STORE: OrderedDict = OrderedDict()
_DEAD = [False]           # set by a weak reference's callback: purge at the next lookup


def _died(_ref) -> None:
    _DEAD[0] = True


def capturing() -> bool:
    """Whether a CUDA graph is being captured on the current stream (False without CUDA)."""
    import torch

    try:
        return bool(torch.cuda.is_current_stream_capturing())
    except (RuntimeError, AssertionError, AttributeError):   # no CUDA in this torch
        return False


def purge_dead() -> None:
    """Forget the entries of owners that are gone."""
    _DEAD[0] = False
    for k in [k for k, (ref, _) in _STORE.items() if ref() is None]:
        del _STORE[k]


def budget(device) -> float:
    """Bytes the kept tensors on `device` may take together."""
    if device.type == "cuda":
        import torch

        return SHARE * torch.cuda.get_device_properties(device).total_memory
    return OFF_GPU_BYTES


class DerivedCache:
    """One kind of derived tensor in the shared store. `parameters_only`: keep only tensors
    whose owner is an nn.Parameter (activations are new tensors every call: keeping them
    would only hold memory). `cpu`: keep tensors of non-CUDA owners too (the interpreter's
    CPU runs; argus.ops.conv keeps only GPU ones, so its CPU tests see every write).

    Reads like a mapping of this cache's entries (len, values() as (weak reference, tensor)
    pairs, clear()) for tests and diagnostics."""

    def __init__(self, name: str, *, parameters_only: bool = False, cpu: bool = True):
        self.name = name
        self.parameters_only = parameters_only
        self.cpu = cpu

    def owner(self, t):
        """The tensor entries are kept for (t, or the base of a view), or None when `t` is
        not kept by this cache."""
        import torch

        if torch.compiler.is_compiling():
            # a traced call's tensors are fakes (no storage, no data pointer): the derivation
            # is traced into the graph instead of looked up
            return None
        owner = t if t._base is None else t._base
        if self.parameters_only and not isinstance(owner, torch.nn.Parameter):
            return None
        if not self.cpu and not t.is_cuda:
            return None
        return owner

    def _key(self, owner, t, what) -> tuple:
        return (self.name, id(owner), t._version, t.data_ptr(), tuple(t.shape), t.stride(),
                t.dtype, what)

    def get(self, t, what):
        """The tensor kept for t and `what`, or None."""
        if _DEAD[0]:
            purge_dead()
        owner = self.owner(t)
        if owner is None or capturing():
            return None
        key = self._key(owner, t, what)
        hit = _STORE.get(key)
        if hit is None or hit[0]() is not owner:
            return None
        _STORE.move_to_end(key)
        return hit[1]

    def put(self, t, what, made) -> None:
        """Keep `made` for t and `what` (nothing while a graph is captured)."""
        owner = self.owner(t)
        if owner is None or capturing():
            return
        key = self._key(owner, t, what)
        same = (key[0], key[1]) + key[4:]
        for k in [k for k in _STORE if (k[0], k[1]) + k[4:] == same]:
            del _STORE[k]              # an earlier version of this owner: its memory back
        _STORE[key] = (weakref.ref(owner, _died), made)
        device = made.device
        on_device = [k for k, (_, v) in _STORE.items() if v.device == device]
        limit = budget(device)
        total = sum(_STORE[k][1].numel() * _STORE[k][1].element_size() for k in on_device)
        for k in on_device[:-1]:       # least recently used first; the new entry stays
            if total <= limit:
                break
            total -= _STORE[k][1].numel() * _STORE[k][1].element_size()
            del _STORE[k]

    def get_or_make(self, t, what, make):
        """The kept tensor for t and `what`, else make() (kept when this cache keeps t)."""
        hit = self.get(t, what)
        if hit is not None:
            return hit
        made = make()
        self.put(t, what, made)
        return made

    def _mine(self) -> list:
        return [k for k in _STORE if k[0] == self.name]

    def __len__(self) -> int:
        return len(self._mine())

    def values(self) -> list:
        return [_STORE[k] for k in self._mine()]

    def clear(self) -> None:
        for k in self._mine():
            del _STORE[k]


__all__ = ["DerivedCache", "OFF_GPU_BYTES", "SHARE", "budget", "capturing", "purge_dead"]
