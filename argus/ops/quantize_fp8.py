"""`argus.ops.quantize_fp8(x)`: rows to e4m3 with one f32 scale per 128 columns ("1x128"), the
activation side of `argus.ops.scaled_matmul`'s block-scaled path, on the GPU with an Argus
kernel (argus/kernels/moe_fp8.py `quantize_1x128_kernel`).

Returns (xq, scale): xq [M, K] torch.float8_e4m3fn and scale [M, K/128] float32 with

    x[i, k] ~= xq[i, k].float() * scale[i, k // 128]

where each group's largest magnitude maps to +-448 (scale = max(amax, 1e-4) / 448; the
conversion rounds to nearest even and saturates, see argus.dtypes.round_to). `scale` is an
MN-major view (scale.stride(0) == 1) of a [K/128, M'] buffer, M' = M rounded up to 4, which is
the layout scaled_matmul reads without a copy: `scaled_matmul(xq, wq, scale, w_scale)`.

x: [M, K] bfloat16 or float32 CUDA tensor with a contiguous last dimension, K a multiple of 128.
Every input that cannot be right raises a LaunchError that says what and how to fix it.

The rounding (argus/kernels/moe_fp8.py, the one definition the kernels, the interpreter and
`reference` share): amax = max(max |x_group|, 1e-4) in f32; scale = amax / 448 and
inverse = 448 / amax, each ONE correctly rounded f32 division (the kernel's `/` is div.rn.f32,
NVRTC's default -prec-div=true; the interpreter's is numpy's f32 division); q = e4m3(x * inverse)
with one f32 product. DeepGEMM's per_token_cast_to_fp8 writes the same formula in torch, but on
CUDA torch evaluates `amax / 448.0` (a tensor over a Python number) as amax * fl(1 / 448)
(aten's div_true_kernel_cuda shortcut, "may lose one bit") and `448.0 / amax` as
448 * reciprocal(amax): different last bits, depending on the device. `reference` below divides
in float64 and rounds once to f32, which is the correctly rounded f32 quotient on any device.
"""

from __future__ import annotations

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.moe_fp8 import GROUP, quantize_1x128_kernel

_WHO = "argus.ops.quantize_fp8"
_SOURCES = {"torch.bfloat16": dtypes.bf16, "torch.float32": dtypes.f32}
# groups of 128 columns per CTA: a [4, 128] tile, 16 values a lane of its one warp
GROUPS_PER_CTA = 4


def _check(x) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise LaunchError(f"{_WHO}: x must be a torch.Tensor, got {type(x).__name__}")
    if not x.is_cuda:
        raise LaunchError(f"{_WHO}: x is on {x.device}; Argus kernels run on a CUDA device "
                          f"(sm_90a)", fix="x.cuda()")
    if str(x.dtype) not in _SOURCES:
        raise LaunchError(f"{_WHO}: x is {x.dtype}; it takes torch.bfloat16 or torch.float32",
                          fix="x.to(torch.bfloat16)")
    if x.dim() != 2:
        raise LaunchError(f"{_WHO}: x must be 2-d [M, K], got shape {tuple(x.shape)}",
                          fix="flatten the leading dims: x.reshape(-1, x.shape[-1])")
    if x.shape[1] % GROUP:
        raise LaunchError(f"{_WHO}: K = {x.shape[1]} is not a multiple of {GROUP} (one scale "
                          f"per {GROUP} columns)", fix=f"pad K to a multiple of {GROUP}")
    if x.stride(1) != 1 and x.shape[1] > 1:
        raise LaunchError(f"{_WHO}: x has strides {x.stride()}: the columns must be contiguous",
                          fix="x.contiguous()")


def reference(x):
    """(q [M, K/128, 128] float8_e4m3fn, scale [M, K/128] float32) for x [M, K], in torch eager,
    rounding for rounding the kernel's formula (module docstring), on the CPU and the GPU alike:
    the bit-exact definition the tests and scripts/gpu_fp8_quant_bench.py hold the kernels to.

    Both quotients are float64 tensor-over-tensor divisions rounded once to f32: a float64
    quotient of two f32 values rounds to the correctly rounded f32 quotient (53 >= 2 * 24 + 2
    bits), and a tensor divisor keeps torch off its multiply-by-reciprocal path for a Python
    number divisor on CUDA."""
    import torch

    from argus.kernels.moe_fp8 import AMAX_FLOOR, E4M3_MAX

    xt = x.float().view(x.shape[0], -1, GROUP)
    amax = xt.abs().amax(dim=2).clamp(min=AMAX_FLOOR).double()
    e4m3_max = torch.full_like(amax, E4M3_MAX)
    inverse = (e4m3_max / amax).float()
    q = (xt * inverse.unsqueeze(2)).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return q, (amax / e4m3_max).float()


def quantize_fp8(x):
    """(xq, scale) for x [M, K]: see the module docstring."""
    import torch

    _check(x)
    m, k = x.shape
    xq = torch.empty(m, k, dtype=torch.float8_e4m3fn, device=x.device)
    # 16-byte rows of the transposed scales (TMA pitch), as DeepGEMM pads them
    scale_t = torch.empty(k // GROUP, (m + 3) // 4 * 4, dtype=torch.float32, device=x.device)
    if m and k:
        kernel = quantize_1x128_kernel(_SOURCES[str(x.dtype)], GROUPS_PER_CTA)
        with torch.cuda.device(x.device):
            kernel(x.unflatten(1, (k // GROUP, GROUP)), xq.view(m, k // GROUP, GROUP), scale_t)
    return xq, scale_t[:, :m].t()
