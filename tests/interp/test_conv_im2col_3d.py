"""argus.ops.conv's "im2col" route in 3-d (issue 17: KernelBench's Conv3d / ConvTranspose3d
with 3 input channels): the voxel gather (argus/kernels/conv_im2col.py
`im2col_voxels_staged_kernel`) against an A built in torch from the definition (sentinel-filled:
an element left unwritten shows), channels-last and NCDHW x, bf16 and fp32 (rounded to tf32);
the whole route in the numpy interpreter against float64 F.conv3d (stride, padding, dilation on
every axis, a bias, odd sizes, fp16, batch chunks under IM2COL_MAX_BYTES); strided transposed
3-d convolutions with few input channels, whose per-phase convolutions take the route; the
route's choice on KernelBench's tasks (read from ../shared/kernelbench at test time); the
verifier (store.once / store.coverage proven, nothing unknown) and NVRTC's sm_90a build."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus import dtypes
from argus.compiler import lower_only
from argus.kernels.conv_im2col import (
    BIAS_ONES,
    Im2colGeometry,
    im2col_voxels_staged_kernel,
    staged_pieces,
    voxel_pitch,
)
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available

REPO = Path(__file__).resolve().parents[2]
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


def _spy(monkeypatch) -> list:
    """The routes convolve takes, in call order."""
    taken = []
    real = conv_op.route

    def spy(*args, **kwargs):
        kind = real(*args, **kwargs)
        taken.append(kind)
        return kind
    monkeypatch.setattr(conv_op, "route", spy)
    return taken


def _triple(v):
    return (v,) * 3 if isinstance(v, int) else tuple(v)


def _reference_a(x, geom: Im2colGeometry, pitch: int, planes: bool):
    """A from the definition (float64): row ((n * OD + od) * P + p) * Q + q, the taps'
    columns (t, r, s, c) or (t, r, c, s), BIAS_ONES ones, zeros to the pitch."""
    g = geom
    N, C, D, H, W = x.shape
    xp = F.pad(x.double(), (g.pad_w, g.pad_w, g.pad_h, g.pad_h, g.pad_d, g.pad_d))
    OD = (D + 2 * g.pad_d - g.dil_d * (g.t - 1) - 1) // g.stride_d + 1
    P = (H + 2 * g.pad_h - g.dil_h * (g.r - 1) - 1) // g.stride_h + 1
    Q = (W + 2 * g.pad_w - g.dil_w * (g.s - 1) - 1) // g.stride_w + 1
    taps = []
    for t in range(g.t):
        for r in range(g.r):
            for s in range(g.s):
                d0, h0, w0 = t * g.dil_d, r * g.dil_h, s * g.dil_w
                # [N, C, OD, P, Q]: the tap's input voxel for every output voxel
                taps.append(xp[:, :, d0:d0 + g.stride_d * (OD - 1) + 1:g.stride_d,
                               h0:h0 + g.stride_h * (P - 1) + 1:g.stride_h,
                               w0:w0 + g.stride_w * (Q - 1) + 1:g.stride_w])
    v = torch.stack(taps, dim=-1).reshape(N, C, OD, P, Q, g.t * g.r, g.s)  # [.., (t, r), s]
    # columns (t, r, c, s) for planes, (t, r, s, c) for rows
    v = v.permute(0, 2, 3, 4, 5, 1, 6) if planes else v.permute(0, 2, 3, 4, 5, 6, 1)
    data = v.reshape(N * OD * P * Q, -1)
    A = torch.zeros(data.shape[0], pitch, dtype=torch.float64)
    A[:, :data.shape[1]] = data
    A[:, data.shape[1]:data.shape[1] + BIAS_ONES] = 1.0
    return A


# (N, C, D, H, W, T, R, S, stride, padding, dilation)
GATHERS = [
    (2, 3, 4, 5, 7, 2, 3, 2, (1, 1, 2), (1, 1, 0), 1),      # W % stride_w != 0
    (1, 3, 6, 7, 9, 3, 3, 3, 2, 1, (2, 1, 2)),              # column dilation, stride 2
    (3, 1, 3, 4, 5, 1, 2, 3, 1, (0, 2, 1), 1),              # C = 1, padding past the filter
    (1, 4, 5, 3, 11, 2, 1, 4, (2, 1, 3), (1, 0, 2), (1, 1, 2)),
]


@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("case", GATHERS, ids=lambda c: "x".join(map(str, c[:8])))
def test_voxel_gather_writes_the_im2col_matrix(case, dtype, planes):
    N, C, D, H, W, T, R, S, stride, padding, dilation = case
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = map(_triple, (stride, padding, dilation))
    geom = Im2colGeometry(R, S, sh, sw, ph, pw, dh, dw, C, T, sd, pd, dd)
    dt = dtypes.bf16 if dtype == torch.bfloat16 else dtypes.f32
    pitch = voxel_pitch(geom, dt)
    x = _t(N, C, D, H, W, seed=1).to(dtype)
    X = x.permute(0, 2, 3, 1, 4).contiguous() if planes else \
        x.permute(0, 2, 3, 4, 1).reshape(N, D, H, W * C).contiguous()
    ref = _reference_a(x if dtype != torch.float32 else conv_op.round_to_tf32(x), geom,
                       pitch, planes)
    A = torch.full((ref.shape[0], pitch), 7.0, dtype=dtype)    # the sentinel
    im2col_voxels_staged_kernel(dt, pitch, planes).interpret(X, A, geom=geom)
    assert torch.equal(A.double(), ref)


def test_voxel_pitch_is_compact_and_splits_into_few_pieces():
    """T * R * S * C + BIAS_ONES columns rounded up to 16-byte units, and on to a count that
    `staged_pieces` splits into one piece or pieces near STAGED_PIECE_COLUMNS (few TMA
    stores a CTA, no spills: test_nvrtc_builds_the_voxel_gather), at most a piece's worth of
    units of zeros: L1/60's (3, 5, 7) filter of 3 channels takes 320 bf16 / 324 fp32 columns (317
    needed) where the 2-d slot layout would take 336; a transposed convolution's 2x2x2 phase
    28 fp32 where slots take 120."""
    from argus.kernels.conv_im2col import STAGED_MAX_PIECES, STAGED_PIECE_COLUMNS
    for t, r, s, c in [(3, 5, 7, 3), (2, 2, 2, 3), (3, 3, 3, 1), (1, 1, 1, 8), (3, 3, 3, 3),
                       (5, 5, 5, 4), (7, 7, 7, 3), (1, 2, 2, 2)]:
        geom = Im2colGeometry(r, s, channels=c, t=t)
        need = t * r * s * c + BIAS_ONES
        for dt in (dtypes.bf16, dtypes.f32):
            per = 16 // dt.bytes
            pitch = voxel_pitch(geom, dt)
            want = STAGED_PIECE_COLUMNS // per
            assert pitch % per == 0 and need <= pitch < need + (2 * want + 1) * per, \
                (geom, dt, pitch)
            pieces = staged_pieces(pitch, dt)
            assert len(pieces) == 1 or (
                len(pieces) <= STAGED_MAX_PIECES and
                STAGED_PIECE_COLUMNS / 2 <= pieces[0][1] <= 2 * STAGED_PIECE_COLUMNS)
    assert voxel_pitch(Im2colGeometry(5, 7, channels=3, t=3), dtypes.bf16) == 320
    assert voxel_pitch(Im2colGeometry(5, 7, channels=3, t=3), dtypes.f32) == 324
    assert voxel_pitch(Im2colGeometry(2, 2, channels=3, t=2), dtypes.f32) == 28


# (N, C, D, H, W, K, T, R, S, stride, padding, dilation, bias, channels_last, dtype)
CONVS = [
    (2, 3, 5, 6, 9, 8, 2, 3, 3, (1, 2, 2), (1, 0, 2), (2, 1, 1), True, False, torch.bfloat16),
    (2, 3, 5, 6, 9, 8, 2, 3, 3, (1, 2, 2), (1, 0, 2), (2, 1, 1), True, True, torch.bfloat16),
    (1, 2, 4, 7, 7, 20, 3, 3, 3, 2, 1, 1, False, False, torch.float16),
    (3, 4, 3, 5, 6, 6, 1, 2, 5, 1, (0, 1, 3), (1, 2, 2), True, False, torch.float16),
    (1, 8, 3, 4, 5, 70, 2, 2, 2, 1, 0, 1, False, True, torch.bfloat16),      # K > 64
]


@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:12])))
def test_route_matches_float64(case, monkeypatch):
    """conv3d through the route (gather + matmul's GEMM M = N*OD*P*Q, K' = T*R*S*C (+ 1))
    against float64 F.conv3d of the same 16-bit inputs: within one rounding; NCDHW shape in
    channels-last memory, x's dtype, as the implicit GEMM returns it."""
    taken = _spy(monkeypatch)
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: problems.append(tuple(t.shape for t in a)) or real(*a))
    N, C, D, H, W, K, T, R, S, stride, padding, dilation, bias, cl, dtype = case
    x = _t(N, C, D, H, W, seed=2).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last_3d)
    w = (_t(K, C, T, R, S, seed=3) / (C * T * R * S) ** 0.5).to(dtype)
    b = _t(K, seed=4).to(dtype) if bias else None
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation)
    assert taken == ["im2col"]
    ref = F.conv3d(x.double(), w.double(), None if b is None else b.double(), stride, padding,
                   dilation)
    assert y.shape == ref.shape and y.dtype == dtype
    assert y.permute(0, 2, 3, 4, 1).is_contiguous()
    assert _rel(y, ref) <= (2.0 ** -8 if dtype == torch.bfloat16 else 2.0 ** -11)
    g = conv_op._Gather.of(x, w, stride, padding, dilation)
    assert g.kind == ("voxels" if cl else "voxel_planes")
    m, kc = y.numel() // K, T * R * S * C + bias
    assert problems == [((m, kc), (K, kc), (m, K))]


@pytest.mark.parametrize("cl", [False, True])
def test_tf32_route_matches_the_tf32_model(cl, monkeypatch):
    """fp32 under precision="tf32": A rounded to tf32 by the gather, the weight in its repack,
    the bias as two tf32 pieces: F.conv3d of the tf32-rounded operands in float64 within fp32
    accumulation (1e-6), so the route adds no error of its own beyond cuDNN's tf32 rounding."""
    from argus.bench.kernelbench.tolerance import round_to_tf32
    taken = _spy(monkeypatch)
    x = _t(2, 3, 5, 7, 8, seed=5)
    if cl:
        x = x.to(memory_format=torch.channels_last_3d)
    w, b = _t(16, 3, 3, 2, 3, seed=6) / 4, _t(16, seed=7)
    y = conv_op.conv2d_interpret(x, w, b, (2, 1, 2), (1, 1, 0), (1, 2, 1), precision="tf32")
    assert taken == ["im2col"]
    ref = F.conv3d(round_to_tf32(x).double(), round_to_tf32(w).double(), b.double(),
                   (2, 1, 2), (1, 1, 0), (1, 2, 1))
    assert y.dtype == torch.float32 and _rel(y, ref) <= 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_batch_in_chunks_matches_float64(dtype, monkeypatch):
    """A batch of 5 whose A fits 2 images at a time: chunks of (2, 2, 1) images through one
    A buffer, two GEMM problems, the result as one call's, and a replay on x's new values; a
    bound below one image's A sends the problem to the implicit GEMM."""
    from argus.bench.kernelbench.tolerance import round_to_tf32
    taken = _spy(monkeypatch)
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: problems.append(a[0].shape) or real(*a))
    x = _t(5, 3, 4, 6, 5, seed=8).to(dtype)
    w, b = (_t(6, 3, 3, 3, 3, seed=9) / 8).to(dtype), _t(6, seed=10).to(dtype)
    g = conv_op._Gather.of(x, w, 1, 1, 1)
    image = g.image_rows * g.pitch * x.element_size()
    monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES", 2 * image + 1)
    prec = "tf32" if dtype == torch.float32 else None
    y = conv_op.conv2d_interpret(x, w, b, 1, 1, precision=prec)
    kc = g.k(True, dtype == torch.float32)
    assert taken == ["im2col"] and problems == [(2 * g.image_rows, kc), (g.image_rows, kc)]

    def ref(x):
        xr, wr = (round_to_tf32(x), round_to_tf32(w)) if prec else (x, w)
        return F.conv3d(xr.double(), wr.double(), b.double(), 1, 1)

    bound = 1e-6 if prec else 2.0 ** -8
    assert _rel(y, ref(x)) <= bound
    x.copy_(_t(*x.shape, seed=11).to(dtype))
    assert _rel(conv_op.conv2d_interpret(x, w, b, 1, 1, precision=prec), ref(x)) <= bound
    monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES", image - 1)
    assert conv_op.route(x, w, b, 1, 1, 1, precision=prec) == "implicit_gemm"


def test_route_choice():
    """3-d takes the route where 2-d does (few channels, one group, no activation, bf16 / fp16
    or fp32 under tf32), on a channels-last or NCDHW x read in place; not: more channels, two
    groups, an activation, the fp32 split (no tf32), an x in neither layout."""
    def route(xs, ws, dtype=torch.bfloat16, groups=1, act="none", prec=None, x=None):
        x = torch.empty(xs, dtype=dtype, device="meta") if x is None else x
        w = torch.empty(ws, dtype=dtype, device="meta")
        return conv_op.route(x, w, None, 1, 1, groups, act, None, prec, 1)

    assert route((2, 3, 8, 8, 8), (16, 3, 3, 3, 3)) == "im2col"
    assert route((2, 8, 8, 8, 8), (16, 8, 3, 3, 3)) == "im2col"
    assert route((2, 9, 8, 8, 8), (16, 9, 3, 3, 3)) == "implicit_gemm"
    assert route((2, 4, 8, 8, 8), (16, 4, 3, 3, 3), torch.float32, prec="tf32") == "im2col"
    assert route((2, 5, 8, 8, 8), (16, 5, 3, 3, 3), torch.float32,
                 prec="tf32") == "implicit_gemm"
    assert route((2, 3, 8, 8, 8), (16, 3, 3, 3, 3), torch.float32) == "implicit_gemm"
    assert route((2, 4, 8, 8, 8), (16, 2, 3, 3, 3), groups=2) == "implicit_gemm"
    assert route((2, 3, 8, 8, 8), (16, 3, 3, 3, 3), act="relu") == "implicit_gemm"
    odd = torch.empty(2, 3, 8, 8, 16, dtype=torch.bfloat16, device="meta")[..., ::2]
    assert conv_op._Gather.of(odd, torch.empty(16, 3, 3, 3, 3, device="meta"), 1, 1, 1) is None
    assert route(None, (16, 3, 3, 3, 3), x=odd) == "implicit_gemm"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_strided_transposed_conv3d_phases_take_the_route(dtype, monkeypatch):
    """conv_transpose3d runs in the gradient form: stride 2 is 8 stride-1 convolutions (one an
    output phase) of the input's 3 channels, each with a 1- or 2-tap filter per axis, so each
    takes the route (A of T*R*S*3 columns, where the implicit GEMM pads 3 channels to a K
    slice a tap); the result against float64 F.conv_transpose3d (output_padding too)."""
    from argus.bench.kernelbench.tolerance import round_to_tf32
    taken = _spy(monkeypatch)
    prec = "tf32" if dtype == torch.float32 else None
    run = functools.partial(conv_op.convolve, precision=prec)
    x = _t(2, 3, 3, 4, 5, seed=12).to(dtype)
    w, b = (_t(3, 8, 3, 3, 3, seed=13) / 6).to(dtype), _t(8, seed=14).to(dtype)
    y = conv_op.conv_transpose3d(x, w, b, 2, 1, 1, run=run)
    assert taken == ["im2col"] * 8
    xr, wr = (round_to_tf32(x), round_to_tf32(w)) if prec else (x, w)
    ref = F.conv_transpose3d(xr.double(), wr.double(), b.double(), 2, 1, 1)
    assert y.shape == ref.shape
    assert _rel(y, ref) <= (1e-6 if prec else 2.0 ** -8)


def test_conv1d_takes_the_2d_route():
    """conv1d is conv2d on [N, C, 1, L] (ops and compose): the 2-d route serves it already."""
    x, w = _t(2, 3, 1, 40, seed=15), _t(8, 3, 1, 5, seed=16) / 4
    assert conv_op.route(x, w, None, (1, 2), (0, 2), 1, precision="tf32") == "im2col"


# ---------------------------------------------------------------------------- KernelBench
# level, id: the tasks with 3-input-channel 3-d convolutions (issue 17)
KB_CONV3D = [(1, 60), (1, 66), (2, 6), (2, 23), (2, 24), (2, 48), (2, 79), (2, 83)]
KB_TRANSPOSED = [(2, 50), (2, 58), (2, 60), (2, 89), (2, 96)]


def _kb_convs(level: int, task_id: int) -> list:
    """[(module, x on meta)] of a task's Conv3d / ConvTranspose3d layers, the model and its
    inputs built on the meta device (the task's own sizes, no memory)."""
    from argus.bench.kernelbench.tasks import load_task
    (path,) = (KB_DIR / f"level{level}").glob(f"{task_id}_*.py")
    task = load_task(path)
    with torch.device("meta"):
        model = task.Model(*task.get_init_inputs())
        (x,) = task.get_inputs()[:1]
    return [(m, x) for m in model.modules()
            if isinstance(m, (torch.nn.Conv3d, torch.nn.ConvTranspose3d))]


@pytest.mark.skipif(not (KB_DIR / "level1").is_dir(),
                    reason=f"KernelBench tasks not found at {KB_DIR}")
@pytest.mark.parametrize("prec,dtype", [("tf32", torch.float32), (None, torch.bfloat16)],
                         ids=["tf32", "bf16"])
@pytest.mark.parametrize("task", KB_CONV3D + KB_TRANSPOSED, ids=lambda t: f"L{t[0]}-{t[1]}")
def test_kernelbench_3d_convs_take_the_route(task, prec, dtype):
    """Each task's first (input) convolution has 3 input channels and takes the route on the
    tf32 track and in bf16; a transposed one: every phase convolution of its gradient form.
    One image's A fits IM2COL_MAX_BYTES (else the route would refuse it)."""
    convs = _kb_convs(*task)
    assert convs, f"no 3-d convolution found in task {task}"
    module, x = convs[0]
    x = x.to(dtype)
    w = module.weight.detach().to(dtype)
    b = None if module.bias is None else module.bias.detach().to(dtype)
    assert x.shape[1] == 3
    seen = []

    def run(x, w, b, stride, padding, dilation, groups):
        seen.append(conv_op.route(x, w, b, stride, padding, groups, "none", None, prec,
                                  dilation))
        g = conv_op._Gather.of(x, w, stride, padding, dilation)
        assert g.image_rows * g.pitch * x.element_size() <= conv_op.IM2COL_MAX_BYTES
        return F.conv3d(x, w, b, stride, padding, dilation, groups)

    if isinstance(module, torch.nn.ConvTranspose3d):
        conv_op.conv_transpose3d(x, w, b, module.stride, module.padding,
                                 module.output_padding, module.groups, module.dilation,
                                 run=run)
    else:
        run(x, w, b, module.stride, module.padding, module.dilation, module.groups)
    assert seen and set(seen) == {"im2col"}, seen


# ---------------------------------------------------------------------------- verifier, NVRTC
VERIFY = [Im2colGeometry(5, 7, channels=3, t=3),                       # L1/60, L1/66
          Im2colGeometry(2, 2, 1, 1, 1, 1, 1, 1, 3, 2, 1, 1, 1),       # a transposed phase
          Im2colGeometry(3, 3, 2, 2, 1, 0, 1, 2, 2, 2, 2, 1, 2)]       # strided, dilated


def _lowered(geom, dtype, planes):
    return lower_only(im2col_voxels_staged_kernel(dtype, voxel_pitch(geom, dtype), planes),
                      geom=geom)


@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("geom", VERIFY, ids=["l1_60", "phase", "strided"])
def test_voxel_gather_verifies_with_zero_errors(geom, dtype, planes):
    from argus import verify
    report = verify.run(_lowered(geom, getattr(dtypes, dtype), planes))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("planes", [False, True], ids=["rows", "planes"])
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("geom", VERIFY[:2], ids=["l1_60", "phase"])
def test_nvrtc_builds_the_voxel_gather(geom, dtype, planes, tmp_path, monkeypatch):
    """sm_90a: one 16-byte shared store per 8 columns of A (fp32: two), one TMA store a
    piece, no global store, no spills, fp32 rounded to tf32 (cvt.rna)."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    dt = getattr(dtypes, dtype)
    source = codegen.render(_lowered(geom, dt, planes))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    pitch = voxel_pitch(geom, dt)
    v4 = binary.ptx.count("st.shared.v4.u32") + binary.ptx.count("st.shared.v4.b32")
    assert v4 == pitch * dt.bytes // 16, binary.ptx.count("st.shared")
    assert binary.ptx.count("cp.async.bulk.tensor.2d.global.shared") == \
        len(staged_pieces(pitch, dt))
    assert "st.global" not in binary.ptx and "wgmma" not in binary.ptx
    assert ("cvt.rna.tf32.f32" in binary.ptx) == (dtype == "f32")
    assert not binary.resource(source.name).spills


# ---------------------------------------------------------------------------- result layout
@pytest.mark.parametrize("nchw,cl,want_nchw", [(None, False, True), (None, True, False),
                                               (True, True, True), (False, False, False)])
def test_result_layout_follows_nchw(nchw, cl, want_nchw, monkeypatch):
    """Large images (NCHW_IM2COL_IMAGE_BYTES of A, lowered here) of an NCDHW x, or
    convolve(nchw=True) (compose's ask), give an NCDHW-contiguous result from one GEMM an image
    (Wk [K, kc] x the image's A rows^T into its [K, pixels] plane); a channels-last x under
    nchw=None, and nchw=False, the channels-last result from one GEMM. Values as float64
    F.conv3d either way; the custom op's fake says the same layout for the default
    (nchw=None)."""
    taken = _spy(monkeypatch)
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: problems.append(tuple(t.shape for t in a)) or real(*a))
    monkeypatch.setattr(conv_op, "NCHW_IM2COL_IMAGE_BYTES", 1000)
    x = _t(2, 3, 4, 6, 7, seed=20).bfloat16()
    if cl:
        x = x.to(memory_format=torch.channels_last_3d)
    w, b = (_t(8, 3, 2, 3, 3, seed=21) / 6).bfloat16(), _t(8, seed=22).bfloat16()
    y = conv_op.convolve(x, w, b, 1, (1, 1, 0), nchw=nchw)
    assert taken == ["im2col"]
    ref = F.conv3d(x.double(), w.double(), b.double(), 1, (1, 1, 0))
    assert _rel(y, ref) <= 2.0 ** -8
    pixels, kc = ref[0, 0].numel(), 2 * 3 * 3 * 3 + 1
    g = conv_op._Gather.of(x, w, 1, (1, 1, 0), 1)
    assert g.image_rows * g.pitch * 2 >= 1000
    if want_nchw:
        assert y.is_contiguous()
        assert problems == [((8, kc), (pixels, kc), (8, pixels))]
    else:
        assert y.permute(0, 2, 3, 4, 1).is_contiguous()
        assert problems == [((2 * pixels, kc), (8, kc), (2 * pixels, 8))]
    if nchw is None:
        from torch._subclasses.fake_tensor import FakeTensorMode
        with FakeTensorMode() as mode:
            fx, fw, fb = (mode.from_tensor(t) for t in (x, w, b))
            fake = torch.ops.argus.conv2d(fx, fw, fb, [1, 1, 1], [1, 1, 0], [1, 1, 1], 1,
                                          "none")
        assert fake.shape == y.shape and fake.stride() == y.stride()


@pytest.mark.skipif(not (KB_DIR / "level1").is_dir(),
                    reason=f"KernelBench tasks not found at {KB_DIR}")
@pytest.mark.parametrize("task,want", [((1, 60), True), ((1, 66), True), ((2, 6), False),
                                       ((2, 48), False), ((2, 50), False)],
                         ids=["L1-60", "L1-66", "L2-6", "L2-48", "L2-50"])
def test_result_layout_on_kernelbench(task, want):
    """Under compose's nchw=True, tf32: L1/60 and L1/66 (8-16 images of ~280 MB of A) get the
    NCDHW result from one GEMM an image; L2's 128 small images (L2/6: 6 MB of A an image,
    L2/48: 18 MB) and L2/50's transposed phases (1.8 MB an image: 8 x 128 launches otherwise)
    keep one channels-last GEMM a chunk."""
    module, x = _kb_convs(*task)[0]
    w = module.weight.detach()
    seen = []

    def run(x, w, b, stride, padding, dilation, groups):
        g = conv_op._Gather.of(x, w, stride, padding, dilation)
        seen.append(conv_op.im2col_nchw(x, g.image_rows * g.pitch * x.element_size(), True))
        return F.conv3d(x, w, b, stride, padding, dilation, groups)

    if isinstance(module, torch.nn.ConvTranspose3d):
        conv_op.conv_transpose3d(x, w, None, module.stride, module.padding,
                                 module.output_padding, module.groups, module.dilation,
                                 run=run)
    else:
        run(x, w, None, module.stride, module.padding, module.dilation, module.groups)
    assert set(seen) == {want}, seen


# ---------------------------------------------------------------------------- compose
class _Conv3dThenTransposed(torch.nn.Module):
    """KernelBench L2's forms at small sizes: a Conv3d and a strided ConvTranspose3d of the
    same 3-channel input, each followed by an elementwise op."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv3d(3, 8, (2, 3, 3), padding=1)
        self.up = torch.nn.ConvTranspose3d(3, 4, 3, stride=2, padding=1, output_padding=1)

    def forward(self, x):
        return torch.tanh(self.conv(x)).sum() + torch.sigmoid(self.up(x)).sum()


@pytest.mark.parametrize("image_bytes", [32 << 20, 100], ids=["channels_last", "nchw"])
def test_compose_tf32_runs_the_route(image_bytes, monkeypatch):
    """argus.compose with ConvRun(precision="tf32") (the tf32 track): the Conv3d and the 8
    phases of the ConvTranspose3d take the route, with the result NCDHW either way (compose's
    `_nchw` transposes a channels-last one; NCHW_IM2COL_IMAGE_BYTES lowered: written NCDHW), within
    fp32 accumulation of the tf32 model."""
    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.compose.conv import ConvRun
    from argus.compose.runtime import Program
    monkeypatch.setattr(conv_op, "NCHW_IM2COL_IMAGE_BYTES", image_bytes)
    taken = _spy(monkeypatch)
    torch.manual_seed(3)
    model = _Conv3dThenTransposed()
    x = torch.rand(2, 3, 3, 4, 5)
    prog = Program.build(model, [x], schedules={"conv": ConvRun(precision="tf32")})
    assert [s for s in prog.plan.steps if s.kind == "conv"] and prog.unsupported == []
    with torch.no_grad():
        y = prog.run(model, [x])
        rounded = _Conv3dThenTransposed().double()
        rounded.load_state_dict({k: (round_to_tf32(v) if k.endswith("weight") else v).double()
                                 for k, v in model.state_dict().items()})
        ref = rounded(round_to_tf32(x).double())
    assert taken == ["im2col"] * 9
    assert abs(y.item() - ref.item()) <= 1e-5 * abs(ref.item()) + 1e-5
