"""Row RMSNorm: y = x * rsqrt(mean(x^2) + eps) * w, each CTA normalizing ROWS rows (N <= BN).

The whole row lives in registers (one tile of BN columns), so x is read once and y written
once: a memory-bound kernel whose floor is the copy time of x and y. Out-of-bounds columns load
as 0 and add nothing to the sum of squares.

The row mean of squares is a row reduction ([ROWS, 1], one value per row); the division and
the rsqrt run once per row and broadcast over the columns. (Before the layouts-as-data rework,
c000f4e, arithmetic on row values alone was labelled "blocked" by the elementwise rule in
analysis/layouts.py and codegen refused the [ROWS, 1] tile.)
"""

import argus as ag


@ag.kernel(threads=256)
def rmsnorm(X: ag.Tensor["M", "N", ag.f32], W: ag.Tensor[1, "N", ag.f32],
            Y: ag.Tensor["M", "N", ag.f32], eps: float = 1e-6, ROWS: int = 1, BN: int = 8192):
    (pid,) = ag.grid(ag.cdiv(X.shape[0], ROWS))
    row0 = pid * ROWS
    x = ag.load(X, (row0, 0), (ROWS, BN))
    w = ag.load(W, (0, 0), (1, BN))
    ms = (x * x).sum(axis=1) / X.shape[1]      # [ROWS, 1]: one value per row
    ag.store(Y, (row0, 0), x * ag.rsqrt(ms + eps) * w)


KERNEL = rmsnorm
OUTPUT = 2
SIZES = {"small": (37, 3000), "large": (8192, 8192)}
EPS = 1e-6


def block_n(N: int) -> int:
    """The smallest legal tile width covering N: a power of two, at least 256 threads x 4."""
    bn = 1024
    while bn < N:
        bn *= 2
    return bn


def make_inputs(size="small", seed=0, device="cpu"):
    import torch

    M, N = SIZES[size]
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, N, generator=g).to(device)
    w = (1.0 + 0.5 * torch.randn(1, N, generator=g)).to(device)
    y = torch.full((M, N), float("nan")).to(device)
    return x, w, y


def constexprs(x, w, y):
    return {"eps": EPS, "BN": block_n(x.shape[1])}


def reference(x, w, y):
    x64 = x.double()
    return x64 * (x64.pow(2).mean(dim=1, keepdim=True) + EPS).rsqrt() * w.double()


def baseline(x, w, y):
    """What a PyTorch user writes (eager): the fused functional RMSNorm."""
    import torch

    return torch.nn.functional.rms_norm(x, (x.shape[1],), w.view(-1), eps=EPS)


def bytes_moved(x, w, y):
    return 2 * x.numel() * 4 + w.numel() * 4
