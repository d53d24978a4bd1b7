"""The host path of a repeated argus.ops.conv2d call on the im2col route (the few-channel
stems: ResNet-50's 7x7/2 3->64, UNet's enc1 3x3 3->64), on the CPU: CPU tensors, the gather's
compiled kernel and matmul's GEMM runner stubbed by kernels whose launch plans are real
LaunchPlans over the arguments' pointers, the driver's raw launch stubbed (it records the
pointers each launch passes), torch.empty / empty_strided handing back the same block as
CUDA's caching allocator does in a loop. On the GPU this host time is what the op costs above
its kernels when the GPU waits for the launch (the stem read op 0.2608 ms, kernels 0.1646 ms
on an H100 host, tree e4febf5).

A repeated call with the same tensors launches the kept plans of every chunk on the buffers'
current addresses; a new x buffer, an updated weight (a new version: its repack made again)
and a chunked batch launch with their own pointers."""

import cProfile
import ctypes
import pstats
import types

import pytest
import torch
import torch.nn.functional as F

from argus.build_memo import BuildMemo
from argus.ops import conv as conv_op
from argus.runtime import context, driver
from tests.host_timing import least_cpu_per_call


class _Allocator:
    """torch.empty / empty_strided as the CUDA caching allocator behaves in a loop: a freed
    block of the same size comes back at the same address (CPU malloc does not promise that).
    `hold`: the blocks handed out, by (shape, strides, dtype); a test may drop them."""

    def __init__(self, empty, empty_strided):
        self.empty, self.empty_strided, self.held = empty, empty_strided, {}

    def plain(self, *shape, dtype=None, device=None, **kw):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        if kw or device not in (None, "cpu", torch.device("cpu")):
            return self.empty(*shape, dtype=dtype, device=device, **kw)
        key = (shape, None, dtype)
        t = self.held.get(key)
        if t is None:
            t = self.held[key] = self.empty(*shape, dtype=dtype)
        return t

    def strided(self, shape, strides, dtype=None, device=None, **kw):
        if kw or device not in (None, "cpu", torch.device("cpu")):
            return self.empty_strided(shape, strides, dtype=dtype, device=device, **kw)
        key = (tuple(shape), tuple(strides), dtype)
        t = self.held.get(key)
        if t is None:
            t = self.held[key] = self.empty_strided(shape, strides, dtype=dtype)
        return t


class _Driver:
    """cuLaunchKernelEx records (kernel, the first u64 of each parameter: a tensor's pointer)."""

    CUstream = int
    decode = True

    def __init__(self):
        self.launched, self.streams = [], set()

    def cuLaunchKernelEx(self, config, function, address, extra):
        if self.decode:
            self.streams.add(config.hStream)
            name, count = function
            slots = (ctypes.c_void_p * count).from_address(address)
            self.launched.append((name, tuple(ctypes.c_uint64.from_address(p).value
                                              for p in slots)))
        return (0,)

    def cuCtxGetCurrent(self):
        return (0, 1)

    def cuCtxSetCurrent(self, ctx):
        return (0,)


class _Compiled:
    """A compiled kernel in small: a call prepares (counted), keeps the plan by the arguments'
    pointers and layouts, as argus.compiled does, and launches it; plan_for returns it."""

    def __init__(self, name, counts):
        self.name, self.counts, self.plans = name, counts, {}

    @staticmethod
    def _key(tensors):
        return tuple((t.data_ptr(), tuple(t.shape), t.stride()) for t in tensors)

    def __call__(self, *tensors):
        self.counts[self.name] = self.counts.get(self.name, 0) + 1
        plan = self.plans[self._key(tensors)] = driver.LaunchPlan(
            kernel=self.name, device=0, function=(self.name, len(tensors)),
            config=types.SimpleNamespace(), shape="stub", params=driver.pack_params(tensors))
        plan()

    def plan_for(self, *tensors):
        return self.plans.get(self._key(tensors))


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _stub(monkeypatch):
    fake, counts = _Driver(), {}
    gather, gemm = _Compiled("gather", counts), _Compiled("gemm", counts)
    monkeypatch.setattr(driver, "_driver", lambda: fake)
    monkeypatch.setattr(context, "_driver", lambda: fake)
    monkeypatch.setitem(context._CONTEXTS, 0, 1)
    monkeypatch.setattr(conv_op, "_im2col_compiled", lambda *a: gather)
    monkeypatch.setattr(conv_op, "pointwise_gemm", lambda *a: (None, gemm))
    monkeypatch.setattr(conv_op, "_REPEATS", BuildMemo())
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda d=None: types.SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(conv_op, "_current_stream", lambda index: 7)
    alloc = _Allocator(torch.empty, torch.empty_strided)
    monkeypatch.setattr(torch, "empty", alloc.plain)
    monkeypatch.setattr(torch, "empty_strided", alloc.strided)
    # the weight's repack is kept on the GPU (argus.ops.weight_cache): here too
    monkeypatch.setattr(conv_op._WEIGHTS, "cpu", True)
    conv_op._WEIGHTS.clear()
    return fake, counts, alloc


# (name, N, C, H, W, K, R, S, stride, padding): scripts/gpu_conv_bench.py's rows
STEM = ("stem 7x7/2", 32, 3, 224, 224, 64, 7, 7, 2, 3)
ENC1 = ("enc1 3x3 3->64", 8, 3, 256, 256, 64, 3, 3, 1, 1)


def _problem(case, seed=0, bias=False):
    _, N, C, H, W, K, R, S, stride, padding = case
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(N, C, H, W, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = (torch.randn(K, C, R, S, generator=g) / (C * R * S) ** 0.5).bfloat16()
    b = torch.randn(K, generator=g).bfloat16() if bias else None
    return x, w, b, stride, padding


def host_profile(case, n=200):
    """(per-call CPU seconds of a repeated call, Python calls a call, pstats.Stats) of a
    repeated conv2d on `case`, stubs in place (call under a monkeypatch)."""
    x, w, b, stride, padding = _problem(case)
    call = lambda: conv_op.convolve(x, w, b, stride, padding)  # noqa: E731
    call()
    call()
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        call()
    profile.disable()
    stats = pstats.Stats(profile)
    return least_cpu_per_call(call, n), stats.total_calls / n, stats


def _launches(fake):
    out = list(fake.launched)
    fake.launched.clear()
    return out


@pytest.mark.parametrize("case", [STEM, ENC1], ids=lambda c: c[0])
def test_repeated_call_host_path_is_small(case, monkeypatch):
    """A repeated call prepares nothing and launches the gather and the GEMM on the kept
    plans, for little more host work than any replay's floor (the _REPEATS lookup and the two
    launches): before the replay was keyed ahead of its views, 120 Python calls and 34 us CPU
    (the stem, this harness, 2026-12-06) against a floor of ~5 us; 63 calls and 7.5 us after.
    Bounds: 85 calls, 3x the floor."""
    fake, counts, _ = _stub(monkeypatch)
    x, w, b, stride, padding = _problem(case)
    first = conv_op.convolve(x, w, b, stride, padding)
    assert counts == {"gather": 1, "gemm": 1}
    launched = _launches(fake)
    assert [name for name, _ in launched] == ["gather", "gemm"]
    for _ in range(5):
        again = conv_op.convolve(x, w, b, stride, padding)
    assert counts == {"gather": 1, "gemm": 1}, "a repeated call prepared a launch again"
    assert again.data_ptr() == first.data_ptr() and again.shape == first.shape
    assert _launches(fake) == launched * 5
    assert fake.streams == {7}, "every launch on torch's current stream"
    find, seen = conv_op._Repeat.find, []
    with monkeypatch.context() as m:                   # the arguments convolve looks up with
        m.setattr(conv_op._Repeat, "find", lambda *a: seen.append(a[3]) or find(*a))
        conv_op.convolve(x, w, b, stride, padding)
    args = seen[0]
    fake.decode = False
    per_call, calls, _ = host_profile(case, 100)
    # (host_profile's own tensors took a second entry and plans of their own)
    gather = next(iter(conv_op._im2col_compiled().plans.values()))
    gemm = next(iter(conv_op.pointwise_gemm()[1].plans.values()))

    def floor():
        assert conv_op._Repeat.find(x, w, b, args) is not None
        gather()
        gemm()

    least = least_cpu_per_call(floor, 100)
    print(f"{case[0]}: {per_call * 1e6:.1f} us CPU a repeated call ({least * 1e6:.1f} us the "
          f"lookup and launches), {calls:.0f} Python calls")
    assert calls <= 85, f"{calls} Python calls a repeated call"
    assert per_call < 3 * least, (per_call, least)


def test_new_buffers_and_weight_updates_launch_with_their_pointers(monkeypatch):
    """A new x (object or buffer), a new result address, a weight updated in place (a new
    version: the repack made again, at its own address) each launch with their own pointers,
    never a plan kept for other buffers."""
    fake, counts, alloc = _stub(monkeypatch)
    x, w, b, stride, padding = _problem(ENC1, bias=True)
    conv_op.convolve(x, w, b, stride, padding)
    (gather, gather_ptrs), (gemm, gemm_ptrs) = _launches(fake)
    assert gather == "gather" and gemm == "gemm" and gather_ptrs[0] == x.data_ptr()
    assert gemm_ptrs[0] == gather_ptrs[1]              # the GEMM reads the A the gather wrote

    def pointers():
        (_, g), (_, m) = _launches(fake)
        return g, m

    x2 = x.clone()                                     # a new object and buffer
    conv_op.convolve(x2, w, b, stride, padding)
    g, m = pointers()
    assert g[0] == x2.data_ptr() and g[1] == gather_ptrs[1] and m == gemm_ptrs
    x.data = x2.clone()                                # the same object, a new buffer
    conv_op.convolve(x, w, b, stride, padding)
    g, m = pointers()
    assert g[0] == x.data_ptr() != x2.data_ptr() and m == gemm_ptrs
    taken = list(alloc.held.values())                  # held: new blocks at new addresses
    alloc.held.clear()                                 # the result (and A) at new addresses
    y = conv_op.convolve(x, w, b, stride, padding)
    g, m = pointers()
    assert m[2] == y.data_ptr() != gemm_ptrs[2] and m[0] == g[1]
    old = m[1]
    with torch.no_grad():
        w.mul_(-1)                                     # a new weight version: a new repack
    conv_op.convolve(x, w, b, stride, padding)
    g, m = pointers()
    assert m[1] != old
    del taken
    keep = conv_op._WEIGHTS.values()
    assert any(t.data_ptr() == m[1] for _, t in keep)
    b.add_(1)                                          # a new bias version: a new repack
    conv_op.convolve(x, w, b, stride, padding)
    g, m2 = pointers()
    assert m2[1] != m[1]


def _interp_problem(seed, bias):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(3, 3, 9, 10, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = (torch.randn(8, 3, 3, 3, generator=g) / 5).bfloat16()
    b = torch.randn(8, generator=g).bfloat16() if bias else None
    return x, w, b


def _ref(x, w, b):
    return F.conv2d(x.double(), w.double(), None if b is None else b.double(), 2, 1)


@pytest.mark.parametrize("kept", [False, True])
@pytest.mark.parametrize("chunked", [False, True])
@pytest.mark.parametrize("bias", [False, True])
def test_replays_match_a_fresh_call_bit_for_bit(chunked, bias, kept, monkeypatch):
    """The interpreter (no stubs): a replay (x's new values, an in-place weight update, a new
    x buffer behind the same object), one image a chunk or the batch in one, is bit-identical
    to a fresh call on the same values (the _REPEATS entry dropped first). `kept`: the weight
    cache keeps CPU repacks, as it keeps GPU ones (the replay then holds the repack)."""
    monkeypatch.setattr(conv_op, "_REPEATS", BuildMemo())
    monkeypatch.setattr(conv_op._WEIGHTS, "cpu", kept)
    conv_op._WEIGHTS.clear()
    x, w, b = _interp_problem(1, bias)
    if chunked:
        image = conv_op._Gather.of(x, w, 2, 1, 1).image_rows * \
            conv_op._Gather.of(x, w, 2, 1, 1).pitch * x.element_size()
        monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES", image)
        assert conv_op._im2col_chunks(3, image) == [(0, 1), (1, 2), (2, 3)]
    assert conv_op.route(x, w, b, 2, 1, 1) == "im2col"

    def fresh():
        conv_op._REPEATS.clear()
        return conv_op.conv2d_interpret(x, w, b, 2, 1)

    def replay():
        y = conv_op.conv2d_interpret(x, w, b, 2, 1)
        assert len(conv_op._REPEATS) == 1
        return y

    first = conv_op.conv2d_interpret(x, w, b, 2, 1)
    assert ((first.double() - _ref(x, w, b)).abs().max() / _ref(x, w, b).abs().max()) < 1e-2
    assert torch.equal(replay(), first)
    x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(7)))
    y = replay()
    assert torch.equal(y, fresh()) and not torch.equal(y, first)
    with torch.no_grad():
        w.mul_(-0.5)
    y = replay()
    assert torch.equal(y, fresh())
    assert ((y.double() - _ref(x, w, b)).abs().max() / _ref(x, w, b).abs().max()) < 1e-2
    x.data = (x * 2).contiguous(memory_format=torch.channels_last)
    assert torch.equal(replay(), fresh())
    if bias:
        b.add_(0.25)                                   # a new bias version: its column anew
        y = replay()
        assert torch.equal(y, fresh())
        assert ((y.double() - _ref(x, w, b)).abs().max() / _ref(x, w, b).abs().max()) < 1e-2
    conv_op._WEIGHTS.clear()


def test_a_replay_launches_on_the_stream_current_at_its_call(monkeypatch):
    """The kept plans carry no stream: each replay launches every step on torch's current
    stream of x's device at that call (a caller's `with torch.cuda.stream(s)`), never the one
    the plans were made on."""
    fake, counts, _ = _stub(monkeypatch)
    current = {0: 7}
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda d=None: types.SimpleNamespace(cuda_stream=current[0]))
    monkeypatch.setattr(conv_op, "_current_stream", lambda index: current[0])
    x, w, b, stride, padding = _problem(ENC1, bias=True)
    conv_op.convolve(x, w, b, stride, padding)
    assert fake.streams == {7}
    for stream in (9, 7, 11):
        current[0] = stream
        fake.streams.clear()
        conv_op.convolve(x, w, b, stride, padding)
        assert fake.streams == {stream}, (stream, fake.streams)
    assert counts == {"gather": 1, "gemm": 1}, "the replays prepared nothing"


@pytest.mark.parametrize("kept", [False, True])
def test_the_replay_keeps_no_bias_alive(kept, monkeypatch):
    """The _REPEATS entry knows the bias by a weak reference only (as it knows x and the
    weight): a freed model's bias is freed, not held by the replay until 64 newer entries push
    it out. `kept`: the weight cache keeps the repack (the GPU's path), which holds the bias's
    values, not the bias."""
    import gc
    import weakref

    monkeypatch.setattr(conv_op, "_REPEATS", BuildMemo())
    monkeypatch.setattr(conv_op._WEIGHTS, "cpu", kept)
    conv_op._WEIGHTS.clear()
    x, w, b = _interp_problem(1, True)
    y = conv_op.conv2d_interpret(x, w, b, 2, 1)
    assert torch.equal(conv_op.conv2d_interpret(x, w, b, 2, 1), y)     # a replay
    assert len(conv_op._REPEATS) == 1
    ref = weakref.ref(b)
    del b
    gc.collect()
    assert ref() is None, gc.get_referrers(ref())
    conv_op._WEIGHTS.clear()


@pytest.mark.parametrize("chunked", [False, True])
def test_an_nchw_result_replays_like_a_fresh_call(chunked, monkeypatch):
    """The NCHW-result form (`im2col_nchw`: one GEMM an image into its [K, pixels] plane; the
    image bound lowered here) replays bit-identical to a fresh call after x's values change
    and after an in-place weight update, whole batch or one image a chunk."""
    monkeypatch.setattr(conv_op, "_REPEATS", BuildMemo())
    monkeypatch.setattr(conv_op._WEIGHTS, "cpu", True)
    monkeypatch.setattr(conv_op, "NCHW_IM2COL_IMAGE_BYTES", 1)
    conv_op._WEIGHTS.clear()
    x, w, b = _interp_problem(2, True)
    image = conv_op._Gather.of(x, w, 2, 1, 1).image_rows * \
        conv_op._Gather.of(x, w, 2, 1, 1).pitch * x.element_size()
    if chunked:
        monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES", image)

    def call():
        return conv_op.convolve(x, w, b, 2, 1, nchw=True)

    def fresh():
        conv_op._REPEATS.clear()
        return call()

    first = call()
    assert first.is_contiguous() and len(conv_op._REPEATS) == 1
    assert ((first.double() - _ref(x, w, b)).abs().max() / _ref(x, w, b).abs().max()) < 1e-2
    assert torch.equal(call(), first)
    x.copy_(torch.randn(x.shape, generator=torch.Generator().manual_seed(9)))
    y = call()
    assert torch.equal(y, fresh()) and not torch.equal(y, first)
    with torch.no_grad():
        w.mul_(-0.5)
    y = call()
    assert torch.equal(y, fresh())
    assert ((y.double() - _ref(x, w, b)).abs().max() / _ref(x, w, b).abs().max()) < 1e-2
    conv_op._WEIGHTS.clear()


def test_a_capture_neither_replays_nor_remembers(monkeypatch):
    """Under CUDA graph capture (simulated) the route's entry, which holds the weight's repack,
    is not replayed (the repack would be frozen into the graph: an in-place weight update
    between graph replays unseen), and the call prepared in the capture is not remembered:
    the eager entry replays again afterwards."""
    fake, counts, _ = _stub(monkeypatch)
    x, w, b, stride, padding = _problem(ENC1, bias=True)
    conv_op.convolve(x, w, b, stride, padding)
    (entry,) = conv_op._REPEATS.values()
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    conv_op.convolve(x, w, b, stride, padding)
    assert counts == {"gather": 2, "gemm": 2}, "replayed in a capture"
    assert list(conv_op._REPEATS.values()) == [entry], "remembered from a capture"
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    conv_op.convolve(x, w, b, stride, padding)
    assert counts == {"gather": 2, "gemm": 2}, "the eager entry not replayed after the capture"


def test_meta_calls_build_and_replay_as_builds(monkeypatch):
    """On meta tensors (compose's prebuild) the route builds its kernels for the operands
    (`build_for`) and launches nothing; a repeated call (the replay: every meta address is 0)
    builds again, keeps no plan and returns the same layout."""
    fake, counts, _ = _stub(monkeypatch)
    built = []
    for c in (conv_op._im2col_compiled(), conv_op.pointwise_gemm()[1]):
        monkeypatch.setattr(c, "build_for", lambda *t, name=c.name: built.append(name),
                            raising=False)
    x = torch.empty(2, 3, 16, 16, dtype=torch.bfloat16, device="meta") \
        .to(memory_format=torch.channels_last)
    w = torch.empty(8, 3, 3, 3, dtype=torch.bfloat16, device="meta")
    b = torch.empty(8, dtype=torch.bfloat16, device="meta")
    assert conv_op.route(x, w, b, 1, 1, 1) == "im2col"
    y = conv_op.convolve(x, w, b, 1, 1)
    assert built == ["gather", "gemm"] and len(conv_op._REPEATS) == 1
    y2 = conv_op.convolve(x, w, b, 1, 1)
    assert built == ["gather", "gemm"] * 2 and counts == {} and not fake.launched
    assert y2.is_meta and (y2.shape, y2.stride()) == (y.shape, y.stride()) == \
        ((2, 8, 16, 16), (2048, 1, 128, 8))
