"""argus.runtime.compile: NVRTC compile, content-hash cache (memory and disk), error reports,
and the nvcc fallback. No GPU needed."""

from __future__ import annotations

import json

import pytest

from argus.errors import CompileError
from argus.runtime import cache as disk_cache
from argus.runtime import compile as compile_mod
from argus.runtime import compile_cuda, compile_stats, find_tool, nvrtc_available
from argus.runtime.toolkit import ToolNotFound

pytestmark = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")

KERNEL = r"""
#include "argus_sm90.cuh"
extern "C" __global__ void scale(float* x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = ag::fmax(x[i] * a, 0.0f);
}
"""


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "cache"))
    compile_mod.clear_memory_cache()
    yield
    compile_mod.clear_memory_cache()


def test_compile_produces_cubin_ptx_and_resources():
    binary = compile_cuda(KERNEL, ["scale"])
    assert binary.cubin[:4] == b"\x7fELF"
    assert ".entry scale(" in binary.ptx and not binary.ptx.endswith("\x00")
    assert binary.arch == "sm_90a"
    assert binary.symbol("scale") == "scale"
    res = binary.resource("scale")
    assert res.registers > 0 and not res.spills
    assert binary.compiler.startswith("nvrtc 13.")
    assert "-arch=sm_90a" in binary.options and "--ptxas-options=-v" in binary.options
    assert not binary.from_cache


def test_cpp_kernel_names_are_lowered():
    source = "template <int N> __global__ void fill(int* o) { o[threadIdx.x] = N; }\n" \
             "template __global__ void fill<7>(int*);\n"
    binary = compile_cuda(source, ["fill<7>"])
    assert binary.symbol("fill<7>").startswith("_Z")
    assert binary.resource("fill<7>").registers > 0


def test_second_compile_hits_the_disk_cache_without_nvrtc(monkeypatch, tmp_path):
    first = compile_cuda(KERNEL, ["scale"])
    before = compile_stats()
    compile_mod.clear_memory_cache()

    def no_nvrtc(*args, **kwargs):
        raise AssertionError("NVRTC must not run on a cache hit")

    monkeypatch.setattr(compile_mod, "_nvrtc_compile", no_nvrtc)
    second = compile_cuda(KERNEL, ["scale"])
    after = compile_stats()
    assert second.from_cache and second == first
    assert second.cubin == first.cubin and second.resources == first.resources
    assert after["compiles"] == before["compiles"]
    assert after["disk_hits"] == before["disk_hits"] + 1
    files = list((tmp_path / "cache").rglob("*.json"))
    assert len(files) == 1 and files[0].stem == first.key
    # Third call: served from memory.
    compile_cuda(KERNEL, ["scale"])
    assert compile_stats()["memory_hits"] == after["memory_hits"] + 1


def test_a_memory_hit_writes_the_record_into_a_new_cache_dir(monkeypatch, tmp_path):
    """A binary held in memory from a compile under another ARGUS_CACHE_DIR is written into
    the one in use: a prebuild into a fresh folder must leave the cubin there even when this
    process compiled the kernel before (the 2026-12-02 H200 run of
    tests/gpu/test_matmul_prebuild_gpu.py: the first call found no cubin and ran NVRTC)."""
    first = compile_cuda(KERNEL, ["scale"])
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path / "other"))
    assert not disk_cache.exists(first.key)
    hits = compile_stats()["memory_hits"]
    assert compile_cuda(KERNEL, ["scale"]) is first
    assert compile_stats()["memory_hits"] == hits + 1
    assert disk_cache.exists(first.key)
    compile_mod.clear_memory_cache()
    monkeypatch.setattr(compile_mod, "_nvrtc_compile", lambda *a, **k: pytest.fail("NVRTC ran"))
    again = compile_cuda(KERNEL, ["scale"])
    assert again.from_cache and again.cubin == first.cubin


def test_key_covers_source_options_headers_and_arch():
    base = compile_cuda(KERNEL, ["scale"])
    keys = {
        base.key,
        compile_cuda(KERNEL + "\n// changed\n", ["scale"]).key,
        compile_cuda(KERNEL, ["scale"], fast_math=True).key,
        compile_cuda(KERNEL, ["scale"], options=["-DFOO=1"]).key,
        compile_cuda(KERNEL, ["scale"], headers={"extra.h": "// x"}).key,
        compile_cuda(KERNEL, ["scale"], arch="sm_90").key,
    }
    assert len(keys) == 6
    assert compile_cuda(KERNEL + "\n// changed\n", ["scale"]).source_hash != base.source_hash


def test_include_dir_edits_invalidate(tmp_path):
    inc = tmp_path / "inc"
    inc.mkdir()
    (inc / "k.h").write_text("#define VALUE 1\n")
    source = '#include "k.h"\nextern "C" __global__ void v(int* o) { o[0] = VALUE; }\n'
    first = compile_cuda(source, ["v"], include_dirs=[inc])
    (inc / "k.h").write_text("#define VALUE 22\n")
    second = compile_cuda(source, ["v"], include_dirs=[inc])
    assert first.key != second.key and "22" in second.ptx


def test_corrupt_cache_record_is_a_miss():
    first = compile_cuda(KERNEL, ["scale"])
    path = next(disk_cache.cache_dir().rglob(f"{first.key}.json"))
    path.write_text("{ not json")
    compile_mod.clear_memory_cache()
    before = compile_stats()["compiles"]
    again = compile_cuda(KERNEL, ["scale"])
    assert compile_stats()["compiles"] == before + 1 and again.cubin == first.cubin
    assert json.loads(path.read_text())["key"] == first.key


def test_use_cache_false_always_compiles():
    compile_cuda(KERNEL, ["scale"])
    before = compile_stats()["compiles"]
    compile_cuda(KERNEL, ["scale"], use_cache=False)
    assert compile_stats()["compiles"] == before + 1


def test_syntax_error_quotes_the_source_line():
    source = KERNEL.replace("x[i] * a", "x[i] * undefined_name")
    with pytest.raises(CompileError) as info:
        compile_cuda(source, ["scale"], filename="scale.cu")
    text = str(info.value)
    assert 'scale.cu(5): error: identifier "undefined_name" is undefined' in text
    assert "offending lines:" in text
    assert "  > 5 |     if (i < n) x[i] = ag::fmax(x[i] * undefined_name, 0.0f);" in text
    assert "    4 |" in text  # context line with its number


def test_error_inside_a_header_quotes_the_header():
    source = '#include "bad.h"\nextern "C" __global__ void k() {}\n'
    with pytest.raises(CompileError, match=r"bad\.h:2:\n.*\n  > 2 \| int broken = ;"):
        compile_cuda(source, ["k"], headers={"bad.h": "// ok\nint broken = ;\n"})


def test_ptxas_error_quotes_the_ptx_line():
    source = 'extern "C" __global__ void k(float* o) { asm volatile("bogus.op %0;" :: "f"(o[0])); }'
    with pytest.raises(CompileError) as info:
        compile_cuda(source, ["k"])
    text = str(info.value)
    assert "ptxas" in text and "generated PTX line" in text and "> " in text
    assert "bogus.op" in text.split("generated PTX line", 1)[1]


def test_missing_kernel_name_is_reported_by_name():
    with pytest.raises(CompileError, match="kernel\\(s\\) nope requested") as info:
        compile_cuda(KERNEL, ["scale", "nope"])
    assert "extern" in info.value.fix


def test_unknown_arch_and_compiler_are_rejected():
    with pytest.raises(CompileError, match="unknown target architecture"):
        compile_cuda(KERNEL, ["scale"], arch="hopper")
    with pytest.raises(CompileError, match="unknown compiler"):
        compile_cuda(KERNEL, ["scale"], compiler="clang")


def test_ptx_only_target_has_no_cubin():
    binary = compile_cuda(KERNEL, ["scale"], arch="compute_90a")
    assert binary.cubin == b"" and ".target sm_90a" in binary.ptx and binary.resources == ()


def test_without_nvrtc_or_nvcc_the_error_says_how_to_fix(monkeypatch):
    def unavailable():
        raise ToolNotFound("libnvrtc was not found (test)")

    monkeypatch.setattr(compile_mod, "load_nvrtc", unavailable)
    monkeypatch.setattr(compile_mod, "find_tool", lambda name: None)
    with pytest.raises(CompileError) as info:
        compile_cuda(KERNEL, ["scale"])
    assert "NVRTC is unavailable" in str(info.value) and "nvcc was not found" in str(info.value)
    assert "nvidia-cuda-nvrtc" in info.value.fix
    with pytest.raises(CompileError, match="NVRTC is unavailable"):
        compile_cuda(KERNEL, ["scale"], compiler="nvrtc")


@pytest.mark.skipif(find_tool("nvcc") is None, reason="nvcc not installed")
def test_nvcc_fallback_when_nvrtc_is_missing(monkeypatch):
    def unavailable():
        raise ToolNotFound("libnvrtc was not found (test)")

    monkeypatch.setattr(compile_mod, "load_nvrtc", unavailable)
    binary = compile_cuda(KERNEL, ["scale"])
    assert binary.compiler.startswith("nvcc")
    assert binary.cubin[:4] == b"\x7fELF" and ".entry scale(" in binary.ptx
    assert binary.resource("scale").registers > 0
    with pytest.raises(CompileError) as info:
        compile_cuda(KERNEL.replace("x[i] * a", "x[i] * nope"), ["scale"], filename="s.cu")
    assert "s.cu(5): error" in str(info.value) and "  > 5 |" in str(info.value)


def test_system_toolkit_nvrtc_is_found_by_preloading(tmp_path):
    # A toolkit laid out like /usr/local/cuda (lib64/libnvrtc.so.13), pointed to by CUDA_HOME:
    # the fallback that makes a plain system toolkit work when cuda-pathfinder finds nothing.
    import os
    import subprocess
    import sys

    from argus.runtime.toolkit import load_nvrtc

    real = load_nvrtc().library
    lib64 = tmp_path / "cuda" / "lib64"
    lib64.mkdir(parents=True)
    (lib64 / "libnvrtc.so.13").symlink_to(real)
    code = ("from argus.runtime.toolkit import _preload_system_nvrtc\n"
            "print(_preload_system_nvrtc())\n")
    env = dict(os.environ, CUDA_HOME=str(tmp_path / "cuda"))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=120)
    assert out.stdout.strip() == os.path.realpath(real)
