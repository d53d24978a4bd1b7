"""The library's FlashAttention forward: O = softmax(Q K^T * scale) V on Hopper, FA3-style.

One DSL kernel, specialized by `attention_kernel` over what the *problem* fixes (head dim,
dtype, causal mask, whether the log-sum-exp is written); what is tunable lives in
`AttentionSchedule`. Built from the warp-specialized skeleton (warp_specialized.py: the
persistent walk, the epilogues) the way FlashAttention-3 structures its forward
(hopper/flash_fwd_kernel_sm90.h, mainloop_fwd_sm90_tma_gmma_ws.hpp):

* a producer warpgroup loads a tile's Q once (a one-stage pipeline: the next tile's Q goes in
  as soon as the consumers are done with this one's) and streams K and V blocks through two
  separate TMA rings;
* `consumers` consumer warpgroups own 64 query rows each: S = Q K^T with wgmma from shared
  memory, the online softmax on the accumulator (running row max and sum carried across KV
  blocks, exp2 with scale * log2(e) folded into one multiply, guards so a row that has seen no
  key yet subtracts 0 instead of -inf), the output accumulator rescaled by exp2(m_old - m_new),
  and P converted in registers straight into the register-A wgmma P V;
* masking costs only where it is needed: a block every row of the warpgroup sees in full
  (before its `unmasked` count) skips the mask under a branch that is uniform per warpgroup;
  the causal diagonal and the key tail pay for the compares; blocks no row may see are never
  loaded. (One loop with a uniform branch rather than FA3's two loops: the verifier proves the
  one-loop form; over two loops sharing the accumulator it reports k-once as violated.)
* optionally (`ordered`), FA3's ping-pong: the consumer warpgroups take turns issuing
  S = Q K^T (ag.ordered sections, named barriers), so one's softmax and P V overlap another's
  S; Q then lives in registers, loaded once per tile straight into the wgmma A fragment (a turn
  is never awaited while a ring slot is held, and Q's one-stage ring would hold one). Proven
  like the default. With `fa3_overlap` too (FA3's full configuration), one turn wraps both
  issues of an iteration, S_j and P_{j-1} V_{j-1}, inside the K and V steps, and Q stays in
  shared memory: the turn holder waits for nothing inside its turn, and the warpgroup with
  the earliest pending turn finds its K and V slots filled (every warpgroup has finished the
  iteration two back, so their slots were released); O's rescale then follows P V's wait 0
  (`rescale_late`, FA3's rescale_o), so the turn holds the two GEMM issues alone. Proven like
  the default;
* optionally (`intra_wg_overlap`), FA3's intra-warpgroup overlap: S of block j is issued
  before the softmax of block j - 1, the last block's after the loop. It verifies with zero
  findings at head dims 64, 128 and 256 (the bench's `overlap` tiles) since h329: before,
  reduce.coverage left that last block out of the row max and sum (a false positive: the
  tail read beside the online softmax's rescale was not paired;
  tests/verify/test_attention_overlap_coverage.py). The agent's attention family still
  refuses it ("unproven", families/declared.py) over its whole space, not rechecked;
* optionally (`fa3_overlap`; default_schedule's choice at head dims 128 and 256, and at causal
  head dim 64 for short queries), the same overlap in FA3's order
  (mainloop_fwd_sm90_tma_gmma_ws.hpp, "intra-warpgroup overlapping"): iteration j issues S_j =
  Q K_j^T, then P_{j-1} V_{j-1} with O rescaled by alpha_{j-1} (or, `rescale_after_pv`, O
  rescaled by alpha_j after P V's wait 0 instead), then runs the softmax of S_j
  while P V is still in flight: lower/sync.py's general wait places `wgmma.wait 1` before the
  softmax (S_j retired, P V not) and `wgmma.wait 0` at the V step's end, and keeps P_{j-1}'s
  packed A registers alive until then (fence.operands); that wait is pinned, so ptxas keeps
  the exp2 before it in the SASS too. P_{j-1} (fp32, packed into the A fragment at the issue)
  is the loop-carried value; with `packed_p` it is the packed bf16 (FP8: e4m3) fragment
  itself (lower/packed.py: a half (a quarter) of the registers, what FA3's wider key blocks
  need). Proven like the plain loop: its synchronization (sync.*), and P's key tags across
  the back edge (the verifier's loop model takes the carried P at iteration j as the body's
  P of iteration j - 1, verify/transfer/control.py), the peeled last P V counted with the
  loop's;
* O /= l at the end (rows that saw no key are zeros), stored from registers or by stmatrix +
  TMA store; optionally LSE = ln(sum_j exp(scale * s_j)) per row (-inf for rows without keys).

Tensors are [B, H, S, D] as the kernel sees them; any strides TMA can address work, so the
[B, S, H, D] layout is the permuted view (argus/ops/attention.py), no copy. Any sequence
lengths: TMA zero-fills the rows of a box past the end, tail keys are masked to -inf and tail
query rows are not stored. Causal masks are aligned bottom-right when S != SK (query i sees
keys j <= i + SK - S, FlashAttention's convention). GQA / MQA: Q has H heads, K and V HKV,
H a multiple of HKV; query head h reads kv head h // (H / HKV).

Invariant: the producer and every consumer warpgroup walk the same units and, per unit, the
same number of K and V pipeline steps (`_kv_blocks`), so the per-role step counters stay in
step across units (warp_specialized.py's invariant); each consumer warpgroup splits those
steps between its unmasked and masked loop at its own row offset.
"""

import dataclasses
import functools
from dataclasses import dataclass

import argus as ag
from argus.dtypes import DType
from argus.kernels.warp_specialized import (Staging, Unit, occupancy_problems, store_tile,
                                            store_tile_staged)
from argus.target.exp2_emulation import fraction_problem
from argus.target.fragments import acc_order_col
from argus.target.limits import (NUM_SMS, REGISTERS_PER_SM, entry_registers,
                                 smem_per_sm_share)

__all__ = ["AttentionSchedule", "attention_kernel", "base_schedule", "default_schedule",
           "fa3_overlap_schedule", "fp8_schedule", "HEAD_DIMS", "LOG2E", "P_BIAS",
           "P_SCALE", "packed_p_problems", "prefetch_next_q_problems",
           "rescale_after_pv_problems", "store_cols_problems"]

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
HEAD_DIMS = (64, 128, 256)
ROWS = 64  # query rows per consumer warpgroup: one wgmma M
# FP8 (FA3's Max_offset): P is computed as exp2(x - P_BIAS) = P_SCALE * exp2(x), in
# [0, P_SCALE] instead of [0, 1], before it is rounded to e4m3: 1.0 lands at 2^8, so P down to
# 2^-14 keeps e4m3's normal precision instead of going subnormal below 2^-6. The row sum l is
# the sum of the same scaled P, so O / l cancels the factor; the LSE takes it out (P_BIAS ln 2)
P_BIAS = -8.0
P_SCALE = 2.0 ** -P_BIAS
# FP8 key blocks: V^T's stage holds block_n / fp8_vt_atom(block_n) column atoms of one swizzle
# span each (64: one 64-byte atom; 128, 256: one, two 128-byte atoms; 192: three 64-byte
# atoms; 224: seven 32-byte atoms, FA3's FP8 tile at head dim 128, hopper/tile_size.h). 192
# and up fit two 240-register consumer warpgroups at head dim 128 with P carried packed only
# (packed_p: spill_problems, docs/perf/attention.md h313)
FP8_BLOCK_N = (64, 128, 192, 224, 256)
# registers a consumer thread of the fa3 loop needs beyond O, S and the carried P (its
# scalars), from NVRTC 13.0's spills (docs/perf/attention.md, h295 and h302): clean at 196
# carried in 240 (128 x 176, P packed after P V's wait since h302) and 104 in 160, spilling at
# 208 in 240 (fp32 P at 128 x 144; packed 128 x 192 causal) and 128 in 160
FA3_CARRY_SLACK = 44
# the same for the FP8 kernel (NVRTC 13.0, two 240-register consumers, h313): clean at 208
# carried (head dim 256's 128 x 128 with P packed as e4m3; 204 at hd128's 128 x 224),
# spilling at 224 (hd128's 128 x 256 packed: 144 B of stores since P's register-A fence is a
# pin, e749f1cc; clean with 9879b96's copy) and up (fp32 P at 128 x 192 hd128, 128 x 128
# hd256: 360 / 700 B)
FA3_CARRY_SLACK_FP8 = 24


@dataclass(frozen=True)
class AttentionSchedule:
    """What the attention forward lets a tuner choose."""

    block_m: int = 128        # query rows per tile: 64 per consumer warpgroup
    block_n: int = 128        # keys per KV block (wgmma N of S = Q K^T, K of P V)
    stages: int = 2           # depth of each of the K and V rings
    consumers: int = 2
    producer_regs: int = 24
    consumer_regs: int = 240
    # one CTA per SM walking the tiles (causal: longest first), or one CTA per tile (the
    # hardware launches them in order, so causal tiles also go longest first). The verifier
    # proves both clean, the persistent walk's div/mod unit decode under the causal mask too.
    persistent: bool = False
    num_sms: int = NUM_SMS
    # The order tiles are handed out in. "head" (the default): a head's m tiles are adjacent
    # (under the causal mask longest first), heads next, batches slowest: the grid
    # (m tiles, H, B). "lpt": longest-processing-time first across the heads of a batch
    # (FA3's tile_scheduler.hpp orders causal tiles this way, with L2-sized sections of heads):
    # heads fastest, then m tiles (causal: longest first), batches slowest: the grid
    # (H, m tiles, B). With "head" the last tiles the hardware hands out include the longest
    # tiles of the last heads, which then run alone at the end of the grid; with "lpt" the
    # grid of each batch ends with its shortest tiles (a list-scheduling model of 16k tokens
    # at 1k-8k gains 3-13% on causal masks). One batch's K and V stay in L2 (8 KB a key over
    # all heads at 2048 hidden: 32 MB at 4k). Without the mask every tile is equal and only
    # the L2 reuse differs. The persistent walk decodes its units the same way (unit // H,
    # then % and // m tiles). With the causal mask and fa3_overlap the verifier used to report
    # wgmma.agree and k-once (20 min of z3; counterexamples the interpreter runs right): its
    # false alarm, not the decode's (a unit's varying KV block count left the roles' step
    # counters unpaired; fixed in verify/transfer/control.py): it verifies clean in 2 s.
    # "snake" (the persistent walk only): "head" order, with every second round of the walk
    # reversed. The walk hands unit pid + r x programs to CTA pid in round r; under "snake"
    # round r's units go to the CTAs in reverse in odd rounds (the last, partial round
    # reversed over the units it has), so a CTA that took a long causal tile in one round
    # takes a short one in the next: a static round robin of causal tiles in "head" order
    # gives CTA pid the same positions every other round (at 1k, 8 m tiles a head, 132 CTAs:
    # tiles of 8 and 4 blocks in turn to CTA 0, of 5 and 1 to CTA 3; the busiest CTA 1.21x
    # (2k) to 1.83x (1k, two CTAs an SM) the mean's KV blocks, the snake 1.03x), which is
    # why the causal walk lost to the grid (docs/perf/attention.md, short37 / short38). FA3
    # walks causal tiles dynamically (hopper/tile_scheduler.hpp
    # DynamicPersistentTileScheduler, an atomic tile counter); the snake is its static
    # stand-in. A list-scheduling model of the bench's 16k tokens (a tile costs its KV blocks
    # plus 1.15 blocks in the grid, prologue and epilogue exposed, fitted to the grid's 1k
    # full rate; plus 0.44 in the walk, fitted to persistent+earlyq's) puts the causal
    # makespan at 1k / 2k 6-15% over the ideal with the snake, 9-34% for the grid, 24-89%
    # for the round robin walk
    tile_order: str = "head"
    # The occupancy hint (ag.occupancy): CTAs an SM holds at once. 2 renders
    # __launch_bounds__(threads, 2): the CTA's warpgroups share half the register file
    # (entry_registers: 80 a thread at 3 warpgroups, so producer_regs + consumers x
    # consumer_regs <= 240) and at most smem_per_sm_share(2) of shared memory, so one CTA's
    # prologue (Q and the first K, V loads) and epilogue (O's store) overlap the other's KV
    # loop, and two CTAs' softmaxes and GEMMs interleave. ptxas compiles the whole kernel at
    # the entry count, so the accumulators must fit it (problems_for): head_dim 64 in 128 x
    # 64 tiles, two 104-register consumer warpgroups in the plain loop (the `occ2` bench
    # token); head_dim 128 in 64 x 64 tiles, one consumer warpgroup (256 threads enter with
    # 128: O 64 + S 32 + P 16 in FA3's overlap; `occ2` at head dim 128); not head_dim 256.
    ctas_per_sm: int = 1
    epilogue: str = "direct"  # "direct": st.global from registers; "tma": stmatrix + TMA store
    # epilogue "tma": columns of O staged in shared memory per round (0: all head_dim at
    # once), so the TMA-store epilogue fits at head_dim 256, where Q (64 KB) and two K and V
    # stages of 64 keys (128 KB) leave 35 KB of the 227 KB: a 128 x 256 staging tile (64 KB)
    # does not, two rounds of 128 columns (32 KB) do (GemmSchedule.store_cols' rounds:
    # warp_specialized.Staging; the second round's stmatrix waits for the first round's bulk
    # stores to have read their slots). Why: the direct epilogue is 64 four-byte STG a
    # thread at head_dim 256, 512 warp stores a CTA each writing 16 bytes to 8 rows (8 L2
    # sectors half used), issued by the consumers before the next tile's first S; stmatrix
    # puts the same 64 KB in shared memory in 16 STSM.x4 a thread, and the TMA unit writes
    # it out in whole lines while the next tile runs (docs/perf/attention.md, h290)
    store_cols: int = 0
    # Ping-pong (FA3): consumer warpgroups take turns issuing S = Q K^T (ag.ordered: named
    # barriers), so one's softmax overlaps the other's GEMMs. In the plain loop Q then lives
    # in registers (q_in_registers: the turn wraps the K step, before Q's slot was held by
    # a consume step around the loop). With fa3_overlap (FA3's full configuration) the turn
    # wraps both issues, S_j and P_{j-1} V_{j-1}, inside the K and V steps, Q read from its
    # stage: every warpgroup consumes every Q, K and V step, which ag.ordered accepts (the
    # turn holder needs no slot only the waiter's release frees), and S stays a
    # shared-memory wgmma, so it is not retired inside the turn as a register-A one would be
    ordered: bool = False
    # FA3's intra-warpgroup overlap: issue S = Q K^T of the next block before the softmax of
    # this one, so the softmax runs while the tensor cores compute (S of two blocks live).
    # Not proven yet (see the module docstring): needs ARGUS_VERIFY=0.
    intra_wg_overlap: bool = False
    # FA3's order of the overlap: S_j, then P_{j-1} V_{j-1}, then the softmax of S_j while
    # P V is in flight (wait 1), wait 0 before O and P are touched again. Verifies like the
    # default (module docstring; tests/mutations/test_attention_fa3_carry.py).
    fa3_overlap: bool = False
    # FlashAttention-4's partial exp2 emulation: of every 16 groups of 8 keys of an S block
    # (one register pair of the accumulator each), this many compute P's exp2 on the FMA pipe
    # by a polynomial (ag.exp2 emulate, argus/target/exp2_emulation.py: relative error
    # <= 1.05e-4) instead of the SFU; 0: all on the SFU. For kernels where the SFU and the
    # tensor core take turns (ncu 2026-12-04, FP8 hd128: tensor 39% + XU 42% active; bf16
    # hd64: 49% + 52%) while the FMA pipe is a fifth busy. Needs approx_exp2.
    exp2_emulate: int = 0
    # The softmax's instruction count (FA3's softmax.h, built with --use_fast_math): exp2 on
    # the SFU alone (ag.exp2(approx=True), ex2.approx.ftz: libdevice's exp2f adds a range
    # check and two predicated multiplies per element on sm_90, 3 of the ~9 instructions an S
    # element costs), and the scale folded into the exponent's FFMA, exp2(s * scale - m *
    # scale), with the row max taken on the raw scores (one FMUL per element less). Folding
    # needs scale > 0 (max(s) * scale is the max of s * scale only then): argus.ops.attention
    # runs the unfolded schedule for any other scale.
    approx_exp2: bool = False
    fold_scale: bool = False
    # FP8 only: V^T comes with its keys permuted inside each 32-key group
    # (target/fragments.py acc_order_col; argus.ops.attention_fp8 writes it so in its
    # transposing copy), so P's A fragment is the S accumulator's own registers packed to e4m3
    # (AccOrderA8): no quad shuffles or byte_perm per P V step (AccToA8's 32 SHFL + 16 PRMT per
    # 128 keys per thread). The kernel then takes Vt [B, HKV, D, SKV], SKV = Skv rounded up to
    # 32 (attention_kernel(..., permuted_vt=True)); FA3 does the same (hopper/utils.h
    # permute_Cregs_fp8 with its in-kernel V transpose writing the matching key order)
    permuted_vt: bool = False
    # Under the causal mask, each consumer warpgroup computes only the KV blocks its own 64
    # rows may see, instead of every block the tile loads (the last row's): when block_m
    # exceeds block_n the first warpgroup's last blocks are masked whole (128 x 64 at head dim
    # 256: one block a tile, 1/18 of the work at 1k; 192 x 128 at head dim 64: one block in
    # some tiles). Their K and V stages are released unread. Not with ping-pong (the turns
    # need every warpgroup's steps).
    own_blocks: bool = False
    # fa3_overlap only: release Q's stage right after the tile's last S = Q K^T (retired by
    # the softmax that reads it) instead of after the peeled last P V, so in the persistent
    # walk the producer loads the next tile's Q (and then its first K block) while this
    # tile's last P V and O's store run: the prologue of the next tile hides behind the
    # epilogue of this one (FA3 arrives on its QueryEmpty barrier at the same point,
    # hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp); and the producer loads each tile's first K
    # block before its Q (FA3's load order), so K_0 is not queued behind Q's stage. One CTA
    # per tile: only the load order changes
    early_q_release: bool = False
    # 2: the CTAs of a 2-CTA cluster take adjacent m tiles of one (batch, head) and share its
    # K and V blocks by TMA multicast: each CTA's producer loads half of every K and V box
    # (block_n / 2 rows, by its cluster rank) into both CTAs' stage, so the L2 -> SM traffic
    # of K and V halves (FA3 on sm90: ClusterM 2 for bf16 head dims >= 128 without a mask,
    # hopper/flash_fwd_launch_template.h, the K / V loads multicast across the cluster). At
    # 128 x 128 (head dim 128) a 128-key block is 64 KB of K and V for 8.4 MFLOP: at 590
    # TFLOP/s over 132 SMs a CTA streams 35 GB/s, 4.6 TB/s for the chip, most of what the
    # L2 delivers; the same at 128 x 64 (head dim 256). Full masks only (FA3's rule too: the
    # pair's causal tiles would walk different KV block counts, and each CTA's stage waits
    # for both halves). The grid (or the walk's units) pairs m tiles: 2 x cdiv(m tiles, 2),
    # an odd count's last CTA loading its half for its peer and storing nothing (its rows
    # lie past S). Not with tile_order "lpt" (heads fastest in the grid) nor FP8 (V^T's
    # boxes are column atoms)
    cluster_m: int = 1
    # The persistent walk only: at the start of each unit the producer prefetches the Q tile
    # of its next unit (unit + programs, through tile_of: the snake's reversal included) into
    # L2 (ag.tma.prefetch, cp.async.bulk.prefetch.tensor: no shared memory, no barrier). Q is
    # the one operand read once: K and V of a head are read by its m tiles, which adjacent
    # CTAs take in the same round, so most of their loads hit L2, while each tile's Q comes
    # from HBM when the producer loads it, after the previous tile's last S (early Q
    # release) or last P V. That load (32 KB at head_dim 128, 64 KB at 256: HBM latency plus
    # the transfer, some 1.5-2.5k cycles) is what the consumers wait for at a tile boundary
    # once the epilogue no longer covers it (the TMA store: stmatrix and ~1k cycles of the
    # last P V; docs/perf/attention.md, h290). A hint: the results do not depend on it
    prefetch_next_q: bool = False
    # fa3_overlap only: carry P_{j-1} across the loop's back edge as P V's 16-bit A fragment,
    # two elements a 32-bit register (lower/packed.py stores a carried bf16/f16 A fragment
    # packed), block_n / 4 registers a thread, instead of fp32 (block_n / 2) packed at the
    # issue; FA3 carries the packed fragment (tOrP). With O, S_j and P_{j-1} live together
    # that is what FA3's 128 x 176 tile at head_dim 128 needs (NVRTC 13.0, two 240-register
    # consumers: fp32 P spills 776 B at block_n 176, packed P none since h302 packs P_j
    # after P V's wait, 120 B before; hd256 128 x 80 spills 60 B with fp32 P and none packed,
    # docs/perf/attention.md, h295 / h302). The softmax's exp2 stays between P V's issue and
    # its wait in the SASS. The FP8 kernel (h313) carries P as e4m3 words, four a register
    # in the order the 8-bit A fragment reads them (lower/packed.py): block_n / 8 registers
    # against block_n / 2 fp32, rounded once after the softmax and handed to P V's wgmma as
    # they are (with a permuted V^T; the natural order still gathers each word from two quad
    # lanes at the issue), which is what FA3's 128 x 224 FP8 tile needs at head dim 128.
    # Not the default until measured on a GPU
    packed_p: bool = False
    # fa3_overlap only: O is rescaled by alpha_j (the softmax of S_j) after the V step's end
    # retired P_{j-1} V_{j-1}, and the next P V accumulates onto it unscaled (o + P V) instead
    # of o * alpha_{j-1} + P V at the issue: FA3's order at head dims <= 128 (rescale_o after
    # warpgroup_wait<0>, hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp, RescaleOBeforeGemm off),
    # so the head_dim / 2 multiplies a thread do not sit between a ping-pong turn's wait and
    # its pass (the other warpgroup's S and P V wait on them). Ping-pong on the overlap order
    # always takes it (rescale_late); this field opts the overlap order without the turns in.
    # Not the default until measured on a GPU
    rescale_after_pv: bool = False
    # The running row sum l kept as each thread's partial (FA3's softmax.h: reduce_sum without
    # warp_reduce in online_softmax, the quad's allreduce once in finalize): a (64, 8) tile of
    # P's columns folded by c mod 8 (static 8-column windows added elementwise: in the wgmma
    # accumulator layout each thread holds the same two columns of every 8-column group, so
    # the fold is thread-local), rescaled by alpha each block and reduced across the quad
    # once after the KV loop. Per KV block at head dim 128 this drops the sum's quad shuffles
    # (2 a row, 4 SHFL + 4 FADD a thread) and splits its FADD chain in four (16 deep, not 32);
    # the row max still takes its shuffles every block (the exponent needs it). block_n a
    # multiple of 8; fa3_overlap only. The verifier proves the folded sum's coverage (h323,
    # argus/verify/fold.py: the windows are every column of P once, the partials are summed
    # over axis 1 after the loop, and the unfolded sum's per-block claims hold of the folded
    # P), bf16 and FP8 alike. Not the default until measured on a GPU
    defer_row_sum: bool = False
    # fa3_overlap only: FA3's early K release (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp,
    # IntraWGOverlap): K_j's consume step holds the two issues alone, S_j = Q K_j^T and
    # P_{j-1} V_{j-1}, inside V_{j-1}'s step; its end waits wait_group 1 (S_j retired, P V
    # still in flight) and releases K_j before the softmax of S_j, and V_{j-1}'s end waits
    # wait_group 0 and releases V_{j-1}. P_{j-1}'s A fragment is converted (or carried,
    # packed_p) before K_j's step, so its registers outlive the step and lower/sync.py keeps
    # the group in flight past it (_outlives). The producer may load K_{j+2} a softmax
    # earlier. Without ping-pong; bf16 / f16 and FP8 (h328: P V is one group per V^T atom,
    # all kept in flight, K's end waits wait_group(atoms)); with rescale_after_pv (the FP8
    # default) P V accumulates in place into the loop's own O, which check_wgmma's k-once
    # follows into the peeled last P V (_siblings). Not the default until measured on a GPU
    early_k_release: bool = False

    @property
    def rescale_late(self) -> bool:
        """O's rescale after P V retires (rescale_after_pv), always with ping-pong on FA3's
        overlap order: nothing but the two GEMM issues inside the turn."""
        return self.fa3_overlap and (self.ordered or self.rescale_after_pv)

    @property
    def q_in_registers(self) -> bool:
        """Ping-pong in the plain loop keeps Q in registers (its turn wraps the K step alone,
        and an rs wgmma is retired inside its turn); with fa3_overlap the turn wraps both
        issues inside the K and V steps and S reads Q from its shared-memory stage."""
        return self.ordered and not self.fa3_overlap

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise ValueError(f"{type(self).__name__}: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        """What makes this schedule illegal for any problem."""
        problems = []
        if self.consumers not in (1, 2, 3) or self.block_m != ROWS * self.consumers:
            problems.append(f"each consumer warpgroup owns 64 query rows: block_m={self.block_m} "
                            f"needs consumers={self.block_m // ROWS} (1, 2 or 3)")
        if self.block_n % 16 or not 16 <= self.block_n <= 256:
            problems.append(f"block_n={self.block_n}: a multiple of 16 in [16, 256] (wgmma N of "
                            f"Q K^T, k16 steps of P V, one TMA box of rows)")
        if not 2 <= self.stages <= 8:
            # a K step issues wgmma, so the pipeline lowering lets it keep a group in flight
            # across steps: a 1-stage ring would wait for its own release
            problems.append(f"stages={self.stages} is outside 2..8")
        if self.epilogue not in ("direct", "tma"):
            problems.append(f"epilogue={self.epilogue!r} is not 'direct' or 'tma'")
        problems += store_cols_problems(self.store_cols, self.epilogue)
        for name in ("producer_regs", "consumer_regs"):
            regs = getattr(self, name)
            if regs % 8 or not 24 <= regs <= 256:
                problems.append(f"{name}={regs} is not a multiple of 8 in [24, 256] (setmaxnreg)")
        if 128 * (self.producer_regs + self.consumers * self.consumer_regs) > REGISTERS_PER_SM:
            problems.append(f"128 x ({self.producer_regs} + {self.consumers} x "
                            f"{self.consumer_regs}) registers exceed the {REGISTERS_PER_SM} of "
                            f"an SM")
        if self.num_sms < 1:
            problems.append(f"num_sms={self.num_sms} must be positive")
        if self.tile_order not in ("head", "lpt", "snake"):
            problems.append(f"tile_order={self.tile_order!r} is not 'head', 'lpt' or 'snake'")
        if self.cluster_m not in (1, 2):
            problems.append(f"cluster_m={self.cluster_m}: 1, or 2 (a CTA pair sharing K and V "
                            f"by multicast)")
        elif self.cluster_m == 2:
            if self.tile_order == "lpt":
                problems.append("cluster_m=2 pairs adjacent m tiles of one head: not with "
                                "tile_order 'lpt' (heads fastest)")
            if self.num_sms < 2:
                problems.append("cluster_m=2 needs num_sms >= 2 (one pair)")
        if self.tile_order == "snake" and not self.persistent:
            problems.append("tile_order='snake' orders the rounds of the persistent walk: it "
                            "needs persistent=True (the one-CTA-a-tile grid is handed out by "
                            "the hardware as CTAs finish)")
        problems += occupancy_problems(self.ctas_per_sm, self.consumers, self.producer_regs,
                                       self.consumer_regs)
        if self.ordered and self.consumers < 2:
            problems.append("ordered=True (ping-pong) needs 2 or 3 consumer warpgroups to take "
                            "turns")
        if self.ordered and self.intra_wg_overlap:
            # fa3_overlap takes the turns (around S_j and P_{j-1} V_{j-1}); this older order
            # has none
            problems.append("ordered=True (ping-pong) is not combined with intra_wg_overlap: "
                            "use fa3_overlap=True (FA3's order, which takes the turns)")
        if self.ordered and self.own_blocks:
            problems.append("own_blocks=True is not combined with ping-pong (ordered): the "
                            "warpgroups take turns each step, so each takes every step")
        problems += prefetch_next_q_problems(self.prefetch_next_q, self.persistent,
                                             self.ordered, self.fa3_overlap)
        if self.early_q_release and not self.fa3_overlap:
            problems.append("early_q_release=True releases Q after the last S of FA3's "
                            "overlap order (the last P V is peeled after it): it needs "
                            "fa3_overlap=True")
        problems += packed_p_problems(self.packed_p, self.fa3_overlap)
        problems += rescale_after_pv_problems(self.rescale_after_pv, self.fa3_overlap)
        if self.defer_row_sum and self.block_n % 8:
            problems.append(f"defer_row_sum=True folds P's columns by 8-column windows (one "
                            f"accumulator column pair a thread each): block_n={self.block_n} "
                            f"is not a multiple of 8")
        if self.defer_row_sum and not self.fa3_overlap:
            # built and measured for FA3's loop only. Before h323 the verifier read the folded
            # (64, 8) partial as 8 keys a block and reported the sum after ping-pong's plain
            # loop as violated; since the fold claims it verifies clean there too (head dims
            # 64 and 128, CPU only), so lifting this is the lead's call after a GPU run
            problems.append("defer_row_sum=True is built for FA3's overlap order: it needs "
                            "fa3_overlap=True (the plain loop's fold verifies, but is "
                            "neither measured nor tested in the interpreter)")
        problems += early_k_release_problems(self.early_k_release, self.fa3_overlap,
                                             self.ordered)
        if self.intra_wg_overlap and self.fa3_overlap:
            problems.append("intra_wg_overlap and fa3_overlap are two orders of one loop: "
                            "choose one")
        if not 0 <= self.exp2_emulate <= 16:
            problems.append(f"exp2_emulate={self.exp2_emulate}: a count of the 16 key groups "
                            f"in 0..16")
        elif self.exp2_emulate:
            # the S block's row holds block_n / 8 groups: codegen refuses a count it cannot
            # keep exactly (3 of 16 over a 64-key block), so the schedule says so first, where
            # the agent's search and the bench's tokens see it
            fraction = fraction_problem(self.block_n, (8, self.exp2_emulate, 16))
            if fraction:
                problems.append(f"exp2_emulate={self.exp2_emulate} at block_n={self.block_n}: "
                                f"{fraction}")
        if self.exp2_emulate and not self.approx_exp2:
            problems.append("exp2_emulate splits the SFU's ex2.approx with the FMA pipe: it "
                            "needs approx_exp2=True")
        return problems

    def problems_for(self, head_dim: int, dtype: DType = ag.bf16) -> list[str]:
        """What makes this schedule illegal for a head dimension: shared memory, registers."""
        problems = []
        if head_dim not in HEAD_DIMS:
            problems.append(f"head_dim={head_dim} is not one of {HEAD_DIMS}")
            return problems
        if dtype.bits == 8:
            problems += self._fp8_problems()
            if self.cluster_m > 1:
                problems.append("cluster_m=2 splits K and V boxes by rows; the FP8 kernel's "
                                "V^T boxes are column atoms: bf16 / f16 only")
        elif self.permuted_vt:
            problems.append(f"permuted_vt=True reads an FP8 V^T with permuted keys; {dtype} "
                            f"P already sits in the A fragment: leave it False")
        if self.cluster_m > 1 and self.persistent and head_dim == 256:
            # NVRTC 13.0: 8 / 28 bytes of spills with or without early_q_release (the K and
            # V releases arrive on the peer's barriers too, beside O's 128 registers); the
            # grid form builds clean
            problems.append("cluster_m=2 with the persistent walk spills at head_dim=256: "
                            "use the grid (persistent=False)")
        if self.store_cols and head_dim % self.store_cols:
            problems.append(f"store_cols={self.store_cols} does not divide head_dim={head_dim} "
                            f"into equal rounds of the O staging tile")
        need = smem_bytes(self, head_dim, dtype)
        share = smem_per_sm_share(self.ctas_per_sm)
        if need > share:
            problems.append(f"Q, {self.stages} K and V stages"
                            + (" and the O staging tile" if self.epilogue == "tma" else "")
                            + f" need {need} bytes of shared memory at head_dim={head_dim}, "
                              f"more than {share}"
                            + (f" ({self.ctas_per_sm} CTAs per SM)" if self.ctas_per_sm > 1
                               else ""))
        # fp32 accumulators per thread: O (head_dim / 2) and S (block_n / 2, twice with the
        # overlap), plus P in bf16 (block_n / 4); more than the budget surely spills
        # (fa3_overlap: P_{j-1}'s packed registers are in flight during the softmax of S_j,
        # and P_j is made from S_j's registers after they retire: still one P). The plain
        # loop packs P from S as S dies, so P costs nothing beside S: 192 x 192 at head_dim
        # 64 builds without spills in 3 x 160 registers (NVRTC 13.0), where ping-pong at
        # 192 x 160 (Q's fragment too) already spills, so only the plain loop drops P's term
        plain = not (self.intra_wg_overlap or self.fa3_overlap or self.ordered)
        p_regs = 0 if plain else self.block_n * dtype.bytes // 8   # packed, 2 or 4 a register
        live = head_dim // 2 + self.block_n // 2 * (2 if self.intra_wg_overlap else 1) \
            + p_regs + (head_dim // 4 if self.q_in_registers else 0)   # Q's A fragment
        if self.ctas_per_sm > 1:
            # ptxas compiles the whole kernel at the count a thread enters with (65536 /
            # (threads x ctas_per_sm), __launch_bounds__), whatever setmaxnreg hands the
            # consumers later: NVRTC 13.0 refuses head_dim 128 in two 64-row consumer
            # warpgroups (80 at entry: "register target of 94") and head_dim 256 in one (128
            # at entry: "register target of 158"); head_dim 128 in one consumer warpgroup
            # (block_m 64) at block_n 64 builds in 128 without spills
            threads = 128 * (1 + self.consumers)
            entry = entry_registers(threads, self.ctas_per_sm)
            if live > entry - 8:
                problems.append(f"ctas_per_sm={self.ctas_per_sm} at head_dim={head_dim}: "
                                f"ptxas compiles the kernel at the {entry} registers each of "
                                f"{threads} threads enters with, too few for the {live} its "
                                f"accumulators need (O {head_dim // 2}, S {self.block_n // 2}"
                                + (f", P {p_regs}" if p_regs else "") + "): at head_dim 128 "
                                "use one consumer warpgroup (block_m=64, consumers=1) and "
                                "block_n=64; head_dim 256 does not fit two CTAs an SM")
        if live > self.consumer_regs - 8:
            problems.append(f"O ({head_dim // 2}), S ({self.block_n // 2}"
                            + (" twice" if self.intra_wg_overlap else "") + ")"
                            + (f" and P ({p_regs})" if p_regs else "")
                            + (f" and Q ({head_dim // 4})" if self.q_in_registers else "")
                            + f" registers per thread do not fit consumer_regs="
                              f"{self.consumer_regs}: use a smaller block_n")
        return problems

    def spill_problems(self, head_dim: int, dtype: DType = ag.bf16) -> list[str]:
        """Where a schedule problems_for takes would spill (it builds and runs, slower): the
        fa3 loop's carried tiles past what NVRTC keeps in registers. Not a refusal (the bench
        probes such shapes, the causal hd128 default spills 8 B); the agent's search leaves
        these points out (agent/families/attention.py resource_check)."""
        problems = []
        if self.fa3_overlap and self.ctas_per_sm == 1 and head_dim in HEAD_DIMS:
            # the fa3 loop carries P_{j-1} across the back edge beside O and S_j: fp32 (block_n
            # / 2 registers) or, with packed_p, the packed A fragment (block_n / 4 bf16 words,
            # block_n / 8 e4m3); problems_for's estimate counts it packed. NVRTC 13.0
            # (docs/perf/attention.md, h295's spill table) builds these three tiles clean up
            # to consumer_regs - FA3_CARRY_SLACK registers and spills past it (240: 196 clean,
            # 208 spills; 160: 104 clean, 128 spills): the loop's scalars (addresses,
            # counters, the rows' max and sum) take the rest. Two CTAs an SM compile at the
            # entry count (problems_for)
            packed = self.packed_p
            p_carried = self.block_n * dtype.bytes // 8 if packed else self.block_n // 2
            carried = head_dim // 2 + self.block_n // 2 + p_carried
            slack = FA3_CARRY_SLACK_FP8 if dtype.bits == 8 else FA3_CARRY_SLACK
            if carried > self.consumer_regs - slack:
                problems.append(f"fa3_overlap carries O ({head_dim // 2}), S "
                                f"({self.block_n // 2}) and P ({p_carried}, "
                                + ("packed" if packed else "fp32")
                                + f") registers per thread: {carried} spill in consumer_regs="
                                  f"{self.consumer_regs} (the loop's scalars need "
                                  f"{slack} more): use a smaller block_n"
                                + ("" if self.packed_p
                                   else " or packed_p=True (P carried packed)"))
        return problems

    def _fp8_problems(self) -> list[str]:
        """What the FP8 (e4m3) forward does not take: P V reads V^T K-major in column atoms
        of one swizzle span of keys, and P's A fragment is gathered from S's registers."""
        problems = []
        if self.block_n not in FP8_BLOCK_N:
            problems.append(f"block_n={self.block_n}: the FP8 kernel reads V^T in column atoms "
                            f"of one swizzle span of keys (fp8_vt_atom: 64, 128 or 2 x 128 "
                            f"bytes, 3 x 64 at 192, 7 x 32 at 224): one of {FP8_BLOCK_N}")
        if self.q_in_registers:
            # with fa3_overlap (FA3's FP8 configuration) Q stays in its shared-memory stage
            # and S is an ss wgmma, so ping-pong there is taken (docs/perf/attention.md, h308)
            problems.append("ordered=True (ping-pong) in the plain loop keeps Q in registers, "
                            "which the FP8 kernel does not gather into the 8-bit A fragment: "
                            "add fa3_overlap=True (the turns around S and P V, Q in shared "
                            "memory) or use the plain loop")
        return problems


def store_cols_problems(store_cols: int, epilogue: str) -> list[str]:
    """AttentionSchedule.store_cols' rules at any head dim (problems_for adds the head dim's):
    a function of the two fields, so the agent's declared space (agent/families/declared.py)
    refuses a point in the schedule's own words without building it."""
    if not isinstance(store_cols, int) or store_cols < 0:
        return [f"store_cols={store_cols!r} must be an int >= 0 (0: stage all of O's columns "
                f"at once)"]
    if store_cols and (epilogue != "tma" or store_cols % 64):
        return [f"store_cols={store_cols}: columns of O staged per round of the TMA-store "
                f"epilogue: a multiple of 64 with epilogue='tma' (0: all of them)"]
    return []


def prefetch_next_q_problems(prefetch_next_q: bool, persistent: bool, ordered: bool,
                             fa3_overlap: bool) -> list[str]:
    """AttentionSchedule.prefetch_next_q's rules (a function of the fields it reads, as
    store_cols_problems, for the agent's declared space). Ping-pong with fa3_overlap keeps Q
    in its shared-memory stage (AttentionSchedule.q_in_registers), so it takes the prefetch."""
    problems = []
    if prefetch_next_q and not persistent:
        problems.append("prefetch_next_q=True prefetches the Q tile of the persistent "
                        "walk's next unit: it needs persistent=True (a CTA of the grid "
                        "does not know which tile comes after it)")
    if prefetch_next_q and ordered and not fa3_overlap:
        problems.append("prefetch_next_q=True prefetches in the box of Q's shared-memory "
                        "stage; ping-pong (ordered) in the plain loop loads Q into registers "
                        "and has none (with fa3_overlap=True Q keeps its stage)")
    return problems


def rescale_after_pv_problems(rescale_after_pv: bool, fa3_overlap: bool) -> list[str]:
    """AttentionSchedule.rescale_after_pv's rule at any dtype (a function of the fields it
    reads, as store_cols_problems, for the agent's declared space). With ordered=True on the
    overlap order the field changes nothing (rescale_late: ping-pong always rescales late)."""
    if rescale_after_pv and not fa3_overlap:
        return ["rescale_after_pv=True moves O's rescale behind the P V that FA3's overlap "
                "order leaves in flight: it needs fa3_overlap=True"]
    return []


def early_k_release_problems(early_k_release: bool, fa3_overlap: bool,
                             ordered: bool) -> list[str]:
    """AttentionSchedule.early_k_release's rule (a function of the fields it reads, as
    packed_p_problems, for the agent's declared space), at any dtype and with either rescale
    (rescale_after_pv: proven since h328, check_wgmma._siblings)."""
    if early_k_release and not fa3_overlap:
        return ["early_k_release=True reorders FA3's overlap loop (K_j released after S_j "
                "retires, P_{j-1} V_{j-1} still in flight): it needs fa3_overlap=True"]
    if early_k_release and ordered:
        return ["early_k_release=True is built without ping-pong (the turn around both "
                "issues sits inside the V step): use ordered=False"]
    return []


def packed_p_problems(packed_p: bool, fa3_overlap: bool) -> list[str]:
    """AttentionSchedule.packed_p's rule at any dtype (a function of the fields it reads, as
    store_cols_problems, for the agent's declared space; the FP8 kernel's refusal is
    _fp8_problems', problems_for's registers count the carried P in its form)."""
    if packed_p and not fa3_overlap:
        return ["packed_p=True packs the P that FA3's overlap order carries across the "
                "loop's back edge: it needs fa3_overlap=True"]
    return []


def smem_bytes(s: AttentionSchedule, head_dim: int, dtype: DType = ag.bf16) -> int:
    """Shared memory of the kernel's buffers (barriers and alignment not counted)."""
    eb = dtype.bytes
    q = 0 if s.q_in_registers else s.block_m * head_dim * eb
    kv = 2 * s.stages * s.block_n * head_dim * eb
    out_bytes = 2 if dtype.bits == 8 else eb   # FP8 writes bf16
    staged = min(s.store_cols or head_dim, head_dim)   # O's columns staged per round
    staging = s.block_m * staged * out_bytes if s.epilogue == "tma" else 0
    return q + kv + staging + 1024


def base_schedule(head_dim: int) -> AttentionSchedule:
    """FA3's tile shapes on the H100 where our kernel can run them (HOPPER.md §2.2), in the
    plain loop (no overlap, no ping-pong): three consumer warpgroups of 64 rows at head_dim 64,
    two at 128 and 256; 128-key blocks, 64 at head_dim 256 (O alone is 128 fp32 registers per
    thread there). The shapes the schedule variants (ping-pong, the overlaps, the persistent
    walk) start from."""
    if head_dim == 64:
        return AttentionSchedule(block_m=192, block_n=128, consumers=3, producer_regs=32,
                                 consumer_regs=160, stages=2)
    if head_dim == 256:
        return AttentionSchedule(block_m=128, block_n=64, stages=2)
    return AttentionSchedule(block_m=128, block_n=128, stages=2)


# A short causal length at head_dim 64 (the tests' name for 1k): runs 5 and 6 gave it two
# consumer warpgroups in the overlap order; since 2026-12-04 TWO_CTAS_64 covers it.
SHORT_CAUSAL_64 = 1024
# head_dim 64 at seq_len <= TWO_CTAS_64[causal]: two CTAs an SM, longest tiles first (measured
# at 1k full, 1k and 4k causal, 2026-12-04; at 4k full the ping-pong default stays ahead)
TWO_CTAS_64 = {False: 1024, True: 4096}
# causal head_dim 256 at lo < seq_len <= hi: tile_order "lpt" + own_blocks (the op gained at
# 4k; at 1k the kernel alone gained but the op's call lost in two runs of 2026-12-04)
LPT_OWN_CAUSAL_256 = (1024, 4096)
# head_dim 128 / 256, full mask: the persistent walk up to this query length, with Q released
# early (early_q_release) up to PERSISTENT_EARLYQ_FULL (default_schedule's docstring)
PERSISTENT_FULL = 2048
PERSISTENT_EARLYQ_FULL = 1024
# causal masks at these head dims up to this query length: the persistent walk in snake order
# (tile_order "snake": every second round handed out in reverse, so each CTA's causal blocks
# even out). H200, 2026-12-06 (tree 0bcddc6, kernels alone, default / snake): hd128 1k 387 /
# 426, 2k 489 / 522, 4k 564 / 613, 8k 573 / 600; hd256 1k 377 / 414, 2k 531 / 549, 4k 614 /
# 639, but 8k 630 / 524; hd64 (two CTAs an SM up to 4k, ping-pong above) tied or lost at
# every length (1k 304 / 305, 2k 376 / 364, 4k 413 / 395, 8k 423 / 376): not taken there.
# hd256 at 2k-4k walks in snake order with own_blocks kept (the verifier proves that walk's
# per-warpgroup step totals since h286's pipe.totals pairing)
SNAKE_CAUSAL = {128: 8192, 256: 4096}
# The stmatrix + TMA-store epilogue at head dims 64 and 256 (at 256 in rounds of
# STORE_COLS_256 columns: the whole 64 KB staging tile does not fit beside Q and the rings).
# H100, 2026-12-07 (tree 6675714, kernels alone, default / +tma): hd256 full 1k 539 / 625,
# 2k 628 / 670, 4k 679 / 682, 16k 671 / 684; causal 1k 404 / 466, 2k 543 / 589, 4k 618 / 642,
# 16k 663 / 638 (lost: not taken); hd64 full 1k 397 / 419, 2k 417 / 425, 4k 454 / 454, 16k
# 500 / 465 (lost); causal 1k 301 / 324, 2k 376 / 397, 4k 415 / 441, 16k 461 / 462.
# A second H100 run of this rule against default+direct (2026-12-07 ~03:30 UTC, tree afe920d,
# kernels alone, direct / rule) agrees in every row it changes: hd256 full 1k 545 / 623, 2k
# 621 / 676, 4k 649 / 661, 16k 646 / 669; causal 1k 408 / 464, 2k 549 / 590, 4k 593 / 613;
# hd64 full 1k 397 / 422, 2k 425 / 427, 4k 447 / 453; causal 1k 301 / 327, 2k 373 / 393, 4k
# 411 / 419. Not yet measured on an H200 (no H200 came on 2026-12-06 or 07).
# (seq_len: the longest query length taking it; None = every length)
TMA_STORE_FULL = {64: 4096, 256: None}
TMA_STORE_CAUSAL = {64: 4096, 256: 4096}
STORE_COLS_256 = 128


@functools.lru_cache(maxsize=1024)  # a pure function of its arguments, asked on every op call
def default_schedule(head_dim: int, causal: bool = False,
                     seq_len: int | None = None) -> AttentionSchedule:
    """The schedule argus.ops.attention runs: per head dim, mask and query length, the fastest
    of the verified variants measured on the H200 (docs/perf/attention.md; bf16, 16k tokens,
    TFLOP/s; tests/unit/test_attention_default_rule.py holds these numbers and checks the rule
    against them):

    * head_dim 128 and 256: FA3's overlap order (fa3_overlap) at the base tiles, block_n 128
      at head_dim 128 for causal masks too (fa3_overlap_schedule's 112 was slower). Run 5
      (2026-12-02, commit f3f997a), S = 1k / 4k / 16k: hd128 full 428 / 510 / 526 against the
      plain loop's 408 / 490 / 499, causal 299 / 462 / 512 against 294 / 435 / 490; hd256 full
      466 / 546 / 566 against 451 / 550 / 536, causal 338 / 474 / 547 against 322 / 454 / 536;
      GQA 8:1 hd128 at 8k 516 / 491 against 489 / 463.
    * head_dim 128 stores O with stmatrix + TMA (epilogue "tma"): ahead of the direct store in
      all 8 comparisons of 2026-12-03 18:38 (fcac927, S 2k / 8k, full / causal), 2-8% for the
      kernel and 1-9% for the op (docs/perf/attention.md); the GPU suite on ragged shapes,
      GQA, both layouts and every causal alignment passed with it on 2026-12-04.
    * head_dim 64 up to 4k and 256 at every full length and causal up to 4k store O through
      TMA too, at 256 in rounds of STORE_COLS_256 columns (the whole 64 KB staging tile does
      not fit beside Q and the rings): TMA_STORE_FULL / TMA_STORE_CAUSAL, measured on the H100
      only (2026-12-07, the numbers beside those constants); an unknown seq_len takes it only
      where every measured length did (hd256 full).
    * head_dim 64, full, seq_len > TWO_CTAS_64[False] (or unknown): ping-pong (ordered) at
      192 x 128 with three warpgroups (the 1k rows below are now the two-CTA rule's). Run 5
      at 1k / 4k / 16k: 292 / 353 / 410 against the plain loop's 279 / 333 / 387 (run 3:
      303 / 399 / 418 against 297 / 379 / 402); run 6 (2026-12-02 09:35, commit 13eb5ce) at
      1k / 2k / 4k: 261 / 303 / 375 against plain 269 / 292 / 348 (1k: plain ahead by 3%,
      behind in runs 3 and 5 by 2-5%: kept). The overlap at three warpgroups (block_n 64) was
      slowest.
    * head_dim 64, causal, seq_len > TWO_CTAS_64[True] (or unknown): ping-pong too (the 2k
      and 4k rows below are now the two-CTA rule's). Run 6 at 2k / 4k: 263 / 307 against the
      plain loop's 260 / 280 (and 235 / 264 for the same plain schedule in the `default`
      column), fa3+2wg 250 / 294; run 5 at 4k / 16k: 296 / 383 against plain 297 / 384
      (equal). Until run 6 this was the plain loop.
    * (superseded on 2026-12-04 by the two-CTA rule below, which covers these lengths)
      head_dim 64, causal, seq_len <= SHORT_CAUSAL_64: two warpgroups of 128 x 128 in the
      overlap order: run 5 at 1k 204 against plain 187 and ping-pong 157; run 6 182 (184 in
      the `default` column) against 172 / 171. At 2k it is behind ping-pong (250 against 263),
      so the threshold lies between 1k and 2k.
    * head_dim 64 at seq_len <= TWO_CTAS_64 (1k full, 4k causal): two CTAs an SM (128 x 64
      tiles, two 104-register consumer warpgroups, the plain loop) with the longest causal
      tiles handed out first (tile_order "lpt"). 2026-12-04 06:50 UTC (d8bef8c, `gpu_round2.sh
      hd64var`, kernels alone): 1k full 400 against the default's 337 (cuDNN 395), 1k causal
      306 against 234 (cuDNN 341), 4k causal 411 against 370 (cuDNN 425); 4k full 418 against
      the ping-pong default's 441, so full masks keep ping-pong above 1k.
    * head_dim 256, causal, 1k < seq_len <= 4k (LPT_OWN_CAUSAL_256): longest tiles first and
      each consumer warpgroup computing only the KV blocks its rows see (own_blocks). Same day
      (`hdvar`), kernels alone: 1k 404 against 381, 4k 616 against 571 (cuDNN 461 / 595); the
      op's calls: 4k 512 against 481, but 1k 312 against 381, and 317 against 376 in the
      07:05 sweep with it as the default, so 1k keeps FA3's order. At head_dim 128 "lpt" lost
      (4k full 501 against 611, 4k causal 540 against 562): not taken there. (Since
      2026-12-06 own_blocks stays and the order is the snake walk's: SNAKE_CAUSAL, below.)
    * head_dim 128 and 256, full mask, seq_len <= PERSISTENT_FULL (2k): the persistent walk,
      with Q released early (early_q_release, FA3's QueryEmpty point: the next tile's Q loads
      under this tile's last P V and O store) at seq_len <= PERSISTENT_EARLYQ_FULL (1k). Two
      H200 runs on 2026-12-04 (`gpu_round2.sh short37` / `short38`, 457e8f7 / 3d815cc,
      kernels alone, default / +persistent / +persistent+earlyq): hd128 1k 540 / 560 / 581 and
      542 / 559 / 588; hd128 2k 572 / 577 / 528 and 582 / 592 / 606; hd256 1k 527 / 546 / 550
      and 528 / 548 / 551; hd256 2k 612 / 635 / 626 and 596 / 620 / 631. The walk lost under
      causal masks in both runs (-2.5 to -11%, hd128 2k the least: 466 against 478; hd256 2k
      354 against 533; with earlyq hd128 2k causal split, 486 against 478 and 471 against
      483): not taken there.
    * head_dim 128 up to 8k and 256 up to 4k, causal (SNAKE_CAUSAL): the persistent walk in
      snake order (tile_order "snake", h277): odd rounds handed out in reverse, so the CTAs'
      causal work evens out (the busiest CTA 1.21-1.83x the average blocks in "head" order,
      1.03x in snake order). H200, 2026-12-06 (tree 0bcddc6, `gpu_attention_bench.py
      --variants default,default+snake --kernel-only`, kernels alone, that day's default /
      snake): hd128 1k 387 / 426, 2k 489 / 522, 4k 564 / 613, 8k 573 / 600; hd256 1k 377 / 414,
      2k 531 / 549, 4k 614 / 639 (both with own_blocks, snake replacing "lpt"), 8k 630 / 524
      (lost: not taken); hd64 tied or lost at 1k-8k (not taken).
    seq_len None (unknown) takes the long-sequence choice.

    Every choice takes the softmax diet (approx_exp2 + fold_scale): on the H200 (2026-12-02
    12:10, commit 8bcfae2, docs/perf/attention.md) it gained 6-9% at hd128, S 2k / 8k, full and
    causal, at the same error against float64 (2.1-2.3e-3); the bench's "exact" token turns it
    off for comparison."""
    base = base_schedule(head_dim)
    if head_dim == 64 and seq_len is not None and seq_len <= TWO_CTAS_64[causal]:
        # two CTAs an SM (128 x 64 tiles, the plain loop, 104-register consumers), longest
        # causal tiles first: 2026-12-04 06:50, d8bef8c, kernels alone
        choice = AttentionSchedule(block_m=128, block_n=64, consumers=2, producer_regs=24,
                                   consumer_regs=104, ctas_per_sm=2, tile_order="lpt")
    elif head_dim == 64:
        choice = dataclasses.replace(base, ordered=True)
    else:
        choice = dataclasses.replace(base, fa3_overlap=True,
                                     epilogue="tma" if head_dim == 128 else base.epilogue)
        if head_dim == 256 and causal and seq_len is not None and \
                LPT_OWN_CAUSAL_256[0] < seq_len <= LPT_OWN_CAUSAL_256[1]:
            choice = dataclasses.replace(choice, tile_order="lpt", own_blocks=True)
        if causal and seq_len is not None and seq_len <= SNAKE_CAUSAL.get(head_dim, 0):
            # the persistent walk, odd rounds reversed (hd256's own_blocks kept at 2k-4k)
            choice = dataclasses.replace(choice, persistent=True, tile_order="snake")
        if not causal and seq_len is not None and seq_len <= PERSISTENT_FULL:
            # short full-mask prefill: each CTA's next tile starts under this one's epilogue
            choice = dataclasses.replace(choice, persistent=True,
                                         early_q_release=seq_len <= PERSISTENT_EARLYQ_FULL)
    if _tma_store(head_dim, causal, seq_len):
        choice = dataclasses.replace(choice, epilogue="tma",
                                     store_cols=STORE_COLS_256 if head_dim == 256 else 0)
    return dataclasses.replace(choice, approx_exp2=True, fold_scale=True)


def _tma_store(head_dim: int, causal: bool, seq_len) -> bool:
    """Whether default_schedule takes the TMA-store epilogue at head dim 64 / 256 (128 always
    does): TMA_STORE_FULL / TMA_STORE_CAUSAL's longest query length (None: every length; an
    unknown seq_len only where every length takes it)."""
    rule = (TMA_STORE_CAUSAL if causal else TMA_STORE_FULL)
    if head_dim not in rule:
        return False
    longest = rule[head_dim]
    return longest is None or (seq_len is not None and seq_len <= longest)


@functools.lru_cache(maxsize=64)
def fp8_schedule(head_dim: int, causal: bool = False,
                 wide_keys: bool = True) -> AttentionSchedule:
    """The FP8 forward's schedule (argus.ops.attention_fp8): FA3's overlap order with the
    softmax diet (approx_exp2 + fold_scale), at the base tiles (128 x 128; 128 x 64 at
    head_dim 256, where O alone is 128 registers); at head_dim 64 two warpgroups of 128 x 128
    instead of base_schedule's plain-loop ping-pong (Q in registers), which the FP8 kernel
    does not take; at head_dim 128 the stmatrix + TMA store epilogue (epilogue='tma').
    At head_dim 128 P is carried packed as e4m3 at FA3's wide key blocks (224 keys full, 192
    causal; the comment below); `wide_keys=False` gives the 128-key tile with P in fp32 until
    P V's issue (the default before 2026-12-07 ~15:20 UTC, the form the plain loop takes).
    At every head dim O is rescaled after P V retires (rescale_after_pv, h309: FA3's rescale_o
    after warpgroup_wait<0>) on the turn-free overlap loop. On an H100 (2026-12-07, kernels
    alone, TFLOP/s, permuted V^T, S = 2k / 4k / 8k / 16k; docs/perf/attention.md):
      full:   no turns 679 / 732 / 753 / 753, ping-pong turns (ordered, which always takes
              the late rescale) 707 / 753 / 739 / 768, late rescale without turns 723 / 783 /
              767 / 790
      causal: no turns 556 / 640 / 701 / 752, turns 556 / 639 / 697 / 763, late rescale
              without turns 586 / 690 / 743 / 771
    (a second run at 2k / 4k / 16k agreed within 3%). The turns alone had gained 3-7% at full
    masks in two earlier runs (the default from 5ac7d0bf to this change); the late rescale
    without them is ahead of both everywhere. The bf16 kernel does not take it (the same run:
    0-7% behind its default at head_dim 128). head_dim 64 and 256 take it too since an H100
    run of 2026-12-07 ~11:05 UTC (tree 58e8a5a9, `gpu_round2.sh fp8late58`, kernels alone,
    permuted V^T, TFLOP/s, S = 2k / 4k / 16k, without / with it): hd64 full 420 / 420,
    443 / 446, 473 / 482; causal 339 / 346, 398 / 408, 470 / 479; hd256 full 803 / 852,
    928 / 944, 973 / 980; causal 615 / 655, 754 / 793, 944 / 963 (ahead or tied in all 12).

    Measured on the H200 2026-12-04 (scripts/gpu_attention_bench.py --fp8, the kernel alone,
    TFLOP/s at head_dim 128, S = 2k full / causal, 8k full / causal, 16k full / causal):

      default (unfolded, direct)  607 / 476 / 701 / 648 / 713 / 709
      fold                        634 / 494 / 756 / 682 / 754 / 733
      fold + tma                  673 / 540 / 750 / 695 / 744 / 746
      default + tma               642 / 523 / 713 / 671 / 711 / 712

    fold_scale is 3-8% ahead of the unfolded kernel everywhere, so every head dim takes it
    (the verifier proves the folded overlap since check_reduce._order_preserved: the peeled
    first block's max(s) * c, c > 0 by the kernel's ag.require, is a max of the row; the op
    runs any other scale unfolded, argus.ops.attention.for_scale). The TMA epilogue is one
    rule per head dim, not per length (the op asks for fp8_schedule(D, causal) only): at
    head_dim 128 it wins by 6% / 9% at 2k, 2% at 8k and 16k causal, and trails by 0.8% / 1.3%
    at 8k / 16k full (run-to-run noise is of that size; summed over the three full lengths
    tma is ahead, 2167 against 2144), so it is taken full and causal. head_dim 64 and 256
    were not measured with it and keep the direct epilogue."""
    if head_dim == 64:
        choice = AttentionSchedule(block_m=128, block_n=128, consumers=2, producer_regs=24,
                                   consumer_regs=240, fa3_overlap=True)
    else:
        choice = dataclasses.replace(base_schedule(head_dim), fa3_overlap=True)
    if head_dim == 128:
        # P carried packed as e4m3 (h313) lets FA3's wide key blocks build; on an H100
        # (2026-12-07, two runs of `gpu_round2.sh fp8big58`, kernels alone, TFLOP/s, S = 2k /
        # 4k / 16k, the 128-key default against packed P at 192 / 224 keys):
        #   full:   729-731 / 788-789 / 841-844 against 741-766 / 819 / 877-882 (192) and
        #           722-738 / 849-851 / 908-910 (224)
        #   causal: 593 / 695-698 / 835-837 against 598-612 / 753-754 / 873-876 (192) and
        #           567-577 / 728-729 / 871-888 (224)
        # One rule per mask (the op asks for fp8_schedule(D, causal) only): 224 at full masks
        # (tied at 2k, +8% at 4k and 16k), 192 at causal (+1-3% at 2k, +8% at 4k, +4-5% at
        # 16k). Both verify with zero findings since h319 (tests/verify/
        # test_attention_fp8_wide.py)
        choice = dataclasses.replace(choice, epilogue="tma")
        if wide_keys:
            choice = dataclasses.replace(choice, packed_p=True, block_n=192 if causal else 224)
            # Early K release (early_k_release, h328) is ahead under causal masks on an H100
            # (2026-12-07 ~23:10 UTC, tree dc095e4e, kernels alone, TFLOP/s, pvt / pvt+ekr:
            # 2k 597 / 608, 4k 713 / 749, 16k 915 / 926 and 886 / 924; full masks mixed) but
            # not taken: softmax.stats misses O's late rescale dropped in its loop form
            # (tests/mutations/test_attention_rescale_dropped.py run on pvt+ekr), and a default
            # must have its invariants checked
    return dataclasses.replace(choice, approx_exp2=True, fold_scale=True, rescale_after_pv=True)


def fa3_overlap_schedule(head_dim: int, causal: bool = False) -> AttentionSchedule:
    """base_schedule with FA3's overlap order (fa3_overlap), at tile shapes that build
    without spills (NVRTC 13.0, sm_90a) and keep the softmax's exp2 beside P V in the SASS
    (scripts/sass_attention_overlap.py): at head_dim 64 the three 160-register warpgroups
    take 64-key blocks (128 spills: P_{j-1}'s packed registers stay live through the
    softmax), causal head_dim 128 takes 112 (128 spills 8 bytes: the mask's registers); the
    others keep base_schedule's shapes. (default_schedule takes block_n 128 at causal
    head_dim 128 anyway: measured faster despite the 8 bytes.)"""
    s = dataclasses.replace(base_schedule(head_dim), fa3_overlap=True)
    if head_dim == 64:
        return dataclasses.replace(s, block_n=64)
    if head_dim == 128 and causal:
        return dataclasses.replace(s, block_n=112)
    return s


def fp8_vt_atom(block_n: int) -> int:
    """Keys per column atom of the FP8 kernel's V^T stage ([D, keys] e4m3, K-major for P V's
    wgmma): the widest swizzle span (128, 64 or 32 bytes of keys) that divides block_n. Each
    atom is one TMA box of D rows and one register-A wgmma of P V (K = the atom's keys, whole
    k32 steps, P's columns sliced to match: a view of its words when P is carried packed);
    the permuted V^T's 32-key groups never straddle two atoms."""
    for keys in (128, 64, 32):
        if block_n % keys == 0:
            return keys
    raise ValueError(f"block_n={block_n}: the FP8 kernel's V^T atoms take a multiple of 32 "
                     f"keys (one of {FP8_BLOCK_N})")


def _kv_blocks(q0, block_m: int, block_n: int, S, SK, causal: bool, at_least: int = 0):
    """KV blocks a tile of query rows [q0, q0 + block_m) reads: all of them, or under the
    causal mask those up to the last row's last key q0 + block_m - 1 + SK - S; blocks no row
    of the tile may see are not loaded at all (but `at_least` blocks are: the overlapped
    loop's first step is outside it; such a block is masked whole)."""
    blocks = ag.cdiv(SK, block_n)
    if causal:
        blocks = ag.minimum(blocks, ag.maximum(ag.cdiv(q0 + block_m + SK - S, block_n),
                                               at_least))
    return blocks


def _unmasked_blocks(r0, blocks, block_n: int, S, SK, causal: bool):
    """Of `blocks`, how many leading ones every row of [r0, r0 + 64) sees in full: inside the
    sequence, and under the causal mask not past the first row's last key r0 + SK - S."""
    full = ag.minimum(blocks, SK // block_n)
    if causal:
        full = ag.minimum(full, ag.maximum(r0 + SK - S + 1, 0) // block_n)
    return full


@functools.lru_cache(maxsize=None)
def attention_kernel(head_dim: int = 128, dtype: DType = ag.bf16, causal: bool = False,
                     lse: bool = False, permuted_vt: bool = False) -> ag.KernelFunction:
    """The forward kernel for one head dimension, dtype, mask kind and LSE choice (cached).

    Parameters: Q [B, H, S, D], K and V [B, HKV, SK, D], O [B, H, S, D] (then LSE [B, H, S, 1]
    fp32 when `lse`), the runtime scalar qk_scale = softmax scale * log2(e), and the schedule
    `s`.

    dtype e4m3 is the FP8 forward (FA3's): Q and K e4m3 as above, but V transposed, Vt
    [B, HKV, D, SK] e4m3 (an fp8 wgmma reads both operands K-major, and P V's K is the key),
    O bf16, and a second runtime scalar o_scale. The caller folds the per-tensor scales into
    the scalars: qk_scale = softmax scale * log2(e) * q_scale * k_scale, o_scale = v_scale.
    P = exp2(... - P_BIAS) in [0, P_SCALE] is rounded to e4m3 in registers, gathered into the
    8-bit A fragment by quad shuffles (target/fragments.py AccToA8), and O = o_scale * (sum
    of P V) / l, l the row sum of the unrounded P (P_SCALE cancels).

    permuted_vt (e4m3 only; the schedule's permuted_vt must say the same): Vt is
    [B, HKV, D, SKV], SKV = SK rounded up to 32 (a launch precondition), column c holding key
    acc_order_col(c) (target/fragments.py: a permutation inside each 32-key group; keys past
    SK finite, e.g. zero: their P is 0), so P needs no shuffles (AccOrderA8). The tag `sk` of
    Vt's column c is that key, so the verifier compares P's key with V's row through the map
    (wgmma.agree) and a V^T in any other order is reported."""
    if head_dim not in HEAD_DIMS:
        raise ValueError(f"head_dim={head_dim}: the attention kernel takes {HEAD_DIMS}")
    if dtype not in (ag.bf16, ag.f16, ag.e4m3):
        raise ValueError(f"dtype {dtype}: the attention kernel takes bf16, f16 or e4m3")
    if permuted_vt and dtype.bits != 8:
        raise ValueError(f"permuted_vt=True: the permuted V^T is FP8's (e4m3), not {dtype}")
    D, dt = head_dim, dtype
    fp8 = dt.bits == 8
    out_dt = ag.bf16 if fp8 else dt
    # Q, K (and bf16 V) tiles are stored as D / acols column atoms of acols elements, one
    # swizzle span each: 64 of 16 bits (128 B rows), or 128 e4m3 (64 at head_dim 64: 64 B)
    acols = min(D, 128 // dt.bytes)
    atoms = D // acols
    swz = acols * dt.bytes
    neg_inf = float("-inf")

    def body(Q, K, V, O, LSE, qk_scale, o_scale, s: AttentionSchedule):
        problems = s.problems_for(D, dt)
        if s.permuted_vt != permuted_vt:
            problems.append(f"schedule permuted_vt={s.permuted_vt} but the kernel was built "
                            f"for permuted_vt={permuted_vt} (its V^T's key order)")
        if problems:
            raise ag.TraceError(f"{s} at head_dim={D}: " + "; ".join(problems),
                                fix="use argus.kernels.attention.default_schedule(head_dim)")
        if s.fold_scale:
            # the folded scale takes the row max of the raw scores and scales it after:
            # max(s) * c is the max of s * c only for c > 0 (softmax.stats); every launch
            # checks it, so the verifier may rely on it
            ag.require(ag.sym(qk_scale) > 0,
                       "this schedule folds the softmax scale into exp2 (fold_scale), which "
                       "takes the row max before scaling and is right only for a positive "
                       "scale; argus.ops.attention runs any other scale unfolded "
                       "(argus.ops.attention.for_scale), or launch a schedule with "
                       "fold_scale=False")
        BM, BN, C = s.block_m, s.block_n, s.consumers
        # KV blocks every tile loads, seen or not (an overlapped loop's first step is outside it)
        first = 1 if s.intra_wg_overlap or s.fa3_overlap else 0
        B, H, S = Q.shape[0], Q.shape[1], Q.shape[2]
        SK = K.shape[2]
        if permuted_vt:
            # V^T's columns come in whole 32-key groups, column c holding key
            # acc_order_col(c): what the op's copy writes (argus/ops/attention_fp8.py), and
            # what P's shuffle-free A fragment multiplies it by (wgmma a_acc_order)
            ag.require(ag.sym(V.shape[3]) == (ag.sym(SK) + 31) // 32 * 32,
                       "the permuted V^T has Skv rounded up to 32 columns (whole 32-key "
                       "groups, keys past Skv zero); argus.ops.attention_fp8 makes it")
            ag.tag_tensor(V, sk=lambda b_, h_, d_, c: acc_order_col(c))
        # FP8: V^T [D, keys] in column atoms of vcols keys (one swizzle span of e4m3 each)
        vcols = fp8_vt_atom(BN) if fp8 else min(BN, 128)
        vatoms = BN // vcols
        group = H // K.shape[1]          # query heads per kv head (GQA / MQA)
        m_tiles = ag.cdiv(S, BM)
        lpt = s.tile_order == "lpt"
        cs = s.cluster_m
        if cs > 1 and causal:
            raise ag.TraceError(f"cluster_m={cs}: the CTA pair shares every K and V block, so "
                                f"both tiles must walk the same blocks: full masks only (FA3's "
                                f"rule too)", fix="use cluster_m=1 under the causal mask")
        # m tiles in pairs with the cluster (an odd count's last tile: rows past S, computed
        # for its peer's loads and not stored)
        m_slots = ag.cdiv(m_tiles, cs) * cs if cs > 1 else m_tiles
        half = BN // cs           # K and V rows of a block each CTA of the pair loads
        if s.ctas_per_sm > 1:
            ag.occupancy(s.ctas_per_sm)
        rank = 0
        if s.persistent and cs > 1:
            # the walk over pairs: a unit is cs adjacent m tiles of one (batch, head), one per
            # CTA of a cluster, and both CTAs walk the same units (their K and V steps pair
            # with the peer's). (Units of single m slots walked by adjacent program ids build
            # the same registers and do not verify: the peers' units are then related only
            # through pid % cs == rank, which the verifier does not know.)
            total = m_slots // cs * (B * H)
            programs = ag.minimum(total, s.num_sms * s.ctas_per_sm // cs)
            (cid,) = ag.grid(programs * cs, cluster=cs)
            rank = ag.cluster_rank()
            pid = cid // cs
        elif s.persistent:
            total = m_tiles * (B * H)
            programs = ag.minimum(total, s.num_sms * s.ctas_per_sm)
            (pid,) = ag.grid(programs)
        elif cs > 1:
            pid_m, pid_h, pid_b = ag.grid(m_slots, H, B, cluster=cs)
            rank = ag.cluster_rank()
            pid, total, programs = 0, 1, 1
        elif lpt:  # one CTA per tile, heads fastest (the hardware launches x first)
            pid_h, pid_m, pid_b = ag.grid(H, m_tiles, B)
            pid, total, programs = 0, 1, 1
        else:  # one CTA per tile: the program ids are the tile's coordinates
            pid_m, pid_h, pid_b = ag.grid(m_tiles, H, B)
            pid, total, programs = 0, 1, 1

        # ping-pong in the plain loop keeps Q in registers instead (q_in_registers, see below)
        sQ = None if s.q_in_registers else ag.smem((1, atoms * BM, acols), dt, swizzle=swz)
        sK = ag.smem((s.stages, atoms * BN, acols), dt, swizzle=swz)
        sV = ag.smem((s.stages, vatoms * D, vcols), dt, swizzle=vcols) if fp8 else \
            ag.smem((s.stages, atoms * BN, acols), dt, swizzle=swz)
        q_pipe = None if s.q_in_registers else ag.pipeline(1, consumers=C)
        k_pipe = ag.pipeline(s.stages, consumers=C)
        v_pipe = ag.pipeline(s.stages, consumers=C)
        if s.epilogue == "tma":
            staging = Staging.alloc(C, ROWS, D, out_dt, store_cols=s.store_cols)

        def tile_of(unit):
            """(batch, head, m tile) of a flat unit: m fastest (tiles of one head share its K
            and V in L2), or with tile_order "lpt" heads fastest, then m (batch slowest);
            under the causal mask the longest tiles (last rows) first. Without the persistent
            walk, the program ids."""
            if not s.persistent:
                return pid_b, pid_h, (m_tiles - 1 - pid_m if causal else pid_m)
            if s.tile_order == "snake":
                # round r of the walk (unit = pid + r x programs); odd rounds reversed over
                # the rem units they hold: lane -> rem - 1 - lane, a permutation of each round
                r = unit // programs
                lane = unit - r * programs
                rem = ag.minimum(programs, total - r * programs)
                unit = unit + (r % 2) * (rem - 1 - 2 * lane)
            if cs > 1:   # pairs of m tiles (full masks): this CTA's by its rank
                pairs = m_slots // cs
                bh = unit // pairs
                return bh // H, bh % H, unit % pairs * cs + rank
            if lpt:
                bm = unit // H
                within = bm % m_tiles
                m = m_tiles - 1 - within if causal else within
                return bm // m_tiles, unit % H, m
            within = unit % m_tiles
            m = m_tiles - 1 - within if causal else within
            bh = unit // m_tiles
            return bh // H, bh % H, m

        with ag.role("producer", warpgroups=1, regs=s.producer_regs):
            for unit in ag.range(pid, total, programs):
                b, h, m = tile_of(unit)
                hk = h // group
                q0 = m * BM
                def load_q():
                    with q_pipe.produce() as st:
                        for a in range(atoms):
                            ag.tma.load(sQ[st].rows_of(a * BM, BM), Q, (b, h, q0, acols * a))

                def load_k(j):
                    with k_pipe.produce() as st:
                        for a in range(atoms):
                            if cs > 1:   # this CTA's share of the rows, into both CTAs
                                ag.tma.load(sK[st].rows_of(a * BN + rank * half, half), K,
                                            (b, hk, j * BN + rank * half, acols * a),
                                            multicast=True)
                            else:
                                ag.tma.load(sK[st].rows_of(a * BN, BN), K,
                                            (b, hk, j * BN, acols * a))

                def load_v(j):
                    with v_pipe.produce() as st:
                        if fp8:   # V^T: D rows of vcols keys per atom
                            for a in range(vatoms):
                                ag.tma.load(sV[st].rows_of(a * D, D), V,
                                            (b, hk, 0, j * BN + vcols * a))
                        elif cs > 1:
                            for a in range(atoms):
                                ag.tma.load(sV[st].rows_of(a * BN + rank * half, half), V,
                                            (b, hk, j * BN + rank * half, 64 * a),
                                            multicast=True)
                        else:
                            for a in range(atoms):
                                ag.tma.load(sV[st].rows_of(a * BN, BN), V,
                                            (b, hk, j * BN, 64 * a))

                def prefetch_next_q():
                    """The next unit's Q tile into L2, issued as this unit's loads start (the
                    last round has no next unit)"""
                    if not s.prefetch_next_q:
                        return
                    nxt = unit + programs
                    with ag.when(nxt < total):
                        nb, nh, nm = tile_of(nxt)
                        for a in range(atoms):
                            ag.tma.prefetch(sQ[0].rows_of(a * BM, BM), Q,
                                            (nb, nh, nm * BM, acols * a))

                if s.early_q_release:
                    # FA3's producer order: the tile's first K block before its Q, so K_0 is
                    # in flight while Q's stage still waits for the previous tile's last S
                    # (fa3_overlap: every tile has at least one block, `first`)
                    load_k(0)
                    load_q()
                    load_v(0)
                    prefetch_next_q()
                    for j in ag.range(1, _kv_blocks(q0, BM, BN, S, SK, causal, first)):
                        load_k(j)
                        load_v(j)
                else:
                    if not s.q_in_registers:
                        load_q()
                    prefetch_next_q()
                    for j in ag.range(_kv_blocks(q0, BM, BN, S, SK, causal, first)):
                        load_k(j)
                        load_v(j)

        with ag.role("consumer", warpgroups=C, regs=s.consumer_regs) as wg:
            for unit in ag.range(pid, total, programs):
                b, h, m = tile_of(unit)
                q0 = m * BM
                r0 = q0 + wg * ROWS                       # this warpgroup's first query row
                loaded = _kv_blocks(q0, BM, BN, S, SK, causal, first)   # the tile's steps
                # own_blocks: the blocks this warpgroup's rows may see (never more than the
                # tile's, r0 + 64 <= q0 + BM; the minimum states it for the verifier, whose
                # pipe.totals does not bound the warpgroup index); the rest of the tile's
                # steps are released unread after the loop
                blocks = ag.minimum(_kv_blocks(r0, ROWS, BN, S, SK, causal, first), loaded) \
                    if s.own_blocks else loaded
                unmasked = _unmasked_blocks(r0, blocks, BN, S, SK, causal)
                row_last_key = r0 + ag.arange(ROWS)[:, None] + (SK - S)   # causal bound
                m_i = ag.full((ROWS, 1), neg_inf)   # running row max of S * scale * log2(e)
                # running row sum of exp2(S - m); defer_row_sum: each thread's partial over
                # P's columns folded by c mod 8, reduced across the quad after the loop
                l_i = ag.full((ROWS, 8 if s.defer_row_sum else 1), 0.0)
                o = ag.zeros((ROWS, D))

                def scores(qs, ks, sc=None):
                    """S = Q K^T for this warpgroup's rows and one K block (issued, in flight);
                    qs: Q's stage in shared memory, or Q's register tile; sc: a zero tile
                    made before the step to accumulate into (in place), or None: a new one."""
                    sc = ag.zeros((ROWS, BN)) if sc is None else sc
                    for a in range(atoms):
                        q_atom = qs[:, acols * a:acols * (a + 1)] if s.q_in_registers else \
                            sQ[qs].rows_of(a * BM + wg * ROWS, ROWS)
                        sc = ag.wgmma(q_atom, sK[ks].rows_of(a * BN, BN), sc)
                    return sc

                def softmax(sc, jb, m_i, l_i, whole=False):
                    """The online softmax of block jb: (P, alpha, new row max, new row sum).
                    m_i is in the units of S * scale * log2(e) either way; with fold_scale
                    the scores stay raw until the exponent's FFMA (scale > 0: the op's
                    promise). whole: the caller's block jb lies before `unmasked` in every
                    launch (a tag assertion states it), so the mask branch is never taken:
                    its own tag assertion would be posed on an empty model (the verifier
                    reports a vacuous proof unknown) and is left out; the branch stays, as
                    fill.identity reads its -inf for the zero-filled keys past SK (it does
                    not bound a TMA fill by the loop's iterations)."""
                    if not s.fold_scale:
                        sc = sc * qk_scale
                    # only the blocks past `unmasked` (the causal diagonal, the key tail) pay
                    # for the mask; the branch is uniform per warpgroup
                    # checked, no code: the keys a query may see, every one of them
                    # reached by the loop; the blocks before `unmasked` need no mask
                    allowed = ag.tag(sc).sk < ag.sym(SK)
                    if causal:
                        allowed = ag.tag_all(allowed, ag.tag(sc).sk <= ag.tag(sc).s
                                             + ag.sym(SK) - ag.sym(S))
                        ag.tag_assert(ag.tag_any(ag.sym(blocks) * BN >= ag.sym(SK),
                                                 ag.sym(blocks) * BN > ag.tag(sc).s
                                                 + ag.sym(SK) - ag.sym(S)),
                                      message="the KV loop reaches every key a query may see")
                    if whole:
                        ag.tag_assert(allowed, message="a block the loop never masks holds "
                                                       "only keys a query may see")
                    ag.tag_assert(ag.tag_any(ag.sym(jb) >= ag.sym(unmasked), allowed),
                                  message="an unmasked block holds only keys a query may see")
                    with ag.when(jb >= unmasked):
                        key = jb * BN + ag.arange(BN)[None, :]
                        valid = key < SK
                        if causal:
                            valid = valid & (key <= row_last_key)
                        sc = ag.where(valid, sc, neg_inf)
                        if not whole:
                            ag.tag_assert((ag.tag(sc).live == 1) == allowed, message="the "
                                          "mask keeps exactly the keys a query may see")
                    row_max = sc.max(axis=1)
                    m_new = ag.maximum(m_i, row_max * qk_scale if s.fold_scale else row_max)
                    # a row that has seen no key yet keeps m = -inf: subtract 0, not -inf
                    m_use = ag.where(m_new == neg_inf, 0.0, m_new)
                    # FP8: P_SCALE * exp2(x), P in [0, P_SCALE]; the offset joins the row's
                    # term (FA3's max_scaled): one add per row instead of one per element
                    m_sub = m_use + P_BIAS if fp8 else m_use
                    x = sc * qk_scale - m_sub if s.fold_scale else sc - m_sub
                    p = ag.exp2(x, approx=s.approx_exp2, emulate=(s.exp2_emulate, 16))
                    alpha = ag.exp2(m_i - m_use, approx=s.approx_exp2)
                    if s.defer_row_sum:
                        # each thread's partial (defer_row_sum): P's 8-column windows added
                        # elementwise (thread-local), the quad's reduction after the loop;
                        # the fold is summed before alpha joins, so it need not wait for it
                        part = p[:, 0:8]
                        for g in range(1, BN // 8):
                            part = part + p[:, 8 * g:8 * (g + 1)]
                        return p, alpha, m_new, l_i * alpha + part
                    return p, alpha, m_new, l_i * alpha + p.sum(axis=1)

                def pv(p, vs, o, alpha):
                    """O * alpha + P V for V's stage vs (P's k index is this block's key, V's
                    row too); alpha None: O + P V (O rescaled already, rescale_late). FP8: P
                    rounded to e4m3, times V^T's column atoms."""
                    scaled = (lambda o: o) if alpha is None else (lambda o: o * alpha)
                    if not fp8:
                        return ag.wgmma(p.to(dt), sV[vs], scaled(o), trans_b=True)
                    p8 = p.to(dt)
                    o = scaled(o)
                    for a in range(vatoms):
                        pa = p8[:, vcols * a:vcols * (a + 1)] if vatoms > 1 else p8
                        o = ag.wgmma(pa, sV[vs].rows_of(a * D, D), o,
                                     a_acc_order=permuted_vt)
                    return o

                if s.q_in_registers:
                    # FA3's ping-pong: the warpgroups take turns issuing S = Q K^T, so one's
                    # softmax and P V overlap the other's S. A turn is not taken while a ring
                    # slot is held (ag.ordered's rule), so Q is not held in a pipeline step
                    # around the loop but loaded once into registers (the wgmma A fragment)
                    q_regs = ag.load(Q, (b, h, r0, 0), (ROWS, D))
                    sc = ag.zeros((ROWS, BN))
                    for j in ag.range(blocks):
                        with ag.ordered("scores"):
                            with k_pipe.consume() as ks:
                                sc = scores(q_regs, ks)
                        p, alpha, m_i, l_i = softmax(sc, j, m_i, l_i)
                        with v_pipe.consume() as vs:
                            o = pv(p, vs, o, alpha)
                else:
                    # the fa3 loop carries P_{j-1} across the back edge in fp32, packed into
                    # the A fragment at the issue, or (packed_p) in P V's A dtype (bf16 / f16,
                    # or FP8's e4m3), which lower/packed.py stores as the fragment's words
                    # (a half or a quarter of the registers; without that pass a bf16 tile
                    # took a float register an element, no fewer than fp32)
                    carry = (lambda t: t.to(dt)) if s.packed_p else (lambda t: t)
                    # rescale_late: O is rescaled after each P V retires (in the loop), so
                    # every P V of the fa3 loop is issued unscaled; block 0's alpha (exp2 of a
                    # -inf max: 0) would scale the zero O, which needs nothing
                    late = s.rescale_late
                    if s.early_q_release:
                        # p and alpha live past Q's step (the last P V runs after it)
                        p, alpha = carry(ag.zeros((ROWS, BN))), ag.full((ROWS, 1), 1.0)
                    with q_pipe.consume() as qs:
                        if s.fa3_overlap:
                            # FA3's order: P_{j-1} V_{j-1} is issued right behind S_j and
                            # stays in flight during the softmax of S_j (whose first read
                            # waits for S_j alone); p carries P_{j-1} (carry above)
                            # (p and alpha are rebound in the steps, so bound before them)
                            if not s.early_q_release:
                                p, alpha = carry(ag.zeros((ROWS, BN))), ag.full((ROWS, 1), 1.0)
                            with k_pipe.consume() as ks:
                                sc = scores(qs, ks)
                                p, alpha, m_i, l_i = softmax(sc, 0, m_i, l_i)
                                p = carry(p)
                            for j in ag.range(1, blocks):
                                if s.early_k_release:
                                    # FA3's order with K_j released early: P_{j-1}'s A
                                    # fragment made before K_j's step (its registers outlive
                                    # it), both issues in K_j's step, whose end waits for
                                    # S_j alone (wait 1; FP8: wait_group(atoms), the P V
                                    # atoms' groups committed after S) and releases K_j; the
                                    # softmax of S_j runs beside P_{j-1} V_{j-1}, which
                                    # V_{j-1}'s end retires
                                    # Nothing is rebound inside K_j's step (a value rebound
                                    # there would be assigned out at its end, reading the
                                    # in-flight accumulator): S_j and O accumulate in place
                                    # into tiles made before it
                                    pa = p.to(dt)
                                    if fp8:
                                        # P V's A per V^T atom: P's columns sliced before
                                        # the step too (a view of the words when packed)
                                        pas = [pa[:, vcols * a:vcols * (a + 1)]
                                               if vatoms > 1 else pa for a in range(vatoms)]
                                    o_s = o if late else o * alpha
                                    sc = ag.zeros((ROWS, BN))
                                    p_j = ag.zeros((ROWS, BN))   # the step's fp32 P_j
                                    with v_pipe.consume() as vs:     # V_{j-1}, wait 0
                                        with k_pipe.consume() as ks:         # K_j
                                            scores(qs, ks, sc)               # S_j
                                            if fp8:   # one group per V^T atom, in place
                                                for a in range(vatoms):
                                                    ag.wgmma(pas[a],
                                                             sV[vs].rows_of(a * D, D), o_s,
                                                             a_acc_order=permuted_vt)
                                            else:
                                                ag.wgmma(pa, sV[vs], o_s, trans_b=True)
                                        p_j, alpha, m_i, l_i = softmax(sc, j, m_i, l_i)
                                    # as below: O rescaled after P_{j-1} V_{j-1} retired
                                    o = o_s * alpha if late else o_s
                                    p = carry(p_j)
                                    continue
                                with k_pipe.consume() as ks:
                                    if not s.ordered:
                                        sc = scores(qs, ks)                  # S_j
                                    if s.packed_p:   # the step's fp32 P_j (packed below)
                                        p_j = ag.zeros((ROWS, BN))
                                    with v_pipe.consume() as vs:             # V_{j-1}
                                        if s.ordered:
                                            # FA3's ping-pong on top: one turn around both
                                            # issues, S_j then P_{j-1} V_{j-1}, so the next
                                            # warpgroup's GEMMs run during this one's
                                            # softmax. The turn sits inside the K and V
                                            # steps (V's full wait taken before it): every
                                            # warpgroup consumes every step of Q, K and V
                                            # (no pipe.skip), so the turn holder never needs
                                            # a slot only the waiter's release frees
                                            # (ag.ordered's rule)
                                            with ag.ordered("mma"):
                                                sc = scores(qs, ks)          # S_j
                                                o = pv(p, vs, o, None if late else alpha)
                                        else:
                                            o = pv(p, vs, o, None if late else alpha)
                                        p_new, alpha, m_i, l_i = softmax(sc, j, m_i, l_i)
                                        if s.packed_p:
                                            p_j = p_new
                                        else:
                                            p = p_new
                                    if s.rescale_late:
                                        # FA3's rescale_o after warpgroup_wait<0>: the V
                                        # step's end retired P_{j-1} V_{j-1}, so O (now in
                                        # the units of m_{j-1}) takes alpha_j and the next
                                        # P V adds P_j V_j unscaled
                                        o = o * alpha
                                    if s.packed_p:
                                        # FA3's order (convert_type after warpgroup_wait<0>):
                                        # P_j is packed after the V step's end retired P_{j-1}
                                        # V_{j-1}, so its words can take P_{j-1}'s registers.
                                        # Packed inside the step, both fragments were live at
                                        # once and P_j's words parked outside the three wgmma
                                        # tiles until the next S issue (128 x 176: 120 B
                                        # spilled, docs/perf/attention.md h302)
                                        p = carry(p_j)
                            if not s.early_q_release:
                                with v_pipe.consume() as vs:
                                    o = pv(p, vs, o, None if late else alpha)
                        elif not s.intra_wg_overlap:
                            for j in ag.range(blocks):
                                with k_pipe.consume() as ks:
                                    sc = scores(qs, ks)
                                    p, alpha, m_i, l_i = softmax(sc, j, m_i, l_i)
                                    with v_pipe.consume() as vs:
                                        o = pv(p, vs, o, alpha)
                        else:
                            # FA3's intra-warpgroup overlap: S of block j is issued before
                            # the softmax of block j - 1 runs, so the tensor cores work on it
                            # meanwhile; sc carries S of the block whose softmax is next
                            sc = ag.zeros((ROWS, BN))
                            with k_pipe.consume() as ks:
                                sc = scores(qs, ks)
                            for j in ag.range(1, blocks):
                                with k_pipe.consume() as ks:
                                    s_next = scores(qs, ks)
                                    # under a full mask block j - 1 < blocks - 1 is
                                    # whole: only the last block holds the key tail, and
                                    # its softmax runs after the loop
                                    p, alpha, m_i, l_i = softmax(sc, j - 1, m_i, l_i,
                                                                 whole=not causal)
                                    with v_pipe.consume() as vs:
                                        o = pv(p, vs, o, alpha)
                                    sc = s_next
                            p, alpha, m_i, l_i = softmax(sc, blocks - 1, m_i, l_i)
                            with v_pipe.consume() as vs:
                                o = pv(p, vs, o, alpha)
                    if s.early_q_release:
                        # Q's stage is released (the last S retired in the softmax): the
                        # producer may load the next tile's Q while this P V runs
                        with v_pipe.consume() as vs:
                            o = pv(p, vs, o, None if late else alpha)
                if s.own_blocks:
                    # the tile's blocks past this warpgroup's last key: no key of them is one
                    # its rows may see, so their stages are released unread (the producer and
                    # the other warpgroups step through them: the step counts stay in step)
                    for _ in ag.range(loaded - blocks):
                        with k_pipe.consume():
                            pass
                        with v_pipe.consume():
                            pass

                if s.defer_row_sum:
                    l_i = l_i.sum(axis=1)           # the quad's reduction, once a tile
                no_key = l_i == 0.0
                if fp8:
                    o = o * o_scale                           # v_scale
                o = o * (1.0 / ag.where(no_key, 1.0, l_i))   # rows that saw no key: zeros
                unit_o = Unit((b, h), m, 0)
                if s.epilogue == "tma":
                    store_tile_staged(O, unit_o, wg, o, staging, bm=BM, bn=D, rows=ROWS,
                                      finish=lambda t: t.to(out_dt))
                else:
                    store_tile(O, unit_o, wg, o, bm=BM, bn=D, rows=ROWS,
                               finish=lambda t: t.to(out_dt))
                if lse:
                    ag.store(LSE, (b, h, r0, 0),
                             ag.where(no_key, neg_inf, (m_i + P_BIAS if fp8 else m_i) * LN2
                                      + ag.log(l_i)))

    if fp8:
        # the permuted V^T is padded to whole 32-key groups: its own length symbol
        vt_keys = "SKV" if permuted_vt else "SK"
        fp8_default = dataclasses.replace(fp8_schedule(D, causal), permuted_vt=permuted_vt)
        if lse:
            def attention_fp8_lse(Q: ag.Tensor[("B", "H", "S", D, dt)],
                                  K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                                  Vt: ag.Tensor[("B", "HKV", D, vt_keys, dt)],
                                  O: ag.Tensor[("B", "H", "S", D, out_dt)],
                                  LSE: ag.Tensor[("B", "H", "S", 1, ag.f32)],
                                  qk_scale: ag.f32, o_scale: ag.f32,
                                  s: AttentionSchedule = fp8_default):
                body(Q, K, Vt, O, LSE, qk_scale, o_scale, s)
            fn = attention_fp8_lse
        else:
            def attention_fp8(Q: ag.Tensor[("B", "H", "S", D, dt)],
                              K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                              Vt: ag.Tensor[("B", "HKV", D, vt_keys, dt)],
                              O: ag.Tensor[("B", "H", "S", D, out_dt)],
                              qk_scale: ag.f32, o_scale: ag.f32,
                              s: AttentionSchedule = fp8_default):
                body(Q, K, Vt, O, None, qk_scale, o_scale, s)
            fn = attention_fp8
    elif lse:
        def attention_lse(Q: ag.Tensor[("B", "H", "S", D, dt)],
                          K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                          V: ag.Tensor[("B", "HKV", "SK", D, dt)],
                          O: ag.Tensor[("B", "H", "S", D, dt)],
                          LSE: ag.Tensor[("B", "H", "S", 1, ag.f32)],
                          qk_scale: ag.f32,
                          s: AttentionSchedule = default_schedule(D, causal)):
            body(Q, K, V, O, LSE, qk_scale, None, s)
        fn = attention_lse
    else:
        def attention(Q: ag.Tensor[("B", "H", "S", D, dt)],
                      K: ag.Tensor[("B", "HKV", "SK", D, dt)],
                      V: ag.Tensor[("B", "HKV", "SK", D, dt)],
                      O: ag.Tensor[("B", "H", "S", D, dt)],
                      qk_scale: ag.f32,
                      s: AttentionSchedule = default_schedule(D, causal)):
            body(Q, K, V, O, None, qk_scale, None, s)
        fn = attention
    name = f"attention_d{D}_{dt.name}" + ("_causal" if causal else "") + ("_lse" if lse else "") \
        + ("_pvt" if permuted_vt else "")
    return ag.kernel(fn, name=name)
