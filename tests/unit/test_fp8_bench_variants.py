"""scripts/gpu_fp8_bench.py --variants without a GPU: every variant schedule is legal, fits
shared memory and verifies clean (so the GPU run measures them instead of reporting
FAILED), and the table reads its rows right (WRONG and FAILED cells, geomean over the right
ones only, the best per shape)."""
import dataclasses
import math
from pathlib import Path

import pytest

import argus as ag
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import gemm_fp8_blockscaled_kernel, gemm_fp8_blockscaled_smem_kernel

from tests.fp8_blockscaled import verify_clean
from tests.loading import load_script



def _bench():
    return load_script("gpu_fp8_bench")


BENCH = _bench()
VARIANTS = BENCH.variant_schedules()


def test_variants_are_distinct_and_hold_the_default_of_each_shape():
    from argus.ops.fp8_schedules import Fp8Problem, heuristic

    names = [name for name, _ in VARIANTS]
    assert len(set(names)) == len(names)
    assert len({s for _, s in VARIANTS}) == len(VARIANTS)
    schedules = [s for _, s in VARIANTS]
    # the default at every measured shape is a variant: the split 128 x 256 with shared-memory
    # scales, and at N = 2112 the wave pick's 192 x 128 c3 (measured best there, 2026-12-05)
    defaults = {(m, n, k): heuristic(Fp8Problem(m, n, k, "bf16", True, True))
                for m, n, k in BENCH.VARIANT_SHAPES}
    assert all(d in schedules for d in defaults.values()), defaults
    smem_split = dict(VARIANTS)["split 128x256 smem scales"]
    c3 = dict(VARIANTS)["serial 192x128 c3 smem scales"]
    assert {s for (_, n, _), s in defaults.items() if n != 2112} == {smem_split}
    assert {s for (_, n, _), s in defaults.items() if n == 2112} == {c3}
    assert all(s.promote for _, s in VARIANTS)


@pytest.mark.parametrize("name,schedule", VARIANTS, ids=[name for name, _ in VARIANTS])
def test_variant_lowers_and_verifies_clean(name, schedule):
    kf = gemm_fp8_blockscaled_smem_kernel if schedule.smem_scales else \
        gemm_fp8_blockscaled_kernel
    verify_clean(lower_only(kf(ag.bf16), s=schedule))   # shared memory fits


def test_variants_table_reads_its_rows():
    names = [(name, None) for name in ("a", "b", "c")]
    rows = [{"M": 1, "N": 2, "K": 3, "torch_block_tflops": 1000.0,
             "variants": {"a": {"tflops": 900.0, "rel_error": 1.7e-3, "ok": True},
                          "b": {"tflops": 1500.0, "rel_error": 0.3, "ok": False},
                          "c": {"error": "CompileError: x"}}},
            {"M": 4, "N": 5, "K": 6,
             "variants": {"a": {"tflops": 400.0, "rel_error": 1.7e-3, "ok": True},
                          "b": {"tflops": 1200.0, "rel_error": 1.7e-3, "ok": True}}}]
    text = BENCH.variants_table(rows, names, {"a": {"registers": 168, "spill_bytes": 0}})
    lines = text.splitlines()
    assert lines[0].startswith("| variant | 1x2x3 | 4x5x6 | geomean")
    assert lines[2] == "| a | 900 | 400 | 600 | 168 / 0 |"
    assert lines[3].startswith("| b | WRONG 3.0e-01 | 1200 | 1200 |")   # wrong: not in geomean
    assert lines[4] == "| c | FAILED |  |  | ? / ? |"   # failed here, did not run there
    assert lines[5].startswith("| torch._scaled_mm block | 1000 | n/a")
    assert lines[6] == "| best | 900 (a) | 1200 (b) | | |"


def test_block_inputs_reference_is_the_dequantized_product():
    """The float64 reference every --block / --variants schedule is checked against is the
    product of the dequantized inputs (activation scales per 1x128 of K, weight scales per
    128x128 block, N not a multiple of 128), written here with explicit block indices; the
    shape seeds the inputs; rel_error is NaN for an output a kernel never wrote."""
    import torch

    m, n, k = 64, 200, 384
    a, w, sa, sb, ref = BENCH.block_inputs(m, n, k)
    assert a.dtype == w.dtype == torch.float8_e4m3fn and sa.shape == (m, k // 128)
    assert sb.shape == (2, k // 128)
    kb, nb = torch.arange(k) // 128, torch.arange(n) // 128
    a64 = a.double() * sa.double()[:, kb]
    w64 = w.double() * sb.double()[nb][:, kb]
    assert torch.allclose(ref, a64 @ w64.T, rtol=1e-12, atol=1e-9)
    assert torch.equal(BENCH.block_inputs(m, n, k)[4], ref)
    assert 0 < BENCH.rel_error(ref.to(torch.bfloat16), ref) < 8e-3
    assert math.isnan(BENCH.rel_error(torch.full_like(ref, float("nan")), ref))


def test_only_selects_by_name_and_rounds_alternate():
    """--only keeps the variants whose name contains a given text (a text matching none stops
    the run before any device time, naming the variants); --rounds times every kept variant
    once a round, forwards then backwards, so none is always first."""
    everything = VARIANTS + BENCH.ceiling_schedules()
    assert BENCH.select_variants(everything, []) == everything
    chosen = BENCH.select_variants(everything, ["overlap 128x128", "st4 cluster"])
    assert [name for name, _ in chosen] == ["overlap 128x128", "split-overlap 128x128",
                                            "split 128x256 st4 cluster",
                                            "split 128x256 st4 cluster 128 SMs",
                                            "per-tensor split 128x256 st4 cluster promoted"]
    with pytest.raises(SystemExit, match="split 128x256 st4 cluster"):
        BENCH.select_variants(everything, ["no such variant"])
    orders = BENCH.round_orders(["a", "b", "c"], 3)
    assert orders == [["a", "b", "c"], ["c", "b", "a"], ["a", "b", "c"]]
    assert BENCH.round_orders(["a"], 1) == [["a"]]


def test_multicast_split_is_a_variant_and_a_tuning_candidate():
    """The 128 x 256 split with W multicast at the default's 4 stages: timed by --variants
    against the split default and measured by --block's tuning (fp8_schedules candidates)."""
    from argus.ops import fp8_schedules
    from argus.ops.fp8_schedules import Fp8Problem

    schedules = dict(VARIANTS)
    s = schedules["split 128x256 st4 cluster"]
    assert s == dataclasses.replace(schedules["split 128x256 st4"], cluster_m=2)
    assert s == fp8_schedules._SPLIT_256_TMA_C2
    for m, n, k in BENCH.VARIANT_SHAPES:
        assert s in fp8_schedules.candidates(Fp8Problem(m, n, k, "bf16", True, True))
        # not the default anywhere: it is measured first
        assert fp8_schedules.heuristic(Fp8Problem(m, n, k, "bf16", True, True)) != s


@pytest.mark.parametrize("name,schedule", BENCH.ceiling_schedules(),
                         ids=[name for name, _ in BENCH.ceiling_schedules()])
def test_ceiling_variants_are_per_tensor_and_verify_clean(name, schedule):
    """--ceiling's schedules run the per-tensor kernel (the bench dispatches on the name's
    "per-tensor" prefix, which no block-scaled variant has) and verify clean."""
    from argus.kernels.gemm_fp8 import gemm_fp8_kernel

    assert name.startswith("per-tensor") and not schedule.smem_scales
    assert not any(n.startswith("per-tensor") for n, _ in VARIANTS)
    verify_clean(lower_only(gemm_fp8_kernel(ag.bf16), s=schedule))


def test_variants_table_shows_the_graph_replay_beside_the_op():
    """--graphs: the kernel replayed from a CUDA graph in parentheses after the op's TFLOP/s
    (torch's too); the geomean and the best stay the op's."""
    rows = [{"M": 1, "N": 2, "K": 3, "torch_block_tflops": 1000.0,
             "torch_block_graph_tflops": 1100.0,
             "variants": {"a": {"tflops": 900.0, "graph_tflops": 1250.0, "rel_error": 1e-3,
                                "ok": True}}}]
    lines = BENCH.variants_table(rows, [("a", None)], {}).splitlines()
    assert lines[2] == "| a | 900 (1250) | 900 | ? / ? |"
    assert lines[3].startswith("| torch._scaled_mm block | 1000 (1100) |")
    assert lines[4] == "| best | 900 (a) | | |"


def test_fewest_sms_keeps_the_waves_and_the_cluster_pairs():
    """fp8_schedules.fewest_sms: the least grid with as many waves as 132 SMs take, a
    multiple of the cluster size; a candidate of the multicast split only where there is
    more than one wave (with one, the grid is the tile count already)."""
    from argus.ops import fp8_schedules as fs
    from argus.ops.fp8_schedules import Fp8Problem

    s = fs._SPLIT_256_TMA_C2
    cases = {(4096, 7168): 128,      # 896 tiles: 7 waves on 132 or on 128
             (4096, 2112): 96,       # 288 tiles: 3 waves
             (6784, 1280): 90,       # 265 tiles: 3 waves on 89, rounded up to the pair
             (8192, 32768): 132}     # 8192 tiles: 63 waves (62.06): 131 -> 132
    for (m, n), want in cases.items():
        p = Fp8Problem(m, n, 2048, "bf16", True, True)
        got = fs.fewest_sms(p, s)
        assert got == want, (m, n, got)
        tiles = -(-m // 128) * -(-n // 256)
        assert -(-tiles // got) == -(-tiles // 132) and got % 2 == 0
        few = [c for c in fs.candidates(p) if c.n_split == 2 and c.num_sms != 132]
        assert few == ([dataclasses.replace(s, num_sms=want)] if want < 132 else []), few
    one_wave = Fp8Problem(1024, 2048, 2048, "bf16", True, True)
    assert all(c.num_sms == 132 for c in fs.candidates(one_wave))
