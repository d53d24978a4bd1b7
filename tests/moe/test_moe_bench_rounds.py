"""scripts/gpu_moe_bench.py --rounds on the CPU, the device parts faked: the timed paths (and
their kernel breakdowns) run in rounds that alternate between the paths and rotate which comes
first, the median round is reported with every round in the JSON row and the spread in the log,
one round keeps the old order and output, a path that fails in a round sits out the rest."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import argus.bench.timing as timing
from tests.loading import load_script

bench = load_script("gpu_moe_bench")


def test_in_rounds_alternates_and_rotates():
    order = []
    calls = [(name, lambda name=name: order.append(name) or name.lower()) for name in "ABC"]
    assert bench.in_rounds(calls, 4) == {name: [name.lower()] * 4 for name in "ABC"}
    assert order == list("ABC" "BCA" "CAB" "ABC")
    order.clear()
    assert bench.in_rounds(calls, 1) == {name: [name.lower()] for name in "ABC"}
    assert order == list("ABC")   # one round: the calls in order, as before --rounds
    assert bench.in_rounds([], 3) == {}


def test_in_rounds_drops_a_failing_call_from_later_rounds():
    order, fail = [], {"B": 2}   # B raises on its second call

    def call(name):
        order.append(name)
        if fail.get(name) == order.count(name):
            raise RuntimeError(f"{name} faulted")
        return order.count(name)

    out = bench.in_rounds([(name, lambda name=name: call(name)) for name in "ABC"], 3)
    assert out["A"] == [1, 2, 3] and out["C"] == [1, 2, 3]
    assert isinstance(out["B"], RuntimeError)
    assert order == list("ABC" "BCA" "CA")


def test_bench_spread_and_rounds_entry():
    assert bench.spread([8.5, 7.75, 8.0], "ms") == ", 3 rounds 7.750-8.500 ms"
    assert bench.spread([8.5], "ms") == ""
    assert bench.rounds_entry("rounds_ms", [1.0, 2.0]) == {"rounds_ms": [1.0, 2.0]}
    assert bench.rounds_entry("rounds_ms", [1.0]) == {}
    assert bench.median_kernels([{"a": 1.0, "b": 5.0}, {"a": 3.0, "b": 4.0},
                                 {"a": 2.0}]) == {"b": 4.5, "a": 2.0}


class FakeDevice:
    """Layer calls that say which path ran, a measure and a kernel_breakdown that log the
    path they time and hand out the next of its made-up values, one a round."""

    def __init__(self, monkeypatch, ms: dict, gemm_us: dict):
        self.ms, self.gemm_us, self.ran, self.timed, self.profiled, self.logs = \
            ms, gemm_us, [], [], [], []
        monkeypatch.setattr(timing, "measure", self.measure)
        monkeypatch.setattr(bench, "kernel_breakdown", self.kernel_breakdown)
        monkeypatch.setattr(bench, "log", self.logs.append)
        monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)

    def path(self, name):
        def layer(x, logits):
            self.ran.append(name)
            return torch.ones(4, 8)
        return layer

    def measure(self, fn, *, trials, warmup, allow_few_trials, setup=None):
        fn()
        name = self.ran[-1]
        self.timed.append(name)
        return SimpleNamespace(median_ms=self.ms[name][self.timed.count(name) - 1])

    def kernel_breakdown(self, fn, reps=10):
        fn()
        name = self.ran[-1]
        self.profiled.append(name)
        us = self.gemm_us[name][self.profiled.count(name) - 1]
        return {"argus_moe_fp8_gate_up_x": us, "argus_moe_fp8_down_x": 100.0, "permute": 1.0}


def run_fp8_paths(dev, rounds: int) -> dict:
    """run_fp8's per-T steps (check, time, break down) on three faked paths."""
    row = {}
    paths = [(name, "fp8", dev.path(name)) for name in ("ours-fp8", "grouped", "ours-fp8@v")]
    exact = {"fp8": torch.ones(4, 8, dtype=torch.float64)}
    calls = bench.check_fp8_paths("T=1", paths, None, None, exact, row)
    assert dev.ran == ["ours-fp8", "grouped", "ours-fp8@v"]   # checked once each, first
    bench.time_fp8_paths("T=1", calls, row, 2e9, 20, rounds)
    bench.fp8_breakdowns("T=1", [c for c in calls if c[0] != "grouped"], row, 2e9, rounds)
    return row


def test_fp8_paths_timed_in_rotating_rounds_median_reported(monkeypatch):
    # values chosen so that the median round is neither the first, the last nor the mean
    dev = FakeDevice(monkeypatch, ms={"ours-fp8": [9.0, 4.0, 1.0], "grouped": [2.0, 3.0, 7.0],
                                      "ours-fp8@v": [5.0, 6.0, 5.5]},
                     gemm_us={"ours-fp8": [900.0, 600.0, 700.0],
                              "ours-fp8@v": [800.0, 500.0, 400.0]})
    row = run_fp8_paths(dev, 3)
    a, b, c = "ours-fp8", "grouped", "ours-fp8@v"
    assert dev.timed == [a, b, c, b, c, a, c, a, b]
    assert dev.profiled == [a, c, c, a, a, c]
    assert row[a]["ms"] == 4.0 and row[b]["ms"] == 3.0 and row[c]["ms"] == 5.5
    assert row[a]["rounds_ms"] == [9.0, 4.0, 1.0]
    assert row[a]["tflops"] == pytest.approx(2e9 / 4e-3 / 1e12)
    # GEMMs: the median round's sum (gate-up + down), and each kernel's median round
    assert row[f"{a}_gemms"]["us"] == 800.0 and row[f"{c}_gemms"]["us"] == 600.0
    assert row[f"{a}_gemms"]["rounds_us"] == [1000.0, 700.0, 800.0]
    assert row[f"{a}_kernels_us"]["argus_moe_fp8_gate_up_x"] == 700.0
    line = next(msg for msg in dev.logs if msg.startswith(f"T=1 {a} ") and " ms " in msg)
    assert "   4.000 ms" in line and line.endswith(", 3 rounds 1.000-9.000 ms")
    assert any(msg.startswith(f"T=1 {a} GEMMs 0.800 ms") and ", 3 rounds 0.700-1.000 ms;" in msg
               for msg in dev.logs)


def test_fp8_paths_one_round_keeps_the_old_order_and_output(monkeypatch):
    dev = FakeDevice(monkeypatch, ms={"ours-fp8": [9.0], "grouped": [2.0], "ours-fp8@v": [5.0]},
                     gemm_us={"ours-fp8": [900.0], "ours-fp8@v": [800.0]})
    row = run_fp8_paths(dev, 1)
    assert dev.timed == ["ours-fp8", "grouped", "ours-fp8@v"]
    assert dev.profiled == ["ours-fp8", "ours-fp8@v"]
    # the row's keys and the log lines as before --rounds
    tflops = 2e9 / (9.0 * 1e-3) / 1e12
    assert row["ours-fp8"] == dict(rel_err=0.0, ok=True, ms=9.0, tflops=tflops)
    assert row["ours-fp8_gemms"] == dict(us=1000.0, tflops=2e9 / (1000.0 * 1e-6) / 1e12)
    assert not any("rounds" in msg for msg in dev.logs)
    assert f"T=1 {'ours-fp8':28s} {9.0:8.3f} ms {tflops:7.1f} TFLOP/s  rel_err={0.0:.2e}" \
        in dev.logs


def test_fp8_path_failing_in_a_round_is_reported_the_rest_go_on(monkeypatch):
    dev = FakeDevice(monkeypatch, ms={"ours-fp8": [1.0, 2.0, 3.0], "grouped": [2.0],
                                      "ours-fp8@v": [5.0, 6.0, 7.0]},
                     gemm_us={"ours-fp8": [900.0] * 3, "ours-fp8@v": [800.0] * 3})
    row = run_fp8_paths(dev, 3)   # grouped has one value: its second round raises IndexError
    assert "IndexError" in row["grouped"]["error"] and "ms" not in row["grouped"]
    assert row["ours-fp8"]["ms"] == 2.0 and row["ours-fp8@v"]["ms"] == 6.0
    assert dev.timed.count("grouped") == 2 and dev.timed.count("ours-fp8") == 3


def test_prefill_variants_timed_in_rotating_rounds(monkeypatch):
    """run_prefill_variants with two variants and rounds=2: the layers (the rule, the two
    variants, the rule behind hide_host) and then the hot breakdowns rotate."""
    E, k, H, I, routing = bench.MODELS["mixtral"]
    T = 8
    seen, timed = [], []
    names = ["both-4st", "tma-skip"]
    monkeypatch.setattr(bench, "PREFILL_ONLY", tuple(names))
    variants = bench.prefill_variants()

    def fake_layer(x, w13, w2, logits, k, routing, bias, schedule=None, out=None):
        seen.append("rule" if schedule is None else
                    next(v for v in names if variants[v] == schedule))
        return torch.ones(T, H)

    def fake_measure(fn, *, trials, warmup, allow_few_trials, setup=None):
        fn()
        timed.append(bench.HIDDEN_HOST if setup is bench.hide_host else seen[-1])
        return SimpleNamespace(median_ms=float(len(timed)))

    profiled = []

    def fake_breakdown(fn, reps=10):
        fn()
        profiled.append(seen[-1])
        return {"argus_moe_gate_up": 1000.0 * len(profiled), "argus_moe_down": 500.0}

    monkeypatch.setattr(bench, "ours_layer", fake_layer)
    monkeypatch.setattr(timing, "measure", fake_measure)
    monkeypatch.setattr(bench, "kernel_breakdown", fake_breakdown)
    monkeypatch.setattr(bench, "dense_references", lambda *a: {})
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    row = {}
    bench.run_prefill_variants("mixtral", T, None, None, None, None, k, routing, None,
                               torch.tensor([[0, 1]] * T), torch.ones(T, H, dtype=torch.float64),
                               3, True, row, rounds=2)
    order = ["rule", *names, bench.HIDDEN_HOST]
    assert timed == order + order[1:] + order[:1]
    res = row["prefill"]
    assert res["rule"]["rounds_ms"] == [1.0, 8.0] and res["rule"]["ms"] == 4.5
    assert res["tma-skip"]["rounds_ms"] == [3.0, 6.0]
    # the cold breakdowns once each (during the checks), then the hot ones in two rounds
    assert profiled == ["rule", *names, "rule", *names, *names, "rule"]
    assert res["rule"]["hot_rounds_ms"] == [4.5, 9.5]
    assert res["rule"]["hot_gate_up_us"] == 6500.0
