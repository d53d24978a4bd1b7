"""Compare an output with the float64 reference: error measures, the two tracks, precision class.

Error measures (float64 arithmetic, reference `r`, candidate `y`, on positions where `r` is
finite; non-finite reference positions must be matched exactly):
- rel_l2   = ||y - r||_2 / ||r||_2                    (normwise relative error)
- max_elem = max_i |y_i - r_i| / (|r_i| + rms(r))      (worst element, relative to its own size
                                                       or to the output's scale, whichever is
                                                       larger: cancellation-safe)

Strict track (what "solved" means): on every input set, rel_l2 <= tol_l2 and max_elem <= tol_elem
with tol = max(floor(dtype), 16 x the error of PyTorch's own computation in the task's dtype on
that set, with TF32 off). For fp32 the floors are 1e-5 (normwise) and 1e-4 (worst element):
fp32 arithmetic errs ~ sqrt(K) * 6e-8 on a K-term sum (4e-6 at K = 4096), while TF32 (10-bit
mantissa) errs ~ 3e-4 and bf16 ~ 3e-3 on signed data. Ill-conditioned outputs (a mean of
normalized values, ~1e-8) raise the tolerance through the measured fp32 error, never lower it.
On all-positive inputs rounding errors average out (TF32 on a K = 4096 positive GEMM errs only
~1e-5): the signed input sets are what make the strict track separate fp32 from TF32.

Relaxed track (reported beside, never instead): KernelBench's pre-2025 rule,
allclose(y, r, atol=1e-2, rtol=1e-2), on the same input sets, with atol scaled by
max(1, rms(r)): identical to upstream on upstream's unit-scale data, and scale-free on the
large-magnitude sets (where a literal atol of 1e-2 would fail even exact fp32 GEMMs through
elements that cancel to near zero); defined once, in argus/numerics.py (the compose-time tf32
self-check applies the same rule). A strict pass is always a relaxed pass.

Precision class: the candidate's normwise error compared with PyTorch run at lower precisions on
the same inputs (a 10-bit-mantissa run: inputs and parameters rounded to TF32, computed in fp32;
a bf16 run), see `precision_class`.

Invariant: these functions never modify their arguments and work on any device.
"""

from __future__ import annotations

from collections.abc import Callable

import math
from dataclasses import dataclass

import torch

# round_to_tf32: the tf32 rung's operand rounding, defined once beside the relaxed rule (the
# tf32 convolution's repack rounds with the same function); callers read it from here too
from argus.numerics import relaxed_allowance, round_to_tf32  # noqa: F401

CALIBRATION_FACTOR = 16.0
FLOORS: dict[str, tuple[float, float]] = {  # dtype -> (tol_l2 floor, tol_elem floor)
    "torch.float32": (1e-5, 1e-4),
    "torch.float64": (1e-12, 1e-11),
    "torch.float16": (5e-3, 5e-2),
    "torch.bfloat16": (4e-2, 3e-1),
}
CLASS_MARGIN = 4.0


@dataclass(frozen=True)
class Errors:
    """How far one output is from the reference (see the module docstring)."""

    rel_l2: float
    max_elem: float
    relaxed_ok: bool
    nonfinite_mismatch: int = 0  # positions where finiteness (or the inf sign) differs
    exact: bool = False          # bitwise-equal values (integer outputs are judged by this)

    def to_json(self) -> dict[str, object]:
        return {"rel_l2": _num(self.rel_l2), "max_elem": _num(self.max_elem),
                "relaxed_ok": self.relaxed_ok, "nonfinite_mismatch": self.nonfinite_mismatch,
                "exact": self.exact}


@dataclass(frozen=True)
class Tolerance:
    """Strict-track bounds for one input set."""

    tol_l2: float
    tol_elem: float
    integer: bool = False

    def to_json(self) -> dict[str, object]:
        return {"tol_l2": _num(self.tol_l2), "tol_elem": _num(self.tol_elem),
                "integer": self.integer}


def _num(x: float) -> float | str:
    return x if math.isfinite(x) else str(x)


CHUNK = 1 << 25   # elements: larger outputs are measured in chunks (no full-size fp64 copies)


def errors(y: torch.Tensor, ref: torch.Tensor, chunk: int | None = None) -> Errors:
    """Errors of `y` against the reference `ref` (same shape; any dtypes). Outputs larger
    than `chunk` elements (default CHUNK) are measured chunk by chunk, in two passes (the
    norms, then the worst element against the reference's rms): the same quantities without
    the float64 temporaries of the whole tensor (tens of GB at upstream sizes)."""
    if y.shape != ref.shape:
        raise ValueError(f"errors: shape {tuple(y.shape)} vs reference {tuple(ref.shape)}")
    chunk = CHUNK if chunk is None else chunk
    if ref.is_floating_point() and ref.numel() > chunk:
        return _errors_chunked(y, ref, chunk)
    if not ref.is_floating_point() and not ref.is_complex():
        exact = bool(torch.equal(y.to(ref.dtype), ref)) if not y.is_floating_point() else \
            bool(torch.equal(y, ref.to(y.dtype)))
        bad = float("inf") if not exact else 0.0
        return Errors(rel_l2=bad, max_elem=bad, relaxed_ok=exact, exact=exact)
    r = ref.to(torch.float64)
    c = y.to(torch.float64)
    finite_r = torch.isfinite(r)
    finite_c = torch.isfinite(c)
    # Non-finite reference positions must hold the same value (inf of the same sign, or nan).
    same_nonfinite = (~finite_r) & ((c == r) | (torch.isnan(c) & torch.isnan(r)))
    mismatch = int(((~finite_r) & ~same_nonfinite).sum().item()
                   + (finite_r & ~finite_c).sum().item())
    if finite_r.all():
        rf, cf = r, c
    else:
        rf, cf = r[finite_r], c[finite_r]
    exact = mismatch == 0 and bool(torch.equal(cf, rf))
    if rf.numel() == 0:
        return Errors(0.0 if mismatch == 0 else math.inf, 0.0 if mismatch == 0 else math.inf,
                      relaxed_ok=mismatch == 0, nonfinite_mismatch=mismatch, exact=exact)
    diff = (cf - rf).abs()
    diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
    norm_r = float(torch.linalg.vector_norm(rf).item())
    norm_d = float(torch.linalg.vector_norm(diff).item()) if torch.isfinite(diff).all() \
        else math.inf
    if norm_r > 0:
        rel_l2 = norm_d / norm_r
    else:
        rel_l2 = 0.0 if norm_d == 0 else math.inf
    rms = norm_r / math.sqrt(rf.numel())
    denom = rf.abs() + rms
    if rms > 0:
        max_elem = float((diff / denom).max().item())
    else:
        max_elem = 0.0 if float(diff.max().item()) == 0 else math.inf
    # argus/numerics.py: upstream's 1e-2 at upstream's unit scale
    relaxed = bool((diff <= relaxed_allowance(rf, rms)).all().item()) and mismatch == 0
    if mismatch:
        rel_l2, max_elem = math.inf, math.inf
    return Errors(rel_l2=rel_l2, max_elem=max_elem, relaxed_ok=relaxed,
                  nonfinite_mismatch=mismatch, exact=exact)


def _errors_chunked(y: torch.Tensor, ref: torch.Tensor, chunk: int) -> Errors:
    """`errors` for a floating reference, over chunks of the flattened tensors."""
    yf, rf_all = y.detach().reshape(-1), ref.detach().reshape(-1)
    mismatch = 0
    exact = True
    sum_r2 = sum_d2 = 0.0
    diff_finite = True
    n_finite = 0
    max_diff = 0.0
    spans = range(0, rf_all.numel(), chunk)
    for i in spans:
        r = rf_all[i:i + chunk].to(torch.float64)
        c = yf[i:i + chunk].to(torch.float64)
        finite_r, finite_c = torch.isfinite(r), torch.isfinite(c)
        same_nonfinite = (~finite_r) & ((c == r) | (torch.isnan(c) & torch.isnan(r)))
        mismatch += int(((~finite_r) & ~same_nonfinite).sum().item()
                        + (finite_r & ~finite_c).sum().item())
        if not bool(finite_r.all()):
            r, c = r[finite_r], c[finite_r]
        exact = exact and bool(torch.equal(c, r))
        n_finite += r.numel()
        if r.numel() == 0:
            continue
        diff = (c - r).abs()
        if not bool(torch.isfinite(diff).all()):
            diff_finite = False
            max_diff = math.inf
        else:
            sum_d2 += float(diff.square().sum().item())
            max_diff = max(max_diff, float(diff.max().item()))
        sum_r2 += float(r.square().sum().item())
    exact = exact and mismatch == 0
    if n_finite == 0:
        return Errors(0.0 if mismatch == 0 else math.inf, 0.0 if mismatch == 0 else math.inf,
                      relaxed_ok=mismatch == 0, nonfinite_mismatch=mismatch, exact=exact)
    norm_r = math.sqrt(sum_r2)
    norm_d = math.sqrt(sum_d2) if diff_finite else math.inf
    if norm_r > 0:
        rel_l2 = norm_d / norm_r
    else:
        rel_l2 = 0.0 if norm_d == 0 else math.inf
    rms = norm_r / math.sqrt(n_finite)
    max_elem = 0.0
    relaxed = mismatch == 0
    for i in spans:                                   # second pass: needs the rms
        r = rf_all[i:i + chunk].to(torch.float64)
        c = yf[i:i + chunk].to(torch.float64)
        finite_r = torch.isfinite(r)
        if not bool(finite_r.all()):
            r, c = r[finite_r], c[finite_r]
        if r.numel() == 0:
            continue
        diff = (c - r).abs()
        diff = torch.where(torch.isfinite(diff), diff, torch.full_like(diff, math.inf))
        if rms > 0:
            max_elem = max(max_elem, float((diff / (r.abs() + rms)).max().item()))
        relaxed = relaxed and bool((diff <= relaxed_allowance(r, rms)).all().item())
    if rms <= 0:
        max_elem = 0.0 if max_diff == 0 else math.inf
    if mismatch:
        rel_l2, max_elem = math.inf, math.inf
    return Errors(rel_l2=rel_l2, max_elem=max_elem, relaxed_ok=relaxed,
                  nonfinite_mismatch=mismatch, exact=exact)


def strict_tolerance(dtype: torch.dtype | str, native: Errors | None) -> Tolerance:
    """Strict bounds for one set: max(floor(dtype), 16 x PyTorch's own error in that dtype)."""
    key = str(dtype)
    if key not in FLOORS:
        if not str(dtype).startswith("torch.float") and "bfloat" not in key:
            return Tolerance(0.0, 0.0, integer=True)
        key = "torch.float32"
    floor_l2, floor_elem = FLOORS[key]
    tol_l2, tol_elem = floor_l2, floor_elem
    if native is not None:
        if math.isfinite(native.rel_l2):
            tol_l2 = max(tol_l2, CALIBRATION_FACTOR * native.rel_l2)
        if math.isfinite(native.max_elem):
            tol_elem = max(tol_elem, CALIBRATION_FACTOR * native.max_elem)
    return Tolerance(tol_l2, tol_elem)


def strict_ok(err: Errors, tol: Tolerance) -> bool:
    if tol.integer:
        return err.exact
    return err.nonfinite_mismatch == 0 and err.rel_l2 <= tol.tol_l2 \
        and err.max_elem <= tol.tol_elem


def precision_class(candidate: list[Errors], ladder: list[dict[str, Errors | None]],
                    strict_pass: bool) -> str:
    """Which arithmetic the candidate's errors look like: fp32, tf32, bf16 or 'worse than bf16'.

    ladder[i] maps "tf32" and "bf16" to PyTorch's errors at that precision on set i (or None
    when that run was impossible). A candidate is in the lowest class whose errors it stays
    within (times a margin of 4) on every set.
    """
    return precision_class_lazy(candidate, ladder.__getitem__, strict_pass)


def precision_class_lazy(candidate: list[Errors],
                         rung: Callable[[int], dict[str, Errors | None]],
                         strict_pass: bool) -> str:
    """`precision_class` with set i's rungs computed on demand (`rung(i)`: at upstream sizes a
    float64 reference and three forwards per set), set by set, stopping once no class is left:
    the same answer, and a solution that is plainly wrong costs one set's rungs (a non-finite
    mismatch none) instead of every set's."""
    if strict_pass:
        return "fp32"
    alive = ["tf32", "bf16"]
    for i, err in enumerate(candidate):
        if err.nonfinite_mismatch:
            return "worse than bf16"
        rungs = rung(i)
        for name in list(alive):
            r = rungs.get(name)
            if r is None or not math.isfinite(r.rel_l2) or \
                    not err.rel_l2 <= max(CLASS_MARGIN * r.rel_l2, FLOORS["torch.float32"][0]):
                alive.remove(name)
        if not alive:
            return "worse than bf16"
    return alive[0]
