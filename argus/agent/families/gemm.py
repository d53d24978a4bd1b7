"""The GEMM family: the library kernels of argus/kernels/gemm.py (`gemm_kernel(in, out, B layout)`)
with `GemmSchedule` (and, for a KernelBench fp32 task, the adapter's `SplitSchedule`) as the
action space, its cost model, and its KernelBench adapter.

The space and the legality are the Schedule classes' declarations (families/declared.py: wgmma
rows per warpgroup, the 128-byte swizzle row, TMA box limits, setmaxnreg, the split's accuracy)
read by the generic family (families/schedule.py), which then lowers the schedule: shared memory
and the register budget come from the lowering, not from a copy of its arithmetic here.

KernelBench GEMM tasks are fp32; the kernel multiplies bf16 operands with fp32 accumulation and
writes fp32 (the "kn" kernel reads B = [K, N] as given). The adapter splits A and B into bf16
pieces with one Argus kernel per operand, written straight into the concatenated layout, and
runs one GEMM over K' = split_terms x K (`split_numerics` says which products, in which order,
and why): 6 terms (the strict-track default) are fp32-accurate, 3 terms (hi/lo) lose ~4.5e-6
and 1 term (one bf16 rounding) ~2e-3, relaxed track only. Hopper's tensor core truncates the
addends of its accumulator, so on the strict track the K range is also cut into `k_chunks`
chunks, each its own accumulator (one batch of the batched kernel), summed in fp32 by an Argus
kernel; the `split_accuracy` rule prunes splits whose predicted error on the tensor cores
exceeds half the strict bound. The cost model charges the terms (6 terms: twice the tensor work
of 3), the split's traffic and the chunks' partial sums.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any

from argus.agent import cost_model, split_numerics
from argus.agent.cost_model import Estimate
from argus.agent.families.base import LAUNCH_HELPER
from argus.agent.families.declared import SplitSchedule
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec
from argus.target.limits import REGISTERS_PER_SM

SPLIT_SOURCE = '''

@ag.kernel(threads=256)
def split_bf16(X: ag.Tensor["R", "C", ag.f32], Y: ag.Tensor["S", "YR", "YC", ag.bf16],
               SLOTS: tuple = (0,), KC: int = 64, K_AXIS: int = 1, ROWS: int = 4,
               BN: int = 1024):
    """Write the bf16 pieces of X in the GEMM's concatenated layout, one kernel per operand.

    x = x0 + x1 + x2: x0 = bf16(x), x1 = bf16(x - x0), x2 = bf16(x - x0 - x1), rounded to
    nearest even (the remainders are exact in fp32). K (axis K_AXIS of X) is cut into chunks
    of KC; chunk s goes to batch s of Y, and slot t of it (KC columns of Y for A, K_AXIS=1;
    KC rows for B, K_AXIS=0) holds piece SLOTS[t]. A tile never straddles a chunk: the
    adapter picks BN (A) or ROWS (B) dividing KC.
    """
    pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
    r0, c0 = pid_m * ROWS, pid_n * BN
    x = ag.load(X, (r0, c0), (ROWS, BN))
    pieces = [x.to(ag.bf16)]
    rest = x
    for _ in range(max(SLOTS)):
        rest = rest - pieces[-1].to(ag.f32)
        pieces.append(rest.to(ag.bf16))
    if K_AXIS == 1:
        s, k0 = c0 // KC, c0 % KC
        for t, i in enumerate(SLOTS):
            ag.store(Y, (s, r0, t * KC + k0), pieces[i])
    else:
        s, k0 = r0 // KC, r0 % KC
        for t, i in enumerate(SLOTS):
            ag.store(Y, (s, t * KC + k0, c0), pieces[i])


@ag.kernel(threads=256)
def split_bf16_rows(X: ag.Tensor["R", "K", ag.f32], Y: ag.Tensor["SRT", "KC", ag.bf16],
                    SLOTS: tuple = (0,), KC: int = 64, BN: int = 1024):
    """The A operand's pieces for any chunk length KC: CTA (r, s, j) reads columns
    s*KC + j*BN .. of A's row r and writes piece SLOTS[t] to row (s*R + r)*T + t of Y, which is
    Y = [chunks, R, T*KC] seen as [chunks*R*T, KC]: stores are masked at KC, so a tile never
    spills into the next slot (what it reads past the chunk is simply not stored)."""
    r, s, j = ag.grid(X.shape[0], ag.cdiv(X.shape[1], KC), ag.cdiv(KC, BN))
    # what the launcher allocates (split_rows below): Y holds exactly the chunks' pieces, so
    # every row of Y is some (chunk, row, slot) and every column is inside one chunk
    ag.tag_assume(lambda: ag.tag_all(
        ag.sym(Y.shape[0]) == ((ag.sym(X.shape[1]) + KC - 1) // KC) * ag.sym(X.shape[0])
        * len(SLOTS), ag.sym(Y.shape[1]) == KC))
    x = ag.load(X, (r, s * KC + j * BN), (1, BN))
    pieces = [x.to(ag.bf16)]
    rest = x
    for _ in range(max(SLOTS)):
        rest = rest - pieces[-1].to(ag.f32)
        pieces.append(rest.to(ag.bf16))
    for t, i in enumerate(SLOTS):
        ag.store(Y, ((s * X.shape[0] + r) * len(SLOTS) + t, j * BN), pieces[i])


@ag.kernel(threads=256)
def sum_chunks(P: ag.Tensor["S", "M", "N", ag.f32], C: ag.Tensor["M", "N", ag.f32],
               CHUNKS: int = 1, ROWS: int = 4, BN: int = 1024):
    """C = P[0] + P[1] + ... in fp32 (round to nearest), in chunk order."""
    pid_m, pid_n = ag.grid(ag.cdiv(C.shape[0], ROWS), ag.cdiv(C.shape[1], BN))
    r0, c0 = pid_m * ROWS, pid_n * BN
    acc = ag.load(P, (0, r0, c0), (ROWS, BN))
    for s in range(1, CHUNKS):
        acc = acc + ag.load(P, (s, r0, c0), (ROWS, BN))
    ag.store(C, (r0, c0), acc)


def _run(kernel, tensors, constexprs):
    if tensors[0].is_cuda:
        kernel.compile(**constexprs)(*tensors)
    else:
        kernel.interpret(*tensors, **constexprs)


def _block(n, cap):
    """The largest power of two <= cap that divides n."""
    b = 1
    while b < cap and n % (2 * b) == 0:
        b *= 2
    return b


def _chunks(k):
    """K_CHUNKS, or fewer when K does not split into 16-byte aligned chunks."""
    c = K_CHUNKS
    while c > 1 and (k % c or (k // c) % 8):
        c //= 2
    return c


def split_operand(X, slots, chunks, k_axis):
    """A [M, K] -> [chunks, M, T*KC] (k_axis=1) or B [K, N] -> [chunks, T*KC, N] (k_axis=0)."""
    R, C = X.shape
    kc, t = X.shape[k_axis] // chunks, len(slots)
    if k_axis == 1:
        # Y seen as [chunks*R*T, KC]: stores are masked at the chunk edge, so any chunk
        # length works (the A split's [1, BN] tiles need BN to be a multiple of 256 threads)
        Y = torch.empty(chunks, R, t * kc, dtype=torch.bfloat16, device=X.device)
        bn = min(1024, -(-kc // 256) * 256)
        _run(split_bf16_rows, (X, Y.view(chunks * R * t, kc)), dict(SLOTS=slots, KC=kc, BN=bn))
        return Y
    Y = torch.empty(chunks, t * kc, C, dtype=torch.bfloat16, device=X.device)
    _run(split_bf16, (X, Y), dict(SLOTS=slots, KC=kc, K_AXIS=k_axis, ROWS=_block(kc, 8), BN=512))
    return Y
'''

ADAPTER = '''

class ModelNew(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, A, B):
        A, B = A.float().contiguous(), B.float().contiguous()
        M, N = A.shape[0], B.shape[1]
        chunks = _chunks(A.shape[1])
        a = split_operand(A, A_SLOTS, chunks, 1)        # [chunks, M, T*KC] bf16
        b = split_operand(B, B_SLOTS, chunks, 0)        # [chunks, T*KC, N] bf16
        c = torch.empty(M, N, dtype=torch.float32, device=A.device)
        if chunks == 1:                                 # [M, K'] @ [K', N]: the "kn" kernel
            _launch(*((a, b, c.view(1, M, N)) if BATCHED else (a[0], b[0], c)))
            return c
        parts = torch.empty(chunks, M, N, dtype=torch.float32, device=A.device)
        if BATCHED:                                     # one accumulator per chunk ...
            _launch(a, b, parts)
        else:
            for s in range(chunks):
                _launch(a[s], b[s], parts[s])
        _run(sum_chunks, (parts, c), dict(CHUNKS=chunks))   # ... summed in fp32
        return c
'''


def _split_task(task: TaskSpec) -> bool:
    """A KernelBench fp32 task: the adapter splits the operands into bf16 pieces."""
    return task.origin == "kernelbench" and task.dtype == "f32"


def _gemm_schedule() -> type:
    from argus.kernels.gemm import GemmSchedule

    return GemmSchedule


class GemmFamily(ScheduleFamily):
    name = "gemm"
    parts = (Part(_gemm_schedule), Part(lambda: SplitSchedule, when=_split_task))

    def kernel_args(self, task: TaskSpec, params: dict[str, Any] | None = None
                    ) -> tuple[str, str, str, bool]:
        """(in dtype, out dtype, B layout, batched) for `gemm_kernel`; a KernelBench split with
        K chunks runs the batched kernel (one batch per chunk)."""
        o = task.opts
        batched = bool(o.get("batched", False))
        if params is not None and self._split(task):
            batched = batched or int(params.get("k_chunks", 1)) > 1
        return (o.get("in", "bf16"), o.get("out", "bf16"), o.get("b_layout", "nk"), batched)

    def facts(self, task: TaskSpec) -> dict[str, Any]:
        """What the declared constraints read: the shape, the output's width, B's layout, the
        operand width, and for a split task its track."""
        _, out, layout, _ = self.kernel_args(task)
        return {**task.dims, "out_bits": 32 if out == "f32" else 16, "b_layout": layout,
                "in_bytes": 2, "strict": self._split(task) and task.track == "strict"}

    def build(self, task: TaskSpec, params: dict[str, Any]):
        import argus as ag
        from argus.kernels.gemm import gemm_kernel

        in_dt, out_dt, layout, batched = self.kernel_args(task, params)
        gemm = self.schedules(task, params)[0]
        return gemm_kernel(getattr(ag, in_dt), getattr(ag, out_dt), layout, batched), {"s": gemm}

    @staticmethod
    def _split(task: TaskSpec) -> bool:
        return _split_task(task)

    @staticmethod
    def split_defaults(task: TaskSpec) -> dict[str, int]:
        """The split the task's arithmetic asks for: 6 terms on the strict track with the fewest
        K chunks predicted to pass it with START_MARGIN (4x) to spare, so the start is
        strict-correct; 3 terms or one bf16 rounding (relaxed track) in one chunk."""
        terms = {"bf16x6": 6, "bf16x3": 3}.get(task.compute, 1)
        chunks = 1
        if terms == 6 and task.track == "strict":
            k = task.dims["K"]
            legal = [c for c in split_numerics.K_CHUNKS if split_numerics.chunk_ok(k, c)]
            chunks = split_numerics.min_strict_chunks(k, terms, split_numerics.START_MARGIN) \
                or max(legal, default=1)
        return {"split_terms": terms, "k_chunks": chunks}

    def start(self, task: TaskSpec) -> dict[str, Any]:
        return self.split_defaults(task) if self._split(task) else {}

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        """A correct but slow start: 64x64 tiles, one consumer, a 2-deep ring, one CTA per tile
        (and, for a KernelBench fp32 task, the split the track needs)."""
        p = self.default_params(task)
        p.update(bm=64, bn=64, stages=2, consumers=1, persistent=False, group_m=1,
                 epilogue="direct", cluster_m=1)
        return p

    def normalize(self, task: TaskSpec, params: dict[str, Any]) -> dict[str, Any]:
        """consumers follows bm (one 64-row warpgroup per 64 rows); consumer registers shrink to
        the register budget when more consumers share it; staging rounds (store_cols) exist
        only with the TMA-store epilogue; a split task always names its split (a stored
        `precision` of earlier runs maps to its number of terms)."""
        p = dict(params)
        if self._split(task):
            legacy = p.pop("precision", None)
            defaults = self.split_defaults(task)
            if legacy is not None and "split_terms" not in p:
                p["split_terms"] = {"bf16x6": 6, "bf16x3": 3, "bf16": 1}.get(legacy, 6)
                p.setdefault("k_chunks", 1)
            for k, v in defaults.items():
                p.setdefault(k, v)
        if p["bm"] % 64 == 0:
            p["consumers"] = max(1, min(4, p["bm"] // 64))
        budget = (REGISTERS_PER_SM // 128 - p["producer_regs"]) // max(1, p["consumers"])
        budget = min(240, budget - budget % 8)
        p["consumer_regs"] = min(p["consumer_regs"], budget)
        if p.get("epilogue", "direct") != "tma":
            p["store_cols"] = 0
        return p

    def glue(self, task: TaskSpec, params: dict[str, Any]) -> tuple[int, int]:
        """Bytes and launches of the KernelBench adapter around the GEMM: the split (read 4 B,
        write 2 B per piece slot, per operand element; one kernel per operand) and, with K
        chunks, the fp32 sum of the chunks' partial products (read 4 B per chunk, write 4 B per
        output element; the GEMM's own writes of the partials are in its epilogue)."""
        if task.origin != "kernelbench":
            return 0, 0
        d = task.dims
        terms, chunks = self._terms_chunks(params)
        split = (d["M"] * d["K"] + d["K"] * d["N"]) * (4 + 2 * terms)
        if chunks == 1:
            return split, 2
        return split + d["M"] * d["N"] * 4 * (chunks + 1), 3

    @staticmethod
    def _terms_chunks(params: dict[str, Any]) -> tuple[int, int]:
        return int(params.get("split_terms", 1)), int(params.get("k_chunks", 1))

    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate:
        """The GEMM over K' = terms * K (in k_chunks batches of K' / k_chunks) plus the glue:
        6 terms cost twice the tensor-core work of 3."""
        d = task.dims
        spills = None
        if resources and resources.get("spill_stores") is not None:
            spills = bool(resources.get("spill_stores") or resources.get("spill_loads"))
        glue_bytes, glue_launches = self.glue(task, params)
        p = dict(params, out_bytes=4 if self.kernel_args(task)[1] == "f32" else 2)
        terms, chunks = self._terms_chunks(params) if self._split(task) else (1, 1)
        k = d["K"] * terms // chunks
        return cost_model.gemm_estimate(d["M"], d["N"], k, p, glue_bytes=glue_bytes,
                                        glue_launches=glue_launches, spills=spills,
                                        batch=chunks)

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
        in_dt, out_dt, layout, batched = self.kernel_args(task, params)
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
        split = dict(self.split_defaults(task))
        split.update({k: (params or {})[k] for k in split if k in (params or {})})
        terms, chunks = split["split_terms"], split["k_chunks"]
        a_slots, b_slots = split_numerics.slots(terms)
        return (kernel_source.rstrip() + "\n\n\n"
                "# ---- KernelBench adapter: ModelNew(A, B) = A @ B with the Argus GEMM "
                "-------------------\n"
                "# A and B are split into bf16 pieces by an Argus kernel (x = x0 + x1 + x2); "
                "one GEMM\n# multiplies the pieces over K' = SPLIT_TERMS x K, smallest products "
                "first, with one\n# fp32 accumulator per K chunk; an Argus kernel sums the "
                "chunks in fp32. 6 terms are\n# fp32-accurate (strict track), 3 terms and 1 (a "
                "single bf16 rounding) are not\n# (relaxed track only); see "
                "argus/agent/split_numerics.py.\n"
                "import torch  # noqa: E402\n\n"
                f"SPLIT_TERMS = {terms!r}\n"
                f"K_CHUNKS = {chunks!r}\n"
                f"A_SLOTS = {a_slots!r}    # piece of A in each K' slot\n"
                f"B_SLOTS = {b_slots!r}    # piece of B in each K' slot\n"
                "BATCHED = len(KERNEL.tensor_specs['A'].shape) == 3\n"
                + LAUNCH_HELPER + SPLIT_SOURCE + ADAPTER)
