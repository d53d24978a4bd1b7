"""argus.compose: lower a PyTorch program (a KernelBench task's Model) to Argus kernels.

capture (torch.fx, meta device) -> rules (primitive ops) -> partition (fused tile kernels, GEMM
adapter, scans, free views) -> tile/gemm/scan templates -> runtime (ComposedModel, one program
per input shapes) -> solution (a ModelNew source the KernelBench judge loads).
"""

from argus.compose.solution import Composition, compose_task, plan_task

__all__ = ["Composition", "compose_task", "plan_task"]
