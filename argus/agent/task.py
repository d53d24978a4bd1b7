"""What the agent optimizes: a `TaskSpec` (family, shapes, dtypes, where it came from) and its
signature, the key of the experience store and of the `argus.ops` tuning cache.

A TaskSpec is plain data (JSON round trip), so the loop can hand it to a worker process and a
resumed run can check that it is still optimizing the same task (same file hash).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ORIGINS = ("kernelbench", "argus")
# Arithmetic that is accurate enough for a task dtype's strict track. "bf16xT": fp32 operands
# split into bf16 pieces, T products per term on the tensor cores (argus/agent/split_numerics.py):
# 6 terms are fp32-accurate; 3 terms (~4.5e-6 from the split alone, 2-3e-5 measured on an H200
# in one accumulator) are not.
ACCURATE_FOR = {"f32": ("f32", "bf16x6"), "bf16": ("bf16", "f32", "bf16x6", "bf16x3"),
                "f16": ("f16", "f32", "bf16x6", "bf16x3")}
SPLIT_NOTES = {
    "bf16x6": ("six bf16 products per term (three bf16 pieces per operand; all products of "
               "pieces i + j <= 2, smallest first, fp32 accumulation, one accumulator per K "
               "chunk summed in fp32): fp32 accuracy (strict track) at 6x the tensor-core FLOPs "
               "of a bf16 GEMM, twice the 3-term split"),
    "bf16x3": ("three bf16 products per term (hi*lo + lo*hi + hi*hi, fp32 accumulation): "
               "~4.5e-6 from the split alone and 2-3e-5 on the tensor cores, so relaxed track "
               "only, at 3x the tensor-core FLOPs"),
}


def make_signature(family: str, shape: dict[str, int], dtype: str, extra: str = "") -> str:
    """The store key of a task: `family/dtype/M4096-N4096-K4096[/extra]` (shape keys sorted).

    A GEMM task's key is `argus.ops`' problem key instead (`gemm_signature`), under which the
    store publishes its measured winners to ops (`argus.ops.schedules.record_agent_choice`).
    """
    dims = "-".join(f"{k}{int(v)}" for k, v in sorted(shape.items()))
    sig = f"{family}/{dtype}/{dims}"
    return f"{sig}/{extra}" if extra else sig


def bucket_signature(signature: str) -> str:
    """The signature with every number rounded up to a power of two (similar-task lookups)."""
    return re.sub(r"\d+", lambda m: str(1 << max(0, (int(m.group()) - 1).bit_length())),
                  signature)


@dataclass(frozen=True)
class TaskSpec:
    """One optimization task.

    family: which schedule space and cost model apply (gemm, elementwise, kernel).
    origin: "kernelbench" (a Model/get_inputs file; the solution is a ModelNew) or "argus" (an
        example-protocol file with KERNEL, make_inputs, reference).
    shape: the problem sizes the family understands (gemm: M, N, K; elementwise: rows, cols).
    dtype: the task's data type; compute: the arithmetic the Argus kernel uses. They differ for
        an fp32 KernelBench GEMM run on the bf16 tensor-core kernel: "bf16x6" (strict track),
        "bf16x3" or "bf16" (relaxed track only).
    expr: elementwise: the DSL expression of `y` in terms of `x`; ops: how many torch ops it fuses.
    kernel: kernel family: the name of the kernel in the file; constexprs: its tunable ints.
    metrics: per-call totals at the timed size (bytes moved, flops) for the cost model.
    options: what else fixes the kernel (gemm: in/out dtype, B layout).
    """

    family: str
    name: str
    origin: str
    path: str
    shape: tuple[tuple[str, int], ...]
    dtype: str
    compute: str
    expr: str = ""
    ops: int = 0
    kernel: str = ""
    constexprs: tuple[tuple[str, Any], ...] = ()
    metrics: tuple[tuple[str, float], ...] = ()
    options: tuple[tuple[str, Any], ...] = ()
    sha256: str = ""
    note: str = ""

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    @property
    def opts(self) -> dict[str, Any]:
        return dict(self.options)

    @property
    def precision_note(self) -> str:
        if self.compute in SPLIT_NOTES:
            return f"a {self.dtype} task computed as {SPLIT_NOTES[self.compute]}"
        if self.track == "strict":
            return f"{self.compute} arithmetic on a {self.dtype} task"
        return (f"{self.compute} arithmetic on a {self.dtype} task: judged on the relaxed track "
                "(KernelBench's old 1e-2 rule); it cannot pass the strict track")

    @property
    def track(self) -> str:
        """The correctness track the loop uses by default: strict when the kernel computes at
        least as accurately as the task's dtype, relaxed otherwise (and reports say so)."""
        return "strict" if self.compute in ACCURATE_FOR.get(self.dtype, (self.dtype,)) \
            else "relaxed"

    def signature(self) -> str:
        if self.family == "gemm":
            return gemm_signature(self)
        extra = ""
        if self.family == "elementwise":
            extra = "op" + hashlib.sha256(self.expr.encode()).hexdigest()[:10]
        elif self.family == "kernel":
            extra = f"{Path(self.path).stem}.{self.kernel}"
        elif self.family == "conv" and self.opts.get("bias"):
            extra = "bias"      # another kernel (the bias in the epilogue), same shapes
        return make_signature(self.family, self.dims, self.dtype, extra)

    def features(self) -> dict[str, Any]:
        """What knowledge-card conditions see."""
        f: dict[str, Any] = {"family": self.family, "origin": self.origin, "dtype": self.dtype,
                             "compute": self.compute, "ops": self.ops, "sms": 132,
                             "has_epilogue": 0, "allow_fp8": 0}
        f.update(self.dims)
        f["relaxed"] = int(self.track == "relaxed")
        if self.family == "gemm":
            f["out_bits"] = 32 if self.opts.get("out", self.compute) == "f32" else 16
        if self.family == "elementwise":
            f["numel"] = self.dims["rows"] * self.dims["cols"]
        if self.family == "kernel":
            f["int_constexprs"] = sum(1 for _, v in self.constexprs if is_pow2_int(v))
        if self.family == "moe_fp8":
            # argus/ops/moe.py's fp8 prefill thresholds (rows an expert), for the cards' `when`
            from argus.ops import moe_module

            f["fp8_big_tile_rows"] = moe_module.FP8_BIG_TILE_ROWS
            f["fp8_unit_grid_max_rows"] = moe_module.FP8_UNIT_GRID_MAX_ROWS
            # the card class the rule is read at (moe_fp8_task's option) and whether its
            # rule runs one CTA a unit up to fp8_unit_grid_max_rows (the H100 class only)
            # (argus.ops.moe.card_or_default, which families/moe_fp8.py task_card calls too)
            f["card"] = card = moe_module.card_or_default(self.opts.get("card"))
            f["fp8_unit_grid"] = int(moe_module.fp8_unit_grid_pays(card))
        return f

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["shape"] = [list(s) for s in self.shape]
        data["constexprs"] = [list(c) for c in self.constexprs]
        data["metrics"] = [list(m) for m in self.metrics]
        data["options"] = [list(o) for o in self.options]
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> "TaskSpec":
        data = dict(data)
        data["shape"] = tuple((str(k), int(v)) for k, v in data.get("shape", ()))
        data["constexprs"] = tuple((str(k), v) for k, v in data.get("constexprs", ()))
        data["metrics"] = tuple((str(k), float(v)) for k, v in data.get("metrics", ()))
        data["options"] = tuple((str(k), v) for k, v in data.get("options", ()))
        names = {f.name for f in dataclasses.fields(TaskSpec)}
        return TaskSpec(**{k: v for k, v in data.items() if k in names})

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


def gemm_signature(task: "TaskSpec") -> str:
    """A GEMM task's key is `argus.ops`' problem key, so that `argus.ops.matmul` finds the
    agent's best schedule for the same problem (argus/ops/schedules.py, Problem.key)."""
    d, o = task.dims, task.opts
    out = o.get("out", task.compute)
    tma_ok = (d["N"] * (4 if out == "f32" else 2)) % 16 == 0   # ops: C's rows 16-B aligned
    # A KernelBench fp32 task is an fp32 problem (its kernel runs on split bf16 operands):
    # keyed by the task's dtype, so argus.ops (bf16/fp16 inputs) never picks its schedule.
    in_dt = task.dtype if task.origin == "kernelbench" else o.get("in", task.compute)
    return (f"{o.get('batch', 1)}x{d['M']}x{d['N']}x{d['K']}:{in_dt}->"
            f"{out}:{o.get('b_layout', 'nk')}:{'tma' if tma_ok else 'direct'}")


def is_pow2_int(v: Any) -> bool:
    """A positive power-of-two int (not a bool): what the kernel family tunes."""
    return isinstance(v, int) and not isinstance(v, bool) and v > 0 and v & (v - 1) == 0


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
