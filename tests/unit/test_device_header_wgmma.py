"""argus.codegen.wgmma: names, PTX text and legality of the generated wgmma wrappers, and that
the generated C++ compiles (ptxas accepts every shape / dtype / operand-source combination)."""

from __future__ import annotations

import pytest

from argus import dtypes
from argus.codegen.wgmma import (
    WgmmaSpec,
    wgmma_function_name,
    wgmma_function_source,
    wgmma_prelude,
)
from argus.runtime import compile_cuda, nvrtc_available


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def test_names():
    assert wgmma_function_name(256, "bf16", "bf16", "f32") == "wgmma_m64n256k16_f32_bf16_ss"
    assert wgmma_function_name(64, dtypes.f16, dtypes.f16, dtypes.f32, "regs", True) == \
        "wgmma_m64n64k16_f32_f16_rs_tb"
    assert wgmma_function_name(128, "e4m3", "e4m3", "f32") == "wgmma_m64n128k32_f32_e4m3_ss"
    assert wgmma_function_name(32, "e4m3", "e5m2", "f16") == "wgmma_m64n32k32_f16_e4m3_e5m2_ss"
    assert wgmma_function_name(16, "bf16", "bf16", trans_a=True) == \
        "wgmma_m64n16k16_f32_bf16_ss_ta"


def test_source_shape_of_the_m64n256_bf16_wrapper():
    text = wgmma_function_source(256, "bf16", "bf16", "f32")
    assert "void wgmma_m64n256k16_f32_bf16_ss(float (&d)[128], uint64_t desc_a," in text
    assert "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16" in text
    # 128 accumulators %0..%127, then desc_a %128, desc_b %129, scale_d %130 as the predicate.
    assert "setp.ne.b32 p, %130, 0;" in text
    assert "}, %128, %129, p, 1, 1, 0, 0;" in text
    assert text.count('"+f"(d[') == 128
    assert '"+f"(d[127])' in text and '"r"(scale_d)' in text


def test_transpose_and_register_a_immediates():
    tb = wgmma_function_source(64, "bf16", "bf16", "f32", trans_b=True)
    assert "p, 1, 1, 0, 1;" in tb
    rs = wgmma_function_source(64, "f16", "f16", "f32", "regs", trans_b=True)
    # A from registers: four b32 registers and no imm-trans-a.
    assert "{%32, %33, %34, %35}, %36, p, 1, 1, 1;" in rs
    assert "const uint32_t (&a)[4]" in rs
    fp8 = wgmma_function_source(64, "e4m3", "e4m3", "f32")
    assert "m64n64k32.f32.e4m3.e4m3" in fp8 and "p, 1, 1;" in fp8
    f16acc = wgmma_function_source(64, "f16", "f16", "f16")
    assert "uint32_t (&d)[16]" in f16acc and '"+r"(d[15])' in f16acc


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"n": 12, "a_dtype": "bf16", "b_dtype": "bf16"}, "multiple of 8"),
    ({"n": 264, "a_dtype": "bf16", "b_dtype": "bf16"}, "multiple of 8 in [8, 256]"),
    ({"n": 64, "a_dtype": "bf16", "b_dtype": "f16"}, "same type"),
    ({"n": 64, "a_dtype": "bf16", "b_dtype": "bf16", "acc_dtype": "f16"}, "f32 only"),
    ({"n": 64, "a_dtype": "e4m3", "b_dtype": "e4m3", "trans_b": True}, "K-major"),
    ({"n": 64, "a_dtype": "f16", "b_dtype": "f16", "a_source": "regs", "trans_a": True},
     "no transpose"),
    ({"n": 64, "a_dtype": "f32", "b_dtype": "f32"}, "unsupported input"),
    ({"n": 64, "a_dtype": "bf16", "b_dtype": "bf16", "a_source": "gmem"}, "a_source"),
])
def test_illegal_variants_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        WgmmaSpec(**kwargs)


def test_prelude_deduplicates():
    spec = WgmmaSpec(64, "bf16", "bf16")
    text = wgmma_prelude([spec, spec, WgmmaSpec(128, "bf16", "bf16")])
    assert text.startswith("namespace ag {")
    assert text.count("void wgmma_m64n64k16_f32_bf16_ss(") == 1
    assert text.count("void wgmma_m64n128k16_f32_bf16_ss(") == 1


SPECS = [
    WgmmaSpec(8, "bf16", "bf16"),
    WgmmaSpec(64, "bf16", "bf16", trans_b=True),
    WgmmaSpec(120, "f16", "f16"),
    WgmmaSpec(256, "bf16", "bf16"),
    WgmmaSpec(128, "bf16", "bf16", a_source="regs", trans_b=True),
    WgmmaSpec(64, "f16", "f16", acc_dtype="f16", trans_a=True),
    WgmmaSpec(96, "e4m3", "e4m3"),
    WgmmaSpec(32, "e4m3", "e5m2", a_source="regs"),
]


def _caller(spec: WgmmaSpec) -> str:
    acc = "float" if spec.acc_dtype == "f32" else "ag::uint32_t"
    a = "regs_a" if spec.a_source == "regs" else "da"
    return (f"    {{ {acc} d[{spec.num_acc_regs}];\n"
            f"      for (int i = 0; i < {spec.num_acc_regs}; ++i) d[i] = 0;\n"
            f"      ag::wgmma_fence(); ag::{spec.name}(d, {a}, db, flag);\n"
            f"      ag::wgmma_commit(); ag::wgmma_wait<0>(); ag::fence_operands(d);\n"
            f"      for (int i = 0; i < {spec.num_acc_regs}; ++i) sink += (float)d[i]; }}\n")


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_generated_wrappers_compile_for_sm90a():
    source = (
        '#include "argus_sm90.cuh"\n'
        + wgmma_prelude(SPECS)
        + 'extern "C" __global__ void __launch_bounds__(128, 1) use_all(float* out, int flag) {\n'
        + "    __shared__ alignas(1024) unsigned char tile[16384];\n"
        + "    const ag::uint64_t da = ag::make_smem_desc(tile, 128, 16, 1024);\n"
        + "    const ag::uint64_t db = ag::make_smem_desc(tile + 8192, 128, 16, 1024);\n"
        + "    const ag::uint32_t regs_a[4] = {1u, 2u, 3u, (ag::uint32_t)flag};\n"
        + "    float sink = 0.f;\n"
        + "".join(_caller(s) for s in SPECS)
        + "    out[threadIdx.x] = sink;\n}\n")
    binary = compile_cuda(source, ["use_all"], filename="wgmma_all.cu")
    for spec in SPECS:
        assert spec.ptx_opcode in binary.ptx, spec.name
    assert not binary.resource("use_all").spills
