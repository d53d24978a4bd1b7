"""Code generation: lowered ir.Kernel → CUDA C++ with inline PTX (argus_sm90.cuh)."""

from argus.codegen.cuda import AbiArg, Source, render

__all__ = ["AbiArg", "Source", "render"]
