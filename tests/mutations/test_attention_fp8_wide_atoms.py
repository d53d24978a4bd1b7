"""Seeded bugs in the V^T column atoms of the FP8 forward's wide key blocks (head dim 128, P
carried packed, block_n 192 = 3 x 64, 224 = 7 x 32, 256 = 2 x 128 keys: one TMA box and one
P V wgmma an atom), caught by the checks h319 made decide there (the clean kernels verify
with zero findings: tests/verify/test_attention_fp8_wide.py):

  * the last atom's box loaded at the previous atom's keys (those keys loaded twice into the
    stage, the last atom's never): P's keys against V's rows, wgmma.agree A.sk == B.sk;
  * the same with the last atom's P V reading P's columns of the previous atom too (operands
    that agree, the previous atom's keys multiplied twice, the last atom's never): k-once's
    injectivity across the atoms' sites, an error (before h319 that query ran out of z3
    budget at 192 and 256 even on the clean kernel);
  * the causal KV loop stopping one block before the diagonal (keys a query may see never
    multiplied): k-once's coverage is not derived from the zeros past the loop (the block
    shift is the block's K, the sum over the atoms, and those keys are not masked there), so
    it stays a warning, beside the tag assertion that the loop reaches every visible key.

The bugs are seeded in the kernel's source (a copy of argus/kernels/attention.py with one
line changed, as tests/mutations/test_attention_rescale_late_chain.py does)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import attention as A
from tests.loading import load_edited, load_script

BENCH = load_script("gpu_attention_bench")

# the producer's V^T box of atom a, and P V's slice of P for atom a
_V_BOX = "(b, hk, 0, j * BN + vcols * a))"
_P_SLICE = "pa = p8[:, vcols * a:vcols * (a + 1)] if vatoms > 1 else p8"
# the last atom takes the previous one's keys
_PREV = "(a - (a == vatoms - 1))"
_CAUSAL_END = "ag.maximum(ag.cdiv(q0 + block_m + SK - S, block_n),"

MUTATIONS = {
    "v_atom_twice": [(_V_BOX, f"(b, hk, 0, j * BN + vcols * {_PREV}))")],
    "atom_keys_twice": [(_V_BOX, f"(b, hk, 0, j * BN + vcols * {_PREV}))"),
                        (_P_SLICE, f"pa = p8[:, vcols * {_PREV}:vcols * ({_PREV} + 1)]")],
    "causal_one_block_short": [(_CAUSAL_END,
                                "ag.maximum(ag.cdiv(q0 + block_m + SK - S, block_n) - 1,")],
}


def _mutated(tmp_path, bug: str, block_n: int, causal: bool):
    module = load_edited(A, MUTATIONS[bug], tmp_path / f"attention_{bug}.py")
    s = BENCH.fp8_variant_schedule(f"pvt+packp+bn{block_n}", 128, causal)
    assert s.packed_p and s.block_n == block_n
    return lower_only(module.attention_kernel(128, ag.e4m3, causal, False, True), s=s)


@pytest.mark.parametrize("block_n", [224, 256])
def test_v_atom_loaded_twice_is_caught(tmp_path, block_n):
    report = verify.run(_mutated(tmp_path, "v_atom_twice", block_n, False))
    hits = [d for d in report.errors if d.code == "wgmma.agree" and "A.sk == B.sk" in str(d)]
    assert hits, [(d.code, d.message[:160]) for d in report.diagnostics]


@pytest.mark.parametrize("block_n,causal", [(192, False), (256, False), (224, True)])
def test_atom_keys_multiplied_twice_is_caught(tmp_path, block_n, causal):
    report = verify.run(_mutated(tmp_path, "atom_keys_twice", block_n, causal))
    assert not [d for d in report.errors if d.code == "wgmma.agree"]   # the operands agree
    hits = [d for d in report.errors if d.code == "wgmma.k-once"
            and "is multiplied twice" in d.message]
    assert hits, [(d.code, d.severity, d.message[:200]) for d in report.diagnostics]


@pytest.mark.parametrize("block_n", [192, 224])
def test_causal_loop_short_of_the_diagonal_is_caught(tmp_path, block_n):
    report = verify.run(_mutated(tmp_path, "causal_one_block_short", block_n, True))
    cover = [d for d in report.diagnostics if d.code == "wgmma.k-once"
             and "are never multiplied" in d.message]
    assert cover and all(d.severity in ("warning", "error") for d in cover), \
        [(d.code, d.severity, d.message[:200]) for d in report.diagnostics]
    derived = [f for f in report.findings if f.code == "wgmma.k-once"
               and f.status == "proven" and f.tier == "derived"]
    assert not derived, [f.subject for f in derived]
    assert [d for d in report.errors if "reaches every key a query may see" in str(d)]
