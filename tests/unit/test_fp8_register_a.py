"""wgmma with an e4m3 A from registers (the "rs" form at k32): the 8-bit A fragment is not the
f32 accumulator pattern (target/fragments.py AccToA8), so codegen moves P between the threads
of a quad. The plan is checked against both coordinate formulas for every thread; a kernel
that feeds an e4m3 conversion of an accumulator into a second wgmma runs in the interpreter
against float64, renders the shuffles, builds for sm_90a and verifies."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.errors import TraceError
from argus.target import fragments as F

torch = pytest.importorskip("torch")


def test_a8_fragment_is_cute_alayout_64x32_and_a_bijection():
    t, i = (g.ravel() for g in np.meshgrid(np.arange(128), np.arange(16), indexing="ij"))
    row, k = F.wgmma_a8_coord(t, i)
    assert (F.wgmma_a8_layout()((t, i)) == row + 64 * k).all()
    assert sorted((row + 64 * k).tolist()) == list(range(64 * 32))
    # not the accumulator pattern: the reason for the shuffles
    acc_row, acc_col = F.wgmma_acc_coord(t, i)
    assert not ((acc_row == row) & (acc_col == k)).all()


def test_acc_to_a8_plan_delivers_every_element():
    F.AccToA8.check(k_steps=4)


def test_acc_to_a8_check_catches_a_wrong_selector(monkeypatch):
    monkeypatch.setattr(F.AccToA8, "SELECT", (0x7632, 0x5410))
    with pytest.raises(AssertionError):
        F.AccToA8.check()


D, KEYS = 64, 64


@ag.kernel
def two_gemms_fp8(Q: ag.Tensor["BH", "S", D, ag.e4m3], K: ag.Tensor["BH", KEYS, D, ag.e4m3],
                  Vt: ag.Tensor["BH", D, KEYS, ag.e4m3], O: ag.Tensor["BH", "S", D, ag.f32]):
    """O = e4m3(Q K^T / 8) Vt^T for one 64-key block: S from shared memory, P converted to
    e4m3 in registers straight into the second wgmma; Vt [D, keys] K-major."""
    pid, bh = ag.grid(ag.cdiv(Q.shape[1], 64), Q.shape[0])
    sQ = ag.smem((1, 64, D), ag.e4m3, swizzle=64)
    sK = ag.smem((1, KEYS, D), ag.e4m3, swizzle=64)
    sV = ag.smem((1, D, KEYS), ag.e4m3, swizzle=64)
    pipe = ag.pipeline(1, consumers=1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sQ[st], Q, (bh, pid * 64, 0))
            ag.tma.load(sK[st], K, (bh, 0, 0))
            ag.tma.load(sV[st], Vt, (bh, 0, 0))
    with ag.role("consumer", warpgroups=1):
        o = ag.zeros((64, D))
        with pipe.consume() as st:
            s = ag.wgmma(sQ[st], sK[st], ag.zeros((64, KEYS)))
            o = ag.wgmma((s * 0.125).to(ag.e4m3), sV[st], o)
        ag.store(O, (bh, pid * 64, 0), o)


def _inputs(bh=2, s=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = (torch.randn(bh, s, D, generator=g)).to(torch.float8_e4m3fn)
    k = (torch.randn(bh, KEYS, D, generator=g)).to(torch.float8_e4m3fn)
    vt = (torch.randn(bh, D, KEYS, generator=g)).to(torch.float8_e4m3fn)
    return q, k, vt, torch.full((bh, s, D), float("nan"))


def test_interpreter_matches_float64():
    q, k, vt, o = _inputs()
    two_gemms_fp8.interpret(q, k, vt, o)
    s = (q.double() @ k.double().transpose(1, 2)).float() * 0.125
    p = s.to(torch.float8_e4m3fn).double()
    ref = p @ vt.double().transpose(1, 2)
    assert (o.double() - ref).abs().max().item() < 1e-4 * ref.abs().max().item()


@pytest.mark.parametrize("field, wrong", [("SOURCE_LANE", "(gtid & ~3) | (gtid & 1)"),
                                          ("SELECT_UPPER", "(gtid & 1)")])
def test_acc_to_a8_check_catches_a_wrong_rendered_expression(monkeypatch, field, wrong):
    """The lane and selector expressions codegen renders are the plan's, and check() proves
    them (a source lane or selector condition off by a bit fails)."""
    monkeypatch.setattr(F.AccToA8, field, wrong)
    with pytest.raises(AssertionError):
        F.AccToA8.check()


def test_codegen_gathers_the_a8_fragment_by_quad_shuffles():
    text = codegen.render(lower_only(two_gemms_fp8)).text
    assert text.count("ag::wgmma_m64n64k32_f32_e4m3_rs(") == 2      # K = 64: two k32 steps
    assert text.count("ag::quad_gather_b16x2(ag::pack_e4m3x4(") == 8  # 4 registers a step
    assert "ag::stmatrix" not in text                                 # P never touches smem
    assert f"const int a8_src = {F.AccToA8.SOURCE_LANE};" in text     # the plan's own lanes
    # the words packed come from AccToA8's plan: step 0, register 1 = row half 1
    assert F.AccToA8.word(0, 1) == (2, 3, 6, 7)


def test_builds_for_sm90a_and_verifies():
    from argus import verify

    assert compile_kernel(two_gemms_fp8).binary
    diags = verify.check(lower_only(two_gemms_fp8))
    assert not [d for d in diags if d.severity == "error"], diags


def test_an_mn_major_fp8_b_is_refused():
    @ag.kernel
    def bad(Q: ag.Tensor["BH", 64, D, ag.e4m3], V: ag.Tensor["BH", KEYS, D, ag.e4m3]):
        sV = ag.smem((1, KEYS, D), ag.e4m3, swizzle=64)
        with ag.role("consumer", warpgroups=1):
            p = ag.zeros((64, KEYS))
            ag.wgmma(p.to(ag.e4m3), sV[0], ag.zeros((64, D)), trans_b=True)

    with pytest.raises(TraceError, match="16-bit operands only"):
        lower_only(bad)
