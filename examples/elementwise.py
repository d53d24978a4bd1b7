"""Fused elementwise: y = gelu(x * scale + bias), with a tanh-approximated GELU.

One CTA of 256 threads handles a (ROWS x BN) tile; the bias row is loaded once per CTA and
broadcast over the rows. Shapes that are not multiples of the tile are masked.
"""

import math

import argus as ag


@ag.kernel(threads=256)
def bias_gelu(X: ag.Tensor["M", "N", ag.f32], bias: ag.Tensor[1, "N", ag.f32],
              Y: ag.Tensor["M", "N", ag.f32], scale: float = 1.0, ROWS: int = 4, BN: int = 1024):
    pid_m, pid_n = ag.grid(ag.cdiv(X.shape[0], ROWS), ag.cdiv(X.shape[1], BN))
    row0, col0 = pid_m * ROWS, pid_n * BN
    x = ag.load(X, (row0, col0), (ROWS, BN))
    b = ag.load(bias, (0, col0), (1, BN))
    h = x * scale + b
    # gelu(h) = 0.5 h (1 + tanh(sqrt(2/pi) (h + 0.044715 h^3)))
    inner = (h + h * h * h * 0.044715) * math.sqrt(2.0 / math.pi)
    y = h * 0.5 * (ag.tanh(inner) + 1.0)
    ag.store(Y, (row0, col0), y)


KERNEL = bias_gelu
OUTPUT = 2  # index of the output among the inputs
SIZES = {"small": (37, 1500), "large": (8192, 8192)}


def make_inputs(size="small", seed=0, device="cpu"):
    import torch

    M, N = SIZES[size]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, generator=g).to(device)
    bias = torch.randn(1, N, generator=g).to(device)
    y = torch.full((M, N), float("nan")).to(device)
    return x, bias, y


def constexprs(x, bias, y):
    return {"scale": 1.0}


def reference(x, bias, y):
    import torch

    return torch.nn.functional.gelu(x.double() + bias.double(), approximate="tanh")


def baseline(x, bias, y):
    """What a PyTorch user writes (eager)."""
    import torch

    return torch.nn.functional.gelu(x + bias, approximate="tanh")


def bytes_moved(x, bias, y):
    return 2 * x.numel() * 4 + bias.numel() * 4
