"""The attention family: the library FlashAttention forward (argus/kernels/attention.py, run
through argus.ops.attention) with `AttentionSchedule` as the action space.

Action space: the query tile (block_m = 64 rows per consumer warpgroup, 1-3 of them), the key
block (block_n), the depth of the K and V rings (stages), FA3's ping-pong (ordered), the two
intra-warpgroup overlap orders (fa3_overlap; intra_wg_overlap, which the verifier cannot prove
yet), the persistent walk and the epilogue; since 2026-12-04 also the knobs the library's
defaults were measured on: two CTAs an SM (ctas_per_sm, 104-register consumers), the grid's
tile order (longest causal tiles first), own_blocks and exp2 partly on the FMA pipe
(exp2_emulate), with the cards attn.two_ctas and attn.tile_order; since 2026-12-07 (h292) also
h290's two short-prefill levers, not measured on a GPU yet: O staged in rounds of store_cols
columns by the TMA-store epilogue (the rounds each head dim takes come from the schedule's own
problems_for: facts store_rounds) and the walk's prefetch of its next Q (prefetch_next_q: the
persistent walk without ping-pong, the schedule's own rule). The estimate counts store_cols as
the TMA-store epilogue and nothing for the prefetch (no measurement to fit). Since h300 also
packed_p (h295: FA3's overlap order carries P_{j-1} as the packed 16-bit A fragment), refused
off the fa3 order by the schedule's own rule (packed_p_problems); the block_n it makes fit (144 /
160 at head dim 128, 80 at 256: AttentionSchedule.spill_problems counts the carried P, fp32 or
packed, against the spills NVRTC measured, and resource_check leaves a spilling point out) are
on the block_n axis already. The estimate counts nothing for packing
itself (not measured on a GPU); a wider block_n costs what any block_n does. Since h315 also
rescale_after_pv (h309: O rescaled after P V retires on FA3's overlap order, which ping-pong
there always takes), refused off that order by the schedule's own rule
(rescale_after_pv_problems); the estimate counts nothing for it (bf16 hd128 measured it 0-7%
behind the default, FP8 hd128 3-8% ahead: the family's kernel is 16-bit). There is no decode
path in argus yet (no attention_decode, no KV splits), so no split axis.

Legality is declared, not written as family rules: AttentionSchedule's ranges and constraints
(families/declared.py: the fields' legal values, the overlap order the verifier cannot prove yet,
"snake" only with the persistent walk; the walk itself, causal or not, with own_blocks, "lpt" or
"snake", verifies with zero findings: tests/verify/test_persistent_causal_walk.py,
test_persistent_own_blocks.py) and the adapter's
`AttentionPrecision` (the head dims the kernel takes, a smaller one zero-padded to the next; the
Q K^T split; the operand type per task dtype), read by the generic ScheduleFamily; then the
class's own refusals (`AttentionSchedule._problems`, code schedule_fields) and the kernel's
resource report at the head dim it runs (`problems_for`: shared memory against 227 KB,
registers per consumer thread for O, S and P; codes smem, registers).

Cost model (an estimate, labelled so): per tile, its visible KV blocks (all, or under the
causal mask those up to its last row's last key, FlashAttention's bottom-right alignment), each
costing the tensor-core time of S = Q K^T and P V (issue efficiency of wgmma N = block_n and N =
head dim) against the softmax's exp2 on the SFU, serialized in the plain loop and overlapped by
ping-pong or the overlap orders; a shallow ring waits on TMA latency; tiles go longest first
onto 132 SMs (the hardware launches CTAs in order; the persistent walk is ordered the same), a
non-persistent CTA pays its start and first fill. KernelBench adapters add their casts and
head-dim padding as memory-bound glue.

Evaluation: on a GPU the KernelBench solution calls argus.ops.attention(..., schedule=...) and
is timed against torch SDPA (the task's eager baseline picks its backend; the per-backend
comparison is scripts/gpu_attention_bench.py); without a GPU the same kernel runs in the
interpreter at the check's shrunk sizes and the time is this estimate.

A KernelBench fp32 task runs on the 16-bit kernel (P is rounded to 16 bits for P V), which
cannot be fp32-accurate: such a task is judged on the relaxed track, and the TaskSpec says so.
Two precision knobs are in its action space: `operand` (fp16 first, 8x finer than bf16; bf16
keeps fp32's range) and `qk_terms` (3: Q and K split into hi/lo pieces concatenated along the
head dim, S = [Qh, Qh, Ql] . [Kh, Kl, Kh], when 3 x D <= 256), which heavy-tailed inputs need:
a bf16 candidate failed the relaxed track on the check's Student-t set (max_elem 0.049).

KernelBench L1/97 itself (head dim 1024) is refused by the head_dim rule: the kernel's output
accumulator at D = 1024 is 512 fp32 registers per thread; it falls back to argus.compose.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import Refusal
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec
from argus.errors import Diagnostic
from argus.schedule_space import Constraint, legal

# SFU throughput of exp2 (MUFU.EX2): 16 per clock per SM (4 per SM sub-partition) at the
# H200's 1.755 GHz sustained clock: ~0.5 of an hd128 block's MMA time, FA3's motivation
SFU_EX2_PER_S = 16 * 1.755e9
# the plain loop: two or three consumer warpgroups interleave by themselves, so part of one's
# softmax hides under another's GEMMs. Calibrated on the H200 run 5 (kernels/attention.py,
# default_schedule): the overlap orders gained 5-6% over the plain loop at hd128 and hd64
PLAIN_EXPOSED_SOFTMAX = 0.15
# torch SDPA on fp32 inputs (the math / memory-efficient backends: flash and cuDNN take 16-bit
# only): KernelBench L1/97 eager measured 25.28 ms for 1.10 TFLOP = 43.5 TFLOP/s on the H200
# (docs/perf/kernelbench-baselines.md), 0.65 of the CUDA-core fp32 rate
SDPA_F32_EFFICIENCY = 0.65
# torch SDPA on bf16 (cuDNN): 593-663 TFLOP/s full, 432-597 causal at hd128 (issue 14's table)
SDPA_BF16_TFLOPS = {False: 600e12, True: 500e12}
MAX_LPT_TILES = 200_000   # beyond this, tiles are spread evenly (the greedy schedule costs time)


def kernel_head_dim(head_dim: int) -> int | None:
    """The kernel's head dim a task's head dim runs at: the next supported one (zero-padding
    Q, K and V along it changes neither Q K^T nor the leading columns of O), None above 256."""
    from argus.kernels.attention import HEAD_DIMS

    return next((d for d in HEAD_DIMS if d >= head_dim), None)


def kernel_head_dims(head_dim: int, dtype: str) -> tuple[int, ...]:
    """The head dims a task's kernel may run at: one per Q K^T split (qk_terms) its
    precision takes (AttentionPrecision's declared choices that _qk_fits accepts)."""
    from argus.schedule_space import space_of

    facts = {"D": head_dim, "dtype": dtype}
    terms = space_of(AttentionPrecision).legal_of("qk_terms").choices
    return tuple(sorted({kernel_head_dim(head_dim * t) for t in terms
                         if _qk_fits({"qk_terms": t}, facts)} - {None}))


def store_rounds(head_dims: tuple[int, ...], causal: bool, seq_len: int) -> tuple[int, ...]:
    """The store_cols values the search tries: 0 (O staged whole, or the direct epilogue's
    nothing) and each declared round that, at one of `head_dims`, stages fewer columns than
    the head dim and passes AttentionSchedule.problems_for on the library's default schedule
    there with the TMA-store epilogue in those rounds: it divides the head dim, and Q, the
    rings and its staging tile fit shared memory (at head dim 256 the whole 128 x 256 tile
    does not, rounds of 64 and 128 do)."""
    from argus.agent.families.declared import declare_library
    from argus.kernels.attention import AttentionSchedule, default_schedule
    from argus.schedule_space import space_of

    declare_library()
    out = {0}
    for v in space_of(AttentionSchedule).legal_of("store_cols").choices:
        for kd in head_dims:
            if not 0 < v < kd:
                continue
            try:
                probe = dataclasses.replace(default_schedule(kd, causal, seq_len),
                                            epilogue="tma", store_cols=v)
            except ValueError:
                continue
            if not probe.problems_for(kd):
                out.add(v)
    return tuple(sorted(out))


def schedule_of(params: dict[str, Any]):
    """The AttentionSchedule of a parameter dict (ValueError with the kernel's reasons)."""
    from argus.kernels.attention import AttentionSchedule

    names = {f.name for f in dataclasses.fields(AttentionSchedule)}
    return AttentionSchedule(**{k: v for k, v in params.items() if k in names})


def _field_problems(p: dict[str, Any]) -> list[str]:
    try:
        schedule_of(p)
    except ValueError as exc:
        return [str(exc)]
    return []


def _kd(d: dict[str, Any], p: dict[str, Any]) -> int:
    """The kernel's head dim: the task's, times the Q K^T split's pieces, padded."""
    width = d["D"] * p.get("qk_terms", 1)
    return kernel_head_dim(width) or width


def _qk_fits(s, f) -> bool:
    """qk_terms pieces of the head dim fit the kernel (and a split is for float32 tasks)."""
    if kernel_head_dim(f["D"]) is None:
        return True     # the head_dim constraint reports that one
    return kernel_head_dim(f["D"] * s["qk_terms"]) is not None and (
        s["qk_terms"] == 1 or f["dtype"] == "f32")


def _operand_types(dtype: str) -> tuple[str, ...]:
    """The kernel's 16-bit type: a bf16 or fp16 task keeps its own; a float32 task takes fp16
    first (8x finer than bf16: Q, K, P, V and O each round to 2^-11, and a heavy-tailed score of
    1e4 moves by ~5 instead of ~40; values past 65504 overflow, which the check catches) or
    bf16 (fp32's range)."""
    if dtype == "f32":
        return ("f16", "bf16")
    return ("f16",) if dtype == "f16" else ("bf16",)


@dataclass(frozen=True)
class AttentionPrecision:
    """The adapter's precision knobs beside AttentionSchedule: the kernel's 16-bit operand
    type, and Q K^T split into qk_terms bf16 hi/lo pieces along the head dim (3: S = Qh Kh^T
    + Qh Kl^T + Ql Kh^T as one product over [Qh, Qh, Ql] . [Kh, Kl, Kh], S to ~2^-16 instead
    of bf16's 2^-9, which heavy-tailed inputs need; P, V and O stay 16-bit)."""

    qk_terms: int = field(default=1, metadata=legal((1, 3), rule="1 or 3 pieces of Q K^T"))
    operand: str = field(default="bf16", metadata=legal(
        ("f16", "bf16"), rule="argus/kernels/attention.py attention_kernel (16-bit operands)"))

    CONSTRAINTS = (
        Constraint("head_dim", lambda s, f: kernel_head_dim(f["D"]) is not None,
                   "head dim {D}: the attention kernel takes 64, 128 and 256 (smaller head dims "
                   "are zero-padded to the next); above 256 the output accumulator alone is "
                   "{D}/2 fp32 registers per consumer thread, more than a thread has",
                   "run it on torch SDPA or argus.compose (two GEMMs and a softmax), or extend "
                   "the kernel with a head-dim split (O's columns across CTAs, S accumulated "
                   "over D/64 steps)",
                   "argus/kernels/attention.py HEAD_DIMS; 255 registers per thread (sm_90)"),
        Constraint("qk_terms", _qk_fits,
                   "qk_terms={qk_terms}: Q K^T split into hi/lo bf16 pieces concatenated along "
                   "the head dim needs {qk_terms} x {D} <= 256 columns (and a float32 task)",
                   "use qk_terms=1", "argus/kernels/attention.py HEAD_DIMS",
                   reads=("qk_terms",)),
        Constraint("operand", lambda s, f: s["operand"] in _operand_types(f["dtype"]),
                   "operand={operand} for a {dtype} task: the kernel multiplies bf16 or fp16, a "
                   "16-bit task in its own type", "use operand='f16' or 'bf16'",
                   "argus/kernels/attention.py attention_kernel", reads=("operand",)),
    )


class AttentionFamily(ScheduleFamily):
    name = "attention"
    parts = (Part(lambda: _schedule_type()), Part(lambda: AttentionPrecision))

    # -- the schedule space -------------------------------------------------------------------
    def facts(self, task: TaskSpec) -> dict[str, Any]:
        """The task's dims and dtype, and for store_cols (declared.py store_cols_head_dim) the
        head dims its kernel may run at and the staging rounds those take (store_rounds)."""
        d = task.dims
        head_dims = kernel_head_dims(d["D"], task.dtype)
        return {**d, "dtype": task.dtype, "kernel_head_dims": head_dims,
                "store_rounds": store_rounds(head_dims, bool(d.get("causal")), d["S"])}

    def operand_choices(self, task: TaskSpec) -> tuple[str, ...]:
        return self.space(task)["operand"]

    def qk_term_choices(self, task: TaskSpec) -> tuple[int, ...]:
        return self.space(task)["qk_terms"]

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        """The library's measured choice for this head dim, mask and query length."""
        from argus.kernels.attention import default_schedule

        d = task.dims
        terms = max(self.qk_term_choices(task))
        kd = kernel_head_dim(d["D"] * terms) or 128
        return {**dataclasses.asdict(default_schedule(kd, bool(d.get("causal")), d["S"])),
                "qk_terms": terms, "operand": self.operand_choices(task)[0]}

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        """A correct, slow start: one consumer warpgroup of 64 rows, 64-key blocks, the plain
        loop, one CTA a tile (none of the walk's or the overlap order's levers: the early Q
        release of the hd128 / 256 short full defaults needs fa3_overlap)."""
        p = self.default_params(task)
        p.update(block_m=64, consumers=1, block_n=64, stages=2, ordered=False,
                 fa3_overlap=False, intra_wg_overlap=False, persistent=False,
                 epilogue="direct", producer_regs=24, consumer_regs=240, ctas_per_sm=1,
                 tile_order="head", own_blocks=False, early_q_release=False, cluster_m=1,
                 store_cols=0, prefetch_next_q=False, packed_p=False,
                 rescale_after_pv=False)
        return p

    def normalize(self, task: TaskSpec, params: dict[str, Any]) -> dict[str, Any]:
        """consumers follows block_m; three warpgroups share the register file at 160 each
        (plus a 32-register producer), one or two take 240 (24); two CTAs an SM (ctas_per_sm
        2, the head-dim-64 default at short lengths) keep the split their schedule names (24 +
        2 x 104: 384 threads enter with 80 registers). Ping-pong and the overlap orders exclude
        each other: the cards that turn one on set the others off. Staging rounds (store_cols)
        exist only with the TMA-store epilogue (as in the GEMM family), and a round of the
        whole head dim is store_cols=0 (Staging stages min(store_cols, head dim) either way).
        Ping-pong on FA3's overlap order (ordered + fa3_overlap) always rescales O after P V
        (AttentionSchedule.rescale_late), so rescale_after_pv there is one kernel either way:
        the point keeps rescale_after_pv=False."""
        p = dict(params)
        if p.get("ordered") and p.get("fa3_overlap"):
            p["rescale_after_pv"] = False
        if p.get("epilogue", "direct") != "tma" or p.get("store_cols", 0) == _kd(task.dims, p):
            p["store_cols"] = 0
        if p.get("block_m", 0) % 64 == 0:
            p["consumers"] = max(1, min(3, p["block_m"] // 64))
        if p.get("ctas_per_sm", 1) > 1:
            pass    # the two-CTA register split is the schedule's own (AttentionSchedule checks it)
        elif p["consumers"] == 3:
            p["producer_regs"], p["consumer_regs"] = 32, 160
        else:
            p["producer_regs"], p["consumer_regs"] = 24, 240
        p.setdefault("num_sms", 132)
        return p

    def resource_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """The kernel's own resource report at the head dim it runs (`problems_for`: shared
        memory against 227 KB, registers per consumer thread for O, S and P), then where the
        kernel would spill (`spill_problems`: the fa3 loop's carried O, S and P)."""
        kd = kernel_head_dim(task.dims["D"] * params.get("qk_terms", 1))
        if kd is None:
            return []      # the head_dim and qk_terms constraints report it
        out = []
        schedule = schedule_of(params)
        # a point the kernel takes but that would spill (spill_problems: the fa3 loop's carried
        # tiles, NVRTC's measured limit) is not offered either
        for problem in schedule.problems_for(kd) or schedule.spill_problems(kd):
            if "shared memory" in problem:
                code, fix = "smem", ("use fewer stages or a smaller block_n (or ordered=True "
                                     "without fa3_overlap: "
                                     "Q in registers; or store_cols: O staged in rounds)")
            elif "registers" in problem:      # problems_for's or spill_problems' count
                code, fix = "registers", ("use a smaller block_n, or fewer live tiles (no "
                                          "ping-pong; with fa3_overlap, packed_p=True)")
            else:   # a field this head dim does not take (store_cols not dividing it)
                code, fix = "schedule_fields", f"change the fields it names for head dim {kd}"
            out.append(Diagnostic(
                "error", code, problem, kernel=task.name,
                counterexample=dict(sorted(params.items())),
                fix=fix + " (rule: AttentionSchedule.problems_for: sm_90 shared memory per "
                          "CTA; O (D/2), S (block_n/2) and P (block_n/4) fp32 per consumer "
                          "thread under setmaxnreg; spill_problems: the fa3 loop's carried P "
                          "(fp32 block_n/2, packed block_n/4) and its scalars' FA3_CARRY_SLACK; "
                          "store_cols divides the head dim)"))
        return out

    # -- cost ------------------------------------------------------------------------------------
    def tile_blocks(self, task: TaskSpec, block_m: int, block_n: int) -> list[int]:
        """KV blocks each query tile of one (batch, head) reads (kernels/attention.py
        _kv_blocks: all of them, or under the causal mask up to the tile's last row's last key,
        bottom-right aligned)."""
        d = task.dims
        S, SK = d["S"], d["SK"]
        every = math.ceil(SK / block_n)
        out = []
        for m in range(math.ceil(S / block_m)):
            if d.get("causal"):
                last_key = min(SK, (m + 1) * block_m + SK - S)
                out.append(max(0, min(every, math.ceil(max(0, last_key) / block_n))))
            else:
                out.append(every)
        return out

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        d = task.dims
        kd = kernel_head_dim(d["D"] * params.get("qk_terms", 1))
        if kd is None or _field_problems(params):
            return None
        hw = cost_model.H200
        bm, bn, c = params["block_m"], params["block_n"], params["consumers"]
        stages = params["stages"]
        peak_sm = hw.bf16_flops / hw.sms
        eff = cost_model.consumer_efficiency(c)
        # one KV block of one CTA: S = Q K^T (wgmma N = bn) and P V (N = kd)
        t_qk = 2.0 * bm * bn * kd / (peak_sm * cost_model.wgmma_efficiency(bn) * eff)
        t_pv = 2.0 * bm * bn * kd / (peak_sm * cost_model.wgmma_efficiency(kd) * eff)
        t_mma = t_qk + t_pv
        t_soft = bm * bn / SFU_EX2_PER_S
        overlapped = params.get("ordered") or params.get("fa3_overlap") \
            or params.get("intra_wg_overlap")
        if overlapped and (c > 1 or not params.get("ordered")):
            t_compute = max(t_mma, t_soft) * (1.02 if params.get("ordered") else 1.0)
        else:
            t_compute = t_mma + PLAIN_EXPOSED_SOFTMAX * t_soft * (3 if c == 1 else 1)
        kv_bytes = 2 * bn * kd * 2   # a K and a V block, bf16
        t_l2 = hw.sms * kv_bytes / hw.l2_bytes_s   # every SM's CTA reads its blocks via L2
        t_lat = (hw.tma_latency_s + t_compute) / stages
        t_block = max(t_compute, t_l2, t_lat)
        bound = {t_compute: "compute", t_l2: "memory", t_lat: "latency"}[t_block]
        ep = bm * kd * 2 / (hw.hbm_bytes_s / hw.sms)
        if params.get("epilogue") == "tma":
            ep *= 0.3
        persistent = bool(params.get("persistent"))
        t_fill = 0.0 if persistent else hw.tma_latency_s + hw.cta_start_s
        q_load = bm * kd * 2 / (hw.hbm_bytes_s / hw.sms)
        # two CTAs an SM share its tensor cores (each block takes as long per SM) but one's
        # start, Q load and O store run under the other's KV loop: the exposed share halves
        exposed = (ep + t_fill + q_load) / max(1, params.get("ctas_per_sm", 1))
        blocks = self.tile_blocks(task, bm, bn)
        heads = d["B"] * d["H"]
        per_tile = sorted((b * t_block + exposed for b in blocks), reverse=True)
        tiles = heads * len(per_tile)
        if tiles <= MAX_LPT_TILES:   # longest first onto the least loaded SM
            loads = [0.0] * min(hw.sms, tiles)
            for t in (t for t in per_tile for _ in range(heads)):
                heapq.heapreplace(loads, loads[0] + t)
            t_kernel = max(loads)
        else:
            t_kernel = max(heads * sum(per_tile) / hw.sms, per_tile[0])
        t_kernel += hw.launch_s + (hw.tma_latency_s + hw.cta_start_s if persistent else 0.0)
        glue_bytes, glue_launches = self.glue(task, params)
        t_glue = glue_bytes / (cost_model.COPY_EFFICIENCY * hw.hbm_bytes_s) \
            + glue_launches * hw.launch_s
        total = t_kernel + t_glue
        detail = {"tiles": tiles, "kv_blocks": heads * sum(blocks), "head_dim": kd,
                  "t_block_us": t_block * 1e6, "t_mma_us": t_mma * 1e6,
                  "t_softmax_us": t_soft * 1e6, "t_latency_us": t_lat * 1e6,
                  "glue_us": t_glue * 1e6, "tflops": self.flops(task) / total / 1e12}
        return Estimate(total * 1e3, bound, detail)

    def flops(self, task: TaskSpec) -> float:
        """The task's useful FLOPs (4 B H S SK D; causal: the visible half)."""
        d = task.dims
        pairs = d["S"] * d["SK"]
        if d.get("causal"):
            pairs = sum(max(0, min(d["SK"], i + 1 + d["SK"] - d["S"])) for i in range(d["S"]))
        return 4.0 * d["B"] * d["H"] * pairs * d["D"]

    def glue(self, task: TaskSpec, params: dict[str, Any]) -> tuple[int, int]:
        """Bytes and launches around the kernel in a KernelBench adapter: fp32 Q, K, V cast to
        bf16 (and padded to the kernel's head dim), the bf16 output cast back (and sliced)."""
        if task.origin != "kernelbench":
            return 0, 0
        d = task.dims
        eb = {"f32": 4, "bf16": 2, "f16": 2}.get(task.dtype, 4)
        kd = _kd(d, params)
        if eb == 2 and kd == d["D"]:
            return 0, 0
        q_o = d["B"] * d["H"] * d["S"]
        kv = d["B"] * d["HKV"] * d["SK"]
        moved = (q_o + 2 * kv) * (d["D"] * eb + kd * 2) + q_o * (kd * 2 + d["D"] * eb)
        return moved, 4 + 4 * (params.get("qk_terms", 1) > 1)

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        flops = self.flops(task)
        if task.dtype == "f32":
            rate = SDPA_F32_EFFICIENCY * cost_model.H200.fp32_flops
        else:
            rate = SDPA_BF16_TFLOPS[bool(task.dims.get("causal"))]
        est = Estimate(flops / rate * 1e3 + cost_model.H200.launch_s * 1e3, "compute",
                       {"assumed_tflops": rate / 1e12})
        if task.origin == "kernelbench":
            return {"eager": est, "torch.compile": est}
        return {"baseline": est}

    # -- rendering -------------------------------------------------------------------------------
    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        d = task.dims
        kd = _kd(d, params)
        names = {f.name for f in dataclasses.fields(_schedule_type())}
        fields = ", ".join(f"{k}={params[k]!r}" for k in sorted(params) if k in names)
        dt = params.get("operand", "f16" if task.compute == "f16" else "bf16")
        return (f'"""Attention forward chosen by `argus optimize` for {task.name}: the library '
                f"kernel\n(argus/kernels/attention.py, read it there) at head dim {kd}, "
                f"{'causal' if d.get('causal') else 'full'} mask, {dt}, with this schedule.\n"
                '"""\n\n'
                "import argus as ag\n"
                "from argus.kernels.attention import AttentionSchedule, attention_kernel\n\n"
                f"HEAD_DIM = {kd}\n"
                f"QK_TERMS = {params.get('qk_terms', 1)!r}\n"
                f"CAUSAL = {bool(d.get('causal'))!r}\n"
                f"KERNEL = attention_kernel(HEAD_DIM, ag.{dt}, CAUSAL, False)\n"
                f"SCHEDULE = AttentionSchedule({fields})\n"
                'CONSTEXPRS = {"s": SCHEDULE}\n')

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        if task.origin != "kernelbench":
            return None
        o = task.opts
        dt = {"f16": "torch.float16", "bf16": "torch.bfloat16"}[
            (params or {}).get("operand", "f16" if task.compute == "f16" else "bf16")]
        scale = o.get("scale")
        return (kernel_source.rstrip() + "\n\n\n"
                "# ---- KernelBench adapter: ModelNew(Q, K, V) = SDPA through argus.ops.attention "
                "--------\n"
                "# Q, K and V are cast to 16 bits (a float32 task is judged on the relaxed "
                "track: P V\n# multiplies P rounded to 16 bits) and zero-padded along the head "
                "dim to HEAD_DIM\n# (Q K^T and O's leading columns are unchanged); on a CPU the "
                "kernel runs in the\n# Argus interpreter.\n"
                "import math  # noqa: E402\n\n"
                "import torch  # noqa: E402\n\n"
                "import argus.ops  # noqa: E402\n"
                "from argus.kernels.attention import LOG2E  # noqa: E402\n\n"
                f"DTYPE = {dt}\n"
                f"SCALE = {scale!r}    # None: 1 / sqrt(head dim), torch's default\n"
                + ADAPTER)


def _schedule_type():
    from argus.kernels.attention import AttentionSchedule

    return AttentionSchedule


ADAPTER = '''

def _pad(t):
    if t.shape[-1] == HEAD_DIM:
        return t.contiguous()
    return torch.nn.functional.pad(t, (0, HEAD_DIM - t.shape[-1])).contiguous()


def _pieces(t):
    """(hi, lo): t = hi + lo + O(2^-16 |t|), both 16-bit."""
    hi = t.to(DTYPE)
    return hi, (t.float() - hi.float()).to(DTYPE)


def _operands(Q, K, V):
    """Q, K, V for the kernel: 16-bit, padded to HEAD_DIM; with QK_TERMS = 3, Q K^T as
    [Qh, Qh, Ql] . [Kh, Kl, Kh] (V only pads)."""
    if QK_TERMS == 3:
        (qh, ql), (kh, kl) = _pieces(Q), _pieces(K)
        q, k = torch.cat((qh, qh, ql), -1), torch.cat((kh, kl, kh), -1)
    else:
        q, k = Q.to(DTYPE), K.to(DTYPE)
    return _pad(q), _pad(k), _pad(V.to(DTYPE))


class ModelNew(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, Q, K, V):
        d = Q.shape[-1]
        scale = SCALE if SCALE is not None else 1.0 / math.sqrt(d)
        q, k, v = _operands(Q, K, V)
        if q.is_cuda:
            o = argus.ops.attention(q, k, v, causal=CAUSAL, scale=scale, schedule=SCHEDULE)
        else:
            o = torch.empty_like(q)
            KERNEL.interpret(q, k, v, o, scale * LOG2E, **CONSTEXPRS)
        return o[..., :d].to(Q.dtype)
'''


# ----------------------------------------------------------------------------- task matching


def match_kernelbench(gm, placeholders, compute, shapes, common: dict[str, Any]
                      ) -> TaskSpec | Refusal | None:
    """The attention TaskSpec of a KernelBench task whose forward is one
    torch.nn.functional.scaled_dot_product_attention(Q, K, V[, is_causal=..., scale=...]) of its
    three inputs; None when the graph is something else; a Refusal for an SDPA the kernel
    cannot run (a mask tensor, dropout, head dim above 256, ...)."""
    import torch

    if len(compute) != 1 or len(placeholders) != 3:
        return None
    node = compute[0]
    if node.op != "call_function" or node.target is not \
            torch.nn.functional.scaled_dot_product_attention:
        return None
    name = common["name"]
    args = list(node.args)
    kwargs = dict(node.kwargs)
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale",
             "enable_gqa")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if [getattr(bound.get(n), "name", None) for n in names[:3]] != \
            [p.name for p in placeholders]:
        return None
    if bound.get("attn_mask") is not None or float(bound.get("dropout_p", 0.0) or 0.0) != 0.0:
        return Refusal(f"{name}: SDPA with an attention mask tensor or dropout has no Argus "
                         "template (the kernel takes the causal mask only, no dropout)")
    causal = bool(bound.get("is_causal", False))
    scale = bound.get("scale")
    q, k, v = (shapes[p.name] for p in placeholders)
    if q.dim() != 4 or k.dim() != 4 or tuple(k.shape) != tuple(v.shape):
        return Refusal(f"{name}: SDPA on shapes {tuple(q.shape)}, {tuple(k.shape)}, "
                         f"{tuple(v.shape)}: the attention template takes [B, H, S, D] tensors")
    if q.dtype not in (torch.float32, torch.bfloat16, torch.float16) or k.dtype != q.dtype \
            or v.dtype != q.dtype:
        return Refusal(f"{name}: SDPA on {q.dtype}: the attention template covers fp32, bf16 "
                         "and fp16 tasks")
    B, H, S, D = (int(x) for x in q.shape)
    HKV, SK = int(k.shape[1]), int(k.shape[2])
    if k.shape[0] != B or k.shape[3] != D or HKV == 0 or H % HKV or \
            (H != HKV and not bound.get("enable_gqa", False)):
        return Refusal(f"{name}: SDPA with q {tuple(q.shape)} and k {tuple(k.shape)}: batch "
                         "and head dim must match and the query heads be the key heads (or a "
                         "multiple of them with enable_gqa=True)")
    if causal and S != SK:
        return Refusal(f"{name}: causal SDPA with S={S} != SK={SK}: torch aligns the mask "
                         "top-left, the kernel bottom-right (FlashAttention's convention)")
    if kernel_head_dim(D) is None:
        return Refusal(f"{name}: SDPA with head dim {D}: the attention kernel takes 64, 128 "
                         "and 256 (smaller head dims are zero-padded); above 256 its output "
                         "accumulator alone exceeds a thread's registers",
                         fix="a head-dim split in argus/kernels/attention.py (O's columns "
                             "across CTAs) would bring it to the attention family")
    dtype = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}[q.dtype]
    # the default operand type (operand_choices: a float32 task takes fp16 first)
    compute_dt = "bf16" if dtype == "bf16" else "f16"
    eb = 4 if dtype == "f32" else 2
    pairs = S * SK if not causal else sum(max(0, min(SK, i + 1)) for i in range(S))
    return TaskSpec(family="attention",
                    shape=(("B", B), ("H", H), ("HKV", HKV), ("S", S), ("SK", SK), ("D", D),
                           ("causal", int(causal))),
                    dtype=dtype, compute=compute_dt,
                    options=(("scale", None if scale is None else float(scale)),),
                    metrics=(("flops", 4.0 * B * H * pairs * D),
                             ("bytes", float(eb * (2 * B * H * S * D + 2 * B * HKV * SK * D)))),
                    note=f"SDPA through argus.ops.attention (16-bit kernel at head dim "
                         f"{kernel_head_dim(D)}"
                         + (f", padded from {D}" if kernel_head_dim(D) != D else "") + ")"
                         + ("; a float32 task on the 16-bit kernel: relaxed track"
                            if dtype == "f32" else ""),
                    **common)


__all__ = ["AttentionFamily", "Refusal", "kernel_head_dim", "match_kernelbench", "schedule_of"]
