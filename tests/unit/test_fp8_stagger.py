"""Staggered consumers for the serial fp8 promotion (Fp8GemmSchedule(promote=True,
stagger=True), issue 18) without a GPU: each K step of `early_release_promoted_mma` is an
ordered section (ag.ordered), so the consumer warpgroups issue their K blocks' wgmma in
turns and each promotes its block outside the section while the others' groups run; in the
split 128 x 256 loop (`split_promoted_mma`) each column half's issue is a section of its own
inside the step. The
interpreter against float64 (ragged M and N, several K, the ring wrapping across persistent
tiles) and bit for bit against the unstaggered loop; the lowered K loop passes the turn after
the issue and before the wait that retires the group; the verifier finds nothing (the
promoted sum k-once and the turns proven); NVRTC builds it without local memory."""

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_blockscaled_smem_kernel, gemm_fp8_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import interpret_blockscaled, verify_clean  # noqa: E402


def _stagger(**kw) -> Fp8GemmSchedule:
    return Fp8GemmSchedule(promote=True, stagger=True, **kw)


# three consumer warpgroups take attention's budget: 3 x 128 x 160 + 128 x 32 registers
C3_REGS = {"producer_regs": 32, "consumer_regs": 160}

CASES = [
    (128, 128, 128, ag.f32, _stagger(bn=128, stages=2)),                     # one K step
    (130, 250, 640, ag.f32, _stagger(bn=112, stages=3)),                     # ragged, straddling
    (190, 256, 768, ag.bf16, _stagger(bn=128, stages=3, cluster_m=2, epilogue="tma")),
    (190, 256, 768, ag.bf16, _stagger(bn=128, stages=3, smem_scales=True, cluster_m=2,
                                      epilogue="tma")),
    # 8 tiles on 2 persistent CTAs: the turns go on across tiles while the ring wraps
    (256, 256, 384, ag.bf16, _stagger(bn=64, stages=2, num_sms=2, group_m=1,
                                      smem_scales=True)),
    # three warpgroups round robin (a 192-row tile; M = 400: the third row of tiles ragged)
    (400, 256, 640, ag.bf16, _stagger(bm=192, consumers=3, bn=128, stages=4, smem_scales=True,
                                      cluster_m=2, epilogue="tma", **C3_REGS)),
    (200, 250, 384, ag.f32, _stagger(bm=192, consumers=3, bn=112, stages=3, **C3_REGS)),
    # the split 128 x 256 (the default's loop): each column half's issue a section of its own
    # inside the step; ragged M and N, a straddling 176-wide split, the ring wrapping
    (190, 512, 640, ag.bf16, _stagger(bn=256, stages=3, n_split=2, smem_scales=True,
                                      epilogue="tma")),
    (130, 300, 512, ag.f32, _stagger(bn=256, stages=4, n_split=2)),
    (200, 352, 384, ag.f32, _stagger(bn=176, stages=3, n_split=2, cluster_m=2)),
    (256, 512, 384, ag.bf16, _stagger(bn=256, stages=2, n_split=2, smem_scales=True,
                                      num_sms=2, group_m=1)),
]


@pytest.mark.parametrize("m,n,k,out,schedule", CASES)
def test_staggered_promotion_matches_float64_and_the_unstaggered_loop(m, n, k, out, schedule):
    c = interpret_blockscaled(m, n, k, out, schedule)   # checked against float64 there
    import dataclasses
    plain = dataclasses.replace(schedule, stagger=False)
    assert torch.equal(c, interpret_blockscaled(m, n, k, out, plain))


def _k_loop(kernel) -> list:
    """The consumer's K loop ops (innermost loop holding a consume step), flattened."""
    loops = [op for op in kernel.walk() if isinstance(op, O.For)
             and any(isinstance(x, O.Consume) for x in op.body.ops)
             and not any(isinstance(x, O.For) for x in op.body.walk())
             and any(isinstance(x, O.Wgmma) for x in op.body.walk())]
    assert len(loops) == 1, len(loops)
    return list(loops[0].body.walk())


@pytest.mark.parametrize("kernel,extra", [("block", {}), ("smem", {"smem_scales": True}),
                                          ("tensor", {})])
def test_turn_passes_after_the_issue_and_before_the_wait(kernel, extra):
    kf = {"block": gemm_fp8_blockscaled_kernel(ag.bf16),
          "smem": gemm_fp8_blockscaled_smem_kernel(ag.bf16), "tensor": gemm_fp8_kernel()}[kernel]
    ops = _k_loop(lower_only(kf, s=_stagger(bn=128, stages=5, **extra)))
    kinds = [type(op).__name__ for op in ops]
    wait, issue, turn_pass = (kinds.index("TurnWait"), kinds.index("Wgmma"),
                              kinds.index("TurnPass"))
    retire = [i for i, op in enumerate(ops) if isinstance(op, O.WgmmaWait) and op.pending == 0]
    adds = [i for i, op in enumerate(ops) if isinstance(op, O.Elementwise) and op.fn == "add"
            and op.result.type.shape[-1] > 1]
    # turn, issue, pass, then the wait 0 that retires the group, then the promotion
    assert wait < issue < turn_pass < min(retire) < min(adds)
    assert kinds.count("TurnWait") == kinds.count("TurnPass") == 1
    # without stagger the loop takes no turns
    plain = _k_loop(lower_only(kf, s=Fp8GemmSchedule(bn=128, stages=5, promote=True, **extra)))
    assert not any(isinstance(op, (O.TurnWait, O.TurnPass)) for op in plain)


def test_split_halves_take_turns_inside_the_step():
    """Staggered split: per K step (one consume step) two sections, each around one half's
    issue, passed before the wait that retires that half; the stage released after both."""
    from argus.ir import ops as O

    k = lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16),
                   s=_stagger(bn=256, stages=3, n_split=2, smem_scales=True, epilogue="tma"))
    steps = [op for op in k.walk() if isinstance(op, O.Consume)
             and any(isinstance(x, O.Wgmma) for x in op.body.walk())]
    assert len(steps) == 1
    ops = list(steps[0].body.walk())
    kinds = [type(op).__name__ for op in ops]
    order = [(kinds[i], getattr(ops[i], "name", getattr(ops[i], "pending", None)))
             for i in range(len(ops)) if kinds[i] in ("TurnWait", "TurnPass", "WgmmaWait",
                                                       "SlotRelease")
             or (kinds[i] == "Wgmma" and kinds[i - 1] != "Wgmma")]
    assert order == [("TurnWait", "half0"), ("Wgmma", None), ("TurnPass", "half0"),
                     ("WgmmaWait", 0), ("TurnWait", "half1"), ("Wgmma", None),
                     ("TurnPass", "half1"), ("WgmmaWait", 0), ("SlotRelease", None)], order


def test_stagger_schedule_checks_and_repr():
    for bad in (dict(stagger=True), dict(promote=True, overlap=True, stagger=True),
                dict(promote=True, late_release=True, stagger=True),
                dict(promote=True, n_split=2, split_overlap=True, stagger=True),
                dict(promote=True, promote_every=2, stagger=True)):
        with pytest.raises(ValueError, match="stagger"):
            Fp8GemmSchedule(bn=128, **bad)
    with pytest.raises(ValueError, match="consumers >= 2"):
        Fp8GemmSchedule(bm=64, consumers=1, bn=128, promote=True, stagger=True)
    # out of repr at its default: every earlier schedule keeps its cache key and golden
    assert "stagger" not in repr(Fp8GemmSchedule(bn=128, promote=True))
    s = _stagger(bn=128, stages=5, smem_scales=True)
    assert "stagger=True" in repr(s)
    assert eval(repr(s), {"Fp8GemmSchedule": Fp8GemmSchedule}) == s


BUILT = [("block", {"bn": 128, "stages": 5, "cluster_m": 2, "epilogue": "tma"}),
         ("smem", {"bn": 128, "stages": 5, "smem_scales": True, "cluster_m": 2,
                   "epilogue": "tma"}),
         ("block", {"bm": 192, "consumers": 3, "bn": 128, "stages": 4, "cluster_m": 2,
                    "epilogue": "tma", **C3_REGS}),
         ("smem", {"bm": 192, "consumers": 3, "bn": 128, "stages": 4, "smem_scales": True,
                   "cluster_m": 2, "epilogue": "tma", **C3_REGS})]
BUILT += [("smem", {"bn": 256, "stages": 3, "n_split": 2, "smem_scales": True,
                    "epilogue": "tma"}),
          ("smem", {"bn": 256, "stages": 3, "n_split": 2, "smem_scales": True, "cluster_m": 2,
                    "epilogue": "tma"}),
          ("block", {"bn": 256, "stages": 4, "n_split": 2, "epilogue": "tma"})]
BUILT_IDS = ["global", "smem", "global-c3", "smem-c3", "split-smem", "split-smem-cluster",
             "split-global"]


@pytest.mark.parametrize("kernel,extra", BUILT, ids=BUILT_IDS)
def test_stagger_verifies_clean(kernel, extra):
    kf = gemm_fp8_blockscaled_smem_kernel(ag.bf16) if kernel == "smem" else \
        gemm_fp8_blockscaled_kernel(ag.bf16)
    report = verify_clean(lower_only(kf, s=_stagger(**extra)))
    # zero findings: no error, no unknown; the turns proven to go round, the promoted sum
    # proven k-once
    assert not report.diagnostics, "\n".join(str(d) for d in report.diagnostics)
    proven = {f.code for f in report.proven}
    assert {"ordered.turns", "wgmma.k-once", "pipe.deadlock"} <= proven, sorted(proven)


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("kernel,extra", BUILT, ids=BUILT_IDS)
def test_nvrtc_builds_the_staggered_loop_without_spills(kernel, extra):
    from argus.runtime.compile import compile_cuda

    kf = gemm_fp8_blockscaled_smem_kernel(ag.bf16) if kernel == "smem" else \
        gemm_fp8_blockscaled_kernel(ag.bf16)
    s = _stagger(**extra)
    source = codegen.render(lower_only(kf, s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert f"wgmma.mma_async.sync.aligned.m64n{s.piece}k32.f32.e4m3.e4m3" in binary.ptx
    assert "bar.sync" in binary.ptx or "barrier.sync" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log


def _sass_script():
    from tests.loading import load_script

    return load_script("sass_fp8_k_loop")


def test_promotion_gap_counts_from_the_drain_to_the_next_qgmma():
    line = "        /*{:04x}*/                   {} ;"
    ops = ["BAR.SYNC.DEFER_BLOCKING R7, 0x100", "WARPGROUP.ARRIVE",
           "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR12], RZ, !UPT",
           "QGMMA.64x128x32.F32.E4M3.E4M3 R24, gdesc[UR12], R24, gsb0",
           "WARPGROUP.DEPBAR.LE gsb0, 0x1", "BAR.ARV R5, 0x100", "WARPGROUP.DEPBAR.LE gsb0, 0x0",
           "FFMA R1, R2, R3, R1", "FFMA R4, R2, R3, R4", "IADD3 R0, R0, 0x1, RZ"]
    loop = [".L_x_1:"] + [line.format(16 * i, op) for i, op in enumerate(ops)]
    # from the wait 0: two FFMA, the IADD3, around the back edge the turn's BAR.SYNC and the
    # WARPGROUP.ARRIVE before the QGMMA; the wait 1 starts no gap
    assert _sass_script().promotion_gaps(loop) == [(5, 1)]


def _tools() -> bool:
    from argus.runtime.toolkit import find_tool

    return nvrtc_available() and bool(find_tool("nvdisasm") or find_tool("cuobjdump"))


@pytest.mark.skipif(not _tools(), reason="needs NVRTC and a disassembler")
@pytest.mark.parametrize("kernel,extra", BUILT, ids=BUILT_IDS)
def test_staggered_sass_passes_the_turn_between_the_issue_and_the_drain(kernel, extra):
    script = _sass_script()
    s = _stagger(**extra)
    m = script.measure(s)
    assert m["spill_bytes"] == 0 and m["per_block"].get("LDL/STL", 0) == 0, m
    halves = s.n_split
    assert m["per_block"]["QGMMA"] == 4 * halves and m["per_block"]["FFMA"] == 64 * halves, \
        m["per_block"]
    # one drain per K block and half; each gap holds the next turn's wait (one BAR.SYNC)
    assert len(m["gaps"]) == halves and all(b == 1 for _, b in m["gaps"]), m["gaps"]
    from argus.runtime.sass import disassemble, k_loop
    from argus.runtime.compile import compile_cuda

    source = script.render(s)
    loop = k_loop(disassemble(compile_cuda(source.text, [source.name],
                                           use_cache=False).cubin))
    text = [x for x in loop if "QGMMA" in x or "BAR." in x or "DEPBAR" in x]
    issues = [i for i, x in enumerate(text) if "QGMMA" in x]
    passes = [i for i, x in enumerate(text) if "BAR.ARV" in x]
    drains = [i for i, x in enumerate(text) if "DEPBAR" in x and "0x0" in x]
    assert len(passes) == halves and len(drains) == halves, text
    for h in range(halves):   # half h's four QGMMA, then its pass, then its drain
        last_issue = issues[4 * h + 3]
        assert last_issue < passes[h] < drains[h], text
        assert h + 1 == halves or drains[h] < issues[4 * (h + 1)], text
