"""Tail splits (GemmSchedule.tail_splits): the persistent walk's last, partial wave runs in K
slices into an fp32 workspace, and `tail_sum_kernel` adds them into C.

In the interpreter, against float64: ragged M, N and K, both B layouts, batched, 2x1 clusters,
both epilogues, 16- and 32-bit outputs, a walk whose only wave is partial; every workspace
slice is its own K slice's product (nothing more), and C is whole (NaN-filled beforehand).
The verifier proves the split's invariants on the tail kernel (k-once per slice, A and B from
the same slice, the partial stored into its slice, each workspace element once) and reports
only the coverage of C, which the kernel writes in part on purpose. NVRTC compiles both
kernels for sm_90a; the schedule checks refuse what the tail cannot run with; the default
kernels' code does not depend on the new field.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import compile_kernel, lower_only
from argus.errors import LaunchError, TraceError
from argus.kernels.gemm import GemmSchedule, gemm_kernel
from argus.kernels.split_k_sum import tail_sum_kernel
from argus.ops import split_k
from argus.ops.schedules import Problem, candidates, kernel_for, tail_split_candidates
from tests.unit.ops_host import interpret_compiles

_TORCH = {ag.bf16: torch.bfloat16, ag.f32: torch.float32}


def _rand(*shape, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).bfloat16()


def _interpret(problem: Problem, s: GemmSchedule, a, b, c):
    """What TailSplitMatmul launches, in the interpreter: the tail kernel, then the sum.
    Returns the workspace (NaN-filled before, so an unwritten element shows)."""
    kernel, run = kernel_for(problem, s)
    out_dtype = ag.f32 if c.dtype == torch.float32 else ag.bf16
    tiles = split_k.tail_tiles(problem, s)
    a_s, b_s = split_k.tail_slices(a, b, problem.b_layout, s.tail_splits)
    partials = torch.full((s.tail_splits, tiles, s.bm, s.bn), float("nan"))
    kernel.interpret(a, b, c, a_s, b_s, partials, s=run)
    tail_sum_kernel(out_dtype, s.tail_splits, problem.batch > 1).interpret(
        partials, c, bm=s.bm, bn=s.bn, cluster=s.cluster_m, group_m=s.group_m,
        num_sms=s.num_sms)
    return partials


CASES = [
    # (layout, batch, m, n, k, out, schedule): num_sms small enough for a partial last wave
    # 2 x 5 tiles on 4 CTAs: 2 full waves, 2 tail tiles in 2 slices; K = 208: ragged steps,
    # each 104-deep slice ends inside a stage (the view's edge zero-fills the rest)
    ("nk", 1, 200, 300, 208, ag.bf16, GemmSchedule(bm=128, bn=64, stages=2, num_sms=4,
                                                   tail_splits=2)),
    # MN-major B, 3 slices of 80, fp32 output
    ("kn", 1, 130, 190, 240, ag.f32, GemmSchedule(bm=128, bn=64, stages=3, num_sms=4,
                                                  tail_splits=3)),
    # batched: 3 x 1 x 3 units on 4 CTAs, the raster's batch index decoded in both kernels
    ("nk", 3, 70, 130, 128, ag.bf16, GemmSchedule(bm=128, bn=64, stages=2, num_sms=4,
                                                  tail_splits=2)),
    # 2x1 clusters (B multicast, the same slice for both CTAs); a 64-row consumer pair
    ("nk", 1, 500, 200, 192, ag.bf16, GemmSchedule(bm=128, bn=64, stages=2, num_sms=6,
                                                   cluster_m=2, tail_splits=2)),
    # the only wave is partial (3 tiles, 8 CTAs): every tile in 2 slices, no full wave
    ("kn", 1, 64, 192, 128, ag.bf16, GemmSchedule(bm=64, bn=64, consumers=1, stages=2,
                                                  num_sms=8, tail_splits=2, k_atoms=2)),
]


@pytest.mark.parametrize("layout,batch,m,n,k,out,s", CASES,
                         ids=[f"{c[0]}-b{c[1]}-{c[2]}x{c[3]}x{c[4]}-{c[5].name}-"
                              f"S{c[6].tail_splits}-cm{c[6].cluster_m}-{c[6].epilogue}"
                              for c in CASES])
def test_tail_split_gemm_matches_float64_in_the_interpreter(layout, batch, m, n, k, out, s):
    lead = (batch,) if batch > 1 else ()
    a, w = _rand(*lead, m, k, seed=m + k), _rand(*lead, n, k, seed=n)
    b = w if layout == "nk" else w.transpose(-1, -2).contiguous()
    problem = Problem(m, n, k, batch, "bf16", out.name, layout, True)
    assert split_k.tail_tiles(problem, s) > 0      # the case has a tail to split
    c = torch.full((*lead, m, n), float("nan"), dtype=_TORCH[out])
    partials = _interpret(problem, s, a, b, c)
    exact = a.double() @ w.double().transpose(-1, -2)
    assert not torch.isnan(c).any(), "an element of C was never written"
    err = ((c.double() - exact).norm() / exact.norm()).item()
    assert err < (4e-3 if out == ag.bf16 else 1e-5), err
    # each workspace slice holds its own K slice's product of the tile, nothing more: its
    # place found independently, by matching the tile against the exact slice products
    ks = k // s.tail_splits
    parts = [a[..., j * ks:(j + 1) * ks].double() @ w[..., j * ks:(j + 1) * ks].double()
             .transpose(-1, -2) for j in range(s.tail_splits)]
    assert not torch.isnan(partials).any()
    for q in range(partials.shape[1]):
        found = False
        for bt in range(batch):
            for i0 in range(0, m, s.bm):
                for j0 in range(0, n, s.bn):
                    rows, cols = min(s.bm, m - i0), min(s.bn, n - j0)
                    at = (bt,) if batch > 1 else ()
                    if all(torch.allclose(partials[j, q, :rows, :cols].double(),
                                          parts[j][(*at, slice(i0, i0 + rows),
                                                    slice(j0, j0 + cols))],
                                          rtol=1e-4, atol=1e-3)
                           for j in range(s.tail_splits)):
                        found = True
                        # past C's edge the tile read zeros: the partial is zero there
                        assert not partials[:, q, rows:, :].any()
                        assert not partials[:, q, :, cols:].any()
        assert found, f"workspace tile {q} is no tile's slice products"


def test_the_host_counts_the_tail_the_kernels_walk():
    """tail_tiles (which sizes the workspace and the sum's grid) against a walk of the units
    written out here: full waves of min(units x S, SMs / cluster) units, the rest split."""
    for m, n, batch, cs, sms, splits in [(2048, 7168, 1, 2, 132, 2), (2048, 7168, 1, 1, 132, 4),
                                         (4096, 4096, 1, 2, 132, 2), (1024, 1024, 1, 2, 132, 4),
                                         (300, 300, 5, 1, 7, 3), (129, 64, 1, 2, 4, 2)]:
        s = GemmSchedule(cluster_m=cs, num_sms=sms, tail_splits=splits)
        units = batch * -(-(-(-m // 128)) // cs) * -(-n // 256)
        clusters = sms // cs
        walked = []
        programs = min(units * splits, clusters)
        for first in range(programs):
            walked += list(range(first, units // programs * programs, programs))
        full = len(walked)
        assert sorted(walked) == list(range(full))
        assert split_k.tail_tiles(Problem(m, n, 64, batch, "bf16", "bf16", "nk", True), s) \
            == (units - full) * cs


def test_the_tail_kernel_proves_the_split_and_reports_only_the_partial_output():
    """The verifier on the tail kernel (2x1 clusters):
    the slices' invariants are proven; the one error is the coverage of C, which the kernel
    leaves to the sum on purpose (the verifier does not know partial outputs yet)."""
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=2)
    report = verify.run(lower_only(gemm_kernel(ag.bf16, ag.bf16, "nk", False, 2), s=s))
    others = [d for d in report.errors
              if not (d.code == "store.coverage" and " of C stored at " in d.message)]
    assert not others, "\n".join(str(d) for d in others)
    proven = [o for o in report.proven]
    codes = {o.code for o in proven}
    assert {"wgmma.k-once", "wgmma.agree", "store.coords", "store.once",
            "pipe.totals"} <= codes
    # k-once over the slice's own K (ks of As / Bs), the slice index agreeing, and the
    # partial landing in its slice of P
    text = "\n".join(str(o) for o in proven)
    assert "A.s == B.s" in text and "A.ks == B.ks" in text and "store to P" in text
    unknown = {d.code for d in report.unknowns}
    assert unknown <= {"store.coverage", "store.once", "store.coords"}, \
        "\n".join(str(d) for d in report.unknowns)


def test_both_kernels_compile_for_sm90a():
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=2)
    main = compile_kernel(gemm_kernel(ag.bf16, ag.bf16, "kn", True, 2), verify=False, s=s)
    assert main.binary.cubin
    for kw in (dict(bm=128, bn=256, cluster=2), dict(bm=128, bn=224, cluster=1)):
        summed = compile_kernel(tail_sum_kernel(ag.bf16, 2, False), verify=False, **kw)
        assert summed.binary.cubin


def test_schedules_refuse_what_the_tail_cannot_run_with():
    for bad in (dict(persistent=False), dict(bm=128, bn=128, pingpong=True),
                dict(bm=64, bn=16, consumers=1, swap_ab=True),
                dict(split_k=2, epilogue="direct"), dict(epilogue="tma")):
        with pytest.raises(ValueError, match="tail_splits"):
            GemmSchedule(tail_splits=2, **bad)
    with pytest.raises(ValueError, match="tail_splits"):
        GemmSchedule(tail_splits=17)
    with pytest.raises(TraceError, match="tail_splits"):
        gemm_kernel().trace(s=GemmSchedule(tail_splits=2))
    with pytest.raises(TraceError, match="tail_splits"):
        gemm_kernel(tail_splits=2).trace(s=GemmSchedule(tail_splits=3))
    assert split_k.tail_why_not(2000, 2) is None                # slices of 1000
    assert "multiple of 8" in split_k.tail_why_not(2000, 16)    # slices of 125
    assert "not a multiple" in split_k.tail_why_not(1000, 3)
    with pytest.raises(LaunchError, match="tail_splits"):
        split_k.tail_check(1000, 3)


def test_tail_splits_are_offered_for_a_mostly_empty_last_wave_only():
    """The tail-split schedules a problem could use (not tuning candidates: slower than the
    plain kernel in every case measured on the H200, docs/perf/gemm.md run 5)."""
    p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)   # 26 of 66 units
    assert not [s for s in candidates(p) if s.tail_splits > 1]
    tails = tail_split_candidates(p)
    assert tails and all(split_k.tail_why_not(p.k, s.tail_splits) is None for s in tails)
    assert {s.epilogue for s in tails} == {"direct"}
    for s in tails:
        kernel, run = kernel_for(p, s)
        assert kernel.name == f"gemm_tail{s.tail_splits}" and run is s
        assert split_k.tail_tiles(p, s) == 2 * 26
    # the last wave 88% full (4096^3: 128 of 132 tiles... 116 of 132): nothing to split
    assert not tail_split_candidates(Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True))


def test_the_default_kernel_is_untouched_by_the_field():
    """The default kernel takes no slices or workspace (that it renders the same CUDA as
    before the field existed is tests/golden/test_library_cuda_replay.py's check)."""
    s = GemmSchedule(stages=4, epilogue="tma", cluster_m=2, store_cols=128)
    plain = lower_only(gemm_kernel(), s=s)
    assert [p.name for p in plain.params][:3] == ["A", "B", "C"]
    assert not {"As", "Bs", "P", "S", "KS"} & {p.name for p in plain.params}
    tail = lower_only(gemm_kernel(tail_splits=2),
                      s=dataclasses.replace(s, tail_splits=2, epilogue="direct", store_cols=0))
    assert [p.name for p in tail.params][:6] == ["A", "B", "C", "As", "Bs", "P"]


def test_the_verifier_catches_a_partial_stored_into_another_slice(monkeypatch):
    """A seeded bug: the producer loads K slice s + 1 (of A and B alike) for the unit whose
    partial goes to P[s]. Every product is still a well-formed slice product, and the sum of
    all of P still is A @ B when each slice lands once, but P[s] no longer holds slice s:
    store.coords on the slice index must say so (the proof above is not vacuous)."""
    from argus.kernels import gemm as gemm_module
    from argus.kernels.warp_specialized import Unit

    def shifted(batch, m, n):
        return Unit(((batch[0] + 1) % 2, *batch[1:]), m, n)
    monkeypatch.setattr(gemm_module, "Unit", shifted)
    s = GemmSchedule(stages=4, cluster_m=2, tail_splits=2)
    kernel = gemm_module.gemm_kernel.__wrapped__(ag.bf16, ag.bf16, "nk", False, 2)
    report = verify.run(lower_only(kernel, s=s))
    wrong = [d for d in report.errors if d.code == "store.coords" and "P" in d.message]
    assert wrong, "\n".join(str(d) for d in report.errors)


def test_ops_host_path_in_the_interpreter(monkeypatch):
    """argus.ops' TailSplitMatmul (the K-slice views of the operands as matmul passes them, the
    workspace, both launches in order) with its two kernels run by the interpreter instead of
    the GPU: x @ W.T and x @ W, one batched."""
    interpret_compiles(monkeypatch, verify=False)  # partial outputs: without the verifier's veto
    s = GemmSchedule(bm=128, bn=64, stages=2, num_sms=4, tail_splits=2)
    for layout, batch in (("nk", 1), ("kn", 1), ("nk", 3)):
        lead = (batch,) if batch > 1 else ()
        a, w = _rand(*lead, 200, 208, seed=7), _rand(*lead, 300, 208, seed=8)
        # what matmul hands the kernels: B as [.., N, K] for x @ W.T, [.., K, N] for x @ W
        b = w if layout == "nk" else w.transpose(-1, -2).contiguous()
        problem = Problem(200, 300, 208, batch, "bf16", "bf16", layout, True)
        plain = dataclasses.replace(s, tail_splits=1)
        run = split_k.TailSplitMatmul(problem, s, *kernel_for(problem, s),
                                      kernel_for(problem, plain))
        assert run.tiles == split_k.tail_tiles(problem, s) > 0
        c = torch.full((*lead, 200, 300), float("nan"), dtype=torch.bfloat16)
        assert run(a, b, c) is None          # no launch plans: nothing to replay
        exact = a.double() @ w.double().transpose(-1, -2)
        assert not torch.isnan(c).any()
        assert ((c.double() - exact).norm() / exact.norm()).item() < 4e-3


def test_the_untuned_model_predicts_tail_splits_but_never_picks_them():
    from argus.ops import gemm_model

    s = GemmSchedule(stages=4, cluster_m=2)
    split = dataclasses.replace(s, tail_splits=2)
    full = Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True)   # 8 x 16 = 128 units
    wide = dataclasses.replace(s, num_sms=128)                        # 64 clusters: 2 waves
    assert gemm_model.predict_us(full, dataclasses.replace(wide, tail_splits=2)) == \
        gemm_model.predict_us(full, wide)                             # nothing to split
    p = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)     # 3 waves + 26 units
    assert gemm_model.predict_us(p, split) < gemm_model.predict_us(p, s)
    assert gemm_model.pick(p, candidates(p)).tail_splits == 1
