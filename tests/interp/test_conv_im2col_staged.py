"""The staged pixel gathers (argus/kernels/conv_im2col.py `im2col_pixels_staged_kernel`,
`im2col_pixel_planes_staged_kernel`: the pixel kernels with each CTA's rows of A gathered into
"rows" register tiles, written to shared memory with ag.store_shared and copied out by TMA
stores) and their selection in argus.ops.conv (IM2COL_GATHER = "staged"): A equals the unstaged
pixel kernels' A bit for bit (which the pixel tests tie to unfold's im2col and to the warp
kernels) on the stems and on odd sizes (a partial last CTA, padding past the filter, C = 1 .. 8,
row dilation, W not a multiple of the stride), fp32 rounded to tf32 the same; the pieces cover
the pitch with TMA-legal boxes; the route through them against float64; the verifier (store.once
/ store.coverage proven on A, the proxy fence and barrier before the copies, no unknown); NVRTC
(16-byte shared stores, TMA stores, no global store, no spills) and, with a disassembler, the
stem's SASS (STS.128 a chunk, no STG)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus import dtypes
from argus.compiler import lower_only
from argus.kernels.conv_im2col import (
    PIXEL_CHUNK,
    PIXELS_PER_CTA,
    Im2colGeometry,
    im2col_pixel_planes_kernel,
    im2col_pixel_planes_staged_kernel,
    im2col_pixels_kernel,
    im2col_pixels_staged_kernel,
    plane_slot,
    row_slot,
    staged_pieces,
    staged_rows,
)
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available

ROOT = Path(__file__).resolve().parents[2]


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# (N, C, H, W, R, S, stride, padding, dil_h)
CASES = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1),             # the stem's form: pitch 168, three pieces
    (1, 3, 20, 24, 11, 11, 4, 2, 1),           # the AlexNet stem's: pitch 408, seven pieces
    (1, 5, 9, 7, 3, 4, (1, 3), (2, 1), 2),     # W % stride_w != 0, row dilation
    (2, 8, 5, 33, 2, 2, 1, 0, 1),              # C = 8, Q = 32
    (3, 1, 13, 11, 5, 3, (2, 1), (1, 2), 1),   # C = 1, asymmetric: 3 images of 7 x 13
    (1, 2, 31, 29, 3, 3, 1, 4, 1),             # padding past the filter: all-zero pixels
]


def _geometry(case):
    N, C, H, W, R, S, stride, padding, dil_h = case
    (sh, sw), (ph, pw) = (conv_op._pair(v, "v") for v in (stride, padding))
    P = (H + 2 * ph - dil_h * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    return Im2colGeometry(R, S, sh, sw, ph, pw, dil_h, 1, C), N * P * Q


@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_staged_gather_equals_the_pixel_gather(case, dtype):
    N, C, H, W = case[:4]
    geom, m = _geometry(case)
    dt = dtypes.bf16 if dtype == torch.bfloat16 else dtypes.f32
    x = _t(N, C, H, W, seed=50).to(dtype)
    X = x.permute(0, 2, 3, 1).reshape(N, H, W * C).clone()
    pitch = (geom.r + 1) * row_slot(geom)
    theirs = torch.full((m, pitch), 7.0, dtype=dtype)
    im2col_pixels_kernel(dt, pitch).interpret(X, theirs, geom=geom, BM=PIXELS_PER_CTA)
    mine = torch.full_like(theirs, 7.0)        # a sentinel: an element left unwritten shows
    im2col_pixels_staged_kernel(dt, pitch).interpret(X, mine, geom=geom)
    assert torch.equal(mine, theirs)


@pytest.mark.parametrize("case", CASES[:3], ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_staged_plane_gather_equals_the_pixel_plane_gather(case, dtype):
    N, C, H, W = case[:4]
    geom, m = _geometry(case)
    dt = dtypes.bf16 if dtype == torch.bfloat16 else dtypes.f32
    x = _t(N, C, H, W, seed=51).to(dtype)
    X = x.as_strided((N, H, C, W), (C * H * W, W, H * W, 1)).clone()
    sp = plane_slot(geom)
    pitch = (geom.r + 1) * C * sp
    theirs = torch.full((m, pitch), 7.0, dtype=dtype)
    im2col_pixel_planes_kernel(dt, pitch).interpret(X, theirs, geom=geom, BM=PIXELS_PER_CTA,
                                                    SP=sp)
    mine = torch.full_like(theirs, 7.0)
    im2col_pixel_planes_staged_kernel(dt, pitch).interpret(X, mine, geom=geom, SP=sp)
    assert torch.equal(mine, theirs)


@pytest.mark.parametrize("pitch", [8, 16, 56, 64, 168, 408, 432, 2048])
def test_pieces_cover_the_pitch_with_tma_boxes(pitch):
    """Disjoint, in order, covering [0, pitch); each a multiple of 8 columns (16-byte TMA box
    rows) of at most 256 (a TMA box dim) and of at most STAGED_PIECE_CHUNKS chunks."""
    from argus.kernels.conv_im2col import STAGED_PIECE_CHUNKS
    pieces = staged_pieces(pitch)
    at = 0
    for c0, width in pieces:
        assert c0 == at and width % PIXEL_CHUNK == 0 and 0 < width <= 256
        assert width <= STAGED_PIECE_CHUNKS * PIXEL_CHUNK
        at += width
    assert at == pitch
    widths = {w for _, w in pieces}
    assert max(widths) - min(widths) <= PIXEL_CHUNK          # near-equal pieces


@pytest.mark.parametrize("dtype,pitch", [(dtypes.bf16, 168), (dtypes.bf16, 408),
                                         (dtypes.f32, 408), (dtypes.f32, 432)])
def test_rows_a_cta_fit_the_shared_memory_budget(dtype, pitch):
    from argus.kernels.conv_im2col import STAGED_SMEM_MAX
    bm = staged_rows(pitch, dtype)
    assert bm in (32, 64, 128)
    assert bm * pitch * dtype.bytes <= STAGED_SMEM_MAX or bm == 32
    assert bm == PIXELS_PER_CTA or 2 * bm * pitch * dtype.bytes > STAGED_SMEM_MAX


@pytest.mark.parametrize("nchw", [False, True])
def test_route_through_the_staged_gather_matches_float64(nchw, monkeypatch):
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "staged")
    x = _t(2, 3, 17, 15, seed=52).bfloat16()
    if not nchw:
        x = x.to(memory_format=torch.channels_last)
    w = (_t(8, 3, 7, 7, seed=53) / 8).bfloat16()
    b = _t(8, seed=54).bfloat16()
    assert conv_op.route(x, w, b, 2, 3, 1) == "im2col"
    assert conv_op._Gather.of(x, w, 2, 3, 1).kind == ("staged_planes" if nchw else "staged")
    y = conv_op.conv2d_interpret(x, w, b, 2, 3)
    ref = F.conv2d(x.double(), w.double(), b.double(), 2, 3)
    assert ((y.double() - ref).norm() / ref.norm()).item() <= 2.0 ** -8


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
def test_staged_gather_verifies_with_zero_errors(planes, dtype):
    from argus import verify
    geom = Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3)
    report = verify.run(_lowered(geom, getattr(dtypes, dtype), planes))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}


def _lowered(geom, dtype, planes: bool):
    if planes:
        sp = plane_slot(geom)
        return lower_only(im2col_pixel_planes_staged_kernel(
            dtype, (geom.r + 1) * geom.channels * sp), geom=geom, SP=sp)
    return lower_only(im2col_pixels_staged_kernel(dtype, (geom.r + 1) * row_slot(geom)),
                      geom=geom)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
def test_nvrtc_builds_the_staged_gather(dtype, tmp_path, monkeypatch):
    """One 16-byte shared store per 8 columns of A (f32: two), one TMA store a piece, no
    global store, no spills."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    geom = Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3)
    source = codegen.render(_lowered(geom, getattr(dtypes, dtype), False))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    pitch = 8 * row_slot(geom)
    v4 = binary.ptx.count("st.shared.v4.u32") + binary.ptx.count("st.shared.v4.b32")
    assert v4 == pitch // 8 * (2 if dtype == "f32" else 1), binary.ptx.count("st.shared")
    assert binary.ptx.count("cp.async.bulk.tensor.2d.global.shared") == \
        len(staged_pieces(pitch))
    assert "st.global" not in binary.ptx
    assert not binary.resource(source.name).spills


def test_sass_of_the_stem_stores_16_bytes_to_shared_memory():
    """The stem (7x7/2, C = 3): 21 STS.128 (one per 8 columns of A), one UTMASTG a piece, no
    global store, no spill, and no more instructions a pixel than the unstaged pixel kernel
    (864 against 944 a warp when written)."""
    if not nvrtc_available() or not _has_disassembler():
        pytest.skip("NVRTC or a disassembler (nvdisasm / cuobjdump on PATH) missing")
    spec = importlib.util.spec_from_file_location("sass_im2col_gather",
                                                  ROOT / "scripts" / "sass_im2col_gather.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    stem = module.STEMS[0]
    staged = module.measure("staged", stem)
    pixel = module.measure("pixel", stem)
    mem = staged["memory"]
    assert mem.get("STS.128") == 21 and set(mem) == {"LDG.U16.CONSTANT", "STS.128",
                                                      "UTMASTG.2D"}, mem
    assert mem["UTMASTG.2D"] == len(staged_pieces(168))
    assert staged["spills"] == 0
    assert staged["per_pixel"] <= pixel["per_pixel"], (staged, pixel)


def _has_disassembler() -> bool:
    from argus.runtime.toolkit import find_tool
    return find_tool("nvdisasm") is not None or find_tool("cuobjdump") is not None
