"""Trivial answers: what a solution that computes nothing would output, and how to spot one.

Probes are the outputs of non-solutions: zeros, a constant (the mean of the reference), an input
echoed back (when its shape and dtype match the output), and a stale answer (the reference
output for a different input set). For every input set the judge asks whether each probe would
pass the tolerance. A probe that passes on every input set makes the task *degenerate* for that
probe: the check cannot tell that trivial answer from a correct one, so the task is listed
separately and never counted as solved, whatever the solution does.

Rule (sound by construction): a solution is correct only if it passes on every input set; a task
is verifiable only if every probe fails on at least one input set. Then any solution that outputs
a probe fails on that set. The mixed input distributions (signed, heavy-tailed, large) are what
make most upstream-degenerate tasks verifiable: ReLU is not the identity on signed inputs.

`trivial_kind` names what a failing output is, for the reason code: zeros_output,
constant_output, echo_input or cached_output (bitwise the same output as for an earlier,
different input set).

Invariant: probes read references and inputs; they never see the candidate's code.
"""

from __future__ import annotations

from typing import Any

import torch

from argus.bench.kernelbench import guards, tolerance


def probe_outputs(ref: torch.Tensor, inputs: list[Any]) -> dict[str, torch.Tensor]:
    """name -> trivial output for one reference output (stale probes are added by the judge)."""
    probes: dict[str, torch.Tensor] = {"zeros": torch.zeros_like(ref)}
    if ref.is_floating_point() and ref.numel() > 1:  # a scalar's mean is the answer itself
        finite = ref[torch.isfinite(ref)]
        mean = finite.mean() if finite.numel() else torch.zeros((), dtype=ref.dtype)
        probes["constant"] = torch.full_like(ref, float(mean))
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.shape == ref.shape and x.is_floating_point() \
                == ref.is_floating_point():
            probes[f"echo:{i}"] = x.to(device=ref.device, dtype=ref.dtype)
    return probes


def probe_passes(probe: torch.Tensor, ref: torch.Tensor, tol: tolerance.Tolerance
                 ) -> tuple[bool, bool]:
    """(passes the strict track, passes the relaxed track) for one probe on one set."""
    err = tolerance.errors(probe, ref)
    strict = tolerance.strict_ok(err, tol)
    return strict, err.relaxed_ok or strict


def fingerprint(t: torch.Tensor) -> tuple[Any, ...]:
    """Cheap bitwise fingerprint (shape, dtype and two weighted sums of the raw bits)."""
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return (tuple(t.shape), str(t.dtype), 0, 0)
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    bits = flat.view(view).to(torch.int64) if flat.dtype != torch.bool else flat.to(torch.int64)
    weights = torch.arange(bits.numel(), device=bits.device, dtype=torch.int64) % 65521 + 1
    return (tuple(t.shape), str(t.dtype), int(bits.sum().item()),
            int((bits * weights).sum().item()))


def trivial_kind(out: torch.Tensor, ref: torch.Tensor, inputs: list[Any],
                 earlier: list[tuple[Any, ...]]) -> str | None:
    """Reason code when a (failing) output is a trivial answer, else None."""
    if out.numel() == 0:
        return None
    if not bool((ref == 0).all()) and bool((out == 0).all()):
        return "zeros_output"
    flat = out.reshape(-1)
    if flat.numel() > 1 and bool((flat == flat[0]).all()) and \
            not bool((ref.reshape(-1) == ref.reshape(-1)[0]).all()):
        return "constant_output"
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.shape == out.shape and x.dtype == out.dtype \
                and guards.same_bits(x.to(out.device), out):
            return "echo_input"
    if fingerprint(out) in earlier:
        return "cached_output"
    return None
