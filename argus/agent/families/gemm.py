"""The GEMM family: the library kernels of argus/kernels/gemm.py (`gemm_kernel(in, out, B layout)`)
with `GemmSchedule` as the action space, its static legality rules, its cost model, and its
KernelBench adapter.

The rules mirror what tracing and lowering reject (wgmma rows per warpgroup, the 128-byte
swizzle row, shared-memory and register budgets, TMA box limits), so the planner prunes
illegal schedules without lowering them; the lowering stays the ground truth.

KernelBench GEMM tasks are fp32; the kernel multiplies bf16 operands with fp32 accumulation and
writes fp32 (the "kn" kernel reads B = [K, N] as given). The adapter's `precision` parameter
decides the operands: "bf16x3" (default) splits A and B into bf16 hi and lo parts with an Argus
kernel and multiplies [A_hi | A_hi | A_lo] @ [B_hi; B_lo; B_hi] (K' = 3K): the dropped lo*lo
term is ~2^-16 relative, so the result passes the strict fp32 track at 3x the tensor FLOPs.
"bf16" rounds the operands once: fast, but only on the relaxed track, and even that fails on
heavy-tailed or large inputs at K = 4096. The cost model charges the split or the casts.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import LAUNCH_HELPER, Family, Rule
from argus.agent.task import TaskSpec

SMEM_LIMIT = 232448
SMEM_OVERHEAD = 1024          # barriers and alignment (plus 16 B per stage, below)
REGS_PER_SM = 65536

_RULES = (
    Rule("wgmma_rows", lambda p, d: p["bm"] == 64 * p["consumers"],
         "bm={bm} with {consumers} consumer warpgroup(s): each warpgroup's wgmma covers exactly "
         "64 rows", "set consumers = bm // 64", "PTX wgmma: M = 64 per warpgroup"),
    Rule("swizzle_row", lambda p, d: p["bk"] * 2 == 128,
         "bk={bk}: a 128B-swizzled bf16 tile needs rows of 64 elements",
         "use bk = 64", "TMA/wgmma 128-byte swizzle atom (HOPPER.md invariant 10)"),
    Rule("wgmma_n", lambda p, d: p["bn"] % 64 == 0 and 64 <= p["bn"] <= 256,
         "bn={bn}: the kernel tiles N in 64-column blocks up to wgmma's N <= 256",
         "use bn in 64, 128, 192, 256", "PTX wgmma shapes m64nNk16; kernels/gemm.py blocks"),
    Rule("tma_box", lambda p, d: p["bm"] <= 256 and p["bn"] <= 256,
         "tile {bm}x{bn}: a TMA box dimension is at most 256", "use bm, bn <= 256",
         "cuTensorMapEncodeTiled boxDim <= 256"),
    Rule("stages", lambda p, d: p["stages"] >= 1, "stages={stages} must be >= 1",
         "use 2-8 stages", "pipeline ring"),
    Rule("smem", lambda p, d: smem_bytes(p) <= SMEM_LIMIT,
         "{stages} stages of ({bm}+{bn})x{bk} bf16 (plus the epilogue staging) need more than "
         "the 232448 B of shared memory a CTA may use", "use fewer stages or smaller tiles",
         "sm_90 smem per CTA (opt-in)"),
    Rule("regs_budget", lambda p, d: 128 * (p["producer_regs"] + p["consumers"]
                                            * p["consumer_regs"]) <= REGS_PER_SM,
         "128 x ({producer_regs} + {consumers} x {consumer_regs}) registers exceed the 65536 of "
         "an SM", "lower consumer_regs (or producer_regs)", "setmaxnreg budget (PTX ISA)"),
    Rule("regs_granularity", lambda p, d: all(r % 8 == 0 and 24 <= r <= 256 for r in
                                              (p["producer_regs"], p["consumer_regs"])),
         "setmaxnreg values {producer_regs}/{consumer_regs} must be multiples of 8 in [24, 256]",
         "round the register counts to multiples of 8", "PTX setmaxnreg"),
    Rule("tma_epilogue", lambda p, d: p.get("epilogue", "direct") == "direct"
         or d.get("out_bits", 16) == 16,
         "epilogue={epilogue}: the stmatrix + TMA-store epilogue needs a 16-bit output",
         "use epilogue='direct' for an fp32 output", "PTX stmatrix (b16 only)"),
    Rule("cluster", lambda p, d: p.get("cluster_m", 1) in (1, 2)
         and p["num_sms"] % p.get("cluster_m", 1) == 0,
         "cluster_m={cluster_m}: the kernel pairs at most 2 CTAs, and the persistent grid "
         "({num_sms}) must be a whole number of clusters", "use cluster_m 1 or 2",
         "HOPPER.md 2.1 (clusters > 2 lost performance; DeepGEMM supports 2)"),
    Rule("cluster_split", lambda p, d: p.get("cluster_m", 1) == 1 or (
            (p["bn"] // p["cluster_m"]) % 8 == 0
            and (d.get("b_layout", "nk") == "nk" or (p["bn"] // 64) % p["cluster_m"] == 0)),
         "bn={bn}, cluster_m={cluster_m}: each CTA multicasts an equal share of B made of whole "
         "TMA boxes (64-column atoms when B is [K, N])", "use bn 128 or 256 with cluster_m=2",
         "kernels/gemm.py cluster split"),
    Rule("k_alignment", lambda p, d: d["K"] % 8 == 0,
         "K={K}: TMA needs row strides that are multiples of 16 bytes (K % 8 == 0 for bf16)",
         "pad K to a multiple of 8", "cuTensorMapEncodeTiled globalStrides % 16 == 0"),
    Rule("predicted_spill", lambda p, d: not cost_model.predicted_spill(p["bn"],
                                                                        p["consumer_regs"]),
         "bn={bn} needs ~{bn}/2 + 40 registers per consumer thread; consumer_regs="
         "{consumer_regs} will likely spill", "raise consumer_regs or narrow bn",
         "accumulator fragment of m64nNk16: N/2 fp32 per thread", severity="warning"),
)


def smem_bytes(p: dict[str, Any]) -> int:
    """Shared memory of the library kernel: the ring, barriers, and the TMA-store staging."""
    ring = p["stages"] * ((p["bm"] + p["bn"]) * p["bk"] * 2 + 16) + SMEM_OVERHEAD
    return ring + (p["bm"] * p["bn"] * 2 if p.get("epilogue", "direct") == "tma" else 0)


SPLIT_SOURCE = '''

@ag.kernel(threads=256)
def split_bf16x3(X: ag.Tensor["R", "C", ag.f32], HI: ag.Tensor["R", "C", ag.bf16],
                 HI2: ag.Tensor["R", "C", ag.bf16], LO: ag.Tensor["R", "C", ag.bf16],
                 ROWS: int = 4, BN: int = 1024):
    """x = hi + lo (+ ~2^-16 x): hi = bf16(x) to HI and HI2, lo = bf16(x - hi) to LO."""
    pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
    r0, c0 = pid_m * ROWS, pid_n * BN
    x = ag.load(X, (r0, c0), (ROWS, BN))
    hi = x.to(ag.bf16)
    ag.store(HI, (r0, c0), hi)
    ag.store(HI2, (r0, c0), hi)
    ag.store(LO, (r0, c0), (x - hi.to(ag.f32)).to(ag.bf16))


def _run(kernel, tensors, constexprs):
    if tensors[0].is_cuda:
        kernel.compile(**constexprs)(*tensors)
    else:
        kernel.interpret(*tensors, **constexprs)


def split_a(A):
    """[M, K] fp32 -> [M, 3K] bf16 = [hi | hi | lo]."""
    M, K = A.shape
    out = torch.empty(M, 3, K, dtype=torch.bfloat16, device=A.device)
    _run(split_bf16x3, (A, out[:, 0], out[:, 1], out[:, 2]), {})
    return out.view(M, 3 * K)


def split_b(B):
    """[K, N] fp32 -> [3K, N] bf16 = [hi; lo; hi]."""
    K, N = B.shape
    out = torch.empty(3, K, N, dtype=torch.bfloat16, device=B.device)
    _run(split_bf16x3, (B, out[0], out[2], out[1]), {})
    return out.view(3 * K, N)
'''

ADAPTER = '''

class ModelNew(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, A, B):
        A, B = A.float().contiguous(), B.float().contiguous()
        if PRECISION == "bf16x3":
            a, b = split_a(A), split_b(B)               # K' = 3K
        else:
            a, b = A.to(torch.bfloat16), B.to(torch.bfloat16)
        c = torch.empty(a.shape[0], b.shape[1], dtype=torch.float32, device=A.device)
        _launch(a, b, c)                                # [M, K'] @ [K', N]: the "kn" kernel
        return c
'''


class GemmFamily(Family):
    name = "gemm"
    rules = _RULES

    def kernel_args(self, task: TaskSpec) -> tuple[str, str, str, bool]:
        """(in dtype, out dtype, B layout, batched) for `gemm_kernel`."""
        o = task.opts
        return (o.get("in", "bf16"), o.get("out", "bf16"), o.get("b_layout", "nk"),
                bool(o.get("batched", False)))

    def space(self, task: TaskSpec) -> dict[str, tuple[Any, ...]]:
        out16 = self.kernel_args(task)[1] in ("bf16", "f16")
        extra = {"precision": ("bf16x3", "bf16")} if self._split(task) else {}
        return {**extra, "bm": (64, 128, 192, 256), "bn": (64, 128, 192, 256), "bk": (64,),
                "stages": (1, 2, 3, 4, 5, 6, 7, 8), "consumers": (1, 2, 3, 4),
                "producer_regs": (24, 32, 40),
                "consumer_regs": tuple(range(104, 241, 8)),
                "persistent": (False, True), "num_sms": (132,), "group_m": (1, 2, 4, 8, 16),
                "epilogue": ("direct", "tma") if out16 else ("direct",), "cluster_m": (1, 2),
                "zero_by_wgmma": (False, True)}

    @staticmethod
    def _split(task: TaskSpec) -> bool:
        """A KernelBench fp32 task: the adapter chooses the operand precision."""
        return task.origin == "kernelbench" and task.dtype == "f32"

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        from argus.kernels.gemm import GemmSchedule

        p = dataclasses.asdict(GemmSchedule())
        if self._split(task):
            p["precision"] = "bf16x3" if task.compute == "bf16x3" else "bf16"
        return p

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        """A correct but slow start: 64x64 tiles, one consumer, a 2-deep ring, one CTA per tile."""
        p = self.default_params(task)
        p.update(bm=64, bn=64, stages=2, consumers=1, persistent=False, group_m=1,
                 epilogue="direct", cluster_m=1)
        return p

    def normalize(self, task: TaskSpec, params: dict[str, Any]) -> dict[str, Any]:
        """consumers follows bm (one 64-row warpgroup per 64 rows); consumer registers shrink to
        the register budget when more consumers share it."""
        p = dict(params)
        if p["bm"] % 64 == 0:
            p["consumers"] = max(1, min(4, p["bm"] // 64))
        budget = (REGS_PER_SM // 128 - p["producer_regs"]) // max(1, p["consumers"])
        budget = min(240, budget - budget % 8)
        if p["consumer_regs"] > budget:
            p["consumer_regs"] = budget
        return p

    def static_check(self, task: TaskSpec, params: dict[str, Any]):
        dims = dict(task.dims)
        dims["out_bits"] = 32 if self.kernel_args(task)[1] == "f32" else 16
        dims["b_layout"] = self.kernel_args(task)[2]
        return [d for d in (r.diagnose(params, dims, kernel=task.name) for r in self.rules)
                if d is not None]

    def glue(self, task: TaskSpec, params: dict[str, Any]) -> tuple[int, int]:
        """Bytes and launches of the KernelBench adapter: the split (read 4 B, write 3 x 2 B per
        operand element) or the casts (read 4 B, write 2 B)."""
        if task.origin != "kernelbench":
            return 0, 0
        d = task.dims
        per = 10 if params.get("precision") == "bf16x3" else 6
        return (d["M"] * d["K"] + d["K"] * d["N"]) * per, 2

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate:
        d = task.dims
        spills = None
        if resources and resources.get("spill_stores") is not None:
            spills = bool(resources.get("spill_stores") or resources.get("spill_loads"))
        glue_bytes, glue_launches = self.glue(task, params)
        p = dict(params, out_bytes=4 if self.kernel_args(task)[1] == "f32" else 2)
        k = d["K"] * (3 if params.get("precision") == "bf16x3" else 1)
        return cost_model.gemm_estimate(d["M"], d["N"], k, p, glue_bytes=glue_bytes,
                                        glue_launches=glue_launches, spills=spills)

    def baseline_estimates(self, task: TaskSpec) -> dict[str, Estimate]:
        d = task.dims
        lib = cost_model.library_gemm_ms(d["M"], d["N"], d["K"], task.dtype)
        if task.origin == "kernelbench":
            # torch.compile lowers a lone matmul to the same cuBLAS call.
            return {"eager": lib, "torch.compile": lib}
        return {"baseline": lib}

    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        from argus.kernels import gemm as library

        names = [f.name for f in dataclasses.fields(library.GemmSchedule)]
        fields = ", ".join(f"{k}={params[k]!r}" for k in names if k in params)
        in_dt, out_dt, layout, batched = self.kernel_args(task)
        return (inspect.getsource(library).rstrip() + "\n\n\n"
                "# ---- the kernel and schedule chosen by `argus optimize` "
                "-------------------------------\n"
                f"KERNEL = gemm_kernel(ag.{in_dt}, ag.{out_dt}, {layout!r}, {batched!r})\n"
                f"SCHEDULE = GemmSchedule({fields})\n"
                'CONSTEXPRS = {"s": SCHEDULE}\n')

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        if task.origin != "kernelbench":
            return None
        precision = (params or {}).get("precision", "bf16x3")
        return (kernel_source.rstrip() + "\n\n\n"
                "# ---- KernelBench adapter: ModelNew(A, B) = A @ B with the Argus GEMM "
                "-------------------\n"
                "# precision \"bf16x3\": A and B split into bf16 hi + lo parts by an Argus "
                "kernel, one GEMM\n# with K' = 3K and fp32 accumulation (about fp32 accurate); "
                "\"bf16\": operands rounded\n# once (relaxed track only).\n"
                "import torch  # noqa: E402\n\n"
                f"PRECISION = {precision!r}\n"
                + LAUNCH_HELPER + SPLIT_SOURCE + ADAPTER)
