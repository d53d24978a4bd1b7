"""Vector global accesses of blocked register tiles (codegen op_Load / op_Store).

A blocked tile's chunk (vec consecutive columns of one row held by one thread) is moved with
one 4/8/16-byte access where the whole chunk is in bounds and its address is aligned, checked
at run time per chunk; every other chunk (ragged edges, unaligned base pointers, odd row
strides) takes the element-by-element path. No GPU here: the structure of the generated code,
NVRTC builds for sm_90a, and the vector instructions in the PTX.
"""

import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.runtime import compile_cuda, nvrtc_available

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _copy_kernel(dtype, width: int, rows: int = 2):
    @ag.kernel(threads=256)
    def copy(X: ag.Tensor["M", "N", dtype], Y: ag.Tensor["M", "N", dtype]):
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], rows), ag.cdiv(X.shape[1], width))
        x = ag.load(X, (pid_m * rows, pid_n * width), (rows, width))
        ag.store(Y, (pid_m * rows, pid_n * width), x * 2.0)

    return copy


def _source(fn, **consts):
    return codegen.render(lower_only(fn, **consts))


def _ptx_memory_ops(source) -> set[str]:
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    return set(re.findall(r"\b(?:ld|st)\.global[.\w]*", binary.ptx))


def test_elementwise_chunks_have_a_vector_path_and_a_scalar_fallback(examples):
    text = _source(examples("elementwise").KERNEL).text
    # 4 rows x 4 chunks of X, 1 chunk of the bias row, 4 chunks of Y: one check per chunk
    assert text.count("ag::ld_global_f32x4(") == 5
    assert text.count("ag::st_global_f32x4(") == 4
    assert text.count("ag::aligned_to(") == 9
    # the vector condition: the whole chunk in bounds, its start aligned to 16 bytes
    chunk = re.search(r"const long long ge = (.*);\n\s*if \((.*) && ag::aligned_to\(X \+ ge, 16\)\)"
                      r" \{\n\s*ag::ld_global_f32x4\(X \+ ge, t(\d+)\[0\], t\3\[1\], t\3\[2\], "
                      r"t\3\[3\]\);\n\s*\} else \{\n\s*t\3\[0\] = \((.*)\) \? X\[(.*)\] : 0\.0f;",
                      text)
    assert chunk, text[:3000]
    index, cond, scalar_cond, scalar_index = chunk.group(1, 2, 4, 5)
    assert index == scalar_index  # the vector access starts at the chunk's first element
    assert "+ 4 <= N" in cond and "< N" in scalar_cond and "+ 4" not in scalar_cond
    # the scalar fallback keeps a per-element bounds check for every register
    assert len(re.findall(r"t\d+\[\d+\] = \(.*\) \? X\[", text)) == 16
    assert len(re.findall(r"if \(.*\) Y\[.*\] = gv\d;", text)) == 16


@needs_nvrtc
@pytest.mark.parametrize("name", ["elementwise", "softmax", "rmsnorm"])
def test_examples_compile_to_16_byte_accesses(examples, name):
    ex = examples(name)
    consts = ex.constexprs(*ex.make_inputs("small"))
    ops = _ptx_memory_ops(_source(ex.KERNEL, **consts))
    assert {"ld.global.nc.v4.f32", "st.global.v4.f32"} <= ops, ops
    assert "ld.global.nc.f32" in ops and "st.global.f32" in ops, ops  # the fallback


@needs_nvrtc
@pytest.mark.parametrize("dtype, width, load, store, ptx", [
    (ag.f32, 1024, "ag::ld_global_f32x4(", "ag::st_global_f32x4(", "v4.f32"),   # vec 4: 16 B
    (ag.f32, 512, "ag::ld_global_f32x2(", "ag::st_global_f32x2(", "v2.f32"),    # vec 2: 8 B
    (ag.bf16, 1024, "ag::ld_global_b32x2(", "ag::st_global_b32x2(", "v2.u32"),  # vec 4: 8 B
    (ag.f16, 512, "ag::ld_global_b32(", "ag::st_global_b32(", "b32"),           # vec 2: 4 B
])
def test_vector_width_follows_the_chunk(dtype, width, load, store, ptx):
    source = _source(_copy_kernel(dtype, width))
    assert load in source.text and store in source.text
    ops = _ptx_memory_ops(source)
    assert any(op.startswith("ld.global") and op.endswith(ptx.replace("b32", "u32"))
               for op in ops), ops
    assert any(op.startswith("st.global") and op.endswith(ptx) for op in ops), ops


def test_16_bit_chunks_unpack_and_pack_pairs():
    text = _source(_copy_kernel(ag.bf16, 1024)).text
    assert "ag::bf16x2_lo(gw0)" in text and "ag::bf16x2_hi(gw1)" in text
    assert re.search(r"ag::st_global_b32x2\(Y \+ ge, ag::pack_bf16x2\(gv0, gv1\), "
                     r"ag::pack_bf16x2\(gv2, gv3\)\);", text)
    assert "Y[" in text and "ag::f32_to_bf16(gv0)" in text  # the scalar fallback rounds itself


def test_one_element_chunks_stay_scalar():
    text = _source(_copy_kernel(ag.f32, 256)).text  # 256 columns over 256 threads: vec 1
    assert "aligned_to" not in text and "ld_global" not in text and "st_global" not in text


def test_integer_tiles_stay_scalar():
    text = _source(_copy_kernel(ag.i32, 1024)).text
    assert "aligned_to" not in text and "ld_global" not in text
