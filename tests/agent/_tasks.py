"""KernelBench-format task files the agent tests write into a temporary directory, so that the
tests need no KernelBench checkout."""

RELU_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)


batch_size = 64
dim = 4096


def get_inputs():
    return [torch.rand(batch_size, dim)]


def get_init_inputs():
    return []
"""

# The upstream level-1 sizes (4096 x 393216): a CPU run shrinks them for its checks, and the
# cost model sees enough work for many distinct candidates.
BIG_RELU_TASK = RELU_TASK.replace("batch_size = 64", "batch_size = 4096").replace(
    "dim = 4096", "dim = 393216")

MATMUL_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 4096


def get_inputs():
    return [torch.rand(N, N), torch.rand(N, N)]


def get_init_inputs():
    return []
"""
