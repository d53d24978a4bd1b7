"""Seeded bugs in the implicit-GEMM convolution (argus/kernels/conv.py), each with what must
catch it. The bugs are written into the kernel's coordinate helpers (monkeypatched), and a
fresh, uncached kernel is traced with them.

The receptive field is proven by three facts (docs/verify.md "Conv receptive field"): each A
box carries copy tags (ag.tma.load(tags=)) naming its filter tap and the output pixel it is
read for, and its im2col column kin = tap * cg_padded + c; the weight's kin is its K column.
wgmma.agree proves A's (tap, channel) is B's at every product, wgmma.k-once that each output
sums every (tap, channel) exactly once, and the kernel's tag assertion (_receptive_field,
2-d: per-row boxes, one assertion a box where they are narrower than a warpgroup's rows, and
rowbox; _halo_receptive_field for the halo at bw = bm / consumers) that each A element is the
input pixel p * stride + t * dilation - padding of its output pixel and tap, or a zero TMA
fill read from outside the tensor (padding, a packed step's tail).

  * groups mixing (the weight box of group 0 for every group): the verifier, wgmma.agree on
    the `grp` tag (an error with a counterexample naming A.grp == B.grp);
  * a wrong padding offset (rows above / below the image read as the neighbouring image's
    rows instead of zeros) and a wrong stride (stride_h ignored): the verifier, the
    receptive-field tag assertion (an error naming the thread, the assertion's line and the
    copy's), and the interpreter against float64 F.conv2d;
  * per-image row blocks (rowbox) storing their rows past P into the next image: the
    verifier, store.once (an error naming the element stored twice);
  * packed taps (ConvSchedule.taps_per_slice): a tap packed twice (every atom of a step the
    first one's tap): the verifier, wgmma.k-once (kin multiplied twice); a weight atom at the
    wrong channel offset: the verifier, wgmma.agree (A.kin == B.kin); both also by the
    interpreter; the tail step's slices past the last tap not masked (a wrapped tap read
    instead of zeros): the interpreter against float64 torch, and for the per-row route the
    receptive-field assertion (a tap past the filter must read outside the tensor);
  * narrow per-row boxes (bw 8) loading the input row below their own, the halo's rows one
    input row low, the halo consumer's filter-row offset one row off: the verifier, the
    receptive-field tag assertion;
  * the strided rowbox (stride 2) without its element strides, or started at p0 instead of
    p0 * stride: the verifier, the receptive-field tag assertion, and the interpreter.
"""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import conv as K
from argus.kernels.conv import ConvGeometry, ConvSchedule
from argus.ops import conv as conv_op
from argus.verify import check_asserts
from argus.verify.model import Model

SCHEDULE = ConvSchedule(bm=128, bn=64, bw=64, stages=2)


def _fresh(monkeypatch):
    """Route the op's kernel lookup past the factory's cache (a cached kernel keeps the
    trace made before the mutation)."""
    monkeypatch.setattr(conv_op, "conv_kernel", K.conv_kernel.__wrapped__)


def _error(x, w, stride, padding, groups):
    y = conv_op.conv2d_interpret(x, w, None, stride, padding, 1, groups, schedule=SCHEDULE)
    ref = F.conv2d(x.double(), w.double(), None, stride, padding, 1, groups)
    return (y.double() - ref).abs().max().item() / ref.abs().max().item()


def test_groups_mixing_is_a_verifier_error(monkeypatch):
    monkeypatch.setattr(K, "_weight_coords",
                        lambda g, n0, tap, c0, cgp: (0, n0, tap * cgp + c0))   # BUG: group 0
    kernel = K.conv_kernel.__wrapped__()
    found = verify.check(kernel, geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, 2, 64), s=SCHEDULE)
    errors = [d for d in found if d.severity == "error"]
    assert any(d.code == "wgmma.agree" and "grp" in d.message for d in errors), \
        [f"{d.severity} {d.code}: {d.message[:120]}" for d in found]
    with pytest.raises(ag.VerificationError):
        ag.compile(kernel, geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, 2, 64), s=SCHEDULE)


def test_groups_mixing_changes_the_result(monkeypatch):
    _fresh(monkeypatch)
    monkeypatch.setattr(K, "_weight_coords",
                        lambda g, n0, tap, c0, cgp: (0, n0, tap * cgp + c0))
    g = torch.Generator().manual_seed(5)
    x = torch.randn(1, 16, 6, 6, generator=g).bfloat16()
    w = torch.randn(16, 8, 3, 3, generator=g).bfloat16()
    assert _error(x, w, 1, 1, 2) > 0.1


def test_wrong_padding_rows_are_caught_by_the_interpreter(monkeypatch):
    _fresh(monkeypatch)
    # BUG: rows outside [0, H) are not pushed past the tensor: the neighbouring image's rows
    monkeypatch.setattr(K, "_row", lambda image, h, H, NH, push, outside_depth=0:
                        image * H + h)
    g = torch.Generator().manual_seed(6)
    x = torch.randn(2, 8, 6, 6, generator=g).bfloat16()
    w = torch.randn(8, 8, 3, 3, generator=g).bfloat16()
    assert _error(x, w, 1, 1, 1) > 0.05


def test_wrong_stride_is_caught_by_the_interpreter(monkeypatch):
    _fresh(monkeypatch)
    right = K._input_coords

    def no_stride_h(geom, *args):   # BUG: stride_h ignored
        return right(dataclasses.replace(geom, stride_h=1), *args)
    monkeypatch.setattr(K, "_input_coords", no_stride_h)
    g = torch.Generator().manual_seed(7)
    x = torch.randn(1, 8, 9, 8, generator=g).bfloat16()
    w = torch.randn(8, 8, 3, 3, generator=g).bfloat16()
    assert _error(x, w, 2, 1, 1) > 0.05


ROWBOX_SCHEDULES = [
    ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2),
    # narrow tiles: one TMA store per output row, joined into one box for store.once
    ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", rowbox=True, cluster_m=2,
                 num_sms=4)]


@pytest.mark.parametrize("schedule", ROWBOX_SCHEDULES, ids=["direct", "tma_bw8_cluster"])
def test_rowbox_rows_past_p_stored_into_the_next_image_is_a_store_once_error(monkeypatch,
                                                                              schedule):
    """Per-image row blocks (ConvSchedule.rowbox): a block's rows past its image's P rows must
    not be stored (out_row pushes them past the tensor); stored, they overwrite the next
    image's first rows. store.once proves the correct kernel through the decomposition of
    argus/verify/once_split.py (the push dropped in bounds, row = image * P + p); with the push
    gone that decomposition does not hold, and the double store must still be found."""
    monkeypatch.setattr(K, "_outside", lambda i, extent: 0)   # BUG: rows past P are stored
    kernel = K.conv_kernel.__wrapped__()
    found = verify.check(kernel, geom=ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, 1, 64), s=schedule)
    assert any(d.code == "store.once" and d.severity == "error" and "stored twice" in d.message
               for d in found), [f"{d.severity} {d.code}: {d.message[:120]}" for d in found]


GEOM = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)
# per-image row blocks (rowbox) need a 2-d convolution of stride 1 and one group
GEOM_ROWBOX = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
# the halo (per-image row blocks of X [N * H, ..]) needs stride_h 1; groups and stride_w free
GEOM_HALO = ConvGeometry(3, 3, 1, 2, 1, 1, 2, 1, groups=2, cg_padded=64)

# schedules whose store.coverage is proven (check_stores._tile_coverage): the direct
# epilogue, the TMA epilogue's row segments (8 sites, one block index inside the tile), the
# NCHW epilogue's (image, row) pair seen as one flattened row (check_stores._merge_radix_dims);
# clusters (the CTA rank inside the unit index m of m // q_tiles, m % q_tiles: one tile index,
# check_stores._pair_radix_dims); per-image row blocks (rows past P pushed out of the tensor:
# check_stores._pushed_split, with the kernel's ag.require NP == N * P; the halo's X has no
# N: its ag.require NP == NH // H * P, a product with the factor P)
COVERED = [
    ("direct", False, GEOM, ConvSchedule(bm=128, bn=64, bw=64, stages=2)),
    ("tma_bw8", False, GEOM, ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma")),
    ("nchw", True, GEOM, ConvSchedule(bm=128, bn=64, bw=64, stages=2)),
    ("cluster_direct", False, GEOM,
     ConvSchedule(bm=128, bn=64, bw=64, stages=2, cluster_m=2, num_sms=4)),
    ("cluster_tma_bw8", False, GEOM,
     ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", cluster_m=2, num_sms=4)),
    ("rowbox_direct", False, GEOM_ROWBOX,
     ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)),
    ("nchw_rowbox_cluster", True, GEOM_ROWBOX,
     ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, cluster_m=2, num_sms=4)),
    ("halo_direct", False, GEOM_HALO,
     ConvSchedule(bm=128, bn=64, bw=64, stages=2, halo=True, num_sms=2)),
    # per-image row blocks stored by 8 TMA row segments, each pushed out by its own flag:
    # unpushed, they are translates joined by the segment index (in the flags too)
    ("rowbox_tma_bw8_cluster", False, GEOM_ROWBOX, ROWBOX_SCHEDULES[1])]


def _store_coverage_errors(found):
    bad = [d for d in found if d.code == "store.coverage" and d.severity == "error"]
    assert bad, [f"{d.severity} {d.code}: {d.message[:160]}" for d in found]
    for d in bad:
        text = str(d)
        # at the store's line, with who stores it
        assert "conv.py:" in text and "role 'consumer'" in text and "warpgroup" in text and \
            "thread" in text, text
    return bad


@pytest.mark.parametrize("cut", ["channel", "pixel"])
@pytest.mark.parametrize("name,nchw,geom,schedule", COVERED, ids=[c[0] for c in COVERED])
def test_a_grid_skipping_the_last_tile_is_a_store_coverage_error(monkeypatch, cut, name, nchw,
                                                                 geom, schedule):
    """The tile scheduler launched one channel tile (bn of Kg) or one pixel tile (bm of the
    rows x columns) short: the last tile of the output is never written. store.coverage
    must report it as an error at the store's line, naming the thread, with a
    counterexample (the unit count against the output's tile count)."""
    launch = K.TileScheduler.launch

    def short(M, N, bm, bn, **kw):   # BUG: one tile short along the channels or the pixels
        return launch(M, N - bn, bm, bn, **kw) if cut == "channel" else \
            launch(M - bm, N, bm, bn, **kw)
    monkeypatch.setattr(K.TileScheduler, "launch", staticmethod(short))
    kernel = K.conv_kernel.__wrapped__(nchw=nchw)
    bad = _store_coverage_errors(verify.check(kernel, geom=geom, s=schedule))
    assert any("never stored" in str(d) for d in bad), [str(d) for d in bad]
    w = bad[0].counterexample
    assert w["units"] < w["tiles"] or "other_unit" in w, w


CLUSTERED = [c for c in COVERED if c[3].cluster_m > 1]


@pytest.mark.parametrize("name,nchw,geom,schedule", CLUSTERED, ids=[c[0] for c in CLUSTERED])
def test_a_cluster_rank_mapping_that_double_covers_is_an_error(monkeypatch, name, nchw, geom,
                                                               schedule):
    """Both CTAs of a cluster take the tile of rank 0 (TileScheduler.locate ignores the CTA's
    rank): every rank-0 tile is stored twice, every rank-1 tile never. store.coverage (the
    units walked cover half the tiles) and store.once (an element stored by both CTAs) are
    errors at the store's line naming role, warpgroup and thread."""
    locate = K.TileScheduler.locate
    monkeypatch.setattr(K.TileScheduler, "locate",
                        lambda self, unit, rank=None: locate(self, unit, rank=0))   # BUG
    kernel = K.conv_kernel.__wrapped__(nchw=nchw)
    found = verify.check(kernel, geom=geom, s=schedule)
    bad = _store_coverage_errors(found)
    assert any("never stored" in str(d) for d in bad), [str(d) for d in bad]
    assert any(d.code == "store.once" and d.severity == "error" and "stored twice" in d.message
               for d in found), [f"{d.severity} {d.code}: {d.message[:160]}" for d in found]


@pytest.mark.parametrize("name", ["rowbox_direct", "halo_direct", "rowbox_tma_bw8_cluster"])
def test_per_image_blocks_without_their_image_precondition_warn(monkeypatch, name):
    """Per-image row blocks walk NP // P images of P rows: without the kernel's
    ag.require(NP == N * P) (rowbox; the halo's NP == NH // H * P) the rows past the last
    whole image are never stored when P does not divide NP. store.coverage says so (a
    warning naming the precondition to state), it does not prove it."""
    monkeypatch.setattr(K.ag, "require", lambda cond, why: None)   # BUG: not stated
    kernel = K.conv_kernel.__wrapped__()
    _, _, geom, schedule = next(c for c in COVERED if c[0] == name)
    found = verify.check(kernel, include_proven=True, geom=geom, s=schedule)
    cov = [d for d in found if d.code == "store.coverage" and d.severity != "note"]
    assert cov and all(d.severity == "warning" for d in cov), [str(d)[:300] for d in cov]
    assert any("not a multiple" in d.message and "ag.require" in str(d) for d in cov), \
        [str(d) for d in cov]


# proven too, its mutations left to the kernels above (5 s of verify each on this machine):
# the halo's TMA epilogue, 8 pushed row segments as the rowbox one's
PROVEN_ONLY = [("halo_tma_bw8_cluster", False, GEOM_HALO,
                ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", halo=True,
                             cluster_m=2, num_sms=4))]


@pytest.mark.parametrize("name,nchw,geom,schedule", COVERED + PROVEN_ONLY,
                         ids=[c[0] for c in COVERED + PROVEN_ONLY])
def test_the_correct_grid_proves_store_coverage(name, nchw, geom, schedule):
    """The unmutated kernels of the test above: store.coverage proven, no unknown left."""
    found = verify.check(K.conv_kernel(nchw=nchw), include_proven=True, geom=geom,
                         s=schedule)
    cov = [d for d in found if d.code == "store.coverage"]
    assert cov and all(d.severity == "note" for d in cov), [str(d)[:300] for d in cov]


PACKED = dict(bm=128, bn=64, bw=64, stages=2, bk=16, taps_per_slice=4)


def _packed_error(x, w, padding=1, dilation=1):
    y = conv_op.conv2d_interpret(x, w, None, 1, padding, dilation, 1,
                                 schedule=ConvSchedule(**PACKED))
    ref = F.conv2d(x.double(), w.double(), None, 1, padding, dilation, 1)
    return y, ref, (y.double() - ref).abs().max().item() / ref.abs().max().item()


def _packed_operands(seed):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(2, 8, 6, 7, generator=g).bfloat16(),
            torch.randn(16, 8, 3, 3, generator=g).bfloat16())


def test_packed_taps_right_kernel_is_within_bf16(monkeypatch):
    _fresh(monkeypatch)
    assert _packed_error(*_packed_operands(7))[2] < 5e-3


def test_packed_tap_twice_is_caught_by_the_interpreter(monkeypatch):
    _fresh(monkeypatch)
    right = K._k_slice
    # BUG: every atom of a step multiplies the step's first tap (the weight's too)
    monkeypatch.setattr(K, "_k_slice", lambda k, atom, atoms, c_steps, slices, bk:
                        right(k, 0, atoms, c_steps, slices, bk))
    assert _packed_error(*_packed_operands(7))[2] > 0.1


def test_packed_channel_offset_is_caught_by_the_interpreter(monkeypatch):
    _fresh(monkeypatch)
    # BUG: the weight atom read 8 channels (16 bytes, TMA-aligned) past its tap's first
    monkeypatch.setattr(K, "_weight_coords",
                        lambda g, n0, tap, c0, cgp: (g, n0, tap * cgp + c0 + 8))
    assert _packed_error(*_packed_operands(7))[2] > 0.1


def _tail_case(seed=8):
    """3-d, 27 taps, 4 a step: the last step's slice 27 is past the last tap; unmasked it is
    depth tap 3, one past the filter (an input plane outside the receptive field). An inf in
    plane 4 reaches output planes 2 and 3; read by tap 3 also plane 1."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(1, 8, 6, 5, 5, generator=g).bfloat16()
    w = torch.randn(8, 8, 3, 3, 3, generator=g).bfloat16()
    x[0, :, 4, 2, 2] = float("inf")
    y = conv_op.convolve(x, w, None, 1, 0, 1, 1, schedule=ConvSchedule(**PACKED))
    return torch.isfinite(y), torch.isfinite(F.conv3d(x.double(), w.double()))


def test_packed_tail_masked_keeps_the_receptive_field(monkeypatch):
    _fresh(monkeypatch)
    got, want = _tail_case()
    assert torch.equal(got, want)


def test_packed_tail_not_masked_is_caught_by_the_interpreter(monkeypatch):
    _fresh(monkeypatch)
    right = K._k_slice

    def unmasked(k, atom, atoms, c_steps, slices, bk):   # BUG: past the last tap not zeroed
        tap, c0, _ = right(k, atom, atoms, c_steps, slices, bk)
        return tap, c0, 0

    monkeypatch.setattr(K, "_k_slice", unmasked)
    got, want = _tail_case()
    assert not torch.equal(got, want) and want[0, :, 1].all()   # plane 1 reached only by tap 3


def _segments_mutated(monkeypatch, bug):
    """The rowbox TMA-store epilogue (8 row segments of 8 rows per warpgroup) with one
    segment's ag.tma.store seeded with `bug`: 'drop' skips the last segment (the loop one
    short), 'double' stores segment 3 at segment 2's rows (segment 3's rows never stored)."""
    real, seen = ag.tma.store, []

    def store(dst, coords, view, *args, **kw):
        j = len(seen) % 8                     # the segment: 8 stores per column block
        seen.append(coords)
        if bug == "drop" and j == 7:
            return None                       # BUG: drop
        if bug == "double" and j == 3:
            coords = seen[-2]                 # BUG: double
        return real(dst, coords, view, *args, **kw)   # the seeded store
    monkeypatch.setattr(ag.tma, "store", store)
    kernel = K.conv_kernel.__wrapped__()
    return verify.check(kernel, geom=GEOM_ROWBOX, s=ROWBOX_SCHEDULES[1])


def _seeded_line():
    from pathlib import Path
    lines = Path(__file__).read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.endswith("# the seeded store"))


def test_a_dropped_row_segment_is_a_store_coverage_error(monkeypatch):
    """The last row segment never stored: store.coverage is an error naming the segment
    (the store site index inside the tile), the warpgroup, role and thread, at the seeded
    store's line; before the segments were joined it was unknown ('8 store sites')."""
    found = _segments_mutated(monkeypatch, "drop")
    bad = [d for d in found if d.code == "store.coverage" and d.severity == "error"]
    assert bad, [f"{d.severity} {d.code}: {d.message[:160]}" for d in found]
    text = str(bad[0])
    assert "role 'consumer'" in text and "warpgroup" in text and "thread" in text, text
    assert str(bad[0].loc).endswith(f"test_conv_mutations.py:{_seeded_line()}"), bad[0].loc
    wit = bad[0].counterexample
    assert wit["offset"] >= wit["tile"] and any(v == 6 for k, v in wit["within"].items()
                                                 if k.startswith("store_site")), wit


def test_a_double_stored_row_segment_is_an_error(monkeypatch):
    """Segment 3 stored at segment 2's rows: store.once is an error naming the element and
    who stores it twice, at the seeded store's line. (Coverage of translates with a gap, rows
    of segment 3 missing, stays unknown: a gap may be another unit's rows.)"""
    found = _segments_mutated(monkeypatch, "double")
    once = [d for d in found if d.code == "store.once" and d.severity == "error"]
    assert once and "stored twice" in once[0].message, \
        [f"{d.severity} {d.code}: {d.message[:160]}" for d in found]
    assert str(once[0].loc).endswith(f"test_conv_mutations.py:{_seeded_line()}"), once[0].loc
    wit = once[0].counterexample
    assert wit["role"] == "consumer" and "warpgroup" in wit and "thread" in wit, wit


# ------------------------------------------------------------------ the receptive field, proven

GEOM_PAD = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
GEOM_STRIDE = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
PACKED_GEOM = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=16)


def _errors(found, code):
    bad = [d for d in found if d.code == code and d.severity == "error"]
    assert bad, [f"{d.severity} {d.code}: {d.message[:160]}" for d in found]
    return bad


def _names_thread_and_line(d, line_of):
    """The finding names who (role, warpgroup, thread) and where (a conv.py or the main
    loop's line, and the copy that loaded the element)."""
    w = d.counterexample
    assert w.get("role") == "consumer" and "warpgroup" in w and "thread" in w, w
    assert line_of in str(d.loc), d.loc
    assert "conv.py:" in str(w.get("loaded_at", "")) or "conv.py:" in d.message, str(d)[:400]


def test_wrong_padding_rows_are_a_receptive_field_error(monkeypatch):
    # BUG: rows outside [0, H) are not pushed past the tensor: the neighbouring image's rows
    monkeypatch.setattr(K, "_row", lambda image, h, H, NH, push, outside_depth=0:
                        image * H + h)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_PAD, s=SCHEDULE)
    bad = _errors(found, "tag.assert")
    assert all("receptive field" in str(d) for d in bad), [str(d)[-300:] for d in bad]
    _names_thread_and_line(bad[0], "conv.py:")
    tags = bad[0].counterexample["tags"][0]
    # the witness: a tap whose input row lies outside the image, read inside the tensor
    assert 0 <= tags["nh"] < bad[0].counterexample["shapes"]["NH"], tags


def test_wrong_stride_is_a_receptive_field_error(monkeypatch):
    right = K._input_coords

    def no_stride_h(geom, *args):   # BUG: stride_h ignored
        return right(dataclasses.replace(geom, stride_h=1), *args)
    monkeypatch.setattr(K, "_input_coords", no_stride_h)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_STRIDE, s=SCHEDULE)
    bad = _errors(found, "tag.assert")
    assert all("receptive field" in str(d) for d in bad), [str(d)[-300:] for d in bad]
    _names_thread_and_line(bad[0], "conv.py:")


# the strided rowbox (ConvSchedule.rowbox at stride 2: one box read with element strides)
GEOM_ROWBOX_S2 = ConvGeometry(3, 3, 2, 2, 1, 1, 1, 1, groups=1, cg_padded=64)
ROWBOX_S2 = ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)


@pytest.mark.parametrize("bug", ["strides_dropped", "start_not_strided"])
def test_strided_rowbox_wrong_box_is_a_receptive_field_error(monkeypatch, bug):
    """The strided rowbox box without its element strides (consecutive input pixels: the
    copy tags still say every second one), or started at p0 + r - pad instead of p0 * stride
    + r - pad (the strides right, the first row and column not): the receptive-field
    assertion, which states the index map apart from the producer (a.oh * stride_h + ..),
    finds the element read for the wrong pixel."""
    if bug == "strides_dropped":
        monkeypatch.setattr(K, "_rowbox_strides", lambda geom: None)
    else:
        monkeypatch.setattr(K, "_times", lambda a, stride: a)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_ROWBOX_S2, s=ROWBOX_S2)
    bad = _errors(found, "tag.assert")
    assert all("receptive field" in str(d) for d in bad), [str(d)[-300:] for d in bad]
    _names_thread_and_line(bad[0], "conv.py:")


@pytest.mark.parametrize("bug", ["strides_dropped", "start_not_strided"])
def test_strided_rowbox_wrong_box_is_caught_by_the_interpreter(monkeypatch, bug):
    _fresh(monkeypatch)
    if bug == "strides_dropped":
        monkeypatch.setattr(K, "_rowbox_strides", lambda geom: None)
    else:
        monkeypatch.setattr(K, "_times", lambda a, stride: a)
    g = torch.Generator().manual_seed(11)
    x = torch.randn(2, 8, 9, 10, generator=g).bfloat16()
    w = torch.randn(8, 8, 3, 3, generator=g).bfloat16()
    y = conv_op.conv2d_interpret(x, w, None, 2, 1, 1, 1, schedule=ROWBOX_S2)
    ref = F.conv2d(x.double(), w.double(), None, 2, 1)
    assert (y.double() - ref).abs().max().item() / ref.abs().max().item() > 0.05


def test_packed_tap_twice_is_a_k_once_error(monkeypatch):
    right = K._k_slice
    # BUG: every atom of a step multiplies the step's first tap (the weight's too)
    monkeypatch.setattr(K, "_k_slice", lambda k, atom, atoms, c_steps, slices, bk:
                        right(k, 0, atoms, c_steps, slices, bk))
    found = verify.check(K.conv_kernel.__wrapped__(), geom=PACKED_GEOM,
                         s=ConvSchedule(**PACKED))
    bad = _errors(found, "wgmma.k-once")
    assert any("kin" in d.message and "multiplied twice" in d.message for d in bad), \
        [d.message[:300] for d in bad]
    w = bad[0].counterexample
    assert w.get("role") == "consumer" and "thread" in w, w


def test_packed_channel_offset_is_an_agree_error(monkeypatch):
    # BUG: the weight atom read 8 channels past its tap's first
    monkeypatch.setattr(K, "_weight_coords",
                        lambda g, n0, tap, c0, cgp: (g, n0, tap * cgp + c0 + 8))
    found = verify.check(K.conv_kernel.__wrapped__(), geom=PACKED_GEOM,
                         s=ConvSchedule(**PACKED))
    bad = _errors(found, "wgmma.agree")
    assert any("A.kin == B.kin" in d.message for d in bad), [d.message[:300] for d in bad]
    assert "thread" in bad[0].message and "conv.py:" in bad[0].message, bad[0].message


def test_packed_tail_not_masked_is_a_receptive_field_error(monkeypatch):
    """2-d, 9 taps, 4 a step: slices 9..11 of the last step lie past the filter; unmasked
    they read tap 9's rows (r = 3) inside the image instead of zeros."""
    right = K._k_slice

    def unmasked(k, atom, atoms, c_steps, slices, bk):   # BUG: past the last tap not zeroed
        tap, c0, _ = right(k, atom, atoms, c_steps, slices, bk)
        return tap, c0, 0

    monkeypatch.setattr(K, "_k_slice", unmasked)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=PACKED_GEOM,
                         s=ConvSchedule(**PACKED))
    bad = _errors(found, "tag.assert")
    assert any(t["tap"] >= 9 for d in bad for t in d.counterexample["tags"]), \
        [d.counterexample.get("tags") for d in bad]


@pytest.mark.parametrize("name,geom,schedule", [
    ("direct_strided_grouped", GEOM, SCHEDULE),
    ("rowbox", GEOM_ROWBOX, ROWBOX_SCHEDULES[0]),
    ("packed", PACKED_GEOM, ConvSchedule(**PACKED)),
    ("packed_rowbox", PACKED_GEOM, ConvSchedule(**PACKED, rowbox=True))])
def test_the_receptive_field_is_proven(name, geom, schedule):
    """The unmutated kernels: the tap-aware agree, k-once over (tap, channel) and the
    receptive-field assertion are proven (notes), nothing left unknown."""
    found = verify.check(K.conv_kernel(), include_proven=True, geom=geom, s=schedule)
    assert not [d for d in found if d.severity != "note"], \
        [str(d)[:300] for d in found if d.severity != "note"]
    assert any(d.code == "wgmma.agree" and "A.kin == B.kin" in d.message for d in found)
    # kin is the conv's one field that varies with the wgmma's k (k-once had none before:
    # A's channel and B's K column were different fields), so these notes are kin's
    once = {part for d in found if d.code == "wgmma.k-once"
            for part in ("injective", "covers [0, K)") if part in d.message}
    assert once == {"injective", "covers [0, K)"}, [d.message for d in found
                                                    if d.code == "wgmma.k-once"]
    assert any(d.code == "tag.assert" and "receptive field" in str(d) for d in found)


# ------------------------------------ narrow per-row boxes and the halo (one assertion a box)

NARROW = ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma")
HALO = ConvSchedule(bm=128, bn=64, bw=64, stages=2, halo=True, num_sms=2)


@pytest.mark.parametrize("name,geom,schedule", [
    ("tma_bw8_strided_grouped", GEOM, NARROW),
    ("tma_bw16_cluster", GEOM_PAD, ConvSchedule(bm=128, bn=64, bw=16, stages=2,
                                                epilogue="tma", cluster_m=2, num_sms=4)),
    ("halo_direct", GEOM_HALO, HALO)])
def test_narrow_and_halo_receptive_field_is_proven(monkeypatch, name, geom, schedule):
    """Narrow per-row boxes (bw < bm / consumers: one assertion per box of a warpgroup's
    rows; bw 8 is off by default for time, K.NARROW_CHECK_MIN_BW, and on here) and the halo
    (one per filter row) are proven, nothing left unknown."""
    monkeypatch.setattr(K, "NARROW_CHECK_MIN_BW", 8)
    found = verify.check(K.conv_kernel.__wrapped__(), include_proven=True, geom=geom,
                         s=schedule)
    assert not [d for d in found if d.severity != "note"], \
        [str(d)[:300] for d in found if d.severity != "note"]
    assert any(d.code == "tag.assert" and "receptive field" in str(d) for d in found)
    # one assertion per box (bw 8: 8 of a warpgroup's 64 rows) or per filter row (halo: R)
    lowered = lower_only(K.conv_kernel.__wrapped__(), geom=geom, s=schedule)
    obs, finds = check_asserts.obligations(Model(lowered))
    assert not finds and len(obs) == {"tma_bw8_strided_grouped": 8, "tma_bw16_cluster": 4,
                                      "halo_direct": 3}[name], (len(obs), finds)


def test_narrow_box_row_off_by_one_is_a_receptive_field_error(monkeypatch):
    right = K._input_coords

    def one_row_down(*args):   # BUG: each narrow box loads the input row below its own
        at = right(*args)
        return K._BoxCoords((at[0] + 1,) + tuple(at[1:]), at.image, at.p)
    monkeypatch.setattr(K, "_input_coords", one_row_down)
    monkeypatch.setattr(K, "NARROW_CHECK_MIN_BW", 8)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM, s=NARROW)
    bad = _errors(found, "tag.assert")
    assert all("receptive field" in str(d) for d in bad), [str(d)[-300:] for d in bad]
    _names_thread_and_line(bad[0], "conv.py:")
    assert bad[0].counterexample["tags"], bad[0].counterexample


def test_halo_row_off_by_one_is_a_receptive_field_error(monkeypatch):
    right = K._row
    # BUG: halo row i loads input row p0 + i - pad_h + 1 (the halo one row low)
    monkeypatch.setattr(K, "_row", lambda image, h, H, NH, push, outside_depth=0:
                        right(image, h + 1, H, NH, push, outside_depth))
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_HALO, s=HALO)
    bad = _errors(found, "tag.assert")
    assert all("receptive field (halo" in str(d) for d in bad), [str(d)[-300:] for d in bad]
    _names_thread_and_line(bad[0], "conv.py:")


def test_halo_filter_row_offset_off_by_one_is_a_receptive_field_error(monkeypatch):
    """The consumer's side: filter row r multiplying the halo from row r * dil_h + 1 (the
    accumulator's output row against the next row's input) is caught by the assertion's
    `hrow` claim, which states where output row o's rows lie for filter row r."""
    right = K._HaloRing.mma

    def shifted(self, k_steps, wg, check=None):   # BUG: the halo read one row low
        return right(dataclasses.replace(self, dil_h=self.dil_h + 1), k_steps, wg,
                     (lambda view, r, j: check(view, r, j)) if check else None)
    monkeypatch.setattr(K._HaloRing, "mma", shifted)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM_HALO, s=HALO)
    bad = _errors(found, "tag.assert")
    assert any("receptive field (halo" in str(d) for d in bad), [str(d)[-300:] for d in bad]
