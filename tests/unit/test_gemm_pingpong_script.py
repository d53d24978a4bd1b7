"""scripts/gpu_gemm_pingpong.py before it spends device time: every schedule of its --compare
call is legal and lowers for both B layouts; a 128-row ping-pong tile's K step ends in
wgmma.wait_group 2 (a whole step in flight, as CUTLASS keeps a whole k tile), which the
verifier proves while one group too many in flight is refused, and the --last-group-wait
experiment gives back the former wait_group 1. The first H200 run of the wait_group 2 form
counted 2 ragged checks as "wrong or failed": they were argus.ops.matmul refusing the
TMA-store epilogue for 3400-byte C rows (N = 1700), reproduced here on the CPU."""

from __future__ import annotations

import pytest

import argus as ag
import argus.lower
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.errors import VerificationError
from argus.ir import ops as O
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from tests.loading import load_script

script = load_script("gpu_gemm_pingpong")


def _schedule(text: str) -> GemmSchedule:
    return eval(text, {"GemmSchedule": GemmSchedule})  # noqa: S307 - the script's own list


def _step_waits(kernel) -> list[int]:
    """The wgmma.wait_group of every consume step that keeps its wgmma in flight."""
    return [x.pending for op in kernel.walk()
            if isinstance(op, O.Consume) and op.wgmma_in_flight == 1
            for x in op.body.ops if isinstance(x, O.WgmmaWait)]


@pytest.mark.parametrize("text", script.COMPARE_SCHEDULES + script.COMPARE_LAST_GROUP)
@pytest.mark.parametrize("b_layout", ["nk", "kn"])
def test_compare_schedules_lower_for_both_layouts(text, b_layout):
    kernel = lower_only(gemm_kernel(ag.bf16, ag.bf16, b_layout), s=_schedule(text))
    assert kernel.attr("smem_bytes") <= 232448  # the opt-in limit: 7 stages of 128x128 fit


def _patched_passes(monkeypatch, before_sync=None, after_sync=None):
    passes = []
    for name, fn in argus.lower.PASSES:
        if name == "sync" and before_sync is not None:
            passes.append(("seeded_before", before_sync))
        passes.append((name, fn))
        if name == "sync" and after_sync is not None:
            passes.append(("seeded_after", after_sync))
    monkeypatch.setattr(argus.lower, "PASSES", tuple(passes))


def test_a_128_row_step_keeps_both_groups_and_the_experiment_gives_back_one(monkeypatch):
    s = GemmSchedule(bm=128, bn=128, stages=6, pingpong=True)
    lowered = lower_only(gemm_kernel(), s=s)
    assert _step_waits(lowered) == [2]  # two m64 groups per step, both left in flight
    assert "ag::wgmma_wait<2>();" in codegen.render(lowered).text
    # one group per step (64-row tiles, cooperative): wait_group 1 either way
    for one in (GemmSchedule(bm=64, bn=256, stages=5, pingpong=True), GemmSchedule()):
        assert _step_waits(lower_only(gemm_kernel(), s=one)) == [1]
    _patched_passes(monkeypatch, before_sync=script.last_group_wait)
    assert _step_waits(lower_only(gemm_kernel(), s=s)) == [1]  # the former lowering
    script.install_last_group_wait()  # what the script's second process runs
    assert [n for n, _ in argus.lower.PASSES].count("last_group_wait") == 1
    assert _step_waits(lower_only(gemm_kernel(), s=s)) == [1]


def _wait_3(kernel):  # wait_group 3: the previous step's last group may be in flight
    import dataclasses

    from argus.ir.core import Region

    def region(r):
        ops = []
        for op in r.ops:
            inner = script._regions(op)
            if inner:
                op = op.replace(**{n: region(x) for n, x in inner.items()})
            if isinstance(op, O.WgmmaWait) and op.pending == 2:
                op = op.replace(pending=3)
            ops.append(op)
        return Region(tuple(ops))
    return dataclasses.replace(kernel, body=region(kernel.body))


def test_whole_step_wait_is_proved_and_one_group_too_many_is_refused(monkeypatch, tmp_path):
    pytest.importorskip("z3")
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))  # verify now, not a cached verdict
    s = GemmSchedule(bm=128, bn=128, stages=3, pingpong=True, num_sms=4)
    compiled = compile_kernel(gemm_kernel(), verify=1, s=s)
    assert "ag::wgmma_wait<2>();" in compiled.source.text
    assert not compiled.diagnostics  # no violation and no "unknown"
    _patched_passes(monkeypatch, after_sync=_wait_3)
    with pytest.raises(VerificationError, match="sync.release"):
        compile_kernel(gemm_kernel(), verify=1, s=s)


def _ragged(shape: str, layout: str):
    torch = pytest.importorskip("torch")
    m, n, k = (int(x) for x in shape.split("x"))
    a = torch.zeros(m, k, dtype=torch.bfloat16)
    w = torch.zeros(n, k, dtype=torch.bfloat16)
    b = w.T if layout == "NT" else w.T.contiguous()
    return a, b, torch.zeros(m, n, dtype=torch.bfloat16)


def test_the_two_failed_ragged_checks_were_refusals(monkeypatch):
    """The wait_group 2 process of 2026-12-03 03:42 checked the three 128-row schedules now in
    COMPARE_LAST_GROUP on 2900x1700x136 and 3000x5000x1056, NN and NT (12 cases) and printed
    "2 wrong or failed": argus.ops.matmul refuses exactly 2 of them before any launch (the
    TMA-store schedule, C rows of 3400 bytes), which its CHECK lines counted as failures."""
    from importlib import import_module

    from argus.errors import LaunchError
    from argus.ops.matmul import problem_of

    ops_matmul = import_module("argus.ops.matmul")
    # the device checks (CUDA tensors) aside, matmul runs its own argument checks on the CPU
    monkeypatch.setattr(ops_matmul, "_check", lambda *args, **kw: None)
    refused = []
    for shape in ("2900x1700x136", "3000x5000x1056"):
        for layout in ("NN", "NT"):
            a, b, out = _ragged(shape, layout)
            aligned = problem_of(a, b, out)[0].tma_store_ok
            for text in script.COMPARE_LAST_GROUP:
                s = _schedule(text)
                if s.epilogue == "tma" and not aligned:
                    with pytest.raises(LaunchError, match=script.REFUSAL):
                        ops_matmul.matmul(a, b, out, schedule=s)
                    refused.append((shape, layout, text))
    assert len(refused) == 2
    assert {(sh, ly) for sh, ly, _ in refused} == {("2900x1700x136", "NN"),
                                                 ("2900x1700x136", "NT")}
    # the new ragged shape keeps the same tile grid with 16-byte aligned C rows: checked
    assert "2900x1704x136" in script.RAGGED_SHAPES.split(",")
    for layout in ("NN", "NT"):
        assert problem_of(*_ragged("2900x1704x136", layout))[0].tma_store_ok


def test_the_check_count_line_separates_refusals_from_wrong_results():
    rows = [{"verdict": v} for v in ("ok", "ok", "REFUSED", "WRONG", "REFUSED")]
    line = script.check_summary(rows, "as-lowered")
    assert line.startswith("CHECK [as-lowered]: ok 2, WRONG 1, REFUSED 2 ")
    assert line.endswith("of 5")
