"""The emulated exp2 (argus/target/exp2_emulation.py; ag.exp2(approx=True, emulate=...)):
its accuracy swept over float32 grids and whole binades, its special values against the
SFU's ex2.approx.ftz (NaN, +-inf, ftz), the polynomial's fit, the element-selection rule,
the device header's literals against the Python constants, the interpreter and the generated
code choosing the same elements, and the errors for a selection a layout cannot render."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.errors import CompileError, TraceError
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.runtime import nvrtc_available
from argus.target import exp2_emulation as E

HEADER = Path(__file__).resolve().parents[2] / "argus/codegen/device/argus_sm90.cuh"


def _rel_error(x: np.ndarray) -> float:
    """Max relative error of the emulation against float64 2^x where 2^x is a normal float32
    (below 2^-126 both forms give 0: checked apart)."""
    want = np.exp2(x.astype(np.float64))
    got = E.exp2_emulated(x).astype(np.float64)
    normal = (want >= 2.0 ** -126) & (want < 2.0 ** 128)
    assert normal.any()
    return float(np.max(np.abs(got[normal] / want[normal] - 1.0)))


def _binade(lo: float) -> np.ndarray:
    """Every float32 with the sign and exponent of `lo` (a power of two, either sign)."""
    base = int(np.float32(lo).view(np.uint32))
    return (np.arange(1 << 23, dtype=np.uint32) + np.uint32(base)).view(np.float32)


def test_reachable_range_on_a_grid():
    """The softmax's exponents: x <= 0 after the max subtraction, up to +8 with the FP8
    path's P_BIAS (x - P_BIAS), and down past the flush at -126: a 2^-14 grid."""
    x = (np.arange(-131 * 2 ** 14, 9 * 2 ** 14 + 1) / 2.0 ** 14).astype(np.float32)
    assert _rel_error(x) <= E.MAX_REL_ERROR
    got = E.exp2_emulated(x)
    assert np.all(got[x < -126] == 0.0), "2^x below 2^-126 flushes to 0 (as the SFU's ftz)"
    assert np.all(got[x >= -126] > 0.0)
    assert np.all(got[x <= 0] <= 1.0), "2^x <= 1 for x <= 0 (p(1) = 2 exactly)"
    assert np.all(np.diff(got) >= 0), "monotone on the grid"


@pytest.mark.parametrize("lo", [-0.5, -64.0, 4.0, -2.0 ** -10])
def test_every_float_of_a_binade(lo):
    """All 2^23 float32 of a binade: every fraction x - floor(x) the reduction produces at
    that scale ([-1, -0.5): the fractions just below 1, where 1 + x rounds; [-64, -128): the
    coarsest fractions of the softmax's range; [4, 8): the FP8 offset)."""
    assert _rel_error(_binade(lo)) <= E.MAX_REL_ERROR


def test_exact_at_integers():
    """p(0) = 1 and p(1) = 2 in float32 Horner arithmetic: 2^n exactly for every integer n
    the range keeps (a row's maximum gives P = 1, FP8's 2^8 exactly)."""
    n = np.arange(-126, 128).astype(np.float32)
    assert np.array_equal(E.exp2_emulated(n), np.exp2(n.astype(np.float64)).astype(np.float32))
    # just below an integer the fraction rounds up to 1.0: still 2^n, never above
    below = np.nextafter(n, np.float32(-np.inf))
    assert np.all(E.exp2_emulated(below) <= E.exp2_emulated(n))


def test_special_values_as_the_sfu():
    """NaN, +-inf, the flushes: the emulation gives what ex2.approx.ftz.f32 gives (PTX ISA,
    ex2: -inf -> +0, +inf -> +inf, NaN -> NaN, subnormal inputs read as +-0; results below
    2^-126 flushed to 0), and +inf from 2^128 up."""
    x = np.array([-np.inf, np.inf, np.nan, -np.nan, 0.0, -0.0, 1e-40, -1e-40, -126.0,
                  -126.5, -127.0, -1000.0, 128.0, 1000.0, -3e38, 3e38], np.float32)
    got, sfu = E.exp2_emulated(x), E.exp2_mufu(x)
    assert np.array_equal(np.isnan(got), np.isnan(sfu))
    ok = ~np.isnan(sfu)
    assert np.array_equal(got[ok], sfu[ok]), (x[ok], got[ok], sfu[ok])
    assert not np.signbit(got[0]), "2^-inf is +0"
    assert got[8] == 2.0 ** -126


def test_fit_reproduces_the_coefficients():
    """C1..C3 are the float32 roundings of fit_coefficients' minimax solution (p(0) = 1,
    p(1) = 2), and p(1) evaluates to 2 exactly in float32."""
    c1, c2, c3, err = E.fit_coefficients()
    for got, want in ((E.C1, c1), (E.C2, c2), (E.C3, c3)):
        assert got == float(np.float32(want))
    assert err < 1.04e-4
    one = np.float32(1.0)
    p = E._fma(E._fma(E._fma(one, np.float32(E.C3), np.float32(E.C2)), one, np.float32(E.C1)),
               one, np.float32(1.0))
    assert p == 2.0


def test_device_header_renders_the_same_constants():
    """ag::exp2_emu in the device header uses exactly the model's constants and steps."""
    text = HEADER.read_text()
    body = text[text.index("float exp2_emu(float x)"):]
    body = body[:body.index("return r;")]
    lits = re.findall(r"0f[0-9A-F]{8}", body)
    want = [E.f32_hex(v) for v in (E.LOW, E.HIGH, E.MAGIC, E.MAGIC, E.C3, E.C2, E.C1, 1.0)]
    assert lits == want, (lits, want)
    steps = re.findall(r"\"\s*([a-z][A-Za-z0-9.]*[A-Za-z0-9])\s", body)
    assert [s for s in steps if not s.startswith(".reg")] == [
        "max.NaN.f32", "min.NaN.f32", "add.rm.ftz.f32", "sub.rn.ftz.f32", "sub.rn.ftz.f32",
        "fma.rn.ftz.f32", "fma.rn.ftz.f32", "fma.rn.ftz.f32", "shl.b32", "mul.rn.ftz.f32"]


@pytest.mark.parametrize("count,period", [(0, 16), (1, 16), (2, 16), (4, 16), (6, 16),
                                          (16, 16), (3, 8), (1, 3)])
def test_selection_picks_count_of_every_period_spread(count, period):
    cols = E.emulated_columns(8 * period * 3, (8, count, period))
    groups = cols.reshape(-1, 8)
    assert np.all(groups == groups[:, :1]), "whole groups of 8 columns"
    per_period = groups[:, 0].reshape(3, period)
    assert np.all(per_period.sum(axis=1) == count)
    assert np.array_equal(per_period[0], per_period[1])
    if count:   # spread: no two picks closer than period // count - 1 groups apart
        picks = np.flatnonzero(per_period[0])
        assert np.all(np.diff(picks) >= period // count)


@pytest.mark.parametrize("spec", [(8, 17, 16), (0, 1, 16), (8, 1, 0), (8, 1), (8, -1, 4)])
def test_bad_specs_are_named(spec):
    assert E.check_spec(spec) is not None
    assert E.check_spec(()) is None and E.check_spec((8, 4, 16)) is None


# A blocked 4 x 1024 f32 tile over 128 threads holds columns 4t + r + 512k (k = 0, 1): groups
# of 512 columns are static per register, groups of 8 are not
@ag.kernel
def pow2e(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], group: int = 512,
          count: int = 1):
    (b,) = ag.grid(1)
    ag.store(Y, (0, 0), ag.exp2(ag.load(X, (0, 0), (4, 1024)), approx=True,
                                emulate=(count, 2, group)))


def _x():
    x = np.random.default_rng(1).uniform(-40.0, 8.0, (4, 1024)).astype(np.float32)
    x[:, :3] = [-np.inf, 0.0, -126.5]
    x[:, 512:515] = [-np.inf, 0.0, -126.5]
    return x


def test_interpreter_takes_the_emulated_columns():
    x, y = _x(), np.full((4, 1024), np.nan, np.float32)
    pow2e.interpret(x, y)
    assert np.array_equal(y[:, :512], E.exp2_emulated(x[:, :512]))
    assert np.array_equal(y[:, 512:], E.exp2_mufu(x[:, 512:]))
    assert not np.array_equal(y[:, 3:512], E.exp2_mufu(x[:, 3:512])), "the forms differ"


def test_generated_code_renders_the_chosen_registers():
    text = codegen.render(lower_only(pow2e)).text
    assert text.count("ag::exp2_emu(") == 16 and text.count("ag::exp2_approx(") == 16
    off = codegen.render(lower_only(pow2e, count=0)).text
    assert "ag::exp2_emu(" not in off and off.count("ag::exp2_approx(") == 32


def test_ir_prints_the_selection_only_when_set():
    on, off = lower_only(pow2e), lower_only(pow2e, count=0)
    assert "emulate=(512, 1, 2)" in print_kernel(on)
    assert "emulate" not in print_kernel(off)
    assert parse_kernel(print_kernel(on)) == on


def test_a_thread_dependent_selection_is_refused():
    with pytest.raises(CompileError, match="register 0 holds emulated columns in some threads"):
        codegen.render(lower_only(pow2e, group=8))


def test_emulate_needs_the_approx_exp2():
    @ag.kernel
    def exact(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        (b,) = ag.grid(1)
        ag.store(Y, (0, 0), ag.exp2(ag.load(X, (0, 0), (4, 1024)), emulate=(1, 2)))

    with pytest.raises(TraceError, match="approx=True"):
        lower_only(exact)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
def test_ptx_holds_both_forms():
    ptx = compile_kernel(pow2e, verify=False).binary.ptx
    assert ptx.count("ex2.approx.ftz.f32") == 16
    assert ptx.count("add.rm.ftz.f32") == 16 and ptx.count("max.NaN.f32") == 16


@ag.kernel
def pow2_row64(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32], count=3):
    (b,) = ag.grid(1)
    ag.store(Y, (0, 0), ag.exp2(ag.load(X, (0, 0), (4, 64)), approx=True,
                                emulate=(count, 16)))


@pytest.mark.parametrize("ncols,count,ok", [(64, 2, True), (64, 4, True), (64, 3, False),
                                            (64, 1, False), (128, 3, True), (192, 3, False),
                                            (256, 7, True)])
def test_a_fraction_the_row_cannot_hold_is_refused(ncols, count, ok):
    """count of every 16 groups of 8 over fewer than 16 groups (a 64-key block) is not
    count / 16 of the row for odd counts: refused by name, never silently rounded (the review
    of 2026-12-04: attention's exp2_emulate at block_n 64)."""
    problem = E.fraction_problem(ncols, (8, count, 16))
    mask = None if problem else E.emulated_columns(ncols, (8, count, 16))
    if ok:
        assert problem is None and mask.sum() * 16 == count * ncols
    else:
        assert problem and f"{count} of every 16" in problem and "exactly: [0, 2, 4" in problem
        with pytest.raises(ValueError, match="cannot be kept"):
            E.emulated_columns(ncols, (8, count, 16))


def test_codegen_and_interpreter_refuse_an_unholdable_fraction():
    with pytest.raises(CompileError, match="cannot be kept on a row of 64 columns") as e:
        codegen.render(lower_only(pow2_row64))
    assert "pick a count the row holds" in str(e.value)
    x, y = np.zeros((4, 64), np.float32), np.zeros((4, 64), np.float32)
    with pytest.raises((ValueError, CompileError), match="cannot be kept"):
        pow2_row64.interpret(x, y)
    assert not y.any(), "nothing was written"
