"""scripts/gpu_moe_bench.py's decode metrics that run on the CPU (issue 16): the expert GEMMs'
span (gemm_spans), which replaces summed profiler durations where the GEMMs take PDL. A PDL
kernel starts while the kernel before it runs and its duration counts its wait: at Mixtral
T = 16 the down's duration was 294 us with PDL and 194 us without (same run), so summed
durations put the GEMMs at 88% of the floor where the kernels' own time is 103%."""

from __future__ import annotations

from tests.loading import load_script

bench = load_script("gpu_moe_bench")


def _call(t0, *, pdl, gate_up=14.0, down=8.0, wait=3.0):
    """One decode layer call's kernels from t0 (us): routing, permute, gate-up, down,
    combine; with pdl the gate-up starts 1 us into the permute and the down `wait` us before
    the gate-up ends (its early CTAs waiting on SMs the gate-up left)."""
    ev = [("argus_moe_layout_small_128_8", t0, t0 + 6.0),
          ("argus_moe_permute_k8_1024_pdl", t0 + 6.5, t0 + 8.0)]
    g0 = t0 + (7.0 if pdl else 8.5)
    g1 = (t0 + 8.0 if pdl else g0) + gate_up
    d0 = g1 - wait if pdl else g1 + 0.5
    d1 = (g1 if pdl else d0) + down
    ev += [("argus_moe_gate_up(...)", g0, g1), ("argus_moe_down(...)", d0, d1),
           ("argus_moe_combine_k8_1024", d1 + 0.3, d1 + 2.0)]
    return ev, d1 - (t0 + 8.0)


def test_the_span_counts_a_pdl_wait_once():
    events, want = [], []
    for i, pdl in enumerate((True, False, True)):
        ev, span = _call(100.0 * i, pdl=pdl)
        events += ev
        want.append(span)
    # the profiler lists kernels in no promised order
    got = bench.gemm_spans(list(reversed(events)))
    assert got == want, (got, want)
    # PDL: 14 + 8 us of work after the permute, though the durations sum to 15 + 11
    assert want[0] == 22.0 and want[1] == 23.0


def test_the_split_finish_is_part_of_the_span_and_a_run_without_a_start_is_left_out():
    events = [("argus_moe_gate_up_partial(...)", 0.0, 10.0),     # nothing before it
              ("argus_moe_split_finish_s2_8", 10.5, 12.0), ("argus_moe_down(...)", 12.5, 20.0),
              ("argus_moe_combine_k8_1024", 20.5, 21.0),
              ("argus_moe_permute_k8_1024", 30.0, 31.0),
              ("argus_moe_gate_up_partial(...)", 31.5, 40.0),
              ("argus_moe_split_finish_s2_8", 40.5, 42.0), ("argus_moe_down(...)", 42.5, 50.0)]
    assert bench.gemm_spans(events) == [19.0]   # 31 -> 50, the run at the end closed too
    assert bench.gemm_spans([("argus_moe_permute_k8_1024", 0.0, 1.0)]) == []
