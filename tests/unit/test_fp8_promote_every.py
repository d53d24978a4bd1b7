"""Per-tensor fp8 promotion every N K steps (Fp8GemmSchedule(promote=True, promote_every=N),
gemm_fp8.interval_promoted_mma) without a GPU: the interpreter against a float64 reference over
K step counts with and without a tail (k_steps % N), K shorter than one group, ragged M / N,
persistent wrap-around, clusters with the TMA-store epilogue, swap-AB and K atoms; the
verifier proves the promoted sum k-once (accumulating wgmma counted to the promotion after
them) and reports seeded bugs (a block promoted twice, a tail block never promoted, a second
overwrite that drops a block); NVRTC builds the loop without spills, one wgmma drain (wait 0)
per N steps; the schedule refuses what the loop does not do; the error model
(scripts/fp8_accum_model.py) and the interval it picks."""

import re

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import verify_clean  # noqa: E402
from tests.fp8_k_loops import k_loop_kernel  # noqa: E402

SA, SB = 0.375, 0.0625   # per-tensor scales (exact in f32, so the reference sees them as is)


def _every(n: int, **kw) -> Fp8GemmSchedule:
    return Fp8GemmSchedule(promote=True, promote_every=n, **kw)


def _inputs(m, n, k, seed):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 3.0).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, generator=g) * 0.5).to(torch.float8_e4m3fn)
    return a, w


def _interpret(m, n, k, schedule, out=ag.f32):
    a, w = _inputs(m, n, k, m * 3 + n + k)
    c = torch.full((m, n), float("nan"), dtype=out.torch_dtype())
    gemm_fp8_kernel(out).interpret(a, w, torch.tensor([SA]), torch.tensor([SB]), c, s=schedule)
    a64, w64 = a.double() * SA, w.double() * SB
    want = (a64 @ w64.T).numpy()
    got = c.double().numpy()
    assert not np.isnan(got).any()   # every element written
    ulp = {"f32": 2.0 ** -23, "bf16": 2.0 ** -8}[out.name]
    bound = (a64.abs() @ w64.abs().T).numpy()
    # one output rounding plus fp32 sums; a block added twice or dropped is off by a whole
    # 128-deep partial (~ 1e-1 of the bound), far past this
    tol = ulp * np.abs(want) + (k + 128) * 2.0 ** -24 * bound + 1e-30
    err = np.abs(got - want)
    assert (err <= tol).all(), float(np.max(err / tol))


@pytest.mark.parametrize("m,n,k,out,schedule", [
    (128, 128, 512, ag.f32, _every(2, bn=128, stages=3)),           # 4 steps: 2 groups, no tail
    (128, 128, 640, ag.f32, _every(2, bn=128, stages=3)),           # 5: 2 groups + 1 tail step
    (200, 256, 896, ag.bf16, _every(4, bn=128, stages=3)),          # 7: 1 group + 3 tail, ragged M
    (128, 128, 256, ag.f32, _every(4, bn=128, stages=2)),           # 2 < 4: the tail only
    (130, 300, 1152, ag.f32, _every(3, bn=160, stages=3)),          # 9 = 3 x 3, ragged N
    (190, 384, 768, ag.bf16, _every(2, bn=192, stages=2, cluster_m=2, epilogue="tma")),
    # 8 tiles on 2 persistent CTAs: the partial, the sum and the ring wrap across tiles
    (256, 256, 640, ag.f32, _every(2, bn=64, stages=2, num_sms=2, group_m=1)),
    # weight streaming: swap-AB (W rows the tile's 64, the 16 activations its columns)
    (16, 200, 640, ag.bf16, _every(2, bm=64, bn=16, consumers=1, stages=4, swap_ab=True)),
    # swap-AB promoting every block (the early-release loop)
    (16, 200, 384, ag.f32, _every(1, bm=64, bn=16, consumers=1, stages=2, swap_ab=True)),
    # K atoms: steps of 256 K, every step a group of two blocks (promote_every = 1)
    (16, 128, 768, ag.f32, _every(1, bm=64, bn=16, consumers=1, stages=3, swap_ab=True,
                                   k_atoms=2)),
    (100, 128, 1280, ag.f32, _every(2, bm=64, bn=104, consumers=1, stages=2, swap_ab=True,
                                     k_atoms=2)),
])
def test_interval_promotion_matches_float64(m, n, k, out, schedule):
    _interpret(m, n, k, schedule, out)


def test_interval_promotion_adds_the_same_blocks_as_every_block():
    """N = 1, 2, 3 sum the same products: within fp32 rounding of each other (the interpreter's
    fp32 sums regroup), and each against float64 above."""
    m, n, k = 128, 128, 896
    a, w = _inputs(m, n, k, 5)
    outs = []
    for every in (1, 2, 3):
        c = torch.full((m, n), float("nan"), dtype=torch.float32)
        gemm_fp8_kernel(ag.f32).interpret(a, w, torch.tensor([1.0]), torch.tensor([1.0]), c,
                                          s=_every(every, bn=128, stages=3))
        outs.append(c.double())
    scale = (a.double().abs() @ w.double().abs().T)
    for c in outs[1:]:
        assert ((c - outs[0]).abs() <= k * 2.0 ** -23 * scale + 1e-30).all()


# ----------------------------------------------------------------------------- verifier


@pytest.mark.parametrize("schedule", [
    _every(2, bn=128, stages=6),
    _every(4, bn=160, stages=5, cluster_m=2),
    _every(8, bn=192, stages=3, cluster_m=2, epilogue="tma"),
    _every(4, bm=64, bn=16, consumers=1, stages=16, swap_ab=True),
    _every(2, bm=64, bn=16, consumers=1, stages=8, swap_ab=True, k_atoms=2),
], ids=["128-n2", "160-n4-c2", "192-n8-tma", "swap16-n4", "swap16-n2-atoms2"])
def test_interval_promotion_verifies_clean(schedule):
    verify_clean(lower_only(gemm_fp8_kernel(ag.bf16), s=schedule))


def _interval_loop(bug: str):
    """The interval loop (every = 2) over the test ring, with a seeded bug: "twice" (the
    group's first block promoted after its step and again with the group), "tail" (the tail
    step's partial never promoted), "overwrite" (the group's second block overwrites the
    first), or "" (none)."""
    def k_loop(ring, k_steps, wg):
        every = 2
        acc = ag.zeros((64, 128), ag.f32)
        part = ag.zeros((64, 128), ag.f32)
        for g in ag.range(k_steps // every):
            for i in range(every):
                with ring.pipe.consume() as stage:
                    ag.wgmma(ring.a[stage].rows_of(wg * 64, 64), ring.b[stage].rows_of(0, 128),
                             part, overwrite=i == 0 or (bug == "overwrite" and i == 1))
                if bug == "twice" and i == 0:
                    acc = acc + part
            acc = acc + part
        for t in ag.range(k_steps % every):
            with ring.pipe.consume() as stage:
                ag.wgmma(ring.a[stage].rows_of(wg * 64, 64), ring.b[stage].rows_of(0, 128),
                         part, overwrite=True)
            if bug != "tail":
                acc = acc + part
        return acc
    return k_loop_kernel(f"interval_{bug or 'ok'}", k_loop)


def test_verifier_proves_the_interval_loop():
    from argus import verify

    report = verify.run(lower_only(_interval_loop("")))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert any(d.code == "wgmma.k-once" for d in report.proven)


@pytest.mark.parametrize("bug,says", [
    ("twice", "twice"),                   # a block promoted twice
    ("tail", "never reach"),              # the tail's block skipped: K not covered
    ("overwrite", "never reach"),         # the second overwrite drops the group's first block
])
def test_verifier_reports_a_seeded_interval_bug(bug, says):
    from argus import verify

    errors = [d for d in verify.run(lower_only(_interval_loop(bug))).errors
              if d.code == "wgmma.k-once"]
    assert errors, bug
    assert any(says in str(d) for d in errors), "\n".join(str(d) for d in errors)


# ----------------------------------------------------------------------------- schedule checks


@pytest.mark.parametrize("kw,says", [
    (dict(promote_every=2), "promote=True"),
    (dict(promote=True, promote_every=2, overlap=True, bn=128), "overlap"),
    (dict(promote=True, promote_every=2, bn=256, n_split=2), "n_split=2"),
    (dict(promote=True, promote_every=0), "promote_every=0"),
    (dict(promote=True, promote_every=2, bn=224), "bn <= 160; 192 with promote_every > 1"),
])
def test_schedule_refuses_what_the_interval_loop_does_not_do(kw, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        Fp8GemmSchedule(**kw)


def test_blockscaled_kernel_refuses_an_interval():
    with pytest.raises(ag.TraceError, match="one K block"):
        lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=_every(2, bn=128, stages=3))


def test_repr_and_keys_unchanged_at_one():
    assert "promote_every" not in repr(Fp8GemmSchedule(bn=128, promote=True))
    assert repr(_every(4, bn=128)).endswith("promote_every=4)")


# ----------------------------------------------------------------------------- NVRTC


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("schedule", [
    _every(4, bn=128, stages=6),
    _every(4, bn=192, stages=3, cluster_m=2, epilogue="tma"),
    _every(4, bm=64, bn=16, consumers=1, stages=16, swap_ab=True),
    _every(2, bm=64, bn=128, consumers=1, stages=8, swap_ab=True),
], ids=["128-n4", "192-n4-tma", "swap16-n4", "swap128-n2"])
def test_nvrtc_builds_the_interval_loop_without_spills(schedule):
    """No local memory, and in the K loop one drain (wgmma wait 0) per group of N steps: the
    unrolled group's N - 1 first steps keep one wgmma group in flight (wait 1)."""
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(gemm_fp8_kernel(ag.bf16), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    text = source.text
    # the group's loop: N steps, each a wgmma wait; the last of them (after the loop of steps)
    # the drain before the FADDs
    # from the group's first (overwriting) wgmma call on: its N steps' waits, then the drain
    body = text[re.search(r"_wo\(t\d+", text).start():]
    waits = re.findall(r"wgmma_wait<(\d)>", body)
    n = schedule.promote_every
    assert waits[:n + 1] == ["1"] * n + ["0"], waits[:n + 1]


# ----------------------------------------------------------------------------- the error model


def _model():
    from tests.loading import load_script
    return load_script("fp8_accum_model")


def test_accumulator_model_reproduces_the_measured_errors():
    """13 fraction bits (truncation) reproduce the H200's unpromoted errors at K = 2048 / 4096
    within 6%, and 12 or 14 bits do not (the fit has something to fit); promotion every block
    comes to the floor of a bf16 rounding (torch's measured 1.7e-3)."""
    mod = _model()
    for k in (2048, 4096):
        got = mod.model_error(k, frac_bits=13, group=32, promote_every=None, rows=64, cols=64)
        assert abs(got / mod.MEASURED_UNPROMOTED[k] - 1) < 0.06, (k, got)
        for bits in (12, 14):
            other = mod.model_error(k, frac_bits=bits, group=32, promote_every=None, rows=64,
                                    cols=64)
            assert abs(other / mod.MEASURED_UNPROMOTED[k] - 1) > 0.09, (k, bits, other)
    one = mod.model_error(4096, frac_bits=13, group=32, promote_every=1, rows=128, cols=128)
    assert abs(one / mod.MEASURED_PROMOTED - 1) < 0.04, one


def test_promote_every_for_matches_the_model():
    """fp8_schedules.promote_every_for(k) is the largest interval whose modelled error is within
    PROMOTE_ERROR_SLACK of promotion every block (torch's), recomputed here from the model."""
    from argus.ops import fp8_schedules

    mod = _model()
    k = 4096
    base = mod.model_error(k, frac_bits=13, group=32, promote_every=1, rows=64, cols=64)
    ok = [n for n in (1, 2, 4, 8) if mod.model_error(k, frac_bits=13, group=32,
                                                      promote_every=n, rows=64, cols=64)
          <= base * (1 + fp8_schedules.PROMOTE_ERROR_SLACK)]
    assert fp8_schedules.promote_every_for(k) == max(ok)
    assert fp8_schedules.promote_every_for(128) == 1

