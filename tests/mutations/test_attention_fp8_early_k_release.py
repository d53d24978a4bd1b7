"""FA3's early K release on the FP8 forward (fp8 bench token "ekr", h328): S_j and P_{j-1}
V_{j-1}'s groups (one per V^T atom: 7 at 224 keys, 3 at 192) issued in K_j's step inside
V_{j-1}'s; K_j's end waits wait_group(atoms) and releases K_j, V_{j-1}'s end waits 0. O is
rescaled after P V retires (the FP8 default's late rescale), so P V accumulates in place into
the loop's own O and the peeled last P V into the same variable after the loop (k-once joins
those sites as one chain: check_wgmma._siblings). Seeded bugs, each reported:

  * K_j released before S_j retires (lower/sync.py: the step's retiring wait dropped when
    groups outlive it): sync.release at K's release naming S's wgmma;
  * K_j's wait one group short (wait_group atoms + 1: S_j may still be in flight, the
    off-by-one a per-atom count invites): sync.release at K's release naming S's wgmma;
  * V_{j-1} released before its P V atoms retire (the outliving groups not handed to V's
    step): sync.release at V's release naming P V;
  * the kernel's loop issuing one V^T atom fewer (attention.py edited): wgmma.k-once on the
    joined chain, the keys of the missing atom never multiplied.

The unmutated pass and kernel verify with zero findings."""

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
_WAIT_SHORT = ('''            if mine:
                body += _retire(st, mine, "retire this step's wgmma before release", loc)''',
               '''            if mine:
                body += _retire(st, mine, "retire this step's wgmma before release", loc)
                if later:
                    body[-2] = body[-2].replace(pending=body[-2].pending + 1)''')
_HAND_OVER = ("            st.in_consume[-2].extend(later)\n", "")

BUGS = {"k_release_early": [_RETIRE], "k_wait_short": [_WAIT_SHORT],
        "v_release_early": [_HAND_OVER]}

_ATOM_DROPPED = ("                                                for a in range(vatoms):\n"
                 "                                                    ag.wgmma(pas[a],",
                 "                                                for a in range(vatoms - 1):\n"
                 "                                                    ag.wgmma(pas[a],")


def _kernel(tmp_path, monkeypatch, bug: str | None, causal: bool = False, module=A):
    if bug:
        # the pass's dataclasses look their module up in sys.modules while the file runs
        # (dataclasses._is_type); load_file puts none there: a stand-in under its name
        monkeypatch.setitem(sys.modules, f"sync_{bug}", types.ModuleType(f"sync_{bug}"))
        edited = load_edited(SYNC, BUGS[bug], tmp_path / f"sync_{bug}.py")
        monkeypatch.setattr(L, "PASSES", tuple((n, edited.run if n == "sync" else f)
                                               for n, f in L.PASSES))
    s = BENCH.fp8_variant_schedule("pvt+ekr", 128, causal)
    assert s.early_k_release and s.rescale_after_pv
    return lower_only(module.attention_kernel(128, ag.e4m3, causal, False, True), s=s)


def _line(text: str) -> int:
    """The line of attention.py holding `text` (once)."""
    return line_of(A.__file__, text)


K_STEP = "with k_pipe.consume() as ks:         # K_j"
V_STEP = "with v_pipe.consume() as vs:     # V_{j-1}, wait 0"
S_ISSUE = "sc = ag.wgmma(q_atom"
PV = "ag.wgmma(pas[a],"


def _at(report, code, step, issue):
    return [d for d in report.errors if d.code == code and f":{_line(step)}" in str(d)
            and f"attention.py:{_line(issue)}" in d.message]


@pytest.mark.parametrize("causal", [False, True], ids=["full-224", "causal-192"])
def test_the_kernel_verifies_with_zero_findings(tmp_path, monkeypatch, causal):
    report = verify.run(_kernel(tmp_path, monkeypatch, None, causal))
    assert report.diagnostics == [], "\n".join(str(d) for d in report.diagnostics)


@pytest.mark.parametrize("causal", [False, True], ids=["full-224", "causal-192"])
def test_k_released_before_s_retires_is_caught(tmp_path, monkeypatch, causal):
    report = verify.run(_kernel(tmp_path, monkeypatch, "k_release_early", causal))
    assert _at(report, "sync.release", K_STEP, S_ISSUE), report.errors


def test_k_wait_one_group_short_is_caught(tmp_path, monkeypatch):
    # 192 keys: 3 atoms, K's wait becomes wait_group 4 with 4 groups in flight (at 224 the
    # short wait would be 8, past wait_group's 7: the lowering clamps every real wait there)
    report = verify.run(_kernel(tmp_path, monkeypatch, "k_wait_short", True))
    assert _at(report, "sync.release", K_STEP, S_ISSUE), report.errors


def test_v_released_before_p_v_retires_is_caught(tmp_path, monkeypatch):
    report = verify.run(_kernel(tmp_path, monkeypatch, "v_release_early"))
    assert _at(report, "sync.release", V_STEP, PV), report.errors


def test_an_atom_left_out_of_the_loop_is_caught(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "attention_atom", types.ModuleType("attention_atom"))
    edited = load_edited(A, [_ATOM_DROPPED], tmp_path / "attention_atom.py")
    report = verify.run(_kernel(tmp_path, monkeypatch, None, module=edited))
    found = [d for d in report.errors if d.code == "wgmma.k-once"]
    # the joined chain (6 atoms in the loop, 7 peeled) misses the dropped atom's keys
    assert any("and 13 wgmma sites" in d.message for d in found), report.errors
