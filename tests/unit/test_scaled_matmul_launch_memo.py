"""argus.ops.scaled_matmul's launch memo (`_LAUNCHES`) without a GPU: a repeat call into the
same `out` on the same buffers goes straight to the prepared launch (no checks, no choice);
a call that differs in anything a check reads (dtype, shape, strides, scale kind, out_dtype)
still gets the checked path's error, word for word (with `out` and with out=None); new
pointers and new scale tensors get their own launch; copied operands, a new choice
(forget_choices) and the smem-scales kill switch are never skipped; out=None calls get a new
`out` every time. The device check is stubbed (CPU tensors) and the kernel is a fake
that records the pointers each launch reads."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

import argus.ops  # noqa: F401 - loads argus.ops.scaled_matmul
from argus.errors import LaunchError
from argus.kernels.gemm_fp8 import Fp8GemmSchedule

sm = sys.modules["argus.ops.scaled_matmul"]   # argus.ops.scaled_matmul is the function
FP8 = torch.float8_e4m3fn


class _Compiled:
    """A compiled kernel's launch interface: a call (CompiledKernel.__call__: its own plan
    lookup) and the plan a call prepared, each recording the data pointers it launches with."""

    def __init__(self, log):
        self.log = log

    def __call__(self, *tensors):
        self.log["called"].append(tuple(t.data_ptr() for t in tensors))

    def plan_for(self, *tensors):
        ptrs = tuple(t.data_ptr() for t in tensors)
        return lambda: self.log["replayed"].append(ptrs)


class _Kernel:
    def __init__(self, log):
        self.log = log

    def compile(self, s):
        self.log["compiled"].append(s)
        return _Compiled(self.log)


@pytest.fixture
def op(monkeypatch):
    """The op on CPU tensors: the device check passes, the choice is a fixed schedule (block
    scales: a promoting one), every kernel is a _Kernel; returns the log of what ran."""
    log = {"called": [], "replayed": [], "compiled": [], "checks": 0, "chosen": 0}
    real_check = sm._check

    def counted_check(*args):
        log["checks"] += 1
        return real_check(*args)

    def choose(problem, gpu):
        log["chosen"] += 1
        return Fp8GemmSchedule(bm=128, bn=64, stages=8, promote=problem.block_scaled)

    monkeypatch.setattr(sm, "check_on_one_gpu", lambda who, named: None)
    monkeypatch.setattr(sm, "_check", counted_check)
    monkeypatch.setattr(sm, "choose", choose)
    monkeypatch.setattr(sm, "device_name", lambda device: "fake GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)  # a CPU tensor's index
    for name in ("gemm_fp8_kernel", "gemm_fp8_blockscaled_kernel",
                 "gemm_fp8_blockscaled_smem_kernel"):
        monkeypatch.setattr(sm, name, lambda out_type: _Kernel(log))
    sm.forget_choices()
    yield log
    sm.forget_choices()


def _operands(m=128, n=128, k=128):
    a = torch.zeros(m, k, dtype=FP8)
    w = torch.zeros(n, k, dtype=FP8)
    return a, w, torch.tensor(0.5), torch.tensor(0.25), torch.zeros(m, n, dtype=torch.bfloat16)


def _ptrs(*tensors):
    return tuple(t.data_ptr() for t in tensors)


def test_a_repeat_call_replays_the_launch_without_the_checks(op):
    a, w, sa, sb, out = _operands()
    assert sm.scaled_matmul(a, w, sa, sb, out=out) is out
    assert sm.scaled_matmul(a, w, sa, sb, out=out) is out
    assert sm.scaled_matmul(a, w, sa, sb, out=out) is out
    launched = _ptrs(a, w, sa, sb, out)   # the scales' [1] views share their storage
    assert op["called"] == [launched] and op["replayed"] == [launched, launched]
    assert op["checks"] == 1 and op["chosen"] == 1 and len(op["compiled"]) == 1


def _bad_calls():
    """Calls that are wrong in one property each, built on the good call's storage where they
    can be (same pointers: only the property the key must hold tells them apart), with the
    error the checked path gives. Square operands, so a transposed view keeps the shape."""
    def case(name, make, message):
        return name, make, message

    return [
        case("a int8", lambda a, w, sa, sb, out: ((a.view(torch.int8), w, sa, sb), {"out": out}),
             "a must be torch.float8_e4m3fn, got torch.int8"),
        case("b e5m2", lambda a, w, sa, sb, out:
             ((a, w.view(torch.float8_e5m2), sa, sb), {"out": out}), "e5m2 is not supported"),
        case("a 3-d", lambda a, w, sa, sb, out: ((a[None], w, sa, sb), {"out": out}),
             "a must be 2-d"),
        case("a N-major", lambda a, w, sa, sb, out: ((a.t(), w, sa, sb), {"out": out}),
             r"a \(128, 128\) has strides \(1, 128\)"),
        case("b is W.t()", lambda a, w, sa, sb, out: ((a, w.t(), sa, sb), {"out": out}),
             "If this is torch._scaled_mm's b = W.t\\(\\), pass W"),
        case("K mismatch", lambda a, w, sa, sb, out: ((a, w[:64, :64], sa, sb), {"out": out}),
             "do not match"),
        case("scale_a int32", lambda a, w, sa, sb, out:
             ((a, w, sa.view(torch.int32), sb), {"out": out}), "scale_a must be float32"),
        case("scale_b float64", lambda a, w, sa, sb, out:
             ((a, w, sa, sb.double()), {"out": out}), "scale_b must be float32"),
        case("scale_a a float", lambda a, w, sa, sb, out: ((a, w, 0.5, sb), {"out": out}),
             "scale_a must be a torch.Tensor, got float"),
        # a block-shaped scale_a [M, K/128] over the per-tensor scale's storage, with a
        # per-tensor scale_b: the kinds mixed
        case("scale kinds mixed", lambda a, w, sa, sb, out:
             ((a, w, sa.expand(128, 1), sb), {"out": out}), r"scale_b has shape \(\)"),
        case("out_dtype disagrees", lambda a, w, sa, sb, out:
             ((a, w, sa, sb), {"out": out, "out_dtype": torch.float16}),
             "out is torch.bfloat16 but out_dtype is torch.float16"),
        case("out_dtype int8", lambda a, w, sa, sb, out:
             ((a, w, sa, sb), {"out": out, "out_dtype": torch.int8}),
             "out_dtype must be torch.bfloat16"),
        case("out shape", lambda a, w, sa, sb, out: ((a, w, sa, sb), {"out": out[:, :64]}),
             r"out has shape \(128, 64\)"),
        case("out N-major", lambda a, w, sa, sb, out: ((a, w, sa, sb), {"out": out.t()}),
             "out needs a contiguous last dimension"),
        case("out overlaps scale_a", lambda a, w, sa, sb, out:
             ((a, w, out.view(torch.float32)[0, 0], sb), {"out": out}),
             "out shares memory with an input"),
    ]


def _bad_call_params():
    """Each bad call with the good call into `out`, and with out=None where the bad call is
    not about `out` itself (the cases named "out ...")."""
    return [pytest.param(make, message, with_out, id=f"{name}-{'out' if with_out else 'new'}")
            for name, make, message in _bad_calls()
            for with_out in ((True,) if name.startswith("out") else (True, False))]


@pytest.mark.parametrize("make, message, with_out", _bad_call_params())
def test_a_remembered_launch_never_skips_a_check(op, make, message, with_out):
    a, w, sa, sb, out = _operands()
    args, kwargs = make(a, w, sa, sb, out)
    good = {"out": out} if with_out else {}
    if not with_out:
        kwargs.pop("out")
    with pytest.raises(LaunchError, match=message) as fresh:   # nothing remembered yet
        sm.scaled_matmul(*args, **kwargs)
    sm.scaled_matmul(a, w, sa, sb, **good)
    sm.scaled_matmul(a, w, sa, sb, **good)
    assert op["checks"] == 2 and len(op["called"]) + len(op["replayed"]) == 2, \
        "the good call was not remembered: the test proves nothing"
    with pytest.raises(LaunchError) as remembered:
        sm.scaled_matmul(*args, **kwargs)
    assert str(remembered.value) == str(fresh.value)


def test_a_scale_of_the_other_kind_on_the_same_storage_is_checked(op):
    # scale_a [1, 1] and [128, 1] views of one buffer: the same pointer, dtype and strides;
    # only the shape says the second is a block scale (mixed with a per-tensor scale_b)
    buf = torch.ones(128, 1)
    a, w, _, sb, out = _operands()
    sm.scaled_matmul(a, w, buf[:1], sb, out=out)
    sm.scaled_matmul(a, w, buf[:1], sb, out=out)
    assert len(op["replayed"]) == 1
    with pytest.raises(LaunchError, match=r"scale_b has shape \(\); per-tensor scales"):
        sm.scaled_matmul(a, w, buf, sb, out=out)


def test_new_pointers_and_new_scales_get_their_own_launch(op):
    a, w, sa, sb, out = _operands()
    sm.scaled_matmul(a, w, sa, sb, out=out)
    a2, sa2, sb2 = torch.zeros_like(a), torch.tensor(2.0), torch.tensor(4.0)
    sm.scaled_matmul(a2, w, sa, sb, out=out)
    sm.scaled_matmul(a, w, sa2, sb2, out=out)
    assert op["called"] == [_ptrs(a, w, sa, sb, out), _ptrs(a2, w, sa, sb, out),
                             _ptrs(a, w, sa2, sb2, out)] and op["replayed"] == []
    sm.scaled_matmul(a2, w, sa, sb, out=out)
    sm.scaled_matmul(a, w, sa2, sb2, out=out)
    sm.scaled_matmul(a, w, sa, sb, out=out)
    # each replay launches the buffers of its own call (the scales by pointer: the kernel reads
    # their values on the device, so a scale updated in place is read at the next launch)
    assert op["replayed"] == [_ptrs(a2, w, sa, sb, out), _ptrs(a, w, sa2, sb2, out),
                              _ptrs(a, w, sa, sb, out)]
    assert len(op["compiled"]) == 1     # one problem: one kernel, three launches


def test_a_schedule_or_out_dtype_gets_its_own_launch(op):
    a, w, sa, sb, out = _operands()
    other = Fp8GemmSchedule(bm=128, bn=128, stages=6)
    sm.scaled_matmul(a, w, sa, sb, out=out)
    sm.scaled_matmul(a, w, sa, sb, out=out, schedule=other)
    sm.scaled_matmul(a, w, sa, sb, out=out, out_dtype=torch.bfloat16)
    assert len(op["called"]) == 3 and op["replayed"] == []
    assert op["compiled"][1] == other


def test_copied_operands_take_the_checked_path_every_time(op):
    # a row pitch of 136 bytes is not 16-byte aligned: TMA cannot read a, the op copies it
    base = torch.zeros(128, 136, dtype=FP8)
    a = base[:, :128]
    _, w, sa, sb, out = _operands()
    for _ in range(3):
        sm.scaled_matmul(a, w, sa, sb, out=out)
    assert op["checks"] == 3 and len(op["called"]) == 3 and op["replayed"] == []
    assert op["called"][0][0] != a.data_ptr()   # the copy was launched, not a


def test_block_scales_are_remembered_only_when_read_in_place(op):
    a, w, _, _, out = _operands(128, 256, 256)
    scale_b = torch.ones(2, 2)
    mn_major = torch.ones(2, 128).t()           # [M, K/128] with stride(0) == 1: read in place
    row_major = torch.ones(128, 2)              # transposed into a copy on every call
    for _ in range(2):
        sm.scaled_matmul(a, w, mn_major, scale_b, out=out)
    assert len(op["called"]) == 1 and len(op["replayed"]) == 1
    for _ in range(2):
        sm.scaled_matmul(a, w, row_major, scale_b, out=out)
    assert len(op["called"]) == 3 and len(op["replayed"]) == 1


def test_forget_choices_drops_the_launches(op):
    a, w, sa, sb, out = _operands()
    sm.scaled_matmul(a, w, sa, sb, out=out)
    sm.forget_choices()          # what tune_scaled_matmul calls after storing a new choice
    sm.scaled_matmul(a, w, sa, sb, out=out)
    assert op["chosen"] == 2 and len(op["called"]) == 2 and op["replayed"] == []


def test_the_smem_scales_kill_switch_stops_a_remembered_launch(op, monkeypatch):
    # K/128 = 4 scales per row: 16-byte rows, read in place by the smem-scales kernel
    a, w, _, _, out = _operands(128, 128, 512)
    scale_a, scale_b = torch.ones(128, 4), torch.ones(1, 4)
    smem = Fp8GemmSchedule(bm=128, bn=64, stages=4, promote=True, smem_scales=True)
    sm.scaled_matmul(a, w, scale_a, scale_b, out=out, schedule=smem)
    sm.scaled_matmul(a, w, scale_a, scale_b, out=out, schedule=smem)
    assert len(op["replayed"]) == 1
    monkeypatch.setattr(sm, "SMEM_SCALES_ON_DEVICE", False)
    with pytest.raises(LaunchError, match="kill switch"):
        sm.scaled_matmul(a, w, scale_a, scale_b, out=out, schedule=smem)
    assert len(op["replayed"]) == 1


def test_out_none_gets_a_new_out_every_call_without_the_checks(op):
    a, w, sa, sb, _ = _operands(128, 256, 128)
    first = sm.scaled_matmul(a, w, sa, sb)
    second = sm.scaled_matmul(a, w, sa, sb)
    half = [sm.scaled_matmul(a, w, sa, sb, out_dtype=torch.float16) for _ in range(2)]
    assert op["checks"] == 2 and op["chosen"] == 2 and op["replayed"] == []
    assert first.dtype == second.dtype == torch.bfloat16
    assert half[0].dtype == half[1].dtype == torch.float16      # out_dtype: a key of its own
    assert first.shape == second.shape == half[1].shape == (128, 256)
    assert second.data_ptr() != first.data_ptr()     # both alive: two buffers
    # every call launches through the compiled kernel with its own new out
    assert op["called"] == [_ptrs(a, w, sa, sb, o) for o in (first, second, *half)]
    a2 = torch.zeros_like(a)
    sm.scaled_matmul(a2, w, sa, sb)
    assert op["checks"] == 3 and op["called"][-1][0] == a2.data_ptr()


def test_out_none_block_scales_replay_their_views(op):
    a, w, _, _, _ = _operands(128, 256, 256)
    scale_a, scale_b = torch.ones(2, 128).t(), torch.ones(2, 2)    # read in place
    for _ in range(3):
        sm.scaled_matmul(a, w, scale_a, scale_b)
    assert op["checks"] == 1 and len(op["called"]) == 3
    assert {c[2] for c in op["called"]} == {scale_a.data_ptr()}


def test_the_kill_switch_runs_the_ops_own_smem_pick_without_smem_scales(op, monkeypatch):
    """The op's own pick may have smem_scales (the block-scaled default at M >= 4096 since
    940417e, or a tuned entry): with the switch off it runs that schedule reading the scales
    from global memory instead of refusing a schedule the caller never passed; one picked
    before the switch went off is not replayed nor reused."""
    a, w, _, _, out = _operands(128, 128, 512)
    # row-major: the smem-scales kernel reads it in place, the other one from a copy
    scale_a, scale_b = torch.ones(128, 4), torch.ones(1, 4)
    smem = Fp8GemmSchedule(bm=128, bn=64, stages=4, promote=True, smem_scales=True)
    monkeypatch.setattr(sm, "choose", lambda problem, gpu: smem)
    sm.scaled_matmul(a, w, scale_a, scale_b, out=out)
    sm.scaled_matmul(a, w, scale_a, scale_b, out=out)
    assert op["compiled"] == [smem] and len(op["replayed"]) == 1
    monkeypatch.setattr(sm, "SMEM_SCALES_ON_DEVICE", False)
    for _ in range(2):
        sm.scaled_matmul(a, w, scale_a, scale_b, out=out)
    assert op["compiled"][1:] == [Fp8GemmSchedule(bm=128, bn=64, stages=4, promote=True)]
    assert len(op["replayed"]) == 1 and len(op["called"]) == 3   # checked: scale_a copied
    with pytest.raises(LaunchError, match="kill switch"):      # the caller's smem schedule
        sm.scaled_matmul(a, w, scale_a, scale_b, out=out, schedule=smem)


def test_the_ops_smem_pick_follows_the_callers_scale_a_layout(op, monkeypatch):
    """The op's own smem-scales pick (the block-scaled default at M >= 4096) reads scale_a
    K-major; an MN-major scale_a (DeepGEMM's layout, the docstring's advice) would be copied on
    every call, so the op runs the split that reads it in place (review of 940417e). A
    schedule the caller passes is run as given."""
    from argus.ops import fp8_schedules

    a, w, _, _, out = _operands(128, 128, 512)
    smem = fp8_schedules._SPLIT_256_SMEM_TMA
    monkeypatch.setattr(sm, "choose", lambda problem, gpu: smem)
    kmajor = torch.ones(128, 4)
    mn_major = torch.ones(4, 128).t()          # scale_a.stride(0) == 1
    scale_b = torch.ones(1, 4)
    sm.scaled_matmul(a, w, kmajor, scale_b, out=out)
    sm.scaled_matmul(a, w, mn_major, scale_b, out=out)
    assert op["compiled"] == [smem, fp8_schedules._SPLIT_256_TMA]
    assert not op["compiled"][1].smem_scales and op["compiled"][1].stages == 4
    sm.scaled_matmul(a, w, mn_major, scale_b, out=out, schedule=smem)   # as given
    assert op["compiled"][2] == smem
    # the two layouts keep their own kernels: K-major again is not recompiled
    sm.scaled_matmul(a, w, torch.ones(128, 4), scale_b, out=out)
    assert len(op["compiled"]) == 3


def test_prepared_launch_finds_the_plan_the_ops_call_prepared(op):
    """`prepared_launch` (scripts/gpu_fp8_bench.py's kernel-alone row) reads `_CHOSEN` with the
    op's own key (`_memo_key`): after 82f8a20 added scale_a's layout to the op's key and not to
    prepared_launch's, it answered None after every call, and the bench dropped the row."""
    a, w, sa, sb, out = _operands()
    assert sm.prepared_launch(a, w, sa, sb, out) is None           # no call yet
    sm.scaled_matmul(a, w, sa, sb, out=out)
    plan = sm.prepared_launch(a, w, sa, sb, out)
    assert plan is not None
    plan()
    assert op["replayed"] == [_ptrs(a, w, sa, sb, out)]
