"""argus.ops.weight_cache: tensors derived from a weight, kept per owner (weak reference) and
version in one store shared by compose's GEMM pieces and the convolution's repacks: hits and
misses, an earlier version let go of when a new one is kept, freed owners purged at the next
lookup, the byte bound (least recently used first, across caches), nothing used or kept while
a CUDA graph is captured (simulated by monkeypatching torch.cuda.is_current_stream_capturing,
as tests/compose/test_templates.py does)."""

import gc

import pytest

torch = pytest.importorskip("torch")

from argus.ops import weight_cache  # noqa: E402
from argus.ops.weight_cache import DerivedCache  # noqa: E402


@pytest.fixture
def cache():
    c = DerivedCache("test: derived")
    c.clear()
    yield c
    c.clear()


def test_hit_per_owner_version_and_what(cache):
    w = torch.randn(4, 8)
    made = []
    get = lambda what: cache.get_or_make(w, what, lambda: made.append(1) or w * 2)  # noqa
    a = get("double")
    assert get("double") is a and len(made) == 1
    get("other")
    assert len(made) == 2 and len(cache) == 2
    with torch.no_grad():
        w.add_(1)                                        # a new version: made again
    b = get("double")
    assert len(made) == 3 and torch.equal(b, w * 2)
    # the earlier version of "double" was let go of when the new one was kept
    assert len(cache) == 2 and all(v is not a for _, v in cache.values())


def test_a_view_is_kept_for_its_base(cache):
    w = torch.randn(4, 8)
    first = cache.get_or_make(w.unsqueeze(2), "x", lambda: torch.ones(1))
    assert cache.get(w.unsqueeze(2), "x") is first      # a new view object each call
    assert cache.get(w.unsqueeze(0), "x") is None       # another shape: another entry
    (ref, _), = cache.values()
    assert ref() is w


def test_a_freed_owner_is_purged_at_the_next_lookup(cache):
    w = torch.randn(4, 8)
    cache.put(w, "x", torch.ones(3))
    assert len(cache) == 1
    del w
    gc.collect()
    other = torch.randn(2)
    assert cache.get(other, "x") is None
    assert len(cache) == 0


def test_a_new_tensor_at_a_freed_id_is_not_taken_for_the_old_one(cache):
    w = torch.randn(4, 8)
    cache.put(w, "x", torch.ones(3))
    key = next(k for k in weight_cache._STORE if k[0] == cache.name)
    entry = weight_cache._STORE[key]
    other = torch.randn(4, 8)
    # pretend `other` lives at w's id (as a freed and reused address would)
    weight_cache._STORE[key[:1] + (id(other),) + key[2:]] = entry
    assert cache.get(other, "x") is None


def test_bytes_bound_evicts_least_recently_used_across_caches(cache, monkeypatch):
    other = DerivedCache("test: other kind")
    monkeypatch.setattr(weight_cache, "OFF_GPU_BYTES", 3 * 400)
    ws = [torch.randn(2) for _ in range(4)]
    cache.put(ws[0], "x", torch.zeros(100))              # 400 bytes each
    other.put(ws[1], "x", torch.zeros(100))
    cache.put(ws[2], "x", torch.zeros(100))
    assert cache.get(ws[0], "x") is not None             # ws[0] used: ws[1] is now the oldest
    cache.put(ws[3], "x", torch.zeros(100))
    assert other.get(ws[1], "x") is None and len(other) == 0
    assert all(cache.get(w, "x") is not None for w in (ws[0], ws[2], ws[3]))
    big = torch.randn(2)
    cache.put(big, "x", torch.zeros(1000))              # larger than the bound: kept alone
    assert len(cache) == 1 and cache.get(big, "x") is not None


def test_nothing_is_used_or_kept_while_a_graph_is_captured(cache, monkeypatch):
    w = torch.randn(4, 8)
    kept = cache.get_or_make(w, "x", lambda: w * 2)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    assert weight_cache.capturing()
    fresh = cache.get_or_make(w, "x", lambda: w * 2)
    assert fresh is not kept                             # no hit in a capture
    v = torch.randn(3)
    cache.get_or_make(v, "x", lambda: v + 1)
    assert len(cache) == 1                               # nothing kept from a capture
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    assert cache.get(w, "x") is kept


def test_parameters_only_and_gpu_only():
    params = DerivedCache("test: params", parameters_only=True)
    gpu = DerivedCache("test: gpu", cpu=False)
    p = torch.nn.Parameter(torch.randn(3))
    t = torch.randn(3)
    assert params.owner(p.t() if p.dim() > 1 else p[:2]) is p and params.owner(t) is None
    assert gpu.owner(t) is None
    params.put(t, "x", t)
    gpu.put(t, "x", t)
    assert len(params) == 0 and len(gpu) == 0


def test_nothing_is_used_or_kept_while_torch_compile_traces(cache, monkeypatch):
    """Under tracing the tensors are fakes without a data pointer: the cache must not read it
    (nor hand back a tensor made outside the trace)."""
    w = torch.randn(4, 8)
    kept = cache.get_or_make(w, "x", lambda: w * 2)
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    monkeypatch.setattr(torch.Tensor, "data_ptr",
                        lambda self: pytest.fail("data_ptr read while tracing"))
    assert cache.get(w, "x") is None
    made = cache.get_or_make(w, "y", lambda: w * 3)
    assert made is not kept and torch.equal(made, w * 3)
    monkeypatch.undo()
    assert len(cache) == 1 and cache.get(w, "x") is kept
