"""The convolution family: the implicit-GEMM kernel of argus.ops.conv (argus/kernels/conv.py)
for one 2-d, 16-bit (bf16 / fp16) layer, tuned as the ConvSchedule that `convolve(...,
schedule=s)` runs.

Action space (flat parameters, `schedule` turns them into the ConvSchedule): the tile (bm = 64
per consumer warpgroup, 64 or 128 output pixels; bn output channels; bw output columns a box,
bm / bw output rows a tile), the ring depth (stages), CTA pairs multicasting the weight tile
(cluster_m), the epilogue (registers, which needs bw = the warpgroup's 64 rows, or stmatrix +
TMA store), the A tile as one TMA box a K step (rowbox), filter taps packed into one K step
(taps_per_slice: bk becomes the channels per group rounded up to one swizzle atom,
argus.ops.conv.packed_bk) and two CTAs an SM (ctas_per_sm: the consumers' registers then
follow from what a thread enters with). The start point is argus.ops.conv.schedule_for's
pick for the layer; the fp32 split, tf32, halo and 3-d layers are not searched yet.

Legality is declared, not written as family rules: ConvSchedule's ranges and the layer's
constraints (families/declared.py CONV: rowbox needs one group and strides <= 8, the TMA store
16-byte rows of channels, packed taps no grouped column-strided layer; each narrows the space
of a layer where it reads one field), with the warp-specialized skeleton's it inherits; then
the class's own refusals (ConvSchedule._problems, code schedule_fields: the direct epilogue's
bw, bw dividing bm, the entry registers at ctas_per_sm = 2, ...), then the lowering of
conv_kernel at the layer's geometry: its trace refuses a rowbox box past 256 rows or columns
(code lower), its shared-memory plan a ring past the CTA's share (code smem).

Cost model (an estimate): cost_model.gemm_estimate of the implicit GEMM, per group M = the
output pixels the tiles cover (N * P * Q padded to whole tiles: per image for rowbox tiles,
`rowbox_useful` of them real; over the flattened N * P rows otherwise), N = output channels
per group, K = R * S taps of the channels padded to bk (a packed step taps_per_slice slices
deep). The per-row A producer (rowbox=False) issues bm / bw boxes a K step, each with a
runtime division; where that issue takes longer than the modelled step it bounds the step
(ROW_BOX_S, fitted to one measured layer). Two CTAs an SM get no credit: the model runs them
in turns. No cuDNN baseline is modelled.

Evaluation: `run` calls argus.ops.conv.convolve with the schedule (the interpreter on CPU
tensors, the compiled kernel on CUDA ones), channels-last result.

Task files: `match_kernelbench` maps a KernelBench-form file whose forward is one 2-d
convolution of a bf16 / fp16 input (an nn.Conv2d submodule, or F.conv2d of the input and the
Model's parameters) to this family (`argus optimize FILE`; examples/conv2d_resnet.py is
ResNet-50's c2 3x3 layer). Its solution (`render_solution`) is the task's own Model, whose
parameters it keeps, with the forward through convolve(..., schedule=SCHEDULE). 1-d / 3-d,
transposed and fp32 convolutions are refused with the reason (a `Refusal`): argus.compose
takes them (`argus kernelbench solve`), on argus.ops.conv with schedule_for's schedules.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from pathlib import Path
from typing import Any

from argus.agent import cost_model
from argus.agent.cost_model import Estimate
from argus.agent.families.base import Refusal
from argus.agent.families.schedule import Part, ScheduleFamily
from argus.agent.task import TaskSpec

# The per-row A producer's issue time per box (one thread: the box's coordinates with a
# runtime division by P, its mbarrier bookkeeping), an estimate fitted to one measured layer:
# ResNet-50 c4 (3x3, 256 channels, batch 32, bw 16: 8 boxes a step) ran 0.42x cuDNN with the
# per-row boxes and 0.94x with rowbox on the H200 (argus.ops.conv.schedule_for, docs/perf/
# conv.md), so its per-row step took ~2.2 times this model's ~0.45 us rowbox step: ~1 us for 8
# boxes. Not measured per box.
ROW_BOX_S = 0.12e-6
DTYPES = {"bf16": "bfloat16", "f16": "float16"}


def _conv_schedule() -> type:
    from argus.kernels.conv import ConvSchedule

    return ConvSchedule


def _fields(values: dict[str, Any], packed_bk: int) -> dict[str, Any]:
    """One consumer warpgroup per 64 rows; bk 64 (a 128-byte bf16 row) for one tap a step, the
    layer's packed K slice (argus.ops.conv.packed_bk) for several, as schedule_for sets them.
    At two CTAs an SM the consumers take what the CTA's threads enter with, less the
    producer's (40 + 216 within 2 x 128 for one consumer, 40 + 2 x 96 within 3 x 80 for two:
    scripts/gpu_conv_bench.py's 2/SM schedules); at one, the skeleton's default split."""
    from argus.target.limits import SETMAXNREG_STEP, entry_registers

    # ping-pong: two warpgroups, each owning a whole bm-row tile (64 or 128)
    consumers = 2 if values.get("pingpong") else max(1, values["bm"] // 64)
    out = {**values, "consumers": consumers,
           "bk": packed_bk if values["taps_per_slice"] > 1 else 64}
    if values["ctas_per_sm"] == 2:
        pool = (1 + consumers) * entry_registers(128 * (1 + consumers), 2)
        regs = (pool - values["producer_regs"]) // consumers
        out["consumer_regs"] = min(values["consumer_regs"],
                                   regs // SETMAXNREG_STEP * SETMAXNREG_STEP)
    return out


# the values the family searches (the declaration accepts more: bm 192 / 256, deeper rings)
TILE = Part(_conv_schedule, exposed=("bm", "bn", "bw", "stages", "cluster_m", "epilogue",
                                     "rowbox", "taps_per_slice", "ctas_per_sm", "pingpong"),
            search=(("bm", (64, 128)), ("stages", (2, 3, 4, 5, 6))))


@dataclasses.dataclass(frozen=True)
class Layer:
    """A task's convolution: x [N, C, H, W], weight [K, C / groups, R, S], 16-bit."""

    N: int
    C: int
    H: int
    W: int
    K: int
    R: int
    S: int
    stride_h: int
    stride_w: int
    pad_h: int
    pad_w: int
    dil_h: int
    dil_w: int
    groups: int
    dtype: str

    @classmethod
    def of(cls, task: TaskSpec) -> "Layer":
        return cls(**{f.name: task.dims[f.name] for f in dataclasses.fields(cls)
                      if f.name != "dtype"}, dtype=task.dtype)

    @property
    def P(self) -> int:
        return (self.H + 2 * self.pad_h - self.dil_h * (self.R - 1) - 1) // self.stride_h + 1

    @property
    def Q(self) -> int:
        return (self.W + 2 * self.pad_w - self.dil_w * (self.S - 1) - 1) // self.stride_w + 1

    @property
    def args(self) -> tuple:
        """(stride, padding, dilation, groups) as argus.ops.conv takes them."""
        return ((self.stride_h, self.stride_w), (self.pad_h, self.pad_w),
                (self.dil_h, self.dil_w), self.groups)

    def tensors(self, device: str = "meta", generator=None):
        """x and weight (random on a real device, shapes only on meta)."""
        import torch

        dtype = getattr(torch, DTYPES[self.dtype])
        shapes = ((self.N, self.C, self.H, self.W), (self.K, self.C // self.groups, self.R,
                                                      self.S))
        if device == "meta":
            return tuple(torch.empty(s, dtype=dtype, device="meta") for s in shapes)
        x = torch.randn(shapes[0], generator=generator)
        w = torch.randn(shapes[1], generator=generator) / math.sqrt(shapes[1][1] * self.R *
                                                                     self.S)
        return x.to(dtype), w.to(dtype)

    def packed_bk(self) -> int:
        from argus.ops.conv import packed_bk

        return packed_bk(self.C // self.groups, 2)

    def geometry(self, bk: int):
        """The kernel's ConvGeometry at K slices of bk channels (argus.ops.conv.operands':
        each tap's channels zero-padded to a multiple of bk)."""
        from argus.kernels.conv import ConvGeometry

        cg = self.C // self.groups
        return ConvGeometry(self.R, self.S, self.stride_h, self.stride_w, self.pad_h,
                            self.pad_w, self.dil_h, self.dil_w, self.groups, -(-cg // bk) * bk)


def schedule(task: TaskSpec, params: dict[str, Any]):
    """The ConvSchedule of a parameter dict (ValueError: the class's reasons)."""
    return ConvFamily().schedules(task, params)[0]


class ConvFamily(ScheduleFamily):
    name = "conv"
    parts = (TILE,)

    def parts_for(self, task: TaskSpec, params: dict[str, Any] | None = None
                  ) -> tuple[Part, ...]:
        """TILE with the layer's packed K slice (bk follows taps_per_slice and the layer's
        channels, which a Part's derive cannot see)."""
        return (dataclasses.replace(TILE, derive=functools.partial(
            _fields, packed_bk=Layer.of(task).packed_bk())),)

    def facts(self, task: TaskSpec) -> dict[str, Any]:
        """The layer's shapes, its output channels per group (the TMA store's rows) and the
        16-bit result (the skeleton's TMA-store rule)."""
        d = task.dims
        return {**d, "Kg": d["K"] // d["groups"], "out_bits": 16}

    def default_params(self, task: TaskSpec) -> dict[str, Any]:
        """argus.ops.conv.schedule_for's pick for the layer, as it picks for a channels-last x:
        the kernel this family builds writes the channels-last result (`build`), and for an
        NCHW x schedule_for keeps the direct epilogue the NCHW store needs on wide layers
        (where a channels-last one takes the TMA store, stop 50)."""
        import torch

        from argus.ops.conv import schedule_for

        layer = Layer.of(task)
        x, w = layer.tensors()
        s = schedule_for(x.to(memory_format=torch.channels_last), w, *layer.args)
        return {n: getattr(s, n) for n in TILE.exposed}

    def naive_params(self, task: TaskSpec) -> dict[str, Any]:
        """The per-row boxes, the direct epilogue, a two-stage ring, no cluster."""
        return {"bm": 128, "bn": 128, "bw": 64, "stages": 2, "cluster_m": 1,
                "epilogue": "direct", "rowbox": False, "taps_per_slice": 1, "ctas_per_sm": 1,
                "pingpong": False}

    def build(self, task: TaskSpec, params: dict[str, Any]):
        """conv_kernel for the layer's dtype (the task's bias, no activation, channels-last
        result) at its geometry."""
        import argus as ag
        from argus.kernels.conv import conv_kernel

        s = schedule(task, params)
        dtype = getattr(ag, task.dtype)
        return conv_kernel(dtype, dtype, _has_bias(task)), {
            "geom": Layer.of(task).geometry(s.bk), "s": s}

    # -- cost ------------------------------------------------------------------------------------
    def estimate(self, task: TaskSpec, params: dict[str, Any],
                 resources: dict[str, Any] | None = None) -> Estimate | None:
        from argus.ops.conv import rowbox_useful

        try:
            s = schedule(task, params)
        except ValueError:
            return None
        L = Layer.of(task)
        P, Q, rows = L.P, L.Q, s.bm // s.bw
        col_tiles = -(-Q // s.bw)
        if s.rowbox:       # tiles of one image's rows
            pixels = L.N * -(-P // rows) * rows * col_tiles * s.bw
        else:              # tiles of the flattened N * P rows
            pixels = -(-L.N * P // rows) * rows * col_tiles * s.bw
        step = s.taps_per_slice * s.bk
        slices = L.R * L.S * -(-(L.C // L.groups) // s.bk)
        depth = -(-slices // s.taps_per_slice) * step
        p = {"bm": s.bm, "bn": s.bn, "bk": step, "stages": s.stages, "consumers": s.consumers,
             "persistent": True, "num_sms": s.num_sms * s.ctas_per_sm, "group_m": s.group_m,
             "cluster_m": s.cluster_m, "epilogue": s.epilogue,
             "consumer_regs": s.consumer_regs}
        est = cost_model.gemm_estimate(pixels, L.K // L.groups, depth, p, batch=L.groups)
        d = est.detail
        producer = 0.0 if s.rowbox else rows * ROW_BOX_S
        extra = d["waves"] * d["k_steps"] * max(0.0, producer - d["t_step_us"] * 1e-6)
        ms = est.ms + extra * 1e3
        flops = 2.0 * L.N * P * Q * L.K * (L.C // L.groups) * L.R * L.S
        useful = L.N * P * Q / pixels
        return Estimate(ms, "producer" if extra else est.bound,
                        {**d, "pixels": pixels, "useful": useful,
                         "rowbox_useful": rowbox_useful(P, Q, s.bm, s.bw),
                         "producer_us": extra * 1e6, "tflops": flops / (ms * 1e-3) / 1e12})

    # -- rendering and running -------------------------------------------------------------------
    def render_kernel(self, task: TaskSpec, params: dict[str, Any]) -> str:
        """conv_kernel at the layer's geometry with this schedule."""
        kernel, constexprs = self.build(task, params)
        return ('"""Convolution chosen by `argus optimize`: argus/kernels/conv.py with the '
                'ConvSchedule that\nargus.ops.conv.convolve(..., schedule=SCHEDULE) runs."""'
                "\n\nimport argus as ag\n"
                "from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel\n\n"
                f"GEOM = {constexprs['geom']!r}\n"
                f"SCHEDULE = {constexprs['s']!r}\n"
                f"KERNEL = conv_kernel(ag.{task.dtype}, ag.{task.dtype}"
                + (", bias=True" if _has_bias(task) else "") + ")\n"
                'CONSTEXPRS = {"geom": GEOM, "s": SCHEDULE}\n')

    def render_solution(self, task: TaskSpec, kernel_source: str,
                        params: dict[str, Any] | None = None) -> str | None:
        """A KernelBench task's ModelNew: the task's Model (embedded: its parameters under
        its state-dict keys, so the judge's weights load) with the forward through
        convolve(..., schedule=SCHEDULE), which runs the implicit GEMM the candidate's KERNEL
        is (channels-last result: nchw=False, the layout KERNEL writes)."""
        if task.origin != "kernelbench":
            return None
        o = task.opts
        stride, padding, dilation, groups = Layer.of(task).args
        return (kernel_source.rstrip() + "\n\n\n"
                "# ---- the task's own source (Model, get_inputs, get_init_inputs) ----------\n"
                + Path(task.path).read_text().rstrip() + "\n\n\n"
                + ADAPTER.format(weight=o["weight"], bias=o.get("bias_param") or None,
                                 stride=stride, padding=padding, dilation=dilation,
                                 groups=groups))

    def run(self, task: TaskSpec, params: dict[str, Any], x, weight, bias=None):
        """The layer with this schedule: argus.ops.conv.convolve (interpreted for CPU tensors,
        compiled for CUDA ones), its result channels-last."""
        from argus.ops.conv import convolve

        return convolve(x, weight, bias, *Layer.of(task).args, schedule=schedule(task, params),
                        nchw=False)


def _has_bias(task: TaskSpec) -> bool:
    return bool(task.opts.get("bias"))


# what render_solution appends after the kernel and the task's own source
ADAPTER = '''# ---- KernelBench adapter: ModelNew = the task's Model, its convolution through
# argus.ops.conv.convolve with SCHEDULE (compiled on CUDA tensors, interpreted on CPU ones),
# the result channels-last (the kernel's own layout, nchw=False: no transpose pass).
import functools  # noqa: E402

from argus.ops.conv import convolve  # noqa: E402

WEIGHT = {weight!r}
BIAS = {bias!r}
STRIDE, PADDING, DILATION, GROUPS = {stride!r}, {padding!r}, {dilation!r}, {groups!r}


class ModelNew(Model):
    def forward(self, x):
        attr = functools.partial(functools.reduce, getattr)
        weight = attr(WEIGHT.split("."), self)
        bias = attr(BIAS.split("."), self) if BIAS else None
        return convolve(x, weight, bias, STRIDE, PADDING, DILATION, GROUPS, schedule=SCHEDULE,
                        nchw=False)
'''


def layer_task(layer: Layer, *, name: str = "conv", origin: str = "argus",
               path: str = "argus.ops.conv", options: tuple = (), **common) -> TaskSpec:
    """The TaskSpec of a Layer (shape: its fields; metrics: its FLOPs and 16-bit bytes)."""
    shape = tuple(sorted((f.name, getattr(layer, f.name)) for f in dataclasses.fields(Layer)
                         if f.name != "dtype"))
    L = layer
    flops = 2.0 * L.N * L.P * L.Q * L.K * (L.C // L.groups) * L.R * L.S
    moved = 2.0 * (L.N * L.C * L.H * L.W + L.K * (L.C // L.groups) * L.R * L.S
                   + L.N * L.K * L.P * L.Q)
    return TaskSpec(family="conv", name=name, origin=origin, path=path, shape=shape,
                    dtype=L.dtype, compute=L.dtype, metrics=(("flops", flops), ("bytes", moved)),
                    options=options, **common)


def conv_task(N: int, C: int, H: int, W: int, K: int, R: int, S: int, stride=1, padding=0,
              dilation=1, groups: int = 1, dtype: str = "bf16", name: str = "conv",
              bias: bool = False) -> TaskSpec:
    """A TaskSpec of one 2-d convolution layer's shapes (the library's op); stride, padding and
    dilation an int or (height, width)."""
    if dtype not in DTYPES:
        raise ValueError(f"conv_task: dtype={dtype!r}; the family tunes 16-bit layers "
                         f"({', '.join(DTYPES)})")
    (sh, sw), (ph, pw), (dh, dw) = (v if isinstance(v, tuple) else (v, v)
                                    for v in (stride, padding, dilation))
    layer = Layer(N, C, H, W, K, R, S, sh, sw, ph, pw, dh, dw, groups, dtype)
    return layer_task(layer, name=name, options=(("bias", True),) if bias else ())


# ----------------------------------------------------------------------------- task matching

SOLVE = ("argus.compose runs it on argus.ops.conv (`argus kernelbench solve --ids N`, or "
         "argus.ops.conv2d / conv1d / conv3d directly) with schedule_for's schedules")


def _conv_call(gm, node):
    """A convolution node's facts as a dict (dims, transposed; for a forward one also the input
    node, weight and bias tensors and their attribute paths, stride, padding, dilation, groups,
    padding_mode), or None: not an nn.Conv*d / nn.ConvTranspose*d submodule call, nor a
    functional convolution whose weight (and bias) are the Model's attributes (get_attr)."""
    import torch
    import torch.nn.functional as F
    from torch.nn.modules.conv import _ConvNd

    if node.op == "call_module":
        sub = gm.get_submodule(node.target)
        if not isinstance(sub, _ConvNd) or len(node.args) != 1 or node.kwargs:
            return None
        return dict(dims=len(sub.kernel_size), transposed=bool(sub.transposed),
                    x=node.args[0], weight=sub.weight, bias=sub.bias,
                    weight_path=f"{node.target}.weight",
                    bias_path=f"{node.target}.bias" if sub.bias is not None else "",
                    stride=sub.stride, padding=sub.padding, dilation=sub.dilation,
                    groups=sub.groups, padding_mode=sub.padding_mode)
    forward = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3, torch.conv1d: 1, torch.conv2d: 2,
               torch.conv3d: 3}
    transposed = {F.conv_transpose1d: 1, F.conv_transpose2d: 2, F.conv_transpose3d: 3}
    if node.op != "call_function" or (node.target not in forward and
                                      node.target not in transposed):
        return None
    if node.target in transposed:
        return dict(dims=transposed[node.target], transposed=True)
    names = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
    bound = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1,
             **dict(zip(names, node.args)), **node.kwargs}
    params = {}
    for role in ("weight", "bias"):
        arg = bound.get(role)
        if arg is None and role == "bias":
            params[role] = (None, "")
        elif getattr(arg, "op", None) == "get_attr":
            params[role] = (functools.reduce(getattr, arg.target.split("."), gm), arg.target)
        else:
            return None      # a weight computed in the forward or passed in: not one layer
    return dict(dims=forward[node.target], transposed=False, x=bound.get("input"),
                weight=params["weight"][0], bias=params["bias"][0],
                weight_path=params["weight"][1], bias_path=params["bias"][1],
                stride=bound["stride"], padding=bound["padding"],
                dilation=bound["dilation"], groups=bound["groups"], padding_mode="zeros")


def _pair(v) -> tuple[int, int]:
    return tuple(int(i) for i in v) if isinstance(v, (tuple, list)) else (int(v),) * 2


def match_kernelbench(gm, placeholders, compute, shapes, common: dict[str, Any]
                      ) -> TaskSpec | Refusal | None:
    """The conv TaskSpec of a KernelBench-form task whose forward is one 2-d convolution of
    its one input by the Model's parameters, in bf16 or fp16; None when the graph is something
    else; a Refusal for a convolution this family does not search (1-d / 3-d, transposed, an
    fp32 or mixed-dtype input, a non-zero padding mode), which argus.compose then takes, as
    before this matcher existed."""
    import torch

    if len(compute) != 1 or len(placeholders) != 1:
        return None
    conv = _conv_call(gm, compute[0])
    if conv is None:
        return None
    name = common["name"]
    what = f"{conv['dims']}-d {'transposed ' if conv['transposed'] else ''}convolution"
    fix = SOLVE
    if conv["transposed"] or conv["dims"] != 2:
        return Refusal(f"{name}: a {what}: the conv family searches forward 2-d convolutions "
                       f"(bf16 / fp16) only, so it has no Argus template for this one", fix=fix)
    if getattr(conv["x"], "name", None) != placeholders[0].name:
        return None
    x = shapes[placeholders[0].name]
    w, b = conv["weight"], conv["bias"]
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        return Refusal(f"{name}: a 2-d convolution of a {getattr(x, 'dim', lambda: '?')()}-d "
                       "input: the conv family takes batched [N, C, H, W] inputs", fix=fix)
    dtype = {torch.bfloat16: "bf16", torch.float16: "f16"}.get(x.dtype)
    if dtype is None:
        return Refusal(f"{name}: a 2-d convolution of a {x.dtype} input: the conv family "
                       "searches 16-bit (bf16 / fp16) layers only, so it has no Argus template "
                       "for this one",
                       fix=fix + " (fp32: the bf16 split, strict track, or tf32); for the "
                                 "conv family, make the task's input and parameters bf16 or "
                                 "fp16")
    if w.dtype != x.dtype or (b is not None and b.dtype != x.dtype):
        return Refusal(f"{name}: a 2-d convolution of a {x.dtype} input by a {w.dtype} weight"
                       + (f" and a {b.dtype} bias" if b is not None else "")
                       + ": the conv family takes one 16-bit dtype for all three",
                       fix="create the Model's convolution in the input's dtype "
                           "(nn.Conv2d(..., dtype=...))")
    if conv["padding_mode"] != "zeros":
        return Refusal(f"{name}: a 2-d convolution with padding_mode={conv['padding_mode']!r}: "
                       "the kernel pads with zeros only", fix=fix)
    K, cg, R, S = (int(d) for d in w.shape)
    stride, dilation = _pair(conv["stride"]), _pair(conv["dilation"])
    padding = conv["padding"]
    if padding == "valid":
        padding = (0, 0)
    elif padding == "same":
        total = (dilation[0] * (R - 1), dilation[1] * (S - 1))
        if any(t % 2 for t in total):
            return Refusal(f"{name}: a 2-d convolution with padding='same' and an even "
                           "filter extent: torch pads it unevenly, the kernel takes one pad "
                           "a side", fix="give explicit (symmetric) padding")
        padding = (total[0] // 2, total[1] // 2)
    padding = _pair(padding)
    N, C, H, W = (int(d) for d in x.shape)
    groups = int(conv["groups"])
    layer = Layer(N, C, H, W, K, R, S, *stride, *padding, *dilation, groups, dtype)
    if C != cg * groups or layer.P < 1 or layer.Q < 1:
        return None      # not a valid convolution of these shapes: the task itself would fail
    bias = b is not None
    options = (("bias", bias), ("weight", conv["weight_path"]),
               ("bias_param", conv["bias_path"]))
    layout = "channels-last" if x.is_contiguous(memory_format=torch.channels_last) and \
        not x.is_contiguous() else "NCHW"
    return layer_task(layer, options=options, note=(
        f"one {dtype} 2-d convolution ({layout} input{', bias' if bias else ''}) through "
        "argus.ops.conv.convolve's implicit GEMM with the searched ConvSchedule"), **common)


__all__ = ["ConvFamily", "Layer", "conv_task", "layer_task", "match_kernelbench", "schedule"]
