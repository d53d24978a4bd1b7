"""The decode attention kernels (argus/kernels/attention_decode.py) verify with zero findings:
no error and nothing unknown (but a query out of solver time on a loaded machine), for every
head dim, causal or not, the split kernel (partial O + LSE) and the direct one, one and two
consumer warpgroups (default_decode_schedule for 1 and 100 packed rows), fp16, and the
combine kernel at each head dim for 2, 16 and 128 splits.

No warning either: the split kernel's P V covers only its split's keys, and wgmma.k-once
proves that the splits' key ranges tile [0, SK) over the split program id
(check_wgmma._split_cover; _split_blocks: split s owns blocks [s * per, min((s + 1) * per,
blocks))); tests/verify/test_decode_split_cover.py seeds overlapping and gapped splits."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention_decode import (combine_shape, decode_combine_kernel, decode_kernel,
                                            default_decode_schedule)

CASES = [(d, causal, split, 1, ag.bf16) for d in (64, 128, 256) for causal in (False, True)
         for split in (False, True)]
CASES += [(128, causal, split, 100, ag.bf16) for causal in (False, True) for split in (False, True)]
CASES += [(128, True, True, 1, ag.f16), (256, False, True, 100, ag.bf16)]


def _assert_clean(report):
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    unknown = [d for d in report.unknowns
               if "z3: timeout" not in d.message and "no budget left" not in d.message]
    assert not unknown, "\n".join(str(d) for d in unknown)
    warnings = [d for d in report.diagnostics if d.severity == "warning"]
    assert not warnings, "\n".join(str(d) for d in warnings)
    assert len(report.proven) >= 14


@pytest.mark.parametrize("head_dim,causal,split,rows,dtype", CASES,
                         ids=[f"d{d}-{'causal' if c else 'full'}-{'split' if s else 'direct'}"
                              f"-rows{r}-{t.name}" for d, c, s, r, t in CASES])
def test_decode_kernel_verifies_clean(head_dim, causal, split, rows, dtype):
    schedule = default_decode_schedule(head_dim, rows, dtype)
    report = verify.run(lower_only(decode_kernel(head_dim, dtype, causal, split), s=schedule))
    _assert_clean(report)
    assert len(report.proven) >= 60


@pytest.mark.parametrize("head_dim", [64, 128, 256])
@pytest.mark.parametrize("splits", [2, 16, 128])
def test_combine_kernel_verifies_clean(head_dim, splits):
    kernel = decode_combine_kernel(head_dim, ag.bf16, *combine_shape(splits, head_dim))
    _assert_clean(verify.run(lower_only(kernel)))


# The paged kernels (page_size > 0: K and V read from the pages a block table names).
PAGED = [(d, causal, ps) for d in (64, 128, 256) for causal in (False, True)
         for ps in (16, 128, 256)]


@pytest.mark.parametrize("head_dim,causal,page_size", PAGED,
                         ids=[f"d{d}-{'causal' if c else 'full'}-page{p}" for d, c, p in PAGED])
def test_paged_direct_kernel_verifies_clean(head_dim, causal, page_size):
    """One CTA per (kv head, sequence): every claim proven over the logical key tag (the
    table's contract pos(page(b, i)) == i, attention_decode._tag_pages): the mask keeps
    exactly the keys below the sequence's length read from seq_lens, P's keys are V's rows,
    and each key of the sequence is multiplied once."""
    schedule = default_decode_schedule(head_dim, 4, page_size=page_size)
    kernel = decode_kernel(head_dim, ag.bf16, causal, False, page_size)
    _assert_clean(verify.run(lower_only(kernel, s=schedule)))


PAGED_SPLIT = [(d, causal, 128) for d in (64, 128, 256) for causal in (False, True)]
PAGED_SPLIT += [(128, False, 16), (128, True, 256)]


@pytest.mark.parametrize("head_dim,causal,page_size", PAGED_SPLIT,
                         ids=[f"d{d}-{'causal' if c else 'full'}-page{p}"
                              for d, c, p in PAGED_SPLIT])
def test_paged_split_kernel_verifies_clean(head_dim, causal, page_size):
    """The split paged kernel (issue 13; it had one open finding before): each split's range
    [s * per, ...) is built from the sequence's length read from seq_lens, and
    check_wgmma._split_grid takes it (a program id the extent does not depend on, values read
    at addresses of the other program ids), so wgmma.k-once proves over the split program id
    that the splits' logical keys are disjoint and cover [0, SK) with SK the `key_extent` tag
    (attention_decode._tag_pages): each key of the sequence multiplied once, across splits
    and pages. tests/mutations/test_attention_decode.py seeds overlapping splits."""
    schedule = default_decode_schedule(head_dim, 4, page_size=page_size)
    kernel = decode_kernel(head_dim, ag.bf16, causal, True, page_size)
    report = verify.run(lower_only(kernel, s=schedule))
    _assert_clean(report)
    assert len(report.proven) >= 90
    assert any(f.code == "wgmma.k-once" and "over program id" in f.subject
               for f in report.proven)


@pytest.mark.parametrize("causal,stagger,streams", [(False, 2, 1), (True, 2, 1), (False, 0, 2),
                                                    (True, 2, 2)])
def test_staggered_direct_kernel_verifies_clean(causal, stagger, streams):
    """DecodeSchedule.stagger / .streams (the bench's `stagger` and `streams2` variants): the
    direct kernel walking its blocks from (j + rot) % n, or its two halves alternately, is as
    clean as the in-order walk (wgmma.k-once proves the reordered keys cover [0, SK) once)."""
    import dataclasses

    schedule = dataclasses.replace(default_decode_schedule(128, 4), stagger=stagger,
                                   streams=streams)
    report = verify.run(lower_only(decode_kernel(128, ag.bf16, causal, False), s=schedule))
    _assert_clean(report)
    assert len(report.proven) >= 60
