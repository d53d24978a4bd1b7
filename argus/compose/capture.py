"""Capture a task's forward as a compose Graph: torch.fx traces the Model with every submodule
traced through (nn.Linear becomes F.linear, nn.BatchNorm2d F.batch_norm, ... with parameters as
get_attr nodes named by their state-dict keys), each fx node is run on meta tensors for its
shape, and a rule per torch op (argus/compose/rules.py) rewrites it into the primitive ops of
argus/compose/graph.py. An op without a rule becomes a `torch` node and is named in
`Graph.unsupported`.
"""

from __future__ import annotations

import copy
import operator
from typing import Any

import torch
import torch.fx

from argus.compose.graph import Graph, Node
from argus.errors import ArgusError


class CaptureError(ArgusError):
    """torch.fx could not trace the Model (data-dependent control flow, ...)."""


LEAF_MODULES = (torch.nn.modules.batchnorm._BatchNorm, torch.nn.modules.instancenorm._InstanceNorm)


class _ThroughTracer(torch.fx.Tracer):
    """Trace into every submodule: the graph holds functional ops only."""

    def is_leaf_module(self, m, qualname) -> bool:  # noqa: ARG002
        # norm modules branch on their input's rank in Python: lowered from the module
        return isinstance(m, LEAF_MODULES)


def trace(model: torch.nn.Module) -> torch.fx.GraphModule:
    try:
        graph = _ThroughTracer().trace(model)
    except Exception as exc:  # noqa: BLE001 - data-dependent control flow and friends
        raise CaptureError(f"torch.fx cannot trace {type(model).__name__}: "
                           f"{type(exc).__name__}: {str(exc)[:300]}",
                           fix="keep the forward free of data-dependent Python control flow") \
            from None
    return torch.fx.GraphModule(model, graph)


def _meta(x):
    if isinstance(x, torch.Tensor):
        return x.to("meta") if x.device.type != "meta" else x
    return x


def capture(model: torch.nn.Module, inputs: list[Any]) -> Graph:
    """The Graph of `model(*inputs)` for these input shapes (inputs may be real or meta)."""
    from argus.compose.rules import Lowering

    gm = trace(model)
    meta_model = copy.deepcopy(model).to("meta") if any(
        p.device.type != "meta" for p in list(model.parameters()) + list(model.buffers())) \
        else model
    state = {name for name, _ in model.named_parameters()} | \
        {name for name, _ in model.named_buffers()}
    g = Graph()
    low = Lowering(g, training=model.training)
    env: dict[str, Any] = {}      # fx node name -> IR value (Node, number, tuple, ...)
    meta: dict[str, Any] = {}     # fx node name -> meta value
    placeholders = iter(inputs)
    index = 0

    def ir(a):
        return torch.fx.node.map_arg(a, lambda n: env[n.name])

    def mv(a):
        return torch.fx.node.map_arg(a, lambda n: meta[n.name])

    nodes = {n.name: n for n in gm.graph.nodes}
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            x = next(placeholders, None)
            if x is None:
                raise CaptureError(f"the forward takes more inputs than get_inputs() gives "
                                   f"({n.name})", fix="give every forward argument")
            meta[n.name] = _meta(x)
            if isinstance(x, torch.Tensor):
                env[n.name] = g.add("leaf", (), x.shape, x.dtype, input=index)
                g.inputs.append(env[n.name])
            else:
                env[n.name] = x
            index += 1
            continue
        if n.op == "get_attr":
            if n.target not in state:   # a tensor the forward builds from numbers
                const = _fetch(gm, n.target)
                meta[n.name] = _meta(const)
                env[n.name] = (float(const.item()) if const.numel() == 1 and
                               const.dtype.is_floating_point else
                               g.add("leaf", (), const.shape, const.dtype, const=const))
                continue
            value = _fetch(meta_model, n.target)
            meta[n.name] = value
            env[n.name] = (g.add("leaf", (), value.shape, value.dtype, param=n.target)
                           if isinstance(value, torch.Tensor) else value)
            continue
        if n.op == "output":
            out = env[n.args[0].name] if isinstance(n.args[0], torch.fx.Node) else None
            if not isinstance(out, Node):
                raise CaptureError("the forward does not return one tensor",
                                   fix="return a single tensor")
            g.output = out
            break
        args, kwargs = mv(n.args), mv(n.kwargs)
        with torch.device("meta"):   # tensors the forward creates are meta tensors too
            result = _call(n, args, kwargs, meta_model)
        if isinstance(result, tuple) and len(result) == 2 and result[0] is _MODULE:
            meta[n.name] = result[1]
            env[n.name] = _norm_module(g, low, n.target, _fetch(meta_model, n.target),
                                       ir(n.args), result[1])
            continue
        meta[n.name] = result
        env[n.name] = low.lower(n.op, n.target, ir(n.args), ir(n.kwargs), result)
        if _written(n) is not None:
            _rebind_written(n, _written(n), env, meta, nodes, order)
    return g


def _rebind_written(n, written, env: dict, meta: dict, nodes: dict, order: dict) -> None:
    """After `n` wrote `written`'s tensor in place: torch.fx keeps that tensor's own node for
    its later uses (`b.add_(1); return b * 2` reads `b`), so from here on every node that is
    that very tensor (b, and c = b.contiguous(), which is b) stands for the written value. A
    view of it (or of what it views) read after `n` would need the write too: refused."""
    target = meta[written.name]
    for name, value in list(meta.items()):
        if name == n.name or not isinstance(value, torch.Tensor):
            continue
        if value is target:
            env[name] = env[n.name]
        elif _aliases(value, target) and any(order[u] > order[n] for u in nodes[name].users):
            raise CaptureError(f"{n.name} ({n.target if isinstance(n.target, str) else n.op}) "
                               f"writes {written.name} in place, and {name}, a view sharing "
                               f"its memory, is read afterwards: the compose graph has no "
                               f"aliasing", fix="write the op out of place (b = b.add(1), "
                                                 "F.relu(x) without inplace=True)")


def _written(n) -> torch.fx.Node | None:
    """The fx node whose tensor `n` writes in place (x.add_(1), F.relu(x, inplace=True)), or
    None. (`x += 1` is not one: torch.fx records it as x + 1, a new tensor, so an alias of x
    taken before it keeps the old value in the traced graph itself.)"""
    first = n.args[0] if n.args else None
    if not isinstance(first, torch.fx.Node):
        return None
    if n.op == "call_method" and n.target.endswith("_") and not n.target.endswith("__"):
        return first
    if n.op == "call_function" and n.kwargs.get("inplace") is True:
        return first
    return None


def _aliases(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether a is a view of b or b of a, or both of one base (meta tensors included)."""
    base_a, base_b = a._base if a._base is not None else a, b._base if b._base is not None else b
    return base_a is base_b


_MODULE = object()


def _call(n, args, kwargs, meta_model):
    """Run one fx node on meta values (its shape and dtype)."""
    if n.op == "call_method":
        self_, *rest = args
        return getattr(self_, n.target)(*rest, **kwargs)
    if n.op == "call_function":
        return n.target(*args, **kwargs)
    # call_module: a norm module (LEAF_MODULES), lowered as its functional form
    return _MODULE, _fetch(meta_model, n.target)(*args, **kwargs)


def _norm_module(g: Graph, low, qualname: str, m, args, result):
    import torch.nn.functional as F

    def leaf(attr):
        t = getattr(m, attr, None)
        if not isinstance(t, torch.Tensor):
            return None
        return g.add("leaf", (), t.shape, t.dtype, param=f"{qualname}.{attr}")

    w, b, rm, rv = leaf("weight"), leaf("bias"), leaf("running_mean"), leaf("running_var")
    x = args[0]
    if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
        training = m.training or rm is None
        return low.lower("call_function", F.batch_norm, (x, rm, rv, w, b, training, 0.1, m.eps),
                         {}, result)
    use_input_stats = m.training or not m.track_running_stats
    return low.lower("call_function", F.instance_norm, (x, rm, rv, w, b, use_input_stats, 0.1,
                                                       m.eps), {}, result)


def _fetch(model, target: str):
    obj = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def capture_task(module, model: torch.nn.Module | None = None) -> tuple[Graph, torch.nn.Module]:
    """A loaded KernelBench task module -> (Graph at its own sizes, the meta Model)."""
    with torch.device("meta"):
        torch.manual_seed(0)
        model = model or module.Model(*module.get_init_inputs())
        inputs = list(module.get_inputs())
    return capture(model, inputs), model


__all__ = ["CaptureError", "capture", "capture_task", "trace", "operator"]
