"""The small-K GEMM candidates of scripts/gemm_small_k.py (ResNet-50's 1x1 convolutions as
GEMMs, issue 17), which its --gpu mode times against cuBLAS and cuDNN: each computes the GEMM
(numpy interpreter against float64 on a ragged problem: partial tiles, a K tail), verifies
with no finding. Two of them are the 16-bit pointwise route's alternatives to matmul's
untuned tile since their H200 run (argus.ops.conv.POINTWISE_TILES, `pointwise_tile`;
docs/perf/conv.md "Strided rowbox, ResNet-50 op table and small-K GEMM tiles, measured"); the
tests below check the rule's picks on the measured layers. NVRTC's registers and spills:
`scripts/gemm_small_k.py --check`."""

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



def test_pointwise_tiles_are_verified_schedules():
    """Every tile the pointwise rule may pick is a candidate verified above or matmul's own
    untuned pick (verified by tests/verify/test_library_schedules.py)."""
    import dataclasses

    from argus.ops.conv import POINTWISE_TILES
    from argus.ops.schedules import untuned

    picks = {untuned(small_k.problem_for(s)) for s in small_k.SHAPES}
    known = [dataclasses.replace(c, num_sms=132) for c in CANDIDATES.values()] + list(picks)
    for tile in POINTWISE_TILES:
        assert dataclasses.replace(tile, num_sms=132) in known, tile


def test_pointwise_tile_picks_the_measured_fastest():
    """The rule against the H200 table (docs/perf/conv.md): 128x64 where N = 64, 64x128 where
    128x128 tiles leave the last round short (c3 512->128: 196 tiles on 132 SMs; c5 2048->512:
    52), the 128x128 ping-pong elsewhere (ties included)."""
    from argus.ops.conv import pointwise_tile

    want = {"c2 1x1 64->64": (128, 64), "c2 1x1 256->64": (128, 64),
            "c3 1x1 512->128": (64, 128), "c5 1x1 2048->512": (64, 128)}
    for shape in small_k.SHAPES:
        tile = pointwise_tile(small_k.problem_for(shape), 132)
        assert (tile.bm, tile.bn) == want.get(shape[0], (128, 128)), (shape[0], tile)
        assert tile.pingpong and tile.epilogue == "tma" and tile.num_sms == 132
    # fewer SMs: c3 512->128's 196 tiles fill 98 SMs in two exact rounds (2 x 16384 against
    # 64x128's 4 x 8192): the 128x128 tile stays
    assert pointwise_tile(small_k.problem_for(small_k.SHAPES[3]), 98).bm == 128


def test_pointwise_route_uses_the_rule_only_untuned():
    """conv2d's 16-bit pointwise route builds its GEMM with the rule's tile (CPU: the
    interpreter's (kernel, schedule)); fp32 (tf32) and small M keep matmul's choice."""
    import torch

    from argus.ops import conv as conv_op
    from argus.ops.schedules import untuned

    A = torch.empty(100352, 64, dtype=torch.bfloat16)
    Bt = torch.empty(64, 64, dtype=torch.bfloat16)
    out = torch.empty(100352, 64, dtype=torch.bfloat16)
    chosen, _ = conv_op.pointwise_gemm(A, Bt, out)
    assert (chosen.bm, chosen.bn, chosen.stages) == (128, 64, 8)
    small = torch.empty(512, 64, dtype=torch.bfloat16)
    chosen, _ = conv_op.pointwise_gemm(small, Bt, torch.empty(512, 64, dtype=torch.bfloat16))
    problem = small_k.problem_for(("", 1, 64, 16, 32, 64, "bf16"))       # M = 512
    assert chosen == untuned(problem)
