"""Launch specialization on alignment (analysis/alignment.py, compiled.CompiledKernel.variant,
codegen/cuda/memory.py): the launcher states which tensors are 16-byte aligned (pointer and
outer strides) and which shape symbols are multiples of 16; the variant rendered with those
facts drops the run-time alignment test of the accesses they prove aligned and the scalar path
of chunks they prove whole, and keeps both wherever a fact is missing (a view offset by one
element, an odd row stride, a column offset the analysis cannot follow). No GPU here: the keys,
the divisibility analysis, the generated code and NVRTC's PTX.
"""

import re

import pytest
import torch

import argus as ag
from argus import codegen
from argus.analysis import alignment
from argus.analysis.alignment import LaunchSpecialization
from argus.compiled import CompiledKernel
from argus.compiler import lower_only
from argus.runtime import compile_cuda, nvrtc_available

needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")

ALL = LaunchSpecialization(("X", "Y"), ("M", "N"))


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))


def _copy(col_shift: int = 0, width: int = 1024, rows: int = 2):
    @ag.kernel(threads=256)
    def copy(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], rows), ag.cdiv(X.shape[1], width))
        col = pid_n * width + col_shift
        x = ag.load(X, (pid_m * rows, col), (rows, width))
        ag.store(Y, (pid_m * rows, col), x * 2.0)

    return copy


def _looped(width: int = 1024):
    """One row per CTA, the columns walked by a loop-carried offset (col = col + width)."""
    @ag.kernel(threads=256)
    def scale_rows(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        col = row * 0
        for _ in ag.range(ag.cdiv(X.shape[1], width)):
            x = ag.load(X, (row, col), (1, width))
            ag.store(Y, (row, col), x * 3.0)
            col = col + width

    return scale_rows


def _text(fn, spec=None) -> str:
    k = lower_only(fn)
    return codegen.render(alignment.specialize(k, spec) if spec is not None else k).text


# ----------------------------------------------------------------------------- keys


def _spec_of(*tensors):
    """CompiledKernel.specialization for the copy kernel's X, Y (no GPU: CPU tensors)."""
    ck = CompiledKernel(_copy(), lower_only(_copy()), None, None)
    M, N = tensors[0].shape
    return ck.specialization(tensors, {"M": M, "N": N})


def test_fresh_tensors_are_aligned_and_their_symbols_divisible():
    x, y = torch.empty(64, 1024), torch.empty(64, 1024)
    assert _spec_of(x, y) == LaunchSpecialization(("X", "Y"), ("M", "N"), ("X", "Y"))


def test_a_view_offset_by_one_element_is_not_aligned():
    base = torch.empty(64, 1025)
    x = base[:, 1:]                      # data pointer 4 bytes past a 16-byte boundary
    y = torch.empty(64, 1024)
    assert x.data_ptr() % 16 == 4
    spec = _spec_of(x, y)
    assert spec.aligned == ("Y",)        # X: neither its pointer nor its stride (1025)


def test_an_odd_row_stride_is_not_aligned_and_size_one_dims_do_not_count():
    x = torch.empty(64, 1030)[:, :1024]  # aligned pointer, row stride 1030 x 4 bytes
    y = torch.empty(64, 1024)
    assert _spec_of(x, y).aligned == ("Y",)
    one = torch.empty(1, 1030)[:, :1000]  # one row: its stride is never used
    assert _spec_of(one, torch.empty(1, 1000)) == LaunchSpecialization(("X", "Y"), (),
                                                                         ("X", "Y"))


def test_symbols_that_are_not_multiples_of_16_are_not_divisible():
    x, y = torch.empty(48, 1000), torch.empty(48, 1000)
    assert _spec_of(x, y) == LaunchSpecialization(("X", "Y"), ("M",), ("X", "Y"))


def test_an_empty_specialization_is_the_unspecialized_variant():
    ck = CompiledKernel(_copy(), lower_only(_copy()), "SOURCE", "BINARY")
    assert ck.variant(LaunchSpecialization()) == ("SOURCE", "BINARY")


# ----------------------------------------------------------------------------- analysis


def test_divisibility_follows_products_sums_and_loop_carried_offsets():
    k = lower_only(_looped())
    facts = {(tid, offs): (a, w) for tid, offs, a, w in
             alignment.specialize(k, ALL).attr("global_access")}
    assert len(facts) == 2 and set(facts.values()) == {(4, 16)}
    k = lower_only(_copy(col_shift=2))
    facts = alignment.specialize(k, ALL).attr("global_access")
    assert {(a, w) for _, _, a, w in facts} == {(2, 2)}  # pid_n * 1024 + 2: even, not x4


def test_the_analysis_is_sound_on_a_carried_offset_that_loses_divisibility():
    @ag.kernel(threads=256)
    def drift(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (row,) = ag.grid(X.shape[0])
        col = row * 0
        for _ in ag.range(4):
            x = ag.load(X, (row, col), (1, 1024))
            ag.store(Y, (row, col), x)
            col = col + 1025        # 0, 1025, 2050, ...: only the first is a multiple of 4

    k = alignment.specialize(lower_only(drift), ALL)
    assert k.attr("global_access") == ()
    assert _text(drift, ALL).count("ag::aligned_to(") == 2  # one chunk per tile and access


# ----------------------------------------------------------------------------- rendering


def test_the_unspecialized_variant_checks_every_chunk():
    text = _text(_copy())
    assert text.count("ag::aligned_to(") == 4 and "X[" in text and "Y[" in text


def test_aligned_and_divisible_arguments_drop_the_checks_and_the_scalar_path():
    text = _text(_copy(), ALL)
    assert "aligned_to" not in text
    assert text.count("ag::ld_global_f32x4(") == 2 and text.count("ag::st_global_f32x4(") == 2
    assert "X[" not in text and "Y[" not in text         # no element-by-element path
    assert text.count("] = 0.0f;") == 8                  # a chunk wholly outside reads `other`
    assert re.search(r"\+ 4 <= N && .* < M\) \{\n\s*ag::ld_global_f32x4\(X \+ ge", text)


def test_a_misaligned_tensor_keeps_its_checks():
    text = _text(_copy(), LaunchSpecialization(("Y",), ("M", "N")))
    assert text.count("ag::aligned_to(X + ge, 16)") == 2
    assert "ag::aligned_to(Y" not in text
    # an in-bounds chunk that fails the alignment test is read element by element, never
    # filled as if it were outside the tensor (the H200 caught zeros in a misaligned view)
    assert len(re.findall(r"t\d+\[\d+\] = \(.*\) \? X\[", text)) == 8


def test_a_misaligned_output_keeps_its_element_stores():
    text = _text(_copy(), LaunchSpecialization(("X",), ("M", "N")))
    assert text.count("ag::aligned_to(Y + ge, 16)") == 2 and "Y[" in text


def test_a_ragged_extent_keeps_the_scalar_path_but_not_the_alignment_test():
    text = _text(_copy(), LaunchSpecialization(("X", "Y"), ("M",)))
    assert "aligned_to" not in text
    assert len(re.findall(r"t\d+\[\d+\] = \(.*\) \? X\[", text)) == 8  # the tail chunk


def test_an_offset_the_analysis_cannot_prove_keeps_the_checks():
    assert _text(_copy(col_shift=2), ALL).count("ag::aligned_to(") == 4


def test_the_gemm_library_does_not_change_under_a_specialization():
    from argus.kernels.gemm import gemm

    k = lower_only(gemm)
    spec = LaunchSpecialization(("A", "B", "C"), ("M", "N", "K"))
    assert codegen.render(alignment.specialize(k, spec)).text == codegen.render(k).text


@needs_nvrtc
def test_the_specialized_ptx_has_only_vector_global_accesses():
    k = alignment.specialize(lower_only(_copy()), ALL)
    source = codegen.render(k)
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    ops = set(re.findall(r"\b(?:ld|st)\.global[.\w]*", binary.ptx))
    assert ops == {"ld.global.nc.v4.f32", "st.global.v4.f32"}, ops


@needs_nvrtc
def test_the_launcher_builds_one_variant_per_specialization(examples):
    from argus.compiler import compile_kernel

    ex = examples("elementwise")
    x, bias, y = torch.empty(64, 2048), torch.empty(1, 2048), torch.empty(64, 2048)
    ck = compile_kernel(ex.KERNEL, **ex.constexprs(x, bias, y))
    spec = ck.specialization((x, bias, y), {"M": 64, "N": 2048})
    assert spec == LaunchSpecialization(("X", "Y", "bias"), ("M", "N"), ("X", "Y", "bias"))
    source, binary = ck.variant(spec)
    assert ck.variant(spec)[1] is binary                 # built once
    assert "aligned_to" not in source.text and "aligned_to" in ck.source.text
    assert source.abi == ck.source.abi and source.name == ck.source.name
    ops = set(re.findall(r"\b(?:ld|st)\.global[.\w]*", binary.ptx))
    assert ops == {"ld.global.nc.v4.f32", "st.global.v4.f32"}, ops
    # a specialization that proves nothing new reuses the unspecialized binary
    assert ck.variant(LaunchSpecialization((), ("M",))) == (ck.source, ck.binary)


# ----------------------------------------------------------------------------- 32-bit offsets


def test_narrow_tensors_are_those_whose_element_offsets_fit_31_bits():
    facts = {"S": (0, (16, 4096), (4096, 1), 4),                 # 65535 elements: narrow
             "T": (0, (1 << 16, 1 << 15), (1 << 15, 1), 1),      # 2^31 elements: offset 2^31-1
             "U": (0, (1 << 16, 1 << 15 + 1), (1 << 15 + 1, 1), 1),   # 2^32: not narrow
             "V": (0, (2, 4), (-4, 1), 4),                       # a negative stride: not
             "E": (0, (0, 1 << 40), (1 << 40, 1), 4)}            # empty: nothing to offset
    assert alignment.of_arguments(facts, {}).narrow == ("E", "S", "T")
    # a view's strides count, not its element count: 2 rows 2^31 elements apart are wide
    assert not alignment.of_arguments({"W": (0, (2, 8), (1 << 31, 1), 4)}, {}).narrow


def test_a_narrow_tensor_is_indexed_in_32_bits_and_only_in_the_variant():
    generic = _text(_copy(col_shift=1))                 # scalar path: per-element offsets
    narrow = _text(_copy(col_shift=1), LaunchSpecialization((), (), ("X",)))
    assert "(long long)" in generic and "unsigned ge" not in generic
    # X's offsets are 32-bit unsigned, Y's (not narrow) stay 64-bit
    assert re.search(r"X\[[^\]]*\(unsigned\)[^\]]* \* \(unsigned\)X_s0\]", narrow), narrow
    assert re.search(r"Y\[[^\]]*\(long long\)[^\]]* \* Y_s0\]", narrow), narrow
    assert "const unsigned ge" in narrow
    k = alignment.specialize(lower_only(_copy()), LaunchSpecialization((), (), ("X", "Y")))
    assert k.attr("index32") == tuple(sorted(p.value.id for p in k.params
                                             if p.name in ("X", "Y")))
