"""The im2col route's layout arithmetic (argus/kernels/conv_im2col.py, argus.ops.conv's
`_Gather` and `_im2col_weight`), as properties over many problem sizes, no kernel run: A's
pitch gives the GEMM 16-byte rows, a slot holds its run, the tiles stay within their register
budgets, the weight matrix puts every tap where the gather puts its input value, and A's
views stay inside the buffer."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from argus.kernels.conv_im2col import (ELEMENTS_PER_THREAD, ROW_LOADS_PER_THREAD, THREADS,
                                       Im2colGeometry, im2col_tile, planes_tile, row_slot,
                                       rows_tile)
from argus.ops import conv as conv_op

small = st.integers(min_value=1, max_value=13)


@settings(max_examples=300, deadline=None)
@given(r=small, s=small, c=st.integers(min_value=1, max_value=8))
def test_row_slot_is_the_least_aligned_slot(r, s, c):
    slot = row_slot(Im2colGeometry(r, s, channels=c))
    assert slot >= s * c and (r + 1) * slot % 8 == 0
    assert all((r + 1) * k % 8 for k in range(s * c, slot))        # the least such


@settings(max_examples=300, deadline=None)
@given(r=small, s=small, c=st.integers(min_value=1, max_value=8))
def test_rows_tile_budget(r, s, c):
    geom = Im2colGeometry(r, s, channels=c)
    bq, lb = rows_tile(geom)
    assert lb >= max(32, row_slot(geom)) and lb & (lb - 1) == 0 and lb < 2 * max(
        32, row_slot(geom))
    assert bq & (bq - 1) == 0 and 1 <= bq <= 16
    assert bq == 1 or bq * r * (lb // 32) <= ROW_LOADS_PER_THREAD


@settings(max_examples=300, deadline=None)
@given(c=st.integers(min_value=1, max_value=64), q=st.none() | st.integers(1, 400))
def test_tap_tile_covers_the_threads(c, q):
    bq, bc = im2col_tile(c, q)
    assert bc >= c and bc & (bc - 1) == 0 and bc < 2 * c
    assert bq * bc >= THREADS or bq == 1              # no thread replicates another's element
    assert bq * bc <= ELEMENTS_PER_THREAD * THREADS
    if q is not None and bq * bc > THREADS:
        assert bq // 2 < q                            # no halving left that would still cover q


@settings(max_examples=150, deadline=None)
@given(n=st.integers(1, 3), c=st.integers(1, 8), h=st.integers(1, 20), w=st.integers(1, 20),
       r=st.integers(1, 7), s=st.integers(1, 7), sh=st.integers(1, 4), sw=st.integers(1, 4),
       ph=st.integers(0, 3), pw=st.integers(0, 3), dh=st.integers(1, 2), dw=st.integers(1, 2),
       channels_last=st.booleans())
def test_gather_views_stay_inside_their_buffers(n, c, h, w, r, s, sh, sw, ph, pw, dh, dw,
                                                channels_last):
    """For every problem `_Gather.of` takes: the kernel's X view addresses only x's elements
    (its largest offset inside x's storage), A's view only the [M, pitch] buffer, the pitch
    holds the R slots and the bias tap, and K (the GEMM's) fits the pitch."""
    if h + 2 * ph < dh * (r - 1) + 1 or w + 2 * pw < dw * (s - 1) + 1:
        return                                        # no output: `check` refuses it
    x = torch.empty(n, c, h, w, dtype=torch.bfloat16, device="meta")
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    wt = torch.empty(4, c, r, s, dtype=torch.bfloat16, device="meta")
    g = conv_op._Gather.of(x, wt, (sh, sw), (ph, pw), (dh, dw))
    rows = channels_last and dw == 1 and s * c >= conv_op.IM2COL_MIN_RUN
    if g is None:
        assert w % sw and not rows            # and the planes tile too small or dw > 1
        return
    assert g.rows == rows
    # the plane-run layout (the warp, pixel or staged kernel's: IM2COL_GATHER) where the
    # [C, S'] box of the warp kernel has a lane an element
    _, cb, lb = planes_tile(g.geom)
    assert (g.kind in ("planes", "pixel_planes", "staged_planes")) == (
        not rows and dw == 1 and x.stride(3) == 1 and cb * lb >= 32)
    X = g.x_view(x)
    last = sum((d - 1) * st_ for d, st_ in zip(X.shape, X.stride()))
    assert last < x.numel()
    A = torch.empty(g.m, g.pitch, dtype=torch.bfloat16, device="meta")
    Av = g.a_view(A)
    last = sum((d - 1) * st_ for d, st_ in zip(Av.shape, Av.stride()))
    assert last < A.numel()
    assert g.pitch % 8 == 0 and g.slot >= s * c
    # the GEMM's K fits the pitch: one bias column, or two for fp32 (which needs C >= 2)
    assert g.k(True) <= g.pitch and (c < 2 or g.k(True, True) <= g.pitch)
    # the bias tap's columns the GEMM reads are ones the gather writes (BIAS_ONES of them,
    # within the tap's C columns, or the row-run slot)
    assert g.k(True, c >= 2) - r * g.slot <= (c if g.kind == "taps" else g.slot)


@settings(max_examples=60, deadline=None)
@given(c=st.integers(1, 4), r=st.integers(1, 5), s=st.integers(1, 9),
       kind=st.sampled_from(["taps", "rows", "planes"]), bias=st.booleans(),
       fp32=st.booleans())
def test_weight_matrix_matches_a_layout(c, r, s, kind, bias, fp32):
    """`_im2col_weight` puts weight[k, c, r, s] at column r * slot + s * C + c (planes:
    r * slot + c * S' + s), the bias at R * slot (fp32: hi at R * slot, lo at R * slot + 1,
    summing to the bias within 2^-20), zeros everywhere else (where A holds zeros or is never
    read)."""
    from argus.kernels.conv_im2col import plane_slot

    if fp32 and c < 2:
        return                   # fp32 takes the route from 2 channels (`im2col_applies`)
    dtype = torch.float32 if fp32 else torch.bfloat16
    K = 5
    gen = torch.Generator().manual_seed(c * 100 + r * 10 + s)
    weight = torch.randn(K, c, r, s, generator=gen).to(dtype)
    b = torch.randn(K, generator=gen).to(dtype) * 100 if bias else None
    geom = Im2colGeometry(r, s, channels=c)
    sp = plane_slot(geom)
    slot = {"rows": row_slot(geom), "planes": c * sp, "taps": s * c}[kind]
    pitch = -(-(r * s + 1) * c // 8) * 8 if kind == "taps" else (r + 1) * slot
    g = conv_op._Gather(kind, geom, slot, pitch, 1, 1, 1, (1, 1), sp)
    wk = conv_op._im2col_weight(weight, b, g)
    assert wk.shape == (K, pitch) and wk.dtype == dtype
    expect = torch.zeros(K, pitch, dtype=torch.float64)
    w64 = conv_op.round_to_tf32(weight).double() if fp32 else weight.double()
    for rr in range(r):
        for ss in range(s):
            if kind == "planes":
                expect[:, rr * slot + ss:rr * slot + c * sp:sp] = w64[:, :, rr, ss]
            else:
                expect[:, rr * slot + ss * c:rr * slot + ss * c + c] = w64[:, :, rr, ss]
    got = wk.double()
    if bias:
        bias_cols = got[:, r * slot:r * slot + 2].sum(dim=1)
        assert torch.allclose(bias_cols, b.double(), rtol=2.0 ** -20, atol=0)
        got[:, r * slot:r * slot + 2] = 0
    assert torch.equal(got, expect)


def test_weight_cache_keeps_the_row_and_plane_orders_apart(monkeypatch):
    """One weight used by a channels-last (rows: (r, s, c)) and an NCHW (planes: (r, c, s))
    problem of equal slot and pitch (the 7x7 stem at C 3: slot 21, pitch 168) gets each
    order's matrix, not the first one cached (a CPU cache stands in for the GPU's)."""
    from argus.kernels.conv_im2col import plane_slot
    from argus.ops.weight_cache import DerivedCache

    monkeypatch.setattr(conv_op, "_WEIGHTS", DerivedCache("test: im2col weights"))
    geom = Im2colGeometry(7, 7, channels=3)
    sp = plane_slot(geom)
    rows = conv_op._Gather("rows", geom, row_slot(geom), 8 * row_slot(geom), 1, 1, 1, (1, 1))
    planes = conv_op._Gather("planes", geom, 3 * sp, 8 * 3 * sp, 1, 1, 1, (1, 1), sp)
    assert (rows.slot, rows.pitch) == (planes.slot, planes.pitch)
    weight = torch.randn(4, 3, 7, 7, generator=torch.Generator().manual_seed(0)).bfloat16()
    first = conv_op._im2col_weight(weight, None, rows)
    got = conv_op._im2col_weight(weight, None, planes)
    assert not torch.equal(first, got)
    assert torch.equal(got[:, :7], weight[:, 0, 0, :])       # planes: channel 0's run first
    assert torch.equal(first[:, :3], weight[:, :, 0, 0])     # rows: tap (0, 0)'s channels
    assert conv_op._im2col_weight(weight, None, rows) is first             # still cached
