"""The MoE family: the expert GEMMs of argus.ops.moe (argus/kernels/moe.py), tuned as the
(gate-up, down) schedule pair that `moe(..., schedule=(gate_up, down))` accepts.

Action space (flat parameters, `pair` turns them into the two MoeSchedules):
  prefill: the tile (bm = 64 per consumer warpgroup, bn), ring stages, the epilogue (registers
    or stmatrix + TMA store), CTA pairs sharing the weight tile (cluster_m); both GEMMs share it
    (one padded layout);
  decode (swap_ab: the weights as wgmma's M side, a token tile of bn = 8..64 rows as N): the
    token tile (shared: both GEMMs read one layout padded to it), and per GEMM its ring depth
    (gate_stages, down_stages) and its K split (gate_split, down_split).

Legality is declared, not written as family rules: MoeSchedule's ranges (families/declared.py,
with the warp-specialized skeleton's it inherits) read by the generic ScheduleFamily, which uses
the class in its roles (the prefill schedule both GEMMs share; in decode the gate-up's and the
down's, each with its own ring depth and K split under its own parameter names, one token tile).
Then the class's own refusals (MoeSchedule._problems: bm = 64 x consumers, a TMA-store epilogue
needs bn % 128 == 0, cluster_m=2 needs bn % 32 == 0; code schedule_fields), argus.ops.moe.Layer's
(equal K slices of a multiple of 8 elements; code k_slices), and the lowering of both grouped
GEMMs, whose shared-memory plan (the ring and the TMA-store staging) is the compiler's (code
smem). argus.ops.moe's decode threshold (swap-AB up to DECODE_MAX_TOKENS tokens) is a declared
warning: legal past it, but a token tile of <= 64 rows leaves prefill's work on too many units.

Cost model (an estimate): decode by argus.ops.moe's own streaming model (decode_stream_us: each
wave of (token tile, 64 weight rows[, K slice]) units at HBM's rate or at what its busy SMs'
rings keep in flight, plus a split's fp32 partials and the gate-up's measured split finish);
prefill by the GEMM cost model (cost_model.gemm_estimate) of each grouped GEMM over the padded
rows routing produces under uniform routing (each touched expert's rows rounded up to its
padding), plus routing, permutation and combine as memory-bound glue.

Evaluation: `run` calls argus.ops.moe's expert path with the pair (the interpreter on CPU
tensors, the compiled kernels on CUDA ones); no KernelBench task is an MoE layer, so the family
is reached through the library (argus.ops.moe) and its tests, not through a task file yet.
"""

from __future__ import annotations

import math
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec
from argus.errors import Diagnostic


def _moe_schedule() -> type:
    from argus.kernels.moe import MoeSchedule

    return MoeSchedule


def _prefill_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Prefill: 64 rows per consumer warpgroup, a 64-deep K step; one warpgroup takes 240
    registers (its producer 40), as argus/kernels/moe.py SMALL and TINY; the gated epilogue's
    branch-free SiLU (MoeSchedule.rsqrt_silu), as every prefill schedule of the op's rule."""
    consumers = max(1, values["bm"] // 64)
    return {**values, "bk": 64, "consumers": consumers, "rsqrt_silu": True,
            **({"consumer_regs": 240, "producer_regs": 40} if consumers == 1 else {})}


def _decode_fields(values: dict[str, Any]) -> dict[str, Any]:
    """Decode (argus/kernels/moe.py decode_schedule): one consumer warpgroup multiplies 64
    weight rows per plane, launched with PDL as argus.ops.moe.decode_schedules does (each
    GEMM's prologue overlaps the kernel before it; docs/pdl.md), prefetching its first ring of
    weights into L2 before the wait (MoeSchedule.prefetch = stages, the op's default)."""
    return {**values, "bm": 64, "bk": 64, "consumers": 1, "consumer_regs": 240,
            "producer_regs": 40, "pdl": True, "prefetch": values["stages"]}


def _decode_down_fields(values: dict[str, Any]) -> dict[str, Any]:
    """The decode down GEMM: _decode_fields, and the combine after it launched with PDL too
    (MoeSchedule.pdl_combine, argus.ops.moe.decode_schedules' default)."""
    return {**_decode_fields(values), "pdl_combine": True}


# the values each role searches (argus.ops.moe's tiles, rings and splits; the declaration
# accepts more): prefill shares one schedule between both GEMMs (one padded layout)
PREFILL = Part(_moe_schedule, exposed=("swap_ab", "bm", "bn", "stages", "epilogue", "cluster_m"),
               search=(("swap_ab", (False,)), ("bm", (64, 128)), ("bn", (64, 128, 256)),
                       ("stages", (2, 3, 4, 5, 6, 8)), ("epilogue", ("direct", "tma")),
                       ("cluster_m", (1, 2))),
               derive=_prefill_fields)
# decode: both GEMMs read one layout padded to the token tile (bn, shared: the down reads the
# gate-up's), each its own ring depth and K split
GATE_UP = Part(_moe_schedule, exposed=("swap_ab", "bn", "stages", "split_k"), role="gate-up",
               rename=(("stages", "gate_stages"), ("split_k", "gate_split")),
               search=(("swap_ab", (True,)), ("bn", (8, 16, 24, 32, 48, 64)),
                       ("stages", (4, 6, 8, 10, 12, 16)), ("split_k", (1, 2, 3, 4))),
               derive=_decode_fields)
DOWN = Part(_moe_schedule, exposed=("stages", "split_k"), role="down",
            rename=(("stages", "down_stages"), ("split_k", "down_split")),
            search=(("stages", (4, 8, 12, 15, 16)), ("split_k", (1, 2, 3, 4))),
            derive=_decode_down_fields)


def pair(task: TaskSpec, params: dict[str, Any]):
    """(gate_up, down) MoeSchedules of a parameter dict (ValueError: the kernel's reasons)."""
    schedules = MoeFamily().schedules(task, params)
    return schedules[0], schedules[-1]


def _decode_max() -> int:
    from argus.ops.moe import DECODE_MAX_TOKENS

    return DECODE_MAX_TOKENS


class MoeFamily(ScheduleFamily):
    name = "moe"
    parts = (PREFILL, GATE_UP, DOWN)

    def decode(self, task: TaskSpec) -> bool:
        return task.dims["T"] <= _decode_max()

    # -- the schedule space -------------------------------------------------------------------
    def parts_for(self, task: TaskSpec, params: dict[str, Any] | None = None
                  ) -> tuple[Part, ...]:
        """The decode pair when the parameters say swap_ab (or, without parameters, when the
        task is decode-sized), else the prefill schedule: parameters of the other mode than
        the task's are judged as what they are (the decode_threshold warning says so)."""
        decode = bool(params["swap_ab"]) if params and "swap_ab" in params \
            else self.decode(task)
        return (GATE_UP, DOWN) if decode else (PREFILL,)

    def facts(self, task: TaskSpec) -> dict[str, Any]:
        """The shapes, the bf16 outputs (the TMA-store epilogue's rule), the decode threshold."""
        return {**task.dims, "out_bits": 16, "decode_max": _decode_max()}

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        """argus.ops.moe's own choice for these shapes (decode_schedules / schedule_for)."""
        from argus.ops.moe import decode_schedules, schedule_for

        d = task.dims
        if self.decode(task):
            g, dn = decode_schedules(d["T"], d["top_k"], d["E"], d["H"], d["I"])
            return {"swap_ab": True, "bn": g.bn, "gate_stages": g.stages,
                    "down_stages": dn.stages, "gate_split": g.split_k, "down_split": dn.split_k}
        s = schedule_for(d["T"], d["top_k"], d["E"], d["H"])
        return {"swap_ab": False, "bm": s.bm, "bn": s.bn, "stages": s.stages,
                "epilogue": s.epilogue, "cluster_m": s.cluster_m}

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        if self.decode(task):
            return {"swap_ab": True, "bn": 64, "gate_stages": 4, "down_stages": 4,
                    "gate_split": 1, "down_split": 1}
        return {"swap_ab": False, "bm": 64, "bn": 64, "stages": 2, "epilogue": "direct",
                "cluster_m": 1}

    def build(self, task: TaskSpec, params: dict[str, Any]):
        """Both grouped GEMMs (the gate-up stages bn/2 columns for its TMA store, the down bn),
        each with its schedule."""
        from argus.kernels.moe import grouped_gemm_kernel

        gate_up, down = pair(task, params)
        return [(grouped_gemm_kernel(True, gate_up.split_k > 1), {"s": gate_up}),
                (grouped_gemm_kernel(False, down.split_k > 1), {"s": down})]

    def resource_check(self, task: TaskSpec, params: dict[str, Any]) -> list[Diagnostic]:
        """argus.ops.moe.Layer's refusals at the task's shapes (equal K slices of a multiple
        of 8 elements, one layout for both GEMMs), then the lowering's (shared memory)."""
        from argus.errors import LaunchError
        from argus.ops.moe import Layer

        d = task.dims
        gate_up, down = pair(task, params)
        try:
            Layer(d["T"], d["H"], d["I"], d["E"], d["top_k"], gate_up, down)
        except LaunchError as exc:
            return [Diagnostic("error", "k_slices", str(exc).split("\n")[0], kernel=task.name,
                               counterexample=dict(sorted(params.items())),
                               fix="use a split that cuts K into equal slices of a multiple of "
                                   "8 elements, or 1 (rule: argus/ops/moe.py Layer: K-slice "
                                   "views read by TMA)")]
        return super().resource_check(task, params)

    # -- cost ------------------------------------------------------------------------------------
    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        try:
            pair(task, params)
        except ValueError:
            return None
        d = task.dims
        T, H, I, E, k = d["T"], d["H"], d["I"], d["E"], d["top_k"]
        hw = cost_model.H200
        entries = T * k
        touched = E * (1 - (1 - k / E) ** T)       # expected experts with a token (uniform)
        glue = 3 * T * H * 2 + entries * H * 2 * 2   # x in, permuted copy, combine in/out
        t_glue = glue / (cost_model.COPY_EFFICIENCY * hw.hbm_bytes_s) + 5 * hw.launch_s
        if params.get("swap_ab"):
            from argus.ops.moe import DECODE_BYTES_PER_US, SPLIT_FINISH_US, decode_stream_us

            bn = params["bn"]
            token_tiles = max(1, round(max(touched, entries / bn)))
            us = 0.0
            detail: dict[str, Any] = {"token_tiles": token_tiles}
            for gated, cols, depth, stages, splits in (
                    (True, I, H, params["gate_stages"], params["gate_split"]),
                    (False, H, I, params["down_stages"], params["down_split"])):
                planes = 2 if gated else 1
                units = token_tiles * math.ceil(cols / 64)
                in_flight = stages * (planes * 64 + bn) * 64 * 2
                unit_bytes = planes * 64 * depth * 2
                t = decode_stream_us(units * splits, unit_bytes / splits, in_flight)
                if splits > 1:
                    rows = token_tiles * bn
                    t += 2 * rows * cols * (planes * splits * 4 - 2) / DECODE_BYTES_PER_US
                    t += SPLIT_FINISH_US if gated else 0.0
                detail["gate_up_us" if gated else "down_us"] = t
                us += t + hw.launch_s * 1e6
            weight_bytes = touched * 3 * H * I * 2
            detail["weight_floor_us"] = weight_bytes / hw.hbm_bytes_s * 1e6
            return Estimate(us * 1e-3 + t_glue * 1e3, "memory", detail)
        pad = params["bm"] * params["cluster_m"]
        rows = int(sum(math.ceil(entries / touched / pad) * pad for _ in range(round(touched))))
        p = {"bm": params["bm"], "bn": params["bn"], "bk": 64, "stages": params["stages"],
             "consumers": max(1, params["bm"] // 64), "persistent": True, "num_sms": hw.sms,
             "group_m": 8, "cluster_m": params["cluster_m"], "epilogue": params["epilogue"],
             "consumer_regs": 232 if params["bm"] > 64 else 240}
        gate_up = cost_model.gemm_estimate(rows, 2 * I, H, p)
        down = cost_model.gemm_estimate(rows, H, I, p)
        flops = 2.0 * entries * 3 * H * I
        total_ms = gate_up.ms + down.ms + t_glue * 1e3
        return Estimate(total_ms, gate_up.bound,
                        {"padded_rows": rows, "gate_up_ms": gate_up.ms, "down_ms": down.ms,
                         "tflops": flops / (total_ms * 1e-3) / 1e12})

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        """A per-expert loop of torch.mm (issue 16: 676 TFLOP/s on Mixtral's gate-up at T =
        16384; at decode 92% of the weight-read floor)."""
        d = task.dims
        hw = cost_model.H200
        touched = d["E"] * (1 - (1 - d["top_k"] / d["E"]) ** d["T"])
        flops = 2.0 * d["T"] * d["top_k"] * 3 * d["H"] * d["I"]
        weights = touched * 3 * d["H"] * d["I"] * 2
        t = max(flops / 676e12, weights / (0.92 * hw.hbm_bytes_s)) \
            + 3 * touched * hw.launch_s
        return {"torch loop": Estimate(t * 1e3, "compute" if flops / 676e12 > weights
                                       / hw.hbm_bytes_s else "memory", {})}

    # -- rendering and running -------------------------------------------------------------------
    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        """The gate-up grouped GEMM (the layer's first expert kernel) with this pair."""
        gate_up, down = pair(task, params)
        return ('"""MoE expert GEMMs chosen by `argus optimize`: argus/kernels/moe.py with the '
                '(gate-up, down)\nschedule pair that argus.ops.moe(..., schedule=SCHEDULES) '
                'runs."""\n\n'
                "from argus.kernels.moe import MoeSchedule, grouped_gemm_kernel\n\n"
                f"GATE_UP = {gate_up!r}\n"
                f"DOWN = {down!r}\n"
                "SCHEDULES = (GATE_UP, DOWN)\n"
                "KERNEL = grouped_gemm_kernel(True, GATE_UP.split_k > 1)\n"
                'CONSTEXPRS = {"s": GATE_UP}\n')

    def run(self, task: TaskSpec, params: dict[str, Any], x, w13, w2, topk_ids, topk_weights):
        """The layer's expert half with this pair: argus.ops.moe.experts (interpreted for CPU
        tensors, compiled for CUDA ones)."""
        from argus.ops import moe_module

        d = task.dims
        gate_up, down = pair(task, params)
        layer = moe_module.Layer(d["T"], d["H"], d["I"], d["E"], d["top_k"], gate_up, down)
        return moe_module.experts(x, w13, w2, topk_ids, topk_weights, layer,
                                  interpret=not x.is_cuda)


def moe_task(T: int, H: int, I: int, E: int, top_k: int, name: str = "moe") -> TaskSpec:
    """A TaskSpec of one MoE layer's shapes (bf16, the library's op)."""
    return TaskSpec(family="moe", name=name, origin="argus", path="argus.ops.moe",
                    shape=(("E", E), ("H", H), ("I", I), ("T", T), ("top_k", top_k)),
                    dtype="bf16", compute="bf16",
                    metrics=(("flops", 2.0 * T * top_k * 3 * H * I),))


__all__ = ["MoeFamily", "moe_task", "pair"]
