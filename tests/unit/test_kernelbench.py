"""KernelBench harness, fast parts: task discovery and loading, CPU shrinking, input sets,
tolerance and precision classes, probes, guards, timing (CPU clock), reports and the CLI parser.

Tasks are read from ../shared/kernelbench beside the repository ($ARGUS_KERNELBENCH_DIR
overrides); tests that need them skip when the folder is missing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

import pytest
import torch

from argus.bench import timing
from argus.bench.kernelbench import guards, inputs, probes, provenance, roofline, tolerance
from argus.bench.kernelbench.judge import REASONS, Judgment, SetResult
from argus.bench.kernelbench.report import markdown, summarize_levels, write_reports
from argus.bench.kernelbench.shrink import SizeBudget, meta_cost, plan_sizes
from argus.bench.kernelbench.tasks import (
    KernelBenchError,
    discover,
    load_task,
    parse_ids,
    size_sites,
    task_from_path,
)

REPO = Path(__file__).resolve().parents[2]
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))
needs_tasks = pytest.mark.skipif(not (KB_DIR / "level1").is_dir(),
                                 reason=f"KernelBench tasks not found at {KB_DIR}")


def _task(level: int, pid: int):
    return discover(KB_DIR, levels=[level], ids=[pid])[0]


# ----------------------------------------------------------------------------- tasks


@needs_tasks
def test_discover_levels_ids_and_keys():
    tasks = discover(KB_DIR, levels=[1], ids=[19, 23, 47])
    assert [t.key for t in tasks] == ["L1/19", "L1/23", "L1/47"]
    assert tasks[0].name == "ReLU" and len(tasks[0].sha256) == 64
    both = discover(KB_DIR, levels=[1, 2])
    assert {t.level for t in both} == {1, 2} and len(both) >= 100


def test_discover_accepts_upstream_layout(tmp_path):
    (tmp_path / "KernelBench" / "level3").mkdir(parents=True)
    (tmp_path / "KernelBench" / "level3" / "7_Tiny.py").write_text(
        "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
        "        return x\ndef get_inputs():\n    return [torch.rand(4)]\n"
        "def get_init_inputs():\n    return []\n")
    tasks = discover(tmp_path)
    assert [(t.level, t.problem_id, t.name) for t in tasks] == [(3, 7, "Tiny")]
    with pytest.raises(KernelBenchError, match="level 9 not found"):
        discover(tmp_path, levels=[9])


def test_missing_root_is_a_clear_error(tmp_path):
    with pytest.raises(KernelBenchError, match="no KernelBench levels") as info:
        discover(tmp_path / "nowhere")
    assert "fix:" in str(info.value)


def test_parse_ids():
    assert parse_ids("1,2,5-7") == [1, 2, 5, 6, 7]
    assert parse_ids(None) is None and parse_ids("") is None


SRC = """import torch
import torch.nn as nn
class Model(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.bias = nn.Parameter(torch.zeros(bias_shape))
    def forward(self, x):
        return x + self.bias
batch_size = 64
height = width = 32
channels = 16
depth, k = 8, 3
input_shape = (128, 4)
N = 2048 * 2
bias_shape = (channels, 1, 1)
def get_inputs():
    return [torch.rand(batch_size, channels, height, width)]
def get_init_inputs():
    return [channels]
"""


def test_size_sites_cover_chains_tuples_and_expressions(tmp_path):
    sites = size_sites(SRC)
    assert {n: s.value for n, s in sites.items()} == {
        "batch_size": 64, "height": 32, "width": 32, "channels": 16, "depth": 8, "k": 3,
        "input_shape[0]": 128, "input_shape[1]": 4, "N": 4096, "bias_shape[1]": 1,
        "bias_shape[2]": 1}


def test_overrides_reexecute_derived_constants(tmp_path):
    path = tmp_path / "1_Toy.py"
    path.write_text(SRC)
    module = load_task(path, {"channels": 4, "height": 8})
    assert module.bias_shape == (4, 1, 1) and module.height == 8 and module.width == 32
    with pytest.raises(KernelBenchError, match="do not name integer constants"):
        load_task(path, {"nope": 3})


@needs_tasks
def test_plan_sizes_shrinks_relu_and_keeps_shapes_consistent():
    task = _task(1, 19)
    plan = plan_sizes(task.path, SizeBudget(elements=1 << 18, flops=1e8))
    assert plan.fits and plan.overrides and "reduced for CPU" in plan.describe()
    assert meta_cost(task.path, plan.overrides).elements <= 1 << 18


@needs_tasks
def test_plan_sizes_halves_tied_sizes_together():
    # HingeLoss broadcasts (batch, n) * (batch,): batch_size and input_shape[0] must agree.
    task = _task(1, 100)
    plan = plan_sizes(task.path, SizeBudget(elements=1 << 20, flops=1e8))
    assert plan.fits
    assert plan.overrides["batch_size"] == plan.overrides["input_shape[0]"]


# ----------------------------------------------------------------------------- inputs


def test_input_plan_mixes_distributions():
    specs = inputs.plan(5)
    assert [s.distribution for s in specs] == ["task", "normal", "heavy", "task", "large"]
    assert len({s.seed for s in specs}) == 5


def test_transform_keeps_structure_and_categorical_inputs():
    tri = torch.triu(torch.rand(16, 16))
    labels = torch.randint(0, 2, (64,)).float() * 2 - 1
    mask = torch.rand(8) > 0.5
    out, kinds = inputs.transform([tri, labels, mask, 3], "normal", seed=1)
    assert torch.equal(out[0] == 0, tri == 0)  # still upper triangular
    assert (out[0] < 0).any()                   # and signed now
    assert out[1] is labels and out[2] is mask and out[3] == 3
    assert kinds == ["normal", "kept (categorical)", "kept (categorical)", "scalar"]
    absolute, _ = inputs.transform([tri], "large", seed=1, absolute=True)
    assert (absolute[0] >= 0).all() and absolute[0].abs().max() > 100


def test_heavy_distribution_is_heavy_tailed_and_clipped():
    x = torch.rand(20000)
    (h,), _ = inputs.transform([x], "heavy", seed=3)
    assert h.abs().max() <= inputs.HEAVY_CLIP and (h.abs() > 20).any()


# ----------------------------------------------------------------------------- tolerance


def test_errors_and_strict_track_separate_fp32_from_tf32_and_bf16():
    torch.manual_seed(0)
    a, b = torch.randn(128, 512), torch.randn(512, 96)
    ref = a.double() @ b.double()
    fp32 = tolerance.errors(a @ b, ref)
    tf32 = tolerance.errors(tolerance.round_to_tf32(a) @ tolerance.round_to_tf32(b), ref)
    bf16 = tolerance.errors((a.bfloat16() @ b.bfloat16()).float(), ref)
    tol = tolerance.strict_tolerance(torch.float32, fp32)
    assert tolerance.strict_ok(fp32, tol)
    assert not tolerance.strict_ok(tf32, tol) and not tolerance.strict_ok(bf16, tol)
    assert fp32.rel_l2 < 1e-6 < tf32.rel_l2 < 1e-3 < bf16.rel_l2 < 2e-2
    assert tf32.relaxed_ok is not None


def test_errors_handle_nonfinite_and_integers():
    ref = torch.tensor([1.0, float("inf"), float("nan"), 2.0], dtype=torch.float64)
    same = tolerance.errors(ref.float(), ref)
    assert same.nonfinite_mismatch == 0 and same.rel_l2 == 0
    bad = tolerance.errors(torch.tensor([1.0, 5.0, float("nan"), float("nan")]), ref)
    assert bad.nonfinite_mismatch == 2 and math.isinf(bad.rel_l2) and not bad.relaxed_ok
    idx = torch.tensor([1, 2, 3])
    assert tolerance.errors(idx.clone(), idx).exact
    assert not tolerance.strict_ok(tolerance.errors(torch.tensor([1, 2, 4]), idx),
                                   tolerance.strict_tolerance(torch.int64, None))


def test_strict_tolerance_calibrates_up_never_down():
    tiny = tolerance.Errors(1e-9, 1e-8, True)
    big = tolerance.Errors(1e-3, 1e-2, True)
    assert tolerance.strict_tolerance(torch.float32, tiny).tol_l2 == 1e-5
    assert tolerance.strict_tolerance(torch.float32, big).tol_l2 == pytest.approx(1.6e-2)


def test_round_to_tf32_keeps_ten_mantissa_bits():
    x = torch.tensor([1.0 + 2 ** -12, 1.0 + 2 ** -9, float("inf")])
    y = tolerance.round_to_tf32(x)
    assert y[0] == 1.0 and y[1] == x[1] and math.isinf(y[2])


def test_precision_class_uses_the_ladder():
    ladder = [{"tf32": tolerance.Errors(3e-4, 1e-3, True),
               "bf16": tolerance.Errors(3e-3, 1e-2, True)}] * 2
    tf32_like = [tolerance.Errors(4e-4, 1e-3, True)] * 2
    bf16_like = [tolerance.Errors(5e-3, 1e-2, True)] * 2
    wrong = [tolerance.Errors(0.5, 1.0, False)] * 2
    assert tolerance.precision_class(tf32_like, ladder, strict_pass=False) == "tf32"
    assert tolerance.precision_class(bf16_like, ladder, strict_pass=False) == "bf16"
    assert tolerance.precision_class(wrong, ladder, strict_pass=False) == "worse than bf16"
    assert tolerance.precision_class(wrong, ladder, strict_pass=True) == "fp32"


def _eager_class(candidate, ladder, strict_pass):
    """precision_class as it was before it became lazy: every set's rungs, class by class."""
    if strict_pass:
        return "fp32"
    for name in ("tf32", "bf16"):
        ok = True
        for err, rungs in zip(candidate, ladder):
            rung = rungs.get(name)
            if rung is None or not math.isfinite(rung.rel_l2):
                ok = False
                break
            bound = max(tolerance.CLASS_MARGIN * rung.rel_l2,
                        tolerance.FLOORS["torch.float32"][0])
            if not (err.nonfinite_mismatch == 0 and err.rel_l2 <= bound):
                ok = False
                break
        if ok:
            return name
    return "worse than bf16"


def test_lazy_precision_class_equals_the_eager_one_and_stops_early():
    """precision_class_lazy computes set i's rungs only while a class is still possible: the
    same class as precision_class on every case (NaN errors, missing rungs, non-finite
    mismatches included), and a plainly wrong solution costs one set's rungs, a non-finite
    one none (the judge re-prepared all 5 sets with three extra forwards each before)."""
    import random

    rng = random.Random(7)
    values = [1e-7, 2e-5, 3e-4, 1.1e-3, 5e-3, 2e-2, 0.5, float("nan"), float("inf")]
    for _ in range(2000):
        n = rng.randint(0, 4)
        cand = [tolerance.Errors(rng.choice(values), 1.0, True,
                                 nonfinite_mismatch=int(rng.random() < 0.1)) for _ in range(n)]
        ladder = [{name: None if rng.random() < 0.1 else
                   tolerance.Errors(rng.choice(values), 1.0, True) for name in ("tf32", "bf16")}
                  for _ in range(n)]
        calls: list[int] = []

        def rung(i, ladder=ladder, calls=calls):
            calls.append(i)
            return ladder[i]

        for strict in (False, True):
            want = _eager_class(cand, ladder, strict)
            assert tolerance.precision_class_lazy(cand, rung, strict) == want, \
                (cand, ladder, strict)
            assert tolerance.precision_class(cand, ladder, strict) == want
    ladder = [{"tf32": tolerance.Errors(3e-4, 1e-3, True),
               "bf16": tolerance.Errors(3e-3, 1e-2, True)}] * 5
    calls = []
    wrong = [tolerance.Errors(0.5, 1.0, False)] * 5
    assert tolerance.precision_class_lazy(wrong, lambda i: calls.append(i) or ladder[i],
                                          False) == "worse than bf16"
    assert calls == [0]
    nonfinite = [tolerance.Errors(0.5, 1.0, False, nonfinite_mismatch=3)] * 5
    assert tolerance.precision_class_lazy(nonfinite, lambda i: calls.append(i) or ladder[i],
                                          False) == "worse than bf16"
    assert calls == [0]


# ----------------------------------------------------------------------------- probes


def test_probes_and_trivial_kinds():
    x = torch.randn(32, 32)
    ref = torch.relu(x.double())
    made = probes.probe_outputs(ref, [x])
    assert set(made) == {"zeros", "constant", "echo:0"}
    tol = tolerance.strict_tolerance(torch.float32, None)
    assert probes.probe_passes(made["echo:0"], ref, tol) == (False, False)
    assert probes.trivial_kind(torch.zeros(32, 32), ref, [x], []) == "zeros_output"
    assert probes.trivial_kind(torch.full((32, 32), 0.4), ref, [x], []) == "constant_output"
    assert probes.trivial_kind(x.clone(), ref, [x], []) == "echo_input"
    earlier = torch.relu(torch.randn(32, 32))
    assert probes.trivial_kind(earlier, ref, [x], [probes.fingerprint(earlier)]) == \
        "cached_output"
    assert probes.trivial_kind(torch.relu(x), ref, [x], []) is None


def test_echo_probe_passes_relu_on_nonnegative_inputs():
    x = torch.rand(64, 64)  # upstream's inputs: ReLU is the identity there
    ref = torch.relu(x.double())
    tol = tolerance.strict_tolerance(torch.float32, None)
    assert probes.probe_passes(probes.probe_outputs(ref, [x])["echo:0"], ref, tol) == \
        (True, True)


def test_fingerprint_is_bitwise():
    a = torch.randn(100)
    b = a.clone()
    b[7] = torch.nextafter(b[7], torch.tensor(10.0))
    assert probes.fingerprint(a) == probes.fingerprint(a.clone())
    assert probes.fingerprint(a) != probes.fingerprint(b)


# ----------------------------------------------------------------------------- guards


def test_poison_mode_poisons_empty_and_logs_ops():
    x = torch.rand(10)
    mode = guards.PoisonMode()
    with mode:
        e = torch.empty_like(x)
        d = torch.empty(3, dtype=torch.float64)
        y = torch.relu(x)
    assert guards.poison_count(e) == 10 and guards.poison_count(d) == 3
    assert guards.poison_count(y) == 0 and torch.isnan(e).all()
    assert "relu" in mode.compute_ops() and "empty_like" not in mode.compute_ops()


def test_clock_tampering_is_detected_and_undone():
    snap = guards.capture_clocks()
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        assert guards.changed_clocks(snap) == ["time.perf_counter"]
    finally:
        time.perf_counter = original
    assert guards.changed_clocks(snap) == []
    event_cls = torch.cuda.Event
    original_elapsed = event_cls.elapsed_time
    try:
        event_cls.elapsed_time = lambda self, other: 0.0
        assert "torch.cuda.Event.elapsed_time" in guards.changed_clocks(snap)
    finally:
        event_cls.elapsed_time = original_elapsed


def test_flag_changes_are_detected():
    before = guards.capture_flags()
    saved = torch.get_float32_matmul_precision()
    holders = [(obj, "fp32_precision") for obj in (
        torch.backends, torch.backends.cuda.matmul, torch.backends.cudnn,
        getattr(torch.backends.cudnn, "conv", None), torch.backends.mkldnn,
        getattr(torch.backends.mkldnn, "matmul", None)) if hasattr(obj, "fp32_precision")]
    saved_attrs = [getattr(o, a) for o, a in holders]
    try:
        torch.set_float32_matmul_precision("medium" if saved != "medium" else "high")
        assert any("precision" in c for c in guards.changed_flags(before))
    finally:
        torch.set_float32_matmul_precision(saved)
        for (obj, attr), value in zip(holders, saved_attrs):
            setattr(obj, attr, value)
    assert guards.changed_flags(before) == []


def test_aliasing_and_same_bits():
    x = torch.rand(8)
    assert guards.aliases([x[2:]], [x, 3]) == [0]
    assert guards.aliases([x.clone()], [x]) == []
    nan = torch.tensor([float("nan"), 1.0])
    assert guards.same_bits(nan, nan.clone())
    assert not guards.same_bits(nan, torch.tensor([float("nan"), 2.0]))


# ----------------------------------------------------------------------------- timing


def test_measure_on_cpu_is_labelled_and_complete():
    t = timing.measure(lambda: torch.ones(100).sum(), trials=100, warmup=2, device="cpu",
                       flush_l2=False)
    assert t.clock == timing.CLOCK_CPU and t.trials == 100 and t.device == "cpu"
    assert 0 < t.min_ms <= t.median_ms <= t.max_ms and t.stream_median_ms is None
    assert not timing.side_stream_suspect(t)
    assert timing.Timing.from_json(t.to_json(samples=True)) == t


def test_measure_refuses_too_few_trials():
    with pytest.raises(ValueError, match="below the minimum of 100"):
        timing.measure(lambda: None, trials=10, device="cpu")


def test_measure_cannot_be_fooled_by_a_patched_perf_counter():
    original = time.perf_counter
    try:
        time.perf_counter = lambda: 0.0
        t = timing.measure(lambda: sum(range(20000)), trials=100, warmup=1, device="cpu",
                           flush_l2=False)
    finally:
        time.perf_counter = original
    assert t.median_ms > 0


def test_side_stream_logic():
    def fake(stream: float, device: float) -> timing.Timing:
        return timing.summarize([device] * 100, warmup=1, clock=timing.CLOCK_CUDA,
                                l2_flush=True, device="H200", stream_samples_ms=[stream] * 100)

    assert not timing.side_stream_suspect(fake(1.0, 1.05))   # sync jitter
    assert not timing.side_stream_suspect(fake(0.010, 0.025))  # tiny kernel, 15 us jitter
    assert timing.side_stream_suspect(fake(0.010, 1.0))      # work escaped the stream
    assert timing.side_stream_suspect(fake(2.0, 3.0))


def test_geomean():
    assert timing.geomean([1.0, 4.0]) == pytest.approx(2.0)
    assert math.isnan(timing.geomean([]))


# ----------------------------------------------------------------------------- provenance


def test_provenance_static_and_profiled():
    assert provenance.imports_argus("import argus as ag\n")
    assert provenance.imports_argus("from argus.dsl import kernel\n")
    assert not provenance.imports_argus("import argusx\nimport torch\n")
    assert provenance.static_verdict(None, "import torch\n").verdict == "no"
    assert provenance.static_verdict(None, "import argus\n") is None
    yes = provenance.from_kernels([("argus_gemm_128x128", 95.0), ("elementwise_kernel", 5.0)])
    assert yes.verdict == "yes" and yes.argus_share == pytest.approx(0.95)
    part = provenance.from_kernels([("argus_relu", 10.0), ("ampere_sgemm", 90.0)])
    assert part.verdict == "partial" and "ampere_sgemm" in part.evidence
    assert provenance.from_kernels([("ampere_sgemm", 9.0)]).verdict == "no"
    assert provenance.without_gpu({"relu": 5}, argus_ops=0).verdict == "no"
    assert provenance.without_gpu({"relu": 5}, argus_ops=3).verdict == "unknown (no GPU)"
    assert provenance.without_gpu({}, argus_ops=0).verdict == "unknown (no GPU)"


def test_roofline_bound():
    bound = roofline.bound_ms("NVIDIA H200", flops=2 * 4096 ** 3, elements=3 * 4096 ** 2)
    assert bound == pytest.approx(2 * 4096 ** 3 / (494.7e12 / 3) * 1e3)
    assert roofline.beyond_roofline(bound * 0.5, bound)
    assert not roofline.beyond_roofline(bound * 1.2, bound)
    assert roofline.bound_ms("Tesla T4", 1.0, 1) is None


# ----------------------------------------------------------------------------- reports


def _judgment(key: str, level: int, pid: int, **kw) -> Judgment:
    base = dict(task=key, task_name="Toy", task_path="/x", task_sha256="0" * 64,
                solution="/s.py", device="cuda", correct=True, correct_relaxed=True,
                reasons=(), relaxed_reasons=(), detail="", precision="fp32", degenerate=(),
                degenerate_relaxed=(), stochastic=False, argus_kernels="yes",
                argus_evidence="", sizes="upstream sizes", level=level, problem_id=pid)
    base.update(kw)
    return Judgment(**base)


def test_level_summary_fast_p_and_geomean():
    js = [
        _judgment("L1/1", 1, 1, speedup_eager=2.0, speedup_compile=0.5),
        _judgment("L1/2", 1, 2, speedup_eager=0.5, speedup_compile=0.25),
        _judgment("L1/3", 1, 3, correct=False, reasons=("zeros_output",)),
        _judgment("L1/4", 1, 4, degenerate=("zeros",), speedup_eager=3.0),
        _judgment("L2/1", 2, 1, argus_kernels="no"),
    ]
    l1, l2 = summarize_levels(js)
    assert (l1.tasks, l1.solved) == (4, 2)
    assert l1.fast_0 == 0.5 and l1.fast_1_eager == 0.25 and l1.fast_1_compile == 0.0
    assert l1.geomean_eager == pytest.approx(1.0)
    assert l1.degenerate == ("L1/4 (zeros)",) and l1.reasons == {"zeros_output": 1}
    assert l2.solved == 0 and l2.correct_any_code == 1
    # a relaxed-only pass the judge timed (0d41ffc: its one strict failure `imprecise`) counts
    # on the relaxed track, never in the strict fast_1 or geomeans
    relaxed = _judgment("L1/5", 1, 5, correct=False, reasons=("imprecise",), precision="tf32",
                        speedup_eager=8.0, speedup_compile=8.0)
    (l1b, _) = summarize_levels(js + [relaxed])
    assert l1b.solved_relaxed == l1.solved_relaxed + 1 and l1b.timed == l1.timed == 2
    assert l1b.geomean_eager == pytest.approx(1.0) and l1b.geomean_compile == l1.geomean_compile
    assert l1b.fast_1_eager == pytest.approx(1 / 5) and l1b.fast_1_compile == 0.0


def test_reports_are_written(tmp_path):
    js = [_judgment("L1/1", 1, 1, speedup_eager=2.0, speedup_compile=1.5,
                    timing={"median_ms": 1.0}, eager={"median_ms": 2.0},
                    compiled={"median_ms": 1.5}),
          _judgment("L1/2", 1, 2, correct=False, reasons=("echo_input",),
                    sets=(SetResult(0, 1, "task", ("task",), ({"rel_l2": 0.0},),
                                    ({"tol_l2": 1e-5},), ({"rel_l2": 0.0},), True, True),))]
    paths = write_reports(js, tmp_path, meta={"device": "cuda"})
    text = paths["markdown"].read_text()
    assert "| 1 | 2 | 50.0% (1)" in text and "echo_input" in text
    data = json.loads(paths["json"].read_text())
    assert data["levels"][0]["solved"] == 1 and len(data["tasks"]) == 2
    assert Judgment.from_json(data["tasks"][1]) == js[1]
    svg = paths["svg"].read_text()
    assert "<svg" in svg and "matplotlib" in svg and "Speedup per task" in svg   # matplotlib's
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "reduced sizes" not in markdown(js)



def test_reports_show_the_strict_track_against_eager_with_tf32_off(tmp_path):
    """Beside the geomean vs eager (PyTorch's default: TF32 convolutions), the strict track's
    geomean vs eager with TF32 off (its like-for-like baseline), per task and per level, in the
    markdown, the JSON and the solve summary; a relaxed-only pass stays out of it, a task TF32
    does not change shows eager's number, and judgments saved before the field still load."""
    from argus.bench.kernelbench.summary import level_rows
    from argus.bench.kernelbench.summary import markdown as summary_markdown

    conv = _judgment("L1/54", 1, 54, speedup_eager=0.5, speedup_eager_notf32=2.0,
                     speedup_compile=0.4, timing={"median_ms": 1.0}, eager={"median_ms": 0.5},
                     eager_notf32={"median_ms": 2.0}, compiled={"median_ms": 0.4})
    relu = _judgment("L1/19", 1, 19, speedup_eager=2.0, speedup_eager_notf32=2.0,
                     eager_notf32={"same_as_eager": "TF32 off changes no output bit"})
    relaxed = _judgment("L1/55", 1, 55, correct=False, reasons=("imprecise",),
                        precision="tf32", speedup_eager=9.0, speedup_eager_notf32=30.0)
    js = [conv, relu, relaxed]
    (l1,) = summarize_levels(js)
    assert l1.geomean_eager == pytest.approx(1.0) and l1.geomean_eager_notf32 == 2.0
    paths = write_reports(js, tmp_path, meta={"device": "cuda"})
    text = paths["markdown"].read_text()
    assert "strict: geomean vs eager TF32 off" in text and "| 1.00x | 2.00x |" in text
    assert "| 0.5 | 2 | 0.4 | 0.50x | 2.00x | 0.40x |" in text          # L1/54's row
    assert "| = eager |" in text and "allow_tf32" in text
    data = json.loads(paths["json"].read_text())
    assert data["levels"][0]["geomean_eager_notf32"] == 2.0
    assert Judgment.from_json(data["tasks"][0]) == conv
    (row,) = level_rows({1: [j.task for j in js]}, js)
    assert row["geomean_eager_notf32"] == 2.0 and row["geomean_eager_relaxed"] > 1.0
    assert "strict: geomean vs eager TF32 off" in summary_markdown([row])
    assert "| 1.00x | 2.00x |" in summary_markdown([row])
    assert "2.00x vs eager with TF32 off" in conv.summary()
    old = {k: v for k, v in conv.to_json().items()
           if k not in ("eager_notf32", "speedup_eager_notf32")}
    assert Judgment.from_json(old).speedup_eager_notf32 is None

def test_reasons_are_documented():
    for code in ("zeros_output", "echo_input", "constant_output", "cached_output",
                 "side_stream_work", "uninitialized_output", "timer_tampering", "imprecise",
                 "mismatch", "global_state_changed", "output_aliases_input", "stochastic_task"):
        assert REASONS[code]
    docs = (REPO / "docs" / "kernelbench.md").read_text()
    for code in REASONS:
        assert f"`{code}`" in docs, f"docs/kernelbench.md does not explain {code}"


# ----------------------------------------------------------------------------- CLI


def test_cli_registers_all_verbs_without_importing_torch_heavy_modules():
    from argus.bench.kernelbench import cli

    parser = argparse.ArgumentParser(prog="argus")
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["kernelbench", "judge", "t.py", "s.py", "--json", "o.json",
                              "--device", "cpu"])
    assert args.kb_verb == "judge" and args.json_out == "o.json" and args.func is cli.main
    args = parser.parse_args(["kernelbench", "run", "--level", "1", "--level", "2", "--ids",
                              "1-3", "--solutions", "d", "--out", "o"])
    assert cli._levels(args) == [1, 2]
    for verb in (["baselines"], ["report", "dir"], ["list"]):
        assert parser.parse_args(["kernelbench", *verb]).kb_verb == verb[0]


@needs_tasks
def test_cli_list(capsys):
    from argus.bench.kernelbench import cli

    args = cli.build_parser().parse_args(["kernelbench", "list", "--root", str(KB_DIR),
                                          "--level", "1", "--ids", "19"])
    assert cli.main(args) == 0
    assert "L1/19" in capsys.readouterr().out


def test_task_from_path_errors(tmp_path):
    with pytest.raises(KernelBenchError, match="does not exist"):
        task_from_path(tmp_path / "missing.py")


def test_replacing_the_random_draw_of_the_checked_timed_calls_is_tampering():
    """The judge picks which timed calls it checks with os.urandom and random.Random: a
    solution that replaced them could predict the checked calls (review of 0e0cdf3)."""
    import os
    import random

    snap = guards.capture_clocks()
    saved_urandom, saved_shuffle = os.urandom, random.Random.shuffle
    try:
        os.urandom = lambda n: b"\0" * n
        random.Random.shuffle = lambda self, x: None
        assert {"os.urandom", "random.Random.shuffle"} <= set(guards.changed_clocks(snap))
    finally:
        os.urandom, random.Random.shuffle = saved_urandom, saved_shuffle
    assert guards.changed_clocks(snap) == []


@pytest.mark.parametrize("how", ["_randbelow", "module"])
def test_replacing_what_shuffle_and_choice_draw_from_is_tampering(how):
    """Random.shuffle and Random.choice draw through Random._randbelow (a Python method the
    class looks up on every call), and the worker's `import random` reads sys.modules: a
    solution that replaced either (e.g. `_randbelow = lambda self, n: 0`) fixed the order and
    the picked calls without touching a guarded name."""
    import random
    import sys

    snap = guards.capture_clocks()
    saved = random.Random._randbelow, sys.modules["random"]
    try:
        if how == "_randbelow":
            random.Random._randbelow = lambda self, n: 0
        else:
            sys.modules["random"] = type(sys)("random")
        assert guards.changed_clocks(snap)
    finally:
        random.Random._randbelow, sys.modules["random"] = saved
    assert guards.changed_clocks(snap) == []


def test_relaxed_track_falls_back_to_strict_where_1e2_cannot_verify():
    """A strict pass is a relaxed pass: a task whose constant probe passes 1e-2 on every set
    (degenerate on the relaxed track only) counts on the relaxed track when the strict check,
    whose probes fail, passes; never when only the relaxed check passed, and never on a task
    degenerate on both tracks or stochastic."""
    strict_pass = _judgment("L2/56", 2, 56, degenerate_relaxed=("constant",))
    relaxed_only = _judgment("L2/57", 2, 57, correct=False, reasons=("imprecise",),
                             degenerate_relaxed=("constant",))
    both = _judgment("L2/80", 2, 80, degenerate=("zeros",), degenerate_relaxed=("zeros",))
    stochastic = _judgment("L2/66", 2, 66, correct=False, reasons=("stochastic_task",),
                           stochastic=True)
    imprecise = _judgment("L2/12", 2, 12, correct=False, reasons=("imprecise",))
    torch_work = _judgment("L2/13", 2, 13, argus_kernels="no")
    assert strict_pass.solved and strict_pass.solved_relaxed
    assert not relaxed_only.solved_relaxed
    assert not both.solved and not both.solved_relaxed
    assert not stochastic.solved_relaxed
    assert imprecise.solved_relaxed and not imprecise.solved
    assert not torch_work.solved_relaxed
    # degenerate on the strict track is never solved on the relaxed one, even where the
    # judgment lists no relaxed probe (tolerance.py makes that impossible in a real run)
    strict_probe_only = _judgment("L2/81", 2, 81, correct=False, reasons=("imprecise",),
                                  degenerate=("zeros",))
    assert not strict_probe_only.solved_relaxed
    js = [strict_pass, relaxed_only, both, stochastic, imprecise, torch_work]
    (l2,) = summarize_levels(js)
    assert l2.solved_relaxed == 2 and l2.solved == 1
    from argus.bench.kernelbench.summary import level_rows
    (row,) = level_rows({2: [j.task for j in js]}, js)
    assert (row["strict"], row["relaxed"]) == (1, 2)
    assert Judgment.from_json(strict_pass.to_json()) == strict_pass
