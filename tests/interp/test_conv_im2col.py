"""argus.ops.conv's "im2col" route (bf16 / fp16 convolutions with few input channels, issue 17):
the route's choice, the gather kernel (argus/kernels/conv_im2col.py) against an unfold-built
im2col, the whole route in the numpy interpreter against torch float64 (stride, padding,
dilation, odd sizes, NCHW and channels-last inputs, a bias, fp16), its replay, the verifier
(store.coverage and store.once proven, nothing unknown) and NVRTC's sm_90a build of the
gather. Speed: scripts/gpu_conv_bench.py --cases stem (GPU)."""

import pytest
import torch
import torch.nn.functional as F

from argus.kernels.conv import ConvSchedule
from argus.kernels.conv_im2col import (Im2colGeometry, im2col_kernel, im2col_rows_kernel,
                                       im2col_tile, row_slot, rows_tile)
from argus.ops import conv as conv_op
from argus.runtime import nvrtc_available


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _rel(y, ref) -> float:
    return ((y.double() - ref).norm() / ref.norm()).item()


# one rounding of a 16-bit result (plus fp32 accumulation): normwise well inside 2^-8 / 2^-11
_ROUNDING = {torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}

# (what, x shape, weight shape, bias, stride, padding, dilation, groups, activation, schedule,
# dtype, channels_last) -> route
@pytest.fixture(autouse=True)
def _warp_gathers(monkeypatch):
    """This file tests the warp gathers (rows, planes) and the per-tap one, which
    IM2COL_GATHER = "warp" selects; the default's staged pixel gathers: the route tests below
    also run with them, and tests/interp/test_conv_im2col_staged.py."""
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", "warp")


ROUTES = [
    ("ResNet-50 stem", (32, 3, 224, 224), (64, 3, 7, 7), False, 2, 3, 1, 1, "none", None,
     torch.bfloat16, True, "im2col"),
    ("AlexNet stem (L1/50) with bias", (10, 3, 224, 224), (96, 3, 11, 11), True, 4, 2, 1, 1,
     "none", None, torch.bfloat16, False, "im2col"),
    ("fp16, 8 channels, dilated", (2, 8, 9, 10), (8, 8, 3, 3), False, 1, 2, 2, 1, "none",
     None, torch.float16, True, "im2col"),
    ("1x1 on 3 channels", (2, 3, 5, 7), (8, 3, 1, 1), False, 1, 0, 1, 1, "none", None,
     torch.bfloat16, True, "im2col"),
    ("1x1 on 8 channels: pointwise", (2, 8, 5, 7), (8, 8, 1, 1), False, 1, 0, 1, 1, "none",
     None, torch.bfloat16, True, "pointwise"),
    ("a ConvSchedule keeps the implicit GEMM", (2, 3, 16, 16), (64, 3, 7, 7), False, 2, 3, 1,
     1, "none", ConvSchedule(bm=128, bn=64, bk=64, bw=8, stages=4, epilogue="tma"),
     torch.bfloat16, True, "implicit_gemm"),
    ("9 channels", (2, 9, 9, 9), (8, 9, 3, 3), False, 1, 1, 1, 1, "none", None,
     torch.bfloat16, True, "implicit_gemm"),
    ("two groups", (2, 8, 9, 9), (8, 4, 3, 3), False, 1, 1, 1, 2, "none", None,
     torch.bfloat16, True, "implicit_gemm"),
    ("relu", (2, 3, 9, 9), (8, 3, 3, 3), False, 1, 1, 1, 1, "relu", None, torch.bfloat16,
     True, "implicit_gemm"),
    ("W not a multiple of stride_w", (2, 3, 9, 9), (8, 3, 3, 3), False, 2, 1, 1, 1, "none",
     None, torch.bfloat16, True, "implicit_gemm"),
    ("W % stride_w, channels-last rows: the row-run gather", (2, 3, 9, 9), (8, 3, 7, 7),
     False, 2, 3, 1, 1, "none", None, torch.bfloat16, True, "im2col"),
    ("W % stride_w, NCHW x: the plane-run gather", (2, 3, 9, 9), (8, 3, 7, 7), False, 2, 3,
     1, 1, "none", None, torch.bfloat16, False, "im2col"),
    ("W % stride_w, NCHW x, dilated: no gather", (2, 3, 9, 9), (8, 3, 3, 3), False, 2, 2,
     2, 1, "none", None, torch.bfloat16, False, "implicit_gemm"),
    ("fp32, the bf16 split", (2, 3, 8, 8), (8, 3, 3, 3), False, 1, 1, 1, 1, "none", None,
     torch.float32, True, "implicit_gemm"),
    ("3-d: the voxel gather (tests/interp/test_conv_im2col_3d.py)", (1, 3, 4, 8, 8),
     (8, 3, 3, 3, 3), False, 1, 1, 1, 1, "none", None, torch.bfloat16, False, "im2col"),
    ("3-d, 9 channels", (1, 9, 4, 8, 8), (8, 9, 3, 3, 3), False, 1, 1, 1, 1, "none", None,
     torch.bfloat16, False, "implicit_gemm"),
]


@pytest.mark.parametrize("case", ROUTES, ids=[c[0] for c in ROUTES])
def test_route(case):
    """The dispatch decision (a function of shapes, dtypes and arguments: meta tensors)."""
    (_, xs, ws, bias, stride, padding, dilation, groups, act, schedule, dtype, cl,
     want) = case
    x = torch.empty(xs, dtype=dtype, device="meta")
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = torch.empty(ws, dtype=dtype, device="meta")
    b = torch.empty(ws[0], dtype=dtype, device="meta") if bias else None
    assert conv_op.route(x, w, b, stride, padding, groups, act, schedule, None,
                         dilation) == want
    # the same problem in fp32 under tf32 takes the same route (but fp32 1x1s, which its
    # pointwise route takes for any C)
    if dtype != torch.float32 and tuple(ws[2:]) != (1, 1) and len(xs) == 4:
        x32 = torch.empty(xs, device="meta")
        if cl:
            x32 = x32.to(memory_format=torch.channels_last)
        w32, b32 = torch.empty(ws, device="meta"), torch.empty(ws[0], device="meta")
        few = xs[1] <= conv_op.IM2COL_MAX_CHANNELS_TF32          # 4: a tf32 K slice is 32
        assert conv_op.route(x32, w32, b32 if bias else None, stride, padding, groups, act,
                             schedule, "tf32", dilation) == (want if few else "implicit_gemm")


def test_route_bounds_the_buffer(monkeypatch):
    """A problem whose one image's A would pass IM2COL_MAX_BYTES takes the implicit GEMM; a
    batch whose A passes it runs in chunks of images (`_im2col_chunks`)."""
    x = torch.empty(2, 3, 16, 16, dtype=torch.bfloat16, device="meta")
    w = torch.empty(8, 3, 3, 3, dtype=torch.bfloat16, device="meta")
    assert conv_op.route(x, w, None, 1, 1, 1) == "im2col"
    gather = conv_op._Gather.of(x, w, 1, 1, 1)
    assert gather.kind == "taps" and gather.pitch == 32       # 10 taps x 3 columns -> 32
    image = 16 * 16 * 32 * 2
    monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES", image)
    assert conv_op.route(x, w, None, 1, 1, 1) == "im2col"
    monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES", image - 1)
    assert conv_op.route(x, w, None, 1, 1, 1) == "implicit_gemm"


def test_chunks():
    """Even chunks of at most IM2COL_MAX_BYTES of A, in order, covering the batch once."""
    bound = conv_op.IM2COL_MAX_BYTES
    for n, image in ((256, 2468400), (7, bound // 3), (5, bound), (1, bound), (40, 100)):
        chunks = conv_op._im2col_chunks(n, image)
        assert chunks[0][0] == 0 and chunks[-1][1] == n
        assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))
        sizes = [n1 - n0 for n0, n1 in chunks]
        assert max(sizes) * image <= bound and max(sizes) - min(sizes) <= max(sizes) // 2 + 1
    assert conv_op._im2col_chunks(256, 2468400) == [(0, 128), (128, 256)]   # L1/50 bf16
    assert conv_op._im2col_chunks(7, bound // 3) == [(0, 3), (3, 6), (6, 7)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_batch_in_chunks_matches_float64(dtype, monkeypatch):
    """A batch of 5 whose A fits 2 images at a time: 3 chunks (2, 2, 1) through one A buffer,
    two GEMM problems; the result as one call's, and replayed on new values of x."""
    taken = _spy(monkeypatch)
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: problems.append(a[0].shape) or real(*a))
    x = _t(5, 3, 12, 10, seed=30).to(dtype).to(memory_format=torch.channels_last)
    w, b = (_t(6, 3, 7, 7, seed=31) / 8).to(dtype), _t(6, seed=32).to(dtype)
    g = conv_op._Gather.of(x, w, 2, 3, 1)
    monkeypatch.setattr(conv_op, "IM2COL_MAX_BYTES",
                        2 * g.p * g.q * g.pitch * x.element_size() + 1)
    prec = "tf32" if dtype == torch.float32 else None
    y = conv_op.conv2d_interpret(x, w, b, 2, 3, precision=prec)
    assert taken == ["im2col"]
    kc = g.k(True, dtype == torch.float32)
    assert problems == [(2 * g.p * g.q, kc), (g.p * g.q, kc)]
    bound = 1e-6 if prec else 2.0 ** -8
    from argus.bench.kernelbench.tolerance import round_to_tf32

    def ref(x):
        xr, wr = (round_to_tf32(x), round_to_tf32(w)) if prec else (x, w)
        return F.conv2d(xr.double(), wr.double(), b.double(), 2, 3)

    assert _rel(y, ref(x)) <= bound
    x.copy_(_t(*x.shape, seed=33).to(dtype))
    again = conv_op.conv2d_interpret(x, w, b, 2, 3, precision=prec)
    assert taken == ["im2col"] and _rel(again, ref(x)) <= bound


def test_gather_choice():
    """The row-run gather for channels-last x, dil_w 1 and runs of IM2COL_MIN_RUN or more;
    the plane-run one for NCHW x, dil_w 1 and a [C, S'] tile of 32+ elements; the per-tap one
    otherwise (column dilation, short runs)."""
    def of(C, S, cl=True, dw=1):
        x = torch.empty(2, C, 16, 16, dtype=torch.bfloat16, device="meta")
        if cl:
            x = x.to(memory_format=torch.channels_last)
        w = torch.empty(8, C, 3, S, dtype=torch.bfloat16, device="meta")
        return conv_op._Gather.of(x, w, 1, 1, (1, dw))

    row = of(3, 7)          # 3x7 on 3 channels: runs of 21, 4 slots of 22 (88: 16-byte rows)
    assert row.rows and (row.slot, row.pitch) == (22, 88) and row.tile == rows_tile(row.geom)
    assert of(3, 7, dw=2).kind == "taps" and of(3, 5).kind == "taps"
    assert of(8, 2).rows and of(8, 2).slot == 16
    planes = of(3, 7, cl=False)     # 4 slots of 3 channels x S' = 8 (4 * 3 * 7 = 84: not /8)
    assert planes.kind == "planes" and (planes.sp, planes.slot, planes.pitch) == (8, 24, 96)
    assert of(2, 3, cl=False).kind == "taps"          # a [2, 4] tile: fewer than 32 lanes


def _im2col_reference(x, R, S, stride, padding, dilation):
    """[N*P*Q, R*S*C] with columns (r, s, c), in float64, from torch's unfold (its columns are
    (c, r, s))."""
    N, C = x.shape[:2]
    cols = F.unfold(x.double(), (R, S), dilation, padding, stride)      # [N, C*R*S, P*Q]
    L = cols.shape[-1]
    return cols.view(N, C, R * S, L).permute(0, 3, 2, 1).reshape(N * L, R * S * C)


# (N, C, H, W, R, S, stride, padding, dilation, channels_last)
GATHERS = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1, True),           # the stem's form
    (1, 3, 20, 24, 11, 11, 4, 2, 1, False),        # the AlexNet stem's form, NCHW
    (2, 5, 9, 8, 3, 2, (1, 2), (2, 1), (2, 3), True),   # asymmetric, dilated, C = 5
    (1, 1, 7, 9, 3, 3, 1, 1, 1, False),            # one channel, odd sizes
    (1, 16, 5, 6, 1, 1, (1, 3), 0, 1, True),       # C = 16 (BC = C), 1x1 stride 3
    (3, 2, 4, 300, 1, 5, 1, (0, 2), 1, True),      # Q = 300: three column tiles
]


@pytest.mark.parametrize("case", GATHERS, ids=lambda c: "x".join(map(str, c)))
def test_gather_writes_the_im2col_matrix(case):
    """The per-tap gather alone: A's (r, s, c) columns equal the unfold-built im2col exactly
    (a copy, padding taps 0), the bias tap is (1, 1, 0, ...) (its first BIAS_ONES columns, as
    many as it has), and the pitch's columns past the bias tap are never written (the
    buffer's sentinel stays)."""
    N, C, H, W, R, S, stride, padding, dilation, cl = case
    (sh, sw), (ph, pw), (dh, dw) = (conv_op._pair(v, "v") for v in (stride, padding, dilation))
    x = _t(N, C, H, W, seed=1).bfloat16()
    if cl:
        x = x.to(memory_format=torch.channels_last)
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    T = R * S
    pitch = -(-(T + 1) * C // 8) * 8
    A = torch.full((N * P * Q, pitch), 7.0, dtype=torch.bfloat16)
    s0, s1, s2, s3 = x.permute(0, 2, 3, 1).stride()
    X = x.as_strided((N, H, W // sw, sw, C, 1), (s0, s1, s2 * sw, s2, s3, 1))
    Av = A.as_strided((N * P, Q, T + 1, C, 1), (Q * pitch, pitch, C, 1, 1))
    bq, bc = im2col_tile(C)
    im2col_kernel().interpret(X.clone(), Av, geom=Im2colGeometry(R, S, sh, sw, ph, pw, dh, dw,
                                                                 C), BQ=bq, BC=bc)
    ref = _im2col_reference(x, R, S, (sh, sw), (ph, pw), (dh, dw))
    assert torch.equal(A[:, :T * C].double(), ref)
    bias_tap = torch.zeros(C, dtype=torch.bfloat16)
    bias_tap[:2] = 1
    assert torch.equal(A[:, T * C:(T + 1) * C], bias_tap.expand(N * P * Q, C))
    assert bool((A[:, (T + 1) * C:] == 7).all())


# (N, C, H, W, R, S, stride, padding, dil_h)
ROW_GATHERS = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1),             # the stem's form: slot 21, pitch 168
    (1, 3, 20, 24, 11, 11, 4, 2, 1),           # the AlexNet stem's: slot 34 (33 + a gap)
    (1, 5, 9, 7, 3, 4, (1, 3), (2, 1), 2),     # W % stride_w != 0, row dilation, BQ 16
    (2, 8, 5, 33, 2, 2, 1, 0, 1),              # Q = 32: two CTAs a row
]


@pytest.mark.parametrize("case", ROW_GATHERS, ids=lambda c: "x".join(map(str, c)))
def test_row_gather_writes_the_im2col_matrix(case):
    """The row-run gather alone: every pixel's slot r holds the S * C values of filter row r
    (the unfold-built im2col's, exactly), zeros to the slot's end, then the bias slot
    (1, 1, 0, ..., 0): every column of A written (the sentinel gone)."""
    N, C, H, W, R, S, stride, padding, dil_h = case
    (sh, sw), (ph, pw) = (conv_op._pair(v, "v") for v in (stride, padding))
    x = _t(N, C, H, W, seed=14).bfloat16().to(memory_format=torch.channels_last)
    P = (H + 2 * ph - dil_h * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    geom = Im2colGeometry(R, S, sh, sw, ph, pw, dil_h, 1, C)
    slot = row_slot(geom)
    assert slot >= S * C and (R + 1) * slot % 8 == 0
    A = torch.full((N * P * Q, (R + 1) * slot), 7.0, dtype=torch.bfloat16)
    bq, lb = rows_tile(geom)
    im2col_rows_kernel().interpret(x.permute(0, 2, 3, 1).reshape(N, H, W * C).clone(),
                                   A.view(N * P, Q * (R + 1), slot), geom=geom, BQ=bq, LB=lb)
    ref = _im2col_reference(x, R, S, (sh, sw), (ph, pw), (dil_h, 1)).view(-1, R, S * C)
    A3 = A.view(N * P * Q, R + 1, slot)
    assert torch.equal(A3[:, :R, :S * C].double(), ref)
    assert bool((A3[:, :R, S * C:] == 0).all())
    assert bool((A3[:, R, :2] == 1).all()) and bool((A3[:, R, 2:] == 0).all())


# (N, C, H, W, R, S, stride, padding, dil_h)
PLANE_GATHERS = [
    (2, 3, 16, 16, 7, 7, 2, 3, 1),             # the stem's form, NCHW: S' 7
    (1, 3, 20, 24, 11, 11, 4, 2, 1),           # the AlexNet stem's: S' 12 (11 + a gap)
    (1, 4, 9, 7, 3, 5, (1, 3), (2, 1), 2),     # W % stride_w != 0, row dilation, BQ 16
]


@pytest.mark.parametrize("case", PLANE_GATHERS, ids=lambda c: "x".join(map(str, c)))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_plane_gather_writes_the_im2col_matrix(case, dtype):
    """The plane-run gather alone on an NCHW x: slot r holds channel c's S values at
    c * S' + s (the unfold-built im2col's, exactly; fp32 rounded to tf32 bit for bit), zeros
    in the gaps, then the bias slot (1, 1, 0, ...): every column of A written."""
    from argus import dtypes
    from argus.bench.kernelbench.tolerance import round_to_tf32
    from argus.kernels.conv_im2col import im2col_planes_kernel, plane_slot, planes_tile

    N, C, H, W, R, S, stride, padding, dil_h = case
    (sh, sw), (ph, pw) = (conv_op._pair(v, "v") for v in (stride, padding))
    x = _t(N, C, H, W, seed=21).to(dtype)
    P = (H + 2 * ph - dil_h * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - S) // sw + 1
    geom = Im2colGeometry(R, S, sh, sw, ph, pw, dil_h, 1, C)
    sp = plane_slot(geom)
    assert sp >= S and (R + 1) * C * sp % 8 == 0
    A = torch.full((N * P * Q, (R + 1) * C * sp), 7.0, dtype=dtype)
    bq, cb, lb = planes_tile(geom)
    kernel = im2col_planes_kernel(dtypes.f32 if dtype == torch.float32 else dtypes.bf16)
    kernel.interpret(x.permute(0, 2, 1, 3).clone(), A.view(N * P, Q * (R + 1), C, sp),
                     geom=geom, BQ=bq, CB=cb, LB=lb, SP=sp)
    cols = F.unfold(x.double(), (R, S), (dil_h, 1), (ph, pw), (sh, sw))  # [N, C*R*S, L]
    ref = cols.view(N, C, R, S, -1).permute(0, 4, 2, 1, 3).reshape(-1, R, C, S)
    if dtype == torch.float32:
        ref = round_to_tf32(ref.float()).double()
    A4 = A.view(N * P * Q, R + 1, C, sp)
    assert torch.equal(A4[:, :R, :, :S].double(), ref)
    assert bool((A4[:, :R, :, S:] == 0).all())
    bias = A4[:, R].reshape(-1, C * sp)
    assert bool((bias[:, :2] == 1).all()) and bool((bias[:, 2:] == 0).all())


def test_tile_shapes():
    """BC: the channels rounded up to a power of two; BQ * BC = 4 elements a thread, or
    fewer for a short output row."""
    assert im2col_tile(3) == (128, 4)
    assert im2col_tile(16) == (32, 16)
    assert im2col_tile(5) == (64, 8)
    assert im2col_tile(1) == (512, 1)
    # a short output row: fewer rows a tile, never fewer elements than threads
    assert im2col_tile(3, 55) == (64, 4) and im2col_tile(3, 112) == (128, 4)
    assert im2col_tile(3, 5) == (32, 4) and im2col_tile(16, 5) == (8, 16)
    # the row-run kernel: LB a power of two >= the slot, BQ * R * LB / 32 <= 64 registers
    assert rows_tile(Im2colGeometry(7, 7, channels=3)) == (8, 32)
    assert rows_tile(Im2colGeometry(11, 11, channels=3)) == (2, 64)
    assert rows_tile(Im2colGeometry(3, 3, channels=8)) == (16, 32)


def _spy(monkeypatch):
    taken = []
    for name, label in (("_im2col", "im2col"), ("_pointwise_16bit", "pointwise"),
                        ("conv_kernel", "implicit_gemm")):
        real = getattr(conv_op, name)
        monkeypatch.setattr(conv_op, name,
                            lambda *a, _r=real, _l=label, **k: taken.append(_l) or _r(*a, **k))
    monkeypatch.setattr(conv_op, "_REPEATS", {})
    monkeypatch.setattr(conv_op, "_POINTWISE", type(conv_op._POINTWISE)())
    return taken


# (N, C, H, W, K, R, S, stride, padding, dilation, bias, channels_last, dtype)
CONVS = [
    (2, 3, 16, 16, 16, 7, 7, 2, 3, 1, False, True, torch.bfloat16),      # the stem's form
    (1, 3, 20, 20, 12, 11, 11, 4, 2, 1, True, False, torch.bfloat16),    # L1/50's, NCHW, bias
    (1, 3, 20, 20, 12, 11, 11, 4, 2, 1, True, True, torch.bfloat16),     # rows: slot 34 > 33
    (2, 5, 9, 8, 6, 3, 2, (1, 2), (2, 1), (2, 3), True, True, torch.float16),
    (1, 1, 7, 9, 4, 3, 3, 1, 1, 1, False, False, torch.bfloat16),        # odd sizes, C = 1
    (2, 8, 6, 6, 24, 3, 3, 1, 1, 1, True, True, torch.bfloat16),         # C = 8, K ragged
    (1, 3, 11, 12, 70, 5, 3, (3, 2), (0, 1), 1, False, True, torch.bfloat16),  # K > 64
    (2, 3, 15, 17, 8, 7, 7, 2, 3, 1, True, True, torch.bfloat16),       # rows, W % 2 != 0
    (1, 4, 9, 11, 6, 3, 5, (1, 3), (1, 2), (2, 1), False, True, torch.float16),  # rows
]


@pytest.mark.parametrize("gather", ["warp", "staged"])
@pytest.mark.parametrize("case", CONVS, ids=lambda c: "x".join(map(str, c[:12])) +
                         str(c[12])[6:])
def test_im2col_route_matches_float64(case, gather, monkeypatch):
    """The route (gather + matmul's GEMM with the GEMM problem M = N*P*Q, N = K, K = R*S*C
    (+ 1 for the bias)) against float64 F.conv2d of the same 16-bit inputs: within one
    rounding; the result NCHW-shaped, channels-last, in x's dtype, as the implicit GEMM's."""
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", gather)
    taken = _spy(monkeypatch)
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: problems.append(tuple(t.shape for t in a)) or real(*a))
    N, C, H, W, K, R, S, stride, padding, dilation, bias, cl, dtype = case
    x = _t(N, C, H, W, seed=2).to(dtype)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = (_t(K, C, R, S, seed=3) / (C * R * S) ** 0.5).to(dtype)
    b = _t(K, seed=4).to(dtype) if bias else None
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation)
    assert taken == ["im2col"]
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding,
                   dilation)
    assert y.shape == ref.shape and y.dtype == dtype
    assert y.permute(0, 2, 3, 1).is_contiguous()
    assert _rel(y, ref) <= _ROUNDING[dtype]
    gather = conv_op._Gather.of(x, w, stride, padding, dilation)
    kc = R * gather.slot + bias                  # R * S * C (+ the slots' gaps) (+ 1)
    assert gather.slot == S * C or gather.kind != "taps"
    assert problems == [((y.numel() // K, kc), (K, kc), (y.numel() // K, K))]


def test_the_cases_cover_every_gather():
    """CONVS (and TF32) run each of the three gathers through the whole route."""
    def kinds(cases, dtype):
        out = set()
        for N, C, H, W, K, R, S, stride, padding, dilation, *rest in cases:
            x = torch.empty(N, C, H, W, dtype=dtype, device="meta")
            if rest[1]:
                x = x.to(memory_format=torch.channels_last)
            w = torch.empty(K, C, R, S, dtype=dtype, device="meta")
            out.add(conv_op._Gather.of(x, w, stride, padding, dilation).kind)
        return out

    assert kinds(CONVS, torch.bfloat16) == {"rows", "planes", "taps"}
    assert kinds(TF32, torch.float32) == {"rows", "planes", "taps"}


def test_conv1d_form_and_fp32_bias():
    """conv1d's [N, C, 1, L] form takes the route; an fp32 bias with bf16 data is rounded to
    bf16 in the weight's bias column (as the implicit GEMM reads it in the output dtype)."""
    x, w = _t(2, 3, 1, 40, seed=5).bfloat16(), (_t(8, 3, 1, 5, seed=6) / 4).bfloat16()
    b = _t(8, seed=7)
    y = conv_op.conv2d_interpret(x, w, b, (1, 2), (0, 2))
    ref = F.conv2d(x.double(), w.double(), b.bfloat16().double(), (1, 2), (0, 2))
    assert conv_op.route(x, w, b, (1, 2), (0, 2), 1) == "im2col"
    assert _rel(y, ref) <= 2.0 ** -8


def test_im2col_and_implicit_gemm_agree():
    """The route and the implicit GEMM (a ConvSchedule passed: the opt-out the bench times)
    compute the same convolution: within two roundings of each other."""
    x = _t(1, 3, 8, 8, seed=8).bfloat16().to(memory_format=torch.channels_last)
    w = (_t(16, 3, 3, 3, seed=9) / 3).bfloat16()
    s = ConvSchedule(bm=128, bn=64, bk=64, bw=8, stages=4, epilogue="tma")
    fast = conv_op.conv2d_interpret(x, w, None, 2, 1)
    slow = conv_op.conv2d_interpret(x, w, None, 2, 1, schedule=s)
    assert _rel(fast, slow.double()) <= 2 * 2.0 ** -8
    assert fast.stride() == slow.stride()


def test_repeated_call_replays_and_reads_current_values(monkeypatch):
    """A repeated call with the same tensors replays the prepared launch (no new preparation)
    on x's current values; a bias updated in place (its version bumps) is seen: prepared anew,
    its new values in the weight's bias column."""
    taken = _spy(monkeypatch)
    x = _t(2, 3, 12, 12, seed=10).bfloat16().to(memory_format=torch.channels_last)
    w, b = (_t(8, 3, 5, 5, seed=11) / 8).bfloat16(), _t(8, seed=12).bfloat16()
    first = conv_op.conv2d_interpret(x, w, b, 2, 2)
    again = conv_op.conv2d_interpret(x, w, b, 2, 2)
    assert taken == ["im2col"] and torch.equal(again, first)
    x.copy_(_t(*x.shape, seed=13))
    replayed = conv_op.conv2d_interpret(x, w, b, 2, 2)
    assert taken == ["im2col"] and not torch.equal(replayed, first)
    assert _rel(replayed, F.conv2d(x.double(), w.double(), b.double(), 2, 2)) <= 2.0 ** -8
    b.add_(1.0)
    moved = conv_op.conv2d_interpret(x, w, b, 2, 2)
    assert taken == ["im2col", "im2col"]
    assert _rel(moved, F.conv2d(x.double(), w.double(), b.double(), 2, 2)) <= 2.0 ** -8


GEOMETRIES = [Im2colGeometry(7, 7, 2, 2, 3, 3, 1, 1, 3),       # ResNet-50's stem
              Im2colGeometry(11, 11, 4, 4, 2, 2, 1, 1, 3),     # AlexNet's (L1/50)
              Im2colGeometry(3, 2, 1, 2, 2, 1, 2, 3, 5)]       # asymmetric, dilated


@pytest.mark.parametrize("dtype", ["bf16", "f32"])
@pytest.mark.parametrize("kind", ["taps", "rows", "planes"])
@pytest.mark.parametrize("geom", GEOMETRIES, ids=lambda g: f"{g.r}x{g.s}s{g.stride_w}")
def test_gather_verifies_with_zero_errors(geom, kind, dtype):
    """store.coverage and store.once proven for A (the grid covers the kernel's view of A with
    disjoint tiles), no error or unknown, within 2 s CPU (dev machine, scaled)."""
    import dataclasses

    from argus import dtypes
    from argus.compiler import lower_only
    from tests.verify.timing import least_cpu_verify, runs_text, within

    from argus.kernels.conv_im2col import im2col_planes_kernel, plane_slot, planes_tile

    dt = getattr(dtypes, dtype)
    if kind == "rows":
        geom = dataclasses.replace(geom, dil_w=1)
        bq, lb = rows_tile(geom)
        kernel = lower_only(im2col_rows_kernel(dt), geom=geom, BQ=bq, LB=lb)
    elif kind == "planes":
        geom = dataclasses.replace(geom, dil_w=1)
        bq, cb, lb = planes_tile(geom)
        kernel = lower_only(im2col_planes_kernel(dt), geom=geom, BQ=bq, CB=cb, LB=lb,
                            SP=plane_slot(geom))
    else:
        # AlexNet's row of 55 outputs takes the half tile (two elements a thread)
        bq, bc = im2col_tile(geom.channels, 55 if geom.stride_w == 4 else None)
        kernel = lower_only(im2col_kernel(dt), geom=geom, BQ=bq, BC=bc)
    report, times, bounds = least_cpu_verify(kernel, 2, 2.0)
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    codes = {f.code for f in report.proven}
    assert {"store.once", "store.coverage"} <= codes
    assert within(times, bounds), runs_text(times, bounds)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtype", ["bf16", "f16", "f32"])
@pytest.mark.parametrize("kind", ["taps", "rows", "planes"])
def test_nvrtc_builds_the_gather(dtype, kind, tmp_path, monkeypatch):
    """The gathers compile for sm_90a with no spills and no tensor-core op (a copy; fp32:
    rounded to tf32 to nearest, cvt.rna.tf32)."""
    from argus import codegen, dtypes
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    from argus.kernels.conv_im2col import im2col_planes_kernel

    if kind == "rows":
        kernel = lower_only(im2col_rows_kernel(getattr(dtypes, dtype)), geom=GEOMETRIES[0],
                            BQ=8, LB=32)
    elif kind == "planes":
        kernel = lower_only(im2col_planes_kernel(getattr(dtypes, dtype)), geom=GEOMETRIES[0],
                            BQ=8, CB=4, LB=8, SP=7)
    else:
        kernel = lower_only(im2col_kernel(getattr(dtypes, dtype)), geom=GEOMETRIES[0],
                            BQ=128, BC=4)
    source = codegen.render(kernel)
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "wgmma" not in binary.ptx and "st.global" in binary.ptx
    assert ("cvt.rna.tf32.f32" in binary.ptx) == (dtype == "f32")
    assert not binary.resource(source.name).spills


def test_slot_gaps_do_not_leak_non_finite_values():
    """The row-run layout's gap columns (slot 34 for 11 x 3 = 33 values) are written 0, not the
    next pixels' values the warp's lanes also read: an inf in x makes exactly the outputs that
    read it non-finite (a gap holding it would turn 0 x inf into NaN elsewhere)."""
    x = _t(1, 3, 24, 24, seed=15).bfloat16().to(memory_format=torch.channels_last)
    x[0, :, 9, 9] = float("inf")
    w = (_t(4, 3, 11, 11, seed=16) / 16).bfloat16()
    assert conv_op._Gather.of(x, w, 4, 2, 1).slot == 34
    y = conv_op.conv2d_interpret(x, w, None, 4, 2)
    ref = F.conv2d(x.double(), w.double(), None, 4, 2)
    assert not bool(torch.isfinite(ref).all())
    assert torch.equal(torch.isfinite(y), torch.isfinite(ref))


# (N, C, H, W, K, R, S, stride, padding, dilation, bias, channels_last)
TF32 = [
    (2, 3, 16, 16, 8, 7, 7, 2, 3, 1, False, True),            # the stem's form: row runs
    (1, 3, 20, 20, 12, 11, 11, 4, 2, 1, True, False),         # L1/50's (KernelBench: fp32)
    (2, 3, 20, 20, 12, 11, 11, 4, 2, 1, True, True),          # row runs, slot 34
    (2, 4, 9, 8, 6, 3, 2, (1, 2), (2, 1), (2, 3), True, True),    # per tap, dilated
]


@pytest.mark.parametrize("gather", ["warp", "staged"])
@pytest.mark.parametrize("case", TF32, ids=lambda c: "x".join(map(str, c)))
def test_tf32_route_matches_the_tf32_model(case, gather, monkeypatch):
    """fp32 under precision="tf32": the gather rounds x to tf32 to nearest on its way into A,
    the weight is rounded once, matmul's tf32 GEMM (problem in_dtype "tf32") multiplies them
    and adds the bias as two tf32 pieces: ~1e-7 against float64 of the tf32-rounded operands
    with the exact bias (a bias 1000x the outputs: one tf32 piece would be 2^-11 of it off),
    within the tf32 bound (~3e-4) of the exact convolution; fp32 result, channels-last."""
    monkeypatch.setattr(conv_op, "IM2COL_GATHER", gather)
    taken = _spy(monkeypatch)
    problems = []
    real = conv_op.pointwise_gemm
    monkeypatch.setattr(conv_op, "pointwise_gemm",
                        lambda *a: problems.append(str(a[0].dtype)) or real(*a))
    from argus.bench.kernelbench.tolerance import round_to_tf32

    N, C, H, W, K, R, S, stride, padding, dilation, bias, cl = case
    x = _t(N, C, H, W, seed=17)
    if cl:
        x = x.to(memory_format=torch.channels_last)
    w = _t(K, C, R, S, seed=18) / (C * R * S) ** 0.5
    b = _t(K, seed=19) * 1000 if bias else None
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation, precision="tf32")
    assert taken == ["im2col"] and problems == ["torch.float32"]
    bd = None if b is None else b.double()
    ref_t = F.conv2d(round_to_tf32(x).double(), round_to_tf32(w).double(), bd, stride,
                     padding, dilation)
    ref = F.conv2d(x.double(), w.double(), bd, stride, padding, dilation)
    assert y.dtype == torch.float32 and y.permute(0, 2, 3, 1).is_contiguous()
    assert _rel(y, ref_t) <= 1e-6
    assert _rel(y - bd.view(1, -1, 1, 1) if bias else y,
                ref - bd.view(1, -1, 1, 1) if bias else ref) <= 2e-3


@pytest.mark.parametrize("rows", [False, True], ids=["taps", "rows"])
def test_fp32_gather_rounds_to_tf32(rows):
    """The fp32 gathers store round_tf32(x) (to nearest, as cuDNN rounds), bit for bit, and
    the bias tap's two ones."""
    import dataclasses

    from argus import dtypes
    from argus.bench.kernelbench.tolerance import round_to_tf32

    N, C, H, W, R, S = 2, 3, 10, 12, 3, 7
    x = _t(N, C, H, W, seed=20).to(memory_format=torch.channels_last)
    geom = Im2colGeometry(R, S, 1, 2, 1, 3, 1, 1, C)
    P, Q = H, (W + 6 - S) // 2 + 1
    ref = round_to_tf32(_im2col_reference(x, R, S, (1, 2), (1, 3), 1).float())
    if rows:
        slot = row_slot(geom)
        A = torch.full((N * P * Q, (R + 1) * slot), 7.0)
        bq, lb = rows_tile(geom)
        im2col_rows_kernel(dtypes.f32).interpret(
            x.permute(0, 2, 3, 1).reshape(N, H, W * C).clone(), A.view(N * P, -1, slot),
            geom=geom, BQ=bq, LB=lb)
        A3 = A.view(N * P * Q, R + 1, slot)
        got, bias_tap = A3[:, :R, :S * C].reshape(-1, R * S * C), A3[:, R, :3]
    else:
        pitch = -(-(R * S + 1) * C // 8) * 8
        A = torch.full((N * P * Q, pitch), 7.0)
        bq, bc = im2col_tile(C)
        X = x.permute(0, 2, 3, 1).reshape(N, H, W // 2, 2, C, 1)
        im2col_kernel(dtypes.f32).interpret(
            X.clone(), A.as_strided((N * P, Q, R * S + 1, C, 1), (Q * pitch, pitch, C, 1, 1)),
            geom=dataclasses.replace(geom), BQ=bq, BC=bc)
        got, bias_tap = A[:, :R * S * C], A[:, R * S * C:(R * S + 1) * C]
    assert torch.equal(got, ref)
    assert torch.equal(bias_tap, torch.tensor([1.0, 1.0, 0.0]).expand_as(bias_tap))
