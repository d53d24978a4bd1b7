"""The checks each short-prefill attention candidate of scripts/gpu_attention_bench.py passes
without a GPU (test_attention_short_variants.py, test_attention_snake.py,
test_attention_cluster.py): NVRTC builds it for sm_90a without spills within the registers a
thread enters with, and the verifier finds no error in it. Each test file asserts the rest of
the report (unknowns, proven count) itself."""

from __future__ import annotations

import argus as ag
from argus import verify
from argus.compiler import compile_kernel, lower_only
from argus.kernels.attention import AttentionSchedule, attention_kernel
from argus.target.limits import entry_registers
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")


def assert_builds_without_spills(s: AttentionSchedule, head_dim: int, causal: bool) -> None:
    """The bf16 attention kernel under `s`, built without the verifier: no spill stores or
    loads, and no more registers than a thread of its CTA shape enters with."""
    res = compile_kernel(attention_kernel(head_dim, ag.bf16, causal, False), verify=False,
                         s=s).resources
    assert res.spill_stores == 0 and res.spill_loads == 0, (s, res)
    assert res.registers <= entry_registers(128 * (1 + s.consumers), s.ctas_per_sm), res


def verified_without_errors(s: AttentionSchedule, head_dim: int, causal: bool):
    """The verifier's report on the bf16 attention kernel under `s`, asserted free of errors."""
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, causal, False), s=s))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    return report
