"""The span gathers (argus/kernels/conv_im2col.py `im2col_pixels_span_kernel`,
`im2col_pixel_planes_span_kernel`: the staged kernels with a CTA's pixels on one output row,
each filter row's input span loaded once into shared memory, the pixels' values gathered from
there with ag.gather of the view) and their selection in argus.ops.conv (IM2COL_GATHER =
"span"): A equals unfold's im2col and the staged kernels' A bit for bit on the stems and odd
sizes (stride, padding past the filter, row dilation, C = 1 .. 8, W not a multiple of the
stride, several CTAs a row and a partial last one, NCHW and channels-last), fp32 rounded to
tf32 the same; `span_tile`'s spans cover every run; the route against float64; the verifier
(store.once / store.coverage and the barrier between the span's writes and the gather,
sync.exchange, proven; a seeded missing barrier reported); NVRTC (vector global loads, no
spills) and, with a disassembler, the stem's global loads a pixel against the staged kernel's."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus import dtypes
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region
from argus.kernels.conv_im2col import (
    SPAN_PIXELS,
    SPAN_SMEM_MAX,
    Im2colGeometry,
    im2col_pixel_planes_span_kernel,
    im2col_pixel_planes_staged_kernel,
    im2col_pixels_span_kernel,
    im2col_pixels_staged_kernel,
    plane_slot,
    row_slot,
    span_fits,
    span_tile,
)
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# (N, C, H, W, R, S, stride, padding, dil_h)
CASES = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1),             # the stem's form: pitch 168
    (1, 3, 20, 24, 11, 11, 4, 2, 1),           # the AlexNet stem's: pitch 408
    (1, 5, 9, 7, 3, 4, (1, 3), (2, 1), 2),     # W % stride_w != 0, row dilation
    (2, 8, 5, 33, 2, 2, 1, 0, 1),              # C = 8, Q = 32: one whole warp
    (3, 1, 13, 11, 5, 3, (2, 1), (1, 2), 1),   # C = 1, asymmetric: 3 images of 7 x 13
    (1, 2, 31, 29, 3, 3, 1, 4, 1),             # padding past the filter: all-zero pixels
    (1, 3, 4, 300, 3, 7, (1, 2), 3, 1),        # Q = 150: two CTAs a row, the last partial
    (1, 4, 3, 270, 2, 3, 1, (0, 5), 1),        # Q = 278: three CTAs a row, padding 5 a side
]


def _sizes(case):
    _, C, H, W, R, S, stride, padding, dil_h = case
    (sh, sw), (ph, pw) = (conv_op._pair(v, "v") for v in (stride, padding))
    P = (H + 2 * ph - dil_h * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    return Im2colGeometry(R, S, sh, sw, ph, pw, dil_h, 1, C), P, Q


def _span(x, geom, P, Q, dt, planes: bool, sentinel=7.0):
    """A [N * P * Q, pitch] from the span kernel (unwritten elements keep the sentinel)."""
    N, C, H, W = x.shape
    if planes:
        sp = plane_slot(geom)
        pitch = (geom.r + 1) * C * sp
        X = x.as_strided((N, H, C, W), (x.stride(0), x.stride(2), x.stride(1), 1))
        bq, lead, length = span_tile(geom, Q, dt, planes=True)
        kernel, extra = im2col_pixel_planes_span_kernel(dt, pitch, bq), {"SP": sp}
    else:
        pitch = (geom.r + 1) * row_slot(geom)
        X = x.permute(0, 2, 3, 1).reshape(N, H, W * C).clone()
        bq, lead, length = span_tile(geom, Q, dt)
        kernel, extra = im2col_pixels_span_kernel(dt, pitch, bq), {}
    A = torch.full((N * P * Q, pitch), sentinel, dtype=x.dtype)
    kernel.interpret(X, A.view(N * P, Q, pitch), geom=geom, LEAD=lead, L=length, **extra)
    return A, X


def _reference(x, R, S, stride, padding, dil_h):
    """[N*P*Q, R, S, C] float64 from torch's unfold (its columns are (c, r, s))."""
    N, C = x.shape[:2]
    cols = F.unfold(x.double(), (R, S), (dil_h, 1), padding, stride)     # [N, C*R*S, L]
    L = cols.shape[-1]
    return cols.view(N, C, R, S, L).permute(0, 4, 2, 3, 1).reshape(N * L, R, S, C)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
def test_span_gather_writes_the_im2col_matrix(case, planes):
    """bf16: A's data columns are unfold's im2col exactly (padding read as zeros), the gaps
    zero, the bias slot (1, 1, 0, ...), every element written (no sentinel left)."""
    geom, P, Q = _sizes(case)
    N, C, H, W = case[:4]
    R, S = geom.r, geom.s
    x = _t(N, C, H, W, seed=60).bfloat16()
    if not planes:
        x = x.to(memory_format=torch.channels_last)
    A, _ = _span(x, geom, P, Q, dtypes.bf16, planes)
    ref = _reference(x, R, S, (geom.stride_h, geom.stride_w), (geom.pad_h, geom.pad_w),
                     geom.dil_h)
    if planes:
        sp = plane_slot(geom)
        A4 = A.view(-1, R + 1, C, sp)
        data, gaps = A4[:, :R, :, :S].permute(0, 1, 3, 2), A4[:, :R, :, S:]
        bias = A4[:, R].reshape(len(A), -1)
    else:
        slot = row_slot(geom)
        A3 = A.view(-1, R + 1, slot)
        data, gaps = A3[:, :R, :S * C].reshape(-1, R, S, C), A3[:, :R, S * C:]
        bias = A3[:, R]
    assert torch.equal(data.double(), ref)
    assert bool((gaps == 0).all())
    assert bool((bias[:, :2] == 1).all()) and bool((bias[:, 2:] == 0).all())
    assert (ref == 0).any() == (geom.pad_h > 0 or geom.pad_w > 0)   # padding was exercised


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
def test_span_gather_equals_the_staged_gather(case, dtype, planes):
    """The same A bit for bit as the staged kernel (the same weight matrix serves both);
    fp32 rounded to tf32 the same way."""
    geom, P, Q = _sizes(case)
    N, C, H, W = case[:4]
    dt = dtypes.bf16 if dtype == torch.bfloat16 else dtypes.f32
    x = _t(N, C, H, W, seed=61).to(dtype)
    mine, X = _span(x, geom, P, Q, dt, planes)
    theirs = torch.full_like(mine, 3.0)
    if planes:
        im2col_pixel_planes_staged_kernel(dt, mine.shape[1]).interpret(
            X, theirs, geom=geom, SP=plane_slot(geom))
    else:
        im2col_pixels_staged_kernel(dt, mine.shape[1]).interpret(X, theirs, geom=geom)
    assert torch.equal(mine, theirs)


def test_a_gap_never_holds_an_input_value():
    """Slot 34 holds 33 values and a gap: the gap reads span row -1 (outside the view), so an
    inf beside a run stays out of it (a gap holding it would make 0 x inf = NaN)."""
    x = _t(1, 3, 24, 24, seed=62).bfloat16().to(memory_format=torch.channels_last)
    x[0, :, 9, 9] = float("inf")
    geom = Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3)
    A, _ = _span(x, geom, 5, 5, dtypes.bf16, False)
    A3 = A.view(-1, 12, 34)
    assert bool(torch.isinf(A3).any())
    assert bool((A3[:, :11, 33] == 0).all())


@pytest.mark.parametrize("dtype", [dtypes.bf16, dtypes.f32])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
@pytest.mark.parametrize("geom,q", [(Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3), 112),
                                    (Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3), 55),
                                    (Im2colGeometry(3, 3, 1, 1, 9, 9, 1, 1, 8), 1000),
                                    (Im2colGeometry(5, 5, 3, 3, 0, 0, 2, 1, 1), 7)],
                         ids=["stem", "alexnet", "wide", "short"])
def test_span_tile_covers_every_run(geom, q, dtype, planes):
    """BQ a multiple of 32 up to SPAN_PIXELS, no more than Q needs; the span starts 16-byte
    aligned (lead a multiple of 16 bytes, the CTA's first run `lead - pad` units in), L a
    multiple of 4 x BQ (the vector load) covering the last pixel's run, within the budget."""
    bq, lead, length = span_tile(geom, q, dtype, planes)
    unit = 1 if planes else geom.channels
    per = 16 // dtype.bytes
    assert bq % 32 == 0 and 32 <= bq <= SPAN_PIXELS and bq - 32 < max(q, 32)
    assert lead % per == 0 and 0 <= lead - geom.pad_w * unit < per
    assert bq * geom.stride_w * unit % per == 0          # every CTA's span start aligned
    assert length % (4 * bq) == 0
    last = lead - geom.pad_w * unit + ((bq - 1) * geom.stride_w + geom.s) * unit
    assert last <= length < last + 4 * bq
    rows = geom.r * (geom.channels if planes else 1)
    assert rows * length * dtype.bytes <= SPAN_SMEM_MAX or bq == 32


@pytest.mark.parametrize("nchw", [False, True])
@pytest.mark.parametrize("dtype,bias", [(torch.bfloat16, True), (torch.float16, False)])
def test_route_through_the_span_gather_matches_float64(nchw, dtype, bias, monkeypatch):
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "span")
    x = _t(2, 3, 17, 15, seed=63).to(dtype)
    if not nchw:
        x = x.to(memory_format=torch.channels_last)
    w = (_t(8, 3, 7, 7, seed=64) / 8).to(dtype)
    b = _t(8, seed=65).to(dtype) if bias else None
    assert conv_op.route(x, w, b, 2, 3, 1) == "im2col"
    assert conv_op._Gather.of(x, w, 2, 3, 1).kind == ("span_planes" if nchw else "span")
    y = conv_op.conv2d_interpret(x, w, b, 2, 3)
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), 2, 3)
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 2.0 ** -8


def _lowered(geom, q, dtype, planes: bool):
    if planes:
        sp = plane_slot(geom)
        bq, lead, length = span_tile(geom, q, dtype, planes=True)
        return lower_only(im2col_pixel_planes_span_kernel(
            dtype, (geom.r + 1) * geom.channels * sp, bq), geom=geom, SP=sp, LEAD=lead,
            L=length)
    bq, lead, length = span_tile(geom, q, dtype)
    return lower_only(im2col_pixels_span_kernel(dtype, (geom.r + 1) * row_slot(geom), bq),
                      geom=geom, LEAD=lead, L=length)


STEM, ALEXNET = Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3), Im2colGeometry(11, 11, 4, 4, 2, 2,
                                                                          1, 1, 3)


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
@pytest.mark.parametrize("geom,q", [(STEM, 112), (ALEXNET, 55)], ids=["7x7s2", "11x11s4"])
def test_span_gather_verifies_with_zero_errors(planes, dtype, geom, q):
    from argus import verify
    report = verify.run(_lowered(geom, q, getattr(dtypes, dtype), planes))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.once", "store.coverage", "sync.exchange"} <= \
        {f.code for f in report.proven}


def _without_exchange_barrier(region: Region) -> Region:
    ops = []
    for op in region.ops:
        if isinstance(op, O.GroupBarrier) and "other threads' shared writes" in op.note:
            continue
        ops.append(op.replace(body=_without_exchange_barrier(op.body))
                   if hasattr(op, "body") and isinstance(op.body, Region) else op)
    return Region(tuple(ops))


def test_a_missing_barrier_before_the_gather_is_reported():
    """Seeded bug: the lowering's barrier between the spans' shared writes and the gather
    removed; sync.exchange names the gather and the write."""
    from argus import verify
    kernel = _lowered(STEM, 112, dtypes.bf16, False)
    barriers = [op for op in kernel.walk() if isinstance(op, O.GroupBarrier)
                and "other threads' shared writes" in op.note]
    assert len(barriers) == 1
    seeded = dataclasses.replace(kernel, body=_without_exchange_barrier(kernel.body))
    report = verify.run(seeded)
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(str(d) for d in report.errors)
    assert "with no barrier in between" in str(bad[0])


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
def test_nvrtc_builds_the_span_gather(dtype, planes, tmp_path, monkeypatch):
    """The spans load as vector global loads (ld.global.v2 / v4: 4 elements a thread), the
    pixels' values come from ld.shared, A leaves by TMA stores; no global store, no spills."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    source = codegen.render(_lowered(STEM, 112, getattr(dtypes, dtype), planes))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    ptx = binary.ptx
    assert "ld.global.nc.v2" in ptx or "ld.global.nc.v4" in ptx or "ld.global.v" in ptx
    assert "ld.shared" in ptx and "cp.async.bulk.tensor.3d.global.shared" in ptx
    assert "st.global" not in ptx
    assert not binary.resource(source.name).spills


def test_sass_of_the_stem_loads_each_span_once():
    """The stem (7x7/2, C = 3, Q = 112): the staged kernel's 147 2-byte global loads a
    pixel (one a value of its row of A) become 14 8-byte loads a thread (7 spans of 1024
    elements over 128 threads) and 147 2-byte shared loads; no spill. (A warp of the span
    kernel serves 28 useful pixels on average: Q = 112 in a CTA of 128.)"""
    if not nvrtc_available() or not _has_disassembler():
        pytest.skip("NVRTC or a disassembler (nvdisasm / cuobjdump on PATH) missing")
    spec = importlib.util.spec_from_file_location("sass_im2col_gather",
                                                  ROOT / "scripts" / "sass_im2col_gather.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stem = module.STEMS[0]
    staged, span = module.measure("staged", stem), module.measure("span", stem)
    loads = {k: v for k, v in span["memory"].items() if k.startswith("LDG")}
    assert staged["memory"].get("LDG.U16.CONSTANT") == 147
    assert sum(loads.values()) * 5 <= 147 and not any("U16" in k for k in loads), loads
    assert span["memory"].get("LDS.U16") == 147, span["memory"]
    assert span["spills"] == 0
    # no more instructions a warp than the staged kernel (816 against 864 when written: the
    # shared gather's column needs no guard, its interval is proven inside the span), and
    # fewer registers (56 against 168: no 147 global loads in flight)
    assert span["instructions"] <= staged["instructions"], (span, staged)
    assert span["registers"] < staged["registers"], (span, staged)


def _has_disassembler() -> bool:
    from argus.runtime.toolkit import find_tool
    return find_tool("nvdisasm") is not None or find_tool("cuobjdump") is not None


def test_spans_too_large_take_the_staged_gather(monkeypatch):
    """A filter whose spans pass SPAN_SMEM_MAX even at 32 pixels a CTA (63 x 63, stride 4,
    C = 8, bf16: 63 spans of 1536 elements, 193 KB; NCHW: 504 of 256, 258 KB) is served by
    the staged gather, which has no span buffer."""
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "span")
    geom = Im2colGeometry(63, 63, 4, 4, 0, 0, 1, 1, 8)
    assert not span_fits(geom, 40, dtypes.bf16)
    x = torch.zeros(1, 8, 219, 219).bfloat16().to(memory_format=torch.channels_last)
    w = torch.zeros(4, 8, 63, 63).bfloat16()
    assert conv_op._Gather.of(x, w, 4, 0, 1).kind == "staged"
    assert conv_op._Gather.of(x.contiguous(), w, 4, 0, 1).kind == "staged_planes"
    assert span_fits(STEM, 112, dtypes.bf16) and span_fits(ALEXNET, 55, dtypes.f32, True)
