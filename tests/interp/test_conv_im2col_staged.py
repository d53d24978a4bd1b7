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
    PIXELS_PER_CTA,
    Im2colGeometry,
    im2col_pixel_planes_kernel,
    im2col_pixel_planes_staged_kernel,
    im2col_pixels_kernel,
    im2col_pixels_staged_kernel,
    plane_slot,
    row_slot,
    staged_pieces,
    staged_reuse,
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


@pytest.mark.parametrize("dtype", [dtypes.bf16, dtypes.f32], ids=["bf16", "f32"])
@pytest.mark.parametrize("pitch", [8, 16, 56, 64, 96, 168, 408, 432, 2048])
def test_pieces_are_equal_conflict_free_tma_boxes(pitch, dtype):
    """Equal (the verifier's coverage proof of translated TMA boxes), in order, covering
    [0, pitch); at most 256 columns (a TMA box dim); an odd number of 16-byte units (shared
    rows conflict-free for 16-byte stores) unless that would take more than STAGED_MAX_PIECES
    copies; the stems' splits as docs/perf/conv.md gives them."""
    from argus.kernels.conv_im2col import STAGED_MAX_PIECES
    pieces = staged_pieces(pitch, dtype)
    per_unit = 16 // dtype.bytes
    width = pieces[0][1]
    assert [c0 for c0, _ in pieces] == list(range(0, pitch, width))
    assert all(w == width for _, w in pieces) and len(pieces) * width == pitch
    assert width % per_unit == 0 and width <= 256
    assert (width // per_unit) % 2 == 1 or len(staged_pieces(pitch // 2, dtype)) * 2 > \
        STAGED_MAX_PIECES
    want = {(dtypes.bf16, 168): 56, (dtypes.bf16, 408): 136, (dtypes.bf16, 432): 72,
            (dtypes.f32, 408): 68, (dtypes.f32, 432): 108}
    assert want.get((dtype, pitch), width) == width


@pytest.mark.parametrize("dtype,pitch", [(dtypes.bf16, 168), (dtypes.bf16, 408),
                                         (dtypes.f32, 168), (dtypes.f32, 408)])
def test_pieces_take_turns_only_past_the_shared_memory_budget(dtype, pitch):
    """Each piece its own buffer while the CTA's [BM, pitch] block fits STAGED_SMEM_MAX (the
    bf16 stems), else one buffer for all (the fp32 11x11: 208 KB as a block)."""
    from argus.kernels.conv_im2col import STAGED_SMEM_MAX
    bm = staged_rows(pitch, dtype)
    assert bm == PIXELS_PER_CTA
    reuse = staged_reuse(pitch, dtype)
    assert reuse == (bm * pitch * dtype.bytes > STAGED_SMEM_MAX)
    assert reuse == (dtype == dtypes.f32 and pitch == 408)
    kernel = _lowered_pitch(dtype, pitch)
    staged = [op.result.type for op in kernel.walk()
              if type(op).__name__ == "SmemAlloc" and op.result.type.shape[0] == bm]
    pieces = staged_pieces(pitch, dtype)
    assert len(staged) == (1 if reuse else len(pieces))
    assert all(t.shape[-1] == pieces[0][1] for t in staged)


def _lowered_pitch(dtype, pitch):
    geom = {168: Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3),
            408: Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3)}[pitch]
    assert (geom.r + 1) * row_slot(geom) == pitch
    return lower_only(im2col_pixels_staged_kernel(dtype, pitch), geom=geom)


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
@pytest.mark.parametrize("geom", [Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3),
                                  Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3)],
                         ids=["7x7s2", "11x11s4"])
def test_staged_gather_verifies_with_zero_errors(planes, dtype, geom):
    """The 11x11 fp32 row-run kernel's pieces take turns in one shared buffer: the read-wait
    and barrier before each rewrite are proven too (sync.store-read)."""
    from argus import verify
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
        len(staged_pieces(pitch, getattr(dtypes, dtype)))
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
    assert mem["UTMASTG.2D"] == len(staged_pieces(168, dtypes.bf16))
    assert staged["spills"] == 0
    assert staged["per_pixel"] <= pixel["per_pixel"], (staged, pixel)


def _has_disassembler() -> bool:
    from argus.runtime.toolkit import find_tool
    return find_tool("nvdisasm") is not None or find_tool("cuobjdump") is not None
