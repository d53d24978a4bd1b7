"""argus.ops.attention_decode's input checks, the split heuristic, DecodeSchedule's legality
checks and argus.ops.attention's dispatch to the decode path (no GPU: shapes and dtypes are
checked before devices, and the host path runs with the interpreter as its executor)."""

import math

import pytest
import torch

import importlib
from argus.build_memo import BuildMemo
from argus.errors import LaunchError
from argus.kernels.attention_decode import (MAX_QUERIES, DecodeSchedule,
                                            default_decode_schedule, num_splits)
from argus.ops import attention_decode
from argus.ops.attention_decode import run_decode

# the module (argus.ops.attention is the function of the same name)
attention_mod = importlib.import_module("argus.ops.attention")


def _qkv(B=1, H=4, HKV=2, S=1, SK=40, D=64, dtype=torch.bfloat16):
    return (torch.randn(B, H, S, D).to(dtype), torch.randn(B, HKV, SK, D).to(dtype),
            torch.randn(B, HKV, SK, D).to(dtype))


def _interpret(kernel_fn, compile_time, tensors, scalars):
    kernel_fn.interpret(*tensors, **scalars, **compile_time)


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v: (q.float(), k, v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q, k.half(), v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q[0], k, v), "4-d tensors"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 32 is not supported"),
    (lambda q, k, v: (q, k[:, :, :7], v), "differ"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of the key/value heads"),
    (lambda q, k, v: (torch.cat([q, q]), k, v), "batch sizes differ"),
    (lambda q, k, v: (q, k, v), "Argus kernels run on a CUDA device"),
])
def test_bad_input_gets_a_clear_error(change, words):
    q, k, v = change(*_qkv())
    with pytest.raises(LaunchError, match=words):
        attention_decode(q, k, v)


def test_host_path_errors():
    q, k, v = _qkv(S=MAX_QUERIES + 1)
    with pytest.raises(LaunchError, match="17 query tokens; the decode kernels take at most 16"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, execute=_interpret)
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match=r"splits=0 must be an int in \[1, 128\]"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, splits=0, execute=_interpret)
    with pytest.raises(LaunchError, match="is not a DecodeSchedule"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, schedule="fast", execute=_interpret)
    strided = torch.randn(1, 2, 40, 128).bfloat16()[..., ::2]       # head dim stride 2
    with pytest.raises(LaunchError, match="k .* cannot be read by TMA"):
        run_decode(q, strided, v, False, 0.125, "bhsd", False, execute=_interpret)
    # a schedule of one warpgroup (64 rows) for 4 heads x 16 tokens = 64 rows: fine; 8 x 16
    # = 128 rows need two
    q8, k8, v8 = _qkv(H=8, HKV=1, S=16)
    with pytest.raises(LaunchError, match="cannot run 128 packed rows"):
        run_decode(q8, k8, v8, False, 0.125, "bhsd", False,
                   schedule=DecodeSchedule(consumers=1), execute=_interpret)


def test_num_splits():
    # enough (batch, kv head) units: one split, no combine
    assert num_splits(256, 64) == 1 and num_splits(106, 1024) == 1
    # batch 1 with 8 kv heads: enough splits to put a CTA on nearly every SM
    for blocks in (64, 256, 1024):
        s = num_splits(8, blocks)
        assert 8 * s <= 132 and 8 * s >= 0.9 * 132, (blocks, s)
    # never an empty trailing split, never more splits than 2-block pieces
    for units in (1, 2, 3, 8, 16, 40, 100):
        for blocks in range(1, 300, 7):
            s = num_splits(units, blocks)
            per = math.ceil(blocks / s)
            assert (s - 1) * per < blocks and (s == 1 or blocks // s >= 2), (units, blocks, s)


def test_schedules():
    with pytest.raises(ValueError, match="consumers=3"):
        DecodeSchedule(consumers=3)
    with pytest.raises(ValueError, match="block_n=100"):
        DecodeSchedule(block_n=100)
    with pytest.raises(ValueError, match="stages=1"):
        DecodeSchedule(stages=1)
    assert "shared memory" in " ".join(DecodeSchedule(stages=6).problems_for(128))
    assert "registers per thread" in " ".join(DecodeSchedule(block_n=256).problems_for(256))
    for d in (64, 128, 256):
        for rows in (1, 64, 65, 128):
            s = default_decode_schedule(d, rows)
            assert s.problems_for(d) == [] and s.block_m >= rows and s.stages >= 2


def test_attention_takes_the_decode_path_for_short_queries(monkeypatch):
    """argus.ops.attention's implementation sends Sq <= 16 to run_decode (the custom op and
    its fake stay the same: same shapes)."""
    calls = []
    monkeypatch.setattr(attention_mod, "check", lambda *a, **kw: None)
    monkeypatch.setattr(attention_mod, "run_decode",
                        lambda *a, **kw: calls.append(a[0].shape) or ("out", "lse"))
    q, k, v = _qkv(S=16)
    out, lse = attention_mod._run(q, k, v, True, 0.125, "bhsd", False)
    assert out == "out" and lse.shape == (0,) and lse.dtype == torch.float32
    assert calls == [q.shape]
    # eager calls do not dispatch through the custom op (its dispatch costs 15-20 us)
    monkeypatch.setattr(attention_mod, "_op", lambda: pytest.fail("custom op dispatched"))
    assert attention_mod.attention(q, k, v) == "out"
    assert calls == [q.shape] * 2
    q.requires_grad_(True)     # autograd would record the call: the op says it has no backward
    with pytest.raises(pytest.fail.Exception, match="custom op dispatched"):
        attention_mod.attention(q, k, v)


def test_broadcast_kv_is_refused_and_a_broadcast_q_is_copied():
    """A tensor expanded along a dim (stride 0: one KV cache shared by every sequence, as the
    batch-size error's fix suggests) cannot be read through a tensor map (strides must be
    positive multiples of 16 bytes: argus/runtime/tma.py), so k / v say so up front with the
    .contiguous() fix instead of failing at the launch with the tensor map's 'pad the inner
    dim' advice; q's packed rows are copied like any other view TMA cannot read."""
    from argus.ops.attention_decode import _tma_ready
    from argus.ops.attention_inputs import _check_strides

    q, k, v = _qkv(B=1)
    k2, v2 = k.expand(3, -1, -1, -1), v.expand(3, -1, -1, -1)
    assert k2.stride(0) == 0
    with pytest.raises(LaunchError, match="k .* cannot be read by TMA"):
        _check_strides((("k", k2), ("v", v2)))
    with pytest.raises(LaunchError, match="k .* cannot be read by TMA"):
        run_decode(q.expand(3, -1, -1, -1), k2, v2, False, 0.125, "bhsd", False,
                   execute=_interpret)
    _check_strides((("k", k), ("v", v)))            # extent-1 dims are never stepped over
    assert not _tma_ready(q.expand(3, -1, -1, -1).reshape(3, 2, 2, 64))
    assert _tma_ready(q.reshape(1, 2, 2, 64))


class _Allocator:
    """torch.empty as the CUDA caching allocator behaves in a loop: a freed block of the same
    size comes back at the same address (CPU malloc does not promise that)."""

    def __init__(self, real):
        self.real, self.held = real, {}

    def __call__(self, *shape, dtype=None, device=None, **kw):
        key = (tuple(shape[0]) if len(shape) == 1 and isinstance(shape[0], (tuple, list))
               else shape, dtype)
        t = self.held.get(key)
        if t is None:
            t = self.held[key] = self.real(*shape, dtype=dtype, device=device, **kw)
        return t


def _stub_the_device(monkeypatch):
    """The decode host path on CPU tensors with the launches stubbed: every prepare, check and
    launch counted (what a GPU call would do, but the kernels)."""
    mod = importlib.import_module("argus.ops.attention_decode")
    from argus.ops.attention_inputs import check as real_check

    calls = {"prepare": 0, "launch": 0, "check": 0, "decide": 0}

    def launch(stream=None):
        assert stream == 7, "launched on the current stream's raw handle"
        calls["launch"] += 1

    def prepare(*args, device):
        calls["prepare"] += 1
        return launch

    def check(*args, **kw):
        calls["check"] += 1
        return real_check(*args, **{**kw, "device": False})

    real_paged, real_init = mod._check_paged, mod._Call.__init__

    def check_paged(*args, **kw):
        calls["check"] += 1
        return real_paged(*args, **{**kw, "device": False})

    def decide(self, *args):
        calls["decide"] += 1
        real_init(self, *args)

    monkeypatch.setattr(mod, "_prepare", prepare)
    monkeypatch.setattr(mod, "_current_stream", lambda index: 7)
    monkeypatch.setattr(mod, "check", check)
    monkeypatch.setattr(mod, "_check_paged", check_paged)
    monkeypatch.setattr(mod._Call, "__init__", decide)
    monkeypatch.setattr(torch, "empty", _Allocator(torch.empty))
    monkeypatch.setattr(mod, "_ENTRIES", BuildMemo())
    return calls


@pytest.mark.parametrize("paged", [False, True])
def test_a_repeated_call_only_allocates_and_launches(monkeypatch, paged):
    """Host work of a repeated decode call (a decoding step's critical path; measured on the
    H200 at 80-150 us a call before): after the first call of a signature, no check, no
    decision, no prepare, no custom-op dispatch; the same launches on the
    current stream. Timed against the first call's path (checks, decisions, prepares with the
    launch stubbed), so a loaded machine slows both alike."""
    import time

    calls = _stub_the_device(monkeypatch)
    mod = importlib.import_module("argus.ops.attention_decode")
    if paged:
        table = torch.arange(8, dtype=torch.int32).reshape(1, 8)
        lens = torch.tensor([1000], dtype=torch.int32)
        q = torch.randn(1, 32, 1, 128).bfloat16()
        kc = torch.randn(8, 128, 8, 128).bfloat16()

        def call():
            return attention_decode(q, kc, kc, table, lens)
    else:
        q, k, v = _qkv(H=32, HKV=8, S=1, SK=8192, D=128)

        def call():
            return attention_mod.attention(q, k, v)
    # dense: one launch (4 GQA rows, 16 splits: the merge is one chunk, fused_combine_pays);
    # paged: split + combine (the split paged kernel is proven since issue 13)
    n = 2 if paged else 1
    out = call()
    assert calls == {"prepare": n, "launch": n, "check": 1, "decide": 1}, calls
    assert tuple(out.shape) == tuple(q.shape)
    for _ in range(50):
        call()
    assert calls == {"prepare": n, "launch": 51 * n, "check": 1, "decide": 1}, calls

    def per_call(fn, n=200):
        best = float("inf")
        for _ in range(3):
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            best = min(best, (time.perf_counter() - t0) / n)
        return best

    def first_call():
        mod._ENTRIES.clear()
        call()
    repeated, first = per_call(call), per_call(first_call, 50)
    # measured on an idle 2-core CPU: ~10 us repeated (two allocations, the key, two stubbed
    # launches) against ~250 us for a first call; a generous bound that still fails when the
    # checks or the decisions come back (each is over a third of a first call)
    assert repeated < 0.4 * first, (repeated, first)
    assert repeated < 200e-6, f"{repeated * 1e6:.0f} us of host work per repeated call"
    print(f"host work: repeated {repeated * 1e6:.1f} us, first {first * 1e6:.1f} us")


def test_a_new_signature_or_buffer_is_prepared_again(monkeypatch):
    """A different scale, shape or causal flag is a new signature (checked and decided
    again); a new K buffer of the same signature is checked (its address's alignment) and
    prepared again (plans hold pointers)."""
    calls = _stub_the_device(monkeypatch)
    q, k, v = _qkv(H=8, HKV=2, S=1, SK=1000, D=64)
    attention_mod.attention(q, k, v)
    per_call = calls["launch"]      # the split kernel (its merge fused or a combine launch)
    assert per_call >= 1
    attention_mod.attention(q, k, v, scale=0.5)
    attention_mod.attention(q, k, v, causal=True)
    assert calls["check"] == 3 and calls["decide"] == 3
    prepared = calls["prepare"]
    attention_mod.attention(q, k.clone(), v)
    assert calls["check"] == 4 and calls["prepare"] == prepared + per_call
    with pytest.raises(LaunchError, match="all be bfloat16 or all float16"):
        attention_mod.attention(q, k.half(), v)
    # plans prepared from kernels built unverified are not replayed with verification on
    checks = calls["check"]
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    attention_mod.attention(q, k, v)
    monkeypatch.setenv("ARGUS_VERIFY", "1")
    attention_mod.attention(q, k, v)
    assert calls["check"] == checks + 2


def test_a_call_that_copies_q_is_never_replayed(monkeypatch):
    """A [B, H, S, D] q viewed from [B, S, H, D] storage with GQA and several tokens: the
    packed rows are a copy of q made by the call (reshape cannot view them), so its launches
    read this call's copy and are not kept for the next call (which would read the old copy):
    prepared every time. So is a q that TMA cannot read (an odd address)."""
    calls = _stub_the_device(monkeypatch)
    q = torch.randn(1, 2, 8, 64).bfloat16().transpose(1, 2)      # [B, H, S, D] view
    k, v = (torch.randn(1, 2, 500, 64).bfloat16() for _ in range(2))
    attention_mod.attention(q, k, v)
    per_call = calls["launch"]
    assert per_call >= 1 and calls["prepare"] == per_call
    for n in range(2, 4):
        attention_mod.attention(q, k, v)
        assert calls["prepare"] == per_call * n, calls
    odd = torch.randn(1, 4 * 64 + 1).bfloat16()[:, 1:].view(1, 4, 1, 64)   # 2-byte offset
    before, launched = calls["prepare"], calls["launch"]
    attention_mod.attention(odd, k, v)
    attention_mod.attention(odd, k, v)
    assert calls["launch"] > launched
    assert calls["prepare"] - before == calls["launch"] - launched


@pytest.mark.parametrize("SK", [100, 8192])    # the direct kernel; split + combine
def test_the_output_copy_is_made_after_the_launches(monkeypatch, SK):
    """bshd q with GQA and several tokens: the kernels write a packed copy of the output that
    the call copies into out. The launches must run before that copy (a plan holds raw
    pointers only, so run's temporaries live only while it runs); a6fc02f prepared every plan
    inside run and launched them after it returned, so out got the copy's uninitialized
    memory (NaN / relative error 1.58 in tests/gpu/test_attention_decode_gpu.py)."""
    calls = _stub_the_device(monkeypatch)
    mod = importlib.import_module("argus.ops.attention_decode")

    def prepare(kernel_fn, compile_time, tensors, scalars, *, device):
        calls["prepare"] += 1

        def launch(stream):   # the kernel writing its output rows (O is second to last)
            calls["launch"] += 1
            tensors[-2].fill_(1.0)
        return launch

    monkeypatch.setattr(mod, "_prepare", prepare)
    full, nan = torch.full, float("nan")

    def shape(a):
        return tuple(a[0]) if len(a) == 1 and not isinstance(a[0], int) else tuple(a)
    # new buffers hold NaN (the device's uninitialized memory, made visible)
    monkeypatch.setattr(torch, "empty", lambda *a, dtype=None, device=None:
                        full(shape(a), nan, dtype=dtype, device=device))
    monkeypatch.setattr(torch.Tensor, "new_empty", lambda self, *a, **kw:
                        full(shape(a), nan, dtype=self.dtype, device=self.device))
    q = torch.randn(1, 4, 8, 64).bfloat16()                        # [B, S, H, D]
    k, v = (torch.randn(1, SK, 2, 64).bfloat16() for _ in range(2))
    out = attention_decode(q, k, v, layout="bshd")
    assert calls["launch"] == calls["prepare"] >= 1
    assert torch.equal(out, torch.ones_like(out)), "out copied before the kernels wrote it"


def test_split_rule_fills_the_sms_in_one_wave():
    """num_splits from the SM count (132) and the KV length: where one wave of splits can
    hold >= 90% of the SMs, the rule takes the most CTAs one wave holds (a decode CTA is one
    SM's memory stream: bandwidth follows the SMs in use; 61 splits x 2 units = 122 CTAs were
    chosen before where 64 give 128); every split keeps >= 2 blocks and none is empty; short
    caches get fewer splits (the 2-block floor), long ones no more than 128."""
    sms = 132
    # batch 1, GQA 32:8 at head dim 128 (128-key blocks): 16 splits = 128 CTAs from 4k keys on
    for kv in (4096, 8192, 32768, 131072):
        assert num_splits(8, kv // 128) == 16
    assert num_splits(8, 1024 // 128) == 4              # 8 blocks: 2 a split
    assert num_splits(2, 131072 // 128) == 64           # 128 CTAs (the wave rule: 61)
    assert num_splits(1, 131072 // 128) == 128          # MAX_SPLITS
    for units in range(1, 106):
        for blocks in (1, 2, 5, 8, 33, 64, 100, 256, 1000, 1024):
            s = num_splits(units, blocks)
            per = math.ceil(blocks / s)
            assert s == 1 or (blocks // s >= 2 and (s - 1) * per < blocks), (units, blocks, s)
            if units * s > sms:
                continue
            # no other split count that one wave holds puts more CTAs on the SMs
            fills = [units * math.ceil(blocks / math.ceil(blocks / t))
                     for t in range(1, min(128, blocks // 2) + 1)]
            best = max([f for f in fills if f <= sms] or [units])
            if best >= 0.9 * sms:
                assert units * s == best, (units, blocks, s, best)


def test_split_rule_for_two_ctas_per_sm():
    """ctas_per_sm=2 fills 2 x 132 CTA slots instead of 132 SMs (the `cta2` bench variant:
    shorter splits in two waves today, the rule for a kernel two CTAs share an SM with);
    ctas_per_sm=1 is the op's rule unchanged."""
    for units in (1, 2, 8, 16, 40, 100, 106, 256):
        for blocks in (1, 4, 64, 256, 1024):
            assert num_splits(units, blocks, ctas_per_sm=1) == num_splits(units, blocks)
    # batch 1, GQA 32:8, 128-key blocks, 8k to 128k keys: 32 splits, 256 CTAs (16 at one a SM)
    for kv in (8192, 32768, 131072):
        assert num_splits(8, kv // 128, ctas_per_sm=2) == 32
        assert num_splits(8, kv // 128) == 16
    # 128 units (batch 16) fill 97% of the SMs but not 80% of 264 slots: 2 splits, 256 CTAs
    assert num_splits(128, 64) == 1 and num_splits(128, 64, ctas_per_sm=2) == 2
    assert num_splits(256, 64, ctas_per_sm=2) == 1          # batch 32: one split either way
    for units in (1, 3, 8, 50):
        for blocks in (2, 9, 64, 300):
            s = num_splits(units, blocks, ctas_per_sm=2)
            per = math.ceil(blocks / s)
            assert s == 1 or (blocks // s >= 2 and (s - 1) * per < blocks), (units, blocks, s)
            # where one wave of splits fills >= 90% of the 264 slots, the rule takes the most
            fills = [units * math.ceil(blocks / math.ceil(blocks / t))
                     for t in range(1, min(128, blocks // 2) + 1)]
            best = max([f for f in fills if f <= 2 * 132] or [units])
            if best >= 0.9 * 2 * 132:
                assert units * s == best, (units, blocks, s, best)
    with pytest.raises(ValueError, match="ctas_per_sm=0"):
        num_splits(8, 64, ctas_per_sm=0)


def test_stagger_is_for_the_direct_kernel():
    """DecodeSchedule.stagger and .streams (bench variants) reorder the direct kernel's walk;
    the split kernel's cover proof reads keys in order, so such a schedule with splits (or
    pages) is refused by the op and by the kernel's trace; both fields are bounded."""
    from argus.compiler import lower_only
    from argus.errors import TraceError
    from argus.kernels.attention_decode import decode_kernel

    staggered = DecodeSchedule(block_n=64, stages=2, stagger=2)
    q, k, v = _qkv(SK=300)
    with pytest.raises(LaunchError, match="pass splits=1 with a staggered or two-stream schedule"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, splits=2, schedule=staggered,
                   execute=_interpret)
    out, _ = run_decode(q, k, v, False, 0.125, "bhsd", False, splits=1, schedule=staggered,
                        execute=_interpret)
    assert not torch.isnan(out.float()).any()
    with pytest.raises(TraceError, match="are for the direct"):
        lower_only(decode_kernel(64, split=True), s=staggered)
    two = DecodeSchedule(block_n=64, stages=2, streams=2)
    with pytest.raises(LaunchError, match="reorders the walk of the direct kernel"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, splits=3, schedule=two,
                   execute=_interpret)
    with pytest.raises(TraceError, match="are for the direct"):
        lower_only(decode_kernel(64, split=True), s=two)
    with pytest.raises(ValueError, match="stagger=65"):
        DecodeSchedule(stagger=65)
    with pytest.raises(ValueError, match="streams=3"):
        DecodeSchedule(streams=3)


@pytest.mark.parametrize("S,D,SK,fused", [
    (1, 128, 8192, True),     # 4 GQA rows, 16 splits: the merge is one chunk
    (16, 128, 8192, False),   # 64 rows: 16 chunks of 4, slower than a combine launch
    (1, 256, 32768, False),   # 4 rows at head dim 256: two chunks of 2
    (1, 64, 32768, True),
    (1, 128, 100, False),     # one block: one split, the direct kernel
])
def test_default_fuses_the_combine_only_where_the_merge_is_one_chunk(S, D, SK, fused):
    """The op's default decision (fused_combine_pays): the split kernel merges its splits
    itself when the last warpgroup's merge is one chunk of merge_rows rows, else a combine
    launch follows; an explicit schedule is taken as given."""
    from argus.kernels.attention_decode import (default_decode_schedule, fused_combine_pays,
                                                merge_rows, combine_shape)

    mod = importlib.import_module("argus.ops.attention_decode")
    q, k, v = _qkv(H=32, HKV=8, S=S, SK=SK, D=D)
    call = mod._Call(q, k, v, None, None, False, 1.0, "bhsd", None, None)
    [(r0, rows, s, n)] = call.chunks
    assert rows == 4 * S
    assert s.fused_combine is fused, (s, n)
    assert fused_combine_pays(s, n, rows, D) is fused or n == 1
    if fused:
        assert n > 1 and rows <= merge_rows(combine_shape(n, D)[0], D)
    given = default_decode_schedule(D, rows)
    call = mod._Call(q, k, v, None, None, False, 1.0, "bhsd", None, given)
    assert not call.chunks[0][2].fused_combine      # a schedule passed in is kept
    # a paged cache never fuses (the fused kernel reads a contiguous cache)
    assert not fused_combine_pays(given, 16, 4, D, paged=True)
