"""Decode attention (flash-decoding): 1..16 query tokens per sequence against a long KV cache.

Decode reads every K and V element once and does little arithmetic with it, so the kernel is
bound by memory bandwidth and its job is to keep HBM busy. Two ideas do that (FlashAttention's
`flash_fwd_splitkv` / FA3's `pack_gqa`, FlashInfer's decode kernels; ideas only, no code):

* **GQA packing.** All query heads of one KV head and all query tokens are packed as the M side
  of one tile: Q is viewed as [B, HKV, GS, D] with GS = (Hq / HKV) x Sq packed rows, row
  r = g * Sq + t for query head hk * G + g and token t (a free view of a [B, Hq, Sq, D] tensor
  contiguous in its last three dims). One KV block read from memory then serves the whole
  group: the cache is read once, not G times.
* **Split KV.** When B x HKV x row tiles does not fill the 132 SMs (batch 1 decoding), the KV
  length is split across `splits` CTAs (`num_splits` picks how many, by wave efficiency); each
  writes its normalized partial output and the log-sum-exp of its keys (fp32), and
  `decode_combine_kernel` merges the splits by LSE. With one split the decode kernel writes the
  final output (and LSE) itself: no second launch.

Each CTA is one producer warpgroup streaming its KV blocks through separate K and V TMA rings
(several stages deep: the bytes in flight are what a memory-bound kernel needs) and 1 or 2
consumer warpgroups of 64 packed rows each running the online softmax of the prefill kernel
(argus/kernels/attention.py): S = Q K^T by wgmma from shared memory, running row max and sum
in fp32, exp2 with scale * log2(e), -inf guards for rows that have seen no key, P from
registers into the P V wgmma. Q is loaded once per CTA through a one-stage TMA pipeline (TMA
zero-fills the packed rows past GS, which are never stored).

Causal masks (FlashAttention's bottom-right convention): query token t of Sq sees the keys
j <= SK - Sq + t. Only key blocks past the first token's last key pay for the mask (a branch
uniform per warpgroup), as do the blocks past SK's end (the key tail).

Invariant: the producer and the consumer warpgroups of a CTA walk the same KV blocks
[kb0, kb0 + n) of the CTA's split (same `_split_blocks`), so the pipeline step counts agree;
the splits of one (batch, kv head) are disjoint and cover [0, cdiv(SK, block_n)) (split s owns
blocks [s * per, min((s + 1) * per, blocks)), per = cdiv(blocks, splits)); a split without
blocks writes a zero output and LSE -inf, which the combine weighs 0.
"""

import dataclasses
import functools
from dataclasses import dataclass

import argus as ag
from argus.dtypes import DType
from argus.kernels.attention import HEAD_DIMS, LN2, LOG2E, ROWS
from argus.target.limits import (NUM_SMS, REGISTERS_PER_SM, SMEM_PER_CTA_OPTIN,
                                 smem_per_sm_share)

__all__ = ["DecodeSchedule", "MAX_QUERIES", "combine_shape", "decode_kernel",
           "decode_combine_kernel", "merge_rows", "with_fused_combine", "fused_combine_pays",
           "default_decode_schedule", "num_splits", "decode_smem_bytes"]

# The decode path takes up to this many query tokens per sequence (speculative decoding).
MAX_QUERIES = 16
MAX_SPLITS = 128


@dataclass(frozen=True)
class DecodeSchedule:
    """What the decode kernel lets a tuner choose."""

    block_n: int = 128        # keys per KV block (one TMA box of rows; wgmma N of Q K^T)
    stages: int = 3           # depth of each of the K and V rings
    consumers: int = 1        # consumer warpgroups, 64 packed query rows each
    producer_regs: int = 24
    consumer_regs: int = 240
    approx_exp2: bool = True  # ex2.approx.ftz alone (see AttentionSchedule.approx_exp2)
    # Staggered walk (a bench variant for the direct kernel, docs/perf/attention.md "Decode:
    # bytes in flight"):
    # CTA u starts its blocks at min((u % STAGGER_PHASES) * stagger, n) and wraps around, so
    # the CTAs that run together do not all read the same offset of their (batch, kv head)
    # at the same time (every CTA streams in lockstep otherwise). The online softmax is
    # order-free; 0 walks the blocks in order (the default, the same code as before).
    stagger: int = 0
    # Two streams (a bench variant for the direct kernel): the CTA walks the first and the
    # second half of its blocks alternately (0, h, 1, h + 1, ... with h = cdiv(n, 2)), so
    # each SM keeps two sequential reads of K and two of V going instead of one of each
    # (cuDNN runs several CTAs a SM: more concurrent streams at the same bytes in flight).
    streams: int = 1
    # The occupancy hint (ag.occupancy): the minimum CTAs an SM holds at once. 1 (the default)
    # gives a CTA the whole register file (255 registers a thread at launch); 2 renders
    # __launch_bounds__(threads, 2), so two CTAs share an SM: registers 128 a thread at launch
    # (producer_regs + consumers x consumer_regs <= 256) and shared memory at most
    # smem_per_sm_share(2) per CTA (bn64+st2 or bn80+st2 at hd128). Two CTAs are two memory
    # streams an SM, the question of docs/perf/attention.md "Decode: bytes in flight"
    # (the `occ2` variant of scripts/gpu_attention_bench.py --decode-variants).
    ctas_per_sm: int = 1
    # The split kernel merges its splits itself (`fused` bench variant; the split kernel
    # only): each split writes its partial O and LSE, a release fence, an atomic ticket per
    # (batch x kv head, warpgroup); the warpgroup that draws the last ticket merges every
    # split of its rows (after an acquire fence) and writes O and LSE. No combine launch.
    fused_combine: bool = False

    def __post_init__(self) -> None:
        problems = []
        if self.consumers not in (1, 2):
            problems.append(f"consumers={self.consumers}: 1 or 2 warpgroups of 64 packed rows")
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            problems.append(f"block_n={self.block_n}: a multiple of 16 in [16, 256]")
        if not 2 <= self.stages <= 8:
            problems.append(f"stages={self.stages} is outside 2..8")
        if not 0 <= self.stagger <= 64:
            problems.append(f"stagger={self.stagger} is outside 0..64 blocks")
        if self.streams not in (1, 2):
            problems.append(f"streams={self.streams}: 1 or 2 interleaved block streams")
        if self.ctas_per_sm not in (1, 2):
            problems.append(f"ctas_per_sm={self.ctas_per_sm}: 1 or 2 CTAs per SM")
        if self.fused_combine and self.consumers != 1:
            # the verifier's store.coverage counts a merge chunk loop whose start depends on
            # the warpgroup as 64 rows (tests/verify/test_attention_decode_fused_verifies.py)
            problems.append("fused_combine: the fused merge is built for one consumer "
                            "warpgroup (at most 64 packed rows)")
        for name in ("producer_regs", "consumer_regs"):
            regs = getattr(self, name)
            if regs % 8 or not 24 <= regs <= 256:
                problems.append(f"{name}={regs} is not a multiple of 8 in [24, 256] (setmaxnreg)")
        if 128 * (self.producer_regs + self.consumers * self.consumer_regs) > \
                REGISTERS_PER_SM // self.ctas_per_sm:
            problems.append("the warpgroups' registers exceed an SM's" if self.ctas_per_sm == 1
                            else f"the warpgroups' registers exceed 1/{self.ctas_per_sm} of an "
                                 f"SM's (ctas_per_sm={self.ctas_per_sm}: producer_regs + "
                                 f"consumers x consumer_regs <= "
                                 f"{REGISTERS_PER_SM // self.ctas_per_sm // 128})")
        if problems:
            raise ValueError("DecodeSchedule: " + "; ".join(problems))

    @property
    def block_m(self) -> int:
        return ROWS * self.consumers

    def problems_for(self, head_dim: int, dtype: DType = ag.bf16) -> list[str]:
        """What makes this schedule illegal at a head dimension (shared memory, registers)."""
        if head_dim not in HEAD_DIMS:
            return [f"head_dim={head_dim} is not one of {HEAD_DIMS}"]
        problems = []
        need = decode_smem_bytes(self, head_dim, dtype)
        if need > SMEM_PER_CTA_OPTIN:
            problems.append(f"Q and {self.stages} K and V stages need {need} bytes of shared "
                            f"memory at head_dim={head_dim}, more than {SMEM_PER_CTA_OPTIN}")
        elif need > smem_per_sm_share(self.ctas_per_sm):
            problems.append(f"Q and {self.stages} K and V stages need {need} bytes of shared "
                            f"memory at head_dim={head_dim}; {self.ctas_per_sm} CTAs per SM "
                            f"leave {smem_per_sm_share(self.ctas_per_sm)} each: use fewer "
                            f"stages or a smaller block_n")
        # fp32 O (head_dim / 2) and S (block_n / 2) per thread, plus P packed (block_n / 4)
        live = head_dim // 2 + self.block_n // 2 + self.block_n // 4
        if live > self.consumer_regs - 16:
            problems.append(f"O ({head_dim // 2}), S ({self.block_n // 2}) and P "
                            f"({self.block_n // 4}) registers per thread do not fit "
                            f"consumer_regs={self.consumer_regs}: use a smaller block_n")
        return problems


def decode_smem_bytes(s: DecodeSchedule, head_dim: int, dtype: DType = ag.bf16) -> int:
    """Shared memory of the decode kernel (Q, the K and V rings, their mbarriers: 16 bytes a
    stage of the Q, K and V pipelines; 1 KB of alignment slack), as lower/smem.py plans it."""
    eb = dtype.bytes
    return s.block_m * head_dim * eb + 2 * s.stages * s.block_n * head_dim * eb \
        + 16 * (1 + 2 * s.stages) + 1024 + (FUSED_SCRATCH if s.fused_combine else 0)


# The fused merge's shared memory: the ticket's broadcast slot and its reductions' and layout
# conversions' exchange buffers (lower/smem.py), measured at most 1456 bytes (hd 64-256, 1 or
# 2 consumers, 2-128 splits)
FUSED_SCRATCH = 2048


def with_fused_combine(s: DecodeSchedule, head_dim: int,
                       dtype: DType = ag.bf16) -> DecodeSchedule:
    """`s` with the fused combine (one consumer warpgroup: DecodeSchedule's rule), its K and
    V rings made shallower until the merge's shared memory fits beside them."""
    out = dataclasses.replace(s, fused_combine=True)
    while out.problems_for(head_dim, dtype) and out.stages > 2:
        out = dataclasses.replace(out, stages=out.stages - 1)
    return out


def fused_combine_pays(s: DecodeSchedule, splits: int, rows: int, head_dim: int,
                       paged: bool = False) -> bool:
    """Whether the op's default merges `splits` splits of `rows` packed rows in the split
    kernel (fused_combine) instead of a second launch: when the merge is one chunk of
    merge_rows rows (one memory latency for the last-arriving warpgroup) on a contiguous
    cache with one consumer warpgroup. Measured on the H200 (docs/perf/attention.md,
    "Fused combine on the H200"): one chunk (GQA 4 rows, 16 splits) is 1.13x / 1.07x the
    two launches at 8k / 32k keys; 16 chunks (64 rows) 0.47x / 0.66x, about 2 us a chunk
    against the ~3 us a second launch costs, so more than one chunk does not pay."""
    if splits <= 1 or paged or s.consumers != 1 or s.stagger or s.streams > 1:
        return False
    return rows <= merge_rows(combine_shape(splits, head_dim)[0], head_dim)


@functools.lru_cache(maxsize=1024)   # on the op's host path, every call
def default_decode_schedule(head_dim: int, rows: int = 1, dtype: DType = ag.bf16,
                            page_size: int = 0) -> DecodeSchedule:
    """The decode schedule for `rows` packed query rows (GQA group x query tokens): one
    consumer warpgroup up to 64 rows, two above; 128-key blocks (64 at head dim 256, where O
    alone is 128 registers per thread), and the deepest K and V rings that fit beside Q
    (up to 6 stages): a memory-bound kernel needs bytes in flight, about 190 KB per SM here.
    A paged cache (page_size > 0) whose pages are smaller than that block takes blocks of one
    page (a block never crosses a page) and up to 8 stages (the bytes in flight shrink with
    the block). Measured on the H200: docs/perf/attention.md, "Decode on the H200"."""
    consumers = 1 if rows <= ROWS else 2
    block_n = 64 if head_dim == 256 else 128
    deepest = 6
    if 0 < page_size < block_n:
        block_n, deepest = page_size, 8
    s = DecodeSchedule(block_n=block_n, stages=2, consumers=consumers)
    for stages in range(deepest, 1, -1):
        candidate = dataclasses.replace(s, stages=stages)
        if not candidate.problems_for(head_dim, dtype):
            return candidate
    return s


@functools.lru_cache(maxsize=4096)   # on the op's host path, every call
def num_splits(units: int, kv_blocks: int, *, num_sms: int = NUM_SMS,
               max_splits: int = MAX_SPLITS, min_blocks: int = 2, ctas_per_sm: int = 1) -> int:
    """How many KV splits to run for `units` CTAs' worth of (batch, kv head, row tile) work
    over `kv_blocks` key blocks each. A decode CTA fills its SM's shared memory (one CTA per
    SM) and is one memory stream, so the bandwidth follows the SMs that hold a CTA: measured
    on the H200 (docs/perf/attention.md, batch 1 x 8 kv heads), 64 CTAs read K and V at
    38% / 57% of copy at 8k / 32k keys, 128 CTAs at 40% / 63%.

    ctas_per_sm: the CTA slots of one SM the rule fills (the grid it aims at is
    ctas_per_sm x num_sms CTAs, FlashInfer's max_grid_size = blocks per SM x SMs). Today's
    decode kernels hold one SM each (255 registers a thread at launch: the codegen's
    __launch_bounds__(threads, 1)), so 1 is the op's rule; 2 asks for the shorter splits of
    two waves (batch 1, 8 kv heads: 32 splits, 256 CTAs), the `cta2` variant of
    scripts/gpu_attention_bench.py --decode-variants, and is the rule for a kernel that two
    CTAs share an SM with. The rules below read "the SMs" as those slots.

    * one split when the units nearly fill the SMs already (>= 80%);
    * else, when one wave of splits can fill >= 90% of the SMs: the split count that puts the
      most CTAs on the SMs in one wave (fewest splits among equals), each split keeping at
      least `min_blocks` blocks (a split's pipeline fill and its partial output cost about a
      block's time) and no split empty. Batch 1 with 8 kv heads: 16 splits (128 CTAs) from 4k
      keys on; 2 kv heads at 128k: 64 (128 CTAs; the wave rule below took 61, 122 CTAs);
    * else (units between ~66 and 105, or too few blocks for one full wave) the wave rule of
      flash-decoding (as FlashAttention describes it): the fewest splits whose wave
      efficiency (waves / whole waves) is within 95% of the best, no two counts giving the
      same blocks per split (FlashAttention takes 85%; a split CTA is an SM's stream here)."""
    if ctas_per_sm < 1:
        raise ValueError(f"num_splits: ctas_per_sm={ctas_per_sm} must be >= 1")
    num_sms *= ctas_per_sm       # CTA slots: the rules below fill slots, not SMs
    if units <= 0 or kv_blocks <= 0 or units >= 0.8 * num_sms:
        return 1
    top = max(1, min(max_splits, num_sms, kv_blocks // max(1, min_blocks)))

    def effective(s: int) -> int:   # splits that get blocks (per = cdiv(blocks, s) each)
        return -(-kv_blocks // -(-kv_blocks // s))

    one_wave = [effective(s) for s in range(1, top + 1) if units * effective(s) <= num_sms]
    if one_wave and units * max(one_wave) >= 0.9 * num_sms:
        return max(one_wave)

    def efficiency(s: int) -> float:
        waves = units * s / num_sms
        return waves / -(-units * s // num_sms)

    def distinct(s: int) -> bool:   # s splits give fewer blocks per split than s - 1
        return s == 1 or -(-kv_blocks // s) != -(-kv_blocks // (s - 1))

    candidates = [s for s in range(1, top + 1) if distinct(s)]
    best = max(efficiency(s) for s in candidates)
    for s in candidates:
        if efficiency(s) >= 0.95 * best:
            return effective(s)
    return 1


STAGGER_PHASES = 8


def _order(n, unit, stagger: int, streams: int = 1):
    """j -> the j-th block a CTA walks, relative to its first block: in order; with
    stagger > 0 rotated, (j + rot) % n with rot = min((unit() % STAGGER_PHASES) * stagger, n);
    with streams = 2 the two halves alternately, (i % 2) * cdiv(n, 2) + i // 2 of the
    (rotated) i: a permutation of 0 .. n - 1 for every n (the even i give 0 .. cdiv(n, 2) - 1,
    the odd ones cdiv(n, 2) .. n - 1). The producer and the consumers walk the same order.
    `unit` is called only when staggering (an unused index would be dead code)."""
    def rotated(j):
        return j
    if stagger:
        rot = ag.minimum((unit() % STAGGER_PHASES) * stagger, n)

        def rotated(j):
            return (j + rot) % n
    if streams == 1:
        return rotated
    half = ag.cdiv(n, 2)
    return lambda j: (rotated(j) % 2) * half + rotated(j) // 2


def _split_blocks(split, splits, SK, block_n: int):
    """The KV blocks [kb0, kb0 + n) of split `split` of `splits` (n may be 0 for a trailing
    split when splits do not divide the blocks)."""
    blocks = ag.cdiv(SK, block_n)
    per = ag.cdiv(blocks, splits)
    kb0 = split * per
    n = ag.maximum(ag.minimum(per, blocks - kb0), 0)
    return kb0, n


@functools.lru_cache(maxsize=None)
def decode_kernel(head_dim: int = 128, dtype: DType = ag.bf16, causal: bool = False,
                  split: bool = True, page_size: int = 0,
                  fused: bool = False) -> ag.KernelFunction:
    """The decode kernel for one head dim, dtype and mask (cached).

    split=True: Q [B, HKV, GS, D], K and V [B, HKV, SK, D], OP [B * HKV, SPLITS, GS, D] fp32
    (each split's normalized partial output; index b * HKV + hk) and LP [B * HKV, SPLITS, GS,
    1] fp32 (each split's log-sum-exp in log2 units, -inf for a split without keys); the grid
    is SPLITS x HKV x B. split=False: O [B, HKV, GS, D] in the input dtype and LSE
    [B, HKV, GS, 1] fp32 (natural log) directly, one CTA per (kv head, batch). Runtime scalars:
    qk_scale = softmax scale * log2(e), q_len = Sq (packed row r is token r % Sq; read only
    under the causal mask).

    page_size > 0: the paged KV cache (vLLM / FlashInfer). K and V are [PAGES, HKV,
    page_size, D] views of the caches [pages, page_size, HKV, D] (a transpose, no copy; the
    page size is a compile-time extent), BT [B, MB] int32 the block table (sequence b's
    logical page i is physical page BT[b, i]) and SL [B, 1] int32 its length in keys (the Sq
    queries are its last tokens). The producer reads the page id of each KV block (block_n
    divides page_size: a block never crosses a page) and loads that page's rows; lengths are
    clamped to MB * page_size (never a read past the sequence's row of the table), and keys
    past a sequence's length are masked as the key tail is.

    fused=True (split, contiguous; schedule fused_combine=True): the split kernel also takes
    O [B, HKV, GS, D] and LSE [B, HKV, GS, 1] (as the direct kernel writes them), CNT
    [B, HKV, 2] int32 (zeros at the first launch; every launch leaves them zero) and the
    compile-time splits_pad >= SPLITS. After writing its partial, each consumer warpgroup
    fences (release), draws a ticket from CNT[b, hk, wg] (atom.inc, wrap SPLITS) and the one
    that draws SPLITS - 1 (the last split of its rows to finish) fences (acquire) and merges
    every split's partial of its 64 rows into O and LSE, as decode_combine_kernel does: no
    second launch."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim={head_dim}: the decode kernel takes {HEAD_DIMS}")
    if dtype not in (ag.bf16, ag.f16):
        raise ValueError(f"dtype {dtype}: the decode kernel takes bf16 or f16")
    if page_size < 0 or page_size & (page_size - 1) or 0 < page_size < 16:
        raise ValueError(f"page_size={page_size}: a power of two >= 16 (0: no paging)")
    if fused and (not split or page_size):
        raise ValueError("fused=True is the split kernel over a contiguous cache (split=True, "
                         "page_size=0)")
    paged = page_size > 0
    D, dt = head_dim, dtype
    atoms = D // 64   # Q, K and V tiles are D / 64 column atoms of 64 (128-byte rows)
    neg_inf = float("-inf")

    def body(Q, K, V, BT, SL, O, L, qk_scale, q_len, s: DecodeSchedule, merge=None):
        problems = s.problems_for(D, dt)
        if s.fused_combine != fused:
            problems.append(f"fused_combine={s.fused_combine} needs the "
                            + ("fused split kernel (decode_kernel(..., fused=True))"
                               if s.fused_combine else "unfused kernel (fused=False)"))
        if paged and page_size % s.block_n:
            problems.append(f"block_n={s.block_n} does not divide page_size={page_size} "
                            f"(a KV block must not cross a page)")
        if (s.stagger or s.streams > 1) and (split or paged):
            # the verifier proves the reordered walks of the direct kernel; the splits' cover
            # proof (check_wgmma._split_cover) reads each split's keys as kb0 + j, in order
            problems.append(f"stagger={s.stagger}, streams={s.streams}: the staggered walk "
                            f"and the two streams are for the direct (one split), contiguous "
                            f"kernel; use stagger=0 and streams=1 with splits or pages")
        if problems:
            raise ag.TraceError(f"{s} at head_dim={D}: " + "; ".join(problems),
                                fix="use argus.kernels.attention_decode."
                                    "default_decode_schedule(head_dim, rows, page_size=...)")
        BM, BN, C = s.block_m, s.block_n, s.consumers
        HKV, GS = Q.shape[1], Q.shape[2]
        if s.ctas_per_sm > 1:
            ag.occupancy(s.ctas_per_sm)
        # packed rows beyond one tile would need a row-tile grid dim; the op splits them
        ag.tag_assume(lambda: ag.sym(GS) <= BM)
        if split:
            splits = O.shape[1]
            sp, hk, b = ag.grid(splits, HKV, Q.shape[0])
        else:
            splits = 1
            hk, b = ag.grid(HKV, Q.shape[0])
            sp = 0
        if paged:
            per_page = page_size // BN
            # key indices are int32 (the mask's jb * BN + column): a table of at most 2^30
            # keys per sequence keeps every key and block end far from overflow
            ag.require(ag.sym(BT.shape[1]) * page_size <= 2 ** 30,
                       "a sequence's keys (max_pages x page_size) are counted in int32: at most "
                       "2^30 keys per sequence")
            # read once, by every role: all walk the same blocks. Clamped to the table's
            # pages: a length past them never makes a read outside the sequence's row
            SK = ag.maximum(ag.minimum(ag.load_scalar(SL, (b, 0)), BT.shape[1] * page_size), 0)
            _tag_pages(K, V, BT, page_size, SK)
        else:
            SK = K.shape[2]
        kb0, n = _split_blocks(sp, splits, SK, BN)
        # the CTA's place in the launch order (traced only when staggering: no dead code)
        order = _order(n, lambda: (b * HKV + hk) * splits + sp, s.stagger, s.streams)

        def kv_coords(jb, a, page):
            """TMA coordinates of column atom a of KV block jb (on physical `page`, paged)."""
            if not paged:
                return (b, hk, jb * BN, 64 * a)
            return (page, hk, (jb % per_page) * BN, 64 * a)
        # blocks every row sees whole: inside the sequence and, causal, up to the first
        # token's last key SK - Sq
        whole = SK // BN
        if causal:
            whole = ag.minimum(whole, ag.maximum(SK - q_len + 1, 0) // BN)

        sQ = ag.smem((1, atoms * BM, 64), dt, swizzle=128)
        sK = ag.smem((s.stages, atoms * BN, 64), dt, swizzle=128)
        sV = ag.smem((s.stages, atoms * BN, 64), dt, swizzle=128)
        q_pipe = ag.pipeline(1, consumers=C)
        k_pipe = ag.pipeline(s.stages, consumers=C)
        v_pipe = ag.pipeline(s.stages, consumers=C)

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            with q_pipe.produce() as st:
                for a in range(atoms):
                    ag.tma.load(sQ[st].rows_of(a * BM, BM), Q, (b, hk, 0, 64 * a))
            for j in ag.range(n):
                jb = kb0 + order(j)
                page = ag.load_scalar(BT, (b, jb // per_page)) if paged else None
                with k_pipe.produce() as st:
                    for a in range(atoms):
                        ag.tma.load(sK[st].rows_of(a * BN, BN), K, kv_coords(jb, a, page))
                with v_pipe.produce() as st:
                    for a in range(atoms):
                        ag.tma.load(sV[st].rows_of(a * BN, BN), V, kv_coords(jb, a, page))

        with ag.role("consumer", warpgroups=C, regs=s.consumer_regs) as wg:
            r0 = wg * ROWS                                  # this warpgroup's first packed row
            if causal:
                # packed row r is token t = r % Sq, whose last key is SK - Sq + t: integer
                # tiles, exact for every sequence length (the float form was exact below 2^24)
                token = (r0 + ag.arange(ROWS)[:, None]) % q_len
                row_last_key = token + (SK - q_len)
            m_i = ag.full((ROWS, 1), neg_inf)   # running row max of S * scale * log2(e)
            l_i = ag.full((ROWS, 1), 0.0)       # running row sum of exp2(S - m)
            o = ag.zeros((ROWS, D))
            with q_pipe.consume() as qs:
                for j in ag.range(n):
                    jb = kb0 + order(j)
                    with k_pipe.consume() as ks:
                        sc = ag.zeros((ROWS, BN))
                        for a in range(atoms):
                            sc = ag.wgmma(sQ[qs].rows_of(a * BM + wg * ROWS, ROWS),
                                          sK[ks].rows_of(a * BN, BN), sc)
                        sc = sc * qk_scale
                        # checked, no code: the keys a query may see
                        allowed = (ag.tag(sc).key if paged else ag.tag(sc).sk) < ag.sym(SK)
                        ag.tag_assert(ag.tag_any(ag.sym(jb) >= ag.sym(whole), allowed),
                                      message="an unmasked block holds only keys every "
                                              "query may see")
                        # only blocks past `whole` (the causal diagonal, the key tail) pay for
                        # the mask; the branch is uniform per warpgroup
                        with ag.when(jb >= whole):
                            key = jb * BN + ag.arange(BN)[None, :]
                            valid = key < SK
                            if causal:
                                valid = valid & (key <= row_last_key)
                            sc = ag.where(valid, sc, neg_inf)
                            if not causal:   # (the causal bound names r % Sq: not stated)
                                ag.tag_assert((ag.tag(sc).live == 1) == allowed,
                                              message="the mask keeps exactly the keys a "
                                                      "query may see")
                        row_max = sc.max(axis=1)
                        m_new = ag.maximum(m_i, row_max)
                        # a row that has seen no key yet keeps m = -inf: subtract 0, not -inf
                        m_use = ag.where(m_new == neg_inf, 0.0, m_new)
                        p = ag.exp2(sc - m_use, approx=s.approx_exp2)
                        alpha = ag.exp2(m_i - m_use, approx=s.approx_exp2)
                        l_i = l_i * alpha + p.sum(axis=1)
                        m_i = m_new
                        with v_pipe.consume() as vs:
                            # P's k index is this block's key, V's row too
                            o = ag.wgmma(p.to(dt), sV[vs], o * alpha, trans_b=True)
            no_key = l_i == 0.0
            o = o * (1.0 / ag.where(no_key, 1.0, l_i))     # rows that saw no key: zeros
            if split:
                bh = b * HKV + hk
                ag.store(O, (bh, sp, r0, 0), o)
                ag.store(L, (bh, sp, r0, 0), ag.where(no_key, neg_inf,
                                                      m_i + ag.log(l_i) * LOG2E))
                if merge is not None:
                    _merge_last(O, L, *merge, b, hk, wg, splits, D, dt)
            else:
                ag.store(O, (b, hk, r0, 0), o.to(dt))
                ag.store(L, (b, hk, r0, 0), ag.where(no_key, neg_inf, m_i * LN2 + ag.log(l_i)))

    if paged:   # O and L as the split or the direct kernel writes them
        out_t = ag.Tensor[("BH", "SPLITS", "GS", D, ag.f32)] if split else \
            ag.Tensor[("B", "HKV", "GS", D, dt)]
        lse_t = ag.Tensor[("BH", "SPLITS", "GS", 1, ag.f32)] if split else \
            ag.Tensor[("B", "HKV", "GS", 1, ag.f32)]

        def attention_decode_paged(Q: ag.Tensor[("B", "HKV", "GS", D, dt)],
                                   K: ag.Tensor[("PAGES", "HKV", page_size, D, dt)],
                                   V: ag.Tensor[("PAGES", "HKV", page_size, D, dt)],
                                   BT: ag.Tensor[("B", "MB", ag.i32)],
                                   SL: ag.Tensor[("B", 1, ag.i32)],
                                   O: out_t, L: lse_t,
                                   qk_scale: ag.f32, q_len: ag.i32,
                                   s: DecodeSchedule = default_decode_schedule(D, 1, dt)):
            body(Q, K, V, BT, SL, O, L, qk_scale, q_len, s)
        fn = attention_decode_paged
    elif fused:
        def attention_decode_split_fused(Q: ag.Tensor[("B", "HKV", "GS", D, dt)],
                                         K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                                         V: ag.Tensor[("B", "HKV", "SK", D, dt)],
                                         OP: ag.Tensor[("BH", "SPLITS", "GS", D, ag.f32)],
                                         LP: ag.Tensor[("BH", "SPLITS", "GS", 1, ag.f32)],
                                         O: ag.Tensor[("B", "HKV", "GS", D, dt)],
                                         LSE: ag.Tensor[("B", "HKV", "GS", 1, ag.f32)],
                                         CNT: ag.Tensor[("B", "HKV", 2, ag.i32)],
                                         qk_scale: ag.f32, q_len: ag.i32,
                                         s: DecodeSchedule = with_fused_combine(
                                             default_decode_schedule(D, 1, dt), D, dt),
                                         splits_pad: int = 16):
            ag.require(ag.sym(OP.shape[1]) <= splits_pad,
                       "the fused merge reads splits_pad splits: SPLITS <= splits_pad")
            body(Q, K, V, None, None, OP, LP, qk_scale, q_len, s,
                 merge=(O, LSE, CNT, splits_pad))
        fn = attention_decode_split_fused
    elif split:
        def attention_decode_split(Q: ag.Tensor[("B", "HKV", "GS", D, dt)],
                                   K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                                   V: ag.Tensor[("B", "HKV", "SK", D, dt)],
                                   OP: ag.Tensor[("BH", "SPLITS", "GS", D, ag.f32)],
                                   LP: ag.Tensor[("BH", "SPLITS", "GS", 1, ag.f32)],
                                   qk_scale: ag.f32, q_len: ag.i32,
                                   s: DecodeSchedule = default_decode_schedule(D, 1, dt)):
            body(Q, K, V, None, None, OP, LP, qk_scale, q_len, s)
        fn = attention_decode_split
    else:
        def attention_decode(Q: ag.Tensor[("B", "HKV", "GS", D, dt)],
                             K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                             V: ag.Tensor[("B", "HKV", "SK", D, dt)],
                             O: ag.Tensor[("B", "HKV", "GS", D, dt)],
                             LSE: ag.Tensor[("B", "HKV", "GS", 1, ag.f32)],
                             qk_scale: ag.f32, q_len: ag.i32,
                             s: DecodeSchedule = default_decode_schedule(D, 1, dt)):
            body(Q, K, V, None, None, O, LSE, qk_scale, q_len, s)
        fn = attention_decode
    name = f"attention_decode_d{D}_{dt.name}" + ("_causal" if causal else "") \
        + ("_split" if split else "") + (f"_paged{page_size}" if paged else "") \
        + ("_fused" if fused else "")
    return ag.kernel(fn, name=name)


def merge_rows(splits_pad: int, head_dim: int) -> int:
    """Packed rows the fused merge takes at once: its [splits_pad, rows, head_dim] fp32 tile
    stays within 64 registers a thread of one warpgroup (the combine kernel's budget at half
    its threads), a power of two in 1..16 (so chunks never cross a warpgroup's 64 rows)."""
    rows = max(1, min(16, MERGE_ELEMENTS // (splits_pad * head_dim)))
    return 1 << (rows.bit_length() - 1)


MERGE_ELEMENTS = 64 * ROWS * 2      # 64 registers x 128 threads


def _merge_last(OP, LP, O, LSE, CNT, splits_pad: int, b, hk, wg, splits, D: int,
                dt: DType) -> None:
    """The fused combine (decode_kernel(..., fused=True)), for the ROWS packed rows of
    consumer warpgroup wg after it stored its split's partial: a release fence, a ticket from
    the (b, hk, wg) counter that resets itself after `splits` arrivals, and the warpgroup that
    draws the last ticket (every split has stored these rows) merges them after an acquire
    fence, as the combine kernel does: O = sum_k w_k O_k / sum_k w_k, w_k = 2^(LP_k -
    max LP), over chunks of merge_rows packed rows that exist (rows past GS are skipped: one
    chunk for a 4-row GQA group), each a [splits_pad, rows, D] tile loaded at once (splits
    past SPLITS read as LSE -inf, weight 0): one memory latency a chunk, not one a split."""
    neg_inf = float("-inf")
    R = merge_rows(splits_pad, D)
    r0 = wg * ROWS
    bh = b * O.shape[1] + hk
    ag.fence()                     # release: this warpgroup's partial before its ticket
    ticket = ag.atomic_fetch_add(CNT, (b, hk, wg), wrap=splits)
    with ag.when(ticket == splits - 1):
        ag.fence()                 # acquire: every split's partial before the loads
        # the chunks of R rows of this warpgroup's 64 that exist (none past GS)
        per = ROWS // R
        for c in ag.range(wg * per, ag.minimum(ag.cdiv(O.shape[2], R), wg * per + per)):
            rr = c * R
            lse = ag.load(LP, (bh, 0, rr, 0), (splits_pad, R, 1), other=neg_inf)
            m = lse.max(axis=0)
            m_use = ag.where(m == neg_inf, 0.0, m)        # a row no split saw a key of
            w = ag.exp2(lse - m_use)
            w_sum = w.sum(axis=0)
            o = (ag.load(OP, (bh, 0, rr, 0), (splits_pad, R, D), other=0.0) * w).sum(axis=0)
            no_key = w_sum == 0.0
            ag.store(O, (b, hk, rr, 0), (o * (1.0 / ag.where(no_key, 1.0, w_sum))).to(dt))
            ag.store(LSE, (b, hk, rr, 0),
                     ag.where(no_key, neg_inf, (m + ag.log(w_sum) * LOG2E) * LN2))


def _tag_pages(K, V, BT, page_size: int, SK) -> None:
    """Tags for the verifier (no code): the block table's entry (b, i) is page(b, i), and the
    logical key of row r of page g of K and V is pos(g) * page_size + r, where
    pos(page(b, i)) == i is the table's contract (trusted, ag.tag_assume): a physical page
    holds one logical page index, in every sequence that lists it (so no sequence lists a
    page twice; shared prefix pages sit at the same index in each). The mask and the key
    claims (wgmma.k-once over `key`: the page's row is an integer extent, not a coordinate
    the reduction is counted over) are then stated over the logical key, as in the
    contiguous kernel. `key_extent` is the sequence's length SK as the reading CTA knows it
    (read from seq_lens): the keys [0, SK) that wgmma.k-once must see multiplied once, over
    the splits' program id too (a user coordinate has no tensor dim to take it from)."""
    page, pos = ag.opaque("page", 2), ag.opaque("page_pos")
    ag.tag_tensor(BT, value=lambda b, i: page(b, i))
    ag.tag_assume(lambda b, i: pos(page(b, i)) == i)
    for T in (K, V):
        ag.tag_tensor(T, key=lambda g, h, r, d: pos(g) * page_size + r,
                      key_extent=lambda g, h, r, d: ag.sym(SK))


def combine_shape(splits: int, head_dim: int) -> tuple[int, int]:
    """(splits_pad, rows) of the combine kernel for `splits` splits: the splits rounded up to a
    power of two (at least 2), and packed rows per CTA such that the loaded tile of
    splits_pad x rows x head_dim fp32 stays within 64 registers a thread (256 threads), at
    least one row: more than 64 splits at head dim 256 hold 128 a thread (one row)."""
    pad = max(2, 1 << (max(1, splits) - 1).bit_length())
    rows = max(1, min(16, COMBINE_ELEMENTS // (pad * head_dim)))
    return pad, 1 << (rows.bit_length() - 1)


COMBINE_THREADS = 256
COMBINE_ELEMENTS = 64 * COMBINE_THREADS


@functools.lru_cache(maxsize=None)
def decode_combine_kernel(head_dim: int = 128, dtype: DType = ag.bf16, splits_pad: int = 16,
                          rows: int = 4) -> ag.KernelFunction:
    """The second half of split decoding: O = sum_s w_s O_s / sum_s w_s with
    w_s = 2^(LP_s - max_s LP_s); LSE = ln 2 x (max + log2(sum w)), -inf (and O zeros) for a
    row no split saw a key of. OP [B * HKV, SPLITS, GS, D], LP [B * HKV, SPLITS, GS, 1] fp32 as
    the decode kernel wrote them (SPLITS <= splits_pad); O [B, HKV, GS, D] in `dtype`, LSE
    [B, HKV, GS, 1] fp32. One CTA per `rows` packed rows of one (kv head, batch) loads every
    split of its rows at once (a [splits_pad, rows, D] tile, splits past SPLITS read as LSE
    -inf, weight 0) and reduces over the splits: no loop of dependent loads, so the kernel
    costs about one memory latency (combine_shape picks splits_pad and rows)."""
    D, dt, SP = head_dim, dtype, splits_pad
    neg_inf = float("-inf")

    def attention_decode_combine(OP: ag.Tensor[("BH", "SPLITS", "GS", D, ag.f32)],
                                 LP: ag.Tensor[("BH", "SPLITS", "GS", 1, ag.f32)],
                                 O: ag.Tensor[("B", "HKV", "GS", D, dt)],
                                 LSE: ag.Tensor[("B", "HKV", "GS", 1, ag.f32)]):
        HKV, GS = O.shape[1], O.shape[2]
        rb, hk, b = ag.grid(ag.cdiv(GS, rows), HKV, O.shape[0])
        ag.tag_assume(lambda: ag.sym(OP.shape[1]) <= SP)
        bh = b * HKV + hk
        r0 = rb * rows
        lse = ag.load(LP, (bh, 0, r0, 0), (SP, rows, 1), other=neg_inf)   # log2 units
        m = lse.max(axis=0)
        m_use = ag.where(m == neg_inf, 0.0, m)          # a row no split saw a key of
        w = ag.exp2(lse - m_use)                        # 0 for splits past SPLITS
        w_sum = w.sum(axis=0)
        o = (ag.load(OP, (bh, 0, r0, 0), (SP, rows, D), other=0.0) * w).sum(axis=0)
        no_key = w_sum == 0.0
        ag.store(O, (b, hk, r0, 0), (o * (1.0 / ag.where(no_key, 1.0, w_sum))).to(dt))
        ag.store(LSE, (b, hk, r0, 0),
                 ag.where(no_key, neg_inf, (m + ag.log(w_sum) * LOG2E) * LN2))

    return ag.kernel(attention_decode_combine, threads=COMBINE_THREADS,
                     name=f"attention_decode_combine_d{D}_{dt.name}_s{SP}_r{rows}")
