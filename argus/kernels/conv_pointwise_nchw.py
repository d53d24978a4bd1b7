"""The tf32 pointwise (1x1, stride 1) convolution of an fp32 NCHW input, read in place: one
kernel, one launch for all images (KernelBench L1/87: x [16, 64, 1024, 1024] -> 128 channels).

Out[b]^T [pixels, Cout] = X[b]^T [pixels, Cin] @ W^T [Cin, Cout]. An image of NCHW x is
[Cin, pixels] with the pixels contiguous: as the GEMM's A (M = pixels, K = Cin) it is MN-major,
and a tf32 wgmma reads shared-memory operands K-major only. So A goes through registers, as
cutlass's tf32 mma.sync path does: the producer copies [32, 32] boxes (channels x pixels) of
x into shared memory by TMA (128-byte swizzle: row c is channel c's 32 pixels, 16-byte chunks
XORed by c % 8), each consumer thread reads its A elements by ld.shared in the wgmma
accumulator pattern (`ag.load_shared(transposed=True, rows=64)`: two boxes as the atoms of a
[64 px, 32 ch] MN-major tile; the swizzle makes the 32 lanes of each read hit 32 distinct
banks, where an unswizzled 64-pixel row pitch put 4 lanes on each bank), rounds them to tf32 (cvt.rna, what
cuDNN / cutlass do; the tensor core would otherwise drop the 13 low bits) and issues the
register-A ("rs") tf32 wgmma. The accumulator pattern gives a thread k-columns 2q and 2q + 1
of each 8-group where the m64k8 tf32 fragment wants q and q + 4, so A is read in the
accumulator's order (wgmma a_acc_order, target/fragments.py acc_order_col32) and the weight's
k rows are stored in the same order: Wp[n, k] = round_tf32(W[n, acc_order_col32(k)]) (the op
prepares it once, argus/ops/conv.py `_pointwise_nchw_weight`), tagged so the verifier compares
the channel each k-position really multiplies. B = Wp, K-major f32 with the 128-byte swizzle
(32 channels a view), loaded once per CTA and kept. The accumulator is stored transposed into
the NCHW output (ag.store(transposed=True)), bias and activation applied in registers.

The walk is persistent (one CTA per SM, units = (image, 128-pixel tile), image slowest) with
a STAGES-deep ring on x, so the TMA loads of the next tiles overlap this tile's MMAs and
stores.

Invariant: Out[b, n, p] = act(bias[n] + sum_{c < Cin} round_tf32(X[b, c, p]) *
Wp[n, acc_order_k(c)]) for every b, n < Cout, p < HW, each element written once; channels
Cin <= c < KP read 0 from TMA's fill (rows of the box past the image's Cin) times Wp's zero
columns. Needs HW * 4 bytes a multiple of 16 (TMA's channel stride) and Cout <= 256.
"""

import functools

import argus as ag
from argus.target.fragments import acc_order_col32
from argus.target.limits import NUM_SMS, SMEM_PER_CTA_OPTIN

__all__ = ["KV", "pointwise_nchw_kernel", "stages_for"]

BM = 64 * 2        # pixels a unit: 64 per consumer warpgroup (one wgmma M)
KV = 32            # channels per weight view: one 128-byte swizzled f32 row


def _act(y, activation):
    if activation == "relu":
        return ag.maximum(y, 0.0)
    return y


def stages_for(kp: int, cout: int) -> int:
    """The ring's depth for KP input and `cout` output channels: up to 3 stages of
    2 * KP * 64 * 4 bytes next to the weight's cout * KP * 4 (a CTA's shared memory less the
    alignment slack and the barriers); 0 where not even 2 fit (the op takes the GEMM)."""
    budget = SMEM_PER_CTA_OPTIN - 2048
    stage, weight = 2 * kp * 64 * 4, cout * kp * 4
    n = min(3, (budget - weight) // stage)
    return n if n >= 2 else 0


@functools.cache
def pointwise_nchw_kernel(kp: int, cout: int, *, stages: int = 3, bias: bool = False,
                          activation: str | None = None, num_sms: int = NUM_SMS):
    """The kernel for KP (Cin rounded up to a multiple of 32) input and `cout` output channels
    (a multiple of 8, at most 256: one wgmma N).

    Arguments: X [B, C, HW] f32 (the NCHW input, viewed), Wp [Cout, KP] f32 (rounded, k in
    acc_order_col32 order, zero past Cin), Out [B, Cout, HW] f32, and with bias=True
    Bias [1, Cout] f32."""
    if kp % KV or kp <= 0:
        raise ValueError(f"pointwise_nchw_kernel: KP={kp} must be a positive multiple of 32; "
                         f"fix: pad the weight's channels with zeros to a multiple of 32")
    if cout % 8 or not 8 <= cout <= 256:
        raise ValueError(f"pointwise_nchw_kernel: Cout={cout} must be a multiple of 8 in "
                         f"[8, 256] (one wgmma N); fix: use the GEMM route")
    views = kp // KV
    name = f"conv_pointwise_nchw_k{kp}_n{cout}" + ("_bias" if bias else "") + \
        (f"_{activation}" if activation else "")

    def body(X, Wp, Out, Bias):
        tiles = ag.cdiv(X.shape[2], BM)
        total = X.shape[0] * tiles
        programs = ag.minimum(total, num_sms)
        (pid,) = ag.grid(programs)
        # a ring slot: per warpgroup, per 32-channel view, its two [32 ch, 32 px] boxes
        # (pixels 0-31, 32-63 of its 64): the atoms of one [64 px, 32 ch] MN-major A, each a
        # 128-byte swizzled row a channel, so a column's reads spread over all 32 banks
        sX = ag.smem((stages, 2 * views * 2 * KV, KV), ag.f32, swizzle=128)
        sW = ag.smem((1, views * cout, KV), ag.f32, swizzle=128)
        wpipe = ag.pipeline(1, consumers=2)
        pipe = ag.pipeline(stages, consumers=2)
        with ag.role("producer", warpgroups=1, regs=40):
            with wpipe.produce() as st:
                for v in range(views):
                    ag.tma.load(sW[st].rows_of(v * cout, cout), Wp, (0, v * KV))
            for u in ag.range(pid, total, programs):
                b, p0 = u // tiles, (u % tiles) * BM
                with pipe.produce() as st:
                    for h in range(2):          # warpgroup h's 64 pixels
                        for v in range(views):
                            for half in range(2):  # pixels 32 half .. 32 half + 31 of them
                                ag.tma.load(sX[st].rows_of(((h * views + v) * 2 + half) * KV, KV),
                                            X, (b, v * KV, p0 + h * 64 + half * KV))
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            # Wp's column k holds channel acc_order_col32(k) (the A fragment's order)
            ag.tag_tensor(Wp, c=lambda n, k: acc_order_col32(k))
            with wpipe.consume() as wst:
                for u in ag.range(pid, total, programs):
                    b, p0 = u // tiles, (u % tiles) * BM
                    acc = ag.zeros((64, cout), ag.f32)
                    with pipe.consume() as st:
                        for v in range(views):
                            a = ag.load_shared(sX[st].rows_of((wg * views + v) * 2 * KV,
                                                              2 * KV),
                                               transposed=True, rows=64)  # [64 px, 32 ch]
                            acc = ag.wgmma(ag.round_tf32(a), sW[wst].rows_of(v * cout, cout),
                                           acc, precision="tf32", a_acc_order=True)
                    y = acc
                    if Bias is not None:
                        y = y + ag.load(Bias, (0, 0), (1, cout))
                    ag.store(Out, (b, 0, p0 + wg * 64), _act(y, activation), transposed=True)

    if bias:
        def kernel(X: ag.Tensor["B", "C", "HW", ag.f32], Wp: ag.Tensor["N", "KP", ag.f32],
                   Out: ag.Tensor["B", "N", "HW", ag.f32], Bias: ag.Tensor[1, "N", ag.f32]):
            body(X, Wp, Out, Bias)
    else:
        def kernel(X: ag.Tensor["B", "C", "HW", ag.f32], Wp: ag.Tensor["N", "KP", ag.f32],
                   Out: ag.Tensor["B", "N", "HW", ag.f32]):
            body(X, Wp, Out, None)
    kernel.__name__ = kernel.__qualname__ = name
    return ag.kernel(threads=384)(kernel)
