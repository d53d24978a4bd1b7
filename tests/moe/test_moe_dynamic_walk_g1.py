"""The dynamic walk with group_m=1 (bench variant split_smem_tma_dyn_g1): the raster's m-tile
by m-tile order (an m-tile's n-tiles consecutive) drawn in order, the order scripts/
moe_l2_model.py models with the least DRAM traffic among the existing knobs at DeepSeek-V3
T = 16384 (docs/perf/moe.md, 2026-12-07). The order is data (group_m), the kernels unchanged;
checked here: the layer in the interpreter against float64 and bit for bit against the static
default walk, with wrapping walks (num_sms=2) and zero-row experts; the verifier with zero
findings and the walk's proofs; NVRTC sm_90a without spills."""

from dataclasses import replace

import pytest
import torch

from argus import verify
from argus.compiler import lower_only
from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA, grouped_gemm_fp8_smem_kernel
from argus.runtime import nvrtc_available

from tests.moe.conftest import assert_builds_without_spills
from tests.moe.test_moe_fp8_layer import _rel
from tests.moe.test_moe_unit_grid import _bits, _layer

G1 = replace(FP8_PREFILL_SPLIT_SMEM_TMA, scheduler="dynamic", group_m=1)


@pytest.mark.parametrize("num_sms", [2, 132])
def test_g1_dynamic_layer_matches_float64_and_the_default_bits(num_sms):
    ref, ref_ws, _ = _layer(replace(FP8_PREFILL_SPLIT_SMEM_TMA, num_sms=num_sms),
                            replace(FP8_PREFILL_SPLIT_SMEM_TMA, num_sms=num_sms), True)
    s = replace(G1, num_sms=num_sms)
    out, ws, exact = _layer(s, s, True)
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    assert torch.equal(out, ref)
    for key in ("y", "h"):
        assert torch.equal(_bits(ws[key]), _bits(ref_ws[key])), key


KERNELS = [("gate_up", True), ("down", False)]


@pytest.mark.parametrize("name,gated", KERNELS, ids=[k[0] for k in KERNELS])
def test_g1_dynamic_kernels_verify_clean(name, gated):
    report = verify.run(lower_only(grouped_gemm_fp8_smem_kernel(gated, dynamic=True), s=G1))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    assert {"pipe.totals", "wgmma.agree", "wgmma.k-once", "store.coords",
            "atomic.tickets"} <= proven, proven


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("name,gated", KERNELS, ids=[k[0] for k in KERNELS])
def test_g1_dynamic_kernels_build_without_spills(name, gated):
    assert_builds_without_spills(grouped_gemm_fp8_smem_kernel(gated, dynamic=True), G1)
