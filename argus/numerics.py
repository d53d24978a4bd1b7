"""Numerical rules that several layers apply alike, defined once.

The relaxed track's rule (KernelBench's pre-2025 check, allclose(y, r, atol=1e-2, rtol=1e-2),
with atol scaled by max(1, rms(r)): upstream's rule on upstream's unit-scale data, and
scale-free on large-magnitude inputs). The judge applies it (argus/bench/kernelbench/
tolerance.py `errors`) and so does the compose-time tf32 self-check (argus/compose/
precision.py `relaxed_ratio`), which must predict the judge's verdict: both read it from
here, so the two cannot drift apart.

The torch model of tf32 rounding (`round_to_tf32`, PTX cvt.rna): the judge's tf32 calibration
rung rounds the reference's operands with it (argus/bench/kernelbench/tolerance.py) and the
tf32 convolution rounds its weight operand with it in the repack (argus/ops/conv.py), so the
candidate and the ruler it is measured by round alike.

A utility (tests/unit/test_import_direction.py): it imports nothing of argus, and works on
torch tensors without importing torch at module level (`round_to_tf32` imports it when
called, as argus.ops does, so importing this module needs no torch).
"""

from __future__ import annotations

RELAXED_ATOL = 1e-2     # absolute, times max(1, rms(r))
RELAXED_RTOL = 1e-2     # relative to |r|


def relaxed_allowance(r, rms: float):
    """The error the relaxed rule allows at each element of the reference `r` (a tensor, its
    finite positions), given rms(r) over those positions: RELAXED_ATOL * max(1, rms) +
    RELAXED_RTOL * |r|. An element passes when |y - r| <= its allowance."""
    return RELAXED_ATOL * max(1.0, rms) + RELAXED_RTOL * r.abs()


def round_to_tf32(t):
    """A torch float32 tensor rounded to tf32 as PTX cvt.rna.tf32.f32 rounds it: 10 mantissa
    bits, to nearest, ties away from zero (add half of the dropped 13 bits' range to the
    magnitude's bits and clear them; a carry moves into the exponent). Non-finite values pass
    unchanged; the bits of argus.dtypes.round_to_tf32 (the interpreter's numpy model). A tensor
    of any other dtype is returned as it is (the judge rounds every float32 input of a model
    and leaves the rest)."""
    import torch

    if t.dtype != torch.float32:
        return t
    bits = t.contiguous().view(torch.int32)
    rounded = ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return torch.where(torch.isfinite(t), rounded, t)


__all__ = ["RELAXED_ATOL", "RELAXED_RTOL", "relaxed_allowance", "round_to_tf32"]
