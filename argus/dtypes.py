"""Element types of Argus tensors and tiles, with their numpy, torch and CUDA spellings."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """An element type. `name` is the IR spelling; `bits` its width."""

    name: str
    bits: int
    kind: str  # "float", "int", "uint", "bool"
    cuda: str
    numpy: str

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    def __repr__(self) -> str:
        return f"ag.{self.name}"

    def __str__(self) -> str:
        return self.name

    def np_dtype(self) -> np.dtype:
        """The numpy type the interpreter computes in (bf16/fp8 are stored as float32)."""
        return np.dtype(self.numpy)

    def torch_dtype(self):
        import torch

        return getattr(torch, _TORCH_NAMES[self.name])


f32 = DType("f32", 32, "float", "float", "float32")
f16 = DType("f16", 16, "float", "__half", "float16")
bf16 = DType("bf16", 16, "float", "__nv_bfloat16", "float32")
f64 = DType("f64", 64, "float", "double", "float64")
e4m3 = DType("e4m3", 8, "float", "__nv_fp8_e4m3", "float32")
i32 = DType("i32", 32, "int", "int", "int32")
i64 = DType("i64", 64, "int", "long long", "int64")
u32 = DType("u32", 32, "uint", "unsigned", "uint32")
i1 = DType("i1", 1, "bool", "bool", "bool")

ALL = {d.name: d for d in (f32, f16, bf16, f64, e4m3, i32, i64, u32, i1)}

_TORCH_NAMES = {
    "f32": "float32", "f16": "float16", "bf16": "bfloat16", "f64": "float64",
    "e4m3": "float8_e4m3fn", "i32": "int32", "i64": "int64", "u32": "uint32", "i1": "bool",
}


def from_name(name: str) -> DType:
    try:
        return ALL[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(ALL)}") from None


def from_torch(torch_dtype) -> DType:
    for name, tname in _TORCH_NAMES.items():
        if str(torch_dtype) == f"torch.{tname}":
            return ALL[name]
    raise ValueError(f"torch dtype {torch_dtype} has no Argus equivalent")


def round_to(values: np.ndarray, dtype: DType) -> np.ndarray:
    """Round float32 values as the device would store them in `dtype` (the interpreter's casts)."""
    if dtype.name == "bf16":
        bits = np.asarray(values, dtype=np.float32).view(np.uint32)
        # round to nearest even on the upper 16 bits, as cvt.rn.bf16.f32 does
        rounding = ((bits >> 16) & 1) + 0x7FFF
        out = ((bits + rounding) & 0xFFFF0000).astype(np.uint32)
        nan = np.isnan(values)
        out = out.view(np.float32).copy()
        out[nan] = np.nan
        return out
    if dtype.name == "f16":
        return np.asarray(values).astype(np.float16).astype(np.float32)
    if dtype.name == "e4m3":
        return _round_e4m3(np.asarray(values, dtype=np.float32))
    return np.asarray(values).astype(dtype.np_dtype())


def round_to_tf32(values: np.ndarray) -> np.ndarray:
    """float32 values rounded to tf32 as PTX cvt.rna.tf32.f32 rounds them (the interpreter's
    model of ag.round_tf32): 10 mantissa bits, to nearest, ties away from zero, as
    argus/bench/kernelbench/tolerance.py `round_to_tf32` does (the calibration run the judge
    classes tf32 candidates by) and as cuBLAS / cuDNN round their operands before a tf32 MMA.
    Non-finite values pass unchanged. A tf32 wgmma reading an unrounded operand drops the 13
    low bits instead: `truncate_to_tf32`."""
    x = np.asarray(values, dtype=np.float32)
    bits = x.view(np.uint32)
    rounded = ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), rounded, x).astype(np.float32)


def truncate_to_tf32(values: np.ndarray) -> np.ndarray:
    """float32 values as a tf32 wgmma reads an unrounded operand (the interpreter's model of
    `.tf32`): the 13 low mantissa bits dropped, toward zero. The H200 measured it (2026-12-02,
    docs/perf/conv.md): raw fp32 operands erred 7-8e-4 normwise where operands rounded first
    (cuBLAS / cuDNN: cvt.rna) err 2.9e-4; dropping the bits is a bias toward zero that does not
    average out over K. An operand rounded first (`round_to_tf32`, ag.round_tf32) has those
    bits zero already and is read exactly. Non-finite values pass unchanged."""
    x = np.asarray(values, dtype=np.float32)
    dropped = (x.view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)
    return np.where(np.isfinite(x), dropped, x).astype(np.float32)


E4M3_MAX = 448.0


def _round_e4m3(x: np.ndarray) -> np.ndarray:
    """float32 -> e4m3 (OCP FP8 E4M3FN: 3 mantissa bits, bias 7, no infinities) -> float32, as
    `cvt.rn.satfinite.e4m3x2.f32` does (PTX ISA "cvt"): round to nearest even; finite values
    and infinities beyond the range saturate to +-448; NaN stays NaN. Normal binades [2^e,
    2^(e+1)) for e >= -6 have a quantum of 2^(e-3); below 2^-6 the subnormals a quantum of 2^-9.
    The generated CUDA converts with the same instruction (ag::f32_to_e4m3, the device header).
    torch 2.13's .to(torch.float8_e4m3fn) saturates alike; older torch made |x| > 464 and
    infinities NaN (pytorch PR 178817): compare with torch on x.clamp(-448, 448).
    """
    x64 = np.clip(x.astype(np.float64), -E4M3_MAX, E4M3_MAX)  # NaN passes through
    mag = np.abs(x64)
    with np.errstate(divide="ignore", invalid="ignore"):
        exponent = np.floor(np.log2(np.where(mag > 0, mag, 1.0)))
    quantum = np.exp2(np.maximum(exponent, -6.0) - 3.0)
    # x / quantum is exact in float64 and np.rint rounds half to even; a value that rounds up
    # into the next binade (e.g. 15.5 -> 16) is still representable, and |x| <= 448 cannot
    # round past 448 (448 is a multiple of its quantum 32)
    return (np.rint(x64 / quantum) * quantum).astype(np.float32)
