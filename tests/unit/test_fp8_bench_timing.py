"""scripts/gpu_fp8_bench.py's per-tensor comparison without a GPU: ours and torch._scaled_mm
timed in alternating rounds (the order reversed every other round), the ratio the median of
the rounds' ratios with its spread, the error verdict able to fail, the table marking WRONG
rows; argus.ops.scaled_matmul.prepared_launch answers None where there is no plan to time."""

from __future__ import annotations

import sys

import pytest
import torch

from tests.loading import load_script

BENCH = load_script("gpu_fp8_bench")


def test_rounds_alternate_the_order_and_keep_each_sides_times():
    order = []
    fns = {name: (lambda name=name: order.append(name)) for name in ("ours", "torch", "fast")}
    ms = iter(range(1, 100))

    def time_one(fn):
        fn()
        return float(next(ms))

    rounds = BENCH.alternate(fns, 4, time_one)
    assert order == ["ours", "torch", "fast", "fast", "torch", "ours"] * 2
    assert rounds == {"ours": [1.0, 6.0, 7.0, 12.0], "torch": [2.0, 5.0, 8.0, 11.0],
                      "fast": [3.0, 4.0, 9.0, 10.0]}


def test_the_ratio_is_the_median_of_the_rounds_with_its_spread():
    # one round where torch was slowed (a host hiccup) moves the mean, not the median
    s = BENCH.ratio_summary([100.0, 100.0, 300.0, 100.0, 100.0], [90.0, 95.0, 100.0, 100.0,
                                                                  110.0])
    assert s["ratio"] == pytest.approx(100 / 95)
    assert s["ratio_min"] == pytest.approx(100 / 110) and s["ratio_max"] == pytest.approx(3.0)
    assert s["ours_ms"] == 100.0 and s["theirs_ms"] == 100.0


@pytest.mark.parametrize("err, torch_err, ok", [
    (2.5e-3, 1.7e-3, True),       # ours without promotion, as measured
    (3.9e-3, 1.7e-3, True),       # within the absolute bound
    (4.5e-3, 1.7e-3, False),      # twice torch's and over 4e-3: a wrong kernel
    (1.2e-2, 1.7e-3, False),      # a scale or K step wrong
    (float("nan"), 1.7e-3, False),  # a tile never written (the output is NaN-filled)
])
def test_the_error_verdict_can_fail(err, torch_err, ok):
    assert BENCH.error_ok(err, torch_err) is ok


def test_the_table_shows_the_spread_the_launch_and_wrong_rows():
    row = {"M": 4096, "N": 4096, "K": 4096, "ours_tflops": 1300.0, "torch_tflops": 1250.0,
           "ratio": 1.04, "ratio_min": 0.99, "ratio_max": 1.07, "torch_fast_tflops": 1320.0,
           "ratio_fast": 0.98, "ours_ms": 0.1057, "ours_launch_ms": 0.1031,
           "rel_error": 2.2e-3, "torch_rel_error": 1.7e-3, "ok": True}
    wrong = dict(row, M=128, ok=False, rel_error=3e-2, ours_launch_ms=None)
    text = BENCH.per_tensor_table([row, wrong, {"M": 16, "N": 8192, "K": 8192,
                                                "error": "x"}], 1.02, 5)
    lines = text.splitlines()
    assert "| 4096x4096x4096 | 1300 | 1250 | 1.040 [0.990, 1.070] |" in lines[2]
    assert "105.7 / 103.1" in lines[2] and "WRONG" not in lines[2]
    assert "WRONG" in lines[3] and "/ - |" in lines[3]
    assert "failed" in lines[4]
    assert "geomean ratio vs torch._scaled_mm 1.020 (medians of 5" in text


def test_prepared_launch_is_none_without_a_plan(monkeypatch):
    import argus.ops  # noqa: F401 - loads argus.ops.scaled_matmul

    sm = sys.modules["argus.ops.scaled_matmul"]
    monkeypatch.setattr(sm, "check_on_one_gpu", lambda who, named: None)
    a = torch.zeros(256, 128, dtype=torch.float8_e4m3fn)
    w = torch.zeros(512, 128, dtype=torch.float8_e4m3fn)
    out = torch.zeros(256, 512, dtype=torch.bfloat16)
    one = torch.ones(())
    sm.forget_choices()
    assert sm.prepared_launch(a, w, one, one, out) is None          # no call yet
    block_a, block_b = torch.ones(256, 1), torch.ones(4, 1)
    assert sm.prepared_launch(a, w, block_a, block_b, out) is None  # block scales

    class _Compiled:
        def plan_for(self, *args):
            return ("plan", tuple(t.shape for t in args))

    problem = sm.Fp8Problem(256, 512, 128, "bf16", True, False)
    sm._CHOSEN[sm._memo_key(problem, a.device.index, None, False)] = (_Compiled(), False)
    try:
        plan = sm.prepared_launch(a, w, one, one, out)
    finally:
        sm.forget_choices()
    # the scales reshaped to [1] as the op launches them
    assert plan == ("plan", ((256, 128), (512, 128), (1,), (1,), (256, 512)))


def test_bench_case_glue_on_the_cpu(monkeypatch):
    """bench_case end to end with the device parts replaced (inputs on the CPU, the op and
    torch._scaled_mm as float64 products, a fake clock, tuning stubbed): the row's keys, the
    ratio from the alternating rounds, the WRONG verdict when ours is off."""
    import argus.bench.timing as bt
    import argus.ops

    sm_mod = sys.modules["argus.ops.scaled_matmul"]   # argus.ops.scaled_matmul is the op

    def inputs(m, n, k, seed):
        g = torch.Generator().manual_seed(seed)
        a = (torch.randn(m, k, generator=g) * 3).to(torch.float8_e4m3fn)
        w = (torch.randn(n, k, generator=g) * 3).to(torch.float8_e4m3fn)
        return a, w, torch.tensor(0.5), torch.tensor(0.25)

    state = {"skew": 1.0}

    def product(a, w, sa, sb):
        return ((a.double() * sa.double()) @ (w.double() * sb.double()).T) * state["skew"]

    def ours(a, w, sa, sb, out=None, **_):
        out.copy_(product(a, w, sa, sb))
        state["last"] = "ours"
        return out

    def theirs(a, w, sa, sb, fast):
        state["last"] = "torch_fast" if fast else "torch"
        return product(a, w, sa, sb).bfloat16()

    ms = {"ours": 1.0, "torch": 1.1, "torch_fast": 0.9}

    def measure(fn, **_):
        from argus.runtime.timing import Timing

        fn()
        t = ms[state["last"]]
        return Timing(t, t, t, t, 0.0, 1, 0, "fake", False, "cpu")

    monkeypatch.setattr(BENCH, "per_tensor_inputs", inputs)
    monkeypatch.setattr(BENCH, "_scaled_mm", theirs)
    monkeypatch.setattr(BENCH, "tune", lambda *a, **k: ("S", [(1.0, "S")], [(1.0, "S")]))
    monkeypatch.setattr(argus.ops, "scaled_matmul", ours)
    monkeypatch.setattr(sm_mod, "prepared_launch", lambda *a, **k: None)
    monkeypatch.setattr(bt, "measure", measure)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(BENCH, "_promoted_schedules", lambda m: [])
    real_full = torch.full
    monkeypatch.setattr(torch, "full", lambda *a, device=None, **k: real_full(*a, **k))

    row = BENCH.bench_case(64, 32, 128, trials=1, repeats=3)
    assert row["ok"] and row["ratio"] == pytest.approx(1.1) and row["ratio_fast"] == \
        pytest.approx(0.9)
    assert row["ratio_min"] == row["ratio_max"] == pytest.approx(1.1)
    assert row["ours_launch_ms"] is None and len(row["rounds_ms"]["ours"]) == 3
    assert row["rel_error"] < 4e-3
    state["skew"] = 1.01       # ours 1% off: WRONG (torch's bf16 rounding is ~2e-3)
    monkeypatch.setattr(BENCH, "_scaled_mm", lambda a, w, sa, sb, fast: (
        state.__setitem__("last", "torch_fast" if fast else "torch"),
        ((a.double() * sa.double()) @ (w.double() * sb.double()).T).bfloat16())[1])
    row = BENCH.bench_case(64, 32, 128, trials=1, repeats=3)
    assert not row["ok"] and row["rel_error"] > 5e-3
