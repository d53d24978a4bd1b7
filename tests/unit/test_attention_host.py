"""The host path of a repeated eager argus.ops.attention prefill call (no GPU: CPU tensors, the
driver's raw launch stubbed, the kernel's prepare stubbed by a real LaunchPlan over the
arguments' pointers). A repeated signature skips the checks and decisions but never one that
depends on something outside the signature; a new buffer launches with its own pointers."""

import cProfile
import ctypes
import dataclasses
import importlib
import pstats
import types

import pytest
import torch

from argus.build_memo import BuildMemo
from argus.errors import LaunchError
from argus.kernels.attention import LOG2E
from argus.runtime import context, driver
from argus.runtime.tma import TensorMap, TensorMapSpec
from tests.host_timing import least_cpu_per_call

attention_mod = importlib.import_module("argus.ops.attention")


class _Allocator:
    """torch.empty as the CUDA caching allocator behaves in a loop: a freed block of the same
    size comes back at the same address (CPU malloc does not promise that)."""

    def __init__(self, real):
        self.real, self.held = real, {}

    def __call__(self, *shape, dtype=None, device=None, **kw):
        if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
            shape = tuple(shape[0])
        key = (shape, dtype)
        t = self.held.get(key)
        if t is None:
            t = self.held[key] = self.real(*shape, dtype=dtype, device=device, **kw)
        return t


class _Driver:
    """The CUDA driver calls a launch makes; cuLaunchKernelEx records the parameter words the
    kernel would read (the first u64 of each parameter: a pointer for a tensor)."""

    CUstream = int

    class CUtensorMap:
        def __init__(self):
            self.words = (ctypes.c_uint64 * 16)()

        def getPtr(self):
            return ctypes.addressof(self.words)

    def __init__(self):
        self.launched = []
        self.replaced = 0

    def cuTensorMapReplaceAddress(self, tmap, address):
        # the stub's tensor maps carry their global address in word 0 (_tensor_map)
        self.replaced += 1
        tmap.words[0] = address
        return (0,)

    decode = True     # off while a test counts the op's own Python calls

    def cuLaunchKernelEx(self, config, function, address, extra):
        if not self.decode:
            return (0,)
        count = function                     # the stub's function handle: its parameter count
        slots = (ctypes.c_void_p * count).from_address(address)
        self.launched.append((config.hStream, tuple(ctypes.c_uint64.from_address(p).value
                                                    for p in slots)))
        return (0,)

    def cuCtxGetCurrent(self):
        return (0, 1)

    def cuCtxSetCurrent(self, ctx):
        return (0,)


def _stub_the_device(monkeypatch):
    """Counts of check / prepare calls and the driver's launches, with every input check but
    the device one real (CPU tensors)."""
    from argus.ops.attention_inputs import check as real_check

    fake = _Driver()
    calls = {"check": 0, "prepare": 0}

    def check(*args, **kw):
        calls["check"] += 1
        return real_check(*args, **{**kw, "device": False})

    class Kernel:
        def prepare(self, *tensors, _scalars=None):
            # the attention kernel's ABI in small: each tensor's pointer, a runtime scalar, and
            # tensor maps of q and the output (the kernel reads q and writes O through TMA)
            calls["prepare"] += 1
            args = (*tensors, driver.f32(_scalars["qk_scale"]), _tensor_map(tensors[0]),
                    _tensor_map(tensors[3]))
            return driver.LaunchPlan(kernel="attention", device=0, function=len(args),
                                     config=types.SimpleNamespace(), shape="stub",
                                     params=driver.pack_params(args))

    monkeypatch.setattr(driver, "_driver", lambda: fake)
    monkeypatch.setattr(context, "_driver", lambda: fake)
    monkeypatch.setitem(context._CONTEXTS, 0, 1)
    monkeypatch.setattr(attention_mod, "check", check)
    monkeypatch.setattr(attention_mod, "_compiled", lambda *a: Kernel())
    monkeypatch.setattr(attention_mod, "_current_stream", lambda index: 7)
    monkeypatch.setattr(attention_mod, "_ENTRIES", BuildMemo())
    monkeypatch.setattr(attention_mod, "_LAUNCHES", type(attention_mod._LAUNCHES)())
    monkeypatch.setattr(torch.cuda, "device", lambda d: _Null())
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda d=None: types.SimpleNamespace(cuda_stream=7))
    monkeypatch.setattr(torch, "empty", _Allocator(torch.empty))
    monkeypatch.setattr(torch, "empty_like",
                        lambda t, **kw: torch.empty(t.shape, dtype=t.dtype, device=t.device))
    return calls, fake


def _tensor_map(t):
    spec = TensorMapSpec(dtype="bf16", elem_bytes=2, address=t.data_ptr(), dims=(128,),
                         strides_bytes=(), box=(64,), swizzle_bytes=128)
    return TensorMap(words=(t.data_ptr(),) + (0,) * 15, spec=spec)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _qkv(B=2, H=4, HKV=2, S=128, SK=256, D=128, dtype=torch.bfloat16):
    return (torch.randn(B, H, S, D).to(dtype), torch.randn(B, HKV, SK, D).to(dtype),
            torch.randn(B, HKV, SK, D).to(dtype))


def _launched(q, k, v, out, lse=None, scale=None):
    """(stream, the first u64 of each parameter) the stub kernel's launch on these buffers
    passes: the pointers, the scale's bits, the tensor maps' addresses."""
    scale = 1 / 128 ** 0.5 if scale is None else scale
    bits = ctypes.c_uint32.from_buffer(ctypes.c_float(scale * LOG2E)).value
    tensors = (q, k, v, out) + ((lse,) if lse is not None else ())
    return (7, tuple(t.data_ptr() for t in tensors) + (bits, q.data_ptr(), out.data_ptr()))


def test_a_repeated_call_skips_checks_and_prepare(monkeypatch):
    """After the first call of a signature: no check, no prepare, the same launch on the
    current stream; the host work is a fraction of the first call's and a small count of
    Python calls (a bound that fails when the checks or the decisions come back)."""
    calls, fake = _stub_the_device(monkeypatch)
    q, k, v = _qkv()
    out = attention_mod.attention(q, k, v)
    assert calls == {"check": 1, "prepare": 1}
    for _ in range(20):
        again = attention_mod.attention(q, k, v)
    assert calls == {"check": 1, "prepare": 1}, calls
    assert again.data_ptr() == out.data_ptr() and again.shape == q.shape
    assert len(fake.launched) == 21
    assert all(launch == _launched(q, k, v, out) for launch in fake.launched)
    assert fake.replaced == 0, "the same buffers take their plan, never a moved one"

    fake.decode = False
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(100):
        attention_mod.attention(q, k, v)
    profile.disable()
    per_call = pstats.Stats(profile).total_calls / 100
    # 41 on 2026-12-04 with these stubs (the same harness before the signature memo: about
    # 110); check() and _check_strides alone are over 40 more
    assert per_call <= 60, f"{per_call} Python calls per repeated op call"

    def first_call():
        attention_mod._ENTRIES.clear()
        attention_mod._LAUNCHES.clear()
        attention_mod.attention(q, k, v)

    repeated = least_cpu_per_call(lambda: attention_mod.attention(q, k, v), 500)
    first = least_cpu_per_call(first_call, 100)
    print(f"host work per call: repeated {repeated * 1e6:.1f} us, first {first * 1e6:.1f} us, "
          f"{per_call:.0f} Python calls")
    assert repeated < 0.6 * first, (repeated, first)


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v: (q.float(), k, v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q, k.half(), v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q[0], k, v), "4-d tensors"),
    (lambda q, k, v: (q, k[..., :64], v[..., :64]), "q has head dim 128, k and v have 64"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 32 is not supported"),
    (lambda q, k, v: (q, k[:, :1], v), "differ"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of the key/value heads"),
    (lambda q, k, v: (q.transpose(2, 3).contiguous().transpose(2, 3), k, v),
     "q .* cannot be read by TMA"),
    (lambda q, k, v: (q, k.expand(2, -1, -1, -1).contiguous()[:1].expand(2, -1, -1, -1), v),
     "k .* cannot be read by TMA"),
    # same shape and strides as the cached call, a pointer 2 bytes off 16-byte alignment
    (lambda q, k, v: (torch.empty(q.numel() + 8, dtype=q.dtype)[1:q.numel() + 1]
                      .view(q.shape), k, v), "q .* cannot be read by TMA"),
    (lambda q, k, v: ("q", k, v), "must be a torch.Tensor"),
])
def test_a_cached_signature_still_checks_a_changed_call(monkeypatch, change, words):
    """Every input check still runs for a call that differs from a cached one: its dtype,
    shape, strides or alignment (a pointer the cached plan was not prepared for) are not the
    cached call's, so it takes the checked path and raises the same error."""
    calls, _ = _stub_the_device(monkeypatch)
    q, k, v = _qkv()
    attention_mod.attention(q, k, v)
    attention_mod.attention(q, k, v)
    assert calls == {"check": 1, "prepare": 1}
    with pytest.raises(LaunchError, match=words):
        attention_mod.attention(*change(q, k, v))


def test_the_signature_keys_every_checked_property():
    """Each property check() and the decisions read is in the key (device, layout, flags)."""
    q, k, v = _qkv()
    sig = attention_mod._signature
    base = sig(q, k, v, False, None, "bhsd", False)
    assert base == sig(q.clone(), k.clone(), v.clone(), False, None, "bhsd", False)
    different = [sig(q.to("meta"), k, v, False, None, "bhsd", False),
                 sig(q, k, v.to("meta"), False, None, "bhsd", False),
                 sig(q, k, v, True, None, "bhsd", False),
                 sig(q, k, v, False, 0.125, "bhsd", False),
                 sig(q, k, v, False, None, "bshd", False),
                 sig(q, k, v, False, None, "bhsd", True),
                 sig(q, k, v.transpose(2, 3).contiguous().transpose(2, 3), False, None, "bhsd",
                     False)]
    assert all(d != base for d in different)
    assert sig(q, k, v, False, 0.0, "bhsd", False) != sig(q, k, v, False, -0.0, "bhsd", False)
    assert sig(q, k, v, False, torch.tensor(0.1), "bhsd", False) is None  # the checked path
    assert sig("q", k, v, False, None, "bhsd", False) is None


def test_new_buffers_launch_with_their_pointers(monkeypatch):
    """A cached signature called on other buffers launches with those buffers' addresses (the
    plan moved onto them: pointers rewritten, tensor maps re-pointed, no prepare), never a
    cached plan's; the first buffers keep their plan. A plan whose one buffer would become
    two (k passed as v) is prepared afresh."""
    calls, fake = _stub_the_device(monkeypatch)
    q, k, v = _qkv()
    out = attention_mod.attention(q, k, v)
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    out2 = attention_mod.attention(q2, k2, v2)
    assert fake.launched[-1] == _launched(q2, k2, v2, out2)
    out3 = attention_mod.attention(q, k2, v)
    assert fake.launched[-1] == _launched(q, k2, v, out3)
    assert calls == {"check": 1, "prepare": 1} and fake.replaced == 2   # q's map moved twice
    attention_mod.attention(q, k, v)
    assert fake.launched[-1] == _launched(q, k, v, out)
    assert fake.replaced == 2, "the first buffers' plan is kept"
    # a new scale is a new signature: checked and prepared
    attention_mod.attention(q, k, k, scale=0.5)
    assert calls == {"check": 2, "prepare": 2}
    attention_mod.attention(q, k, v, scale=0.5)     # k and v were one buffer in its plan
    assert fake.launched[-1] == _launched(q, k, v, out, scale=0.5)
    assert calls == {"check": 3, "prepare": 3}


def test_repack_moves_only_the_named_addresses(monkeypatch):
    """driver.repack: the tensor pointers and tensor maps at the moved addresses change; the
    scalars and every other parameter are the same objects."""
    fake = _Driver()
    monkeypatch.setattr(driver, "_driver", lambda: fake)
    monkeypatch.setattr(context, "_driver", lambda: fake)
    a, b = torch.zeros(64), torch.zeros(64)
    params = driver.pack_params([a, b, driver.i64(a.data_ptr()), _tensor_map(a), 3])
    assert params.addresses == (a.data_ptr(), b.data_ptr(), None, a.data_ptr(), None)
    moved = driver.repack(params, {a.data_ptr(): 4096})
    assert (moved.storage[0].value, moved.storage[1].value, moved.storage[3][0]) == \
        (4096, b.data_ptr(), 4096)
    assert moved.storage[2].value == a.data_ptr(), "an i64 scalar is never an address"
    assert all(moved.storage[i] is params.storage[i] for i in (1, 2, 4))
    assert params.storage[0].value == a.data_ptr(), "the original plan is unchanged"
    assert moved.addresses == (4096, b.data_ptr(), None, 4096, None) and fake.replaced == 1


def test_lse_and_the_custom_op_path(monkeypatch):
    """return_lse launches with the LSE buffer too; a call under autograd recording (not
    eager) never takes a cached eager plan."""
    calls, fake = _stub_the_device(monkeypatch)
    q, k, v = _qkv()
    out, lse = attention_mod.attention(q, k, v, return_lse=True)
    out_again, lse_again = attention_mod.attention(q, k, v, return_lse=True)
    assert calls == {"check": 1, "prepare": 1}
    assert (out_again.data_ptr(), lse_again.data_ptr()) == (out.data_ptr(), lse.data_ptr())
    assert tuple(lse_again.shape) == (2, 4, 128) and lse_again.dtype == torch.float32
    assert fake.launched[-1] == _launched(q, k, v, out_again, lse_again)
    seen = []
    monkeypatch.setattr(attention_mod, "_op",
                        lambda: (lambda *a: seen.append("op") or (a[0], None)))
    qg = q.clone().requires_grad_()
    attention_mod.attention(qg, k, v)
    assert seen == ["op"]


def test_an_explicit_schedule_is_part_of_the_signature(monkeypatch):
    """A call with schedule= (scripts/gpu_attention_bench.py times the op so) repeats without
    checks too; another schedule, or none, is another signature with its own launch."""
    from argus.kernels.attention import default_schedule

    calls, fake = _stub_the_device(monkeypatch)
    q, k, v = _qkv()
    chosen = default_schedule(128, False, 128)
    for _ in range(3):
        attention_mod.attention(q, k, v, schedule=chosen)
    assert calls == {"check": 1, "prepare": 1}
    attention_mod.attention(q, k, v, schedule=dataclasses.replace(chosen, fold_scale=False))
    attention_mod.attention(q, k, v)
    # checked again; no schedule chooses `chosen`, whose launch on these buffers is prepared
    assert calls == {"check": 3, "prepare": 2}
    assert len(attention_mod._ENTRIES) == 3 and len(fake.launched) == 5


def _python_calls(fn, n=100) -> float:
    """Python function calls per call of fn (cProfile; the launch's own work is stubbed)."""
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        fn()
    profile.disable()
    return pstats.Stats(profile).total_calls / n


def _count_checked_path(monkeypatch, module, name):
    """Counts entries into module.name (the op's checked implementation) from here on."""
    entered = {"n": 0}
    real = getattr(module, name)

    def counted(*args, **kw):
        entered["n"] += 1
        return real(*args, **kw)

    monkeypatch.setattr(module, name, counted)
    return entered


def test_an_explicit_schedule_replays_like_none(monkeypatch):
    """scripts/gpu_attention_host.py read 432 us a call with schedule= against 40.9 without
    (H200, 675fb54): the replay must be what runs. With schedule= given, a repeated call never
    enters the checked implementation (_run), costs the Python calls of a call without
    schedule= (+ the schedule's __hash__ / __eq__), and an equal schedule built separately
    (dataclasses.replace: another object) takes the same entry; a changed schedule is checked
    and prepared once, then replays too."""
    from argus.kernels.attention import default_schedule

    calls, fake = _stub_the_device(monkeypatch)
    fake.decode = False          # the launch stub's own Python calls stay out of the count
    q, k, v = _qkv()
    chosen = default_schedule(128, False, 128)
    first = attention_mod.attention(q, k, v, schedule=chosen)
    attention_mod.attention(q, k, v)
    assert calls == {"check": 2, "prepare": 1}, "no schedule= is its own signature, one check"
    entered = _count_checked_path(monkeypatch, attention_mod, "_run")
    equal = dataclasses.replace(chosen)
    assert equal == chosen and equal is not chosen
    for schedule in (chosen, equal):
        again = attention_mod.attention(q, k, v, schedule=schedule)
        assert again.data_ptr() == first.data_ptr()
    with_schedule = _python_calls(lambda: attention_mod.attention(q, k, v, schedule=equal))
    without = _python_calls(lambda: attention_mod.attention(q, k, v))
    assert entered["n"] == 0 and calls == {"check": 2, "prepare": 1}, (entered, calls)
    assert with_schedule <= without + 3, \
        f"{with_schedule} Python calls a repeated call with schedule=, {without} without"
    assert len(attention_mod._ENTRIES) == 2

    other = dataclasses.replace(chosen, fold_scale=not chosen.fold_scale)
    for n in range(3):
        attention_mod.attention(q, k, v, schedule=other)
        assert entered["n"] == 1 and calls == {"check": 3, "prepare": 2}, (n, entered, calls)
    assert len(attention_mod._ENTRIES) == 3


# ----------------------------------------------------------------------------- attention_fp8

fp8_mod = importlib.import_module("argus.ops.attention_fp8")
E4M3 = torch.float8_e4m3fn
SCALES = {"q_scale": 0.5, "k_scale": 0.25, "v_scale": 2.0}


def _stub_fp8(monkeypatch):
    """attention_fp8's host path on CPU tensors: the V^T kernel's launch stubbed by a plan
    over (V, V^T) (the real one needs CUDA tensors), the attention kernel's as for bf16."""
    calls, fake = _stub_the_device(monkeypatch)
    real_check = fp8_mod.check_fp8

    def check_fp8(*args, **kw):
        calls["check"] += 1
        return real_check(*args, **{**kw, "device": False})

    def kernel_transpose(x, store, permuted, launched=None):
        calls["vt"] = calls.get("vt", 0) + 1
        plan = driver.LaunchPlan(kernel="vt", device=0, function=2, shape="stub",
                                 config=types.SimpleNamespace(),
                                 params=driver.pack_params([x, store]))
        plan()
        if launched is not None:
            launched.append(plan)
        return True

    monkeypatch.setattr(fp8_mod, "check_fp8", check_fp8)
    monkeypatch.setattr(fp8_mod, "_kernel_transpose", kernel_transpose)
    monkeypatch.setattr(fp8_mod, "_compiled", lambda *a: attention_mod._compiled())
    monkeypatch.setattr(fp8_mod, "_ENTRIES", BuildMemo())
    monkeypatch.setattr(fp8_mod, "_LAUNCHES", type(fp8_mod._LAUNCHES)())
    return calls, fake


def _qkv8(**kw):
    return tuple(t.to(E4M3) for t in _qkv(**kw))


def test_fp8_repeated_call_replays_both_launches(monkeypatch):
    """attention_fp8 repeats a signature as attention does: no check, no V^T decision, the V^T
    launch then the attention launch on the op's fresh V^T buffer; new buffers move both."""
    calls, fake = _stub_fp8(monkeypatch)
    q, k, v = _qkv8()
    out = fp8_mod.attention_fp8(q, k, v, **SCALES)
    for _ in range(3):
        again = fp8_mod.attention_fp8(q, k, v, **SCALES)
    assert calls == {"check": 1, "prepare": 1, "vt": 1}, calls
    assert again.data_ptr() == out.data_ptr() and again.dtype == torch.bfloat16
    vt = torch.empty((2, 2, 128, 256), dtype=E4M3)       # the allocator stub's V^T buffer
    assert fake.launched[-2] == (7, (v.data_ptr(), vt.data_ptr()))
    assert fake.launched[-1][1][:4] == (q.data_ptr(), k.data_ptr(), vt.data_ptr(),
                                        out.data_ptr())
    assert len(fake.launched) == 8
    q2, k2, v2 = (t.clone() for t in (q, k, v))
    fp8_mod.attention_fp8(q2, k2, v2, **SCALES)
    assert calls == {"check": 1, "prepare": 1, "vt": 1}, "moved, not prepared"
    assert fake.launched[-2] == (7, (v2.data_ptr(), vt.data_ptr()))
    assert fake.launched[-1][1][:3] == (q2.data_ptr(), k2.data_ptr(), vt.data_ptr())


@pytest.mark.parametrize("other", [
    {"q_scale": torch.tensor(0.5)},          # a tensor scale: .item() each call, never cached
    {"k_scale": 0.3},
    {"v_transposed": True},
    {"causal": True},
])
def test_fp8_other_calls_are_checked(monkeypatch, other):
    calls, _ = _stub_fp8(monkeypatch)
    q, k, v = _qkv8()
    fp8_mod.attention_fp8(q, k, v, **SCALES)
    fp8_mod.attention_fp8(q, k, v, **SCALES)
    assert calls["check"] == 1
    args = {**SCALES, **other}
    if other.get("v_transposed"):
        v = v.transpose(-1, -2).contiguous()
    for n in (2, 3):
        fp8_mod.attention_fp8(q, k, v, **args)
        assert calls["check"] == (n if "q_scale" in other else 2)


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v: (q.to(torch.bfloat16), k, v), "must all be float8_e4m3fn"),
    (lambda q, k, v: (q, k[:, :1], v), "v has shape"),
    (lambda q, k, v: (q.transpose(2, 3).contiguous().transpose(2, 3), k, v),
     "q .* cannot be read by TMA"),
])
def test_fp8_cached_signature_still_checks_a_changed_call(monkeypatch, change, words):
    _stub_fp8(monkeypatch)
    q, k, v = _qkv8()
    fp8_mod.attention_fp8(q, k, v, **SCALES)
    fp8_mod.attention_fp8(q, k, v, **SCALES)
    with pytest.raises(LaunchError, match=words):
        fp8_mod.attention_fp8(*change(q, k, v), **SCALES)


def test_fp8_an_explicit_schedule_replays(monkeypatch):
    """attention_fp8 with schedule= repeats as without it: no check, no run_fp8, the V^T and
    attention launches replayed; an equal schedule object hits the same entry, a changed one
    is checked and prepared."""
    from argus.kernels.attention import fp8_schedule

    calls, fake = _stub_fp8(monkeypatch)
    q, k, v = _qkv8()
    chosen = fp8_schedule(128, False)
    fp8_mod.attention_fp8(q, k, v, **SCALES, schedule=chosen)
    assert calls == {"check": 1, "prepare": 1, "vt": 1}, calls
    entered = _count_checked_path(monkeypatch, fp8_mod, "run_fp8")
    launched = len(fake.launched)
    for schedule in (chosen, dataclasses.replace(chosen)) * 2:
        fp8_mod.attention_fp8(q, k, v, **SCALES, schedule=schedule)
    assert entered["n"] == 0 and calls == {"check": 1, "prepare": 1, "vt": 1}, (entered, calls)
    assert len(fake.launched) == launched + 8, "V^T and attention replayed each call"
    other = dataclasses.replace(chosen, fold_scale=not chosen.fold_scale)
    for _ in range(2):
        fp8_mod.attention_fp8(q, k, v, **SCALES, schedule=other)
    assert entered["n"] == 1 and calls["check"] == 2 and calls["prepare"] == 2, (entered, calls)
