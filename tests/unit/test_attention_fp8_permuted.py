"""FP8 attention with V^T's keys permuted inside each 32-key group (schedule permuted_vt): P's
8-bit A fragment is the S accumulator's own registers (target/fragments.py AccOrderA8), so the
P V step has no quad shuffles. Checked here without a GPU: the plan for every thread, the op's
permuted transpose byte for byte, the generated CUDA and PTX (no gather, no shfl), and the
verifier: clean for every head dim and mask, with P's key compared against V's row through the
permutation (wgmma.agree), and a V^T whose order disagrees with the P move reported (seeded:
the kernel's declared V^T order is the inverse permutation, or the natural order)."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.kernels import attention as A
from argus.kernels.attention import attention_kernel, fp8_schedule
from argus.runtime import nvrtc_available
from argus.target import fragments as F

torch = pytest.importorskip("torch")
op = importlib.import_module("argus.ops.attention_fp8")
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
E4M3 = torch.float8_e4m3fn


def _sched(D, causal, permuted=True):
    # the 128-key tile with P in fp32 (head dim 128's wide default carries P packed, which
    # hands its words to the wgmma as they are: tests/unit/test_attention_fp8_packed_p.py)
    return dataclasses.replace(fp8_schedule(D, causal, wide_keys=False), permuted_vt=permuted)


def _text(D, causal, permuted):
    return codegen.render(lower_only(attention_kernel(D, ag.e4m3, causal, False, permuted),
                                     s=_sched(D, causal, permuted))).text


# ---- the plan


def test_acc_order_plan_holds_every_element():
    F.AccOrderA8.check(k_steps=8)
    cols = F.acc_order_col(np.arange(256))
    assert sorted(cols.tolist()) == list(range(256))              # a bijection ...
    assert (cols // 32 == np.arange(256) // 32).all()             # ... inside each 32 group
    assert (F.acc_order_k(cols) == np.arange(256)).all()


def test_acc_order_check_catches_a_wrong_word(monkeypatch):
    # AccToA8's word without its shuffles reads the wrong columns in natural k order: the
    # check must see that a plan and its column map disagree
    monkeypatch.setattr(F, "acc_order_col", lambda k: k)
    with pytest.raises(AssertionError):
        F.AccOrderA8.check()


# ---- the op's permuted V^T


def _permuted_reference(v, layout):
    vb = (v if layout == "bhsd" else v.transpose(1, 2)).view(torch.uint8)   # [B, H, SK, D]
    B, H, SK, D = vb.shape
    skv = -(-SK // 32) * 32
    ref = torch.zeros((B, H, D, skv), dtype=torch.uint8)
    for c, key in enumerate(F.acc_order_col(np.arange(skv)).tolist()):
        if key < SK:
            ref[..., c] = vb[..., key, :]
    return ref


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("SK", [1, 17, 32, 33, 100])
def test_kernel_v_writes_the_permuted_order_exactly(layout, D, SK):
    g = torch.Generator().manual_seed(SK * D)
    shape = (2, 3, SK, D) if layout == "bhsd" else (2, SK, 3, D)
    v = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(E4M3)
    vt, permuted = op.kernel_v(v, layout, False)
    assert permuted and vt.dtype == E4M3 and vt.is_contiguous()
    assert torch.equal(vt.view(torch.uint8), _permuted_reference(v, layout))


def test_v_given_transposed_keeps_its_order():
    v = torch.randint(0, 256, (1, 2, 64, 48), dtype=torch.uint8).view(E4M3)   # [B, H, D, SK]
    vt, permuted = op.kernel_v(v, "bhsd", True)
    assert not permuted and torch.equal(vt.view(torch.uint8), v.view(torch.uint8))


# ---- the kernel's code


def test_the_p_move_renders_without_a_gather():
    gathered, own = _text(128, False, False), _text(128, False, True)
    assert gathered.count("ag::quad_gather_b16x2(") == 16 * 2     # the loop's P V and the last
    assert "quad_gather" not in own
    assert own.count("= ag::pack_e4m3x4(") == 16 * 2
    # the same wgmma otherwise
    assert own.count("ag::wgmma_m64n128k32_f32_e4m3_rs(") == \
        gathered.count("ag::wgmma_m64n128k32_f32_e4m3_rs(")


@needs_nvrtc
@pytest.mark.parametrize("causal", [False, True])
def test_ptx_has_no_shuffle_in_the_p_move(causal):
    def build(permuted):
        return attention_kernel(128, ag.e4m3, causal, False, permuted).compile(
            s=_sched(128, causal, permuted))
    gathered, own = build(False), build(True)
    # the gather's 32 shuffles per P V site (the loop's and the last block's) are all gone;
    # what stays is outside the P move (the same count in both kernels)
    idx_gathered, idx_own = (k.binary.ptx.count("shfl.sync.idx") for k in (gathered, own))
    assert idx_gathered - idx_own == 2 * 32 and idx_own <= 2, (idx_gathered, idx_own)
    # the softmax's row reductions still shuffle (butterfly), and P is still converted
    assert own.binary.ptx.count("shfl.sync.bfly") == gathered.binary.ptx.count("shfl.sync.bfly")
    assert own.binary.ptx.count("cvt.rn.satfinite.e4m3x2.f32") == 2 * 16 * 2
    res = own.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res


def test_schedule_and_kernel_must_agree_on_the_order():
    with pytest.raises(TraceError, match="permuted_vt"):
        lower_only(attention_kernel(128, ag.e4m3, False, False, False), s=_sched(128, False))
    with pytest.raises(TraceError, match="permuted_vt"):
        lower_only(attention_kernel(128, ag.e4m3, False, False, True),
                   s=_sched(128, False, False))
    assert A.AttentionSchedule(permuted_vt=True).problems_for(128, ag.bf16)
    with pytest.raises(ValueError, match="permuted_vt"):
        attention_kernel(128, ag.bf16, False, False, True)


# ---- the verifier


def _findings(kernel_fn, s):
    report = verify.run(lower_only(kernel_fn, s=s), include_proven=True)
    return report


@pytest.mark.parametrize("D,causal", [(64, False), (64, True), (128, False), (128, True),
                                      (256, False), (256, True)])
def test_verifies_clean_with_the_key_compared_through_the_permutation(D, causal):
    report = _findings(attention_kernel(D, ag.e4m3, causal, False, True), _sched(D, causal))
    bad = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    assert not bad, bad
    # P's key against V's row: posed and proven at both P V sites (the loop's and the last)
    agree = [f for f in report.findings if f.code == "wgmma.agree" and "A.sk == B.sk" in
             f.subject]
    assert len(agree) == 2 and all(f.status == "proven" for f in agree), agree
    covers = [f for f in report.findings if f.code == "wgmma.k-once" and "covers" in f.subject
              and "registers" not in f.subject]
    assert covers and all(f.status == "proven" for f in covers), covers


@pytest.mark.parametrize("declared", ["inverse", "natural"])
def test_a_v_order_that_disagrees_with_the_p_move_is_reported(monkeypatch, declared):
    """Seeded: the kernel states V^T's order (its tag_tensor of Vt, what the op promises to
    write) with the inverse permutation, or the natural order, while P is still read through
    acc_order_col: P's key and V's row then differ at some (row, k) and wgmma.agree must
    fail (the interpreter tests see the same mistake made by the op as wrong numbers)."""
    wrong = F.acc_order_k if declared == "inverse" else (lambda c: c)
    monkeypatch.setattr(A, "acc_order_col", wrong)
    kernel_fn = A.attention_kernel.__wrapped__(128, ag.e4m3, False, False, True)
    report = _findings(kernel_fn, _sched(128, False))
    errors = [d for d in report.diagnostics if d.severity == "error"]
    assert any("wgmma.agree" in str(d) and "sk" in str(d) for d in errors), \
        report.diagnostics


def test_p_read_in_natural_order_from_a_permuted_v_is_reported():
    """Seeded in the lowered IR: the P V wgmma of the permuted kernel loses a_acc_order (P's
    A fragment read in natural k order, i.e. AccToA8's layout without its shuffles, while V^T
    stays permuted): wgmma.agree on P's key against V's row."""
    from argus.ir import ops as O
    from tests.mutations.corpus import rewrite

    kernel = lower_only(attention_kernel(128, ag.e4m3, False, False, True), s=_sched(128, False))
    flipped = rewrite(kernel, O.Wgmma, lambda w: dataclasses.replace(w, a_acc_order=False)
                      if w.a_acc_order else w)
    assert flipped != kernel
    errors = [d for d in verify.check(flipped) if d.severity == "error"]
    assert any("wgmma.agree" in str(d) and "sk" in str(d) for d in errors), errors
