"""Compose a KernelBench task into a solution: a `ModelNew` whose forward runs Argus kernels.

`compose_task(path)` captures the task at its own sizes on the meta device (nothing is
allocated or run), partitions it, renders every fused kernel, and returns a `Composition`: the
solution source, the kernels' DSL source, and what is not covered (ops left to torch, by name).
The solution embeds the task's own source (its Model defines the parameters; `ModelNew` owns
them under the same state-dict keys, so the judge's weights load) and subclasses
`argus.compose.runtime.ComposedModel`, which lowers the Model again for whatever input shapes a
forward sees (the judge's reduced CPU sizes too) and caches one program per shapes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from argus.compose.capture import CaptureError
from argus.compose.partition import Plan


@dataclass(frozen=True)
class Composition:
    name: str
    source: str                      # solution.py
    kernels: str                     # DSL source of the fused kernels at the task's sizes
    steps: dict[str, int] = field(default_factory=dict)   # step kind -> count
    unsupported: tuple[str, ...] = ()                     # ops run by torch
    error: str = ""                  # capture failed: why (then source is "")

    @property
    def complete(self) -> bool:
        return not self.error and not self.unsupported

    @property
    def status(self) -> str:
        if self.error:
            return "no capture"
        return "full" if not self.unsupported else "partial"

    def describe(self) -> str:
        if self.error:
            return f"{self.name}: not captured: {self.error}"
        kinds = ", ".join(f"{v} {k}" for k, v in sorted(self.steps.items()))
        line = f"{self.name}: {kinds or 'views only'}"
        if self.unsupported:
            line += f"; partial: torch runs {', '.join(self.unsupported)}"
        return line


HEADER = '''"""Solution composed by `argus.compose` for {name}.

{describe}

Every computation runs in Argus kernels ({kinds}): fused tile kernels (elementwise chains,
reductions, softmax / norms / losses as reduce-and-apply), the fp32 GEMM adapter (bf16 split on
the tensor cores, strict-track accurate) and scans; torch only allocates and makes views.{partial}
The task's Model below defines the parameters; ModelNew owns them under the same state-dict keys
and lowers the forward for the shapes it is called with (argus/compose/runtime.py).
"""

import torch  # noqa: F401
import torch.nn as nn  # noqa: F401

import argus  # noqa: F401 - the kernels are Argus kernels
from argus.compose.gemm import MatmulSchedule  # noqa: F401
from argus.compose.runtime import ComposedModel
from argus.compose.tile import TileSchedule  # noqa: F401
from argus.kernels.gemm import GemmSchedule  # noqa: F401

# ---- the task's own source (Model, get_inputs, get_init_inputs) ------------------------------
'''

FOOTER = '''

# ---- the composed solution ----------------------------------------------------------------
{imports}SCHEDULES = {schedules}


class ModelNew(ComposedModel):
    MODEL = Model
    SCHEDULES = SCHEDULES
'''


def _schedules_text(schedules: dict[str, Any] | None) -> str:
    if not schedules:
        return "{}"
    items = ", ".join(f"{k!r}: {v!r}" for k, v in sorted(schedules.items()))
    return "{" + items + "}"


def _imports(schedules: dict[str, Any] | None) -> str:
    """Imports the SCHEDULES line needs beyond the header's (none for the defaults, so their
    solutions' text, which the judge resumes by, is unchanged)."""
    names = {type(v).__name__ for v in (schedules or {}).values()}
    return "from argus.compose.conv import ConvRun  # noqa: E402\n" if "ConvRun" in names \
        else ""


def load_module(path: Path | str):
    """Execute a task file as a fresh module (Model, get_inputs, get_init_inputs)."""
    import sys
    import types

    path = Path(path).resolve()
    _LOADED[0] += 1
    name = f"_argus_compose_task_{_LOADED[0]}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    sys.modules[name] = module
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)  # noqa: S102
    return module


_LOADED = [0]


def plan_task(path: Path | str, schedules: dict[str, Any] | None = None):
    """(Program at the task's own sizes on the meta device, the loaded task module)."""
    from argus.compose.runtime import Program

    module = load_module(path)
    with torch.device("meta"):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
    return Program.build(model, inputs, schedules), module


def compose_task(path: Path | str, schedules: dict[str, Any] | None = None) -> Composition:
    path = Path(path)
    name = path.stem
    try:
        prog, module = plan_task(path, schedules)
    except CaptureError as exc:
        return Composition(name, "", "", error=str(exc).splitlines()[0])
    except Exception as exc:  # noqa: BLE001 - a lowering bug must not stop a suite
        return Composition(name, "", "", error=f"{type(exc).__name__}: {str(exc)[:300]}")
    choices = ()
    if schedules:
        from argus.compose.precision import conv_schedules

        # tf32 asked for: each fp32 convolution keeps it only where the chain after it
        # passes the relaxed rule on the self-check's draws, else the strict split
        schedules, choices = conv_schedules(prog.plan, module, schedules)
    return _composition(name, path.read_text(), prog.plan, prog.sources, schedules,
                        prog.unsupported, choices)


def _composition(name: str, task_source: str, plan: Plan, kernels: str,
                 schedules: dict[str, Any] | None, unsupported, choices=()) -> Composition:
    steps: dict[str, int] = {}
    for s in plan.steps:
        kind = {"kernel": "fused kernels", "matmul": "GEMMs", "scan": "scans",
                "pool": "poolings", "conv": "convolutions", "torch": "torch ops"}.get(s.kind)
        if kind:
            steps[kind] = steps.get(kind, 0) + 1
    unsupported = tuple(unsupported)
    comp = Composition(name, "", kernels, steps, unsupported)
    kinds = ", ".join(f"{v} {k}" for k, v in sorted(steps.items()) if k != "torch ops")
    partial = (f"\nPARTIAL: no template for {', '.join(unsupported)}; torch runs "
               f"{'it' if len(unsupported) == 1 else 'them'}.") if unsupported else ""
    tf32 = getattr((schedules or {}).get("conv"), "precision", None) == "tf32"
    if "convolutions" in steps and tf32:
        partial += ("\nConvolutions: fp32 ones run as ONE tf32 product (ConvRun(precision="
                    "'tf32')) where the chain allows it: relaxed track only, as accurate as "
                    "PyTorch eager's cuDNN convolution with TF32, not fp32-accurate; the others "
                    "as the strict bf16 split (SCHEDULES['conv<j>']); Argus kernels transpose "
                    "a channels-last result to NCHW; torch repacks each weight once and pads W "
                    "to a whole stride where needed.")
        partial += _choices_text(choices)
    elif "convolutions" in steps:     # argus/compose/conv.py: what torch still does there
        partial += ("\nConvolutions: Argus kernels pack an fp32 input, multiply and "
                    "transpose a channels-last result to NCHW; torch repacks each weight once "
                    "(split pieces), copies a bf16 / fp16 NCHW input to channels-last and "
                    "pads W to a whole stride where needed.")
    source = (HEADER.format(name=name, describe=comp.describe(), kinds=kinds or "none",
                            partial=partial)
              + task_source.rstrip() + "\n" + FOOTER.format(
                  schedules=_schedules_text(schedules), imports=_imports(schedules)))
    return Composition(name, source, kernels, steps, unsupported)


def _choices_text(choices) -> str:
    """The header's lines on each fp32 convolution's precision and why
    (argus/compose/precision.py: the compose-time self-check)."""
    if not choices:
        return ""
    import textwrap

    from argus.compose.precision import HEAVY_GAIN, TF32_GAIN

    lines = ["\nPrecision per fp32 convolution (argus/compose/precision.py: the chain run in "
             "float64 with that convolution emulated as tf32, its error magnified "
             f"{TF32_GAIN:g}x, on the solver's own draws, the heavy one drawn again up to the "
             f"judge's output size with the error magnified {HEAVY_GAIN:g}x; kept as tf32 at "
             "a relaxed-rule ratio <= 1):"]
    for c in choices:
        where = "every convolution" if c.index < 0 else f"conv{c.index} ({c.weight})"
        draws = ", ".join(f"{k} {q:.3g}" for k, q in c.draws)
        text = f"- {where}: {c.reason}" + (f"; ratios per draw: {draws}" if draws else "")
        lines.append(textwrap.fill(text, 96, subsequent_indent="  "))
    return "\n".join(lines)


def source_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


__all__ = ["Composition", "compose_task", "plan_task"]
