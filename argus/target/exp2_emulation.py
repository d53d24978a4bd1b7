"""2^x on the FMA pipe: the emulated form of `exp2_approx` and which elements take it.

Job: the one definition of (1) the arithmetic of the emulated ex2 (a numpy model that the
interpreter runs and the tests sweep; the device header's `ag::exp2_emu` renders the same
sequence with the same constants, and tests/unit/test_exp2_emulation.py checks the header's
literals against these), and (2) the static rule that picks the elements of a tile computed
that way (`emulated_columns`), which the interpreter and codegen both read.

Why: on sm_90 the SFU (MUFU.EX2, 16 results per clock per SM) is as slow per element of a
softmax as the fp8 tensor core is per 128 x 128 x 128 block (ncu, FP8 hd128: tensor 39% + XU
42% active), and the FMA pipe is a quarter busy. FlashAttention-4 moves part of the
exponentials onto the FMA pipe with a Cody-Waite split and a degree-3 polynomial
(flash-attention, flash_attn/cute/utils.py `ex2_emulation`, `combine_int_frac_ex2`; softmax.py
`apply_exp2_convert`, whose ex2_emu_freq picks a static subset of fragments). Ours differs in
three ways, each for a semantic reason: both ends are clamped with NaN-propagating min/max and
the exponent is applied by a multiply, so NaN, +-inf and the flush to zero of results below
2^-126 are those of ex2.approx.ftz.f32 (FA4's integer add turns NaN into a finite number);
and the polynomial is pinned to p(0) = 1 and p(1) = 2 (exact at every integer x, so
exp2(0) = 1 and a softmax's row maximum gets P = 1 exactly, and 2^x <= 1 for x <= 0 as for
the MUFU), a minimax fit of the relative error under those two constraints (our own fit,
`fit_coefficients`; max relative error 1.03e-4 = 2^-13.2 on [0, 1], against FA4's
unconstrained 8.8e-5 with p(1) = 1.99983).

The sequence (PTX; one thread, f32 registers):

    c = min.NaN(max.NaN(x, -127), 128)       2 x FMNMX (ALU)      NaN stays NaN
    t = add.rm(c, MAGIC)                      FADD (FMA pipe)      MAGIC = 1.5 * 2^23 + 127:
                                                                   t = MAGIC + floor(c), its
                                                                   low bits 127 + floor(c)
    f = c - (t - MAGIC)                       2 x FADD             in [0, 1], exact
    p = ((C3 f + C2) f + C1) f + 1            3 x FFMA             ~ 2^f, p(0) = 1, p(1) = 2
    r = p * bits(t << 23)                     SHL (ALU), FMUL      2^floor(c): 0 at -127
                                                                   (ftz), +inf at 128

so 7 FMA-pipe and 3 ALU instructions against MUFU.EX2's one; subnormal inputs read as 0 (ftz,
as the MUFU). Accuracy: relative error <= 1.05e-4 (< 2^-13) wherever 2^x >= 2^-126 (swept in
tests/unit/test_exp2_emulation.py), enough for a bf16 P (2^-9 is half an ulp of bf16) and far
below e4m3's 2^-4. The MUFU's own relative error is <= 2^-22 (PTX ISA, ex2).

The numpy model computes each FMA in float64 before rounding to float32: the product is exact
there, so it differs from the device's fused multiply-add only where the float64 sum lands on
a float32 rounding tie (the last bit, rarely).

Selection (data in the IR: `Elementwise.emulate = (group, count, period)`): along the last
axis, columns are taken in groups of `group`; group k = (col // group) % period is emulated iff
(k * count) % period < count, which picks exactly `count` of every `period` groups, spread
evenly (count 4 of 16: groups 0, 4, 8, 12). With group 8 on a wgmma accumulator the group is
the register pair index, the same for every thread (a thread holds columns 8j + 2 (lane % 4)
+ {0, 1}), so the choice is static per register: codegen checks that for the tile's layout.
"""

from __future__ import annotations

import numpy as np

# clamp bounds: 2^-127 and below flush to 0 (ftz: the MUFU's results below 2^-126 are 0),
# 2^128 and above are +inf
LOW, HIGH = -127.0, 128.0
# 1.5 * 2^23 + 127: adding it rounds c to an integer (ulp 1 in [2^23, 2^24)); rounding down
# (add.rm) gives floor(c), and its low mantissa bits are 127 + floor(c), the biased exponent
MAGIC = float(3 * 2 ** 22 + 127)
# p(f) = 1 + C1 f + C2 f^2 + C3 f^3, C1 + C2 + C3 = 1 in float32 Horner arithmetic
# (fit_coefficients; these are its float32 roundings, checked by the tests)
C1 = 0.6954243183135986      # 0f3F320754
C2 = 0.2263076901435852      # 0f3E67BD34
C3 = 0.07826796174049377     # 0f3DA04AF4
# the bound the tests hold the model to (measured 1.03e-4 plus float32 rounding)
MAX_REL_ERROR = 1.05e-4


def f32_hex(v: float) -> str:
    """A float32 constant as PTX writes it (0fXXXXXXXX), as the device header spells them."""
    return "0f" + format(int(np.float32(v).view(np.uint32)), "08X")


def fit_coefficients(samples: int = 20001) -> tuple[float, float, float, float]:
    """(C1, C2, C3, max relative error) of the degree-3 polynomial with p(0) = 1, p(1) = 2
    minimizing max |p(f) / 2^f - 1| on [0, 1], by grid refinement over (C2, C3) (the error
    is convex in them: a max of absolute values of linear functions). How C1..C3 were
    made; the tests re-run it and compare."""
    f = np.linspace(0.0, 1.0, samples)
    t = np.exp2(f)

    def err(c2, c3):
        c1 = 1.0 - c2 - c3
        return np.max(np.abs((1.0 + f * (c1 + f * (c2 + f * c3))) / t - 1.0))

    best, b2, b3, span = (np.inf, 0.0, 0.0), 0.25, 0.1, 0.15
    for _ in range(14):   # a 25 x 25 grid around the best point, a third as wide each time
        for c2 in np.linspace(b2 - span, b2 + span, 25):
            for c3 in np.linspace(b3 - span, b3 + span, 25):
                e = err(c2, c3)
                if e < best[0]:
                    best = (e, c2, c3)
        _, b2, b3 = best
        span /= 3
    e, c2, c3 = best
    return 1.0 - c2 - c3, c2, c3, e


def _fma(a, b, c) -> np.ndarray:
    """fma.rn.f32 to within double rounding (module docstring)."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(np.float32)


def _ftz(x: np.ndarray) -> np.ndarray:
    """Subnormals to zeros of their sign (np.copysign: NaN and inf pass unchanged)."""
    return np.where(np.abs(x) < np.float32(2.0 ** -126), np.copysign(np.float32(0.0), x), x)


def exp2_emulated(x) -> np.ndarray:
    """2^x as the emulated sequence computes it (float32 in, float32 out)."""
    x = _ftz(np.asarray(x, dtype=np.float32))
    with np.errstate(all="ignore"):
        c = np.minimum(np.maximum(x, np.float32(LOW)), np.float32(HIGH))   # NaN propagates
        n = np.floor(np.nan_to_num(c, nan=0.0))             # t - MAGIC, exact
        f = (c - n.astype(np.float32)).astype(np.float32)   # sub.rn: NaN stays NaN
        p = _fma(_fma(_fma(f, np.float32(C3), np.float32(C2)), f, np.float32(C1)), f,
                 np.float32(1.0))
        biased = (n.astype(np.int64) + 127).astype(np.uint32) << np.uint32(23)
        scale = biased.view(np.float32)                     # 0 at n = -127, +inf at 128
        r = (p * scale).astype(np.float32)
        return _ftz(np.where(np.isnan(c), np.float32(np.nan), r)).astype(np.float32)


def exp2_mufu(x) -> np.ndarray:
    """2^x as ex2.approx.ftz.f32 (the model: exact 2^x with ftz on input and result)."""
    x = _ftz(np.asarray(x, dtype=np.float32))
    with np.errstate(all="ignore"):
        return _ftz(np.exp2(x).astype(np.float32))


def check_spec(emulate: tuple[int, ...]) -> str | None:
    """What is wrong with an `Elementwise.emulate` value, or None; () is off."""
    if emulate == ():
        return None
    if len(emulate) != 3 or not all(isinstance(v, int) for v in emulate):
        return f"emulate={emulate!r} is not (group, count, period)"
    group, count, period = emulate
    if group < 1 or period < 1 or not 0 <= count <= period:
        return (f"emulate={emulate!r}: group >= 1, period >= 1 and 0 <= count <= period "
                f"are needed")
    return None


def emulated_group(k: int, count: int, period: int) -> bool:
    """Whether column group k (of `period`) is emulated: `count` of every `period`, spread."""
    return (k % period) * count % period < count


def emulated_columns(ncols: int, emulate: tuple[int, ...]) -> np.ndarray:
    """A boolean mask over the last axis: which columns take the emulated form."""
    if not emulate:
        return np.zeros(ncols, dtype=bool)
    problem = fraction_problem(ncols, emulate)
    if problem:   # codegen refuses it with the op's location first; the interpreter alike
        raise ValueError(f"exp2 emulate={emulate!r}: {problem}")
    group, count, period = emulate
    return np.array([emulated_group(c // group, count, period) for c in range(ncols)],
                    dtype=bool)


def fraction_problem(ncols: int, emulate: tuple[int, ...]) -> str | None:
    """What is wrong with emulating `count` of every `period` groups over a last axis of
    `ncols` columns, or None. The spread rule picks exactly `count` of every `period`
    consecutive groups, but a row of fewer (or not a multiple of `period`) groups gets
    whatever the rule's first groups hold: 3 of 16 over 8 groups (a 64-key block) emulates 2 of
    8, a quarter rather than 3/16. A fraction the row cannot hold is refused, not rounded."""
    if not emulate:
        return None
    group, count, period = emulate
    groups = -(-ncols // group)
    picked = sum(emulated_group(k, count, period) for k in range(groups))
    if picked * period == count * groups:
        return None
    holdable = sorted({c for c in range(period + 1)
                       if sum(emulated_group(k, c, period) for k in range(groups)) * period
                       == c * groups})
    return (f"{count} of every {period} groups of {group} columns cannot be kept on a row of "
            f"{ncols} columns ({groups} groups: the spread picks {picked}, not "
            f"{count * groups / period:g}); counts this row holds exactly: {holdable}")
