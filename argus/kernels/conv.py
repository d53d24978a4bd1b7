"""Convolution as an implicit GEMM on Hopper's tensor cores: out = conv(x, w) with fp32
accumulation, channels-last activations, read by TMA straight from the input (no im2col buffer).

The GEMM: M = output pixels (N * P * Q), N = output channels per group, K = R * S * C per group,
ordered (r, s, c) so each K slice of BK channels is one contiguous run of an input pixel. A tile
of the output is `bm / bw` output rows (flattened over batch and height) times `bw` consecutive
output columns, times `bn` output channels; groups are the batch coordinate of the tile
scheduler, so a group only ever multiplies its own channels (the weight tensor and the input's
group axis are both indexed by it).

The producer gathers the im2col tile with one TMA box per output row of the tile: the box is bw
input pixels x BK channels at input row h = p * stride_h + r * dil_h - pad_h and first input
column w = q0 * stride_w + s * dil_w - pad_w. Padding is free: TMA zero-fills whatever lies
outside the tensor, so

  * a column outside [0, W) is outside the tensor (negative, or past the end);
  * a row outside [0, H) would be another image's row in the flattened [N * H] axis, so the
    coordinate is pushed past N * H (`_row`), a box wholly outside the tensor: zeros;
  * stride along W: the input is viewed as [N * H, stride_w * G, W / stride_w, Cg]: pixel
    w = stride_w * v + phase lives at (phase * G + g, v), so the bw pixels q0.., each
    stride_w apart, are consecutive in the v axis (argus.ops.conv builds the view, copying
    only when W is not a multiple of stride_w);
  * channels not a multiple of BK: the box hangs over the Cg axis and reads zeros (the weight
    tensor likewise), so a K slice never mixes two (r, s) taps or two groups.

Packed taps (ConvSchedule.taps_per_slice > 1, for few channels): a pipeline step holds
several consecutive K slices, each one tap's bk channels in its own swizzled atom (32, 64 or
128-byte rows) with its own wgmma, so a step of a C = 8 layer multiplies 4 taps instead of one
mostly-zero slice; the slices past the last tap read zeros (docs/perf/conv.md "Packed taps").

The weights are [G, Kg, R * S * Cgp] (K-major; each tap's Cg channels zero-padded to Cgp, a
multiple of BK, so a K slice never straddles two taps); the output is stored from registers into
a [G, N * P, Q, Kg] view of the channels-last [N, P, Q, G * Kg] result, so every bw-row block of
the accumulator is one output row segment, masked at Q and at N * P; or (conv_kernel(nchw=True))
transposed into a [G, N, OD * P, Kg, Q] view of the NC(D)HW-contiguous result, each channel's
pixels contiguous, so an NCHW caller needs no transpose pass. ConvGeometry.out_blocks > 1:
the batch coordinate is an output channel block (Wt, Bias and Out [G * blocks, ..]) reading
group g // blocks's input, so a caller's Out view may place each block apart (argus.ops.conv's
depth-to-space result of a kernel == stride transposed convolution). The epilogue hook adds a
per-channel bias (in the output dtype, so the op reads the caller's bias in place) and applies
an activation before the conversion.

Rowbox (ConvSchedule.rowbox): one 4-d box of the [N, H, W, C] input per K step for the
whole A tile (a tile's rows are output rows of one image); strided layers read it with the
tensor map's element strides (ag.tma.load(elem_strides=)), so the box's (i, j) element is the
input pixel of output pixel (p0 + i, q0 + j) at the step's tap.

Ping-pong (ConvSchedule(pingpong=True), the GEMM's: argus/kernels/gemm.py): the two consumer
warpgroups each own whole tiles of bm = 64 or 128 rows (bm / 64 accumulators of 64 rows,
OperandRing.mma_tile) and take the CTA's units in turns (TileScheduler.turns, the main loop
an ag.ordered("mma") section, pipe.skip over the other's unit, a ring of one release a
slot), so one warpgroup's epilogue overlaps the other's K loop, where the cooperative
kernel's two warpgroups both store while the tensor cores idle: the UNet layers' K loops are
9-36 steps. Each accumulator is stored as the cooperative kernel stores a warpgroup's rows
(`store_block`: one output row segment direct, bw = 64, or 64 / bw TMA-stored segments,
each accumulator its own staging slot). The plain ring's producers only (per-row boxes,
rowbox, packed taps; channels-last or NCHW results from registers); not the halo's ring,
promote or two CTAs an SM (ConvSchedule._pingpong_problems).

Built from the warp-specialized skeleton (argus/kernels/warp_specialized.py): TileScheduler,
OperandRing (the ring and the wgmma main loop); this file adds the im2col producer and the
output-row epilogue.
"""


import contextlib
import functools
from dataclasses import dataclass

import argus as ag
from argus.dtypes import DType
from argus.kernels.gemm_fp8 import PROMOTE_MAX_BN, promoted_mma
from argus.kernels.warp_specialized import (OperandRing, Staging, TileScheduler,
                                            WarpSpecializedSchedule, occupancy_problems)
from argus.target.limits import entry_registers

__all__ = ["ACTIVATIONS", "NCHW_EPILOGUES", "ConvGeometry", "ConvSchedule", "NchwStaging",
           "conv_kernel"]

ACTIVATIONS = ("none", "relu", "gelu_tanh", "sigmoid", "tanh")
# Registers past a consumer warpgroup's fp32 accumulator that ptxas needs to compile its
# wgmma when the whole kernel is held to the count a thread enters with (ctas_per_sm > 1:
# __launch_bounds__(threads, 2), whatever setmaxnreg hands the consumers later). NVRTC 13.0,
# sm_90a, conv_kernel: every refusal asked for "a register target of" accumulator + 26
# (bn 128 / 112 in two consumers at 80: 90 / 82; bn 208 / 256 in one at 128: 130 / 154), and
# accumulator + 26 <= entry built without spills (bn 96 at 80, bn 192 / 200 at 128);
# docs/perf/conv.md "Two CTAs an SM: the accumulator against the entry registers"
WGMMA_ENTRY_MARGIN = 26
# how conv_kernel(nchw=True) writes its result (ConvSchedule.nchw_epilogue)
NCHW_EPILOGUES = ("registers", "tma", "staged")


def check_geometry_fields(geom, what: str) -> None:
    """A convolution geometry's fields are ints, paddings >= 0 and every other field (`what`
    names them for the message) >= 1: raises ValueError naming the class and the bad fields."""
    bad = [f"{k}={v}" for k, v in vars(geom).items()
           if not isinstance(v, int) or v < (0 if k.startswith("pad") else 1)]
    if bad:
        raise ValueError(f"{type(geom).__name__}: {', '.join(bad)} ({what} are ints >= 1, "
                         f"paddings ints >= 0)")


@dataclass(frozen=True)
class ConvGeometry:
    """What the problem fixes at compile time: the filter size and the index map of a 2-d
    convolution (output (p, q), tap (r, s) -> input (p * stride_h + r * dil_h - pad_h,
    q * stride_w + s * dil_w - pad_w))."""

    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1
    # input channels per group zero-padded to a multiple of the schedule's bk: the K extent of
    # one tap in the weight operand (a compile-time int keeps the tags linear arithmetic)
    cg_padded: int = 64
    # 3-d: the depth taps and index map (output od, tap dt -> input od * stride_d + dt *
    # dil_d - pad_d); a 2-d convolution is depth 1 with one tap
    t: int = 1
    stride_d: int = 1
    pad_d: int = 0
    dil_d: int = 1
    # output channel blocks per group, each stored through its own slab of Out (its batch
    # coordinate): Wt, Bias and Out are [groups * out_blocks, Kb, ..] and batch index g reads
    # the input of group g // out_blocks. 1: the plain convolution. > 1: a result written
    # depth-to-space (argus.ops.conv's `shuffle`: a 2x2 / 2 transposed convolution as one 1x1
    # convolution whose channel blocks (the output row phases) land in their own output rows;
    # the blocks' strides are the Out view's, data like every other layout)
    out_blocks: int = 1

    def __post_init__(self) -> None:
        check_geometry_fields(self, "sizes, strides and dilations")

    def input_group(self, g):
        """The input group of batch index g (`out_blocks`): g itself for one block a group
        (no expression: the plain kernel's coordinates stay as they were)."""
        return g if self.out_blocks == 1 else g // self.out_blocks

    @property
    def flat(self) -> bool:
        """2-d: one depth tap, no depth stride or padding (the image index is the depth)."""
        return self.t == 1 and self.stride_d == 1 and self.pad_d == 0

    @property
    def w_shift(self) -> int:
        """Whole strides added to every column offset s * dil_w - pad_w so that it is >= 0
        (runtime division and remainder then need no sign care); subtracted again in v."""
        return -(-self.pad_w // self.stride_w)


@dataclass(frozen=True)
class ConvSchedule(WarpSpecializedSchedule):
    """The implicit-GEMM tile: the skeleton's fields (bm output pixels, bn output channels, bk
    input channels per K slice, ring depth, roles) and `bw`, the output columns one TMA box
    covers (bm / bw output rows per tile): pick bw >= Q rounded up to 8 for narrow layers."""

    bm: int = 128
    bn: int = 128
    bw: int = 64
    # each K step's wgmma partial into a fresh accumulator, added into the fp32 main one on the
    # CUDA cores (gemm_fp8's promotion): the tensor core's truncating accumulation then spans
    # one bk-deep slice instead of all of K, which the fp32 split's strict track needs on long K
    # (argus/agent/split_numerics.py: its error grows with the accumulated length)
    promote: bool = False
    # input-row reuse across the filter's rows (stride_h 1, 2-d): a tile's rows are output rows
    # of one image, and a stage holds, for one filter column s and one channel slice, the
    # halo of bm / bw + (R - 1) * dil_h input rows once, plus the R weight tiles of (r, s);
    # filter row r's wgmma reads the halo from row r * dil_h on (a whole number of bw-row
    # boxes, so 1024-byte aligned). A's L2 reads shrink by R * rows / (rows + R - 1).
    halo: bool = False
    # one TMA box per K step for the whole A tile (2-d, stride 1, one group): a tile's rows
    # are output rows of one image, as for `halo`, and X is the [N, H, W, C] input, so the
    # tile's rows x bw columns x bk channels at tap (r, s) are one 4-d box (1, rows, bw, bk)
    # at (n, p0 + r * dil_h - pad_h, q0 + s * dil_w - pad_w, c0): rows outside [0, H) and
    # columns outside [0, W) are zero-filled by the TMA unit along their own dims (padding).
    # The producer issues 2 copies per stage (A, weight) instead of bm / bw + 1, and its
    # coordinates are additions (no per-row division by P in the K loop).
    # Strided layers (stride_h, stride_w in 1..8): the box is read with the tensor map's
    # element strides (1, stride_h, stride_w, 1) from (n, p0 * stride_h + r * dil_h - pad_h,
    # q0 * stride_w + s * dil_w - pad_w, c0): its (i, j) element is input pixel
    # ((p0 + i) * stride_h + .., (q0 + j) * stride_w + ..), exactly the im2col rows of output
    # pixels (p0 + i, q0 + j) at tap (r, s), so one box a K step still covers the A tile
    # (rows * stride_h and bw * stride_w at most 256: the box's traversed extent, boxDim).
    # The default for 16-bit strided layers (argus.ops.conv.schedule_for's strided_rowbox;
    # measured on the H200: docs/perf/conv.md "Strided rowbox, ResNet-50 op table and
    # small-K GEMM tiles, measured").
    rowbox: bool = False
    # how conv_kernel(nchw=True) writes its channels-first result: "registers", the
    # accumulator stored transposed straight from registers (each warp store: 4 channels x 8
    # pixels); "tma", staged transposed in 128-byte swizzled shared memory ([channels][32 f32
    # or 64 16-bit pixels] boxes, ag.store_shared(transposed=True)) and written by TMA stores
    # of NCHW boxes, whose reads of the stage overlap the next tile's main loop (the read-wait
    # is deferred to the next tile's staging write). "tma" needs the NCHW result's channel
    # rows 16-byte aligned (Q * bytes % 16 == 0: a TMA global stride) and bn * bw * bytes of
    # shared memory per consumer warpgroup next to the ring (argus.ops.conv checks both).
    # "staged" (fp32 results): the same stage read back (ag.load_shared(transposed=True)) so
    # that each warp holds 32 consecutive pixels of one channel, and stored transposed: each
    # warp store one contiguous 128-byte run of a channel row whatever the row's alignment
    # (the register store writes 32-byte runs of 4 rows), for results a tensor map cannot
    # address (L1/67, 76, 55: rows 8 bytes off 16). Unused for channels-last results.
    nchw_epilogue: str = "registers"
    # K slices (taps) per pipeline step: each step holds taps_per_slice "atoms", atom j the
    # [bm, bk] A tile and [bn, bk] weight tile of K slice k * taps_per_slice + j in the (tap,
    # channel slice) order of K, each its own wgmma (k_atoms of the ring), so with bk the
    # input channels per group rounded up to one atom (32, 64 or 128 bytes: that swizzle) a
    # step multiplies several taps at once. Why: a layer with few channels per group (Cg <
    # the usual 64-deep bf16 / 32-deep tf32 slice) spends one slice per tap, mostly zeros:
    # KernelBench L2/8 (tf32, Cg 8) multiplied 8 useful of every 32 K; with bk 8 and 4 taps a
    # step it multiplies 4 taps in the same 32-deep step. The K slices past the last tap (taps
    # not a multiple) read zeros: the A boxes are pushed past the tensor and the weight boxes
    # lie past its K extent (TMA zero-fills both). argus.ops.conv.schedule_for picks bk and
    # the ring depth, by default (taps_per_slice="auto", `packed_taps`) only where a tap's
    # channels fill less than a 128-byte step: measured on the H200 (2026-12-05,
    # docs/perf/conv.md "Packed taps"), L2/8 ran faster packed and ResNet c2-c4 (64-256
    # channels, a full step a tap already) slower.
    taps_per_slice: int = 1
    # The occupancy hint (ag.occupancy, as AttentionSchedule.ctas_per_sm): CTAs an SM holds at
    # once. 2 renders __launch_bounds__(threads, 2), so the CTA's warpgroups enter with half
    # the register file (entry_registers: 128 a thread for bm 64, one consumer; producer_regs
    # + consumers x consumer_regs within it) and lowering refuses a ring past
    # smem_per_sm_share(2); the persistent grid is num_sms x ctas_per_sm CTAs. Why: on small
    # images (ResNet-50 c5, 64-pixel tiles: argus.ops.conv.SMALL_IMAGE_RULE) one CTA has one
    # consumer warpgroup, whose wgmma waits no other warpgroup of the SM covers; two CTAs'
    # K loops and epilogues interleave. Opt-in, not measured on a GPU
    # (scripts/gpu_conv_bench.py --rowbox: its "small-image ... 2/SM" rows).
    ctas_per_sm: int = 1

    def _problems(self) -> list[str]:
        problems = super()._problems()
        problems += occupancy_problems(self.ctas_per_sm, self.consumers, self.producer_regs,
                                       self.consumer_regs)
        problems += self._entry_register_problems()
        if self.taps_per_slice < 1:
            problems.append(f"taps_per_slice={self.taps_per_slice} < 1")
        if self.taps_per_slice > 1 and (self.halo or self.promote):
            problems.append(f"taps_per_slice={self.taps_per_slice} packs K slices into one "
                            f"step of the plain ring: halo=False, promote=False")
        if self.nchw_epilogue not in NCHW_EPILOGUES:
            problems.append(f"nchw_epilogue={self.nchw_epilogue!r} is not one of "
                            f"{NCHW_EPILOGUES}")
        if self.halo and self.promote:
            problems.append("halo runs the 16-bit kernel: promote=False")
        if self.halo and self.rowbox:
            problems.append("halo and rowbox are two A producers: pick one")
        if self.promote and self.bn > PROMOTE_MAX_BN:
            problems.append(f"promote keeps two fp32 accumulators per consumer: bn={self.bn} "
                            f"exceeds the register budget (bn <= {PROMOTE_MAX_BN})")
        if self.bw not in (8, 16, 32, 64, 128) or self.bm % self.bw:
            problems.append(f"bw={self.bw}: one box of output columns is 8, 16, 32, 64 or 128 "
                            f"rows of the tile and divides bm={self.bm}")
        if self.pingpong:
            problems += self._pingpong_problems()
        elif self.bw > self.bm // max(self.consumers, 1):
            problems.append(f"bw={self.bw} exceeds a consumer warpgroup's {self.bm} / "
                            f"{self.consumers} rows: its store would split an output row")
        if self.cluster_m > 1 and (self.bn // self.cluster_m) % 8:
            problems.append(f"cluster_m={self.cluster_m}: each CTA of the cluster multicasts "
                            f"bn / {self.cluster_m} of the weight tile's rows, a multiple of "
                            f"8; bn={self.bn}")
        if self.epilogue == "direct" and not self.pingpong and \
                self.bw != self.bm // max(self.consumers, 1):
            problems.append(f"epilogue='direct' stores a warpgroup's {self.bm} / "
                            f"{self.consumers} accumulator rows as one output row segment: "
                            f"bw={self.bw} must equal it (narrower boxes: epilogue='tma')")
        if self.epilogue == "tma" and self.bn % 16:
            problems.append(f"the TMA-store epilogue stages blocks of 64, 32 or 16 columns; "
                            f"bn={self.bn}")
        if self.zero_by_wgmma:
            problems.append("zero_by_wgmma is not wired into the convolution")
        return problems

    def _pingpong_problems(self) -> list[str]:
        """Ping-pong (the skeleton's checks: 2 consumer warpgroups, bm 64 or 128 a
        warpgroup's tile, persistent, no cluster, the accumulator's registers) on the
        convolution: each warpgroup's tile is bm / 64 accumulators of 64 rows, and each is
        stored as output row segments of bw rows (direct: one segment, bw 64; tma: 64 / bw
        of them, bw <= 64). The plain ring's producers only (per-row boxes, rowbox, packed
        taps): the halo's ring and promote's second accumulator are not wired for it, nor
        two CTAs an SM (its entry-register check counts 64-row accumulators)."""
        problems = []
        if self.epilogue == "direct" and self.bw != 64:
            problems.append(f"pingpong with epilogue='direct' stores each 64-row accumulator "
                            f"as one output row segment: bw={self.bw} must be 64 (narrower "
                            f"boxes: epilogue='tma')")
        if self.bw > 64:
            problems.append(f"pingpong stores 64-row accumulators: bw={self.bw} would split "
                            f"an output row (bw <= 64)")
        if self.halo or self.promote:
            problems.append(f"pingpong runs on the plain ring with one accumulator a 64-row "
                            f"block: halo=False, promote=False (got halo={self.halo}, "
                            f"promote={self.promote})")
        if self.ctas_per_sm != 1:
            problems.append(f"pingpong runs one CTA an SM (ctas_per_sm=1): its two warpgroups "
                            f"already overlap one's epilogue with the other's K loop; got "
                            f"ctas_per_sm={self.ctas_per_sm}")
        return problems

    def _entry_register_problems(self) -> list[str]:
        """At ctas_per_sm > 1 ptxas compiles the whole kernel at the registers a thread enters
        with (entry_registers), so a consumer warpgroup's fp32 accumulator (64 rows x bn: bn / 2
        a thread) and WGMMA_ENTRY_MARGIN more must fit that count, not consumer_regs: else
        NVRTC refuses the kernel ("Insufficient registers ... register target of ...") or
        spills. promote's second accumulator costs nothing here: bm 64 at bn 128 and 160
        promoted build in 128 without spills (NVRTC 13.0), and bn 128 promoted in two
        consumers is refused at the same target of 90 as the plain kernel."""
        if self.ctas_per_sm <= 1 or self.consumers < 1 or self.ctas_per_sm not in (1, 2):
            return []   # one CTA: 255 at entry; a bad ctas_per_sm is occupancy_problems'
        threads = 128 * (1 + self.consumers)
        entry = entry_registers(threads, self.ctas_per_sm)
        rows = self.bm // self.consumers
        live = rows * self.bn // 128
        if live + WGMMA_ENTRY_MARGIN <= entry:
            return []
        step = 16 if self.epilogue == "tma" else 8   # the TMA store's column blocks
        fit = (entry - WGMMA_ENTRY_MARGIN) * 128 // rows // step * step
        one = entry_registers(256, self.ctas_per_sm)
        return [f"ctas_per_sm={self.ctas_per_sm}: ptxas compiles the kernel at the {entry} "
                f"registers each of {threads} threads enters with, too few for a consumer "
                f"warpgroup's {rows} x {self.bn} fp32 accumulator ({live} a thread) and the "
                f"{WGMMA_ENTRY_MARGIN} more its wgmma needs (NVRTC refuses it or spills): use "
                f"bn <= {fit} with {self.consumers} consumer warpgroup(s)"
                + (f", or one consumer warpgroup (bm=64, consumers=1: {one} at entry, "
                   f"bn <= {(one - WGMMA_ENTRY_MARGIN) * 2 // step * step})"
                   if self.consumers > 1 else "")
                + ", or ctas_per_sm=1"]


def _outside(i, extent):
    """1 when the index i is outside [0, extent), else 0 (integer min / max, no branch)."""
    return ag.maximum(0, ag.minimum(1, 0 - i)) + ag.maximum(0, ag.minimum(1, i - extent + 1))


def _row(image, h, H, NH, push: int, outside_depth=0):
    """The flattened [N * D * H] coordinate of input row h of image (n, depth) `image`, or one
    wholly past the end (TMA zero-fills the box: padding) when h is outside [0, H) or the
    depth is outside [0, D). image * H + h >= -push, so adding NH + push moves any outside row
    to >= NH."""
    return image * H + h + (_outside(h, H) + outside_depth) * (NH + push)


def _input_coords(geom: ConvGeometry, g, out_row, q0, tap, c0, H, P, NH, D, OD,
                  past=0) -> tuple:
    """The X[N*D*H, sw*G, W/sw, Cg] coordinates of the box for output row `out_row`
    ((n * OD + od) * P + p), columns q0.. and filter tap `tap` ((dt * R + r) * S + s): input
    depth od * stride_d + dt * dil_d - pad_d and row h = p * stride_h + r * dil_h - pad_h
    (either outside its extent: a row past the tensor, zero-filled), input column
    w = (q0 + i) * stride_w + s * dil_w - pad_w = stride_w * v + phase (v may be negative:
    zero-filled). `past` (0 or 1): 1 pushes the row past the tensor whatever the tap (a K
    slice past the last tap of a packed step, ConvSchedule.taps_per_slice: zeros)."""
    taps2d = geom.r * geom.s
    dt, r, t = tap // taps2d, (tap % taps2d) // geom.s, tap % geom.s
    plane, v = _column(geom, g, q0, t)
    p = out_row % P
    h = p * geom.stride_h + r * geom.dil_h - geom.pad_h
    if geom.flat:                                      # 2-d: depth is the image
        image = out_row // P
        return _BoxCoords((_row(image, h, H, NH, geom.pad_h, past), plane, v, c0), image, p)
    image = out_row // P                               # n * OD + od
    od = image % OD
    depth = od * geom.stride_d + dt * geom.dil_d - geom.pad_d
    n = image // OD                                    # (recorded in the order it always was)
    row = _row(n * D + depth, h, H, NH, geom.pad_d * H + geom.pad_h,
               _plus(_outside(depth, D), past))
    return _BoxCoords((row, plane, v, c0), image, p, n, od)


class _BoxCoords(tuple):
    """The X coordinates of an A box (the 4-tuple ag.tma.load takes) and the output pixel
    they are for: `image` (n * OD + od) and `p`, the output row's place in its image, the
    scalars _input_coords divided out of the flattened output row (the box's copy tags name
    them: no second division recorded, so the generated code is the same)."""

    def __new__(cls, coords: tuple, image, p, n=None, od=None):
        box = super().__new__(cls, coords)
        box.image, box.p, box.n, box.od = image, p, n, od
        return box


def _rowbox_strides(geom: ConvGeometry):
    """The rowbox A box's element strides along X [N, H, W, C] (the tensor map's
    elementStrides): (1, stride_h, stride_w, 1), or None (a plain box) at stride 1."""
    if (geom.stride_h, geom.stride_w) == (1, 1):
        return None
    return 1, geom.stride_h, geom.stride_w, 1


def _times(a, stride: int):
    """a * stride, or a itself at stride 1 (no expression: the unstrided rowbox kernel's
    coordinates and tags stay as they were)."""
    return a if stride == 1 else a * stride


def _plus(a, b):
    """a + b, or a itself when b is the int 0 (no expression: the one-atom kernel's
    coordinates stay as they were)."""
    return a if isinstance(b, int) and b == 0 else a + b


def _k_slice(k, atom: int, atoms: int, c_steps: int, slices: int, bk: int) -> tuple:
    """(tap, first channel c0, past) of atom `atom` of pipeline step k: K slice i = k * atoms
    + atom of the (tap, channel slice) order, c_steps slices a tap; past = 1 for a slice at or
    past `slices` (the last step's padding when the taps are not a multiple of `atoms`),
    else 0. One atom a step: i = k, and past is 0 (no expression)."""
    i = k if atoms == 1 else k * atoms + atom
    past = 0 if slices % atoms == 0 else ag.minimum(1, i // slices)
    return i // c_steps, (i % c_steps) * bk, past


def _column(geom: ConvGeometry, g, q0, t) -> tuple:
    """(plane, v) of X[.., sw*G, W/sw, ..] for output columns q0.. and filter column t: input
    column w = (q0 + i) * stride_w + t * dil_w - pad_w = stride_w * v + phase."""
    # column offset t * dil_w - pad_w, shifted to >= 0 by whole strides
    col = t * geom.dil_w + (geom.w_shift * geom.stride_w - geom.pad_w)
    v = q0 - geom.w_shift + col // geom.stride_w
    if geom.stride_w == 1:
        # one phase: the plane is the group, the same term for every tap (so the verifier's
        # record of a stage holding several taps' boxes, ConvSchedule.taps_per_slice, has one
        # grp whatever the box: no k in it, so no reduction index for wgmma.k-once)
        return g, v
    return (col % geom.stride_w) * geom.groups + g, v


def _im2col_tags(geom: ConvGeometry, tap, taps: int, cg_padded: int, **more) -> dict:
    """The copy tags of an A box (ag.tma.load(tags=)): each element's im2col column, the K
    coordinate of the implicit GEMM, kin = tap * cg_padded + c (c its input channel), and
    that coordinate's extent, the weight's K (taps * cg_padded). The weight's kin is its K
    coordinate itself (conv_kernel tags Wt), so wgmma.agree proves A's (tap, channel) is B's
    at every product and wgmma.k-once that each output sums every (tap, channel) once: the
    input channel alone repeats across taps, the pair does not.

    `fr`, `fs`: the tap's filter row and column in the producer's terms ((tap % (R * S)) //
    S, tap % S: the terms of the box's coordinates, which z3 shares). _receptive_field does
    not trust them: it asserts tap == fr * S + fs with 0 <= fs < S, which fixes both (the
    r and s of tap // S, tap % S for a 2-d tap) and leaves the query the coordinates'
    divisions alone, not a second pair of its own."""
    taps2d = geom.r * geom.s
    depth = {} if geom.flat else \
        dict(fd=lambda nh, plane, v, c: ag.sym(tap) // taps2d)
    return dict(kin=lambda nh, plane, v, c: ag.sym(tap) * cg_padded + c,
                kin_extent=lambda nh, plane, v, c: taps * cg_padded,
                tap=lambda nh, plane, v, c: ag.sym(tap),
                fr=lambda nh, plane, v, c: (ag.sym(tap) % taps2d) // geom.s,
                fs=lambda nh, plane, v, c: ag.sym(tap) % geom.s, **depth, **more)


def _row_pixel(box: _BoxCoords, q0) -> dict:
    """Copy tags of a per-row A box (one output row, bw columns along X's v axis): the
    output pixel's image and row (box.image, box.p) and each element's output column
    q0 + (v - v0), v0 the box's first v."""
    depth = {} if box.n is None else \
        dict(n=lambda nh, plane, v, c: ag.sym(box.n),
             od=lambda nh, plane, v, c: ag.sym(box.od))
    return dict(img=lambda nh, plane, v, c: ag.sym(box.image),
                oh=lambda nh, plane, v, c: ag.sym(box.p),
                ocol=lambda nh, plane, v, c: ag.sym(q0) + (v - ag.sym(box[2])), **depth)


def _rowbox_pixel(image, p0, q0, h0, w0, geom: ConvGeometry) -> dict:
    """Copy tags of a rowbox A box ([N, H, W, C] box of the image's rows from h0 and columns
    from w0): the image, each element's output row p0 + (h - h0) and column q0 + (w - w0);
    strided (the box's element strides stride_h, stride_w): p0 + (h - h0) / stride_h and
    q0 + (w - w0) / stride_w (exact: the box reads every stride-th row and column)."""
    def step(delta, stride: int):
        return delta if stride == 1 else delta // stride
    return dict(img=lambda n, h, w, c: ag.sym(image),
                oh=lambda n, h, w, c: ag.sym(p0) + step(h - ag.sym(h0), geom.stride_h),
                ocol=lambda n, h, w, c: ag.sym(q0) + step(w - ag.sym(w0), geom.stride_w))


def _receptive_field(geom: ConvGeometry, X, H, rowbox: bool, D=None, OD=None):
    """check_a of the consumer's main loop (OperandRing.mma): a tag assertion that every A
    element a wgmma multiplies is the input pixel of its output pixel and tap, or zero. The
    output pixel and the tap are the box's copy tags (`img`, `oh`, `ocol`, `tap`), the pixel
    read is the element's coordinates in X, and the index map is the geometry's, written
    here apart from the producer's coordinate code (_input_coords, _row, _column): input row
    h = p * stride_h + r * dil_h - pad_h, column w = q * stride_w + s * dil_w - pad_w.
    Inside the image the element is X's pixel (h, w) (the flattened [N * H] row image * H + h;
    column w at plane phase w % stride_w, v = w // stride_w); outside it (padding), or for a
    tap past the filter (a packed step's tail), the element lies outside the tensor, where TMA
    reads zeros (the tensor map's out-of-bounds fill, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    argus/runtime/tma.py). 3-d: the output image is n * OD + od (the box's copy tags n, od,
    fixed by 0 <= od < OD), the tap (t, r, s) with t the box's fd, input depth d = od *
    stride_d + t * dil_d - pad_d inside [0, D), and X's row (n * D + d) * H + h. check_asserts
    proves it per writer of the element (`_by_writer`: as one claim over both warpgroups'
    boxes the 3-d row equation ran out of budget; docs/verify.md "Conv receptive field:
    3-d")."""
    NH, PG, WV = ag.sym(X.shape[0]), ag.sym(X.shape[1]), ag.sym(X.shape[2])
    taps = geom.t * geom.r * geom.s

    def check(view):
        a = ag.tag(view)
        # the tap's filter row and column: the box's fr, fs, fixed by tap = r * S + s,
        # 0 <= s < S (_im2col_tags: the producer's division terms, not a second pair)
        r, s = a.fr, a.fs
        decomposed = ag.tag_all(a.tap == r * geom.s + s, s >= 0, s < geom.s)
        if rowbox:
            # X [N, H, W, C]: rows and columns are their own dims (zero-filled on their own);
            # strided: the index map's stride (the box's element strides read it)
            h = a.oh * geom.stride_h + (r * geom.dil_h - geom.pad_h)
            w = a.ocol * geom.stride_w + (s * geom.dil_w - geom.pad_w)
            inside = ag.tag_all(h >= 0, h < PG, w >= 0, w < WV)
            read = ag.tag_all(a.nh == a.img, a.pg == h, a.wv == w)
            outside = ag.tag_any(a.nh >= NH, a.pg < 0, a.pg >= PG, a.wv < 0, a.wv >= WV)
        else:
            image = a.img
            h = a.oh * geom.stride_h + (r * geom.dil_h - geom.pad_h)
            w = a.ocol * geom.stride_w + (s * geom.dil_w - geom.pad_w)
            inside = ag.tag_all(h >= 0, h < ag.sym(H), w >= 0, w < WV * geom.stride_w)
            if not geom.flat:
                # 3-d: the output image img = n * OD + od (the box's n, od: fixed by
                # 0 <= od < OD), the depth tap fd (tap = (fd * R + r) * S + s, 0 <= r < R),
                # input depth d = od * stride_d + fd * dil_d - pad_d, plane n * D + d
                d = a.od * geom.stride_d + (a.fd * geom.dil_d - geom.pad_d)
                decomposed = ag.tag_all(a.tap == (a.fd * geom.r + r) * geom.s + s,
                                        s >= 0, s < geom.s, r >= 0, r < geom.r, a.fd >= 0,
                                        a.img == a.n * ag.sym(OD) + a.od, a.od >= 0,
                                        a.od < ag.sym(OD))
                inside = ag.tag_all(inside, d >= 0, d < ag.sym(D))
                image = a.n * ag.sym(D) + d
            read = ag.tag_all(a.nh == image * ag.sym(H) + h, a.wv == w // geom.stride_w,
                              a.pg // geom.groups == w % geom.stride_w)
            outside = ag.tag_any(a.nh < 0, a.nh >= NH, a.wv < 0, a.wv >= WV)
        ag.tag_assert(ag.tag_any(
            ag.tag_all(a.tap < taps, decomposed, inside, read),
            ag.tag_all(a.tap < taps, decomposed, ~inside, outside),
            ag.tag_all(a.tap >= taps, outside)),
            message="receptive field: the A element of output pixel (p, q) and tap (r, s) is "
                    "input pixel (p * stride_h + r * dil_h - pad_h, q * stride_w + s * dil_w - "
                    "pad_w), or, outside the image or past the last tap, a zero read from "
                    "outside the tensor" + ("" if geom.flat else
                                           " (3-d: output depth od and depth tap t, input "
                                           "depth od * stride_d + t * dil_d - pad_d)"))
    return check


def _halo_receptive_field(geom: ConvGeometry, X, H, wg, per_wg: int):
    """check of the halo consumer (_HaloRing.mma): the A rows filter row r multiplies for the
    tile's output row o = wg * per_wg + j are halo row o + r * dil_h (copy tag `hrow`), and
    each element is the input pixel (p0 + o + r * dil_h - pad_h, q * stride_w + s * dil_w -
    pad_w) of output pixel (p0 + o, q) and tap (r, s) (s the box's `fs`), or, outside the
    image, a zero read from outside the tensor. The tap is the consumer's (r, a Python int
    here: one halo row serves the R filter rows), the output row its place in the
    accumulator, so the assertion ties the producer's rows to the consumer's offsets."""
    NH, WV = ag.sym(X.shape[0]), ag.sym(X.shape[2])

    def check(view, r: int, j: int):
        a = ag.tag(view)
        o = ag.sym(wg) * per_wg + j
        h = a.p0 + o + (r * geom.dil_h - geom.pad_h)
        w = a.ocol * geom.stride_w + (a.fs * geom.dil_w - geom.pad_w)
        inside = ag.tag_all(h >= 0, h < ag.sym(H), w >= 0, w < WV * geom.stride_w)
        read = ag.tag_all(a.nh == a.img * ag.sym(H) + h, a.wv == w // geom.stride_w,
                          a.pg // geom.groups == w % geom.stride_w)
        outside = ag.tag_any(a.nh < 0, a.nh >= NH, a.wv < 0, a.wv >= WV)
        ag.tag_assert(ag.tag_all(a.hrow == o + r * geom.dil_h, a.fs >= 0, a.fs < geom.s,
                                 ag.tag_any(ag.tag_all(inside, read),
                                            ag.tag_all(~inside, outside))),
                      message=f"receptive field (halo, filter row {r}): the A element of "
                              f"output pixel (p, q) is halo row p - p0 + {r} * dil_h, input "
                              f"pixel (p + {r} * dil_h - pad_h, q * stride_w + s * dil_w - "
                              f"pad_w), or outside the image a zero read from outside the "
                              f"tensor")
    return check


# The narrowest per-row box whose receptive field the kernel asserts (one assertion a box,
# rows / bw of them a warpgroup's view: _per_box). bw 8 is proven too (8 queries, verify
# 0.64 -> 2.2-2.6 s CPU under load, tests/mutations/test_conv_mutations.py sets this to 8),
# but over the 2 s a default schedule may take (schedule_for picks bw 8, cluster 2 for
# strided or grouped layers with Q <= 8), so it is not stated by default; bw 16 / 32: 4 / 2
# queries. Packed taps (taps_per_slice > 1): none on narrow boxes (atoms * rows / bw
# queries: 8 at bw 32, 16 at bw 16, 3.4 / 6.7 s CPU under load). docs/verify.md "Conv
# receptive field: narrow boxes, 3-d, halo"
NARROW_CHECK_MIN_BW = 16
# 3-d: each box's assertion is two queries (one per writer: check_asserts._by_writer), and bw
# 16 (8 queries) took the kernel 0.78 -> 3.5 s CPU under load; bw 32 (4 queries) is stated,
# bw 16 proven but not by default (docs/verify.md "Conv receptive field: 3-d")
NARROW_CHECK_MIN_BW_3D = 32


def _per_box(check, rows: int, bw: int):
    """check_a stated once per per-row box of a warpgroup's rows (narrow boxes: bw < rows):
    each assertion names one box's bw rows (`rows_of`), so its query reads that box's writer,
    not a disjunction over the warpgroup's rows / bw boxes (each with its own output row's
    image * H and pushed-row products: past the solver's budget together)."""
    def each(view):
        for j in range(rows // bw):
            check(view.rows_of(j * bw, bw))
    return each


def _weight_rows(stage, atom: int, bn: int, first, part: int):
    """The `part` rows from `first` of atom `atom`'s weight tile in a ring stage (the atoms'
    [bn, bk] tiles stacked along the rows; atom 0's offset adds nothing)."""
    return stage.rows_of(first if atom == 0 else atom * bn + first, part)


def _weight_coords(g, n0, tap, c0, cg_padded: int) -> tuple:
    """The Wt[G, Kg, R*S*Cgp] coordinates of the weight box: group g, output channels n0..,
    K columns of tap `tap` from channel c0."""
    return g, n0, tap * cg_padded + c0


def _activate(t, activation: str):
    if activation == "none":
        return t
    if activation == "relu":
        return ag.relu(t)
    if activation == "sigmoid":
        return ag.sigmoid(t)
    if activation == "tanh":
        return ag.tanh(t)
    if activation == "gelu_tanh":
        return 0.5 * t * (1.0 + ag.tanh(0.7978845608028654 * (t + 0.044715 * t * t * t)))
    raise ag.TraceError(f"activation {activation!r} is not one of {ACTIVATIONS}",
                        fix="apply it after the convolution, or add it to ACTIVATIONS")


@dataclass(frozen=True)
class _HaloRing:
    """The halo schedule's ring: per stage, the halo of one filter column's input rows for one
    channel slice ([halo rows * bw, bk], 128B-swizzled) and the R weight tiles of that column
    and slice ([R * bn, bk]), and its mbarrier pipeline."""

    a: object
    b: object
    pipe: object
    s: ConvSchedule
    r: int              # filter rows
    dil_h: int
    halo_rows: int      # input rows per halo: bm / bw + (r - 1) * dil_h

    @classmethod
    def alloc(cls, s: ConvSchedule, geom: ConvGeometry, dtype: DType) -> "_HaloRing":
        halo_rows = s.bm // s.bw + (geom.r - 1) * geom.dil_h
        sA = ag.smem((s.stages, halo_rows * s.bw, s.bk), dtype, swizzle=128)
        sB = ag.smem((s.stages, geom.r * s.bn, s.bk), dtype, swizzle=128)
        return cls(sA, sB, ag.pipeline(s.stages, consumers=s.consumers), s, geom.r,
                   geom.dil_h, halo_rows)

    def load(self, k_steps, c_steps: int, geom: ConvGeometry, X, Wt, g, np0, q0, n, H, P, NH,
             rank, cs: int) -> None:
        """The producer's loop for one tile: per (filter column t, channel slice c0), one
        [bw, bk] box per halo row (input row p0 + i - pad_h of the tile's image; outside
        [0, H): zero-filled) and the weight tiles of taps (r, t), r < R."""
        s = self.s
        image, p0 = np0 // P, np0 % P
        part = s.bn // cs
        for k in ag.range(k_steps):
            with self.pipe.produce() as stage:
                t = k // c_steps
                c0 = (k % c_steps) * s.bk
                plane, v = _column(geom, geom.input_group(g), q0, t)
                for i in range(self.halo_rows):
                    # copy tags: the halo row i, the tile's image and first output row p0
                    # and its filter column t (the R filter rows' taps share the row: the
                    # consumer's assertion names the tap, _halo_receptive_field)
                    ag.tma.load(self.a[stage].rows_of(i * s.bw, s.bw), X,
                                (_row(image, p0 + i - geom.pad_h, H, NH, geom.pad_h), plane, v,
                                 c0),
                                tags=dict(img=lambda nh, pg, wv, c: ag.sym(image),
                                          p0=lambda nh, pg, wv, c: ag.sym(p0),
                                          hrow=lambda nh, pg, wv, c: ag.sym(i),
                                          fs=lambda nh, pg, wv, c: ag.sym(t),
                                          ocol=lambda nh, pg, wv, c: ag.sym(q0) +
                                          (wv - ag.sym(v))))
                for r in range(self.r):
                    ag.tma.load(self.b[stage].rows_of(r * s.bn + rank * part, part), Wt,
                                _weight_coords(g, n * s.bn + rank * part, r * geom.s + t, c0,
                                               geom.cg_padded), multicast=cs > 1)

    def mma(self, k_steps, wg, check=None):
        """Warpgroup wg's 64 rows (output rows wg * 64 / bw.. of the tile): filter row r reads
        the halo from row r * dil_h on. check(view, r, j): a tag assertion on the view's j-th
        bw rows (output row wg * rows / bw + j of the tile) at filter row r."""
        s = self.s
        rows = s.bm // s.consumers
        acc = ag.zeros((rows, s.bn), ag.f32)
        for k in ag.range(k_steps):
            with self.pipe.consume() as stage:
                for r in range(self.r):
                    a_view = self.a[stage].rows_of(wg * rows + r * self.dil_h * s.bw, rows)
                    if check is not None:
                        for j in range(rows // s.bw):
                            check(a_view if s.bw == rows else a_view.rows_of(j * s.bw, s.bw),
                                  r, j)
                    ag.wgmma(a_view, self.b[stage].rows_of(r * s.bn, s.bn), acc)
        return acc


@dataclass(frozen=True)
class NchwStaging:
    """The NCHW epilogue's stage (ConvSchedule(nchw_epilogue='tma')): per consumer warpgroup,
    its [bw pixels x bn channels] accumulator transposed into bw / W atoms of [bn][W] (W = one
    128-byte swizzled row: 32 f32, 64 bf16 / fp16), so each channel's W pixels are one row, the
    layout of a [channels, pixels] box of the NC(D)HW result. CUTLASS / FA3 stage a
    transposed epilogue the same way (stmatrix .trans, 16-bit only); an fp32 accumulator has
    no transposing stmatrix, so each element is one st.shared, and the swizzle puts a warp's
    32 writes (8 pixels x 4 channel pairs) on 32 distinct banks."""

    buffer: object
    width: int          # W: pixels per atom row
    atoms: int          # bw / W
    bn: int

    @classmethod
    def alloc(cls, consumers: int, bw: int, bn: int, dtype: DType) -> "NchwStaging":
        width = 128 // dtype.bytes
        if bw % width:
            raise ag.TraceError(f"ConvSchedule(nchw_epilogue='tma') stages {width}-pixel rows "
                                f"of {dtype} (one 128-byte swizzled row): bw={bw} is not a "
                                f"multiple", fix="nchw_epilogue='registers'")
        atoms = bw // width
        return cls(ag.smem((consumers, atoms * bn, width), dtype, swizzle=128), width, atoms,
                   bn)

    def store(self, out, origin: tuple, wg, y, bulk: bool = True) -> None:
        """Warpgroup wg's tile y [bw pixels, bn channels] into its stage, then (bulk) one TMA
        store per atom: the [bn, W] box at origin (..., first channel, first pixel) +
        (0, a * W) of the [..., Kg, Q] NCHW view (TMA drops what lies past Kg, Q or the
        leading dims); or (not bulk) the stage read back as [bw, bn] in the layout layout
        inference gives a shared read a transposed store writes (a warp = 32 consecutive
        pixels of one channel; the lowering puts a group barrier between the writes and the
        reads, and between the reads and the next tile's writes) and stored transposed: one
        128-byte run of a channel row a warp store."""
        slot = self.buffer[wg]
        ag.store_shared(slot, y, transposed=True)
        *lead, n0, q0 = origin
        if not bulk:
            if self.width != 32:
                raise ag.TraceError(f"ConvSchedule(nchw_epilogue='staged') reads the stage back "
                                    f"by 32-bit ag.load_shared: fp32 results only, got "
                                    f"{self.width}-pixel rows of a 16-bit result",
                                    fix="nchw_epilogue='tma' or 'registers' for 16-bit "
                                        "results")
            back = ag.load_shared(slot, transposed=True, rows=self.atoms * self.width)
            ag.store(out, origin, back, transposed=True)
            return
        for a in range(self.atoms):
            ag.tma.store(out, (*lead, n0, q0 + a * self.width),
                         slot.rows_of(a * self.bn, self.bn))


@functools.lru_cache(maxsize=None)
def conv_kernel(in_dtype: DType = ag.bf16, out_dtype: DType = ag.bf16, bias: bool = False,
                activation: str = "none", precision: str | None = None,
                nchw: bool = False) -> ag.KernelFunction:
    """The 2-d implicit-GEMM convolution kernel for one problem kind (cached).
    precision="tf32": fp32 X and Wt multiplied as tf32 (wgmma `.tf32`, fp32 accumulation: the
    arithmetic of cuDNN with allow_tf32, relaxed accuracy), bk = 32 (a 128-byte row of fp32),
    neither halo nor promote.

    nchw=True: the result is written channels-first (NCHW / NCDHW-contiguous, what cuDNN's
    fprop returns for an NCHW input) straight from the accumulator, so no transpose pass
    follows. Out is then the [G, N, OD * P, Kg, Q] view of the [N, G * Kg, OD, P, Q] result
    (strides (Kg * OD*P*Q, K * OD*P*Q, Q, OD*P*Q, 1)) and the epilogue stores the warpgroup's
    [bw pixels x bn channels] accumulator transposed (`ag.store(transposed=True)`): in the
    wgmma fragment the 8 lanes of a quad column (lane / 4 = 0..7) hold 8 consecutive rows
    (output pixels q0 + 8i..) of one column (channel), so each store instruction of a warp
    writes 4 channels x 8 consecutive pixels: four fully used 32-byte sectors for fp32 (16
    bytes per 8 pixels for 16-bit outputs), sector-complete where a channel row starts on a
    32-byte boundary; KernelBench's L1/67, 76 and 55 rows start 8 bytes off one (Q * 4 % 32
    == 24), so each 8-pixel run there straddles two sectors. ConvSchedule(nchw_epilogue=
    'tma') stages the tile instead (`NchwStaging`: transposed into swizzled [channels][pixels]
    atoms by ag.store_shared(transposed=True), one TMA store of an NCHW box per atom, whose
    reads of the stage overlap the next tile's main loop), at bm * bn * 4 bytes of shared
    memory (fp32) beside the ring, where a tensor map can address the result (channel rows
    16-byte aligned: argus.ops.conv falls back to the register store elsewhere). Either needs
    the direct epilogue (bw = the warpgroup's rows: one output row segment per warpgroup)."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {ACTIVATIONS}, got {activation!r}")
    if (in_dtype == ag.f32) != (precision == "tf32") or precision not in (None, "tf32"):
        raise ValueError(f"conv_kernel(in_dtype={in_dtype}, precision={precision!r}): fp32 "
                         f"inputs run only as tf32 (precision='tf32'), and tf32 only on fp32 "
                         f"inputs (the strict fp32 track is the bf16 split: bf16 inputs)")

    out_type = ag.Tensor["G", "NI", "OP", "KG", "Q", out_dtype] if nchw else \
        ag.Tensor["G", "NP", "Q", "KG", out_dtype]

    def conv2d(X: ag.Tensor["NH", "PG", "WV", "CG", in_dtype],   # [N*H, sw*G, W/sw, Cg]
               # (s.rowbox: [N, H, W, C], argus.ops.conv.operands(rowbox=True))
               Wt: ag.Tensor["G", "KG", "KT", in_dtype],         # [G, Kg, R*S*Cgp]
               Out: out_type,          # [G, N*OD*P, Q, Kg] view of [N, OD, P, Q, G*Kg];
               # nchw: [G, N, OD*P, Kg, Q] view of [N, G*Kg, OD, P, Q]
               Bias: ag.Tensor["G", "KG", out_dtype],            # the bias as given
               H: ag.i32, P: ag.i32, D: ag.i32, OD: ag.i32,
               geom: ConvGeometry = ConvGeometry(1, 1), s: ConvSchedule = ConvSchedule()):
        NH, Cg = X.shape[0], X.shape[3]
        G, Kg = Wt.shape[0], Wt.shape[1]
        if nchw:                                       # [G, N, OD * P, Kg, Q]
            NP, Q = Out.shape[1] * Out.shape[2], Out.shape[4]
        else:
            NP, Q = Out.shape[1], Out.shape[2]
        row_blocks = s.bm // s.bw                      # output rows per tile
        q_tiles = ag.cdiv(Q, s.bw)
        cs = s.cluster_m
        if s.halo and (geom.t != 1 or geom.stride_h != 1):
            raise ag.TraceError(f"ConvSchedule(halo=True) reuses input rows across the filter's "
                                f"rows: it needs a 2-d convolution with stride_h 1; got "
                                f"t={geom.t}, stride_h={geom.stride_h}", fix="halo=False")
        atoms = s.taps_per_slice
        if atoms > 1 and s.bk * in_dtype.bytes not in (32, 64, 128):
            raise ag.TraceError(f"ConvSchedule(taps_per_slice={atoms}, bk={s.bk}): each K "
                                f"slice is a swizzled atom of 32, 64 or 128 bytes; bk * "
                                f"{in_dtype.bytes} bytes is {s.bk * in_dtype.bytes}",
                                fix="bk = the channels per group rounded up to 16, 32 or 64 "
                                    "(bf16), 8, 16 or 32 (tf32) (argus.ops.conv.schedule_for"
                                    "(taps_per_slice=...))")
        if atoms > 1 and geom.groups > 1 and geom.stride_w > 1:
            # the kernel computes these right (the interpreter agrees with torch), but each
            # tap's box has its own plane term there (phase * G + g, `_column`) and
            # wgmma.k-once takes the grp tag for a reduction index: refused here with the
            # reason rather than reported by the verifier as a k multiplied twice
            raise ag.TraceError(f"ConvSchedule(taps_per_slice={atoms}) for a grouped "
                                f"convolution (groups={geom.groups}) with a column stride "
                                f"(stride_w={geom.stride_w}): each packed tap's input box lies "
                                f"in its own stride-phase plane, and the verifier cannot yet "
                                f"prove that such a step pairs one group (it would report "
                                f"wgmma.k-once on this layer)",
                                fix="taps_per_slice=1 for this layer (argus.ops.conv."
                                    "schedule_for(taps_per_slice=...) packs no grouped "
                                    "column-strided layer)")
        if precision == "tf32" and (s.halo or s.promote or
                                    (s.bk != 32 if atoms == 1 else s.bk not in (8, 16, 32))):
            raise ag.TraceError(f"ConvSchedule(bk={s.bk}, halo={s.halo}, promote={s.promote}) "
                                f"with tf32: a 128-byte row holds 32 fp32, and halo / promote "
                                f"are not wired for tf32",
                                fix="ConvSchedule(bk=32, halo=False, promote=False) "
                                    "(argus.ops.conv.schedule_for(..., precision='tf32'))")
        if s.rowbox and ((geom.t, geom.groups) != (1, 1) or
                         not 1 <= geom.stride_h <= 8 or not 1 <= geom.stride_w <= 8):
            raise ag.TraceError(f"ConvSchedule(rowbox=True) loads a tile's input rows as one "
                                f"box of the [N, H, W, C] input: it needs a 2-d convolution "
                                f"with one group and strides of at most 8 (the TMA unit's "
                                f"element strides); got t={geom.t}, stride ({geom.stride_h}, "
                                f"{geom.stride_w}), groups={geom.groups}",
                                fix="rowbox=False")
        if s.rowbox and (row_blocks * geom.stride_h > 256 or s.bw * geom.stride_w > 256):
            raise ag.TraceError(f"ConvSchedule(rowbox=True, bm={s.bm}, bw={s.bw}) at stride "
                                f"({geom.stride_h}, {geom.stride_w}): the box traverses "
                                f"{row_blocks} x {geom.stride_h} input rows and {s.bw} x "
                                f"{geom.stride_w} columns, past the TMA box's 256",
                                fix="a narrower bw (or fewer rows, bm / bw), or rowbox=False")
        if nchw and s.epilogue != "direct":
            raise ag.TraceError(f"conv_kernel(nchw=True) stores each warpgroup's accumulator "
                                f"transposed as one output row segment: it needs "
                                f"epilogue='direct' (bw = bm / consumers); got "
                                f"epilogue={s.epilogue!r}, bw={s.bw}",
                                fix="ConvSchedule(epilogue='direct', bw=bm // consumers), or "
                                    "nchw=False (channels-last result)")
        # halo / rowbox: a tile's output rows lie in one image (ceil(P / rows) blocks per
        # image, the last one partly past P: those rows are not stored); else rows of the
        # flattened N * P
        image_tiles = s.halo or s.rowbox
        if image_tiles and nchw:
            # per-image tiles are 2-d (OD = 1): the view's plane rows are the P output rows
            # the tiles walk (store.coverage needs it; argus.ops.conv's views have it)
            ag.require(ag.sym(Out.shape[2]) == ag.sym(P),
                       "per-image row blocks (rowbox / halo, 2-d): the NCHW view "
                       "[G, N, P, Kg, Q] has P plane rows")
        elif s.rowbox:
            # X is [N, H, W, C]: the [G, N * P, Q, Kg] view's rows are N whole images of P
            # rows (the tiles walk NP // P images; store.coverage needs it; argus.ops.conv's
            # views have it)
            ag.require(ag.sym(Out.shape[1]) == ag.sym(X.shape[0]) * ag.sym(P),
                       "rowbox: the [G, N * P, Q, Kg] view has the N images of X [N, H, W, C], "
                       "P rows each")
        elif s.halo:
            # X is [N * H, ..] (N is no parameter): the image count is NH // H, and the
            # [G, N * P, Q, Kg] view has that many images of P rows (store.coverage needs P
            # to divide NP: a product with the factor P says so; argus.ops.conv's views have it)
            ag.require(ag.sym(Out.shape[1]) == ag.sym(X.shape[0]) // ag.sym(H) * ag.sym(P),
                       "halo: the [G, N * P, Q, Kg] view has the N = NH / H images of X "
                       "[N * H, ..], P rows each")
        row_tiles = (NP // P) * ag.cdiv(P, row_blocks) if image_tiles else \
            ag.cdiv(NP, row_blocks)
        if s.ctas_per_sm > 1:
            ag.occupancy(s.ctas_per_sm)
        sched = TileScheduler.launch(row_tiles * q_tiles * s.bm, Kg, s.bm, s.bn,
                                     batch=G, cluster=cs, persistent=s.persistent,
                                     num_sms=s.num_sms * s.ctas_per_sm, group_m=s.group_m)
        # taps_per_slice: each step's K slices are atoms of the ring, swizzled by their row
        ring = _HaloRing.alloc(s, geom, in_dtype) if s.halo else \
            OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, in_dtype,
                              1 if s.pingpong else s.consumers,
                              precision=precision, k_atoms=atoms,
                              swizzle=128 if atoms == 1 else s.bk * in_dtype.bytes)
        if geom.cg_padded % s.bk:
            raise ag.TraceError(f"ConvGeometry(cg_padded={geom.cg_padded}) is not a multiple of "
                                f"bk={s.bk}", fix="pad the weight's channels per tap to a "
                                                  "multiple of bk (argus.ops.conv does)")
        c_steps = geom.cg_padded // s.bk
        # halo: a K step is (filter column, channel slice) and multiplies all R filter rows;
        # taps_per_slice: a step is `atoms` consecutive K slices of (tap, channel slice)
        slices = c_steps * geom.t * geom.r * geom.s
        k_steps = c_steps * geom.s if s.halo else -(-slices // atoms)
        cg_padded = geom.cg_padded
        taps = geom.t * geom.r * geom.s
        # launch preconditions the op guarantees: X's channels fit the padded weight's, and
        # G is the geometry's group count
        ag.tag_assume(lambda: ag.sym(Cg) <= cg_padded)
        ag.tag_assume(lambda: ag.sym(G) == geom.groups * geom.out_blocks)
        # groups never mix: the input's plane axis is phase * G + g, so its group is plane % G;
        # the weight's is its leading coordinate. wgmma.agree proves every product pairs the
        # same group. (The K coordinate is the pair (tap, channel), tagged below as kin: the
        # input channel alone repeats across taps, so a channel tag on both operands read as
        # channel 0 multiplied once a tap in wgmma.k-once.)
        if atoms == 1 or geom.groups > 1:
            # (packed K slices, one group: nothing to agree, and no tag. A stride_w > 1 gives
            # each tap's box its own plane term (phase * G + g), so the record of a stage
            # holding several taps' boxes is an If over them that mentions k, and wgmma.k-once
            # takes grp for the reduction index and reports it multiplied twice: a false
            # positive for packed, grouped, column-strided layers, which are refused above;
            # docs/perf/conv.md "Packed taps")
            ag.tag_tensor(X, grp=lambda nh, plane, wv, c: plane % geom.groups)
            ag.tag_tensor(Wt, grp=lambda g, kg, kt: geom.input_group(g))
        # the implicit GEMM's K coordinate (tap, channel) flattened: the weight's K column;
        # A's from each box's tap (_im2col_tags: ag.tma.load(tags=)), so wgmma.agree and
        # wgmma.k-once speak of the pair, not of the channel that repeats across taps
        ag.tag_tensor(Wt, kin=lambda g, kg, kt: kt)
        # rows of one accumulator: a consumer warpgroup's share of the tile, or (ping-pong:
        # each warpgroup owns whole tiles) one of its bm / 64 accumulators of 64 rows
        rows = 64 if s.pingpong else s.bm // s.consumers
        blocks = s.bm // 64 if s.pingpong else 1    # accumulators a warpgroup holds
        if s.epilogue == "tma":     # a slot per accumulator (ping-pong: per warpgroup's block)
            staging = Staging.alloc(s.consumers * blocks, rows, s.bn, out_dtype)
        nchw_tma = nchw and s.nchw_epilogue in ("tma", "staged")
        if nchw_tma:
            nchw_stage = NchwStaging.alloc(s.consumers * blocks, s.bw, s.bn, out_dtype)

        def tile_origin(unit):
            """(first flattened output row n * P + p, first output column) of the unit."""
            block, q0 = unit.m // q_tiles, (unit.m % q_tiles) * s.bw
            if not image_tiles:
                return block * row_blocks, q0
            per_image = ag.cdiv(P, row_blocks)
            return (block // per_image) * P + (block % per_image) * row_blocks, q0

        def out_row(np0, i):
            """The Out row of the tile's output row i: past NP (not stored) when a halo
            tile's row i lies past its image's P rows."""
            if not image_tiles:
                return np0 + i
            return np0 + i + _outside(np0 % P + i, P) * NP

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for unit in sched.units():
                (g,) = unit.batch
                np0, q0 = tile_origin(unit)
                if s.halo:
                    ring.load(k_steps, c_steps, geom, X, Wt, g, np0, q0, unit.n, H, P, NH,
                              sched.rank, cs)
                    continue
                part = s.bn // cs
                if s.rowbox:
                    # X is [N, H, W, C]: the tile's image and first row, once per tile
                    image, p0 = np0 // P, np0 % P
                    strides = _rowbox_strides(geom)
                    for k in ag.range(k_steps):
                        with ring.pipe.produce() as stage:
                            for atom in range(atoms):
                                tap, c0, past = _k_slice(k, atom, atoms, c_steps, slices, s.bk)
                                r, t = tap // geom.s, tap % geom.s
                                # past the last tap: an image past N (zeros)
                                a_view = ring.a[stage] if atoms == 1 else \
                                    ring.a[stage].rows_of(atom * s.bm, s.bm)
                                pushed = 0 if isinstance(past, int) else past * X.shape[0]
                                # (in the order the coordinates were always recorded)
                                n0 = _plus(image, pushed)
                                # (strided: the first output row / column times the stride;
                                # the box's element strides step the rest)
                                h0 = _times(p0, geom.stride_h) + (r * geom.dil_h - geom.pad_h)
                                w0 = _times(q0, geom.stride_w) + (t * geom.dil_w - geom.pad_w)
                                # copy tags: the output pixel (image, p0 + i, q0 + j) each
                                # element is read for (its place in the box), and its tap
                                ag.tma.load(a_view, X, (n0, h0, w0, c0),
                                            box=(1, row_blocks, s.bw, s.bk),
                                            elem_strides=strides,
                                            tags=_im2col_tags(
                                                geom, tap, taps, cg_padded,
                                                **_rowbox_pixel(image, p0, q0, h0, w0, geom)))
                                ag.tma.load(_weight_rows(ring.b[stage], atom, s.bn,
                                                         sched.rank * part, part), Wt,
                                            _weight_coords(g, unit.n * s.bn + sched.rank * part,
                                                           tap, c0, cg_padded),
                                            multicast=cs > 1)
                    continue
                for k in ag.range(k_steps):
                    with ring.pipe.produce() as stage:
                        for atom in range(atoms):
                            tap, c0, past = _k_slice(k, atom, atoms, c_steps, slices, s.bk)
                            for j in range(row_blocks):
                                at = _input_coords(geom, geom.input_group(g), np0 + j, q0,
                                                   tap, c0, H, P, NH, D, OD, past)
                                # copy tags: the output row np0 + j and column q0 + i (the
                                # element's place along the box's v) it is read for, its tap
                                ag.tma.load(ring.a[stage].rows_of(atom * s.bm + j * s.bw,
                                                                  s.bw), X, at,
                                            tags=_im2col_tags(
                                                geom, tap, taps, cg_padded,
                                                **_row_pixel(at, q0)))
                            # the weight tile: the same for the cluster's CTAs (vertically
                            # adjacent tiles, one group and n): each loads bn / cs of its rows
                            # and multicasts them to all (L2 reads of the weight / cs); a K
                            # slice past the last tap lies past Wt's K extent (zeros)
                            ag.tma.load(_weight_rows(ring.b[stage], atom, s.bn,
                                                     sched.rank * part, part), Wt,
                                        _weight_coords(g, unit.n * s.bn + sched.rank * part,
                                                       tap, c0, cg_padded), multicast=cs > 1)

        def receptive_check():
            """check_a of the main loop over views of `rows` rows (see below)."""
            # 2-d: each A element is its output pixel's receptive field (or a zero);
            # narrow per-row boxes (bw < rows): one assertion a box (_per_box), as one over
            # the view's rows / bw boxes ran past the solver's budget (their output rows'
            # image * H and pushed-row products together). 3-d as 2-d, with the depth
            # (docs/verify.md "Conv receptive field: 3-d")
            check = _receptive_field(geom, X, H, s.rowbox, D, OD)
            if check is not None and not s.rowbox and s.bw < rows:
                least = NARROW_CHECK_MIN_BW if geom.flat else NARROW_CHECK_MIN_BW_3D
                check = _per_box(check, rows, s.bw) \
                    if s.bw >= least and atoms == 1 else None
            return check

        def tile_epilogue(unit):
            """What the epilogue reads once a tile: (group, first flattened output row, first
            output column, the bias row as fp32 or None)."""
            (g,) = unit.batch
            np0, q0 = tile_origin(unit)
            b = ag.load(Bias, (g, unit.n * s.bn), (1, s.bn)).to(ag.f32) if bias else None
            return g, np0, q0, b

        def store_block(unit, origin, acc, base, slot):
            """Store one accumulator of `rows` rows: the tile's output rows base * per_block..
            (per_block = rows / bw of them; base is the consumer warpgroup, or a ping-pong
            warpgroup's accumulator index), through staging slot `slot` (TMA epilogue)."""
            g, np0, q0, b = origin
            y = acc
            if bias:
                y = y + b
            y = _activate(y, activation).to(out_dtype)
            per_block = rows // s.bw                # output rows in this accumulator's rows
            if nchw:
                # channels-first, pixel i and channel j -> Out[g, n, p, n0 + j, q0 + i].
                # Per-image tiles (halo / rowbox, 2-d): the tile's image and first row
                # directly, a row past P dropped by the store's bound on Out's P axis.
                # Else row r = (n * OD + od) * P + p of the flattened rows is image
                # r // (OD * P), plane row r % (OD * P); a row past NP has an image past N.
                if image_tiles:
                    block = unit.m // q_tiles
                    per_image = ag.cdiv(P, row_blocks)
                    image, p = block // per_image, (block % per_image) * row_blocks + base
                else:
                    r = np0 + base
                    image, p = r // Out.shape[2], r % Out.shape[2]
                if nchw_tma:
                    nchw_stage.store(Out, (g, image, p, unit.n * s.bn, q0), slot, y,
                                     bulk=s.nchw_epilogue == "tma")
                else:
                    ag.store(Out, (g, image, p, unit.n * s.bn, q0), y, transposed=True)
                return
            if s.epilogue == "direct":              # bw == rows: one output row segment
                ag.store(Out, (g, out_row(np0, base), q0, unit.n * s.bn), y)
                return
            # stage 64-column blocks in shared memory, then one TMA store per output row
            # segment of bw rows (clipped by the hardware at Q and N * P)
            w = staging.width
            for jc in range(staging.blocks):
                place = staging.slot(slot, jc)
                ag.stmatrix(place, y[:, w * jc:w * (jc + 1)])
                for j in range(per_block):
                    ag.tma.store(Out, (g, out_row(np0, base * per_block + j), q0,
                                       unit.n * s.bn + w * jc),
                                 place.rows_of(j * s.bw, s.bw))

        if s.pingpong:
            # whole tiles in turns (the GEMM's ping-pong, argus/kernels/gemm.py): warpgroup
            # `turn` multiplies the unit's bm rows as bm / 64 accumulators in an ordered
            # section and stores them while the other multiplies the next unit; the other
            # skips this unit's K steps of the ring (one release a slot: consumers=1)
            check = receptive_check()
            with ag.role("consumer", warpgroups=2, regs=s.consumer_regs) as wg:
                for turn, unit in sched.turns(2):
                    with ag.when(turn == wg):
                        with ag.ordered("mma"):
                            accs = ring.mma_tile(k_steps, check_a=check)
                        with ag.ordered("epilogue") if s.ordered_epilogue else \
                                contextlib.nullcontext():
                            origin = tile_epilogue(unit)
                            for j, acc in enumerate(accs):     # 64-row blocks of the tile
                                store_block(unit, origin, acc, j, wg * blocks + j)
                    with ag.when(turn != wg):
                        ring.pipe.skip(k_steps)  # the other warpgroup's unit
        else:
            with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
                for unit in sched.units():
                    if s.halo:
                        # (where a warpgroup's rows are one halo row, bw = bm / consumers: R
                        # queries a tile; narrower rows ask R * rows / bw, 24 at bw 8, ~6 s,
                        # and carry none: docs/verify.md "Conv receptive field: narrow boxes,
                        # 3-d, halo")
                        acc = ring.mma(k_steps, wg, _halo_receptive_field(geom, X, H, wg, 1)
                                       if s.bw == rows else None)
                    else:
                        check = receptive_check()
                        acc = promoted_mma(ring, k_steps, wg) if s.promote else \
                            ring.mma(k_steps, wg, check_a=check)
                    store_block(unit, tile_epilogue(unit), acc, wg, wg)

    suffix = "" if (in_dtype, out_dtype) == (ag.bf16, ag.bf16) else \
        f"_{precision or in_dtype.name}_{out_dtype.name}"
    epi = ("_bias" if bias else "") + ("" if activation == "none" else f"_{activation}") + \
        ("_nchw" if nchw else "")
    return ag.kernel(conv2d, name=f"conv2d{suffix}{epi}")
