"""The late rescale of the attention fa3 loop (AttentionSchedule.rescale_late: `o = o * alpha`
after P V retires, the peeled last P V accumulating into O in place) joins the loop's P V and
the last one in one k-once count (check_wgmma.py `_one_continuation`). Seeded bug: O copied
before the step's P V (`o_old = o + 1.0`) and the rescale applied to the copy (`o = o_old *
alpha`): every P_{j-1} V_{j-1} is dropped, yet before the fix the chain still counted as one
and the kernel verified clean. Now the assignment of a value made outside the chains into a
chain variable between the sites breaks the chain, and k-once reports the peeled P V."""

from __future__ import annotations

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention as A
from tests.loading import load_edited, load_script

BENCH = load_script("gpu_attention_bench")

_COPY = "                                    if s.packed_p:   # the step's fp32 P_j (packed below)"
_RESCALE = "                                        o = o * alpha\n"


def _kernel(tmp_path, mutated: bool):
    edits = [(_COPY, "                                    o_old = o + 1.0\n" + _COPY),
             (_RESCALE, "                                        o = o_old * alpha\n")]
    module = load_edited(A, edits if mutated else [],
                         tmp_path / ("attention_stale_o.py" if mutated else "attention_same.py"))
    s = BENCH.variant_schedule("default+olate", 128, False, 16384)
    assert s.rescale_late and not s.early_q_release
    return lower_only(module.attention_kernel(128, ag.bf16, False, False), s=s)


def _k_once_not_proven(report):
    return [f for f in report.findings if f.code == "wgmma.k-once" and f.status != "proven"]


def test_the_late_rescale_proves_k_once(tmp_path):
    assert _k_once_not_proven(verify.run(_kernel(tmp_path, False))) == []


def test_rescaling_a_stale_copy_of_o_breaks_the_chain(tmp_path):
    found = _k_once_not_proven(verify.run(_kernel(tmp_path, True)))
    assert any(f.status == "violated" and "covers [0, K)" in f.subject for f in found), found
