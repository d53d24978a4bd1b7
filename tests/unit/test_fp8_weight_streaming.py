"""The small-M per-tensor fp8 path (issue 18, GEMM 2: weight streaming) without a GPU: swap-AB
tiles (W rows are wgmma's M, the activations its N, the tile stored transposed), K atoms, and
split-K (gemm_fp8_partials_kernel over K-slice views into fp32 partials, then
scaled_split_k_sum_kernel adding them in slice order and applying the per-tensor scales once)
in the interpreter against a float64 reference on fresh e4m3 data at odd shapes; the verifier
with zero findings on the kernels the rule picks; the rule's picks (argus/ops/fp8_schedules.py
`weight_streaming`) checked for properties, not answers; NVRTC building them for sm_90a."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import argus as ag
from argus import dtypes
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import (BK_BYTES, Fp8GemmSchedule, gemm_fp8_kernel,
                                    gemm_fp8_partials_kernel)
from argus.kernels.split_k_sum import scaled_split_k_sum_kernel
from argus.ops import fp8_schedules, fp8_split_k
from argus.ops.fp8_schedules import Fp8Problem
from argus.ops.split_k import k_slices
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import ULP, e4m3

SMS = 132
# the benchmark's two small-M rows and held-out shapes (M 1..128, N and K 2048..28672)
BENCH = [(16, 8192, 8192), (128, 8192, 8192)]
HELD_OUT = [(1, 8192, 8192), (7, 2048, 2048), (16, 2048, 8192), (33, 7168, 2048),
            (64, 28672, 8192), (100, 4096, 14336), (128, 28672, 4096), (16, 14336, 4096),
            (96, 2048, 28672), (2, 28672, 28672)]


def _run(m, n, k, out, s: Fp8GemmSchedule, seed: int):
    """C from the interpreter as argus.ops.scaled_matmul runs schedule s (split-K: the partials
    kernel over the K-slice views, then the scaled sum), and the float64 reference."""
    rng = np.random.default_rng(seed)
    a, w = e4m3((m, k), 3.0, seed), e4m3((n, k), 0.5, seed + 1)
    sa = np.array([rng.uniform(0.1, 4.0)], np.float32)
    sb = np.array([rng.uniform(0.1, 4.0)], np.float32)
    c = torch.full((m, n), float("nan"), dtype=out.torch_dtype())
    if s.split_k == 1:
        gemm_fp8_kernel(out).interpret(a, w, sa, sb, c, s=s)
    else:
        assert fp8_split_k.why_not(k, s.split_k) is None
        parts = np.full((s.split_k, m, n), np.nan, np.float32)
        gemm_fp8_partials_kernel().interpret(k_slices(a, 1, s.split_k), k_slices(w, 1, s.split_k),
                                             parts, s=dataclasses.replace(s, split_k=1))
        assert not np.isnan(parts).any()
        scaled_split_k_sum_kernel(out, s.split_k).interpret(parts, sa, sb, c)
    scale = float(np.float32(sa[0] * sb[0]))
    acc = (a.double() @ w.double().T).numpy()
    want = dtypes.round_to((acc * scale).astype(np.float32), out)
    bound = (a.double().abs() @ w.double().abs().T).numpy() * scale
    return c.float().numpy(), want, bound, acc, scale


@pytest.mark.parametrize("m,n,k,out,s", [
    # swap-AB, K unsplit: 13 activations in a 16-column tile, N ragged against 64
    (13, 200, 512, ag.bf16, Fp8GemmSchedule(bm=64, bn=16, consumers=1, stages=3, swap_ab=True)),
    # one activation row (bn = 8), two K atoms a stage, K not a multiple of a stage (384)
    (1, 72, 384, ag.f32, Fp8GemmSchedule(bm=64, bn=8, consumers=1, stages=2, swap_ab=True,
                                         k_atoms=2)),
    # split-K 3 (slices of 128), two consumers (128 W rows), a ragged 40-column tile
    (37, 136, 384, ag.f16, Fp8GemmSchedule(bm=128, bn=40, stages=2, swap_ab=True, split_k=3)),
    # split-K 2 over 2 persistent CTAs: units of both slices walked, the ring wraps
    (24, 192, 512, ag.bf16, Fp8GemmSchedule(bm=64, bn=24, consumers=1, stages=2, swap_ab=True,
                                            split_k=2, num_sms=2, group_m=1)),
    # split-K without swap-AB (the activations as wgmma's M): the partials kernel either way
    (20, 96, 256, ag.bf16, Fp8GemmSchedule(bm=64, bn=32, consumers=1, stages=2, split_k=2)),
    # slices whose K (80) is not a whole stage: each slice's edge is zero filled, not the next's
    (9, 64, 160, ag.f32, Fp8GemmSchedule(bm=64, bn=16, consumers=1, stages=2, swap_ab=True,
                                         split_k=2)),
], ids=["swap", "m1-atoms", "split3", "split2-wrap", "split-noswap", "split-ragged-slice"])
def test_interpreter_matches_float64_reference(m, n, k, out, s):
    got, want, bound, acc, scale = _run(m, n, k, out, s, seed=m * 7 + n + k)
    assert not np.isnan(got).any()
    # one rounding of the output plus fp32 sums: at most K roundings of sums bounded by
    # sum |a||w| (the e4m3 products are exact in f32)
    tol = ULP[out.name] * np.abs(want) + (k + 16) * 2.0 ** -24 * bound + 1e-30
    assert (np.abs(got - want) <= tol).all(), float(np.max(np.abs(got - want) / tol))
    # the scales are applied (once): unscaled or twice-scaled output would be far off
    assert np.abs(got - want).max() < 0.1 * np.abs(acc * (1 - scale)).max()


def test_a_wrong_slice_order_or_a_dropped_slice_is_caught():
    """The reference check can fail: dropping the last slice's partial is far off."""
    m, n, k = 8, 64, 256
    a, w = e4m3((m, k), 3.0, 1), e4m3((n, k), 0.5, 2)
    s = Fp8GemmSchedule(bm=64, bn=8, consumers=1, stages=2, swap_ab=True)
    parts = np.zeros((2, m, n), np.float32)
    gemm_fp8_partials_kernel().interpret(k_slices(a, 1, 2), k_slices(w, 1, 2), parts, s=s)
    full = (a.double() @ w.double().T).numpy()
    np.testing.assert_allclose(parts.sum(0), full, rtol=1e-5, atol=1e-3)
    assert np.abs(parts[0] - full).max() > 1.0   # one slice alone is not the product


# ----------------------------------------------------------------------------- the rule


def _problem(m, n, k):
    return Fp8Problem(m, n, k, "bf16", True)


def _w_share(p: Fp8Problem, s: Fp8GemmSchedule) -> float:
    """W bytes the busiest SM streams (its units times a unit's W rows and K slice)."""
    w_rows, a_rows = (s.bm, s.bn) if s.swap_ab else (s.bn, s.bm)
    units = -(-p.n // w_rows) * -(-p.m // a_rows) * s.split_k
    return -(-units // SMS) * w_rows * p.k / s.split_k


@pytest.mark.parametrize("mnk", BENCH + HELD_OUT, ids=lambda t: "x".join(map(str, t)))
def test_the_rule_streams_weights_on_every_sm(mnk):
    p = _problem(*mnk)
    assert fp8_schedules.weight_bound(p)
    s = fp8_schedules.heuristic(p)
    assert s == fp8_schedules.weight_streaming(p) and s in fp8_schedules.candidates(p)
    assert s.swap_ab and s.bn >= p.m and s.epilogue == "direct"
    # promoted every promote_every_for(K) steps (issue 18's error bar) unless split-K runs it
    # (its partials kernel is the plain loop): fp8_schedules.STREAM_PROMOTE
    assert s.promote == (fp8_schedules.STREAM_PROMOTE and s.split_k == 1), s
    if s.promote:
        assert s.promote_every == fp8_schedules.promote_every_for(p.k, s.k_atoms), s
    assert s.smem_bytes <= 227 * 1024, s
    if s.split_k > 1:
        assert fp8_split_k.why_not(p.k, s.split_k) is None, s
    # SMs streaming: as many as the tile granularity allows (>= 84%: 7168 = 112 tiles of 64
    # rows is the worst of these), and the busiest SM reads at most 1.2x an even share of W
    assert fp8_schedules.busy_ctas(p, s) >= 0.84 * SMS, s
    assert _w_share(p, s) <= 1.2 * p.n * p.k / SMS, (s, _w_share(p, s) / (p.n * p.k / SMS))
    # bytes of W in flight per SM: at least the rule's floor
    assert s.stages * s.bm * BK_BYTES * s.k_atoms >= 64 * 1024, s
    # never priced worse than the rule before it (64 x 64, one consumer, 12 stages; 128 x 64)
    # beyond the rule's tie tolerance (5%: within it, more SMs streaming win)
    old = Fp8GemmSchedule(bm=64, bn=64, consumers=1, stages=12) if p.m <= 64 else \
        Fp8GemmSchedule(bm=128, bn=64, stages=8)
    assert fp8_schedules.stream_cost(p, s) <= 1.05 * fp8_schedules.stream_cost(p, old)


def test_the_rule_splits_k_when_the_tiles_leave_sms_idle():
    """N = 2048 is 32 tiles of 64 W rows: unsplit, 100 SMs would idle; the rule splits K until
    about every SM has a unit, and does not split where the tiles already fill the SMs."""
    narrow = fp8_schedules.heuristic(_problem(16, 2048, 8192))
    assert narrow.split_k > 1 and fp8_schedules.busy_ctas(_problem(16, 2048, 8192), narrow) \
        >= 0.9 * SMS
    wide = fp8_schedules.heuristic(_problem(16, 28672, 4096))
    assert wide.split_k == 1


def test_the_rule_is_not_a_table():
    """Shapes the rule never saw get picks with the same properties (a sweep; at the small
    ones, 3072 x 2048 = 6 MB of weights, the partials and the sum's launch weigh enough that
    96 busy CTAs can be the cheapest)."""
    for m in (1, 5, 31, 64, 77, 128):
        for n in (2048, 3072, 12288, 28672):
            for k in (2048, 5120, 28672):
                p = _problem(m, n, k)
                s = fp8_schedules.heuristic(p)
                assert s.swap_ab and s.bn >= m and s.smem_bytes <= 227 * 1024, (p, s)
                assert fp8_schedules.busy_ctas(p, s) >= 0.7 * SMS, (p, s)
                assert s.split_k == 1 or fp8_split_k.why_not(k, s.split_k) is None


def test_past_the_weight_bound_the_rule_is_the_old_one():
    p = _problem(200, 8192, 8192)
    assert not fp8_schedules.weight_bound(p)
    assert fp8_schedules.heuristic(p) == Fp8GemmSchedule(bm=128, bn=64, stages=8)
    assert not fp8_schedules.weight_bound(Fp8Problem(16, 8192, 8192, "bf16", True, True))


def test_split_schedules_are_refused_where_they_cannot_run():
    with pytest.raises(ValueError, match="promote=False"):
        Fp8GemmSchedule(bm=64, bn=16, consumers=1, swap_ab=True, split_k=2, promote=True)
    with pytest.raises(ValueError, match="interval_promoted_mma"):
        Fp8GemmSchedule(bm=64, bn=16, consumers=1, swap_ab=True, promote=True, late_release=True)
    with pytest.raises(ValueError, match="epilogue='direct'"):
        Fp8GemmSchedule(bm=64, bn=16, consumers=1, split_k=2, epilogue="tma")
    with pytest.raises(ValueError, match="outside 1..16"):
        Fp8GemmSchedule(bm=64, bn=16, consumers=1, split_k=17)
    assert "multiple of 16" in fp8_split_k.why_not(8 * 24, 8)   # slices of 24 e4m3
    assert "not a multiple" in fp8_split_k.why_not(1000, 3)
    assert fp8_split_k.why_not(8192, 4) is None
    with pytest.raises(ag.TraceError, match="scaled_matmul"):
        gemm_fp8_kernel(ag.bf16).trace(s=Fp8GemmSchedule(bm=64, bn=16, consumers=1,
                                                         split_k=2))
    # a tuned entry with a split K cannot tile is ignored, not run
    assert fp8_schedules.choose(_problem(16, 8192, 8192), None).split_k in range(1, 17)


def test_old_schedule_keys_are_unchanged():
    """The new fields stay out of repr at their defaults (tuning cache keys, golden hashes)."""
    assert repr(Fp8GemmSchedule(bm=64, bn=64, consumers=1, stages=12)).endswith(
        "ordered_epilogue=False, promote=False)")
    r = repr(Fp8GemmSchedule(bm=64, bn=16, consumers=1, swap_ab=True, split_k=2, k_atoms=2))
    assert r.endswith("k_atoms=2, split_k=2, swap_ab=True)")


# ----------------------------------------------------------------------------- verifier


def _picked_kernels():
    """(name, lowered kernel) of every kernel the rule picks on the benchmark and held-out
    shapes: the unsplit swap-AB kernel, or the partials kernel and the scaled sum."""
    seen = {}
    for mnk in BENCH + HELD_OUT[:4]:
        s = fp8_schedules.heuristic(_problem(*mnk))
        if s.split_k == 1:
            seen[repr(s)] = (gemm_fp8_kernel(ag.bf16), s)
        else:
            seen[repr(s)] = (gemm_fp8_partials_kernel(), dataclasses.replace(s, split_k=1))
            seen[f"sum{s.split_k}"] = (scaled_split_k_sum_kernel(ag.bf16, s.split_k), None)
    return list(seen.items())


@pytest.mark.parametrize("name,kernel_schedule", _picked_kernels(), ids=lambda v: str(v)[:60])
def test_picked_kernels_verify_with_zero_findings(name, kernel_schedule):
    from argus import verify

    kernel, s = kernel_schedule
    report = verify.run(lower_only(kernel, s=s) if s is not None else lower_only(kernel))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)
    if s is not None:
        assert any(d.code == "wgmma.k-once" for d in report.proven)


# ----------------------------------------------------------------------------- NVRTC


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,kernel_schedule", _picked_kernels(), ids=lambda v: str(v)[:60])
def test_picked_kernels_build_for_sm90a_without_spills(name, kernel_schedule):
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    kernel, s = kernel_schedule
    source = codegen.render(lower_only(kernel, s=s) if s is not None else lower_only(kernel))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a"
    if s is not None:
        assert "wgmma.mma_async.sync.aligned.m64n" in binary.ptx and ".e4m3.e4m3" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills and res.stack_frame == 0, res.summary()


# ----------------------------------------------------------------------------- the op


class _Interpreted:
    """A compiled kernel whose launches run in the interpreter (CPU tensors): a call, and the
    plan a call prepared (replays read the same buffers again), as CompiledKernel has them."""

    def __init__(self, kernel, constexprs, log):
        self.kernel, self.constexprs, self.log = kernel, constexprs, log
        self.seen = set()

    def __call__(self, *tensors):
        self.log.append(("call", self.kernel.name))
        self.seen.add(tuple(t.data_ptr() for t in tensors))
        self.kernel.interpret(*tensors, **self.constexprs)

    def plan_for(self, *tensors):
        if tuple(t.data_ptr() for t in tensors) not in self.seen:
            return None

        def replay():
            self.log.append(("replay", self.kernel.name))
            self.kernel.interpret(*tensors, **self.constexprs)
        return replay


def test_the_op_runs_split_k_and_replays_it(monkeypatch):
    """argus.ops.scaled_matmul with a split-K schedule on CPU tensors (the device check
    stubbed, the kernels interpreted): K-slice views, the fp32 workspace, the scaled sum;
    a repeat call on the same buffers replays both kernels (the launch memo) and reads the
    new data there; the result matches float64 both times."""
    import sys

    import argus.ops  # noqa: F401 - loads argus.ops.scaled_matmul
    from argus.ops import fp8_split_k as fsk

    sm = sys.modules["argus.ops.scaled_matmul"]
    log: list = []

    class _Kernel:
        def __init__(self, fn):
            self.fn = fn

        def compile(self, **constexprs):
            return _Interpreted(self.fn, constexprs, log)

    s = Fp8GemmSchedule(bm=64, bn=16, consumers=1, stages=3, swap_ab=True, split_k=2)
    monkeypatch.setattr(sm, "check_on_one_gpu", lambda who, named: None)
    monkeypatch.setattr(sm, "choose", lambda problem, gpu: s)
    monkeypatch.setattr(sm, "device_name", lambda device: "fake GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    monkeypatch.setattr(fsk, "gemm_fp8_partials_kernel",
                        lambda: _Kernel(gemm_fp8_partials_kernel()))
    monkeypatch.setattr(fsk, "scaled_split_k_sum_kernel",
                        lambda out, splits: _Kernel(scaled_split_k_sum_kernel(out, splits)))
    sm.forget_choices()
    try:
        m, n, k = 11, 136, 512
        a, w = e4m3((m, k), 3.0, 21), e4m3((n, k), 0.5, 22)
        sa, sb = torch.tensor([0.25]), torch.tensor([1.5])
        out = torch.full((m, n), float("nan"), dtype=torch.float32)

        def check():
            want = (a.double() @ w.double().T).numpy() * float(np.float32(sa[0] * sb[0]))
            bound = (a.double().abs() @ w.double().abs().T).numpy() * float(sa[0] * sb[0])
            err = np.abs(out.numpy() - want)
            assert (err <= ULP["f32"] * np.abs(want) + k * 2.0 ** -24 * bound + 1e-30).all()

        sm.scaled_matmul(a, w, sa, sb, out=out)
        check()
        assert [name for _, name in log] == ["gemm_fp8_partials", "scaled_split_k_sum_f32_2"]
        log.clear()
        a.copy_(e4m3((m, k), 3.0, 23))      # new data in the same buffers, a new scale
        sa.fill_(0.75)
        out.fill_(float("nan"))
        sm.scaled_matmul(a, w, sa, sb, out=out)
        check()
        assert log == [("replay", "gemm_fp8_partials"), ("replay", "scaled_split_k_sum_f32_2")]
    finally:
        sm.forget_choices()


def test_a_split_k_launch_is_neither_replayed_nor_kept_while_a_graph_is_captured(monkeypatch):
    """A remembered split-K launch owns its fp32 workspace, which the memo frees when it drops
    the launch (least recently used, or forget_choices): replayed inside a CUDA graph capture
    the graph would keep writing the freed address. So while a capture runs the op neither
    replays nor remembers a split-K launch (argus.ops.matmul's rule for its split-K memo); it
    launches the two kernels afresh, whose workspace the capture's own pool holds."""
    import sys

    import argus.ops  # noqa: F401 - loads argus.ops.scaled_matmul
    from argus.ops import fp8_split_k as fsk

    sm = sys.modules["argus.ops.scaled_matmul"]
    log: list = []

    class _Kernel:
        def __init__(self, fn):
            self.fn = fn

        def compile(self, **constexprs):
            return _Interpreted(self.fn, constexprs, log)

    s = Fp8GemmSchedule(bm=64, bn=16, consumers=1, stages=3, swap_ab=True, split_k=2)
    capturing = [False]
    monkeypatch.setattr(sm, "check_on_one_gpu", lambda who, named: None)
    monkeypatch.setattr(sm, "choose", lambda problem, gpu: s)
    monkeypatch.setattr(sm, "device_name", lambda device: "fake GPU")
    monkeypatch.setattr(sm, "_capture_on", lambda t: capturing[0])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    monkeypatch.setattr(fsk, "gemm_fp8_partials_kernel",
                        lambda: _Kernel(gemm_fp8_partials_kernel()))
    monkeypatch.setattr(fsk, "scaled_split_k_sum_kernel",
                        lambda out, splits: _Kernel(scaled_split_k_sum_kernel(out, splits)))
    sm.forget_choices()
    try:
        m, n, k = 5, 64, 256
        a, w = e4m3((m, k), 3.0, 31), e4m3((n, k), 0.5, 32)
        sa, sb = torch.tensor([0.5]), torch.tensor([2.0])
        out = torch.empty((m, n), dtype=torch.float32)
        fresh = ["call", "call"]
        sm.scaled_matmul(a, w, sa, sb, out=out)             # remembered (not capturing)
        assert [kind for kind, _ in log] == fresh
        log.clear()
        capturing[0] = True
        sm.scaled_matmul(a, w, sa, sb, out=out)             # a capture: no replay
        assert [kind for kind, _ in log] == fresh, log
        sm.forget_choices()
        log.clear()
        sm.scaled_matmul(a, w, sa, sb, out=out)             # captured: not remembered
        capturing[0] = False
        log.clear()
        sm.scaled_matmul(a, w, sa, sb, out=out)
        assert [kind for kind, _ in log] == fresh, log
    finally:
        sm.forget_choices()


def test_split_k_launches_are_kept_in_a_small_memo_that_owns_the_workspaces(monkeypatch):
    """A remembered split-K launch owns its [S, M, N] fp32 workspace. Calls into many distinct
    `out` buffers keep at most matmul's _SPLIT_MEMO_SIZE of them (scaled_matmul's
    _SPLIT_LAUNCHES, least recently used first out), none in the 512-entry _LAUNCHES, and the
    compiled Fp8SplitK (kept in _CHOSEN for good) holds none; prepared_launch hands back the
    remembered split launch, which replays both kernels."""
    import gc
    import sys
    import weakref

    import argus.ops  # noqa: F401 - loads argus.ops.scaled_matmul
    from argus.ops import fp8_split_k as fsk
    from argus.ops.matmul import _SPLIT_MEMO_SIZE

    sm = sys.modules["argus.ops.scaled_matmul"]
    log: list = []
    workspaces: list = []
    real_empty = torch.empty

    def tracked_empty(*args, **kwargs):      # the op's own allocations, weakly referenced
        t = real_empty(*args, **kwargs)
        if kwargs.get("dtype") is torch.float32 and len(args) == 3:
            workspaces.append(weakref.ref(t))
        return t

    class _Kernel:
        def __init__(self, fn):
            self.fn = fn

        def compile(self, **constexprs):
            return _Interpreted(self.fn, constexprs, log)

    s = Fp8GemmSchedule(bm=64, bn=16, consumers=1, stages=3, swap_ab=True, split_k=2)
    monkeypatch.setattr(sm, "check_on_one_gpu", lambda who, named: None)
    monkeypatch.setattr(sm, "choose", lambda problem, gpu: s)
    monkeypatch.setattr(sm, "device_name", lambda device: "fake GPU")
    monkeypatch.setattr(torch.cuda, "current_device", lambda: None)
    monkeypatch.setattr(torch, "empty", tracked_empty)
    monkeypatch.setattr(fsk, "gemm_fp8_partials_kernel",
                        lambda: _Kernel(gemm_fp8_partials_kernel()))
    monkeypatch.setattr(fsk, "scaled_split_k_sum_kernel",
                        lambda out, splits: _Kernel(scaled_split_k_sum_kernel(out, splits)))
    sm.forget_choices()
    try:
        m, n, k = 1, 16, 64
        a, w = e4m3((m, k), 3.0, 41), e4m3((n, k), 0.5, 42)
        sa, sb = torch.tensor([0.5]), torch.tensor([2.0])
        outs = [real_empty((m, n), dtype=torch.float32) for _ in range(_SPLIT_MEMO_SIZE + 8)]
        for out in outs:
            sm.scaled_matmul(a, w, sa, sb, out=out)
        assert len(sm._SPLIT_LAUNCHES) == _SPLIT_MEMO_SIZE
        assert not any(getattr(v, "owns_workspace", False) for v in sm._LAUNCHES.values())
        gc.collect()
        alive = [r for r in workspaces if r() is not None]
        assert len(workspaces) == len(outs) and len(alive) == _SPLIT_MEMO_SIZE, \
            f"{len(alive)} of {len(workspaces)} split-K workspaces alive"
        log.clear()
        plan = sm.prepared_launch(a, w, sa, sb, outs[-1])
        assert plan is not None and sm.prepared_launch(a, w, sa, sb, outs[0]) is None
        plan()                                              # both kernels, no new workspace
        assert log == [("replay", "gemm_fp8_partials"), ("replay", "scaled_split_k_sum_f32_2")]
        assert len(workspaces) == len(outs)
    finally:
        sm.forget_choices()


def test_a_split_k_replay_on_another_stream_records_the_workspace_there(monkeypatch):
    """The caching allocator reuses a freed block on its allocation's stream without waiting
    for others: a replay on another stream must record_stream the workspace there (and only
    there: on the home stream it needs nothing). Fake streams, no GPU."""
    from argus.ops import fp8_split_k as fsk

    class _Stream:
        def __init__(self, raw):
            self.cuda_stream = raw

    class _Workspace:
        device = "cuda:0"

        def __init__(self):
            self.recorded = []

        def record_stream(self, stream):
            self.recorded.append(stream.cuda_stream)

    current = [_Stream(7)]
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[0])
    ws = _Workspace()
    fsk._record_foreign_stream(ws, 7)           # the stream it was allocated on
    assert ws.recorded == []
    current[0] = _Stream(9)
    fsk._record_foreign_stream(ws, 7)
    assert ws.recorded == [9]
    fsk._record_foreign_stream(ws, None)        # off CUDA (the interpreter): nothing to record
    assert ws.recorded == [9]
