"""wgmma.k-once over a split grid dimension (check_wgmma._split_cover): the split decode
kernel's CTAs each multiply a contiguous range of K blocks, and the ranges of consecutive
program ids tile [0, SK), proven by induction over the program id. Seeded bugs in the split
arithmetic (argus/kernels/attention_decode._split_blocks) are caught: splits that overlap
(a key in two partials: counted twice by the combine, an error), a gap at the end (floor
instead of ceil: the last keys in no split) and a gap at the start (split 0 skips block 0)."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention_decode as AD


def _report(monkeypatch, split_blocks=None):
    if split_blocks is not None:
        monkeypatch.setattr(AD, "_split_blocks", split_blocks)
    fn = AD.decode_kernel.__wrapped__(64, ag.bf16, False, True)   # not the cached kernel
    return verify.run(lower_only(fn, s=AD.default_decode_schedule(64, 1)))


def _overlap(split, splits, SK, block_n):
    blocks = ag.cdiv(SK, block_n)
    per = ag.cdiv(blocks, splits)
    kb0 = split * per
    return kb0, ag.maximum(ag.minimum(per + 1, blocks - kb0), 0)


def _floor(split, splits, SK, block_n):
    blocks = ag.cdiv(SK, block_n)
    per = blocks // splits
    kb0 = split * per
    return kb0, ag.maximum(ag.minimum(per, blocks - kb0), 0)


def _late_start(split, splits, SK, block_n):
    blocks = ag.cdiv(SK, block_n)
    per = ag.cdiv(blocks, splits)
    kb0 = split * per + 1
    return kb0, ag.maximum(ag.minimum(per, blocks - kb0), 0)


def _k_once(report, severity):
    return [d for d in report.diagnostics if d.code == "wgmma.k-once" and d.severity == severity]


def test_split_cover_is_proven(monkeypatch):
    report = _report(monkeypatch)
    assert not _k_once(report, "error") and not _k_once(report, "warning")
    assert any(f.code == "wgmma.k-once" and "covers [0, K) over program id" in f.subject
               for f in report.proven)


def test_overlapping_splits_are_an_error(monkeypatch):
    found = _k_once(_report(monkeypatch, _overlap), "error")
    assert any("disjoint" in d.message for d in found), found


@pytest.mark.parametrize("bug", [_floor, _late_start], ids=["floor", "late-start"])
def test_splits_with_a_gap_are_caught(monkeypatch, bug):
    found = [d for d in _k_once(_report(monkeypatch, bug), "warning")
             + _k_once(_report(monkeypatch, bug), "error")
             if "k range covers the tensor" in d.message]
    assert found


def _twice_skipping(split, splits, SK, block_n):
    # even splits own blocks [(split // 4) * per, + per), odd ones none: splits 0 and 2 both
    # own the first `per` blocks, yet no two consecutive splits both have blocks
    blocks = ag.cdiv(SK, block_n)
    per = ag.cdiv(blocks, splits)
    kb0 = (split // 4) * per
    return kb0, ag.maximum(ag.minimum(per, blocks - kb0), 0) * (1 - split % 2)


def test_overlap_across_an_empty_split_is_an_error(monkeypatch):
    """Disjointness between consecutive program ids alone lets a key sit in two partials
    when an empty split lies between them (splits 0 and 2 here): an error, not the coverage
    warning a register-A site gets for a gap."""
    found = _k_once(_report(monkeypatch, _twice_skipping), "error")
    assert any("disjoint" in d.message for d in found), found


def test_keys_shifted_by_another_program_id_stay_an_error(monkeypatch):
    """Seeded bug: the CTAs of odd (sequence, kv head) units walk their blocks one later
    (`_order` shifted by the unit), so their keys depend on a program id the key extent does
    not. _split_grid takes a split range over another program id only where the extent
    depends on it too (paged decode's sequence); here it keeps the per-CTA claim, an error,
    instead of a split cover whose coverage shortfall would be only a warning."""
    def shifted(n, unit, stagger, streams=1):
        return lambda j: j + (unit() // 2) % 2
    monkeypatch.setattr(AD, "_order", shifted)
    found = _k_once(_report(monkeypatch), "error")
    assert found, "a unit-dependent key shift must be an error"
