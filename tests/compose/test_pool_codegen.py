"""The pooling template's window loads as generated CUDA (no GPU): a column tile (one element
a thread, no vector access) computes each element's offset outside its bounds condition, so
the offsets' shared terms are computed once and the loads are predicated instead of a branch
each (KernelBench L1/43 MaxPool3d ran at 0.57x eager with 38 SASS instructions a 4-byte load,
8304 a thread); the rows per CTA keep the unrolled loads at <= 64 a thread."""

import re

import pytest

from argus import codegen
from argus.analysis import alignment
from argus.compose import pool
from argus.runtime import nvrtc_available

SHAPE = (16, 32, 128, 128, 128)          # L1/43: k3 s2 p1 d3 -> 62^3
K, S, P, D = 3, 2, 1, 3


def _kernel():
    rows = pool.rows_per_cta(64, K ** 3, 16 * 32 * 62 * 62)
    src = pool._source("max", SHAPE[2:-1] + (SHAPE[-1],), (62, 62, 62), (K,) * 3, (S,) * 3,
                       (P,) * 3, (D,) * 3, 64, rows)
    fn = pool.tile.load_source(src, "pool_codegen_test")["pool"]
    return fn, rows


def _cuda(fn):
    lowered = fn.lower()
    spec = alignment.LaunchSpecialization(("X", "Y"), ())
    return codegen.render(alignment.specialize(lowered, spec))


def test_rows_bound_the_unrolled_window_loads():
    _, rows = _kernel()
    assert rows * K ** 3 <= 64 and rows >= 1
    assert pool.rows_per_cta(256, 8, 10 ** 6) == 2      # 1-d windows: 512 outputs a CTA


def test_window_loads_compute_their_offset_outside_the_condition():
    fn, rows = _kernel()
    text = _cuda(fn).text
    loads = re.findall(r"\{ const long long ge = [^;]*; t\d+\[0\] = \((.*?)\) \? X\[ge\] : ", text)
    assert len(loads) == rows * K ** 3, text[:2000]
    assert not re.search(r"\? X\[\(", text)        # no offset computed inside a condition


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_window_loads_build_without_spills_or_a_branch_per_load():
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble, instruction_histogram

    fn, rows = _kernel()
    src = _cuda(fn)
    binary = compile_cuda(src.text, [src.name], filename=f"{src.name}.cu", use_cache=False)
    res = binary.resource(src.name)
    assert res.spill_stores == 0 and res.spill_loads == 0, res
    assert res.registers <= 96, res          # 16 CTAs of 64 threads an SM at 64
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no cuobjdump / nvdisasm to read the SASS")
    hist = instruction_histogram(sass)
    loads = rows * K ** 3
    assert hist.get("LDG", 0) == loads
    assert hist.get("BSSY", 0) < loads / 4, hist     # was one per load
    assert sum(hist.values()) < 24 * loads, sum(hist.values())   # was 38 a load
