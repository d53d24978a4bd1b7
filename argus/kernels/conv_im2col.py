"""The im2col gathers of a convolution with few input channels: the input as the explicit GEMM
operand A [N * P * Q, K'] with K' = the taps (r, s) and channels c flattened (R * S * C useful
columns; (r, s, c) or, for NCHW inputs, (r, c, s)) and a bias tap, so argus.ops.matmul's
GEMM then multiplies only the useful K (argus.ops.conv's "im2col" route, which picks the
kernel and A's layout: `_Gather`).

Why: the implicit GEMM (argus/kernels/conv.py) pads each tap's channels to its 64-deep K slice,
so with C = 3 (an RGB stem) 61 of every 64 products multiply zeros (ResNet-50's 7x7 stem: 49
taps x 64 K per pixel for 147 useful; 0.31x cuDNN on the H200, docs/perf/conv.md). Folding the
taps into K costs one write and one read of A (about R * S / (sh * sw) times the input's bytes)
and no wasted tensor-core work beyond the GEMM's last K slice.

Three kernels, one contract: bf16 / fp16 data copied as it is, fp32 data rounded to tf32 to
nearest on the way (ag.round_tf32: the tf32 GEMM's tensor cores then read A exactly); A's
bias tap holds BIAS_ONES ones (the GEMM reads one for a 16-bit bias, two for an fp32 bias split
into tf32 hi + lo pieces); padding taps read zeros from the loads' bounds, never from a mask.

- `im2col_kernel` (per tap, any input strides): X is the input viewed as
  [N, H, W / sw, sw, C, 1] (W a multiple of the stride; the unit dim keeps the innermost
  stride 1), so input column w = sw * v + phase lies at (v, phase), phase a compile-time int
  per filter column: the BQ output columns q0.. of one output row, tap (r, s), read BQ
  consecutive v, each a run of C channels, as one tile. A is viewed as
  [N * P, Q, R * S + 1, C, 1] over the caller's pitch: element (m, q, t, c) is
  A[m * Q + q, t * C + c]; tap t = R * S is the bias tap. Input row h = p * sh + r * dh - ph
  is a scalar (outside [0, H): outside X, zeros), column v = q + (s * dw - pw) // sw (floor
  division: a negative column is outside X). Columns c >= C of the BC-wide tile (a power of
  two) read zeros and are dropped by A's bounds; rows q >= Q likewise.
- `im2col_rows_kernel` (channels-last input, no column dilation): one run of S * C values per
  (pixel, filter row), its own layout of A in slots (its docstring).
- `im2col_planes_kernel` (NCHW input, no column dilation): C runs of S values per (pixel,
  filter row), one [C, S] box, A in slots ordered (r, c, s) (its docstring).
- `im2col_pixels_kernel` (channels-last input, no column dilation): the row-run kernel's A
  layout built one pixel a thread with ag.gather, stored 16 bytes at a time (its docstring);
  `im2col_pixel_planes_kernel` the same for the plane-run kernel's (NCHW input);
  `im2col_pixels_staged_kernel` / `im2col_pixel_planes_staged_kernel` stage each CTA's rows
  of A in shared memory (16-byte st.shared) and write them with TMA stores;
  `im2col_pixels_span_kernel` / `im2col_pixel_planes_span_kernel` do the same with the CTA's
  pixels on one output row, each filter row's input span loaded once (coalesced) into shared
  memory and the pixels' values gathered from there (ag.gather of a shared view).

Invariant (per tap): A[(n * P + p) * Q + q, (r * S + s) * C + c] = x[n, p * sh + r * dh - ph,
q * sw + s * dw - pw, c] (rounded to tf32 for fp32; 0 outside the input), the bias tap's first
min(C, BIAS_ONES) columns 1 and its others 0; every element of the [N * P, Q, R * S + 1, C]
view is written exactly once (the grid covers (N * P) x ceil(Q / BQ) disjoint tiles per tap),
and nothing else of A.
"""


import functools
from dataclasses import dataclass

import argus as ag
from argus import dtypes
from argus.dtypes import DType
from argus.kernels.conv import check_geometry_fields

__all__ = ["Im2colGeometry", "im2col_kernel", "im2col_pixel_planes_kernel",
           "im2col_pixel_planes_span_kernel", "im2col_pixel_planes_staged_kernel",
           "im2col_pixels_kernel", "im2col_pixels_span_kernel", "im2col_pixels_staged_kernel",
           "im2col_planes_kernel", "im2col_rows_kernel", "im2col_tile",
           "im2col_voxels_staged_kernel", "plane_slot", "planes_tile", "row_slot", "rows_tile",
           "span_fits", "span_tile", "staged_pieces", "staged_reuse", "staged_rows",
           "voxel_pitch", "voxel_reuse"]


@dataclass(frozen=True)
class Im2colGeometry:
    """What the problem fixes at compile time: the filter and its index map (output (p, q),
    tap (r, s) -> input (p * stride_h + r * dil_h - pad_h, q * stride_w + s * dil_w - pad_w))
    and the input channels (C, the run each tap contributes to K)."""

    r: int
    s: int
    stride_h: int = 1
    stride_w: int = 1
    pad_h: int = 0
    pad_w: int = 0
    dil_h: int = 1
    dil_w: int = 1
    channels: int = 3
    # the depth axis of a 3-d convolution (output od, tap t -> input od * stride_d + t * dil_d
    # - pad_d); a 2-d one is depth 1 (these defaults), which only the voxel gather reads
    t: int = 1
    stride_d: int = 1
    pad_d: int = 0
    dil_d: int = 1

    def __post_init__(self) -> None:
        check_geometry_fields(self, "sizes, strides, dilations and the channels")


# the bias tap's leading ones: the GEMM reads one (16-bit: the bias is exact in the weight's
# dtype) or two (fp32 under tf32: the bias as two tf32 pieces, hi + lo, ~2^-22 relative); a
# one past the tap's columns (C = 1) is dropped by A's bounds
BIAS_ONES = 2


def _check_dtype(dtype: DType) -> None:
    if dtype not in (dtypes.bf16, dtypes.f16, dtypes.f32):
        raise ValueError(f"the im2col gather moves bf16, fp16 or fp32 (tf32) data, not {dtype}")


def _rounded(x, dtype: DType):
    """A loaded tile as A stores it: 16-bit data as it is, fp32 rounded to tf32 to nearest
    (cvt.rna, as cuDNN rounds), which the tf32 GEMM's tensor cores then read exactly."""
    return ag.round_tf32(x) if dtype == dtypes.f32 else x


# elements of one tap's tile per thread: BQ * BC = ELEMENTS_PER_THREAD * threads
ELEMENTS_PER_THREAD = 4
THREADS = 128


def im2col_tile(channels: int, q: int | None = None,
                threads: int = THREADS) -> tuple[int, int]:
    """(BQ, BC): BC the channels rounded up to a power of two; BQ output columns so a tap's
    tile is ELEMENTS_PER_THREAD elements a thread, fewer when the output row is shorter (`q`:
    BQ the power of two at or above it, down to the threads' one element each: L1/50's Q = 55
    takes 64, not 128 with 73 idle rows). A first choice, not measured on the H200
    (scripts/gpu_conv_bench.py --stem times the route)."""
    bc = 1
    while bc < channels:
        bc *= 2
    bq = max(1, ELEMENTS_PER_THREAD * threads // bc)
    while q is not None and bq // 2 >= q and bq // 2 * bc >= threads:
        bq //= 2
    return bq, bc


@functools.lru_cache(maxsize=None)
def im2col_kernel(dtype: DType = dtypes.bf16, threads: int = THREADS) -> ag.KernelFunction:
    """The per-tap gather for one dtype (bf16, fp16, or fp32 rounded to tf32: X and A share it)
    and CTA size (cached): compile-time `geom` (Im2colGeometry) and tile (BQ, BC) from
    `im2col_tile`."""
    _check_dtype(dtype)

    def conv_im2col(X: ag.Tensor["N", "H", "WS", "SW", "C", "U", dtype],  # [N,H,W/sw,sw,C,1]
                    A: ag.Tensor["NP", "Q", "T", "CA", "V", dtype],      # [N*P,Q,R*S+1,C,1]
                    geom: Im2colGeometry = Im2colGeometry(1, 1), BQ: int = 128, BC: int = 4):
        g = geom
        P = A.shape[0] // X.shape[0]
        row, qb = ag.grid(A.shape[0], ag.cdiv(A.shape[1], BQ))
        n, p = row // P, row % P
        q0 = qb * BQ
        for r in range(g.r):
            h = p * g.stride_h + (r * g.dil_h - g.pad_h)
            for s in range(g.s):
                off = s * g.dil_w - g.pad_w
                # floor division: a negative column lands before column 0 (read as 0)
                x = ag.load(X, (n, h, q0 + off // g.stride_w, off % g.stride_w, 0, 0),
                            (BQ, 1, BC, 1), other=0.0)
                ag.store(A, (row, q0, r * g.s + s, 0, 0), _rounded(x, dtype))
        # the bias tap: 1 in its first BIAS_ONES columns, 0 in the others (dropped past C by
        # A's bounds)
        one = ag.where(ag.arange(BC)[None, None, :, None] < BIAS_ONES,
                       ag.full((BQ, 1, BC, 1), 1.0), ag.full((BQ, 1, BC, 1), 0.0))
        ag.store(A, (row, q0, g.r * g.s, 0, 0), one.to(A.dtype))

    return ag.kernel(conv_im2col, threads=threads, name=f"conv_im2col_{dtype.name}_{threads}")


# registers of loaded values a thread of the row-run kernel holds (all its loads are issued
# before its stores, so that many are in flight per warp)
ROW_LOADS_PER_THREAD = 64


def row_slot(geom: Im2colGeometry) -> int:
    """The columns of A one filter row's run takes in `im2col_rows_kernel`'s layout: S * C,
    rounded up so that A's pitch, (R + 1) slots (the last the bias tap's), is a multiple of 8
    elements (16-byte rows for the GEMM's TMA)."""
    slot = geom.s * geom.channels
    while (geom.r + 1) * slot % 8:
        slot += 1
    return slot


def rows_tile(geom: Im2colGeometry) -> tuple[int, int]:
    """(BQ, LB) of `im2col_rows_kernel`: LB the slot (`row_slot`) rounded up to a power of
    two, at least the warp's 32 lanes; BQ output columns a CTA (a power of two up to 16) whose
    BQ * R runs fit ROW_LOADS_PER_THREAD registers a thread. A first choice, not measured on
    the H200."""
    lb = 32
    while lb < row_slot(geom):
        lb *= 2
    bq = 16
    while bq > 1 and bq * geom.r * (lb // 32) > ROW_LOADS_PER_THREAD:
        bq //= 2
    return bq, lb


@functools.lru_cache(maxsize=None)
def im2col_rows_kernel(dtype: DType = dtypes.bf16) -> ag.KernelFunction:
    """The gather for a filter without column dilation on an input whose pixel rows are
    contiguous (channels-last): for output pixel (n, p, q) and filter row r the S taps' S * C
    values are ONE run of the input row, x[n, h, w0 : w0 + S, :] with w0 = q * sw - pw, so a
    warp (the CTA: 32 threads) copies it with one load and one store instruction of
    consecutive elements (the per-tap kernel above stores C elements of each of 8 rows a
    store instruction: 8 lines against 1-2 here). X is x's [N, H, W * C] view, so padding
    columns (a run starting before 0 or ending past W) are outside X's last dim: zeros, by the
    load's bounds; padding rows are outside X's H.

    A's layout: each pixel's row is R + 1 slots of `row_slot` columns (pitch (R + 1) * slot):
    slot r holds run r (column r * slot + s * C + c for tap (r, s), channel c), then zeros to
    the slot's end; slot R is the bias tap (BIAS_ONES ones, then 0). argus.ops.conv lays the
    weight out the same way (zero columns where A has its zeros). The kernel's A is
    [N * P, Q * (R + 1), slot] (a view of the contiguous buffer): pixel q's slot r is row
    q * (R + 1) + r, so a CTA's stores are consecutive rows of one axis. Compile-time `geom`
    (dil_w 1) and (BQ, LB) from `rows_tile`.

    Invariant: A[(n * P + p) * Q + q, r * slot + s * C + c] = x[n, p * sh + r * dh - ph,
    q * sw + s - pw, c] (0 outside the input), every other column of the pixel's first R slots
    0, slot R = (1, 1, 0, ..., 0) (BIAS_ONES ones); fp32 values rounded to tf32; every
    element of A written exactly once."""
    _check_dtype(dtype)

    def conv_im2col_rows(X: ag.Tensor["N", "H", "E", dtype],            # [N, H, W * C]
                         A: ag.Tensor["NP", "J", "L", dtype],           # [N*P, Q*(R+1), slot]
                         geom: Im2colGeometry = Im2colGeometry(1, 1), BQ: int = 8,
                         LB: int = 32):
        g = geom
        _check_unit_dil_w(g, "row-run")
        run = g.s * g.channels
        slots = g.r + 1
        P = A.shape[0] // X.shape[0]
        row, qb = ag.grid(A.shape[0], ag.cdiv(A.shape[1], BQ * slots))
        n, p = row // P, row % P
        q0 = qb * BQ
        # lanes past the run read the next pixels' values: zeroed (the slot's gap columns)
        inside = ag.arange(LB)[None, :] < run
        runs = []
        for i in range(BQ):
            # the run's first element; negative or past the row: zeros (X's E bounds)
            e0 = ((q0 + i) * g.stride_w - g.pad_w) * g.channels
            for r in range(g.r):
                h = p * g.stride_h + (r * g.dil_h - g.pad_h)
                runs.append(ag.load(X, (n, h, e0), (1, LB), other=0.0))
        one = ag.where(ag.arange(LB)[None, :] < BIAS_ONES, ag.full((1, LB), 1.0),
                       ag.full((1, LB), 0.0)).to(A.dtype)
        # every load above is issued before the first store: BQ * R runs in flight a warp
        j0 = q0 * slots
        for i in range(BQ):
            for r in range(g.r):
                x = ag.where(inside, runs[i * g.r + r], ag.full((1, LB), 0.0, dtype))
                ag.store(A, (row, j0 + i * slots + r, 0), _rounded(x, dtype))
            ag.store(A, (row, j0 + i * slots + g.r, 0), one)

    return ag.kernel(conv_im2col_rows, threads=32, name=f"conv_im2col_rows_{dtype.name}")


# pixels (A rows) a CTA of the pixel kernel: one a thread, four warps
PIXELS_PER_CTA = 128
# A's columns one gather and one store of the pixel kernel cover: 8 (16 bytes of bf16 / fp16,
# two 16-byte stores of fp32); A's pitch is a multiple of 8 (`row_slot`)
PIXEL_CHUNK = 8


def _check_unit_dil_w(g: Im2colGeometry, gather: str) -> None:
    """The run and pixel gathers read each filter row's taps as one contiguous run of x: a
    column dilation breaks the run (the taps gather, im2col_kernel, reads it tap by tap)."""
    if g.dil_w != 1:
        raise ValueError(f"the {gather} gather needs dil_w = 1 (one run per filter row); "
                         "fix: use im2col_kernel (the taps gather) for dil_w > 1, as "
                         "argus.ops.conv2d does (_Gather.of)")


def _check_pitch(pitch: int, want: int, factory: str, formula: str) -> None:
    if pitch != want:
        raise ValueError(f"{factory} was built for A's pitch {pitch}, but this geometry's A has "
                         f"{want} columns; build it with {factory}(dtype, {formula})")


def _pixel_origin(g: Im2colGeometry, H, W, M, BM: int):
    """(the CTA index b, then [BM, 1] index tiles of this thread's pixel m = b * BM + t: its
    image n, first input row h0 and first input column w0) of a pixel kernel: A's rows are the
    N * P * Q output pixels in order, P and Q following from the input's H, W and `g`."""
    P = (H + 2 * g.pad_h - g.dil_h * (g.r - 1) - 1) // g.stride_h + 1
    Q = (W + 2 * g.pad_w - (g.s - 1) - 1) // g.stride_w + 1
    (b,) = ag.grid(ag.cdiv(M, BM))
    m = b * BM + ag.arange(BM)[:, None]
    q, nq = m % Q, m / Q
    p, n = nq % P, nq / P
    return b, n, p * g.stride_h - g.pad_h, q * g.stride_w - g.pad_w


@functools.lru_cache(maxsize=None)
def im2col_pixels_kernel(dtype: DType, pitch: int) -> ag.KernelFunction:
    """The row-run kernel's gather (`im2col_rows_kernel`: same X view, same A layout, so the
    same weight matrix) with one output pixel a thread instead of one a warp: each thread
    builds its pixel's row of A, `PIXEL_CHUNK` columns at a time, with `ag.gather` (the
    chunk's columns are trace-time constants: slot r = k // slot, offset k % slot, so each
    element's input row and column are the pixel's h0 and e0 plus constants) and stores each
    chunk with one 16-byte store (the gather's "rows" layout: a thread's 8 registers are 8
    consecutive columns of A). The warp kernel moves one element a lane per store (STG.U16:
    ~202 SASS instructions a pixel, docs/perf/conv.md); this one 16 bytes a thread.

    Padding: an input row outside [0, H) or a column outside X's row [0, W * C) is outside X,
    which the gather reads as 0; columns of A that hold no input (a slot's gap, slot R, the
    pitch's end) get input row -1 (outside X: no load), and slot R's first BIAS_ONES columns
    are 1. X is x's [N, H, W * C] view, A the [N * P * Q, pitch] buffer itself; P and Q follow
    from X's shape and the geometry. Compile-time `geom` (dil_w 1) and BM = PIXELS_PER_CTA;
    `pitch` (the factory's: (R + 1) * row_slot(geom), checked) is A's last extent as a
    compile-time int, so codegen proves every 8-column chunk whole (analysis/alignment.py)
    and compiles no element-by-element store fallback (a symbolic extent is proven so only
    for multiples of 16: the stem's 168 is not).

    Invariant: as `im2col_rows_kernel`'s (every element of A written exactly once: the grid's
    CTAs take disjoint blocks of BM rows, each all pitch / PIXEL_CHUNK chunks)."""
    _check_dtype(dtype)

    def conv_im2col_pixels(X: ag.Tensor["N", "H", "E", dtype],        # [N, H, W * C]
                           A: ag.Tensor[("M", pitch, dtype)],         # [N * P * Q, pitch]
                           geom: Im2colGeometry = Im2colGeometry(1, 1), BM: int = 128):
        g = geom
        _check_unit_dil_w(g, "pixel")
        run, slot = g.s * g.channels, row_slot(g)
        _check_pitch(pitch, (g.r + 1) * slot, "im2col_pixels_kernel", "(R + 1) * row_slot(geom)")
        b, n, h0, w0 = _pixel_origin(g, X.shape[1], X.shape[2] // g.channels, A.shape[0], BM)
        e0 = w0 * g.channels                               # its run's first element
        for c in range(pitch // PIXEL_CHUNK):
            k = c * PIXEL_CHUNK + ag.arange(PIXEL_CHUNK)[None, :]    # [1, 8]: A's columns
            r, j = k / slot, k % slot
            data = (r < g.r) & (j < run)
            # a column with no input reads input row -1: outside X, no load, 0
            h = ag.where(data, h0 + r * g.dil_h, -1)
            x = ag.gather(X, (n, h, e0 + j), other=0.0)
            ones = (r == g.r) & (j < BIAS_ONES)
            x = ag.where(ones, ag.full((1, PIXEL_CHUNK), 1.0, dtype), x)
            ag.store(A, (b * BM, c * PIXEL_CHUNK), _rounded(x, dtype))

    return ag.kernel(conv_im2col_pixels, threads=PIXELS_PER_CTA,
                     name=f"conv_im2col_pixels_{dtype.name}")


# columns of A's row one piece of the staged pixel kernels gathers, stages and TMA-stores,
# about (`staged_pieces`: the nearest equal split into odd 16-byte units): 64, 64 registers of
# values a thread in the register tile the gather builds
STAGED_PIECE_COLUMNS = 64
# TMA stores a CTA of the staged kernels at most before their pieces may be an even number of
# 16-byte units (`staged_pieces`)
STAGED_MAX_PIECES = 16
# shared memory of the staged kernel's [BM, pitch] block at most when every piece keeps its
# own buffer: 2 CTAs an SM fit the H200's 228 KB. Past it (the fp32 11x11 gathers: 208 KB)
# the pieces take turns in one buffer (`staged_reuse`)
STAGED_SMEM_MAX = 112 * 1024


def staged_pieces(pitch: int, dtype: DType) -> tuple[tuple[int, int], ...]:
    """(first column, columns) of each piece of the staged kernels' A row: equal pieces of an
    ODD number of 16-byte units, the count nearest STAGED_PIECE_COLUMNS columns (by ratio)
    that splits the pitch so (the stem's 21 bf16 units: three of 7; AlexNet's 51: three of
    17). Each piece is one [BM, width] shared buffer and one TMA store box (width <= 256
    elements, 16-byte box rows). Equal: the verifier proves store coverage for TMA stores that
    are translates of one box tiling a row without gaps. Odd: a piece's row is then an odd
    multiple of 16 bytes, so the 8 threads of each phase of a 16-byte shared store (rows
    t .. t + 7, one 16-byte unit each) hit 8 distinct bank groups; an even multiple puts 2 to
    8 of them on the same banks (an fp32 row of 8-column chunks: 32 bytes a chunk, every row a
    multiple of 32 bytes, hence the unit rather than PIXEL_CHUNK)."""
    per_unit = 16 // dtype.bytes
    if pitch % per_unit:
        raise ValueError(f"A's pitch {pitch} is not a whole number of 16-byte units of "
                         f"{dtype.name}; its rows must be 16-byte aligned for the TMA store")
    units = pitch // per_unit
    odd = units
    while odd % 2 == 0:
        odd //= 2
    want = STAGED_PIECE_COLUMNS / per_unit

    def nearest(sizes):
        return min(sizes, key=lambda u: max(u / want, want / u))

    u = nearest([u for u in range(1, odd + 1, 2) if odd % u == 0 and u * per_unit <= 256])
    if units // u > STAGED_MAX_PIECES:
        # a pitch of few odd factors (a power of two): even pieces, bank conflicts rather than
        # a TMA store every few columns
        u = nearest([u for u in range(1, units + 1) if units % u == 0 and u * per_unit <= 256])
    return tuple((i * u * per_unit, u * per_unit) for i in range(units // u))


def staged_reuse(pitch: int, dtype: DType) -> bool:
    """Whether the staged kernels' pieces take turns in one shared buffer (the widest piece's
    [BM, width]) instead of each keeping its own: where the CTA's whole [BM, pitch] block
    passes STAGED_SMEM_MAX at BM = PIXELS_PER_CTA. Taking turns costs each piece a wait for
    its TMA store to have read the buffer and a CTA barrier before the next piece's writes
    (the lowering's), but leaves room for more CTAs an SM: the fp32 11x11 gathers held one
    64-pixel CTA of 104 KB, 2 an SM (4 warps) with a buffer each piece (no faster than the
    warp gather on the H200, docs/perf/conv.md)."""
    return PIXELS_PER_CTA * pitch * dtype.bytes > STAGED_SMEM_MAX


def staged_rows(pitch: int, dtype: DType) -> int:
    """BM (= the CTA's threads, one pixel each) of the staged kernels: PIXELS_PER_CTA (the
    pieces share one buffer where the whole block would not fit: `staged_reuse`)."""
    return PIXELS_PER_CTA


def _stage_pieces(X, A, b, bm: int, pitch: int, dtype: DType, columns,
                  at=None, reuse: bool | None = None) -> None:
    """The staged kernels' body after the pixel's origin: per piece (`staged_pieces`), the
    gather of its [bm, width] columns from X (a global tensor, or the span kernels' shared
    view: `columns(k)` -> (the gather's indices, the bias ones' mask) for A's columns k, a
    [1, width] index tile), 16-byte st.shared into the piece's buffer, then one TMA store a
    piece of the CTA's rows at `at(c0)` (default (b * bm, c0): A's [M, pitch] rows; the lowering
    fences the writes and puts a CTA barrier before the first copy). With `staged_reuse` (or
    `reuse=True`) the pieces share one buffer and each is copied out before the next is
    written."""
    if at is None:
        def at(c0):
            return (b * bm, c0)
    reuse = staged_reuse(pitch, dtype) if reuse is None else reuse
    pieces = staged_pieces(pitch, dtype)
    # taking turns: one buffer for every piece (they have one width)
    shared = ag.smem((bm, pieces[0][1]), dtype) if reuse else None
    bufs = []
    for c0, width in pieces:
        indices, ones = columns(c0 + ag.arange(width)[None, :])
        x = ag.gather(X, indices, other=0.0)
        x = ag.where(ones, ag.full((1, width), 1.0, dtype), x)
        sA = shared if reuse else ag.smem((bm, width), dtype)
        ag.store_shared(sA.view(), _rounded(x, dtype))
        if reuse:
            # the copy reads the buffer before the next piece rewrites it (the lowering's
            # read-wait and barrier)
            ag.tma.store(A, at(c0), sA.view())
        else:
            bufs.append((c0, sA))
    # every piece's loads may be in flight before the first copy's barrier
    for c0, sA in bufs:
        ag.tma.store(A, at(c0), sA.view())


@functools.lru_cache(maxsize=None)
def im2col_pixels_staged_kernel(dtype: DType, pitch: int) -> ag.KernelFunction:
    """`im2col_pixels_kernel`'s gather (same X view, same A layout, same weight matrix) with
    A's writes staged through shared memory: each piece of the pixel's row (`staged_pieces`:
    the stem's 168 bf16 columns as three of 56) is gathered into a "rows" register tile [BM, width]
    (a pixel's columns in its thread, trace-time constant (slot, offset) per column), written
    to a [BM, width] shared buffer with 16-byte st.shared (`ag.store_shared`: a row's pitch an
    odd multiple of 16 bytes, so conflict-free), and the CTA's block of A leaves by one TMA
    store a piece (`ag.tma.store`; the lowering puts the proxy fence and the barrier between).
    Why: the unstaged kernel's 16-byte stores land in 32 rows of A a warp instruction (32
    lines), and the pixel gather ran 1.8x slower than the warp gather on the H200
    (docs/perf/conv.md); here the copy engine writes the CTA's block of A (BM rows of `pitch`
    elements, contiguous in A) as BM row segments a piece. Rows past A's last (a partial last
    CTA) are dropped by the TMA store's bounds. Compile-time `geom` (dil_w 1); BM =
    `staged_rows(pitch, dtype)` = the CTA's threads.

    Invariant: as `im2col_rows_kernel`'s (every element of A written exactly once: the grid's
    CTAs take disjoint blocks of BM rows, the pieces disjoint column ranges covering the
    pitch)."""
    _check_dtype(dtype)
    bm = staged_rows(pitch, dtype)

    def conv_im2col_pixels_staged(X: ag.Tensor["N", "H", "E", dtype],        # [N, H, W * C]
                                  A: ag.Tensor[("M", pitch, dtype)],        # [N * P * Q, pitch]
                                  geom: Im2colGeometry = Im2colGeometry(1, 1)):
        g = geom
        _check_unit_dil_w(g, "pixel")
        run, slot = g.s * g.channels, row_slot(g)
        _check_pitch(pitch, (g.r + 1) * slot, "im2col_pixels_staged_kernel",
                     "(R + 1) * row_slot(geom)")
        b, n, h0, w0 = _pixel_origin(g, X.shape[1], X.shape[2] // g.channels, A.shape[0], bm)
        e0 = w0 * g.channels                               # its run's first element

        def columns(k):
            r, j = k / slot, k % slot
            # a column with no input reads input row -1: outside X, no load, 0
            h = ag.where((r < g.r) & (j < run), h0 + r * g.dil_h, -1)
            return (n, h, e0 + j), (r == g.r) & (j < BIAS_ONES)

        _stage_pieces(X, A, b, bm, pitch, dtype, columns)

    return ag.kernel(conv_im2col_pixels_staged, threads=bm,
                     name=f"conv_im2col_pixels_staged_{dtype.name}_{bm}")


@functools.lru_cache(maxsize=None)
def im2col_pixel_planes_staged_kernel(dtype: DType, pitch: int) -> ag.KernelFunction:
    """`im2col_pixel_planes_kernel`'s gather (NCHW x viewed [N, H, C, W], A in slots of
    C * S' ordered (r, c, s)) with A's writes staged through shared memory and TMA-stored, as
    `im2col_pixels_staged_kernel` stages the row runs. Compile-time `geom` (dil_w 1) and
    SP = S' (`plane_slot`); `pitch` (R + 1) * C * S' (checked); BM = `staged_rows`.

    Invariant: as `im2col_planes_kernel`'s (every element of A written exactly once)."""
    _check_dtype(dtype)
    bm = staged_rows(pitch, dtype)

    def conv_im2col_pixel_planes_staged(X: ag.Tensor["N", "H", "C", "W", dtype],  # NCHW
                                        A: ag.Tensor[("M", pitch, dtype)],
                                        geom: Im2colGeometry = Im2colGeometry(1, 1),
                                        SP: int = 1):
        g = geom
        _check_unit_dil_w(g, "pixel")
        slot = g.channels * SP
        _check_pitch(pitch, (g.r + 1) * slot, "im2col_pixel_planes_staged_kernel",
                     "(R + 1) * C * plane_slot(geom)")
        b, n, h0, w0 = _pixel_origin(g, X.shape[1], X.shape[3], A.shape[0], bm)

        def columns(k):
            r, j = k / slot, k % slot
            ch, s = j / SP, j % SP
            h = ag.where((r < g.r) & (s < g.s), h0 + r * g.dil_h, -1)
            return (n, h, ch, w0 + s), (r == g.r) & (j < BIAS_ONES)

        _stage_pieces(X, A, b, bm, pitch, dtype, columns)

    return ag.kernel(conv_im2col_pixel_planes_staged, threads=bm,
                     name=f"conv_im2col_pixel_planes_staged_{dtype.name}_{bm}")


# pixels (threads) a CTA of the span kernels at most: one output row's BQ consecutive pixels
SPAN_PIXELS = 128
# shared memory of a span kernel's input spans at most (`span_tile` halves BQ past it)
SPAN_SMEM_MAX = 64 * 1024


def span_tile(geom: Im2colGeometry, q: int, dtype: DType, planes: bool = False
              ) -> tuple[int, int, int]:
    """(BQ, lead, L) of the span kernels: BQ output pixels of one output row a CTA (a
    multiple of 32 at most SPAN_PIXELS, the row's Q rounded up to the warp where it is
    shorter: Q = 112 takes 128, 55 takes 64), a warp less while the spans pass SPAN_SMEM_MAX; each
    filter row's span starts `lead` elements (x's innermost unit: an element of a
    channels-last row, a column of an NCHW plane) before the CTA's first pixel's run, at a
    16-byte boundary of x's row when q0 * sw * unit is (BQ is a multiple of 8), and is L
    units long (a multiple of 4 * BQ), covering every run of the CTA's pixels."""
    per = 16 // dtype.bytes
    unit = 1 if planes else geom.channels
    bq = min(SPAN_PIXELS, -(-q // 32) * 32)
    pad = geom.pad_w * unit
    lead = -(-pad // per) * per
    rows = geom.r * (geom.channels if planes else 1)

    def length(bq):
        # a multiple of 4 x the threads: codegen vectorizes a blocked [1, L] load 4 elements
        # a thread (register_layouts.blocked_vec; an 8-byte bf16 / 16-byte fp32 LDG), where
        # any other L loads element by element (the stem's 784: 693 LDG.U16 and spills)
        need = lead - pad + ((bq - 1) * geom.stride_w + geom.s) * unit
        return -(-need // (4 * bq)) * 4 * bq
    while bq > 32 and rows * length(bq) * dtype.bytes > SPAN_SMEM_MAX:
        bq -= 32
    return bq, lead, length(bq)


def span_fits(geom: Im2colGeometry, q: int, dtype: DType, planes: bool = False) -> bool:
    """Whether `span_tile`'s spans fit SPAN_SMEM_MAX (at 32 pixels a CTA if need be); a
    filter too tall or wide for it (R * (32 * sw + S) * C elements) takes the staged gather
    (argus.ops.conv's _Gather.of)."""
    bq, _, length = span_tile(geom, q, dtype, planes)
    rows = geom.r * (geom.channels if planes else 1)
    return rows * length * dtype.bytes <= SPAN_SMEM_MAX


def _span_origin(g: Im2colGeometry, X, A, BQ: int):
    """(n, the first input row h0, the CTA's first output column q0, the [BQ, 1] pixel index
    t) of a span kernel's CTA: grid (N * P, cdiv(Q, BQ)), A viewed [N * P, Q, pitch]."""
    P = A.shape[0] // X.shape[0]
    row, qb = ag.grid(A.shape[0], ag.cdiv(A.shape[1], BQ))
    n, p = row // P, row % P
    return row, n, p * g.stride_h - g.pad_h, qb * BQ, ag.arange(BQ)[:, None]


@functools.lru_cache(maxsize=None)
def im2col_pixels_span_kernel(dtype: DType, pitch: int, bq: int) -> ag.KernelFunction:
    """`im2col_pixels_staged_kernel`'s A (same slots, pitch and weight matrix; staged and
    TMA-stored the same way) with the input read once a CTA: the CTA's BQ pixels are BQ
    consecutive output columns q0.. of one output row, so filter row r's runs of all of them
    lie in ONE span of input row h0 + r * dil_h, `span_tile`'s L elements from
    e = q0 * sw * C - lead (16-byte aligned). Each span is loaded by the CTA's threads
    together (coalesced 16-byte loads; padding columns and rows outside x read zeros by the
    load's bounds) and stored to a [R, L] shared buffer; then each thread gathers its pixel's
    row of A from shared memory (ag.gather of the view: one ld.shared a value, after the CTA
    barrier the lowering puts there) instead of from global memory: the staged kernel's 147
    2-byte global loads a stem pixel, ~4 lines each a warp, become ~1 16-byte load a thread
    a filter row. X is x's [N, H, W * C] view, A the [N * P * Q, pitch] buffer viewed
    [N * P, Q, pitch] (the TMA store drops a row's pixels past Q). Compile-time `geom`
    (dil_w 1), LEAD and L, and the factory's `bq` (the CTA's threads) from `span_tile`.

    Invariant: as `im2col_rows_kernel`'s (every element of A written exactly once: the grid's
    CTAs take disjoint [BQ] column blocks of each output row, the pieces disjoint column
    ranges covering the pitch)."""
    _check_dtype(dtype)

    def conv_im2col_pixels_span(X: ag.Tensor["N", "H", "E", dtype],          # [N, H, W * C]
                                A: ag.Tensor[("NP", "Q", pitch, dtype)],    # [N*P, Q, pitch]
                                geom: Im2colGeometry = Im2colGeometry(1, 1), LEAD: int = 0,
                                L: int = 8):
        g = geom
        _check_unit_dil_w(g, "span")
        run, slot = g.s * g.channels, row_slot(g)
        _check_pitch(pitch, (g.r + 1) * slot, "im2col_pixels_span_kernel",
                     "(R + 1) * row_slot(geom)")
        row, n, h0, q0, t = _span_origin(g, X, A, bq)
        e_span = q0 * (g.stride_w * g.channels) - LEAD         # 16-byte aligned
        sX = ag.smem((g.r, L), dtype)
        for r in range(g.r):
            ag.store_shared(sX.view().rows_of(r, 1),
                            ag.load(X, (n, h0 + r * g.dil_h, e_span), (1, L), other=0.0))
        # pixel t's run starts at element t * sw * C + (LEAD - pw * C) of each span
        e0 = t * (g.stride_w * g.channels) + (LEAD - g.pad_w * g.channels)

        def columns(k):
            r, j = k / slot, k % slot
            # a column with no input reads span row -1: outside the view, 0
            return (ag.where((r < g.r) & (j < run), r, -1), e0 + j), \
                (r == g.r) & (j < BIAS_ONES)

        _stage_pieces(sX.view(), A, row, bq, pitch, dtype, columns,
                      at=lambda c0: (row, q0, c0))

    return ag.kernel(conv_im2col_pixels_span, threads=bq,
                     name=f"conv_im2col_pixels_span_{dtype.name}_{bq}")


@functools.lru_cache(maxsize=None)
def im2col_pixel_planes_span_kernel(dtype: DType, pitch: int, bq: int) -> ag.KernelFunction:
    """`im2col_pixel_planes_staged_kernel`'s A (NCHW x viewed [N, H, C, W], slots of C * S'
    ordered (r, c, s)) with the input read once a CTA, as `im2col_pixels_span_kernel` reads
    the row runs: per filter row r, the C channels' spans of input row h0 + r * dil_h
    (`span_tile(..., planes=True)`: L columns from w = q0 * sw - lead) as one [C, L] load into
    rows r * C .. r * C + C - 1 of a [R * C, L] shared buffer; each thread then gathers its
    pixel's row of A from it. Compile-time `geom` (dil_w 1), SP = S' (`plane_slot`), LEAD
    and L, the factory's `bq`; `pitch` (R + 1) * C * S' (checked).

    Invariant: as `im2col_planes_kernel`'s (every element of A written exactly once)."""
    _check_dtype(dtype)

    def conv_im2col_pixel_planes_span(X: ag.Tensor["N", "H", "C", "W", dtype],    # NCHW
                                      A: ag.Tensor[("NP", "Q", pitch, dtype)],
                                      geom: Im2colGeometry = Im2colGeometry(1, 1),
                                      SP: int = 1, LEAD: int = 0, L: int = 8):
        g = geom
        _check_unit_dil_w(g, "span")
        C = g.channels
        slot = C * SP
        _check_pitch(pitch, (g.r + 1) * slot, "im2col_pixel_planes_span_kernel",
                     "(R + 1) * C * plane_slot(geom)")
        row, n, h0, q0, t = _span_origin(g, X, A, bq)
        w_span = q0 * g.stride_w - LEAD                          # 16-byte aligned
        sX = ag.smem((g.r * C, L), dtype)
        for r in range(g.r):
            ag.store_shared(sX.view().rows_of(r * C, C),
                            ag.load(X, (n, h0 + r * g.dil_h, 0, w_span), (C, L), other=0.0))
        w0 = t * g.stride_w + (LEAD - g.pad_w)          # pixel t's first column in the span

        def columns(k):
            r, j = k / slot, k % slot
            ch, s = j / SP, j % SP
            return (ag.where((r < g.r) & (s < g.s), r * C + ch, -1), w0 + s), \
                (r == g.r) & (j < BIAS_ONES)

        _stage_pieces(sX.view(), A, row, bq, pitch, dtype, columns,
                      at=lambda c0: (row, q0, c0))

    return ag.kernel(conv_im2col_pixel_planes_span, threads=bq,
                     name=f"conv_im2col_pixel_planes_span_{dtype.name}_{bq}")


def plane_slot(geom: Im2colGeometry) -> int:
    """S', the columns one channel's run takes in `im2col_planes_kernel`'s layout: S rounded
    up so that A's pitch, (R + 1) slots of C * S' (the last the bias tap's), is a multiple of
    8 elements (16-byte rows for the GEMM's TMA)."""
    sp = geom.s
    while (geom.r + 1) * geom.channels * sp % 8:
        sp += 1
    return sp


def planes_tile(geom: Im2colGeometry) -> tuple[int, int, int]:
    """(BQ, CB, LB) of `im2col_planes_kernel`: CB the channels and LB the run S' rounded up to
    powers of two (CB * LB >= 32 is the caller's condition: one element a lane at least), BQ
    output columns a CTA (a power of two up to 16) whose BQ * R tiles fit
    ROW_LOADS_PER_THREAD registers a thread. A first choice, not measured on the H200."""
    cb, lb = 1, 1
    while cb < geom.channels:
        cb *= 2
    while lb < plane_slot(geom):
        lb *= 2
    bq = 16
    while bq > 1 and bq * geom.r * max(1, cb * lb // 32) > ROW_LOADS_PER_THREAD:
        bq //= 2
    return bq, cb, lb


@functools.lru_cache(maxsize=None)
def im2col_planes_kernel(dtype: DType = dtypes.bf16) -> ag.KernelFunction:
    """The gather for a filter without column dilation on an input whose rows are contiguous
    per channel (NCHW, KernelBench's layout): for output pixel (n, p, q) and filter row r, each
    channel's S taps are one run of that channel's input row, so the C runs are one
    [C, S] box of x viewed as [N, H, C, W] (strides of NCHW memory): a warp (the CTA: 32
    threads) loads and stores a [CB, LB] tile of them, bounds exact on every axis (a channel
    past C, a row outside [0, H), a column outside [0, W): zeros, or dropped).

    A's layout: K ordered (r, c, s): each pixel's row is R + 1 slots of C * S' columns
    (`plane_slot`, pitch (R + 1) * C * S'): slot r holds channel c's run at r * C * S' +
    c * S' + s, zeros for S <= s < S'; slot R is the bias tap (its first BIAS_ONES columns 1,
    then 0). argus.ops.conv lays the weight out the same way. The kernel's A is
    [N * P, Q * (R + 1), C, S'] (a view of the contiguous buffer). Compile-time `geom`
    (dil_w 1), (BQ, CB, LB) from `planes_tile` and SP = S'.

    Invariant: A[(n * P + p) * Q + q, r * C * S' + c * S' + s] = x[n, c, p * sh + r * dh - ph,
    q * sw + s - pw] (0 outside the input) for s < S, 0 for S <= s < S'; the bias slot as
    said; fp32 values rounded to tf32; every element of A written exactly once."""
    _check_dtype(dtype)

    def conv_im2col_planes(X: ag.Tensor["N", "H", "C", "W", dtype],      # NCHW as [N,H,C,W]
                           A: ag.Tensor["NP", "J", "CA", "SP", dtype],   # [N*P, Q*(R+1), C, S']
                           geom: Im2colGeometry = Im2colGeometry(1, 1), BQ: int = 8,
                           CB: int = 4, LB: int = 8, SP: int = 1):
        g = geom
        _check_unit_dil_w(g, "plane-run")
        slots = g.r + 1
        P = A.shape[0] // X.shape[0]
        row, qb = ag.grid(A.shape[0], ag.cdiv(A.shape[1], BQ * slots))
        n, p = row // P, row % P
        q0 = qb * BQ
        s_index = ag.arange(LB)[None, None, :]
        # lanes past the run (s >= S) read the next columns' values: zeroed (the gap)
        inside = s_index < g.s
        runs = []
        for i in range(BQ):
            # the runs' first column; negative or past the row: zeros (X's W bounds)
            w0 = (q0 + i) * g.stride_w - g.pad_w
            for r in range(g.r):
                h = p * g.stride_h + (r * g.dil_h - g.pad_h)
                runs.append(ag.load(X, (n, h, 0, w0), (1, CB, LB), other=0.0))
        flat = ag.arange(CB)[None, :, None] * SP + s_index
        one = ag.where(flat < BIAS_ONES, ag.full((1, CB, LB), 1.0),
                       ag.full((1, CB, LB), 0.0)).to(A.dtype)
        # every load above is issued before the first store: BQ * R tiles in flight a warp
        j0 = q0 * slots
        for i in range(BQ):
            for r in range(g.r):
                x = ag.where(inside, runs[i * g.r + r], ag.full((1, CB, LB), 0.0, dtype))
                ag.store(A, (row, j0 + i * slots + r, 0, 0), _rounded(x, dtype))
            ag.store(A, (row, j0 + i * slots + g.r, 0, 0), one)

    return ag.kernel(conv_im2col_planes, threads=32, name=f"conv_im2col_planes_{dtype.name}")


@functools.lru_cache(maxsize=None)
def im2col_pixel_planes_kernel(dtype: DType, pitch: int) -> ag.KernelFunction:
    """The plane-run kernel's gather (`im2col_planes_kernel`: same X view [N, H, C, W] of an
    NCHW x, same A layout (r, c, s) in slots of C * S', so the same weight matrix) one output
    pixel a thread, as `im2col_pixels_kernel` does the row runs: per PIXEL_CHUNK columns of
    A's row, column k is (r, c, s) = (k // (C * S'), k % (C * S') // S', k % S') at trace time,
    read from x[n, c, h0 + r * dil_h, w0 + s] (outside x: 0) for r < R and s < S, input row -1
    (no load, 0) otherwise, slot R's first BIAS_ONES columns 1; one 16-byte store a chunk.
    Compile-time `geom` (dil_w 1), BM = PIXELS_PER_CTA and SP = S' (`plane_slot`); `pitch`
    as `im2col_pixels_kernel`'s ((R + 1) * C * S', checked).

    Invariant: as `im2col_planes_kernel`'s (every element of A written exactly once)."""
    _check_dtype(dtype)

    def conv_im2col_pixel_planes(X: ag.Tensor["N", "H", "C", "W", dtype],   # NCHW as NHCW
                                 A: ag.Tensor[("M", pitch, dtype)],      # [N * P * Q, pitch]
                                 geom: Im2colGeometry = Im2colGeometry(1, 1), BM: int = 128,
                                 SP: int = 1):
        g = geom
        _check_unit_dil_w(g, "pixel")
        slot = g.channels * SP
        _check_pitch(pitch, (g.r + 1) * slot, "im2col_pixel_planes_kernel",
                     "(R + 1) * C * plane_slot(geom)")
        b, n, h0, w0 = _pixel_origin(g, X.shape[1], X.shape[3], A.shape[0], BM)
        for c in range(pitch // PIXEL_CHUNK):
            k = c * PIXEL_CHUNK + ag.arange(PIXEL_CHUNK)[None, :]    # [1, 8]: A's columns
            r, j = k / slot, k % slot
            ch, s = j / SP, j % SP
            data = (r < g.r) & (s < g.s)
            h = ag.where(data, h0 + r * g.dil_h, -1)
            x = ag.gather(X, (n, h, ch, w0 + s), other=0.0)
            ones = (r == g.r) & (j < BIAS_ONES)
            x = ag.where(ones, ag.full((1, PIXEL_CHUNK), 1.0, dtype), x)
            ag.store(A, (b * BM, c * PIXEL_CHUNK), _rounded(x, dtype))

    return ag.kernel(conv_im2col_pixel_planes, threads=PIXELS_PER_CTA,
                     name=f"conv_im2col_pixel_planes_{dtype.name}")


def voxel_pitch(geom: Im2colGeometry, dtype: DType) -> int:
    """A's pitch in `im2col_voxels_staged_kernel`'s compact layout: the T * R * S * C taps'
    columns and BIAS_ONES bias columns, rounded up to whole 16-byte units (the GEMM's and the
    TMA store's row alignment), then to the first count of units (at most a piece's worth
    more) that `staged_pieces` splits into one piece, or into at most STAGED_MAX_PIECES
    pieces within 2x of STAGED_PIECE_COLUMNS: L1/60's 317 bf16 columns are 40 units, 8 pieces
    of 5 (41, a prime, would be 41 one-unit pieces: 41 TMA stores a CTA, and 255 registers
    with spills), its 317 fp32 columns 81 units, 3 pieces of 27 (80 would be 16 of 5). A row
    too long for that many pieces is rounded up to whole pieces of want + 1 units (odd).

    Compact, not slotted as the 2-d gathers' layouts: those pad each filter row's run so the
    warp kernels store whole slots, which costs a 2x2x2 filter of 3 channels (a strided
    transposed convolution's phase) 120 columns for 24 values; this kernel computes every
    column's source at trace time, so any order costs the same."""
    per_unit = 16 // dtype.bytes
    want = STAGED_PIECE_COLUMNS // per_unit
    least = -(-(geom.t * geom.r * geom.s * geom.channels + BIAS_ONES) // per_unit)
    for units in range(least, least + 2 * want + 1):
        pieces = staged_pieces(units * per_unit, dtype)
        size = pieces[0][1] // per_unit
        if len(pieces) == 1 or (len(pieces) <= STAGED_MAX_PIECES and
                                max(size / want, want / size) <= 2):
            return units * per_unit
    return -(-least // (want + 1)) * (want + 1) * per_unit


# pieces a voxel gather's CTA keeps in flight, each in its own buffer, at most: the 2-d stem's
# 3 (bf16, 168 columns) compile without spills; L1/60's 8 bf16 pieces of 40 took 255 registers
# and spilled (sm_90a, NVRTC 13), and 2 CTAs an SM
VOXEL_PIECES_AT_ONCE = 3


def voxel_reuse(pitch: int, dtype: DType) -> bool:
    """Whether the voxel gather's pieces take turns in one shared buffer: more than
    VOXEL_PIECES_AT_ONCE pieces, or a block past STAGED_SMEM_MAX (`staged_reuse`). Taking
    turns costs each piece a wait for its TMA store to have read the buffer and a CTA barrier
    (L1/60 bf16: 80-93 registers and a 10 KB buffer, so many CTAs an SM hide those waits;
    not measured on the H200)."""
    return len(staged_pieces(pitch, dtype)) > VOXEL_PIECES_AT_ONCE or \
        staged_reuse(pitch, dtype)


@functools.lru_cache(maxsize=None)
def im2col_voxels_staged_kernel(dtype: DType, pitch: int, planes: bool) -> ag.KernelFunction:
    """The gather of a 3-d convolution (a depth axis: `geom.t` depth taps, stride_d, pad_d,
    dil_d) with few input channels, staged as `im2col_pixels_staged_kernel`: one output voxel
    a thread, each piece of its row of A (`staged_pieces`) gathered into a "rows" register
    tile, written to shared memory with 16-byte st.shared, and the CTA's block of A leaves by
    one TMA store a piece (the pieces taking turns in one buffer past VOXEL_PIECES_AT_ONCE:
    `voxel_reuse`). X is a view of x, read in place:

    - `planes=False` (channels-last x: each pixel's C channels contiguous, the pixels of a row
      at a pitch of C): X is [N, D, H, W * C]; A's columns ordered (t, r, s, c);
    - `planes=True` (each channel's rows contiguous: NCDHW, KernelBench's layout): X is
      [N, D, H, C, W]; A's columns ordered (t, r, c, s).

    A is the [N * OD * P * Q, pitch] buffer (rows: the output voxels in order), `pitch` =
    `voxel_pitch(geom, dtype)` (checked): the taps' T * R * S * C columns dense from column 0
    in the kind's order, then the bias tap (BIAS_ONES ones), then zeros; argus.ops.conv lays
    the weight out the same way. Every column's (t, r, s, c) is a trace-time constant, so each
    element's input index is the voxel's origin (d0, h0, w0) plus constants: depth, row or
    column outside x reads 0 by the gather's bounds on that axis (a column index outside W, or
    for `planes=False` a run element outside [0, W * C)), and a column with no input gets input
    row -1 (no load). Column dilation is a constant stride of the columns (no run needed: the
    2-d pixel kernels' dil_w = 1 rule is for their row runs). Compile-time `geom`; BM =
    `staged_rows(pitch, dtype)` = the CTA's threads.

    Invariant: A[((n * OD + od) * P + p) * Q + q, col(t, r, s, c)] = x[n, c, od * sd + t * dd -
    pd, p * sh + r * dh - ph, q * sw + s * dw - pw] (0 outside x; fp32 rounded to tf32), the
    bias columns T*R*S*C .. + BIAS_ONES - 1 one, every other column 0; every element of A
    written exactly once (the grid's CTAs take disjoint blocks of BM rows, the pieces disjoint
    column ranges covering the pitch)."""
    _check_dtype(dtype)
    bm = staged_rows(pitch, dtype)
    x_axes = ("N", "D", "H", "C", "W", dtype) if planes else ("N", "D", "H", "E", dtype)

    def conv_im2col_voxels_staged(X: ag.Tensor[x_axes],               # a view of x
                                  A: ag.Tensor[("M", pitch, dtype)],  # [N*OD*P*Q, pitch]
                                  geom: Im2colGeometry = Im2colGeometry(1, 1)):
        g = geom
        C = g.channels
        taps = g.t * g.r * g.s * C                     # A's data columns
        _check_pitch(pitch, voxel_pitch(g, dtype), "im2col_voxels_staged_kernel",
                     "voxel_pitch(geom, dtype)")
        D, H = X.shape[1], X.shape[2]
        W = X.shape[4] if planes else X.shape[3] // C
        OD = (D + 2 * g.pad_d - g.dil_d * (g.t - 1) - 1) // g.stride_d + 1
        P = (H + 2 * g.pad_h - g.dil_h * (g.r - 1) - 1) // g.stride_h + 1
        Q = (W + 2 * g.pad_w - g.dil_w * (g.s - 1) - 1) // g.stride_w + 1
        (b,) = ag.grid(ag.cdiv(A.shape[0], bm))
        m = b * bm + ag.arange(bm)[:, None]            # this thread's voxel (A's row)
        q, rest = m % Q, m / Q
        p, rest = rest % P, rest / P
        od, n = rest % OD, rest / OD
        d0 = od * g.stride_d - g.pad_d
        h0 = p * g.stride_h - g.pad_h
        w0 = q * g.stride_w - g.pad_w

        def columns(k):
            # k = ((t * R + r) * S + s) * C + c (rows) or ((t * R + r) * C + c) * S + s
            # (planes): trace-time constants of A's column, [1, width]
            tr = k / (g.s * C)
            t, r, j = tr / g.r, tr % g.r, k % (g.s * C)
            d = d0 + t * g.dil_d
            # a column past the taps reads input row -1: outside X, no load, 0
            h = ag.where(k < taps, h0 + r * g.dil_h, -1)
            ones = (k >= taps) & (k < taps + BIAS_ONES)
            if planes:
                c, s = j / g.s, j % g.s
                return (n, d, h, c, w0 + s * g.dil_w), ones
            s, c = j / C, j % C
            # the element of the [W * C] row; a column outside [0, W) lands outside it
            return (n, d, h, (w0 + s * g.dil_w) * C + c), ones

        # more pieces than the 2-d stem's 3 take turns in one buffer (`voxel_reuse`)
        _stage_pieces(X, A, b, bm, pitch, dtype, columns, reuse=voxel_reuse(pitch, dtype))

    kind = "planes" if planes else "rows"
    return ag.kernel(conv_im2col_voxels_staged, threads=bm,
                     name=f"conv_im2col_voxels_{kind}_staged_{dtype.name}_{bm}")
