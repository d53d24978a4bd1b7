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
