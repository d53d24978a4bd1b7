"""Ping-pong consumers for the implicit-GEMM convolution (ConvSchedule.pingpong, issue 17):
the two consumer warpgroups each own whole tiles (bm 64 or 128 rows: bm / 64 accumulators of
64 rows) and take the CTA's units in turns (TileScheduler.turns, ag.ordered("mma"),
pipe.skip for the other's unit), the GEMM's ping-pong (argus/kernels/gemm.py), so one's
epilogue (bias, activation, direct or TMA stores of its output row segments) overlaps the
other's K loop. Checked here: the numpy interpreter against torch float64 F.conv2d
(channels-last and NCHW results, rowbox and per-row boxes, bm 64 / 128, bn 64 / 128, the
direct and the TMA-store epilogue, odd tile counts so that the last turn is warpgroup 0's
alone), the verifier (zero findings, coverage and store.once proven), the schedule's
refusals, and NVRTC builds for sm_90a without spills, among them the schedules
scripts/gpu_conv_bench.py --unet --variants pingpong,pingpong-tma times."""

import dataclasses
import zlib

import pytest
import torch
import torch.nn.functional as F

from argus import verify
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.ops import conv as conv_op
from tests.interp.test_conv_interp import ALLOWED_UNKNOWN
from tests.unit.test_conv_bench_unet import _bench   # scripts/gpu_conv_bench.py loaded

# rowbox tiles (bm / bw output rows of one image); few SMs, so each CTA walks several units
# and both warpgroups take turns; num_sms 3 with the cases' tile counts leaves CTAs with odd
# walks (warpgroup 0 takes one more unit than warpgroup 1)
PP = ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, pingpong=True, num_sms=2)
PP_BN128 = dataclasses.replace(PP, bn=128, num_sms=3)
PP_BM64 = dataclasses.replace(PP, bm=64, stages=3, num_sms=3)
PP_TMA = ConvSchedule(bm=128, bn=64, bw=16, stages=2, rowbox=True, pingpong=True,
                      epilogue="tma", num_sms=3)
PP_TMA_BM64 = ConvSchedule(bm=64, bn=128, bw=8, stages=2, rowbox=True, pingpong=True,
                           epilogue="tma", num_sms=2)
PP_TMA_ORDERED = dataclasses.replace(PP_TMA, ordered_epilogue=True)
PP_PER_ROW = dataclasses.replace(PP, rowbox=False, num_sms=3)     # per-row boxes
SCHEDULES = [PP, PP_BN128, PP_BM64, PP_TMA, PP_TMA_BM64, PP_TMA_ORDERED, PP_PER_ROW]
IDS = ["direct", "direct_bn128", "direct_bm64", "tma_bw16", "tma_bm64_bn128_bw8",
       "tma_ordered_epilogue", "per_row_boxes"]

# (N, C, H, W, K, R, S, stride, padding, dilation)
CASES = [
    (2, 16, 7, 9, 24, 3, 3, 1, 1, 1),        # two images, odd sizes
    (3, 8, 5, 5, 16, 3, 3, 1, 1, 1),         # P = 5: a row block half past P; 9 tiles at bm 128
    (1, 72, 6, 7, 40, 1, 1, 1, 0, 1),        # 1x1, C past one 64-channel slice
    (2, 16, 11, 12, 136, 3, 3, 1, 1, 1),     # K past bn 128: two column tiles
    (1, 8, 12, 12, 8, 3, 3, 1, (0, 1), (1, 2)),   # no row padding, dil_w 2
]


def _ids(c):
    return "x".join(map(str, c))


def _run(case, schedule, *, bias=False, activation="none", channels_last=True, dtype=None):
    N, C, H, W, K, R, S, stride, padding, dilation = case
    # (crc32, not hash(): str hashes are salted per process, so the data would differ per run)
    g = torch.Generator().manual_seed(zlib.crc32(repr(case).encode()))
    dtype = dtype or torch.bfloat16
    x = torch.randn(N, C, H, W, generator=g).to(dtype)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    w = torch.randn(K, C, R, S, generator=g).to(dtype)
    b = torch.randn(K, generator=g).to(dtype) if bias else None
    y = conv_op.conv2d_interpret(x, w, b, stride, padding, dilation, 1, activation=activation,
                                 schedule=schedule)
    ref = F.conv2d(x.double(), w.double(), None if b is None else b.double(), stride, padding,
                   dilation)
    ref = {"none": lambda t: t, "relu": torch.relu, "sigmoid": torch.sigmoid,
           "tanh": torch.tanh,
           "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[activation](ref)
    assert y.shape == ref.shape
    err = (y.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    # 16-bit output rounding of fp32 sums of exact products
    assert err <= 1e-2 * scale + 1e-6, f"max error {err} vs scale {scale}"
    return y


@pytest.mark.parametrize("case", CASES, ids=_ids)
@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
def test_pingpong_matches_float64(case, schedule):
    _run(case, schedule)


@pytest.mark.parametrize("schedule", SCHEDULES, ids=IDS)
@pytest.mark.parametrize("activation", ["relu", "gelu_tanh"])
def test_pingpong_bias_and_activation(schedule, activation):
    _run((2, 24, 9, 10, 72, 3, 3, 1, 1, 1), schedule, bias=True, activation=activation)


@pytest.mark.parametrize("schedule", [PP, PP_BM64, PP_PER_ROW],
                         ids=["direct", "direct_bm64", "per_row_boxes"])
def test_pingpong_nchw_result(schedule):
    """An NCHW-contiguous input: the result is written channels-first from registers
    (conv_kernel(nchw=True)), each 64-row accumulator one output row segment."""
    y = _run(CASES[0], schedule, bias=True, activation="relu", channels_last=False)
    assert y.is_contiguous()


def test_pingpong_fp16():
    _run(CASES[1], PP_TMA, dtype=torch.float16, bias=True)


def test_odd_tile_counts_leave_warpgroup_0_the_last_turn():
    """The cases' walks: at bm 128 / bw 64 (2 output rows a tile) case 1's 3 images of 5 rows
    are 3 x 3 = 9 tiles over 2 CTAs (5 and 4 units: the first CTA's last unit is warpgroup
    0's, with no turn of warpgroup 1 after it); the interpreter still matches float64."""
    N, C, H, W, K, R, S, stride, padding, dilation = CASES[1]
    P, rows = (H + 2 * padding - dilation * (R - 1) - 1) // stride + 1, PP.bm // PP.bw
    tiles = N * -(-P // rows)
    assert tiles == 9 and tiles % 2 == 1
    assert -(-tiles // PP.num_sms) % 2 == 1


# ------------------------------------------------------------------ verifier

GEOM_ROWBOX = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
# per-row boxes: a stride, dilation along W and groups (their proofs: wgmma.agree on grp)
GEOM_2D = ConvGeometry(3, 3, 2, 1, 1, 1, 1, 2, groups=2, cg_padded=64)


@pytest.mark.parametrize("schedule,geom,kw", [
    (PP, GEOM_ROWBOX, dict(bias=True, activation="relu")),
    (PP_BN128, GEOM_ROWBOX, {}),
    (PP_BM64, GEOM_ROWBOX, {}),
    (PP_TMA, GEOM_ROWBOX, dict(bias=True)),
    (PP_TMA_BM64, GEOM_ROWBOX, {}),
    (PP_TMA_ORDERED, GEOM_ROWBOX, {}),
    (PP_PER_ROW, GEOM_2D, {}),
    (PP, GEOM_ROWBOX, dict(nchw=True)),
], ids=["direct_bias_relu", "direct_bn128", "direct_bm64", "tma_bw16_bias", "tma_bm64_bw8",
        "tma_ordered_epilogue", "per_row_boxes_grouped_strided", "nchw"])
def test_pingpong_verifies_with_zero_findings(schedule, geom, kw):
    found = verify.check(conv_kernel(**kw), include_proven=True, timeout_ms=20000, geom=geom,
                         s=schedule)
    bad = [d for d in found if d.severity == "error" or
           (d.severity == "unknown" and d.code not in ALLOWED_UNKNOWN)]
    assert bad == [], [str(d) for d in bad]
    codes = ["store.coverage", "ordered.turns", "pipe.totals", "wgmma.k-once"] + \
        (["store.once"] if schedule.rowbox else [])
    for code in codes:
        got = [d for d in found if d.code == code]
        assert got and all(d.severity == "note" for d in got), (code, [str(d) for d in got])
    # the receptive field is asserted on each 64-row A view of the ping-pong main loop
    assert any(d.code == "tag.assert" and d.severity == "note" for d in found)


# ------------------------------------------------------------------ schedule checks

@pytest.mark.parametrize("fields,match", [
    (dict(bw=16), "bw=16 must be 64"),                       # direct: one segment a block
    (dict(bw=128, epilogue="tma"), "bw <= 64"),
    (dict(halo=True, rowbox=False), "halo=False, promote=False"),
    (dict(promote=True), "halo=False, promote=False"),
    (dict(ctas_per_sm=2, consumer_regs=80, producer_regs=40), "ctas_per_sm=1"),
    (dict(cluster_m=2), "without clusters"),
    (dict(bm=192), "64 or 128 rows"),
    (dict(consumers=1, bm=64), "2 consumer warpgroups"),
])
def test_pingpong_refusals(fields, match):
    with pytest.raises(ValueError, match=match):
        dataclasses.replace(PP, **fields)


def test_pingpong_bm128_bn128_is_taken():
    s = dataclasses.replace(PP, bn=128)
    assert s.pingpong and s.bm == 128 and s.bn == 128


# ------------------------------------------------------------------ NVRTC

def _bench_schedules():
    """The ping-pong rows of gpu_conv_bench --unet --variants for the UNet 3x3 layers on
    64^2 images and larger (schedule_for's rowbox without the cluster, as `variants` builds
    them), with the layer's geometry."""
    bench = _bench()
    out = []
    for name, N, C, H, W, K, R, S, st, pad in bench.UNET:
        if H < 64 or C < 64:
            continue
        x = torch.empty(N, C, H, W, dtype=torch.bfloat16, device="meta") \
            .to(memory_format=torch.channels_last)
        w = torch.empty(K, C, R, S, dtype=torch.bfloat16, device="meta")
        one = dataclasses.replace(conv_op.schedule_for(x, w, st, pad, 1, 1, rowbox=True),
                                  cluster_m=1)
        step = (128 + one.bn) * one.bk * one.taps_per_slice * 2
        geom = ConvGeometry(R, S, st, st, pad, pad, cg_padded=C)
        for epilogue in bench.PINGPONG_EPILOGUES.values():    # the bench's ping-pong rows
            out.append((f"{name} {epilogue}", bench._pingpong(one, step, epilogue), geom))
    return out


def test_bench_rows_are_pingpong_schedules():
    rows = _bench_schedules()
    assert len(rows) == 2 * 8
    for name, s, _ in rows:
        assert s.pingpong and s.rowbox and s.bm == 128 and s.bw == 64, (name, s)
        assert s.stages >= 2, (name, s)
    # one row of each epilogue a layer: schedule_for's own is the TMA-store one for these
    # channels-last layers (stop 50), so an unnamed epilogue timed the same kernel twice
    assert [s.epilogue for _, s, _ in rows] == ["direct", "tma"] * 8
    bench = _bench()
    assert set(bench.PINGPONG_EPILOGUES) <= set(bench.VARIANTS)


@pytest.mark.parametrize("bn,epilogue", [(64, None), (128, None), (64, "tma"), (128, "tma")])
def test_nvrtc_builds_pingpong_without_spills(bn, epilogue):
    """sm_90a builds of the bench's ping-pong schedules (bn 64 for the 64-channel layers, 128
    for the wider ones; the direct and the TMA-store epilogue) and bm 64, no spills."""
    from argus.compiler import compile_kernel
    from argus.runtime.toolkit import nvrtc_available

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    rows = {(s.bn, s.epilogue): (s, geom) for _, s, geom in _bench_schedules()}
    s, geom = rows[(bn, epilogue or "direct")]
    for sched in (s, dataclasses.replace(s, bm=64)):
        res = compile_kernel(conv_kernel(bias=True, activation="relu"), verify=False,
                             geom=geom, s=sched).resources
        assert res.spill_stores == 0 and res.spill_loads == 0, (sched, res)


@pytest.mark.parametrize("bn,epilogue", [(64, None), (128, None), (64, "tma"), (128, "tma")])
def test_bench_schedules_match_float64_on_small_layers(bn, epilogue):
    """The bench's ping-pong rows (the full persistent grid: fewer units than CTAs, so most
    CTAs' warpgroup 1 only skips) on a small 3x3 layer of as many output channels."""
    rows = {(s.bn, s.epilogue): s for _, s, _ in _bench_schedules()}
    _run((2, 24, 9, 70, bn + 8, 3, 3, 1, 1, 1), rows[(bn, epilogue or "direct")], bias=True,
         activation="relu")
