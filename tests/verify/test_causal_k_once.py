"""wgmma.k-once over a causal loop that stops at the diagonal (check_wgmma._masked_past_the_loop,
transfer/values.py): the keys the loop never reaches are proven zero in P at the iterations
that would hold them, so every key that matters is multiplied exactly once and the causal
kernels carry no k-once warning. Before the value facts this was a warning on every causal
kernel ("the verifier does not model masked values").

Seeded bugs, each still reported (a warning: a mask the facts do not follow is not a proven
bug): a loop one block short of the diagonal (an unmasked block skipped), a mask that fills 0
instead of -inf (exp2(0 - m) is not 0), a negative scale after the mask (-inf * -c = +inf).
A small causal kernel (head dim 64, the FA3 shape: Q once through a one-stage pipeline, K
and V through a ring, P in registers) written here so that each bug is one switch."""

from __future__ import annotations

from pathlib import Path

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel, base_schedule, default_schedule

INF = float("inf")


def causal_attention(bug: str | None = None, BN: int = 64):
    @ag.kernel(name="causal_k_once")
    def kernel(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", "SK", 64, ag.bf16],
               V: ag.Tensor["BH", "SK", 64, ag.bf16], O: ag.Tensor["BH", "S", 64, ag.bf16]):
        S, SK = Q.shape[1], K.shape[1]
        pid, bh = ag.grid(ag.cdiv(S, 64), Q.shape[0])
        q0 = pid * 64
        # blocks up to the tile's last row's last key q0 + 63 + SK - S
        reach = q0 + (0 if bug == "short_loop" else 64) + SK - S
        blocks = ag.minimum(ag.cdiv(SK, BN), ag.maximum(ag.cdiv(reach, BN), 0))
        sQ = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        sK = ag.smem((2, BN, 64), ag.bf16, swizzle=128)
        sV = ag.smem((2, BN, 64), ag.bf16, swizzle=128)
        q_pipe = ag.pipeline(1, consumers=1)
        kv_pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1):
            with q_pipe.produce() as qs:
                ag.tma.load(sQ[qs], Q, (bh, q0, 0))
            for j in ag.range(blocks):
                with kv_pipe.produce() as st:
                    ag.tma.load(sK[st], K, (bh, j * BN, 0))
                    ag.tma.load(sV[st], V, (bh, j * BN, 0))
        with ag.role("consumer", warpgroups=1):
            m = ag.full((64, 1), -INF)
            l_sum = ag.full((64, 1), 0.0)
            o = ag.zeros((64, 64))
            with q_pipe.consume() as qs:
                for j in ag.range(blocks):
                    with kv_pipe.consume() as st:
                        s = ag.wgmma(sQ[qs], sK[st], ag.zeros((64, BN)))
                        key = j * BN + ag.arange(BN)[None, :]
                        row = q0 + ag.arange(64)[:, None] + (SK - S)   # its last key
                        valid = (key < SK) & (key <= row)
                        fill = 0.0 if bug == "fill_zero" else -INF
                        s = ag.where(valid, s, fill)
                        scale = -1.4426950408889634 if bug == "negative_scale" else \
                            1.4426950408889634
                        s = s * scale
                        m_new = ag.maximum(m, s.max(axis=1))
                        m_use = ag.where(m_new == -INF, 0.0, m_new)
                        p = ag.exp2(s - m_use)
                        alpha = ag.exp2(m - m_use)
                        l_sum = l_sum * alpha + p.sum(axis=1)
                        o = ag.wgmma(p.to(ag.bf16), sV[st], o * alpha, trans_b=True)
                        m = m_new
            o = o / ag.where(l_sum == 0.0, 1.0, l_sum)
            ag.store(O, (bh, q0, 0), o.to(ag.bf16))

    return kernel


def _k_once(report, severity=None):
    return [d for d in report.diagnostics if d.code == "wgmma.k-once" and
            (severity is None or d.severity == severity)]


def _pv_lines() -> set[int]:
    """The lines of this file's P V wgmma (its k is the key): Q K^T's k-once over the integer
    head dim (check_wgmma._contracted_dim) has a coverage claim of its own, proven."""
    text = Path(__file__).read_text().splitlines()
    return {i + 1 for i, line in enumerate(text) if "ag.wgmma(p.to(" in line}


def _cover_proven(report) -> bool:
    """The key coverage of P V is proven (in this file's kernel; any site's elsewhere)."""
    def counted(f) -> bool:
        return Path(f.loc.file).name != Path(__file__).name or f.loc.line in _pv_lines()
    return any(f.code == "wgmma.k-once" and f.subject.endswith("covers [0, K)") and
               f.status == "proven" and counted(f) for f in report.findings)


def test_the_causal_kernel_covers_every_key_that_matters():
    report = verify.run(causal_attention())
    assert not [d for d in report.diagnostics if d.severity != "note"], report.diagnostics
    assert _cover_proven(report)


@pytest.mark.parametrize("bug", ["short_loop", "fill_zero", "negative_scale"])
def test_a_skipped_key_that_is_not_masked_is_reported(bug):
    """short_loop: the loop stops one block before the tile's last row's diagonal, so the
    keys of that block are skipped and not masked for the rows that may see them; fill_zero:
    the masked keys hold 0, which exp2 makes 1, not 0; negative_scale: -inf times a negative
    scale is +inf. Each leaves the coverage claim unproven: the short-loop warning, with the
    keys that are never multiplied."""
    report = verify.run(causal_attention(bug))
    found = _k_once(report)
    assert found and all(d.severity in ("warning", "error") for d in found), \
        report.diagnostics
    assert any("never multiplied" in d.message and "A operand is zero" in d.message
               for d in found), [d.message for d in found]
    assert not _cover_proven(report)


CAUSAL = [(64, default_schedule(64, True)), (128, default_schedule(128, True)),
          (256, default_schedule(256, True)), (64, base_schedule(64))]


@pytest.mark.parametrize("head_dim,schedule", CAUSAL,
                         ids=["d64-default", "d128-default", "d256-default", "d64-base"])
def test_library_causal_attention_has_no_k_once_warning(head_dim, schedule):
    report = verify.run(lower_only(attention_kernel(head_dim, ag.bf16, True, False),
                                   s=schedule), include_proven=True)
    assert not _k_once(report, "warning") and not report.errors and not report.unknowns, \
        [str(d) for d in report.diagnostics if d.severity != "note"]
    assert _cover_proven(report)
