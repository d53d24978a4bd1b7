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

from collections.abc import Iterator
from typing import Any

import torch

from argus.bench.kernelbench import guards, tolerance


# Elements per chunk of a pass over a whole output (the constant probe's mean, fingerprints):
# no temporary of the whole tensor (at upstream sizes several GB).
CHUNK = 1 << 26


def probe_outputs(ref: torch.Tensor, inputs: list[Any]) -> dict[str, torch.Tensor]:
    """name -> trivial output for one reference output (stale probes are added by the judge)."""
    return dict(iter_probes(ref, inputs))


def iter_probes(ref: torch.Tensor, inputs: list[Any], dtype: torch.dtype | None = None
                ) -> Iterator[tuple[str, torch.Tensor]]:
    """The probes of `probe_outputs` one at a time (each as large as the reference: at
    upstream sizes they should not all live at once), in `dtype` (default the reference's):
    the output's dtype, which is what a trivial answer would be returned in, and half the
    bytes of a float64 probe of a float32 task."""
    dtype = dtype or ref.dtype
    yield "zeros", torch.zeros_like(ref, dtype=dtype)
    if ref.is_floating_point() and ref.numel() > 1:  # a scalar's mean is the answer itself
        total, count = 0.0, 0
        flat = ref.reshape(-1)
        for i in range(0, flat.numel(), CHUNK):          # the mean of the finite values
            part = flat[i:i + CHUNK]
            part = part[part.isfinite()]
            total += float(part.double().sum())
            count += part.numel()
        yield "constant", torch.full_like(ref, total / count if count else 0.0, dtype=dtype)
    for i, x in enumerate(inputs):
        if isinstance(x, torch.Tensor) and x.shape == ref.shape and x.is_floating_point() \
                == ref.is_floating_point():
            yield f"echo:{i}", x.to(device=ref.device, dtype=dtype)


def probe_passes(probe: torch.Tensor, ref: torch.Tensor, tol: tolerance.Tolerance
                 ) -> tuple[bool, bool]:
    """(passes the strict track, passes the relaxed track) for one probe on one set."""
    err = tolerance.errors(probe, ref)
    strict = tolerance.strict_ok(err, tol)
    return strict, err.relaxed_ok or strict


def fingerprint(t: torch.Tensor, chunk: int | None = None) -> tuple[Any, ...]:
    """Cheap bitwise fingerprint (shape, dtype and two weighted sums of the raw bits, in
    int64 with wrap-around), computed over chunks of `chunk` elements (the int64 copies of a
    whole multi-GB output would take three times its size again)."""
    chunk = chunk or CHUNK
    flat = t.detach().contiguous().reshape(-1)
    if flat.numel() == 0:
        return (tuple(t.shape), str(t.dtype), 0, 0)
    view = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[flat.element_size()]
    total = weighted = 0
    for i in range(0, flat.numel(), chunk):
        part = flat[i:i + chunk]
        bits = part.view(view).to(torch.int64) if part.dtype != torch.bool else \
            part.to(torch.int64)
        weights = torch.arange(i, i + bits.numel(), device=bits.device,
                               dtype=torch.int64) % 65521 + 1
        total += int(bits.sum().item())
        weighted += int((bits * weights).sum().item())
    return (tuple(t.shape), str(t.dtype), _wrap64(total), _wrap64(weighted))


def _wrap64(x: int) -> int:
    """x modulo 2^64 as a signed int64 (what one torch int64 sum of it all would give)."""
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


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
