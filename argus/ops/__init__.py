"""Library operations backed by verified Argus kernels: `argus.ops.matmul`, `argus.ops.bmm`."""

from argus.ops.matmul import bmm, matmul
from argus.ops.scaled_matmul import scaled_matmul
from argus.ops.schedules import Problem, choose, heuristic

__all__ = ["bmm", "matmul", "scaled_matmul", "Problem", "choose", "heuristic"]
