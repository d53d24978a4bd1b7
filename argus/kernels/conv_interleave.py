"""The interleave of a strided transposed convolution's output phases: one Argus kernel writes
the NCDHW output rows of one (depth, row) phase pair from the stride-1 convolutions of its
width phases (argus.ops.conv `_conv_transpose`), instead of one strided torch copy per phase.

Output o along an axis of stride s belongs to phase o % s and is that phase's element o // s
(its convolution's output, cropped to the phase's first row: the caller's view). A launch takes
the rows od = a_d + s_d * jd, oh = a_h + s_h * jh of the output (O, the [N, Dq, Hq, K, OW]
view of them) and the s_w phase sources of (a_d, a_h), one tensor parameter each: a CTA
writes a [BK channels, BW outputs] tile of one output row, element (k, ow) read from source
ow % s_w at (n, jd, jh, ow // s_w, k) by `ag.gather` (other phases' elements get index -1: no
load) and chosen with `ag.where` (a select: bit-exact, -0.0 kept; a 16-bit value passes
through an fp32 register, exact for every number, a NaN stays NaN with the conversion's
canonical payload). The gather's layout
gives a thread one channel's row of BW outputs (one 16-byte store per 4 fp32 / 8 16-bit
outputs), and a warp's gather of one column reads 32 consecutive channels of one pixel of a
channels-last source (the implicit GEMM's and im2col's result: 128 coalesced bytes in fp32)
or, from an NCDHW source (the depthwise and per-image pointwise routes), each thread its own
row's consecutive elements. So every byte is read once and written once (2x the output's
bytes, the strided copies' traffic, which also transposed), in prod(stride[:-1]) launches
instead of prod(stride) torch copies.

Source kinds (per width phase, compile-time, in the generated kernel's name): "cl" a
channels-last [N, nd, nh, nw, K] view, "nc" an NCDHW [N, K, nd, nh, nw] view, "bias" a phase
no tap reaches whose outputs are the bias B[k], "zero" such a phase without a bias.

Invariant: every element of O is stored exactly once (the grid's CTAs take disjoint
[BK, BW] tiles of the N * Dq * Hq rows, masked at K and OW), with the value of exactly one
source: the one whose phase is ow % s_w (the selects' conditions are disjoint and cover it).
"""

from __future__ import annotations

import linecache

from argus import dtypes

KINDS = ("cl", "nc", "bias", "zero")
_DTYPES = {"f32": dtypes.f32, "bf16": dtypes.bf16, "f16": dtypes.f16}
_KERNELS: dict = {}


def interleave_kernel(kinds: tuple[str, ...], stride: int, dtype: str = "f32", bk: int = 128):
    """The kernel for width phases of `kinds` (len(kinds) <= stride: an output narrower than
    the stride has fewer phases) at width stride `stride` in `dtype` ("f32", "bf16", "f16"):
    parameters O, then one Yi per "cl" / "nc" phase i, then B when a phase is "bias";
    `bk` channels a tile, one a thread (32, 64 or 128: the threads); compile-time BW (outputs
    a row of the tile)."""
    if not kinds or len(kinds) > stride or any(k not in KINDS for k in kinds):
        raise ValueError(f"interleave_kernel: kinds {kinds} must be 1..{stride} of {KINDS}")
    if dtype not in _DTYPES:
        raise ValueError(f"interleave_kernel: dtype {dtype!r} is not one of {tuple(_DTYPES)}")
    if bk not in (32, 64, 128):
        raise ValueError(f"interleave_kernel: bk={bk} is not 32, 64 or 128")
    key = (kinds, stride, dtype, bk)
    if key not in _KERNELS:
        name = f"conv_interleave_{dtype}_s{stride}_{'_'.join(kinds)}_k{bk}"
        _KERNELS[key] = _load(_source(name, kinds, stride, dtype, bk), name)
    return _KERNELS[key]


def _source(name: str, kinds: tuple[str, ...], stride: int, dt: str, bk: int) -> str:
    params = [f'O: ag.Tensor["N", "DQ", "HQ", "K", "OW", ag.{dt}]']
    for i, kind in enumerate(kinds):
        if kind in ("cl", "nc"):
            # own symbols: the phases' widths differ (and their batch/channels are checked by
            # the caller that cut the views)
            dims = ", ".join(f'"{d}{i}"' for d in ("A", "B", "C", "E", "F"))
            params.append(f"Y{i}: ag.Tensor[{dims}, ag.{dt}]")
    if "bias" in kinds:
        params.append(f'B: ag.Tensor["KB", ag.{dt}]')
    lines = [f"@ag.kernel(threads={bk})",
             f"def {name}({', '.join(params)}, BW: int = 32):",
             f"    BK = {bk}                                  # one channel a thread",
             "    # one CTA a [BK, BW] tile of one output row (n, jd, jh): the rows are the",
             "    # grid's x (up to 2^31 - 1), channel and width blocks y and z (few)",
             ("    r, kb, wb = ag.grid(O.shape[0] * O.shape[1] * O.shape[2], "
              "ag.cdiv(O.shape[3], BK), ag.cdiv(O.shape[4], BW))"),
             "    jh = r % O.shape[2]",
             "    jd = (r // O.shape[2]) % O.shape[1]",
             "    n = r // (O.shape[2] * O.shape[1])",
             "    k = kb * BK + ag.arange(BK)[:, None]",
             "    ow = wb * BW + ag.arange(BW)[None, :]",
             f"    a = ow % {stride}",
             f"    j = ow / {stride}"]
    first = True
    for i, kind in enumerate(kinds):
        mine = f"a == {i}"
        if kind == "cl":
            value = f"ag.gather(Y{i}, (n, jd, jh, ag.where({mine}, j, -1), k))"
        elif kind == "nc":
            value = f"ag.gather(Y{i}, (n, k, jd, jh, ag.where({mine}, j, -1)))"
        elif kind == "bias":
            value = "ag.gather(B, (k,))"
        else:
            value = "0.0"
        if first and kind in ("cl", "nc"):
            lines.append(f"    x = {value}")           # other phases' columns read 0, replaced
            first = False
        elif first:
            lines.append(f"    x = ag.where({mine}, {value}, ag.full((BK, BW), 0.0, ag.{dt}))")
            first = False
        else:
            lines.append(f"    x = ag.where({mine}, {value}, x)")
    lines.append("    ag.store(O, (n, jd, jh, kb * BK, wb * BW), x)")
    return "\n".join(lines) + "\n"


def _load(src: str, name: str):
    """The generated kernel, its source kept in linecache (tracebacks and op locations)."""
    filename = f"<argus-kernels:{name}>"
    text = "import argus as ag\n\n\n" + src
    linecache.cache[filename] = (len(text), None, text.splitlines(True), filename)
    ns: dict = {"__name__": f"argus_kernels_{name}"}
    exec(compile(text, filename, "exec"), ns)   # noqa: S102 - our own generated kernel source
    return ns[name]


__all__ = ["KINDS", "interleave_kernel"]
