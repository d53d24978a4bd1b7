"""The MoE family: the expert GEMMs of argus.ops.moe (argus/kernels/moe.py), tuned as the
(gate-up, down) schedule pair that `moe(..., schedule=(gate_up, down))` accepts.

Action space (flat parameters, `pair` turns them into the two MoeSchedules):
  prefill: the tile (bm = 64 per consumer warpgroup, bn), ring stages, the epilogue (registers
    or stmatrix + TMA store), CTA pairs sharing the weight tile (cluster_m); both GEMMs share it
    (one padded layout);
  decode (swap_ab: the weights as wgmma's M side, a token tile of bn = 8..64 rows as N): the
    token tile (shared: both GEMMs read one layout padded to it), and per GEMM its ring depth
    (gate_stages, down_stages) and its K split (gate_split, down_split).

Rules are the kernel's and the layer's own refusals (MoeSchedule._problems via its constructor,
argus.ops.moe.Layer's K-slice rule, the pair's one layout), plus the shared-memory budget of the
ring and the TMA-store staging, and argus.ops.moe's decode threshold (swap-AB up to
DECODE_MAX_TOKENS tokens; a warning: legal past it, but a token tile of <= 64 rows leaves
prefill's work on too many units).

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
from argus.agent.families.base import Family, Rule
from argus.agent.task import TaskSpec

SMEM_OVERHEAD = 1024
PREFILL_FIELDS = ("bm", "bn", "stages", "epilogue", "cluster_m")
DECODE_FIELDS = ("bn", "gate_stages", "down_stages", "gate_split", "down_split")


def pair(task: TaskSpec, params: dict[str, Any]):
    """(gate_up, down) MoeSchedules of a parameter dict (ValueError: the kernel's reasons)."""
    from argus.kernels.moe import MoeSchedule, decode_schedule

    p = params
    if p.get("swap_ab"):
        return (decode_schedule(p["bn"], stages=p["gate_stages"], split_k=p["gate_split"]),
                decode_schedule(p["bn"], stages=p["down_stages"], split_k=p["down_split"]))
    consumers = max(1, p["bm"] // 64)
    s = MoeSchedule(bm=p["bm"], bn=p["bn"], bk=64, stages=p["stages"], consumers=consumers,
                    epilogue=p["epilogue"], cluster_m=p["cluster_m"],
                    **({"consumer_regs": 240, "producer_regs": 40} if consumers == 1 else {}))
    return s, s


def _pair_problems(task: TaskSpec, p: dict[str, Any]) -> list[str]:
    try:
        pair(task, p)
    except ValueError as exc:
        return [str(exc)]
    except KeyError as exc:
        return [f"missing schedule field {exc}"]
    return []


def _layer_problems(task: TaskSpec, p: dict[str, Any]) -> list[str]:
    """argus.ops.moe.Layer's refusals of the pair at the task's shapes (K slices, one layout)."""
    from argus.errors import LaunchError
    from argus.ops.moe import Layer

    d = task.dims
    try:
        gate_up, down = pair(task, p)
        Layer(d["T"], d["H"], d["I"], d["E"], d["top_k"], gate_up, down)
    except ValueError:
        return []   # the schedule rule reports it
    except LaunchError as exc:
        return [str(exc).split("\n")[0]]
    return []


def ring_smem(p: dict[str, Any], gated: bool) -> int:
    """Shared memory of one grouped GEMM: the ring (A rows and B rows of bk = 64 bf16 per
    stage) plus the TMA-store staging (the gate-up stores bn/2 columns)."""
    if p.get("swap_ab"):
        stages = p["gate_stages"] if gated else p["down_stages"]
        return stages * (((2 if gated else 1) * 64 + p["bn"]) * 64 * 2 + 16) + SMEM_OVERHEAD
    ring = p["stages"] * ((p["bm"] + p["bn"]) * 64 * 2 + 16) + SMEM_OVERHEAD
    staged = (p["bn"] // 2 if gated else p["bn"]) * p["bm"] * 2
    return ring + (staged if p.get("epilogue") == "tma" else 0)


def _smem_limit() -> int:
    from argus.target.limits import SMEM_PER_CTA_OPTIN

    return SMEM_PER_CTA_OPTIN


def _decode_max() -> int:
    from argus.ops.moe import DECODE_MAX_TOKENS

    return DECODE_MAX_TOKENS


_RULES = (
    Rule("schedule_fields", lambda p, d: not d["pair_problems"],
         "the grouped GEMM refuses this schedule: {pair_problems}",
         "see MoeSchedule: bm = 64 x consumers, a TMA-store epilogue needs bn % 128 == 0, "
         "cluster_m=2 needs bn % 32 == 0, swap_ab takes bm 64 and one consumer",
         "argus/kernels/moe.py MoeSchedule._problems"),
    Rule("k_slices", lambda p, d: not d["layer_problems"], "{layer_problems}",
         "use a split that cuts K into equal slices of a multiple of 8 elements, or 1",
         "argus/ops/moe.py Layer (K-slice views read by TMA)"),
    Rule("smem", lambda p, d: max(ring_smem(p, True), ring_smem(p, False)) <= d["smem_limit"],
         "the ring ({smem_need} B with the TMA-store staging) exceeds the {smem_limit} B of "
         "shared memory a CTA may use", "use fewer stages or a narrower tile",
         "sm_90 smem per CTA (opt-in)"),
    Rule("decode_threshold", lambda p, d: bool(p.get("swap_ab")) == (d["T"] <= d["decode_max"]),
         "swap_ab={swap_ab} at T={T} tokens: argus.ops.moe takes the swap-AB decode schedules "
         "up to {decode_max} tokens and prefill tiles above",
         "use swap_ab=True for T <= {decode_max}, False above",
         "argus/ops/moe.py DECODE_MAX_TOKENS", severity="warning"),
)


class MoeFamily(Family):
    name = "moe"
    rules = _RULES

    def decode(self, task: TaskSpec) -> bool:
        return task.dims["T"] <= _decode_max()

    # -- the schedule space -------------------------------------------------------------------
    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        if self.decode(task):
            return {"swap_ab": (True,), "bn": (8, 16, 24, 32, 48, 64),
                    "gate_stages": (4, 6, 8, 10, 12, 16), "down_stages": (4, 8, 12, 15, 16),
                    "gate_split": (1, 2, 3, 4), "down_split": (1, 2, 3, 4)}
        return {"swap_ab": (False,), "bm": (64, 128), "bn": (64, 128, 256),
                "stages": (2, 3, 4, 5, 6, 8), "epilogue": ("direct", "tma"),
                "cluster_m": (1, 2)}

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

    def static_check(self, task: TaskSpec, params: dict[str, Any]):
        dims: dict[str, Any] = dict(task.dims)
        dims.update(pair_problems="; ".join(_pair_problems(task, params)),
                    layer_problems="; ".join(_layer_problems(task, params)),
                    smem_limit=_smem_limit(), decode_max=_decode_max())
        try:
            dims["smem_need"] = max(ring_smem(params, True), ring_smem(params, False))
        except (KeyError, TypeError):
            dims["smem_need"] = "?"
        return [d for d in (r.diagnose(params, dims, kernel=task.name) for r in self.rules)
                if d is not None]

    # -- cost ------------------------------------------------------------------------------------
    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        if _pair_problems(task, params):
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
        import importlib

        moe_ops = importlib.import_module("argus.ops.moe")
        d = task.dims
        gate_up, down = pair(task, params)
        layer = moe_ops.Layer(d["T"], d["H"], d["I"], d["E"], d["top_k"], gate_up, down)
        return moe_ops.experts(x, w13, w2, topk_ids, topk_weights, layer,
                               interpret=not x.is_cuda)


def moe_task(T: int, H: int, I: int, E: int, top_k: int, name: str = "moe") -> TaskSpec:
    """A TaskSpec of one MoE layer's shapes (bf16, the library's op)."""
    return TaskSpec(family="moe", name=name, origin="argus", path="argus.ops.moe",
                    shape=(("E", E), ("H", H), ("I", I), ("T", T), ("top_k", top_k)),
                    dtype="bf16", compute="bf16",
                    metrics=(("flops", 2.0 * T * top_k * 3 * H * I),))


__all__ = ["MoeFamily", "moe_task", "pair", "ring_smem"]
