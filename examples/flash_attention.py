"""A minimal FlashAttention forward in the DSL: O = softmax(Q K^T * scale) V, online.

One CTA owns 64 query rows of one (batch, head). A producer warpgroup streams K and V blocks
of BN keys through a TMA ring; one consumer warpgroup keeps Q in registers (loaded straight
into the wgmma A fragment), computes S = Q K^T with wgmma, keeps the running row max `m` and
row sum `l` as loop-carried [64, 1] tiles, rescales the output accumulator by
alpha = exp2(m_old - m_new), and multiplies P = exp2(S - m_new) by V with P taken from
registers (no shared memory round trip). The softmax scale is folded into the exponent base
(exp2 with scale * log2(e)). Keys past the sequence end are masked with -inf from `ag.arange`,
and with `causal=True` so are keys after each query (aligned bottom-right when the query and
key lengths differ: query i sees keys j <= i + SK - S, FlashAttention's convention). Rows that
see no key at all produce zeros instead of NaN.

This example proves the compiler's constructs; the production operator (ping-pong consumers,
separate K and V rings, persistent scheduling) is `argus.ops.attention`'s job.
"""

import functools
import math

import argus as ag

LOG2E = 1.4426950408889634
BM = 64   # query rows per CTA: one consumer warpgroup's wgmma M


@functools.lru_cache(maxsize=None)
def attention_kernel(head_dim: int = 64, causal: bool = False) -> ag.KernelFunction:
    """The kernel for one head dimension (a multiple of 64 up to 256) and mask kind."""
    if head_dim % 64 or not 64 <= head_dim <= 256:
        raise ValueError(f"head_dim={head_dim}: this example takes 64, 128, 192 or 256 "
                         f"(64-column TMA boxes of 128 bytes)")
    D = head_dim
    atoms = D // 64  # K and V tiles are stored as D/64 column atoms of [BN][64]

    def flash_attention(Q: ag.Tensor[("BH", "S", D, ag.bf16)],
                        K: ag.Tensor[("BH", "SK", D, ag.bf16)],
                        V: ag.Tensor[("BH", "SK", D, ag.bf16)],
                        O: ag.Tensor[("BH", "S", D, ag.bf16)],
                        scale: float = 1.0 / math.sqrt(D), BN: int = 64, STAGES: int = 2):
        S, SK = Q.shape[1], K.shape[1]
        pid, bh = ag.grid(ag.cdiv(S, BM), Q.shape[0])
        q0 = pid * BM
        blocks = ag.cdiv(SK, BN)
        if causal:  # the last query of this tile sees keys up to q0 + BM - 1 + SK - S
            blocks = ag.minimum(blocks, ag.maximum(ag.cdiv(q0 + BM + SK - S, BN), 0))
        sK = ag.smem((STAGES, atoms * BN, 64), ag.bf16, swizzle=128)
        sV = ag.smem((STAGES, atoms * BN, 64), ag.bf16, swizzle=128)
        kv = ag.pipeline(STAGES, consumers=1)

        with ag.role("producer", warpgroups=1):
            for j in ag.range(blocks):
                with kv.produce() as st:
                    for a in range(atoms):
                        ag.tma.load(sK[st].rows_of(a * BN, BN), K, (bh, j * BN, 64 * a))
                        ag.tma.load(sV[st].rows_of(a * BN, BN), V, (bh, j * BN, 64 * a))

        with ag.role("consumer", warpgroups=1):
            q = ag.load(Q, (bh, q0, 0), (BM, D))  # straight into the wgmma A fragment
            m = ag.full((BM, 1), float("-inf"))   # running row max (of S * scale * log2 e)
            l = ag.full((BM, 1), 0.0)              # running row sum of exp2(S - m)
            o = ag.zeros((BM, D))
            last_key = q0 + ag.arange(BM)[:, None] + (SK - S)  # causal: the last key a row sees
            for j in ag.range(blocks):
                with kv.consume() as st:
                    s = ag.zeros((BM, BN))
                    for a in range(atoms):
                        s = ag.wgmma(q[:, 64 * a:64 * (a + 1)], sK[st].rows_of(a * BN, BN), s)
                    key = j * BN + ag.arange(BN)[None, :]
                    valid = key < SK
                    if causal:
                        valid = valid & (key <= last_key)
                    s = ag.where(valid, s * (scale * LOG2E), float("-inf"))
                    # checked, no code: the mask keeps exactly the keys a query may see, and
                    # the loop reaches all of them (the verifier proves each is seen once)
                    allowed = ag.tag(s).sk < ag.sym(SK)
                    if causal:
                        allowed = ag.tag_all(allowed, ag.tag(s).sk <= ag.tag(s).s + ag.sym(SK)
                                             - ag.sym(S))
                        ag.tag_assert(ag.tag_any(ag.sym(blocks) * BN >= ag.sym(SK),
                                                 ag.sym(blocks) * BN > ag.tag(s).s + ag.sym(SK)
                                                 - ag.sym(S)),
                                      message="the KV loop reaches every key a query may see")
                    ag.tag_assert((ag.tag(s).live == 1) == allowed,
                                  message="the mask keeps exactly the keys a query may see")
                    m_new = ag.maximum(m, s.max(axis=1))
                    # a row that has seen no key yet keeps m = -inf: subtract 0, not -inf
                    m_use = ag.where(m_new == float("-inf"), 0.0, m_new)
                    p = ag.exp2(s - m_use)
                    alpha = ag.exp2(m - m_use)
                    l = l * alpha + p.sum(axis=1)
                    o = ag.wgmma(p.to(ag.bf16), sV[st], o * alpha, trans_b=True)
                    m = m_new
            o = o / ag.where(l == 0.0, 1.0, l)  # rows that saw no key: zeros, not NaN
            ag.store(O, (bh, q0, 0), o.to(ag.bf16))

    name = f"flash_attention_d{D}" + ("_causal" if causal else "")
    return ag.kernel(flash_attention, name=name)


KERNEL = attention_kernel(64)
OUTPUT = 3
SIZES = {"small": (2, 100, 100, 64), "large": (16, 4096, 4096, 64)}


def make_inputs(size="small", seed=0, device="cpu"):
    import torch

    BH, S, SK, D = SIZES[size]
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(BH, S, D, generator=g).to(torch.bfloat16).to(device)
    k = torch.randn(BH, SK, D, generator=g).to(torch.bfloat16).to(device)
    v = torch.randn(BH, SK, D, generator=g).to(torch.bfloat16).to(device)
    o = torch.full((BH, S, D), float("nan")).to(torch.bfloat16).to(device)
    return q, k, v, o


def constexprs(q, k, v, o):
    return {}


def reference(q, k, v, o, causal=False):
    """float64 attention with FlashAttention's bottom-right causal mask; rows without a key
    are zero."""
    import torch

    qd, kd, vd = q.double(), k.double(), v.double()
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if causal:
        S, SK = q.shape[-2], k.shape[-2]
        keep = torch.ones(S, SK, dtype=torch.bool, device=q.device).tril(SK - S)
        s = s.masked_fill(~keep, float("-inf"))
    p = torch.softmax(s, dim=-1).nan_to_num(0.0)
    return p @ vd


def baseline(q, k, v, o):
    import torch

    return torch.nn.functional.scaled_dot_product_attention(q, k, v)


def bytes_moved(q, k, v, o):
    return (q.numel() + k.numel() + v.numel() + o.numel()) * 2


def flops(q, k, v, o):
    return 4 * q.shape[0] * q.shape[1] * k.shape[1] * q.shape[2]
