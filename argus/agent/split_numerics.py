"""How accurate an fp32 GEMM computed from bf16 pieces on Hopper's tensor cores is: the split, the
products it keeps and the order they are summed in, a model of the tensor core's accumulation,
and the closed-form error the GEMM family's accuracy rule uses.

The split. x = x0 + x1 + x2 (+ |r| <= 2^-24 |x|) with x0 = bf16(x), x1 = bf16(x - x0),
x2 = bf16(x - x0 - x1), each rounded to nearest even (cvt.rn.bf16.f32; the remainders are exact in
fp32). A term a*b keeps the products whose pieces sum to at most 1 (3 terms: 2^-8 of a*b is the
largest dropped, a1*b1; the 2^-16 pieces lost to x's own split error make the normwise error
~4.5e-6 on signed data) or at most 2 (6 terms: dropped products are ~2^-24; ~6e-9). One GEMM
over K' = terms * K of the concatenated pieces computes the sum.

The accumulator. The measured H200 failure of the 3-term split (rel_l2 2.91e-5 on uniform [0, 1)
inputs, 2.13e-5 on signed normal ones, K = 4096; an fp32 emulation predicted 4e-6) is not the
split: it is wgmma's accumulation. Hopper's tensor core adds the 16 products of an m64nNk16 step
and the fp32 accumulator as one block FMA: every addend is aligned to the largest exponent with
2 extra bits (26-bit significands), the bits below are truncated, and the sum is truncated to fp32
(round toward zero). `tc_gemm` is that model (Khattak and Mikaitis, "Accurate Models of NVIDIA
Tensor Cores", arXiv:2512.07004, 2025: H100/H200 bf16 -> fp32: 16-term FMA, 2 extra alignment
bits, RZ); it reproduces both H200 numbers to two digits. Its error grows with the number of
k-steps summed into one accumulator whose magnitude is already that of the result, and its
truncations all point toward zero, so on all-positive data they add up linearly. Two
consequences, both in the adapter's layout:
  - small products first: within one accumulator the K' slots are ordered by size (2^-16
    products, then 2^-8, then x0*y0), so the corrections are summed while the accumulator is
    still small; summing x0*y0 first and the corrections after it costs 2-4x the error;
  - K chunks: the K range is split into `k_chunks` chunks accumulated separately (one batch of
    the batched GEMM each) and summed in fp32 by an Argus kernel; the error depends only on
    the chunk length K / k_chunks (about 1.2e-5 at 4096, 4.3e-6 at 2048, 1.7e-6 at 1024 on
    uniform [0, 1) inputs, the worst of the judge's sets).

Invariant: `SLOTS` is the one definition of the products and their order; the GEMM family's
adapter renders it into the solution, and the emulators here read the same table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# (piece of A, piece of B) per K' slot, smallest products first.
SLOTS: dict[int, tuple[tuple[int, int], ...]] = {
    1: ((0, 0),),
    3: ((0, 1), (1, 0), (0, 0)),
    6: ((0, 2), (1, 1), (2, 0), (0, 1), (1, 0), (0, 0)),
}
TERMS = (6, 3, 1)                   # legal values of the family's `split_terms`
K_CHUNKS = (1, 2, 4, 8, 16, 32, 64)  # legal values of the family's `k_chunks` (64 keeps a
                                     # 1024-long chunk up to K = 65536)
STRICT_FLOOR = 1e-5                 # the judge's normwise strict bound for fp32 tasks
STRICT_MARGIN = 2.0                 # the rule prunes splits predicted above floor / margin
START_MARGIN = 4.0                  # the strict-track start keeps this margin (the GPU check
                                    # then decides whether fewer chunks pass)

# The error model (normwise, relative): split error by terms (measured at K = 1024..16384 with
# exact accumulation on the judge's distributions, rounded up) plus the accumulation error of
# the tensor core for a chunk of length L, ACC_4096 * (L / 4096) ** ACC_EXPONENT (fitted to
# `tc_gemm` on uniform [0, 1) inputs, L = 512..8192, rounded up).
SPLIT_ERROR = {1: 2.5e-3, 3: 4.7e-6, 6: 1e-8}
ACC_4096 = 1.25e-5
ACC_EXPONENT = 1.3


def slots(terms: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(A's piece per slot, B's piece per slot) for `terms` products per term."""
    if terms not in SLOTS:
        raise ValueError(f"split_terms={terms}: use one of {TERMS}")
    pairs = SLOTS[terms]
    return tuple(i for i, _ in pairs), tuple(j for _, j in pairs)


def pieces(terms: int) -> int:
    """How many bf16 pieces of each operand `terms` products use."""
    return 1 + max(max(p) for p in SLOTS[terms])


def chunk_ok(k: int, chunks: int) -> bool:
    """K splits into `chunks` chunks whose bf16 rows stay 16-byte aligned (TMA strides)."""
    return chunks >= 1 and k % chunks == 0 and (k // chunks) % 8 == 0


def predicted_rel_l2(terms: int, k: int, chunks: int = 1) -> float:
    """The modelled normwise error of the split GEMM on the tensor cores (an upper estimate)."""
    length = max(1, k // max(1, chunks))
    return SPLIT_ERROR[terms] + ACC_4096 * (length / 4096.0) ** ACC_EXPONENT


def strict_ok(terms: int, k: int, chunks: int, margin: float = STRICT_MARGIN) -> bool:
    """Predicted to pass the strict fp32 track with `margin` to spare."""
    return predicted_rel_l2(terms, k, chunks) <= STRICT_FLOOR / margin


def min_strict_chunks(k: int, terms: int = 6, margin: float = STRICT_MARGIN) -> int | None:
    """The fewest K chunks predicted to pass the strict track with `margin` (None: no legal
    value does)."""
    for c in K_CHUNKS:
        if chunk_ok(k, c) and strict_ok(terms, k, c, margin):
            return c
    return None


# ----------------------------------------------------------------------------- emulation


def bf16_round(x: np.ndarray) -> np.ndarray:
    """fp32 values rounded to bf16 (nearest even), returned as float64 (exact)."""
    import torch

    t = torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))
    return t.to(torch.bfloat16).to(torch.float64).numpy()


def split(x: np.ndarray, n: int) -> list[np.ndarray]:
    """The first n bf16 pieces of fp32 x, as the split kernel computes them (float64 arrays)."""
    rest = np.asarray(x, dtype=np.float32)
    out = []
    for _ in range(n):
        p = bf16_round(rest)
        out.append(p)
        rest = (rest - p.astype(np.float32)).astype(np.float32)   # exact in fp32
    return out


def operands(a: np.ndarray, b: np.ndarray, terms: int, chunks: int = 1,
             order: Sequence[tuple[int, int]] | None = None
             ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per K chunk, the concatenated pieces (A' [M, terms*KC], B' [terms*KC, N]) in slot order
    (`order` overrides it, e.g. to model another layout)."""
    pairs = tuple(order) if order is not None else SLOTS[terms]
    n = 1 + max(max(p) for p in pairs)
    pa, pb = split(a, n), split(b, n)
    k = a.shape[1]
    kc = k // chunks
    out = []
    for s in range(chunks):
        cols = slice(s * kc, (s + 1) * kc)
        out.append((np.concatenate([pa[i][:, cols] for i, _ in pairs], axis=1),
                    np.concatenate([pb[j][cols] for _, j in pairs], axis=0)))
    return out


def _round_toward_zero_f32(x: np.ndarray) -> np.ndarray:
    f = x.astype(np.float32)
    away = np.abs(f.astype(np.float64)) > np.abs(x)
    f[away] = np.nextafter(f[away], np.float32(0))
    return f.astype(np.float64)


def tc_gemm(a: np.ndarray, b: np.ndarray, fma: int = 16, extra_bits: int = 2) -> np.ndarray:
    """A @ B as Hopper's tensor core computes it from bf16 operands into an fp32 accumulator
    (module docstring): per k-step of `fma` products, every addend (products and accumulator)
    aligned to the largest exponent with 24 + extra_bits significant bits and truncated, the sum
    exact, the result truncated to fp32. a and b hold bf16 values (float64 arrays)."""
    m, k = a.shape
    bt = np.ascontiguousarray(b.T)
    acc = np.zeros((m, b.shape[1]))
    for k0 in range(0, k, fma):
        prods = a[:, None, k0:k0 + fma] * bt[None, :, k0:k0 + fma]     # exact in float64
        terms = np.concatenate([prods, acc[..., None]], axis=-1)
        mag = np.abs(terms)
        safe = np.where(mag > 0, mag, 1.0)
        exp = np.where(mag > 0, np.floor(np.log2(safe)), -1e4)
        quantum = np.exp2(exp.max(axis=-1, keepdims=True) - 23 - extra_bits)
        acc = _round_toward_zero_f32((np.sign(terms) * np.floor(mag / quantum) * quantum)
                                     .sum(axis=-1))
    return acc


def fp32_gemm(a: np.ndarray, b: np.ndarray, block: int = 0, reverse: bool = False
              ) -> np.ndarray:
    """A @ B with fp32 accumulation: one float32 matmul (block=0), or float32 partial products
    of `block` k-steps summed in fp32 (in reverse k order with reverse=True)."""
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    if not block:
        return (a32 @ b32).astype(np.float64)
    starts = list(range(0, a.shape[1], block))
    acc = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for k0 in reversed(starts) if reverse else starts:
        acc = acc + a32[:, k0:k0 + block] @ b32[k0:k0 + block]
    return acc.astype(np.float64)


def split_gemm(a: np.ndarray, b: np.ndarray, terms: int, chunks: int = 1, gemm=tc_gemm,
               order: Sequence[tuple[int, int]] | None = None) -> np.ndarray:
    """The adapter's result: one GEMM per K chunk with `gemm`, the chunks summed in fp32 in
    chunk order (the Argus sum kernel)."""
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    for pa, pb in operands(a, b, terms, chunks, order):
        out = out + gemm(pa, pb).astype(np.float32)
    return out.astype(np.float64)


def rel_l2(y: np.ndarray, ref: np.ndarray) -> float:
    """The judge's normwise error ||y - r|| / ||r||."""
    norm = float(np.linalg.norm(ref))
    return float(np.linalg.norm(y - ref)) / norm if norm else math.inf


def max_elem(y: np.ndarray, ref: np.ndarray) -> float:
    """The judge's worst-element error max |y - r| / (|r| + rms(r))."""
    rms = float(np.sqrt(np.mean(ref * ref)))
    return float(np.max(np.abs(y - ref) / (np.abs(ref) + rms)))
