"""The tracing frontend: Python functions → ir.Kernel (no AST rewriting)."""

from argus.dsl.kernel import KernelFunction, Tensor, TensorSpec, kernel

__all__ = ["KernelFunction", "Tensor", "TensorSpec", "kernel", "trace"]


def trace(fn: KernelFunction, **constexprs):
    """dsl.trace(fn, specs) -> ir.Kernel (the stage contract of ARCHITECTURE.md §3)."""
    return fn.trace(**constexprs)
