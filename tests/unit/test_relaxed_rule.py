"""The relaxed-track rule (KernelBench's allclose(1e-2, 1e-2), atol scaled by max(1, rms(r)))
has one definition, argus/numerics.py, that the judge (argus/bench/kernelbench/tolerance.py
`errors`, whole and chunked) and the compose-time self-check (argus/compose/precision.py
`relaxed_ratio`) both apply: changing it there changes both verdicts, and the two agree."""

from __future__ import annotations

import pytest
import torch

from argus import numerics
from argus.bench.kernelbench import tolerance
from argus.compose import precision as P


def _verdicts(y, r):
    """(judge whole, judge chunked, self-check) relaxed verdicts on y against r."""
    return (tolerance.errors(y, r).relaxed_ok, tolerance.errors(y, r, chunk=7).relaxed_ok,
            P.relaxed_ratio(y, r) <= 1)


@pytest.mark.parametrize("name", ["RELAXED_ATOL", "RELAXED_RTOL"])
def test_one_rule_moves_both_callers(monkeypatch, name):
    g = torch.Generator().manual_seed(3)
    r = torch.randn(64, generator=g, dtype=torch.float64)        # rms ~ 1: atol ~ 1e-2
    # an absolute error of 0.2 (20x the default atol), or a relative one of 0.2 (20x rtol)
    y = r + 0.2 if name == "RELAXED_ATOL" else r * 1.2
    assert _verdicts(y, r) == (False, False, False)
    monkeypatch.setattr(numerics, name, 0.5)
    assert _verdicts(y, r) == (True, True, True)


def test_the_rule_is_allclose_with_a_scaled_atol():
    # against torch.allclose, independently of argus
    g = torch.Generator().manual_seed(4)
    for scale in (1e-2, 1.0, 1e3):
        r = torch.randn(300, generator=g, dtype=torch.float64) * scale
        rms = float(r.square().mean().sqrt())
        for size in (1e-3, 5e-3, 2e-2, 1e-1):
            y = r + torch.randn(300, generator=g, dtype=torch.float64) * size * max(1, rms)
            ok = torch.allclose(y, r, rtol=1e-2, atol=1e-2 * max(1.0, rms))
            assert _verdicts(y, r) == (ok, ok, ok), (scale, size)
