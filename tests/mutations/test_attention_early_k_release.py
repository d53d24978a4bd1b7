"""FA3's early K release (AttentionSchedule.early_k_release): S_j and P_{j-1} V_{j-1} issued in
K_j's consume step inside V_{j-1}'s; K_j's end waits wait_group 1 and releases K_j, the softmax
of S_j runs beside P V, V_{j-1}'s end waits wait_group 0 and releases V_{j-1} (lower/sync.py
`_outlives` keeps the register-A group in flight past K_j's step; WgmmaFence.a_scope = 1).
Seeded bugs in the sync pass (lower/sync.py edited, tests/loading.load_edited, run in place of
the library's pass), each reported by check_sync:

  * K_j released before S_j's groups retire (the step's retiring wait dropped when a group
    outlives it): sync.release at K's release, naming S's wgmma;
  * V_{j-1} released before P V retires (the outliving group not handed to V's step, so
    V's end has nothing to retire; the group retires at the loop body's end): sync.release
    at V's release naming P V, and sync.acc: P V's packed A registers (declared in V's step)
    go out of scope with the group in flight;
  * P's registers overwritten while P V is in flight (P carried packed, so P V's A tile is
    the loop's P variable; the group not handed to V's step, as above, and the pass no longer
    retiring groups at a var assignment: P_j's packed words assigned into P's variable at the
    loop body's end with P V in flight): sync.acc at that assignment, naming P V's register A
    operand.

The unmutated pass (the same kernels) verifies with no sync finding."""

from __future__ import annotations

import sys
import types

import pytest

import argus as ag
import argus.lower as L
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention as A
from argus.lower import sync as SYNC
from tests.loading import load_edited, load_script
from tests.mutations.seeded import line_of

BENCH = load_script("gpu_attention_bench")

_RETIRE = ('''            if mine:
                body += _retire(st, mine, "retire this step's wgmma before release", loc)''',
           '''            if mine and not later:
                body += _retire(st, mine, "retire this step's wgmma before release", loc)''')
_HAND_OVER = ("            st.in_consume[-2].extend(later)\n", "")
# register moves (var assignments) no longer retire the groups whose tiles they touch
_ASSIGN_BLIND = ("    if isinstance(op, O.Wgmma):\n        a = {st.tile(op.a)}",
                 "    if isinstance(op, O.Assign):\n        return []\n"
                 "    if isinstance(op, O.Wgmma):\n        a = {st.tile(op.a)}")

BUGS = {"k_release_early": [_RETIRE],
        "v_release_early": [_HAND_OVER],
        "p_overwritten": [_HAND_OVER, _ASSIGN_BLIND]}


def _kernel(tmp_path, monkeypatch, bug: str | None, variant: str = "default+ekr"):
    if bug:
        # the pass's dataclasses look their module up in sys.modules while the file runs
        # (dataclasses._is_type); load_file puts none there: a stand-in under its name
        monkeypatch.setitem(sys.modules, f"sync_{bug}", types.ModuleType(f"sync_{bug}"))
        edited = load_edited(SYNC, BUGS[bug], tmp_path / f"sync_{bug}.py")
        monkeypatch.setattr(L, "PASSES", tuple((n, edited.run if n == "sync" else f)
                                               for n, f in L.PASSES))
    s = BENCH.variant_schedule(variant, 128, False, 16384)
    assert s.early_k_release
    return lower_only(A.attention_kernel(128, ag.bf16, False, False), s=s)


def _errors(report, code):
    return [d for d in report.errors if d.code == code]


def _line(text: str) -> int:
    """The line of attention.py holding `text` (once)."""
    return line_of(A.__file__, text)


K_STEP = "with k_pipe.consume() as ks:         # K_j"
V_STEP = "with v_pipe.consume() as vs:     # V_{j-1}, wait 0"
PV = "ag.wgmma(pa, sV[vs], o_s, trans_b=True)"


@pytest.mark.parametrize("variant", ["default+ekr", "default+ekr+packp"])
def test_the_pass_verifies_without_sync_findings(tmp_path, monkeypatch, variant):
    report = verify.run(_kernel(tmp_path, monkeypatch, None, variant))
    assert not [d for d in report.errors if d.code.startswith("sync.")], report.errors


def test_k_released_before_s_retires_is_caught(tmp_path, monkeypatch):
    found = _errors(verify.run(_kernel(tmp_path, monkeypatch, "k_release_early")),
                    "sync.release")
    assert found, "K's release with S_j in flight went unreported"
    at_k = [d for d in found if f":{_line(K_STEP)}" in str(d)]
    assert at_k, found
    assert any(f"attention.py:{_line('sc = ag.wgmma(q_atom')}" in d.message for d in at_k), at_k


def test_v_released_before_pv_retires_is_caught(tmp_path, monkeypatch):
    report = verify.run(_kernel(tmp_path, monkeypatch, "v_release_early"))
    release = [d for d in _errors(report, "sync.release")
               if f":{_line(V_STEP)}" in str(d) and f"attention.py:{_line(PV)}" in d.message]
    assert release, report.errors
    scope = [d for d in _errors(report, "sync.acc") if "at the end of its scope" in d.message
             or "end of its scope" in str(d)]
    assert scope, report.errors


def test_p_overwritten_while_pv_in_flight_is_caught(tmp_path, monkeypatch):
    report = verify.run(_kernel(tmp_path, monkeypatch, "p_overwritten", "default+ekr+packp"))
    # findings, not diagnostics: the same assignment line also writes O (its accumulator),
    # and the report keeps one diagnostic a line
    acc = [f for f in report.findings if f.code == "sync.acc" and f.status == "violated"
           and f"touches the register A operand of the wgmma at attention.py:{_line(PV)}"
           in f.message]
    assert acc, report.errors
