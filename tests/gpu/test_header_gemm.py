"""On a Hopper GPU: the reference GEMM written with argus_sm90.cuh, compiled and launched through
argus.runtime, matches a float64 reference on aligned and ragged shapes, and its SASS uses
HGMMA without spills. Skipped cleanly without a CUDA device."""

from __future__ import annotations
import math
from pathlib import Path

import pytest
import torch
from tests.loading import load_script


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
    pytest.mark.skipif(torch.cuda.is_available() and torch.cuda.get_device_capability() != (9, 0),
                       reason="needs an sm_90 (Hopper) device"),
]


def _smoke():
    """The GPU smoke script as a module: one implementation of the GEMM launch."""
    return load_script("gpu_header_smoke")


@pytest.fixture(scope="module")
def smoke():
    return _smoke()


@pytest.fixture(scope="module")
def binary(smoke):
    return smoke.compile_reference()


@pytest.mark.parametrize(("m", "n", "k"), [
    (128, 256, 64), (256, 512, 256), (1000, 1234, 4096), (77, 301, 136), (1024, 1024, 1024),
])
def test_reference_gemm_matches_float64(smoke, binary, m, n, k):
    torch.manual_seed(m + n + k)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16)
    c = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
    smoke.prepare_gemm(binary, a, b, c)(sync=False)
    smoke.wait_or_exit(f"GEMM {m}x{n}x{k}")
    err = smoke.relative_error(a, b, c)
    assert math.isfinite(err) and err < 1e-2, f"{m}x{n}x{k}: relative error {err}"


def test_reference_gemm_resources_and_sass(binary):
    from argus.runtime import check_sass, disassemble, function_attributes

    res = binary.resource("argus_gemm_bf16_tn")
    assert not res.spills
    attrs = function_attributes(binary, "argus_gemm_bf16_tn")
    assert attrs.local_bytes == 0
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no cuobjdump/nvdisasm to read SASS")
    check = check_sass(sass, want=("HGMMA", "UTMALDG"), forbid=("HMMA", "LDL", "STL"))
    assert check.ok, str(check)
