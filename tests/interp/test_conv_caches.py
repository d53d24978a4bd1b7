"""argus.ops.conv's kept tensors on argus.ops.weight_cache: the weight repacks (`_weight_side`)
and a transposed convolution's flipped / per-phase weights (`_derived`) get the store's purge
of freed weights, its byte bound and its CUDA-graph guard; the prepared launches (`_Repeat`)
and the no-bias zeros are not kept or replayed from a capture either. The caches keep GPU
tensors only; here they are switched on for CPU tensors (`cpu = True`) so the interpreter can
show them. Capture is simulated by monkeypatching torch.cuda.is_current_stream_capturing, as
tests/compose/test_templates.py does."""

import gc

import pytest
import torch
import torch.nn.functional as F

from argus.ops import conv as conv_op
from argus.ops import weight_cache


@pytest.fixture
def on_cpu(monkeypatch):
    """The conv caches keep CPU tensors for the test, and start empty."""
    for cache in (conv_op._WEIGHTS, conv_op._DERIVED):
        monkeypatch.setattr(cache, "cpu", True)
        cache.clear()
    yield
    for cache in (conv_op._WEIGHTS, conv_op._DERIVED):
        cache.clear()


def _capturing(monkeypatch, on: bool) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: on)


def _repack(w):
    return conv_op._weight_side(w, 1, 3, 64)             # the fp32 split's pieces: a repack


def test_repack_kept_per_version_and_let_go_of(on_cpu):
    w = torch.randn(8, 16, 3, 3)
    first = _repack(w)
    assert _repack(w) is first and len(conv_op._WEIGHTS) == 1
    with torch.no_grad():
        w.mul_(2)
    second = _repack(w)
    assert second is not first and torch.equal(second, _repack(w))
    assert len(conv_op._WEIGHTS) == 1                    # the old version's repack let go of


def test_a_freed_weight_is_purged_at_the_next_lookup(on_cpu):
    w = torch.randn(8, 16, 3, 3)
    _repack(w)
    conv_op._derived(w, ("flip", 1, 2), lambda: w.flip(2))
    assert len(conv_op._WEIGHTS) == 1 and len(conv_op._DERIVED) == 1
    del w
    gc.collect()
    other = torch.randn(4, 16, 1, 1)
    _repack(other)
    assert len(conv_op._DERIVED) == 0                    # gone at the next lookup
    (ref, _), = conv_op._WEIGHTS.values()
    assert ref() is other


def test_repacks_are_bounded_by_bytes(on_cpu, monkeypatch):
    """More weights than fit the bound: the least recently used repack goes first (here the
    bound holds two of them), not the one just used."""
    ws = [torch.randn(8, 16, 3, 3) for _ in range(3)]
    one = _repack(ws[0])
    monkeypatch.setattr(weight_cache, "OFF_GPU_BYTES",
                        2.5 * one.numel() * one.element_size())
    _repack(ws[1])
    assert _repack(ws[0]) is one                         # used: ws[1] is the oldest now
    _repack(ws[2])
    assert len(conv_op._WEIGHTS) == 2
    kept = {id(ref()) for ref, _ in conv_op._WEIGHTS.values()}
    assert kept == {id(ws[0]), id(ws[2])}


def test_nothing_kept_or_used_while_a_graph_is_captured(on_cpu, monkeypatch):
    """In a capture the repack and the derived weights are made again (the graph then
    re-derives them from the weight's current memory at each replay) and nothing made there
    is kept (it is not written until a replay)."""
    w = torch.randn(8, 16, 3, 3)
    kept = _repack(w)
    flip = conv_op._derived(w, ("flip", 1, 2), lambda: w.flip(2))
    _capturing(monkeypatch, True)
    assert _repack(w) is not kept
    assert conv_op._derived(w, ("flip", 1, 2), lambda: w.flip(2)) is not flip
    v = torch.randn(8, 16, 3, 3)
    _repack(v)
    conv_op._derived(v, ("flip", 1, 2), lambda: v.flip(2))
    assert len(conv_op._WEIGHTS) == 1 and len(conv_op._DERIVED) == 1
    _capturing(monkeypatch, False)
    assert _repack(w) is kept


def test_prepared_launches_and_zeros_are_not_kept_or_replayed_in_a_capture(monkeypatch):
    """`_Repeat`: a launch prepared in a capture is not remembered, and an eager one that
    holds a repacked weight is not replayed in a capture (its repack would be frozen into the
    graph); the no-bias zeros made in a capture are not kept."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 8, 5, 6, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(8, 8, 3, 3, generator=g).bfloat16()   # NCHW: a repack
    args = (1, 1, 1, 1, "none", 3, None, None, None, None)
    conv_op._REPEATS.clear()
    _capturing(monkeypatch, True)
    y = conv_op.conv2d_interpret(x, w, None, 1, 1)
    assert not conv_op._REPEATS                          # nothing remembered from a capture
    _capturing(monkeypatch, False)
    y2 = conv_op.conv2d_interpret(x, w, None, 1, 1)
    assert torch.equal(y, y2)
    (entry,) = conv_op._REPEATS.values()
    assert entry.derived and conv_op._Repeat.find(x, w, None, args) is entry
    _capturing(monkeypatch, True)
    assert conv_op._Repeat.find(x, w, None, args) is None
    ref = F.conv2d(x.double(), w.double(), None, 1, 1)
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 2e-2
    # the no-bias zeros: made, not kept, in a capture
    key = (1, 5, torch.float32, torch.device("cpu"))
    conv_op._NO_BIAS.pop(key, None)
    conv_op._bias_operand(None, 1, 5, torch.float32, torch.device("cpu"))
    assert key not in conv_op._NO_BIAS
    _capturing(monkeypatch, False)
    conv_op._bias_operand(None, 1, 5, torch.float32, torch.device("cpu"))
    assert key in conv_op._NO_BIAS
    conv_op._REPEATS.clear()


def test_the_im2col_compile_memo_drops_the_least_recently_used(monkeypatch):
    """_IM2COL keeps _MEMO_SIZE compiled gathers: a kind used again is kept when a new one
    arrives (the oldest-inserted one was dropped whatever its use)."""
    from collections import OrderedDict

    compiles = []

    class _Kernel:
        def compile(self, **constexprs):
            compiles.append(constexprs["k"])
            return object()

    class _Gather:
        kind = "rows"

    monkeypatch.setattr(conv_op, "_IM2COL", OrderedDict())
    monkeypatch.setattr(conv_op, "_MEMO_SIZE", 2)
    x = torch.empty(1, 3, 4, 4, device="meta")
    first = conv_op._im2col_compiled(x, _Gather, _Kernel(), {"k": 1})
    conv_op._im2col_compiled(x, _Gather, _Kernel(), {"k": 2})
    assert conv_op._im2col_compiled(x, _Gather, _Kernel(), {"k": 1}) is first   # used again
    conv_op._im2col_compiled(x, _Gather, _Kernel(), {"k": 3})                    # drops k=2
    assert conv_op._im2col_compiled(x, _Gather, _Kernel(), {"k": 1}) is first
    conv_op._im2col_compiled(x, _Gather, _Kernel(), {"k": 2})
    assert compiles == [1, 2, 3, 2]
