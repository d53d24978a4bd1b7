"""The fp32 square matmul computed from bf16 pieces meets the judge's strict fp32 bound, shown on
the CPU before any GPU run.

What the GPU computes is emulated in argus/agent/split_numerics.py: the pieces (checked here
against the real Argus split kernel in the interpreter), exact products, and the accumulation
two ways: in fp32 (one float32 matmul; float32 k-blocks of 64 summed in reverse order), and as
Hopper's tensor core does it (`tc_gemm`: a truncating 16-term block FMA). The fp32 emulation is
what predicted 4e-6 for the 3-term split before the H200 measured 2.91e-5; the tensor-core model
reproduces the measurement, so the strict default is judged by it. Inputs are the task's own
(`get_inputs`, uniform [0, 1)) and the judge's re-distributions (signed normal, Student-t,
large, signed uniform), plus a wide dynamic range.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from argus.agent import split_numerics as sn
from argus.agent.composer import compose
from argus.agent.evaluate import import_source
from argus.agent.families import get_family
from argus.bench.kernelbench import inputs as kb_inputs
from argus.bench.kernelbench.tasks import load_task
from tests.agent._tasks import MATMUL_TASK

FLOOR = 1e-5                                   # the judge's strict normwise bound for fp32
JUDGE_SETS = ("task", "normal", "heavy", "large", "signed")
OLD_3_TERMS = ((0, 0), (0, 1), (1, 0))         # the layout the H200 run measured: hi*hi first
H200_MEASURED = {"task": 2.91e-5, "normal": 2.13e-5}   # docs/perf/agent.md, K = 4096


@pytest.fixture(scope="module")
def task_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("mm") / "1_Square_matrix_multiplication_.py"
    path.write_text(MATMUL_TASK)
    return path


def _operands(path, n: int, k: int, dist: str, seed: int = 1):
    """A [n, k] and B [k, n] fp32 (as float64 arrays) from the task's own get_inputs() at size
    max(n, k), cut to shape, then re-distributed like the judge's input set `dist` ("wide": signed
    normal times 10^U(-10, 10), a large dynamic range)."""
    module = load_task(path, {"N": max(n, k)})
    base = [x[:n, :k] if i == 0 else x[:k, :n]
            for i, x in enumerate(kb_inputs.task_inputs(module, seed))]
    if dist == "wide":
        gen = torch.Generator().manual_seed(seed)
        a, b = (torch.randn(x.shape, generator=gen) * 10.0 ** (torch.rand(x.shape, generator=gen)
                                                               * 20 - 10) for x in base)
    else:
        a, b = kb_inputs.transform(base, dist, seed)[0]
    return (a.contiguous().numpy().astype(np.float64), b.contiguous().numpy().astype(np.float64))


def _solution(task, params, tmp_path, stem):
    family = get_family("gemm")
    params = family.normalize(task, dict(family.naive_params(task), **params))
    src = family.render_solution(task, family.render_kernel(task, params), params)
    return import_source(src, tmp_path, stem)


# ----------------------------------------------------------------------------- the split kernel


@pytest.mark.parametrize("k_axis", [1, 0])
def test_split_kernel_writes_exact_pieces_in_the_concatenated_layout(task_file, tmp_path,
                                                                     k_axis):
    """The real Argus split kernel (interpreted): slot t of chunk s holds piece SLOTS[t] of that
    chunk, each piece is the bf16 rounding (nearest even) of the fp32 remainder, and
    x0 + x1 + x2 reconstructs x to 2^-24 |x|, across a 1e-25..1e25 dynamic range."""
    task = compose(task_file)
    mod = _solution(task, {"split_terms": 6, "k_chunks": 2}, tmp_path, f"split_{k_axis}")
    gen = torch.Generator().manual_seed(3)
    shape = (24, 256) if k_axis == 1 else (256, 40)
    x = (torch.randn(shape, generator=gen)
         * 10.0 ** (torch.rand(shape, generator=gen) * 50 - 25)).float()
    slots = mod.A_SLOTS if k_axis == 1 else mod.B_SLOTS
    y = mod.split_operand(x, slots, 2, k_axis)
    assert y.dtype == torch.bfloat16
    kc, t = 256 // 2, len(slots)
    assert y.shape == ((2, 24, t * kc) if k_axis == 1 else (2, t * kc, 40))
    pieces = sn.split(x.numpy(), 3)
    assert pieces[0].tolist() == x.to(torch.bfloat16).double().numpy().tolist()
    for s in range(2):
        for slot, i in enumerate(slots):
            if k_axis == 1:
                got, want = y[s, :, slot * kc:(slot + 1) * kc], pieces[i][:, s * kc:(s + 1) * kc]
            else:
                got, want = y[s, slot * kc:(slot + 1) * kc], pieces[i][s * kc:(s + 1) * kc]
            assert np.array_equal(got.double().numpy(), want), (s, slot, i)
    xd = x.double().numpy()
    rest = np.abs(xd - (pieces[0] + pieces[1] + pieces[2]))
    assert np.all(rest <= 2.0 ** -24 * np.abs(xd))
    # each remainder is exact in fp32, so a piece is exactly bf16(x - earlier pieces)
    r1 = (x - x.to(torch.bfloat16).float())
    assert np.array_equal(r1.to(torch.bfloat16).double().numpy(), pieces[1])


# ----------------------------------------------------------------------------- fp32 accumulation


@pytest.mark.parametrize("dist,n", [(d, 512) for d in (*JUDGE_SETS, "wide")]
                         + [("task", 1024), ("normal", 1024)])
def test_six_terms_are_fp32_accurate_with_fp32_accumulation(task_file, dist, n):
    """6 terms: < 1e-6 with fp32 accumulation, in one matmul and in 64-deep k-blocks summed in
    reverse order; 3 terms lose the split's 2^-16 pieces (> 2e-6 on signed data), which the
    strict track cannot afford once the tensor core's accumulation is added (below)."""
    a, b = _operands(task_file, n, n, dist)
    ref = a @ b
    for gemm in (sn.fp32_gemm, lambda x, y: sn.fp32_gemm(x, y, block=64, reverse=True)):
        six = sn.rel_l2(sn.split_gemm(a, b, 6, 1, gemm=gemm), ref)
        assert six < 1e-6, (dist, n, six)
        three = sn.rel_l2(sn.split_gemm(a, b, 3, 1, gemm=gemm), ref)
        if dist != "task":           # all-positive data averages the split's errors out
            assert three > 2e-6, (dist, n, three)


# ----------------------------------------------------------------------------- the tensor cores


def test_tensor_core_model_reproduces_the_h200_failure(task_file):
    """The old 3-term layout in one accumulator, K = 4096: the model gives the errors the H200
    measured (both above the strict bound), which fp32 accumulation does not."""
    for dist, measured in H200_MEASURED.items():
        a, b = _operands(task_file, 32, 4096, dist, seed=2)
        ref = a @ b
        tc = sn.rel_l2(sn.split_gemm(a, b, 3, 1, order=OLD_3_TERMS), ref)
        fp32 = sn.rel_l2(sn.split_gemm(a, b, 3, 1, gemm=sn.fp32_gemm, order=OLD_3_TERMS), ref)
        assert 0.75 * measured < tc < 1.25 * measured, (dist, tc, measured)
        assert tc > FLOOR > fp32, (dist, tc, fp32)


def test_strict_default_passes_on_the_tensor_core_model(task_file):
    """The planner's start for the 4096^3 task (6 terms, K chunks of 1024, smallest products
    first) stays 4x under the strict bounds on every judge distribution; 6 terms in one
    accumulator (K' = 6K, x0*y0 first) would fail."""
    task = compose(task_file)
    family = get_family("gemm")
    start = family.normalize(task, family.naive_params(task))
    assert (start["split_terms"], start["k_chunks"]) == (6, 4)
    assert task.compute == "bf16x6" and task.track == "strict"
    worst = 0.0
    for dist in (*JUDGE_SETS, "wide"):
        a, b = _operands(task_file, 32, 4096, dist, seed=4)
        ref = a @ b
        y = sn.split_gemm(a, b, start["split_terms"], start["k_chunks"])
        err, elem = sn.rel_l2(y, ref), sn.max_elem(y, ref)
        assert err < FLOOR / 4 and elem < 1e-4 / 10, (dist, err, elem)
        worst = max(worst, err)
        if dist == "normal":
            one_chain = sn.split_gemm(a, b, 6, 1, order=sorted(sn.SLOTS[6]))
            assert sn.rel_l2(one_chain, ref) > FLOOR
    assert worst > 1e-7        # the model does see the accumulation error


@pytest.mark.parametrize("k,chunks", [(1024, 1), (2048, 1), (4096, 2), (4096, 4), (4096, 8)])
def test_error_model_bounds_the_emulation(task_file, k, chunks):
    """`predicted_rel_l2` (what the split_accuracy rule uses) is an upper estimate of the
    tensor-core model on the worst judge distribution, and not a loose one."""
    predicted = sn.predicted_rel_l2(6, k, chunks)
    errs = []
    for dist in ("task", "normal"):
        a, b = _operands(task_file, 32, k, dist, seed=5)
        errs.append(sn.rel_l2(sn.split_gemm(a, b, 6, chunks), a @ b))
    assert max(errs) <= predicted <= 3 * max(errs), (k, chunks, errs, predicted)


# ----------------------------------------------------------------------------- the planner


def test_planner_rules_and_costs_know_the_split(task_file):
    """split_accuracy prunes splits predicted to come within 2x of the strict bound (3 terms; 6
    terms in one accumulator or in 2 chunks at K = 4096) before anything runs; the cost model
    charges 6 terms about twice the 3-term split."""
    task = compose(task_file)
    family = get_family("gemm")
    base = family.normalize(task, family.default_params(task))

    def errors(terms, chunks):
        p = dict(base, split_terms=terms, k_chunks=chunks)
        return [d.code for d in family.static_check(task, p) if d.severity == "error"]

    assert errors(6, 4) == [] and errors(6, 8) == []
    assert errors(6, 1) == ["split_accuracy"]          # predicted 1.25e-5
    assert errors(6, 2) == ["split_accuracy"]          # predicted 5.1e-6: too close to 1e-5
    assert errors(3, 1) == ["split_accuracy"] and errors(3, 4) == ["split_accuracy"]
    assert errors(1, 1) == ["split_accuracy"]
    assert "k_chunks" in errors(6, 3)
    ms = {t: family.estimate(task, dict(base, split_terms=t, k_chunks=1)).ms for t in (1, 3, 6)}
    assert 1.7 < ms[6] / ms[3] < 2.2 and ms[3] > ms[1]
    more = family.estimate(task, dict(base, split_terms=6, k_chunks=8)).ms
    assert ms[6] < family.estimate(task, base).ms < more      # chunks cost traffic


def test_adapter_kernels_compile_for_sm90a_with_verification(task_file, tmp_path):
    """The split and sum kernels at the sizes the 4096^3 task launches compile to sm_90a cubins
    with the verifier on, without spills."""
    from argus.compiler import compile_kernel

    task = compose(task_file)
    mod = _solution(task, {}, tmp_path, "compile")
    launches = [(mod.sum_chunks, {"CHUNKS": mod.K_CHUNKS})]
    # the task's 4096-long K in K_CHUNKS chunks, and chunk lengths that are not multiples of
    # 256 (a small-K task; K = 1000): the A split must build for every one (review finding)
    for kc in (4096 // mod.K_CHUNKS, 64, 1000):
        launches += [(mod.split_bf16_rows, {"SLOTS": mod.A_SLOTS, "KC": kc,
                                            "BN": min(1024, -(-kc // 256) * 256)}),
                     (mod.split_bf16, {"SLOTS": mod.B_SLOTS, "KC": kc, "K_AXIS": 0,
                                       "ROWS": mod._block(kc, 8), "BN": 512})]
    for kernel, constexprs in launches:
        compiled = compile_kernel(kernel, verify=True, **constexprs)
        assert compiled.binary.cubin and compiled.resources.spill_stores == 0, constexprs


@pytest.mark.parametrize("k,chunks", [(200, 1), (1000, 2), (64, 1)])
def test_split_of_a_handles_any_chunk_length(task_file, tmp_path, k, chunks):
    """Chunk lengths that are not a multiple of the 256 threads (interpreted)."""
    task = compose(task_file)
    mod = _solution(task, {"split_terms": 6, "k_chunks": chunks}, tmp_path, f"odd_{k}")
    x = torch.randn(5, k, generator=torch.Generator().manual_seed(k)).float()
    y = mod.split_operand(x, mod.A_SLOTS, chunks, 1)
    kc, pieces = k // chunks, sn.split(x.numpy(), 3)
    for s in range(chunks):
        for slot, i in enumerate(mod.A_SLOTS):
            assert np.array_equal(y[s, :, slot * kc:(slot + 1) * kc].double().numpy(),
                                  pieces[i][:, s * kc:(s + 1) * kc]), (s, slot)
