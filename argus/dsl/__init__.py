"""The tracing frontend: Python functions → ir.Kernel (no AST rewriting). `ag.kernel` and
`ag.KernelFunction`, which also compile and run, sit on top in argus/kernel_api.py."""

from argus.dsl.kernel import KernelDef, Tensor, TensorSpec

__all__ = ["KernelDef", "Tensor", "TensorSpec", "trace"]


def trace(fn: KernelDef, **constexprs):
    """dsl.trace(fn, specs) -> ir.Kernel (the stage contract of ARCHITECTURE.md §3)."""
    return fn.trace(**constexprs)
