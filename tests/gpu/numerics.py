"""The GPU tier's numeric references, one copy: the torch model of tf32 rounding (`tf32`), the
normwise relative error (`rel`) and the seeded CUDA randn (`rand`). Written here, not imported
from argus (argus.ops.conv.round_to_tf32 is what the kernels' operand repack runs: a reference
borrowed from the code under test proves nothing). tests/unit/test_gpu_numerics.py checks
`tf32` bit for bit on the CPU (ties, signed zeros, subnormals, overflow, inf / NaN payloads)
and against an independent float64 model of cvt.rna.

Import it after `pytest.importorskip("torch")` (a module-level torch import)."""

import torch


def tf32(t):
    """t (float32) rounded to tf32 as PTX cvt.rna.tf32.f32 rounds: 10 mantissa bits, to
    nearest, ties away from zero (add half of the dropped 13 bits' range to the magnitude and
    clear them; a carry moves into the exponent, past the largest finite value to inf).
    Subnormals round alike, signed zeros keep their sign, inf and NaN (payload and sign
    included) pass unchanged. A float32 tensor of t's shape on t's device (the bits of
    argus.dtypes.round_to_tf32, the interpreter's numpy model)."""
    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


def rel(out, ref) -> float:
    """||out - ref|| / ||ref|| with out widened to float64 (ref is float64). A zero ref
    divides by 1e-30, not 0: a finite (huge) error instead of inf / NaN."""
    return ((out.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def rand(*shape, seed=0):
    """Standard normal float32 on the GPU from a CUDA generator seeded with `seed`."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda")
