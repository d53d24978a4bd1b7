"""ResNet-50's c2 3x3 convolution as a task for `argus optimize` (the agent's conv family).

The layer: 64 -> 64 channels, 3x3 filter, stride 1, padding 1, no bias (a batch norm follows
it in ResNet), batch 32 of 56 x 56 images, bf16, channels-last input and weight (the layout
argus.ops.conv reads in place and cuDNN runs fastest). It is the lowest implicit-GEMM row of
the ResNet-50 table in docs/perf/conv.md ("ResNet-50 with the strided rowbox and the pointwise
tiles as defaults", H200, 2026-12-05): 0.82x cuDNN with argus.ops.conv.schedule_for's schedule
(`scripts/gpu_conv_bench.py`'s "c2 3x3 64" row: 32, 64, 56, 56, 64, 3, 3, 1, 1).

The file has KernelBench's form (Model, get_inputs, get_init_inputs), so the composer maps its
one nn.Conv2d to the conv family (argus/agent/families/conv.py match_kernelbench), and the
eager baseline `argus optimize` measures on a GPU is torch's convolution of these tensors:
cuDNN.

    argus optimize examples/conv2d_resnet.py --device cuda --start default --iterations 24 \\
        --out runs/conv2d_resnet
    argus optimize examples/conv2d_resnet.py --device cpu --iterations 2 --out /tmp/c2
        # no GPU: the checks run in the interpreter at shrunk sizes, times are estimates
"""

import torch
import torch.nn as nn

batch_size = 32
in_channels = 64
out_channels = 64
height = 56
width = 56
kernel_size = 3


class Model(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size, padding=kernel_size // 2,
                              bias=False, dtype=torch.bfloat16)
        self.conv.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width, dtype=torch.bfloat16)
    return [x.to(memory_format=torch.channels_last)]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
