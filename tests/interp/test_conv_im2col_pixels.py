"""The pixel gather (argus/kernels/conv_im2col.py `im2col_pixels_kernel`: one output pixel a
thread, ag.gather and 16-byte stores of A) and its selection in argus.ops.conv (IM2COL_GATHER =
"pixels"; NCHW x: `im2col_pixel_planes_kernel`): A equals the unfold-built im2col in the row-run
layout exactly (padding rows and columns 0, slot gaps 0, the bias slot (1, 1, 0, ...)) and
equals the warp kernel's A bit for bit, on the stems and on odd sizes (W not a multiple of the
stride, row dilation, a partial last CTA, C = 1 .. 8, an inf in x next to a gap); fp32 rounded
to tf32 as the warp kernel rounds; the route through it against float64; the verifier
(store.once / store.coverage proven, no unknown); NVRTC (16-byte stores, no spills); and the
SASS instruction count a pixel against the warp kernel's (nvdisasm, when installed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus import dtypes
from argus.compiler import lower_only
from argus.kernels.conv_im2col import (PIXELS_PER_CTA, Im2colGeometry, im2col_pixels_kernel,
                                       im2col_rows_kernel, row_slot, rows_tile)
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _reference(x, R, S, stride, padding, dil_h):
    """[N*P*Q, R, S*C] float64 from torch's unfold (its columns are (c, r, s))."""
    N, C = x.shape[:2]
    cols = F.unfold(x.double(), (R, S), (dil_h, 1), padding, stride)     # [N, C*R*S, L]
    L = cols.shape[-1]
    return cols.view(N, C, R, S, L).permute(0, 4, 2, 3, 1).reshape(N * L, R, S * C)


# (N, C, H, W, R, S, stride, padding, dil_h)
CASES = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1),             # the stem's form: slot 21, pitch 168
    (1, 3, 20, 24, 11, 11, 4, 2, 1),           # the AlexNet stem's: slot 34 (33 + a gap)
    (1, 5, 9, 7, 3, 4, (1, 3), (2, 1), 2),     # W % stride_w != 0, row dilation
    (2, 8, 5, 33, 2, 2, 1, 0, 1),              # C = 8, Q = 32
    (3, 1, 13, 11, 5, 3, (2, 1), (1, 2), 1),   # C = 1, asymmetric: 3 images of 7 x 13
    (1, 2, 31, 29, 3, 3, 1, 4, 1),             # padding past the filter: all-zero pixels
]


def _run(kind: str, x, geom, dtype=dtypes.bf16, sentinel=7.0):
    N, C, H, W = x.shape
    P = (H + 2 * geom.pad_h - geom.dil_h * (geom.r - 1) - 1) // geom.stride_h + 1
    Q = (W + 2 * geom.pad_w - geom.s) // geom.stride_w + 1
    slot = row_slot(geom)
    A = torch.full((N * P * Q, (geom.r + 1) * slot), sentinel, dtype=x.dtype)
    X = x.permute(0, 2, 3, 1).reshape(N, H, W * C).clone()
    if kind == "pixels":
        im2col_pixels_kernel(dtype, A.shape[1]).interpret(X, A, geom=geom, BM=PIXELS_PER_CTA)
    else:
        bq, lb = rows_tile(geom)
        im2col_rows_kernel(dtype).interpret(X, A.view(N * P, Q * (geom.r + 1), slot),
                                            geom=geom, BQ=bq, LB=lb)
    return A.view(N * P * Q, geom.r + 1, slot)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_pixel_gather_writes_the_im2col_matrix(case):
    N, C, H, W, R, S, stride, padding, dil_h = case
    (sh, sw), (ph, pw) = (conv_op._pair(v, "v") for v in (stride, padding))
    x = _t(N, C, H, W, seed=40).bfloat16().to(memory_format=torch.channels_last)
    geom = Im2colGeometry(R, S, sh, sw, ph, pw, dil_h, 1, C)
    A3 = _run("pixels", x, geom)
    ref = _reference(x, R, S, (sh, sw), (ph, pw), dil_h)
    assert torch.equal(A3[:, :R, :S * C].double(), ref)
    assert bool((A3[:, :R, S * C:] == 0).all())                  # slot gaps
    assert bool((A3[:, R, :2] == 1).all()) and bool((A3[:, R, 2:] == 0).all())
    assert (ref == 0).any() == (ph > 0 or pw > 0)                # padding was exercised
    # the warp kernel's A, bit for bit (the same layout: the same weight matrix serves both)
    assert torch.equal(A3, _run("warp", x, geom))


def test_a_gap_never_holds_an_input_value():
    """Slot 34 holds 33 values and a gap: the gap reads no input (row index -1), so an inf
    next to a run does not leak into it (a gap holding it would make 0 x inf = NaN)."""
    x = _t(1, 3, 24, 24, seed=41).bfloat16().to(memory_format=torch.channels_last)
    x[0, :, 9, 9] = float("inf")
    geom = Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3)
    A3 = _run("pixels", x, geom)
    assert bool(torch.isinf(A3).any())
    assert bool((A3[:, :11, 33] == 0).all())
    assert torch.equal(A3, _run("warp", x, geom))


def test_fp32_rounds_to_tf32_as_the_warp_kernel():
    from argus.bench.kernelbench.tolerance import round_to_tf32

    x = _t(2, 3, 12, 10, seed=42).to(memory_format=torch.channels_last)
    geom = Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3)
    A3 = _run("pixels", x, geom, dtypes.f32)
    assert torch.equal(A3, _run("warp", x, geom, dtypes.f32))
    ref = round_to_tf32(_reference(x, 7, 7, (2, 2), (3, 3), 1).float())
    assert torch.equal(A3[:, :7, :21], ref)


@pytest.mark.parametrize("dtype,bias", [(torch.bfloat16, False), (torch.float16, True)])
def test_route_through_the_pixel_gather_matches_float64(dtype, bias, monkeypatch):
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "pixels")
    x = _t(2, 3, 17, 15, seed=43).to(dtype).to(memory_format=torch.channels_last)
    w = (_t(8, 3, 7, 7, seed=44) / 8).to(dtype)
    b = _t(8, seed=45).to(dtype) if bias else None
    assert conv_op.route(x, w, b, 2, 3, 1) == "im2col"
    assert conv_op._Gather.of(x, w, 2, 3, 1).kind == "pixels"
    y = conv_op.conv2d_interpret(x, w, b, 2, 3)
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), 2, 3)
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 2.0 ** -8
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "warp")
    assert conv_op._Gather.of(x, w, 2, 3, 1).kind == "rows"


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("geom", [Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3),
                                  Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3)],
                         ids=["7x7s2", "11x11s4"])
def test_pixel_gather_verifies_with_zero_errors(geom, dtype):
    from argus import verify

    pitch = (geom.r + 1) * row_slot(geom)
    report = verify.run(lower_only(im2col_pixels_kernel(getattr(dtypes, dtype), pitch), geom=geom,
                                   BM=PIXELS_PER_CTA))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_nvrtc_builds_the_pixel_gather(dtype, tmp_path, monkeypatch):
    """One 16-byte store per 8 columns of A (f32: two), no spills, no tensor-core op."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    geom = Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3)
    source = codegen.render(lower_only(im2col_pixels_kernel(getattr(dtypes, dtype),
                                                            8 * row_slot(geom)),
                                       geom=geom, BM=PIXELS_PER_CTA))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    chunks = 8 * row_slot(geom) // 8
    v4 = binary.ptx.count("st.global.v4.u32") + binary.ptx.count("st.global.v4.f32")
    assert v4 == chunks * (2 if dtype == "f32" else 1)
    assert "wgmma" not in binary.ptx
    assert not binary.resource(source.name).spills


def test_sass_instructions_a_pixel_are_a_fraction_of_the_warp_kernels():
    """The stem (7x7/2, C = 3): the pixel kernel's path issues at most a quarter of the warp
    kernel's SASS instructions a pixel (1616 / 8 = 202 against 29.5 when written)."""
    if not nvrtc_available() or not _has_disassembler():
        pytest.skip("NVRTC or a disassembler (nvdisasm / cuobjdump on PATH) missing")
    spec = importlib.util.spec_from_file_location("sass_im2col_gather",
                                                  ROOT / "scripts" / "sass_im2col_gather.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stem = module.STEMS[0]
    warp = module.measure("warp", stem)
    pixel = module.measure("pixel", stem)
    # every chunk proven whole (A's pitch a compile-time extent): 16-byte stores only
    assert pixel["memory"].get("STG.128") == 21 and "STG.U16" not in pixel["memory"]
    assert pixel["spills"] == 0 and pixel["path"] == pixel["instructions"]
    assert pixel["per_pixel"] * 4 <= warp["per_pixel"], (pixel, warp)


def _has_disassembler() -> bool:
    from argus.runtime.toolkit import find_tool

    return find_tool("nvdisasm") is not None or find_tool("cuobjdump") is not None


# (N, C, H, W, R, S, stride, padding, dil_h)
PLANE_CASES = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1),             # the stem's form, NCHW: S' 7
    (1, 3, 20, 24, 11, 11, 4, 2, 1),           # the AlexNet stem's: S' 12 (11 + a gap)
    (1, 4, 9, 7, 3, 5, (1, 3), (2, 1), 2),     # W % stride_w != 0, row dilation
]


@pytest.mark.parametrize("case", PLANE_CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_pixel_plane_gather_equals_the_warp_kernels(case, dtype):
    """NCHW x: the pixel kernel's A (K ordered (r, c, s) in slots of C * S') is the plane
    kernel's bit for bit (fp32: both rounded to tf32) and holds unfold's im2col."""
    from argus.kernels.conv_im2col import (im2col_pixel_planes_kernel, im2col_planes_kernel,
                                           plane_slot, planes_tile)

    N, C, H, W, R, S, stride, padding, dil_h = case
    (sh, sw), (ph, pw) = (conv_op._pair(v, "v") for v in (stride, padding))
    x = _t(N, C, H, W, seed=46).to(dtype)
    geom = Im2colGeometry(R, S, sh, sw, ph, pw, dil_h, 1, C)
    sp = plane_slot(geom)
    P = (H + 2 * ph - dil_h * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    dt = dtypes.bf16 if dtype == torch.bfloat16 else dtypes.f32
    X = x.as_strided((N, H, C, W), (C * H * W, W, H * W, 1))
    mine = torch.full((N * P * Q, (R + 1) * C * sp), 7.0, dtype=dtype)
    im2col_pixel_planes_kernel(dt, mine.shape[1]).interpret(X.clone(), mine, geom=geom,
                                                            BM=PIXELS_PER_CTA, SP=sp)
    theirs = torch.full_like(mine, 7.0)
    bq, cb, lb = planes_tile(geom)
    im2col_planes_kernel(dt).interpret(X.clone(), theirs.view(N * P, Q * (R + 1), C, sp),
                                       geom=geom, BQ=bq, CB=cb, LB=lb, SP=sp)
    assert torch.equal(mine, theirs)
    A4 = mine.view(N * P * Q, R + 1, C, sp)
    cols = F.unfold(x.double(), (R, S), (dil_h, 1), (ph, pw), (sh, sw))
    ref = cols.view(N, C, R, S, P * Q).permute(0, 4, 2, 1, 3).reshape(N * P * Q, R, C, S)
    if dtype == torch.bfloat16:
        assert torch.equal(A4[:, :R, :, :S].double(), ref)
    assert bool((A4[:, :R, :, S:] == 0).all())


def test_route_takes_the_pixel_plane_gather_for_an_nchw_x(monkeypatch):
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "pixels")
    x = _t(2, 3, 15, 13, seed=47).bfloat16()
    w = (_t(8, 3, 7, 7, seed=48) / 8).bfloat16()
    b = _t(8, seed=49).bfloat16()
    assert conv_op._Gather.of(x, w, 2, 3, 1).kind == "pixel_planes"
    y = conv_op.conv2d_interpret(x, w, b, 2, 3)
    ref = F.conv2d(x.double(), w.double(), b.double(), 2, 3)
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 2.0 ** -8


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_pixel_plane_gather_verifies_and_builds(dtype, tmp_path, monkeypatch):
    from argus import codegen, verify
    from argus.kernels.conv_im2col import im2col_pixel_planes_kernel, plane_slot

    geom = Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3)
    kernel = lower_only(im2col_pixel_planes_kernel(getattr(dtypes, dtype),
                                                   8 * 3 * plane_slot(geom)),
                        geom=geom, BM=PIXELS_PER_CTA, SP=plane_slot(geom))
    report = verify.run(kernel)
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}
    if not nvrtc_available():
        return
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    source = codegen.render(kernel)
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    v4 = binary.ptx.count("st.global.v4.u32") + binary.ptx.count("st.global.v4.f32")
    assert v4 == 8 * 3 * plane_slot(geom) // 8 * (2 if dtype == "f32" else 1)
    assert not binary.resource(source.name).spills
