"""The interleave of a strided transposed convolution's output phases: one Argus kernel writes
the NCDHW output rows of one (depth, row) phase pair from the stride-1 convolutions of its
width phases (argus.ops.conv `_conv_transpose`), instead of one strided torch copy per phase.

Output o along an axis of stride s belongs to phase o % s and is that phase's element o // s
(its convolution's output, cropped to the phase's first row: the caller's view). A launch takes
the rows od = a_d + s_d * jd, oh = a_h + s_h * jh of the output (O, the [N, Dq, Hq, OW, K, 1]
view of them: a unit last dim, the contiguous one a kernel tensor needs, so that a tile's
output positions may be its dim 0 and its channels the next) and the s_w phase sources of
(a_d, a_h), one tensor parameter each. A CTA of T threads (T = BK = BW: 32, or 64) writes
a [BK channels, BW outputs] tile of one output row; with a channels-last source (the im2col
route's result, the channels-last epilogue's) in two steps ("staged"):

1. element (k, ow) read from source ow % s_w at (n, jd, jh, ow // s_w, k) by `ag.gather`
   (other phases' elements get index -1: no load) and chosen with `ag.where` (a select:
   bit-exact, -0.0 kept; a 16-bit value passes through an fp32 register, exact for every
   number, a NaN stays NaN with the conversion's canonical payload). The gather gives a
   thread one channel's row, so a warp's gather of one column reads 32 consecutive channels
   of one pixel of a channels-last source (128 coalesced bytes in fp32) or, from an NCDHW
   source beside it, each thread consecutive elements of its own row;
2. the tile goes to shared memory (`ag.store_shared`, a row a thread) and comes back as a
   [BW, BK, 1] gather of it whose dim 0, the threads, is the output position: a warp's store
   of one channel is 32 consecutive outputs of one row, coalesced whatever the row's
   alignment (KernelBench's output widths are often odd: a thread-row store of step 1's
   tile would be 32 scattered 4-byte stores a warp instruction). One store site, so the
   verifier proves its coverage.

With NCDHW sources only (the implicit GEMM's NCHW epilogue, the depthwise route) the kernel
is "direct": one [BW, BK, 1] gather, the threads along the outputs, read (a warp's load of a
phase: 32 / s_w consecutive elements of its row) and stored (32 consecutive outputs) with no
shared memory. The op no longer launches it (the rows form below replaced it; the GPU bench
scripts/gpu_conv_interleave_bench.py keeps it as the baseline): its one-warp CTAs of 4 KB
out ran KernelBench L1/73's interleave at ~1.2 TB/s on the H200 (1.78 ms for 1.04 GB out).

The rows form (`interleave_rows_kernel`, NCDHW / bias / zero sources, what the op launches
when no source is channels-last): O is seen as [N, K, Dq, OW, Hq, 1] and a CTA of T = 64, 128
or 256 threads writes a [T outputs, RH rows] tile of one (n, k, jd) plane, the threads along
the output row (a warp's store: 32 consecutive elements of one row, coalesced at any row
alignment; its load of a phase: 32 / s_w consecutive elements), each thread RH (<= 16) rows:
up to 16 KB out a CTA (CTA launch rate no longer the limit), RH independent loads a phase and
RH stores in flight a thread, 64 registers a thread (ag.occupancy: 1024 threads an SM; a
64-thread CTA gets 128, ag.occupancy's cap being 8 CTAs: 512 threads) with no spills (`rows_tile` caps RH x the number of loaded phases at 48). The stores are 4-byte:
odd output widths (KernelBench's are often odd) leave 3 of 4 rows unaligned for 16-byte
vectors, whose scalar fallback would split a warp's store over 4x the sectors.

So every byte is read once and written once (2x the output's bytes, the strided copies'
traffic, which also transposed), in prod(stride[:-1]) launches instead of prod(stride) torch
copies.

Source kinds (per width phase, compile-time, in the generated kernel's name): "cl" a
channels-last [N, nd, nh, nw, K] view, "nc" an NCDHW [N, K, nd, nh, nw] view, "bias" a phase
no tap reaches whose outputs are the bias B[k], "zero" such a phase without a bias.

Invariant: every element of O is stored exactly once (the grid's CTAs take disjoint
[BK, BW] tiles of the N * Dq * Hq rows, masked at K and OW; rows form: disjoint [T, RH] tiles
of the N * K * Dq planes, masked at OW and Hq), with the value of exactly one source: the one
whose phase is ow % s_w (the selects' conditions are disjoint and cover it).

Grids: the rows (staged / direct: output rows) are the grid's x, up to 2^31 - 1 CTAs; the
row and width blocks (channel and width blocks) its y and z, few at KernelBench's sizes. Past
CUDA's 65535 along y or z (rows form: Hq over RH x 65535 rows, OW over BW x 65535) the launch
runs with the whole grid folded onto x (runtime/interp/launch.py `launch_grid`: neither form
uses clusters, codegen decodes the ids from blockIdx.x); a grid past 2^31 - 1 CTAs in all is a
LaunchError before anything runs (tests/interp/test_conv_interleave.py).
"""

from __future__ import annotations

import linecache

from argus import dtypes

KINDS = ("cl", "nc", "bias", "zero")
_DTYPES = {"f32": dtypes.f32, "bf16": dtypes.bf16, "f16": dtypes.f16}
_KERNELS: dict = {}


def interleave_kernel(kinds: tuple[str, ...], stride: int, dtype: str = "f32", bk: int = 32,
                      out: str = "nc"):
    """The kernel for width phases of `kinds` (len(kinds) <= stride: an output narrower than
    the stride has fewer phases) at width stride `stride` in `dtype` ("f32", "bf16", "f16"):
    parameters O, then one Yi per "cl" / "nc" phase i, then B when a phase is "bias"; a
    [bk, bk] tile a CTA of bk threads (32 or 64: a thread holds a row of bk values).

    out="cl": a channels-last output (a channels-last x's transposed convolution, torch's
    layout for it): O is the [N, Dq, Hq, K, OW, 1] view of the rows (channels the stride-1
    dim) and the tile [BK channels, BW outputs, 1] is stored as gathered, a thread a channel:
    a warp's store of one output is its 32 consecutive channels (coalesced), as is its gather
    of a channels-last source; no shared memory. Any source kind ("nc": a thread's reads
    along its own channel row)."""
    if out not in ("nc", "cl"):
        raise ValueError(f"interleave_kernel: out={out!r} is 'nc' or 'cl'")
    if not kinds or len(kinds) > stride or any(k not in KINDS for k in kinds):
        raise ValueError(f"interleave_kernel: kinds {kinds} must be 1..{stride} of {KINDS}")
    if dtype not in _DTYPES:
        raise ValueError(f"interleave_kernel: dtype {dtype!r} is not one of {tuple(_DTYPES)}")
    if bk not in (32, 64):
        raise ValueError(f"interleave_kernel: bk={bk} is not 32 or 64")
    key = (kinds, stride, dtype, bk, out)
    if key not in _KERNELS:
        name = f"conv_interleave_{dtype}_s{stride}_{'_'.join(kinds)}_k{bk}" + \
            ("_ocl" if out == "cl" else "")
        source = _cl_out_source(name, kinds, stride, dtype, bk) if out == "cl" else \
            _source(name, kinds, stride, dtype, bk)
        _KERNELS[key] = _load(source, name)
    return _KERNELS[key]


def _cl_out_source(name: str, kinds: tuple[str, ...], stride: int, dt: str, bk: int) -> str:
    """interleave_kernel(out="cl"): O [N, Dq, Hq, K, OW, 1], a [BK, BW, 1] tile a CTA of BK
    threads (dim 0, the channels, the threads), gathered and stored as it is."""
    params = [f'O: ag.Tensor["N", "DQ", "HQ", "K", "OW", 1, ag.{dt}]'] + _source_params(kinds, dt)
    lines = _row_tile_lines(name, params, bk, (3, 4), "[:, None, None]", "[None, :, None]")
    lines += _phase_lines(stride, bk, "[None, :, None]")
    lines += _select_lines(kinds, dt, "k + ow * 0", "(BK, BW, 1)")
    lines.append("    ag.store(O, (n, jd, jh, kb * BK, wb * BW, 0), x)")
    return "\n".join(lines) + "\n"


def _row_tile_lines(name: str, params: list[str], bk: int, axes: tuple[int, int], row: str,
                    col: str) -> list[str]:
    """The kernel's header and one CTA's [BK, BW] tile of one output row (n, jd, jh) of O
    [N, DQ, HQ, .., .., 1], whose channel and width axes are `axes`: k (arange(BK)`row`) and
    ow (arange(BW)`col`)."""
    ka, wa = axes
    return [f"@ag.kernel(threads={bk})",
            f"def {name}({', '.join(params)}):",
            f"    BK = BW = {bk}                        # a tile's channels and outputs",
            "    # one CTA a [BK, BW] tile of one output row (n, jd, jh): the rows are the",
            "    # grid's x (up to 2^31 - 1), channel and width blocks y and z (few)",
            ("    r, kb, wb = ag.grid(O.shape[0] * O.shape[1] * O.shape[2], "
             f"ag.cdiv(O.shape[{ka}], BK), ag.cdiv(O.shape[{wa}], BW))"),
            "    jh = r % O.shape[2]",
            "    jd = (r // O.shape[2]) % O.shape[1]",
            "    n = r // (O.shape[2] * O.shape[1])",
            f"    k = kb * BK + ag.arange(BK){row}",
            f"    ow = wb * BW + ag.arange(BW){col}"]


def _source_params(kinds: tuple[str, ...], dt: str) -> list[str]:
    """The generated kernel's parameters after O: Yi for each source phase i ("cl" / "nc"),
    each with symbols of its own (the phases' widths differ; their batch and channels are
    checked by the caller that cut the views), then B where a phase is "bias"."""
    params = []
    for i, kind in enumerate(kinds):
        if kind in ("cl", "nc"):
            dims = ", ".join(f'"{d}{i}"' for d in ("A", "B", "C", "E", "F"))
            params.append(f"Y{i}: ag.Tensor[{dims}, ag.{dt}]")
    if "bias" in kinds:
        params.append(f'B: ag.Tensor["KB", ag.{dt}]')
    return params


def _phase_lines(stride: int, per_block: int, col: str) -> list[str]:
    """`a` (each output's width phase) and `j` (its place in that phase's source) over a
    block of `per_block` outputs (BW) indexed by arange(BW)`col`. Where a block starts at a
    whole stride each output's phase is a constant, so the compiler drops the loads (and
    selects) of the other phases' outputs at compile time (no runtime mod)."""
    if per_block % stride == 0:
        return [f"    a = ag.arange(BW){col} % {stride}",
                f"    j = wb * {per_block // stride} + ag.arange(BW){col} / {stride}"]
    return [f"    a = ow % {stride}", f"    j = ow / {stride}"]


def _select_lines(kinds: tuple[str, ...], dt: str, bias_k: str, shape: str) -> list[str]:
    """x, the tile's values: phase i's where a == i, one ag.where a phase: its source's
    gather ("cl" [N, nd, nh, nw, K], "nc" NCDHW; an index of -1, past the source, reads 0
    for the other phases' outputs), the bias (gathered at index `bias_k`, the tile's shape)
    or 0; the first source's gather taken as is, the others' 0s replaced after it."""
    lines, first = [], True
    for i, kind in enumerate(kinds):
        mine = f"a == {i}"
        if kind == "cl":
            value = f"ag.gather(Y{i}, (n, jd, jh, ag.where({mine}, j, -1), k))"
        elif kind == "nc":
            value = f"ag.gather(Y{i}, (n, k, jd, jh, ag.where({mine}, j, -1)))"
        elif kind == "bias":
            value = f"ag.gather(B, ({bias_k},))"
        else:
            value = "0.0"
        if first and kind in ("cl", "nc"):
            lines.append(f"    x = {value}")           # other phases' outputs read 0, replaced
            first = False
        elif first:
            lines.append(f"    x = ag.where({mine}, {value}, ag.full({shape}, 0.0, ag.{dt}))")
            first = False
        else:
            lines.append(f"    x = ag.where({mine}, {value}, x)")
    return lines


def _source(name: str, kinds: tuple[str, ...], stride: int, dt: str, bk: int) -> str:
    params = [f'O: ag.Tensor["N", "DQ", "HQ", "OW", "K", 1, ag.{dt}]'] + _source_params(kinds, dt)
    # staged (a channels-last source): the gather's threads run along the channels, so its
    # loads are coalesced, and shared memory turns the tile for the store; direct (NCDHW
    # sources only): the threads run along the outputs for the loads and the store alike
    staged = "cl" in kinds
    # index tiles: [BK, BW] (channel, output) staged, [BW, BK, 1] (output, channel) direct
    col, row = ("[None, :]", "[:, None]") if staged else ("[:, None, None]",
                                                         "[None, :, None]")
    lines = _row_tile_lines(name, params, bk, (4, 3), row, col)
    lines += _phase_lines(stride, bk, col)
    # the bias gathered at the tile's own shape: a rows tile whose dim 0 is the threads
    bias_k = "k" if staged else "k + ow * 0"
    shape = "(BK, BW)" if staged else "(BW, BK, 1)"
    lines += _select_lines(kinds, dt, bias_k, shape)
    if not staged:
        lines.append("    ag.store(O, (n, jd, jh, wb * BW, kb * BK, 0), x)")
        return "\n".join(lines) + "\n"
    lines += [
        "    # through shared memory: a thread's row (one channel) in; out as a [BW, BK, 1]",
        "    # tile whose dim 0 (the threads) is the output position: a warp's store of one",
        "    # channel is 32 consecutive outputs of one row (coalesced)",
        f"    sX = ag.smem((BK, BW), ag.{dt})",
        "    ag.store_shared(sX.view(), x)",
        ("    t = ag.gather(sX.view(), (ag.arange(BK)[None, :, None], "
         "ag.arange(BW)[:, None, None]))"),
        "    ag.store(O, (n, jd, jh, wb * BW, kb * BK, 0), t)"]
    return "\n".join(lines) + "\n"


# the rows form (NCDHW, bias and zero sources: no channels-last one): a CTA of `threads`
# threads writes a [BW = threads outputs, RH rows] tile of one (image, channel, depth) plane
_ROWS_THREADS = (64, 128, 256)
_ROWS_RH = (1, 2, 4, 8, 16)


def interleave_rows_kernel(kinds: tuple[str, ...], stride: int, dtype: str = "f32",
                           threads: int = 256, rh: int = 16):
    """The rows form of the interleave for width phases of `kinds` ("nc", "bias", "zero"
    only: a channels-last source needs the staged `interleave_kernel`) at width stride
    `stride` in `dtype`: parameters O ([N, K, Dq, OW, Hq, 1], the output rows of one (a_d,
    a_h) phase pair with the width and row dims swapped and a unit last dim), then one Yi
    ([N, K, nd, nh, nw]) per "nc" phase i, then B when a phase is "bias". A CTA of `threads`
    threads writes a [threads outputs, rh rows] tile of one (n, k, jd) plane: the threads run
    along the output row (a warp's store of one row: 32 consecutive elements, coalesced at
    any alignment; its load of a phase: 32 / stride consecutive elements), each thread holds
    `rh` rows (rh independent loads and stores in flight a thread)."""
    if not kinds or len(kinds) > stride or any(k not in ("nc", "bias", "zero") for k in kinds):
        raise ValueError(f"interleave_rows_kernel: kinds {kinds} must be 1..{stride} of "
                         f"('nc', 'bias', 'zero'); a 'cl' source takes interleave_kernel")
    if dtype not in _DTYPES:
        raise ValueError(f"interleave_rows_kernel: dtype {dtype!r} is not one of "
                         f"{tuple(_DTYPES)}")
    if threads not in _ROWS_THREADS or rh not in _ROWS_RH:
        raise ValueError(f"interleave_rows_kernel: threads={threads} must be one of "
                         f"{_ROWS_THREADS} and rh={rh} one of {_ROWS_RH}")
    key = ("rows", kinds, stride, dtype, threads, rh)
    if key not in _KERNELS:
        name = f"conv_interleave_rows_{dtype}_s{stride}_{'_'.join(kinds)}_t{threads}_r{rh}"
        _KERNELS[key] = _load(_rows_source(name, kinds, stride, dtype, threads, rh), name)
    return _KERNELS[key]


def rows_tile(ow: int, hq: int, sources: int) -> tuple[int, int]:
    """(threads, rh) of the rows form for output rows `ow` wide, `hq` rows a plane and
    `sources` "nc" phases: the fewest threads (64 .. 256) that span the row, and rh rows a
    thread up to 16 (a 256-thread CTA then moves 2 x 16 KB in fp32: enough per CTA that
    launching CTAs is not the limit), at most 48 loaded values a thread (rh x sources: the
    sm_90a build of 64 registers a thread spills past that) and no more than the plane's
    rows rounded up to a power of two; halved (not below 8) where that pads the plane's rows
    at least 5% less. Why the halving: on the H200 (2026-12-05, scripts/gpu_conv_interleave_bench.py) a
    bf16 stride-3 plane of 101 rows ran 0.408 ms at rh 16 (112 rows, 11% idle) and 0.351 ms
    at rh 8 (104 rows); the fp32 planes of 64 and 128 rows tie (0.801 / 0.803 ms)."""
    threads = next((t for t in _ROWS_THREADS if t >= ow), _ROWS_THREADS[-1])
    rh = 1
    while rh < hq and rh < 16 and 2 * rh * max(1, sources) <= 48:
        rh *= 2
    if rh >= 16 and 20 * (-(-hq // (rh // 2)) * (rh // 2)) <= 19 * (-(-hq // rh) * rh):
        rh //= 2        # only for >= 5% fewer rows: twice the CTAs is not free
    return threads, rh


def _rows_source(name: str, kinds: tuple[str, ...], stride: int, dt: str, threads: int,
                 rh: int) -> str:
    # (no "cl" kind: _source_params gives the NCDHW sources and the bias)
    params = [f'O: ag.Tensor["N", "K", "DQ", "OW", "HQ", 1, ag.{dt}]'] + _source_params(kinds, dt)
    lines = [f"@ag.kernel(threads={threads})",
             f"def {name}({', '.join(params)}):",
             f"    BW, RH = {threads}, {rh}          # a tile's outputs (the threads) and rows",
             (f"    # {min(8, 1024 // threads) * threads} threads an SM at least "
              f"({65536 // (min(8, 1024 // threads) * threads)} registers a thread): loads in "
              "flight"),
             f"    ag.occupancy({min(8, 1024 // threads)})",
             "    # one CTA a [BW, RH] tile of one (n, k, jd) plane: the planes are the grid's x",
             "    # (up to 2^31 - 1), row and width blocks y and z (few)",
             ("    p, hb, wb = ag.grid(O.shape[0] * O.shape[1] * O.shape[2], "
              "ag.cdiv(O.shape[4], RH), ag.cdiv(O.shape[3], BW))"),
             "    jd = p % O.shape[2]",
             "    k = (p // O.shape[2]) % O.shape[1]",
             "    n = p // (O.shape[2] * O.shape[1])",
             "    jh = hb * RH + ag.arange(RH)[None, :, None]",
             "    ow = wb * BW + ag.arange(BW)[:, None, None]"]
    lines += _phase_lines(stride, threads, "[:, None, None]")
    # the channel's bias at the tile's shape (dim 0 the threads)
    lines += _select_lines(kinds, dt, "k + ow * 0 + jh * 0", "(BW, RH, 1)")
    lines.append("    ag.store(O, (n, k, jd, wb * BW, hb * RH, 0), x)")
    return "\n".join(lines) + "\n"


def _load(src: str, name: str):
    """The generated kernel, its source kept in linecache (tracebacks and op locations)."""
    filename = f"<argus-kernels:{name}>"
    text = "import argus as ag\n\n\n" + src
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    ns: dict = {"__name__": f"argus_kernels_{name}"}
    exec(compile(text, filename, "exec"), ns)   # noqa: S102 - our own generated kernel source
    return ns[name]


__all__ = ["KINDS", "interleave_kernel", "interleave_rows_kernel", "rows_tile"]
