"""The GEMM adapter: C = A @ B for fp32 tensors of any rank on Argus kernels.

A [..., M, K] and B [..., K, N] (batch dims broadcast; a 2-D B under a batched A multiplies the
flattened rows) are brought to K-major bf16 pieces by an Argus split kernel, multiplied by the
library GEMM (argus/kernels/gemm.py, "nk": both operands K-contiguous) over K' = terms x K with
one fp32 accumulator per K chunk, and the chunks are summed in fp32 by an Argus kernel.

x = x0 + x1 + x2 with x0 = bf16(x), x1 = bf16(x - x0), x2 = bf16(x - x0 - x1) (exact remainders);
6 terms keep every product whose pieces sum to at most 2, smallest first, and are fp32-accurate
(the strict track); 1 term is a single bf16 product (relaxed track only). The slot tables are
those of argus/agent/split_numerics.py (SLOTS), which derives their accuracy; chunks of at most
1024 K keep the tensor core's truncating accumulation within the strict bound there.

Skinny and long-K problems (groups_pay: a weight read once, K = 2^19 into 256 x 256) store each
operand's pieces once instead (A0 A1 A2 / B2 B1 B0) and run one GEMM per product group over
views (grouped_products); chunk partials of a small output are summed in two passes (sum_parts).
The K chunks are the GEMM's split-K: `plan_split` takes more of them than the accuracy bound
needs where a small output would leave SMs idle (a cost rule over the GEMM time model).

An operand whose innermost dim is not K (B = [K, N] row-major, A = X.T) is first transposed by
an Argus copy kernel (a tile stored transposed), so the split always reads K-contiguous rows.
The epilogue (bias, activations) runs as a separate fused elementwise kernel: the library
GEMM's epilogue hook takes no expression yet.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

import argus as ag
from argus.compose.launch import copy_into, run, transpose
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.ops.weight_cache import DerivedCache

# (piece of A, piece of B) per K' slot, smallest products first (argus/agent/split_numerics.py)
SLOTS = {1: ((0, 0),), 3: ((0, 1), (1, 0), (0, 0)),
         6: ((0, 2), (1, 1), (2, 0), (0, 1), (1, 0), (0, 0))}
MAX_CHUNK = 1024


@dataclass(frozen=True)
class MatmulSchedule:
    """What the agent may tune: the split (6: strict, 3 / 1: relaxed only), the K chunk, the
    number of K chunks (split-K: 0 lets `plan_split`'s cost rule choose; n >= 1 asks for at
    least n, never fewer than the K chunk bound gives), and the library GEMM's schedule (None:
    argus.ops.schedules.heuristic for the problem)."""

    terms: int = 6
    max_chunk: int = MAX_CHUNK
    gemm: GemmSchedule | None = None
    split_k: int = 0


def bf16_pieces(x, count: int) -> list:
    """The first `count` bf16 pieces of an fp32 tile: x0 = bf16(x), x1 = bf16(x - x0), ...,
    each remainder exact in fp32 (traced inside the split kernels)."""
    pieces = [x.to(ag.bf16)]
    rest = x
    for _ in range(count - 1):
        rest = rest - pieces[-1].to(ag.f32)
        pieces.append(rest.to(ag.bf16))
    return pieces


@ag.kernel(threads=256)
def split_rows(X: ag.Tensor["B", "R", "K", ag.f32], Y: ag.Tensor["BCRT", "KC", ag.bf16],
               SLOTS: tuple = (0,), CHUNKS: int = 1, KC: int = 64, BN: int = 256):
    """Row r of batch b, chunk s, block j: piece SLOTS[t] of X[b, r, s*KC + j*BN ...] goes to
    row ((b*CHUNKS + s)*R + r)*T + t of Y = [B*CHUNKS, R, T*KC] seen as [B*CHUNKS*R*T, KC]; the
    stores are masked at KC (a block reading into the next chunk stores nothing past its own),
    and columns past K read as zeros (padding of the last chunk)."""
    br, s, j = ag.grid(X.shape[0] * X.shape[1], CHUNKS, ag.cdiv(KC, BN))
    b, r = br // X.shape[1], br % X.shape[1]
    x = ag.load(X, (b, r, s * KC + j * BN), (1, BN))
    pieces = bf16_pieces(x, max(SLOTS) + 1)
    for t, i in enumerate(SLOTS):
        ag.store(Y, (((b * CHUNKS + s) * X.shape[1] + r) * len(SLOTS) + t, j * BN), pieces[i])


@ag.kernel(threads=256)
def split_cols(X: ag.Tensor["B", "K", "N", ag.f32], Y: ag.Tensor["BC", "TK", "NP", ag.bf16],
               SLOTS: tuple = (0,), CHUNKS: int = 1, KC: int = 64, ROWS: int = 8,
               BN: int = 256):
    """B [K, N] row-major (N contiguous) -> its pieces in the "kn" layout: rows s*KC + k of
    batch b go to rows t*KC + k of batch b*CHUNKS + s of Y, one slot per piece; ROWS divides
    KC, so a tile never crosses a slot; rows past K read as zeros (padding)."""
    # the launch's contract (split_kn allocates Y so): Y is X's batches x chunks, T slots of
    # KC rows, and X's columns; stated for store.coverage, which cannot see the allocation
    ag.tag_assume(lambda: ag.tag_all(ag.sym(Y.shape[0]) == ag.sym(X.shape[0]) * CHUNKS,
                                     ag.sym(Y.shape[1]) == len(SLOTS) * KC,
                                     ag.sym(Y.shape[2]) == ag.sym(X.shape[2])))
    p, q = ag.grid(X.shape[0] * CHUNKS * (KC // ROWS), ag.cdiv(X.shape[2], BN))
    blocks = KC // ROWS
    b, rest = p // (CHUNKS * blocks), p % (CHUNKS * blocks)
    s, kb = rest // blocks, rest % blocks
    x = ag.load(X, (b, s * KC + kb * ROWS, q * BN), (ROWS, BN))
    pieces = bf16_pieces(x, max(SLOTS) + 1)
    for t, i in enumerate(SLOTS):
        ag.store(Y, (b * CHUNKS + s, t * KC + kb * ROWS, q * BN), pieces[i])


@ag.kernel(threads=256)
def sum_chunks(P: ag.Tensor["B", "S", "MN", ag.f32], C: ag.Tensor["B", "MN", ag.f32],
               CHUNKS: int = 1, BN: int = 1024):
    """C[b] = P[b, 0] + P[b, 1] + ... in fp32, in chunk order. The column blocks are the
    grid's x (up to 2^31 - 1 blocks; y and z stop at 65535: a 2^26-element output is 65536)."""
    j, b = ag.grid(ag.cdiv(P.shape[2], BN), P.shape[0])
    acc = ag.load(P, (b, 0, j * BN), (1, BN))
    for s in ag.range(1, CHUNKS):      # a device loop: K = 2^19 has 512 chunks
        acc = acc + ag.load(P, (b, s, j * BN), (1, BN))
    ag.store(C, (b, j * BN), acc)


def k_major(x: torch.Tensor) -> torch.Tensor:
    """x [B, R, K] fp32 with K contiguous: as is when it is, else an Argus transposing copy."""
    if x.stride(-1) == 1 and (x.shape[-2] == 1 or x.stride(-2) >= x.shape[-1]) and \
            x.storage_offset() == 0:
        return x
    if x.stride(-2) == 1:                        # the transpose of a row-major [B, K, R]
        src = x.transpose(-1, -2)
        if src.stride(-1) == 1:
            out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
            run(transpose, (src, out))
            return out
    out = torch.empty(x.shape, dtype=torch.float32, device=x.device)
    copy_into(x, out)
    return out


def split(x: torch.Tensor, slots: tuple, chunks: int, kc: int) -> torch.Tensor:
    """x [B, R, K] -> bf16 [B*chunks, R, T*kc]."""
    b, r, _ = x.shape
    t = len(slots)
    y = torch.empty(b * chunks, r, t * kc, dtype=torch.bfloat16, device=x.device)
    bn = min(1024, -(-kc // 256) * 256)
    run(split_rows, (x, y.view(b * chunks * r * t, kc)), SLOTS=slots, CHUNKS=chunks, KC=kc, BN=bn)
    return y


def split_kn(x: torch.Tensor, slots: tuple, chunks: int, kc: int) -> torch.Tensor:
    """x [B, K, N] (N contiguous) -> bf16 [B*chunks, T*kc, N] (a view of rows padded to a
    multiple of 8 elements: 16-byte TMA rows)."""
    b, _, n = x.shape
    t = len(slots)
    npad = -(-n // 8) * 8
    y = torch.empty(b * chunks, t * kc, npad, dtype=torch.bfloat16, device=x.device)[..., :n]
    rows = 8
    while kc % rows:
        rows //= 2
    run(split_cols, (x, y), SLOTS=slots, CHUNKS=chunks, KC=kc, ROWS=rows,
        BN=min(256, -(-n // 64) * 64 if n >= 64 else 64))
    return y


# A chunk sum of fewer CTAs than this sums groups of chunks first (a second pass adds the
# groups): 4 CTAs of 256 threads per SM on 132 SMs keep enough loads in flight for HBM.
MIN_SUM_CTAS = 4 * 132
SUM_BN = 1024


def chunk_groups(chunks: int, ctas: int, batch: int = 1) -> int:
    """Chunks per group of the first pass (1: one pass). A large K over a small output (K =
    2^19, 256 x 256: 512 chunks, 64 CTAs) made the one-pass sum a chain of 512 dependent loads
    on half the SMs; groups of about sqrt(chunks) chunks (the largest divisor up to it) give
    both passes CTAs and short chains. The first pass's groups are its grid's y (<= 65535)."""
    if chunks < 8 or ctas >= MIN_SUM_CTAS:
        return 1
    g = max((d for d in range(2, math.isqrt(chunks) + 1) if chunks % d == 0), default=1)
    return g if batch * (chunks // g) <= 65535 else 1


def sum_parts(parts: torch.Tensor, target: torch.Tensor) -> None:
    """target [B, MN] = the sum over S of parts [B, S, MN], in fp32: one pass, or groups of
    chunks first (chunk_groups) when one pass has too few CTAs."""
    nb, chunks, mn = parts.shape
    g = chunk_groups(chunks, -(-mn // SUM_BN) * nb, nb)
    if g > 1:
        groups = torch.empty(nb * (chunks // g), mn, dtype=torch.float32, device=parts.device)
        run(sum_chunks, (parts.reshape(nb * (chunks // g), g, mn), groups), CHUNKS=g)
        parts, chunks = groups.view(nb, chunks // g, mn), chunks // g
    run(sum_chunks, (parts, target), CHUNKS=chunks)


def groups_pay(pieces: int, a_elems: int, b_elems: int, mn: int, chunks: int) -> bool:
    """Whether the grouped products (grouped_products) move fewer bytes than one GEMM over
    all T slots: each operand's split writes `pieces` bf16 slots instead of T (A0..A2 once,
    not A0 three times), and `pieces` GEMMs write `pieces` times the fp32 partials that the
    chunk sum reads back (one GEMM of a single chunk writes the output directly). Skinny or
    long-K problems (weights read once: 128 x 32768 x 32768; K = 2^19 into 256 x 256) win;
    square ones (partials as large as the operands) do not."""
    terms = pieces * (pieces + 1) // 2
    if pieces < 2:
        return False
    saved = 2 * (terms - pieces) * (a_elems + b_elems)
    before = 0 if chunks == 1 else chunks * mn * 8
    return saved > pieces * chunks * mn * 8 - before


def grouped_products(kernel, layout: str, pa: torch.Tensor, pb: torch.Tensor, pieces: int,
                     chunks: int, kc: int, c: torch.Tensor, schedule: MatmulSchedule) -> None:
    """C = sum of the products A_i B_j with i + j < pieces, by `pieces` GEMMs over views of
    pieces stored once: A's slots hold A_0, A_1, ..., B's hold ..., B_1, B_0, so group g
    (the products with i + j = pieces - 1 - g, smallest first) is A's first pieces - g slots
    against B's last pieces - g slots, slot by slot. Each group has its own fp32 partials
    (fewer products per tensor-core accumulator than the T-slot GEMM, within the same
    bound), summed in fp32 with the chunks."""
    from argus.ops.schedules import Problem, heuristic

    rows, n = c.shape[-2], c.shape[-1]
    parts = torch.empty(pieces * chunks, rows, n, dtype=torch.float32, device=pa.device)
    for g in range(pieces):
        width = (pieces - g) * kc
        a_view = pa[..., :width]
        b_view = pb[..., g * kc:] if layout == "nk" else pb[:, g * kc:, :]
        sched = schedule.gemm or heuristic(Problem(rows, n, width, chunks, "bf16", "f32",
                                                   layout, False))
        run(kernel, (a_view, b_view, parts[g * chunks:(g + 1) * chunks]), s=sched)
    sum_parts(parts.view(1, pieces * chunks, rows * n), c.view(1, rows * n))


# B's pieces when B is (a view of) a parameter: an nn.Linear's weight is split once per
# parameter version, not on every forward (L2/55's 32768 x 32768 weight: 4.3 GB read and
# 6.4 GB written per call, ~2.6 ms of its 6.75 ms on the H200). Kept in argus.ops.weight_cache
# (shared with argus.ops.conv's weight repacks): by the parameter's identity (a weak
# reference), its version counter and the split's layout; an earlier version's pieces are let
# go of when a new one is kept, a freed parameter's at the next GEMM; bounded by bytes (a
# quarter of the GPU's memory); neither used nor filled while a CUDA graph is captured.
# Activations are never kept: a new tensor every call. Not seen: a write through `param.data`
# (its own version counter), as in argus.ops.conv's weight repack.
_PARAMETER_PIECES = DerivedCache("compose.gemm: a parameter's bf16 pieces",
                                 parameters_only=True)


def plan_chunks(k: int, terms: int, max_chunk: int = MAX_CHUNK,
                chunks: int = 0) -> tuple[int, int]:
    """(chunks, kc): chunks of at most max_chunk (at least `chunks` of them), kc a multiple of
    8 (16-byte bf16 rows)."""
    chunks = max(1, math.ceil(k / max_chunk), chunks)
    kc = -(-math.ceil(k / chunks) // 8) * 8
    return chunks, kc


# Split-K. The K chunks are the batch of one GEMM (or of one GEMM per product group), so each
# chunk is a K slice of its own CTAs, and their fp32 partials are summed in a fixed order
# (sum_parts: the same result on every run). The accuracy bound (max_chunk) fixes the fewest
# chunks; a small output over a long K (256 x 256 x 8192: 8 chunks of 2 tiles, 16 CTAs on
# 132 SMs) then leaves most SMs idle, and more chunks put them to work at the price of more
# partials to write and sum. `plan_split` weighs the two: the library GEMM's time model
# (argus/ops/gemm_model.py: units, waves, k-steps, for the schedule the heuristic picks) plus
# the partials' bytes at PARTIAL_BYTES_PER_US, over chunk counts that double up to
# SPLIT_GROWTH times the bound's while a chunk keeps MIN_KC of K.
MIN_KC = 128
SPLIT_GROWTH = 16
PARTIAL_BYTES_PER_US = 3.0e6      # ~3 TB/s: what a streaming pass reaches on an H100
SUM_LAUNCH_US = 5.0               # a chunk-sum pass's launch (host and device), each pass


@functools.lru_cache(maxsize=4096)
def plan_split(rows: int, n: int, k: int, nb: int, layout: str, terms: int,
               max_chunk: int = MAX_CHUNK, may_group: bool = True,
               at_least: int = 0) -> tuple[int, int, bool]:
    """(chunks, kc, grouped) of least predicted time for an [nb x] rows x K @ K x n product
    split into `terms` bf16 products (grouped: `grouped_products`, where `groups_pay` and
    may_group say so). The SM count is the GEMM schedule's (`num_sms`, 132 on an H100 / H200:
    the model's waves). Cached: one decision per problem, not per call."""
    from argus.ops import gemm_model
    from argus.ops.schedules import Problem, heuristic

    pieces = max(max(pair) for pair in SLOTS[terms]) + 1
    first, _ = plan_chunks(k, terms, max_chunk, at_least)
    best = None
    chunks = first
    while chunks <= first * SPLIT_GROWTH:
        c, kc = plan_chunks(k, terms, max_chunk, chunks)
        if c != chunks or (c > first and kc < MIN_KC):
            break
        grouped = may_group and nb == 1 and groups_pay(pieces, rows * c * kc, n * c * kc,
                                                       rows * n, c)
        widths = [(pieces - g) * kc for g in range(pieces)] if grouped else [terms * kc]
        us = 0.0
        for width in widths:
            problem = Problem(rows, n, width, nb * c, "bf16", "f32", layout, False)
            us += gemm_model.predict_us(problem, heuristic(problem), None)
        parts = (pieces if grouped else (c > 1)) * c
        us += 2 * parts * nb * rows * n * 4 / PARTIAL_BYTES_PER_US  # written, read by the sum
        if parts:
            passes = 2 if chunk_groups(parts, -(-rows * n // SUM_BN) * nb, nb) > 1 else 1
            us += passes * SUM_LAUNCH_US
        # the split kernels write the pieces of both operands (chunk padding included)
        slots = pieces if grouped else terms
        us += slots * 2 * (rows + n) * nb * c * kc / PARTIAL_BYTES_PER_US
        if best is None or us < best[0]:
            best = (us, c, kc, grouped)
        chunks *= 2
    return best[1], best[2], best[3]


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor,
           schedule: MatmulSchedule = MatmulSchedule()) -> torch.Tensor:
    """out = a @ b (torch.matmul semantics for rank >= 2 operands), every FLOP in Argus kernels."""
    from argus.ops.schedules import Problem, heuristic

    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    batch = tuple(out.shape[:-2])
    nb = math.prod(batch)
    if b.dim() == 2 and a.dim() > 2 and a.is_contiguous():   # rows of every batch at once
        a3, b3, rows = a.reshape(1, nb * m, k), b.unsqueeze(0), nb * m
        nb_eff = 1
    else:
        a3 = a.expand(*batch, m, k).reshape(nb, m, k) if a.shape[:-2] != batch or a.dim() > 3 \
            else (a if a.dim() == 3 else a.unsqueeze(0))
        b3 = b.expand(*batch, k, n).reshape(nb, k, n) if b.shape[:-2] != batch or b.dim() > 3 \
            else (b if b.dim() == 3 else b.unsqueeze(0))
        rows, nb_eff = m, nb
    if a3.dim() == 2:
        a3 = a3.unsqueeze(0)
    a_km = k_major(a3)                                     # [nb, rows, K]
    a_slots = tuple(p for p, _ in SLOTS[schedule.terms])
    b_slots = tuple(q for _, q in SLOTS[schedule.terms])
    bt = b3.transpose(-1, -2)
    layout = "nk" if bt.stride(-1) == 1 else "kn"   # B^T a K-major [N, K], or B [K, N]
    chunks, kc, grouped = plan_split(rows, n, k, nb_eff, layout, schedule.terms,
                                     schedule.max_chunk, out.is_contiguous(),
                                     schedule.split_k)
    pieces = max(a_slots) + 1
    if grouped:
        a_slots, b_slots = tuple(range(pieces)), tuple(reversed(range(pieces)))
    else:
        pieces = 0
    pa = split(a_km, a_slots, chunks, kc)                  # [nb*chunks, rows, T*kc]
    key = (layout, b_slots, chunks, kc, tuple(b3.shape), b3.stride())
    pb = _PARAMETER_PIECES.get(b, key)
    if pb is None:
        if layout == "nk":
            pb = split(k_major(bt), b_slots, chunks, kc)   # [nb*chunks, N, T*kc]
        else:
            pb = split_kn(b3 if b3.stride(-1) == 1 else k_major(b3), b_slots, chunks, kc)
        _PARAMETER_PIECES.put(b, key, pb)
    if pieces:
        pa_once, pb_once, pa = pa, pb, None
    kernel = gemm_kernel(ag.bf16, ag.f32, layout, True)
    c = out.view(nb_eff, rows, n) if out.is_contiguous() else None
    if pa is None:                                         # grouped: pieces stored once
        grouped_products(kernel, layout, pa_once, pb_once, pieces, chunks, kc, c, schedule)
        return out
    sched = schedule.gemm or heuristic(Problem(rows, n, pa.shape[-1], nb_eff * chunks, "bf16",
                                               "f32", layout, False))
    if chunks == 1 and c is not None:
        run(kernel, (pa, pb, c), s=sched)
        return out
    parts = torch.empty(nb_eff * chunks, rows, n, dtype=torch.float32, device=a.device)
    run(kernel, (pa, pb, parts), s=sched)
    target = c if c is not None else torch.empty(nb_eff, rows, n, device=a.device)
    sum_parts(parts.view(nb_eff, chunks, rows * n), target.view(nb_eff, rows * n))
    if c is None:
        out.copy_(target.view(out.shape))
    return out


__all__ = ["MatmulSchedule", "chunk_groups", "grouped_products", "groups_pay", "matmul",
           "plan_chunks", "plan_split", "split", "sum_chunks", "sum_parts", "transpose"]
