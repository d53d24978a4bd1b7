"""The fused-combine split decode kernel (decode_kernel(..., fused=True)) verifies with zero
findings, lowered as it is compiled: every store proven (the partials; O and LSE stored once,
by the one warpgroup that draws its counter's last ticket, and covered: that ticket is drawn),
the counter's tickets (atomic.tickets: reached unconditionally by exactly SPLITS arrivals per
(batch, kv head, warpgroup)), and no plain access to the counters (atomic.exclusive); hd 64 /
128 / 256, causal or not, one consumer warpgroup (the fused merge's scope: at most 64 packed
rows), 2 / 16 / 128 padded splits, and two CTAs an SM. Seeded bugs: a counter shared by the
kv heads, a wrap one past the splits."""

import dataclasses

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention_decode as AD
from argus.kernels.attention_decode import (DecodeSchedule, decode_kernel,
                                            default_decode_schedule, with_fused_combine)
from tests.verify.test_attention_decode_verifies import _assert_clean

CASES = [(128, False, 1, 16), (128, True, 1, 2), (64, True, 1, 128), (256, False, 1, 16),
         (256, True, 1, 2)]


@pytest.mark.parametrize("head_dim,causal,rows,pad", CASES,
                         ids=[f"d{d}-{'causal' if c else 'full'}-rows{r}-pad{p}"
                              for d, c, r, p in CASES])
def test_fused_kernel_verifies_clean(head_dim, causal, rows, pad):
    s = with_fused_combine(default_decode_schedule(head_dim, rows), head_dim)
    assert not s.problems_for(head_dim)
    report = verify.run(lower_only(decode_kernel(head_dim, ag.bf16, causal, True, 0, True),
                                   s=s, splits_pad=pad), include_proven=True)
    _assert_clean(report)
    proven = {(f.code, f.subject.split(" at ")[0]) for f in report.proven}
    for code, what in (("atomic.tickets", "counter CNT"), ("atomic.exclusive", "atomics on CNT"),
                       ("store.once", "stores to O"), ("store.once", "stores to LSE")):
        assert (code, what) in proven, (code, what)
    # O's and LSE's coverage: the per-dim count over every split, and the ticket condition
    # around the stores passed by exactly one split per (batch, kv head, warpgroup) counter
    # element (store_guards: atomic.tickets' claims, the last ticket among those drawn)
    for out in ("O", "LSE"):
        assert any(f.code == "store.coverage" and f"of {out} stored" in f.subject
                   for f in report.proven), out
        assert any(f.code == "store.coverage" and "counter CNT" in f.subject and
                   f"store {out} at" in f.subject for f in report.proven), out


def test_coverage_reads_a_data_dependent_guard():
    """A store under a condition on a value read from memory is not counted as covering its
    output (it was proven before store_guards): the counterexample names the value read."""
    @ag.kernel
    def guarded(X: ag.Tensor["M", 128, ag.f32], F: ag.Tensor[1, ag.i32],
                Y: ag.Tensor["M", 128, ag.f32]):
        (pid,) = ag.grid(X.shape[0])
        with ag.when(ag.load_scalar(F, (0,)) == 3):   # F[0] != 3: Y is never written
            ag.store(Y, (pid, 0), ag.load(X, (pid, 0), (1, 128)))
    report = verify.run(guarded, include_proven=True)
    bad = [d for d in report.errors if d.code == "store.coverage"]
    assert bad and "values_read" in bad[0].counterexample, [str(d) for d in report.diagnostics]
    assert "never written" in bad[0].message


def test_fused_two_ctas_an_sm_verifies_clean():
    s = DecodeSchedule(block_n=64, stages=2, consumer_regs=232, ctas_per_sm=2,
                       fused_combine=True)
    _assert_clean(verify.run(lower_only(decode_kernel(128, ag.bf16, False, True, 0, True),
                                        s=s, splits_pad=32)))


@pytest.mark.parametrize("bug", ["shared_counter", "wrap_past_splits"])
def test_seeded_counter_bugs(bug, monkeypatch):
    """The counter indexed without its kv head (kv heads share it: 2 x SPLITS arrivals, the
    tickets repeat, two warpgroups merge) or counting to SPLITS + 1 (nobody draws the last
    ticket's value at the right time and the counter never resets): atomic.tickets fails."""
    real = ag.atomic_fetch_add

    def mutated(tensor, offsets, value=1, *, wrap=None):
        if bug == "shared_counter":
            offsets = (offsets[0], 0, offsets[2])
        else:
            wrap = wrap + 1
        return real(tensor, offsets, value, wrap=wrap)
    monkeypatch.setattr(ag, "atomic_fetch_add", mutated)
    fresh = AD.decode_kernel.__wrapped__(128, ag.bf16, False, True, 0, True)
    s = with_fused_combine(default_decode_schedule(128, 1), 128)
    report = verify.run(lower_only(fresh, s=s, splits_pad=16))
    assert "atomic.tickets" in {d.code for d in report.errors}, \
        [str(d) for d in report.diagnostics]


def test_fused_schedule_fits():
    with pytest.raises(ValueError, match="one consumer warpgroup"):
        with_fused_combine(default_decode_schedule(128, 100), 128)
    one = with_fused_combine(default_decode_schedule(128, 1), 128)
    assert one.stages == default_decode_schedule(128, 1).stages
    assert dataclasses.replace(one, fused_combine=False) == default_decode_schedule(128, 1)
