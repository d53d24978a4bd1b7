"""Library operations backed by verified Argus kernels: `argus.ops.matmul`, `argus.ops.bmm`,
`argus.ops.scaled_matmul`, and `argus.ops.tune_matmul`, which picks and caches a schedule per
shape on this GPU.

`argus.ops.moe` is the MoE op (a function), bound over the package attribute that would name the
module argus/ops/moe.py; that module (its card classes, schedule rules, Layer, experts) is
`argus.ops.moe_module`."""

import importlib

from argus.ops.attention import attention
from argus.ops.attention_decode import attention_decode
from argus.ops.attention_fp8 import attention_fp8
from argus.ops.conv import (conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d,
                             conv_transpose3d)
from argus.ops.matmul import bmm, matmul
from argus.ops.moe import moe
from argus.ops.quantize_fp8 import quantize_fp8
from argus.ops.scaled_matmul import scaled_matmul
from argus.ops.schedules import Problem, choose, heuristic
from argus.ops.tune import TuneResult, tune_matmul

# after `from argus.ops.moe import moe` the attribute argus.ops.moe is the function; the import
# system still holds the module (`import argus.ops.moe as m` would give the function)
moe_module = importlib.import_module("argus.ops.moe")

__all__ = ["attention", "attention_decode", "attention_fp8", "bmm", "matmul", "moe", "moe_module",
           "quantize_fp8", "scaled_matmul", "tune_matmul", "TuneResult", "Problem", "choose",
           "heuristic", "conv1d", "conv2d", "conv3d",
           "conv_transpose1d", "conv_transpose2d", "conv_transpose3d"]
