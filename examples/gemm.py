"""Example: bf16 GEMM, C[M, N] = A[M, K] @ B[N, K]^T, fp32 accumulation, on the tensor cores.

The kernel itself lives in argus/kernels/gemm.py (the library uses it too): a warp-specialized
TMA + wgmma kernel with an mbarrier pipeline whose stages and parities the compiler derives.
Run it with `argus run gemm` (GPU) or `argus run gemm --interpret`.
"""

from argus.kernels.gemm import GemmSchedule, gemm, tile_coords  # noqa: F401 - re-exported

KERNEL = gemm
OUTPUT = 2
SIZES = {"small": (300, 520, 200), "large": (4096, 4096, 4096)}


def make_inputs(size="small", seed=0, device="cpu"):
    import torch

    M, N, K = SIZES[size] if isinstance(size, str) else size
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, K, generator=g).to(device=device, dtype=torch.bfloat16)
    b = torch.randn(N, K, generator=g).to(device=device, dtype=torch.bfloat16)
    c = torch.full((M, N), float("nan")).to(device=device, dtype=torch.bfloat16)
    return a, b, c


def constexprs(a, b, c):
    return {}


def reference(a, b, c):
    return a.double() @ b.double().T


def baseline(a, b, c):
    """cuBLAS through torch: C = A @ B^T."""
    import torch

    return torch.mm(a, b.T)


def flops(a, b, c):
    return 2 * a.shape[0] * b.shape[0] * a.shape[1]
