"""Recognize what a task file computes and map it to an Argus op family, or say plainly that
Argus has no template for it.

KernelBench files (Model, get_inputs, get_init_inputs): the Model is traced with torch.fx on the
meta device (no memory, no compute) and its graph is matched against rules kept as data:
  - one 2-D matmul of two fp32 inputs, A [M, K] @ B [K, N], with 16-byte aligned rows -> the
    GEMM family: the bf16 tensor-core kernel with fp32 output on operands split into three bf16
    pieces each, six products per term (K' = 6K, in K chunks with separate accumulators), which
    is fp32 accurate (strict track) at 6x the tensor FLOPs; 3 terms or a single bf16 product
    are cards that only apply on the relaxed track (argus/agent/split_numerics.py);
  - one scaled_dot_product_attention of three inputs -> the attention family
    (families/attention.py match_kernelbench);
  - one 2-d convolution (nn.Conv2d or F.conv2d) of a bf16 / fp16 input -> the conv family
    (families/conv.py match_kernelbench; 1-d / 3-d, transposed and fp32 convolutions are
    refused there with the reason and go to argus.compose, which runs them on argus.ops.conv);
  - a chain of elementwise ops on one fp32 input whose every op has a DSL translation (ELEMENTWISE,
    MODULES below) -> the elementwise family, with the chain fused into one DSL expression.
Anything else is lowered by argus.compose (capture, partition into fused tile kernels, the GEMM
adapter and scans; argus/compose/) -> the composed family, whose schedule (tile, threads, GEMM
split) applies to every kernel of the solution; only a task argus.compose cannot capture raises
`NoTemplate` naming the op family and what is missing.

Argus example files (KERNEL, OUTPUT, make_inputs, reference): the library GEMM kernel maps to the
GEMM family; any other kernel with power-of-two int compile-time parameters to the generic
kernel family.
"""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Any, Callable

from argus.agent.task import TaskSpec, file_sha256, is_pow2_int
from argus.errors import ArgusError


class NoTemplate(ArgusError):
    """The task's op family has no Argus template (yet)."""


class FamilyRefused(NoTemplate):
    """A task a single-op family recognizes but does not search (`families.base.Refusal`):
    argus.compose takes it, and its TaskSpec note names the family and says why."""

    family = ""


class SdpaRefused(FamilyRefused):
    """An SDPA task the attention family cannot run."""

    family = "attention"


class ConvRefused(FamilyRefused):
    """A convolution the conv family does not search (1-d / 3-d, transposed, fp32 input)."""

    family = "conv"


def _slope(node, default: float, name: str, index: int) -> float:
    if name in node.kwargs:
        return float(node.kwargs[name])
    return float(node.args[index]) if len(node.args) > index else default


def _gelu(x: str, node) -> str:
    approx = node.kwargs.get("approximate", "none")
    if approx == "tanh":
        return (f"(0.5 * {x} * (ag.tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))"
                " + 1.0))")
    return f"({x} * 0.5 * (ag.erf({x} * 0.7071067811865476) + 1.0))"


def _softplus(x: str, beta: float, threshold: float) -> str:
    return (f"ag.where({x} * {beta!r} > {threshold!r}, {x}, "
            f"ag.log(ag.exp({x} * {beta!r}) + 1.0) / {beta!r})")


# Unary elementwise translations: torch target (function or method name) -> DSL text builder.
def _elementwise_rules() -> dict[Any, Callable[..., str]]:
    import torch
    import torch.nn.functional as F

    rules: dict[Any, Callable[..., str]] = {}

    def add(targets, fn):
        for t in targets:
            rules[t] = fn

    add([torch.relu, F.relu, "relu"], lambda x, n: f"ag.relu({x})")
    add([torch.sigmoid, F.sigmoid, "sigmoid"], lambda x, n: f"ag.sigmoid({x})")
    add([torch.tanh, F.tanh, "tanh"], lambda x, n: f"ag.tanh({x})")
    add([torch.exp, "exp"], lambda x, n: f"ag.exp({x})")
    add([torch.log, "log"], lambda x, n: f"ag.log({x})")
    add([torch.sqrt, "sqrt"], lambda x, n: f"ag.sqrt({x})")
    add([torch.rsqrt, "rsqrt"], lambda x, n: f"ag.rsqrt({x})")
    add([torch.abs, "abs"], lambda x, n: f"ag.abs_({x})")
    add([torch.erf, "erf"], lambda x, n: f"ag.erf({x})")
    add([F.silu], lambda x, n: f"({x} * ag.sigmoid({x}))")
    add([F.gelu], _gelu)
    add([F.softsign], lambda x, n: f"({x} / (ag.abs_({x}) + 1.0))")
    add([F.leaky_relu], lambda x, n: f"ag.where({x} > 0.0, {x}, {x} * "
                                     f"{_slope(n, 0.01, 'negative_slope', 1)!r})")
    add([F.hardtanh], lambda x, n: f"ag.minimum(ag.maximum({x}, "
                                   f"{_slope(n, -1.0, 'min_val', 1)!r}), "
                                   f"{_slope(n, 1.0, 'max_val', 2)!r})")
    add([F.hardsigmoid], lambda x, n: f"ag.minimum(ag.maximum({x} / 6.0 + 0.5, 0.0), 1.0)")
    add([F.softplus], lambda x, n: _softplus(x, _slope(n, 1.0, "beta", 1),
                                             _slope(n, 20.0, "threshold", 2)))
    add([F.elu], lambda x, n: f"ag.where({x} > 0.0, {x}, (ag.exp({x}) - 1.0) * "
                              f"{_slope(n, 1.0, 'alpha', 1)!r})")
    return rules


def _module_rules() -> dict[type, Callable[[str, Any], str]]:
    import torch.nn as nn

    class _N:  # a node-like view of a module's hyper-parameters
        def __init__(self, **kwargs):
            self.kwargs, self.args = kwargs, ()

    return {
        nn.ReLU: lambda x, m: f"ag.relu({x})",
        nn.Sigmoid: lambda x, m: f"ag.sigmoid({x})",
        nn.Tanh: lambda x, m: f"ag.tanh({x})",
        nn.SiLU: lambda x, m: f"({x} * ag.sigmoid({x}))",
        nn.GELU: lambda x, m: _gelu(x, _N(approximate=m.approximate)),
        nn.Softsign: lambda x, m: f"({x} / (ag.abs_({x}) + 1.0))",
        nn.LeakyReLU: lambda x, m: f"ag.where({x} > 0.0, {x}, {x} * {float(m.negative_slope)!r})",
        nn.Hardtanh: lambda x, m: f"ag.minimum(ag.maximum({x}, {float(m.min_val)!r}), "
                                  f"{float(m.max_val)!r})",
        nn.Hardsigmoid: lambda x, m: f"ag.minimum(ag.maximum({x} / 6.0 + 0.5, 0.0), 1.0)",
        nn.Softplus: lambda x, m: _softplus(x, float(m.beta), float(m.threshold)),
        nn.ELU: lambda x, m: f"ag.where({x} > 0.0, {x}, (ag.exp({x}) - 1.0) * {float(m.alpha)!r})",
    }


def _binary_rules() -> dict[Any, str]:
    import torch

    return {operator.add: "+", torch.add: "+", "add": "+", operator.sub: "-", torch.sub: "-",
            "sub": "-", operator.mul: "*", torch.mul: "*", "mul": "*", operator.truediv: "/",
            torch.div: "/", "div": "/"}


def _family_hint(gm) -> str:
    """A short name of what the graph does, for the NoTemplate message."""
    names = []
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            names.append(getattr(node.target, "__name__", str(node.target)))
        elif node.op == "call_module":
            names.append(type(gm.get_submodule(node.target)).__name__)
    return ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")


# ----------------------------------------------------------------------------- KernelBench


def compose_kernelbench(path: Path, delegate: bool = True) -> TaskSpec:
    """The TaskSpec of a KernelBench task: the GEMM or elementwise family when one matches,
    else (delegate=True) the composed family of argus.compose."""
    try:
        return _match_kernelbench(path)
    except NoTemplate as exc:
        if not delegate:
            raise
        return _compose_general(path, exc)


def _compose_general(path: Path, why: NoTemplate) -> TaskSpec:
    from argus.compose import compose_task, plan_task

    comp = compose_task(path)
    if comp.error:
        raise NoTemplate(f"{path.stem}: no Argus template: {why}; and argus.compose could not "
                         f"lower it: {comp.error}",
                         fix="optimize an Argus kernel file instead, or extend "
                             "argus/compose/rules.py") from None
    prog, _ = plan_task(path)
    g = prog.plan.graph
    io = [n for n in g.nodes if n.op == "leaf"] + [g.output]
    bytes_io = float(sum(n.numel * 4 for n in io))
    flops = float(sum(2 * n.numel * n.args[0].shape[-1] for n in g.nodes if n.op == "matmul"))
    kernels = prog.plan.argus_steps
    has_mm = any(s.kind == "matmul" for s in prog.plan.steps)
    if kernels == 0:  # every op runs in torch: nothing for the agent to tune or to judge as ours
        raise NoTemplate(f"{path.stem}: no Argus template for this op family: argus.compose "
                         f"lowers none of it ({comp.describe()}); first refusal: {why}",
                         fix="extend argus/compose/rules.py with a rule for the op") from None
    return TaskSpec(family="composed", name=path.stem, origin="kernelbench",
                    path=str(path.resolve()), sha256=file_sha256(path),
                    shape=(("kernels", kernels), ("matmuls", int(has_mm))), dtype="f32",
                    compute="f32", ops=len(g.live()),
                    metrics=(("bytes", bytes_io), ("flops", flops)),
                    note=comp.describe() + ("" if comp.complete else
                                            " (PARTIAL: those ops run in torch)")
                    + (f"; not the {why.family} family: {why}" if isinstance(why, FamilyRefused)
                       else ""))


def _match_kernelbench(path: Path) -> TaskSpec:
    import torch
    import torch.fx

    from argus.bench.kernelbench.tasks import load_task

    module = load_task(path)
    with torch.device("meta"):
        torch.manual_seed(0)
        model = module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
    name = path.stem
    try:
        gm = torch.fx.symbolic_trace(model)
    except Exception as exc:  # noqa: BLE001 - data-dependent control flow etc.
        raise NoTemplate(f"{name}: no Argus template for this task: torch.fx cannot trace its "
                         f"Model ({type(exc).__name__}: {str(exc)[:200]})",
                         fix="optimize an Argus kernel file instead, or extend "
                             "argus/agent/composer.py") from None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    compute = [n for n in gm.graph.nodes if n.op in ("call_function", "call_method",
                                                     "call_module")]
    if len(placeholders) != len(inputs):
        raise NoTemplate(f"{name}: no Argus template for this op family ({_family_hint(gm)}): "
                         "the forward takes default or keyword arguments")
    shapes = {p.name: x for p, x in zip(placeholders, inputs)}
    common = dict(name=name, origin="kernelbench", path=str(path.resolve()),
                  sha256=file_sha256(path))
    from argus.agent.families.attention import match_kernelbench as match_attention

    attention = match_attention(gm, placeholders, compute, shapes, common)
    if isinstance(attention, TaskSpec):
        return attention
    if attention is not None:
        raise SdpaRefused(attention.message, fix=attention.fix)
    from argus.agent.families.conv import match_kernelbench as match_conv

    conv = match_conv(gm, placeholders, compute, shapes, common)
    if isinstance(conv, TaskSpec):
        return conv
    if conv is not None:
        raise ConvRefused(conv.message, fix=conv.fix)
    gemm = _match_gemm(gm, placeholders, compute, shapes)
    if gemm is not None:
        M, K, N = gemm
        return TaskSpec(family="gemm", shape=(("M", M), ("N", N), ("K", K)), dtype="f32",
                        compute="bf16x6", options=(("in", "bf16"), ("out", "f32"),
                                                   ("b_layout", "kn")),
                        metrics=(("flops", 2.0 * M * N * K),
                                 ("bytes", float(4 * (M * K + K * N + M * N)))),
                        note="fp32 matmul run on the tensor cores as a 6-term bf16 split "
                             "(K' = 6K, fp32 accumulators per K chunk) with fp32 output",
                        **common)
    body, ops, x = _match_elementwise(gm, placeholders, compute, shapes, name)
    numel = x.numel()
    cols = x.shape[-1] if x.dim() >= 1 else 1
    rows = numel // max(1, cols)
    return TaskSpec(family="elementwise", shape=(("rows", rows), ("cols", cols)), dtype="f32",
                    compute="f32", expr=body, ops=ops,
                    metrics=(("bytes", 8.0 * numel), ("flops", 4.0 * ops * numel)),
                    note=f"{ops} torch op(s) fused into one Argus kernel", **common)


def _match_gemm(gm, placeholders, compute, shapes) -> tuple[int, int, int] | None:
    import torch

    if len(placeholders) != 2 or len(compute) != 1:
        return None
    node = compute[0]
    is_mm = (node.op == "call_function" and node.target in (torch.matmul, torch.mm,
                                                             operator.matmul)) or \
        (node.op == "call_method" and node.target in ("matmul", "mm"))
    if not is_mm or [a.name for a in node.args if hasattr(a, "name")] != \
            [p.name for p in placeholders]:
        return None
    a, b = shapes[placeholders[0].name], shapes[placeholders[1].name]
    name = gm.__class__.__name__
    if a.dim() != 2 or b.dim() != 2:
        raise NoTemplate(f"no Argus template for a {a.dim()}-D x {b.dim()}-D matmul yet (only "
                         "2-D A [M, K] @ B [K, N] maps to the GEMM family)",
                         fix="batched and 3-D/4-D matmuls need a bmm adapter in composer.py")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise NoTemplate(f"{name}: matmul of {a.dtype} x {b.dtype}: the GEMM template covers "
                         "fp32 tasks only")
    M, K = a.shape
    N = b.shape[1]
    if K % 8 or N % 8:
        raise NoTemplate(f"matmul with K={K}, N={N}: the tensor-memory accelerator needs rows "
                         "whose byte length is a multiple of 16 (K and N multiples of 8 in bf16)",
                         fix="argus.ops.matmul pads such operands; the agent's template does not "
                             "yet")
    return int(M), int(K), int(N)


def _match_elementwise(gm, placeholders, compute, shapes, name: str):
    import torch

    hint = _family_hint(gm)
    if len(placeholders) != 1:
        raise NoTemplate(f"{name}: no Argus template for this op family ({hint}): the "
                         "elementwise template takes exactly one input tensor")
    x = shapes[placeholders[0].name]
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float32:
        raise NoTemplate(f"{name}: no Argus template for this op family ({hint}): the "
                         "elementwise template covers one fp32 tensor")
    unary, binary, modules = _elementwise_rules(), _binary_rules(), _module_rules()
    names: dict[str, str] = {placeholders[0].name: "x"}
    lines: list[str] = []
    ops = 0

    def operand(a) -> str:
        if hasattr(a, "name") and a.name in names:
            return names[a.name]
        if isinstance(a, (int, float)) and not isinstance(a, bool):
            return repr(float(a))
        raise NoTemplate(f"{name}: no Argus template for this op family ({hint}): operand "
                         f"{a!r} is neither the input, an earlier result nor a number")

    for node in compute:
        target = node.target
        if node.op == "call_module":
            sub = gm.get_submodule(target)
            rule = modules.get(type(sub))
            if rule is None:
                raise NoTemplate(f"{name}: no Argus template for this op family "
                                 f"({type(sub).__name__})", fix="add a rule to "
                                 "composer._module_rules if it is elementwise")
            text = rule(operand(node.args[0]), sub)
        elif target in binary:
            text = f"({operand(node.args[0])} {binary[target]} {operand(node.args[1])})"
        elif target in (torch.pow, operator.pow, "pow"):
            base, exp = operand(node.args[0]), node.args[1]
            if not (isinstance(exp, (int, float)) and float(exp).is_integer()
                    and 1 <= exp <= 4):
                raise NoTemplate(f"{name}: pow with exponent {exp!r} has no DSL translation")
            text = "(" + " * ".join([base] * int(exp)) + ")"
        elif target in unary:
            text = unary[target](operand(node.args[0]), node)
        else:
            raise NoTemplate(f"{name}: no Argus template for this op family ({hint}): "
                             f"{getattr(target, '__name__', target)} is not an elementwise op "
                             "the agent can translate", fix="optimize an Argus kernel file, or "
                             "add a rule to composer.py")
        ops += 1
        var = f"t{ops}"
        names[node.name] = var
        lines.append(f"{var} = {text}")
    outputs = [n for n in gm.graph.nodes if n.op == "output"]
    result = outputs[0].args[0] if outputs else None
    if not hasattr(result, "name") or result.name not in names or not lines:
        raise NoTemplate(f"{name}: no Argus template for this op family ({hint}): the output "
                         "is not one elementwise result")
    lines.append(f"y = {names[result.name]}")
    return "\n".join(lines), ops, x


# ----------------------------------------------------------------------------- Argus files


def compose_argus(path: Path) -> TaskSpec:
    from argus.demo import load_example

    module = load_example(str(path))
    missing = [a for a in ("KERNEL", "OUTPUT", "make_inputs", "reference") if not hasattr(module,
                                                                                           a)]
    if missing:
        raise NoTemplate(f"{path}: an Argus kernel file for `argus optimize` follows the example "
                         f"protocol; it lacks {', '.join(missing)}",
                         fix="see examples/elementwise.py: KERNEL, OUTPUT, make_inputs(size, "
                             "seed, device), reference(*inputs)")
    kernel_fn = module.KERNEL
    inputs = module.make_inputs("large", seed=0, device="cpu")
    symbols: dict[str, int] = {}
    for (pname, spec), t in zip(kernel_fn.tensor_specs.items(), inputs):
        for d, size in zip(spec.shape, t.shape):
            if isinstance(d, str):
                symbols[d] = int(size)
    metrics = []
    for attr, key in (("flops", "flops"), ("bytes_moved", "bytes")):
        if hasattr(module, attr):
            metrics.append((key, float(getattr(module, attr)(*inputs))))
    common = dict(name=path.stem, origin="argus", path=str(path.resolve()),
                  sha256=file_sha256(path), metrics=tuple(metrics))
    fn_module = getattr(getattr(kernel_fn, "fn", None), "__module__", "")
    if fn_module == "argus.kernels.gemm":
        specs = list(kernel_fn.tensor_specs.values())
        in_dt, out_dt = specs[0].dtype.name, specs[2].dtype.name
        layout = "nk" if tuple(specs[1].shape[-2:]) == ("N", "K") else "kn"
        return TaskSpec(family="gemm", shape=tuple((k, symbols[k]) for k in ("M", "N", "K")),
                        dtype=out_dt, compute=in_dt,
                        options=(("in", in_dt), ("out", out_dt), ("b_layout", layout)),
                        kernel="KERNEL", **common)
    tunable = []
    for pname in kernel_fn.constexpr_names:
        default = kernel_fn.signature.parameters[pname].default
        if is_pow2_int(default):
            tunable.append((pname, default))
    if not tunable:
        raise NoTemplate(f"{path}: kernel {kernel_fn.name} has no power-of-two int compile-time "
                         "parameter to tune and is not a library kernel the agent has a family "
                         "for", fix="give tile sizes as int parameters with defaults (BN: int = "
                                    "1024)")
    out = inputs[module.OUTPUT]
    dtype = {"torch.float32": "f32", "torch.bfloat16": "bf16", "torch.float16": "f16"}.get(
        str(out.dtype), str(out.dtype))
    return TaskSpec(family="kernel", shape=tuple(sorted(symbols.items())), dtype=dtype,
                    compute=dtype, kernel="KERNEL", constexprs=tuple(tunable), **common)


def compose(path: str | Path) -> TaskSpec:
    """The TaskSpec of a KernelBench task file or an Argus example file (or NoTemplate)."""
    path = Path(path)
    if not path.exists():
        raise NoTemplate(f"no such file: {path}")
    text = path.read_text()
    if "class Model" in text and "def get_inputs" in text:
        return compose_kernelbench(path)
    if "KERNEL" in text:
        return compose_argus(path)
    raise NoTemplate(f"{path} is neither a KernelBench task (class Model, get_inputs, "
                     "get_init_inputs) nor an Argus example file (KERNEL, make_inputs, "
                     "reference)")


__all__ = ["ConvRefused", "FamilyRefused", "NoTemplate", "SdpaRefused", "compose", "compose_argus",
           "compose_kernelbench"]
