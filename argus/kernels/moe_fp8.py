"""Activation quantization for the fp8 (e4m3, 128x128 block-scaled) MoE expert path: token rows
to e4m3 with one f32 scale per 128 columns ("1x128", DeepSeek-V3 / DeepGEMM), as DSL kernels.

    quantize_1x128   x [M, K] (bf16 / f32)       -> xq [M, K] e4m3, scale_t [K/128, M'] f32
    permute_quantize x [T, H] bf16, pos [T*k, 1] -> xq [M_pad, H] e4m3, scale_t [H/128, M_pad']
                     (moe_permute's scatter into the padded expert layout, quantizing on the
                     way, so the grouped GEMM's A operand is written once, in e4m3)

Per row r and 128-column group g (the reference is DeepGEMM's per_token_cast_to_fp8):

    amax = max(max |x[r, 128 g : 128 g + 128]|, AMAX_FLOOR)
    xq[r, 128 g + c] = e4m3(x[r, 128 g + c] * (448 / amax))     (saturating: argus.dtypes)
    scale_t[g, r] = amax / 448                                   (x ~= xq * scale_t[g, r])

so the group's largest magnitude maps to +-448 and nothing overflows; the floor keeps an
all-zero group finite (its scale is tiny, its values 0). Rounding, bit for bit: 448 / amax and
amax / 448 are each one correctly rounded f32 division (CUDA's `/` on floats is div.rn.f32
under NVRTC's default -prec-div=true; the interpreter divides numpy f32 arrays), the product
one f32 multiply, the cast round-to-nearest-even and saturating. Not amax * (1 / 448): that
differs in the last bit for about half of all amax values (torch on CUDA evaluates
`amax / 448.0` that way: aten's div_true_kernel_cuda multiplies by the reciprocal of a
Python-number divisor); argus.ops.quantize_fp8.reference is this formula in torch on any
device. scale_t is MN-major, the layout
argus/kernels/gemm_fp8.py's block-scaled kernel reads (`BlockScales.scale_a_t`): the scales of
one K block for consecutive rows are contiguous. Columns past K (a ragged last group) are
read as 0 and never written.

The tensors are taken as [rows, K/128, 128] views (the op reshapes them; K a multiple of 128,
as the block-scaled GEMM needs anyway), so a CTA's tile is [G, 128]: G groups of one row, one
group per tile row, and each group's amax is a row reduction of the tile.
"""

import functools

import argus as ag
from argus.dtypes import DType

GROUP = 128          # columns per scale (one 128-deep K block of the block-scaled GEMM)
E4M3_MAX = 448.0     # the largest finite e4m3 magnitude
AMAX_FLOOR = 1e-4    # DeepGEMM's clamp: an all-zero group still gets a finite scale
# One warp a CTA: a lane holds 4 consecutive columns of each group (8-byte bf16 loads, 4-byte
# packed e4m3 stores) and a group's amax is a warp reduction (shuffles, no block barrier, as
# moe_routing's one-warp routers). At 128 threads a thread holds one column of each group and
# every amax crosses warps through shared memory. Not measured yet (no GPU run).
THREADS = 32


def _quantize_groups(x, g0, groups_total):
    """The [G, 128] f32 tile x of groups [g0, g0 + G) -> (its e4m3 tile, its [G, 1] scales).
    Groups at or past `groups_total` (the tile's overhang past the tensor) are never stored;
    they take the floor as their amax instead of the load's fill (a 0 fill would be the max's
    identity only because |x| >= 0, which the verifier's fill.identity cannot see)."""
    real = (g0 + ag.arange(x.shape[0]) < groups_total)[:, None]
    amax = ag.maximum(ag.where(real, ag.abs_(x), float("-inf")).max(axis=1), AMAX_FLOOR)
    q = (x * (E4M3_MAX / amax)).to(ag.e4m3)
    return q, amax / E4M3_MAX


@functools.lru_cache(maxsize=None)
def quantize_1x128_kernel(src: DType, groups: int = 4, threads: int = THREADS
                          ) -> ag.KernelFunction:
    """CTA (r, b) quantizes groups [b * groups, +groups) of row r."""

    def quantize_1x128(X: ag.Tensor["M", "KG", GROUP, src],
                       Xq: ag.Tensor["M", "KG", GROUP, ag.e4m3],
                       ScaleT: ag.Tensor["KG", "MS", ag.f32]):
        r, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
        g0 = b * groups
        x = ag.load(X, (r, g0, 0), (groups, GROUP)).to(ag.f32)
        q, scale = _quantize_groups(x, g0, X.shape[1])
        ag.store(Xq, (r, g0, 0), q)
        ag.store(ScaleT, (g0, r), scale)

    # scale_t's columns past M (M' > M: alignment padding the GEMM never uses) are not written
    return ag.kernel(quantize_1x128, threads=threads,
                     name=f"quantize_1x128_{src.name}_{groups}_{threads}",
                     partial_outputs=("ScaleT",))


@functools.lru_cache(maxsize=None)
def permute_quantize_kernel(top_k: int, groups: int = 4, threads: int = THREADS
                            ) -> ag.KernelFunction:
    """xq[pos[t * k + j]] = e4m3 of x[t] for each slot j, scale_t[:, pos[t * k + j]] its
    scales: CTA (t, b) quantizes groups [b * groups, +groups) of token t once and writes them
    to its k rows of the padded layout (argus/kernels/moe_routing.py's permute, quantized)."""

    def moe_permute_quantize(X: ag.Tensor["T", "HG", GROUP, ag.bf16],
                             Pos: ag.Tensor["N", 1, ag.i32],
                             Xq: ag.Tensor["M", "HG", GROUP, ag.e4m3],
                             ScaleT: ag.Tensor["HG", "MS", ag.f32]):
        # For the verifier (no code): Pos holds position(i), injective (the positions kernel
        # computes a bijection onto the layout's non-padding rows), as in moe_permute.
        position = ag.opaque("position")
        ag.tag_tensor(Pos, value=lambda i, zero: position(i))
        ag.tag_assume(lambda a, b: ag.tag_any(a == b, position(a) != position(b)))
        t, b = ag.grid(X.shape[0], ag.cdiv(X.shape[1], groups))
        g0 = b * groups
        x = ag.load(X, (t, g0, 0), (groups, GROUP)).to(ag.f32)
        q, scale = _quantize_groups(x, g0, X.shape[1])
        for j in range(top_k):
            row = ag.load_scalar(Pos, (t * top_k + j, 0))
            ag.store(Xq, (row, g0, 0), q)
            ag.store(ScaleT, (g0, row), scale)

    # the padding rows (and their scales) are never written, nor read by the GEMM's results
    return ag.kernel(moe_permute_quantize, threads=threads,
                     name=f"moe_permute_quantize_k{top_k}_{groups}_{threads}",
                     partial_outputs=("Xq", "ScaleT"))
