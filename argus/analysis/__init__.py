"""Facts about a kernel: layout inference (the only analysis that edits the kernel)."""

from argus.analysis.layouts import infer_layouts

__all__ = ["infer_layouts"]
