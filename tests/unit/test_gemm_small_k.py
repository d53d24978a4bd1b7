"""The small-K GEMM candidates of scripts/gemm_small_k.py (ResNet-50's 1x1 convolutions as
GEMMs, issue 17), which its --gpu mode times against cuBLAS and cuDNN: each computes the GEMM
(numpy interpreter against float64 on a ragged problem: partial tiles, a K tail), verifies
with no finding. None of them is a default (argus.ops.schedules.candidates does not list
them: a default changes only with a GPU number, docs/perf/conv.md "1x1 layers: the op's route
and small-K GEMM candidates"). NVRTC's registers and spills: `scripts/gemm_small_k.py --check`."""

from __future__ import annotations

import pytest

from argus import verify
from argus.compiler import lower_only
from argus.ops.schedules import kernel_for
from tests.loading import load_script

small_k = load_script("gemm_small_k")
CANDIDATES = small_k.candidates()


def test_shapes_are_the_resnet50_pointwise_gemms():
    # M = N*H*W, K = C, N = K_out for every row, bf16 but one fp16 row; M runs 1568..100352
    problems = [small_k.problem_for(s) for s in small_k.SHAPES]
    assert len(problems) == 10
    assert {(p.m, p.k, p.n) for p in problems} >= {(100352, 64, 64), (100352, 64, 256),
                                                   (25088, 512, 128), (6272, 1024, 256),
                                                   (1568, 512, 2048)}
    assert all(p.b_layout == "nk" and p.tma_store_ok and p.batch == 1 for p in problems)
    assert [p.in_dtype for p in problems].count("f16") == 1


@pytest.mark.parametrize("label", list(CANDIDATES))
@pytest.mark.parametrize("dt", ["bf16", "f16"])
def test_candidate_matches_float64_in_the_interpreter(label, dt):
    err = small_k.interpret_error(CANDIDATES[label], dt)
    # the output's rounding: 2^-8 relative in bf16, 2^-11 in fp16 (plus fp32 accumulation)
    assert err < (8e-3 if dt == "bf16" else 1e-3), (label, dt, err)


@pytest.mark.parametrize("label", list(CANDIDATES))
def test_candidate_verifies_clean(label):
    p = small_k.problem_for(small_k.SHAPES[0])
    fn, s = kernel_for(p, CANDIDATES[label])
    report = verify.run(lower_only(fn, s=s))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)
    assert len(report.proven) >= 20

