"""Run a partitioned forward: the compiled program of one set of input shapes.

`Program.build(model, inputs)` captures and partitions the model for these shapes and renders
every fused kernel's DSL source; `Program.run(model, inputs)` executes the steps: fused tile
kernels, the GEMM adapter, scans (Argus kernels, compiled on CUDA tensors and interpreted on CPU
tensors), views and permutes (torch views, no compute), and ops without a template (torch:
the program is then *partial* and `unsupported` names them). `ComposedModel` is the ModelNew
base class a composed solution subclasses: it owns the task Model's parameters under the same
state-dict keys and builds one Program per input shapes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import torch

from argus.compose import conv, gemm, pool, scan, tile
from argus.compose.launch import copy_into, run as _run
from argus.compose.capture import capture
from argus.compose.graph import Node
from argus.compose.partition import Plan, partition

_SERIAL = [0]
# Seconds spent lowering models to programs (capture, partition, kernel source) and how many
# programs were built, in this process: the KernelBench judge reports them per task.
STATS = {"programs": 0, "lowering_s": 0.0}


# ------------------------------------------------------------------------- the program
@dataclass
class KernelLaunch:
    name: str
    source: str
    fn: Any
    facts: dict


@dataclass
class Program:
    plan: Plan
    launches: dict[int, KernelLaunch] = field(default_factory=dict)   # step index -> kernel
    scans: dict[int, Any] = field(default_factory=dict)
    schedules: dict[str, Any] = field(default_factory=dict)
    torch_ops: list[str] = field(default_factory=list)                 # at run time (copies)
    # what each forward reads of the plan (inputs, the graph's parameter and constant leaves,
    # the steps and their kernel calls), found once: a walk over the nodes per call is host
    # time that a small kernel's forward cannot hide; constants moved to a device once, per
    # device
    _run_plan: "_RunPlan | None" = field(default=None, repr=False)
    _consts: dict = field(default_factory=dict, repr=False)

    @property
    def unsupported(self) -> list[str]:
        return sorted(set(self.plan.unsupported) | set(self.torch_ops))

    @property
    def sources(self) -> str:
        return "\n\n".join(k.source for k in self.launches.values())

    @classmethod
    def build(cls, model: torch.nn.Module, inputs: list[Any],
              schedules: dict[str, Any] | None = None) -> "Program":
        g = capture(model, inputs)
        plan = partition(g)
        prog = cls(plan, schedules=dict(schedules or {}))
        _SERIAL[0] += 1
        for i, step in enumerate(plan.steps):
            if step.kind == "kernel":
                name = f"fused{i}"
                sched = prog.schedules.get(name) or prog.schedules.get("tile") or \
                    default_schedule(step.kernel)
                src, facts = tile.render(step.kernel, name, sched)
                fn = tile.load_source(src, f"{_SERIAL[0]}_{name}")[name]
                csrc = None
                root = step.kernel.root
                if "fold" in facts:         # rows folded for 16-byte rows (and split): one pass
                    cname = f"{name}_fold"
                    csrc, cfacts = tile.fold_kernel(root.fn, facts["out_view"], *facts["fold"],
                                                    cname, facts["split"], root.dtype,
                                                    facts["partial_dtype"])
                elif facts["split"] > 1:
                    cname = f"{name}_combine"
                    csrc, cfacts = tile.combine_kernel(root.fn, facts["split"], step.node.numel,
                                                       cname, root.dtype, facts["partial_dtype"])
                if csrc is not None:        # a second pass: partials, then this kernel
                    cfn = tile.load_source(csrc, f"{_SERIAL[0]}_{cname}")[cname]
                    facts["combine"] = (cfn, cfacts)
                    src = src + "\n\n" + csrc
                prog.launches[i] = KernelLaunch(name, src, fn, facts)
        return prog

    def _prepare_run(self) -> "_RunPlan":
        """What every forward reads of the plan, found once (the host time of a forward is
        GPU time lost for a kernel of tens of microseconds: L1/12)."""
        g = self.plan.graph
        bindings = [(n, n.attrs["param"] if "param" in n.attrs else None)
                    for n in g.nodes if n.op == "leaf" and
                    ("param" in n.attrs or "const" in n.attrs)]
        calls = {i: _KernelCall.of(step.kernel, self.launches[i])
                 for i, step in enumerate(self.plan.steps) if step.kind == "kernel"}
        maker = next((step.kind for step in reversed(self.plan.steps)
                      if step.node is g.output), None)
        return _RunPlan(inputs=tuple((n, n.attrs["input"]) for n in g.inputs),
                        conv_runs=self.conv_runs(),
                        bindings=tuple(bindings),
                        steps=tuple((i, step, step.kind, step.node, calls.get(i))
                                    for i, step in enumerate(self.plan.steps)),
                        # a kernel's or the GEMM adapter's output is a new contiguous buffer:
                        # no check that it aliases an input or a constant
                        fresh_output=maker in ("kernel", "matmul"))

    def conv_runs(self) -> dict[int, Any]:
        """step index -> the ConvRun of that convolution: SCHEDULES["conv<j>"] for the j-th
        conv step (in plan order, the forward's call order: argus/compose/precision.py picks
        a precision per convolution under them), else SCHEDULES["conv"] (None: defaults)."""
        runs, j = {}, 0
        for i, step in enumerate(self.plan.steps):
            if step.kind == "conv":
                runs[i] = self.schedules.get(f"conv{j}") or self.schedules.get("conv")
                j += 1
        return runs

    def run(self, model: torch.nn.Module, inputs: list[Any]) -> torch.Tensor:
        fast = self._run_plan
        if fast is None:
            fast = self._run_plan = self._prepare_run()
        env: dict[Node, Any] = {}
        for n, i in fast.inputs:
            env[n] = inputs[i]
        if fast.bindings:
            device = next((t.device for t in inputs if isinstance(t, torch.Tensor)), None)
            for n, param in fast.bindings:
                if param is not None:
                    env[n] = _param(model, param)
                else:
                    key = (n, device)
                    if key not in self._consts:
                        self._consts[key] = n.attrs["const"].to(device)
                    env[n] = self._consts[key]
        for i, step, kind, n, call in fast.steps:
            if call is not None:
                env[n] = call(env)
            elif kind == "view":
                src = env[n.args[0]]
                try:
                    env[n] = src.view(n.shape)
                except RuntimeError:
                    buf = torch.empty(src.shape, dtype=src.dtype, device=src.device)
                    copy_into(src, buf)
                    env[n] = buf.view(n.shape)
            elif kind == "permute":
                env[n] = env[n.args[0]].permute(*n.attrs["dims"])
            elif kind == "slice":
                env[n] = env[n.args[0]].narrow(n.attrs["dim"], n.attrs["start"],
                                               n.attrs["length"])
            elif kind == "select":
                env[n] = env[n.args[0]].select(n.attrs["dim"], n.attrs["index"])
            elif kind == "matmul":
                a, b = env[n.args[0]], env[n.args[1]]
                out = torch.empty(n.shape, dtype=torch.float32, device=a.device)
                gemm.matmul(a.float() if a.dtype != torch.float32 else a,
                            b.float() if b.dtype != torch.float32 else b, out,
                            self.schedules.get("matmul", gemm.MatmulSchedule()))
                env[n] = out if n.dtype == torch.float32 else out.to(n.dtype)
            elif kind == "scan":
                env[n] = scan.run_scan(n, env[n.args[0]], self)
            elif kind == "pool":
                env[n] = pool.run_pool(n, env[n.args[0]])
            elif kind == "conv":
                env[n] = conv.run_conv(n, *(env[a] for a in n.args[:2]),
                                       env[n.args[2]] if len(n.args) > 2 else None,
                                       fast.conv_runs[i])
            else:
                env[n] = _torch_call(n, env)
        out = env[self.plan.graph.output]
        if fast.fresh_output:
            return out
        if out.data_ptr() in {t.data_ptr() for t in inputs if isinstance(t, torch.Tensor)} or \
                any(out.data_ptr() == c.data_ptr() for c in self._consts.values()) or \
                not out.is_contiguous():
            buf = torch.empty(out.shape, dtype=out.dtype, device=out.device)
            copy_into(out, buf)
            out = buf
        return out


@dataclass(frozen=True)
class _RunPlan:
    """A Program's forward, read off its plan once: input slots, parameter and constant
    leaves, (index, step, kind, node, kernel call) per step, and whether the output is a new
    buffer of a kernel (no alias check)."""

    inputs: tuple
    bindings: tuple
    steps: tuple
    fresh_output: bool
    conv_runs: dict = field(default_factory=dict)   # step index -> ConvRun (or None)


@dataclass(frozen=True)
class _KernelCall:
    """One fused kernel step's launch, its per-call work reduced to what the tensors can
    change: each leaf's env node and view shape (and whether that view's rows are wider than
    one element, so that its inner stride matters), the output's shape and dtype."""

    launch: KernelLaunch
    leaves: tuple                 # (env node, view shape, rows wider than 1)
    out_shape: tuple
    out_dtype: torch.dtype
    out_view: tuple | None        # None: the output is launched as allocated

    @classmethod
    def of(cls, k, launch: KernelLaunch) -> "_KernelCall":
        leaves = tuple((leaf.args[0] if leaf.fn == "shift" else leaf, tuple(shape),
                        len(shape) > 0 and shape[-1] > 1)
                       for leaf, shape in zip(k.leaves, launch.facts["leaf_views"]))
        out_view = tuple(launch.facts["out_view"])
        return cls(launch, leaves, tuple(k.root.shape), k.root.dtype,
                   None if out_view == tuple(k.root.shape) else out_view)

    def __call__(self, env) -> torch.Tensor:
        views = []
        for node, shape, wide in self.leaves:
            t = env[node]
            try:                        # torch.Size against a tuple: already this view
                v = t if t.shape == shape else t.view(shape)
            except RuntimeError:        # strides that do not merge
                v = None
            # a kernel reads rows contiguously (check_inner_stride refuses the launch): a
            # transposed input or view, a slice with a step, an expanded inner dim is copied
            # into a contiguous buffer by an Argus layout kernel first
            if v is None or (wide and v.stride(-1) != 1):
                buf = torch.empty(t.shape, dtype=t.dtype, device=t.device)
                copy_into(t, buf)
                v = buf.view(shape)
            views.append(v)
        device = views[0].device if views else next(
            t.device for t in env.values() if isinstance(t, torch.Tensor))
        out = torch.empty(self.out_shape, dtype=self.out_dtype, device=device)
        launch = self.launch
        if "combine" in launch.facts:       # partials, then the combining pass
            parts = torch.empty(launch.facts["out_view"], dtype=launch.facts["partial_dtype"],
                                device=device)
            _run(launch.fn, (*views, parts))
            cfn, cfacts = launch.facts["combine"]
            _run(cfn, (parts.view(cfacts["leaf_views"][0]), out.view(cfacts["out_view"])))
            return out
        _run(launch.fn, (*views, out if self.out_view is None else out.view(self.out_view)))
        return out


def default_schedule(k) -> tile.TileSchedule:
    """Rows of up to 2048 floats per tile; reductions along the tile's rows keep one row per
    CTA when rows are long (more CTAs in flight)."""
    groups = tile.groups_of(k)
    bn = min(1024, tile.pow2(groups[-1].size))
    rows = max(1, min(tile.pow2(groups[-2].size), 2048 // bn))
    return tile.TileSchedule(rows=rows, bn=bn, threads=256)


def _param(model, name: str):
    obj = model
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _torch_call(n: Node, env):
    """Run an op that has no template through torch (the solution is partial)."""
    if "item" in n.attrs:
        return env[n.args[0]][n.attrs["item"]]
    op, target, args, kwargs = n.attrs["call"]

    def sub(a):
        if isinstance(a, Node):
            return env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(sub(x) for x in a)
        if isinstance(a, dict):
            return {k: sub(v) for k, v in a.items()}
        return a

    args, kwargs = sub(args), sub(kwargs)
    if op == "call_method":
        return getattr(args[0], target)(*args[1:], **kwargs)
    return target(*args, **kwargs)


class ComposedModel(torch.nn.Module):
    """ModelNew of a composed solution: set MODEL (the task's Model class) and optionally
    SCHEDULES; the parameters are the task Model's, under the same state-dict keys."""

    MODEL: type = None
    SCHEDULES: dict = {}

    def __init__(self, *args, **kwargs):
        super().__init__()
        ref = self.MODEL(*args, **kwargs)
        for name, child in ref.named_children():
            self.add_module(name, child)
        for name, p in ref.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in ref.named_buffers(recurse=False):
            self.register_buffer(name, b)
        object.__setattr__(self, "_ref", ref)
        object.__setattr__(self, "_programs", {})

    def program(self, inputs) -> Program:
        key = tuple([(x.shape, x.dtype) if isinstance(x, torch.Tensor) else x for x in inputs])
        if key not in self._programs:
            started = time.perf_counter()
            self._ref.train(self.training)
            with torch.no_grad():
                self._programs[key] = Program.build(self._ref, list(inputs), self.SCHEDULES)
            STATS["programs"] += 1
            STATS["lowering_s"] += time.perf_counter() - started
        return self._programs[key]

    def forward(self, *inputs):
        prog = self.program(inputs)
        if not torch.is_grad_enabled():       # the judge's calls: no context to enter
            return prog.run(self._ref, inputs)
        with torch.no_grad():
            return prog.run(self._ref, inputs)


__all__ = ["ComposedModel", "Program", "copy_into", "default_schedule"]
