"""The device header argus_sm90.cuh and the reference GEMM written with it compile to sm_90a.

NVRTC runs on the CPU, so these tests need no GPU: they check that every header function
compiles (ptxas accepts every inline-asm string), that the reference GEMM compiles without
spills, and that its generated wgmma block matches argus.codegen.wgmma.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

from argus.codegen.wgmma import WgmmaSpec, wgmma_prelude
from argus.runtime import compile_cuda, device_header_dir, find_tool, nvrtc_available
from tests.loading import load_script

ROOT = Path(__file__).resolve().parents[2]
HEADER = device_header_dir() / "argus_sm90.cuh"
GEMM = ROOT / "examples" / "cuda" / "gemm_reference.cu"
GEMM_KERNEL = "argus_gemm_bf16_tn"

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


# A kernel that calls every header function once, so ptxas sees every asm string.
EVERYTHING = r"""
#include "argus_sm90.cuh"
using namespace ag;

extern "C" __global__ void __launch_bounds__(384, 1)
everything(const __grid_constant__ TensorMap tm, float* out, bf16* out16, int n) {
    __shared__ alignas(1024) unsigned char buf[4096];
    __shared__ uint64_t bar[2];
    if (threadIdx.x == 0) { mbar_init(&bar[0], 1); fence_barrier_init(); prefetch_tensormap(&tm); }
    __syncthreads();
    if (warp_id() == 0 && elect_one_sync()) {
        mbar_arrive_expect_tx(&bar[0], 4096);
        tma_load_2d(&tm, buf, &bar[0], 0, 0);
        tma_load_3d(&tm, buf, &bar[0], 0, 0, 1);
        tma_load_2d_multicast(&tm, buf, &bar[0], 0, 0, 3);
        tma_load_1d(&tm, buf, &bar[0], 0);
        tma_load_4d(&tm, buf, &bar[0], 0, 0, 0, 1);
        tma_load_5d(&tm, buf, &bar[0], 0, 0, 0, 0, 1);
    }
    mbar_wait(&bar[0], 0);
    if (!mbar_try_wait(&bar[0], 1)) mbar_arrive_cluster(&bar[1], 0);
    float x = out[threadIdx.x];
    x = exp2_approx(x) + exp_fast(x) + tanh_approx(x) + rcp_approx(x) + rsqrt_approx(x)
      + sqrt_approx(x) + log2_approx(x) + log_fast(x) + ag::fmax(x, 1.f) + ag::fmin(x, 0.f)
      + shfl_xor(x, 1) + inf_f32() + neg_inf_f32() + nan_f32() + max_f32();
    uint32_t p = pack_bf16x2(x, x + 1.f) ^ pack_f16x2(x, x) ^ e4m3x2_to_f16x2(pack_e4m3x2(x, x));
    x += bf16x2_lo(p) + bf16x2_hi(p) + bf16_to_f32(f32_to_bf16(x)) + f16_to_f32(f32_to_f16(x));
    x += e4m3_to_f32(f32_to_e4m3(x));
    { float a, b, c, e; unpack_e4m3x4(pack_e4m3x4(x, x + 1.f, x + 2.f, x + 3.f), a, b, c, e);
      x += a + b + c + e; }
    uint32_t r0, r1, r2, r3;
    ldmatrix_x4(buf + lane_id() * 16, r0, r1, r2, r3);
    ldmatrix_x4_trans(buf + lane_id() * 16, r0, r1, r2, r3);
    stmatrix_x4(buf, r0, r1, r2, r3);
    stmatrix_x4_trans(buf, r0, r1, r2, r3);
    fence_view_async_shared();
    named_barrier_sync(1, 128);
    named_barrier_arrive(2, 128);
    if (threadIdx.x == 0) {
        tma_store_2d(&tm, buf, 0, 0);
        tma_store_3d(&tm, buf, 0, 0, 0);
        tma_store_1d(&tm, buf, 0);
        tma_store_4d(&tm, buf, 0, 0, 0, 1);
        tma_store_5d(&tm, buf, 0, 0, 0, 0, 1);
        tma_reduce_add_2d(&tm, buf, 0, 0);
        tma_store_commit();
        tma_store_wait_read<0>();
        tma_store_wait<0>();
    }
    uint64_t d = desc_advance(make_smem_desc(buf, 128, 16, 1024), 32);
    d ^= make_smem_desc(buf, 64, 16, 512) ^ make_smem_desc(buf, 32, 16, 256)
       ^ make_smem_desc(buf, 0, 128, 256);
    wgmma_fence();
    wgmma_commit();
    wgmma_wait<0>();
    float acc[4] = {x, x, x, x};
    fence_operands(acc);
    fence_operand(r0);
    if (warpgroup_id() == 0) setmaxnreg_dec<40>(); else setmaxnreg_inc<232>();
    cluster_arrive(); cluster_wait(); cluster_sync(); cluster_arrive_relaxed(); cluster_wait();
    x += cluster_ctarank() + cluster_nctarank() + warp_in_warpgroup() + (float)d + acc[3];
    mbar_arrive(&bar[1]);
    mbar_expect_tx(&bar[1], 16);
    st_global_b32(out + 2 * threadIdx.x, r0 ^ r1 ^ r2 ^ r3 ^ p);
    st_global_f32x2(out, x, x);
    st_global_b16(out16, f32_to_bf16(x).x);
    out[threadIdx.x] = x;
}
"""


def test_header_has_no_includes_and_only_forceinline_device_functions():
    text = HEADER.read_text()
    assert not re.search(r"^\s*#\s*include", text, re.MULTILINE), "the header must be NVRTC-clean"
    assert "namespace ag {" in text
    # Every declaration that starts at column 0 and has a parameter list is a function, and
    # must be __device__ __forceinline__ (continuation lines are indented).
    code = re.sub(r"//[^\n]*", "", text)
    starts = [line for line in code.splitlines() if re.match(r"[A-Za-z_]", line)]
    ignored = ("template", "struct", "typedef", "static_assert", "namespace")
    functions = [line for line in starts if "(" in line and not line.startswith(ignored)]
    assert len(functions) > 40
    for line in functions:
        assert line.startswith("__device__ __forceinline__"), line


def test_every_function_has_a_ptx_citation_or_is_plain_cpp():
    text = HEADER.read_text()
    assert text.count("PTX ISA") >= 30


@needs_nvrtc
def test_every_header_function_compiles_to_sm90a():
    binary = compile_cuda(EVERYTHING, ["everything"], filename="everything.cu")
    assert binary.cubin[:4] == b"\x7fELF"
    res = binary.resource("everything")
    assert res.registers > 0
    for opcode in ("elect.sync", "setmaxnreg.inc.sync.aligned.u32 232", "mapa.shared::cluster",
                   "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx",
                   "multicast::cluster", "cp.async.bulk.tensor.5d", "stmatrix.sync.aligned.m8n8.x4.trans",
                   "cp.reduce.async.bulk.tensor.2d", "barrier.cluster.wait.acquire.aligned",
                   "mbarrier.try_wait.parity.shared::cta.b64", "cvt.rn.bf16x2.f32"):
        assert opcode in binary.ptx, opcode


@needs_nvrtc
def test_nvrtc_math_builtins_need_no_include():
    # Documents what generated code may call without any header (the CUDA math API is built
    # into NVRTC); INFINITY and other <cmath> macros are NOT available.
    source = r"""
extern "C" __global__ void math(float* o) {
    float x = o[threadIdx.x];
    o[threadIdx.x] = expf(x) + logf(x) + erff(x) + tanhf(x) + sqrtf(x) + fmaxf(x, 1.f)
        + fminf(x, 2.f) + __expf(x) + exp2f(x) + rsqrtf(x) + __fdividef(x, 3.f) + fabsf(x)
        + log2f(x) + powf(x, 2.f) + floorf(x) + __saturatef(x) + __int_as_float(1)
        + __uint_as_float(2u) + max(x, 2.f) + (float)isinf(x) + __shfl_xor_sync(~0u, x, 1);
}
"""
    binary = compile_cuda(source, ["math"], filename="math.cu")
    assert ".entry math" in binary.ptx
    # Without --use_fast_math these are the accurate software versions, not the SFU ones: the
    # header's exp2_approx / tanh_approx pin the fast instructions explicitly.
    assert "tanh.approx" not in binary.ptx


def _gemm_source() -> str:
    return GEMM.read_text()


def test_reference_gemm_generated_block_matches_the_generator():
    text = _gemm_source()
    begin = text.index("// BEGIN GENERATED wgmma")
    start = text.index("\n", text.index("\n", begin) + 1) + 1
    end = text.index("// END GENERATED wgmma")
    expected = wgmma_prelude([WgmmaSpec(256, "bf16", "bf16")])
    if os.environ.get("ARGUS_ACCEPT") == "1" and text[start:end] != expected:
        GEMM.write_text(text[:start] + expected + text[end:])
        text = _gemm_source()
    assert text[start:end] == expected, "regenerate with ARGUS_ACCEPT=1"


@needs_nvrtc
def test_reference_gemm_compiles_without_spills():
    binary = compile_cuda(_gemm_source(), [GEMM_KERNEL], filename="gemm_reference.cu")
    res = binary.resource(GEMM_KERNEL)
    # __launch_bounds__(384, 1) caps the kernel at 65536 / 384 -> 168 registers at entry;
    # setmaxnreg then moves registers from the producer to the consumers.
    assert 0 < res.registers <= 168
    assert not res.spills, res.summary()
    assert res.stack_frame == 0
    ptx = binary.ptx
    assert ptx.count("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16") == 4
    assert "setmaxnreg.dec.sync.aligned.u32 40" in ptx
    assert "setmaxnreg.inc.sync.aligned.u32 232" in ptx
    assert ptx.count("cp.async.bulk.tensor.2d") == 2
    assert ".global .align" not in ptx, "no global data (constants must not become .global)"


@pytest.mark.skipif(find_tool("nvcc") is None, reason="nvcc not installed")
def test_reference_gemm_compiles_with_nvcc(tmp_path):
    out = tmp_path / "gemm.cubin"
    proc = subprocess.run(
        [find_tool("nvcc"), "-gencode", "arch=compute_90a,code=sm_90a", "-cubin", "-std=c++17",
         "-I", str(device_header_dir()), "-Xptxas", "-v", "-o", str(out), str(GEMM)],
        check=False, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "0 bytes spill stores, 0 bytes spill loads" in proc.stdout + proc.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"


def test_smoke_script_smem_matches_the_kernel():
    smoke = load_script("gpu_header_smoke")  # no GPU work at import
    consts = {name: int(value) for name, value in
              re.findall(r"^\s+(BM|BN|BK|STAGES) = (\d+),", _gemm_source(), re.MULTILINE)}
    assert (consts["BM"], consts["BN"], consts["BK"], consts["STAGES"]) == \
        (smoke.BM, smoke.BN, smoke.BK, smoke.STAGES)
    stage = consts["BM"] * consts["BK"] * 2 + consts["BN"] * consts["BK"] * 2
    assert smoke.SMEM_BYTES == consts["STAGES"] * stage + 2 * consts["STAGES"] * 8 + 1024
