"""The N-split promoting loop (Fp8GemmSchedule(promote=True, n_split=2)) without a GPU: each K
block's wgmma as two column halves, each into its own partial and fp32 sum, so a 128 x 256 tile
fits the registers (DeepGEMM's 256 x 128 budget). The interpreter against a float64 reference
(aligned and ragged shapes, halves that straddle 128-column weight blocks, clusters, both
epilogues with halves taking turns in the staging buffer, persistent wrap-around, per-tensor
scales), bit-identical to the unsplit loop; the schedule's checks; the verifier proving each
half's promoted sum k-once; the serial form promoting half 0 before half 1 is issued (CUDA
order and SASS, half 1's wgmma pinned behind that promotion); NVRTC building it without
spills."""

import re

import pytest

import argus as ag
from argus import codegen
from argus.compiler import lower_only
from argus.kernels.gemm_fp8 import (Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")

from tests.fp8_blockscaled import check_close, e4m3, interpret_blockscaled, scales  # noqa: E402


def _split(**kw) -> Fp8GemmSchedule:
    return Fp8GemmSchedule(promote=True, n_split=2, **kw)


@pytest.mark.parametrize("m,n,k,out,schedule", [
    (128, 256, 384, ag.f32, _split(bn=256, stages=2)),                 # halves = weight blocks
    # 96-wide halves straddle weight blocks at every other tile; ragged M and N; 32-wide
    # staging blocks; cluster; both halves in flight
    (200, 300, 256, ag.bf16, _split(bn=192, stages=3, split_overlap=True, cluster_m=2,
                                    epilogue="tma")),
    (130, 250, 640, ag.f32, _split(bn=176, stages=3)),                 # 88-wide halves
    # 8 tiles on 2 persistent CTAs: the ring, the sums and the staging wrap across tiles
    (256, 512, 384, ag.bf16, _split(bn=256, stages=3, epilogue="tma", num_sms=2, group_m=1)),
    (190, 512, 256, ag.bf16, _split(bn=256, stages=2, cluster_m=2, epilogue="tma")),
    # the multicast candidate's ring (4 stages) wrapped by 6 K blocks, on 2 persistent
    # clusters walking 6 tile pairs (ragged M: the last tile holds 60 rows)
    (700, 512, 768, ag.bf16, _split(bn=256, stages=4, cluster_m=2, epilogue="tma",
                                    num_sms=4, group_m=2)),
])
def test_split_blockscaled_matches_float64(m, n, k, out, schedule):
    interpret_blockscaled(m, n, k, out, schedule)


def test_split_adds_the_same_values_as_the_unsplit_loop():
    """Each output element sums the same block partials, times the same scales, in K order,
    whether its K block's wgmma spans 128 or 256 columns and whether halves overlap: the
    results are bit-identical (5 K steps, 4 weight blocks)."""
    m, n, k = 130, 512, 640
    a, w = e4m3((m, k), 3.0, 11), e4m3((n, k), 0.5, 12)
    sa, sb = scales((m, k // 128), 3), scales((4, k // 128), 4)
    outs = []
    for s in (Fp8GemmSchedule(bn=128, stages=3, promote=True), _split(bn=256, stages=2),
              _split(bn=128, stages=3, split_overlap=True, cluster_m=2)):
        c = torch.full((m, n), float("nan"), dtype=torch.float32)
        gemm_fp8_blockscaled_kernel(ag.f32).interpret(a, w, sa.t().contiguous(), sb, c, s=s)
        outs.append(c)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


def test_split_per_tensor_promotion_matches_float64():
    m, n, k = 130, 256, 384
    a, w = e4m3((m, k), 3.0, 5), e4m3((n, k), 0.5, 6)
    c = torch.full((m, n), float("nan"), dtype=torch.float32)
    gemm_fp8_kernel(ag.f32).interpret(a, w, torch.tensor([0.25]), torch.tensor([1.5]), c,
                                      s=_split(bn=256, stages=2))
    check_close(c, a.double() * 0.25, w.double() * 1.5, ag.f32, k)


def test_tma_epilogue_takes_32_and_16_column_blocks():
    """bn = 96 and 160 (32-wide blocks) and 144 (16-wide) may store by TMA now; widths that
    are no multiple of 16 may not."""
    for bn in (96, 144, 160):
        assert Fp8GemmSchedule(bn=bn, promote=True, epilogue="tma").piece == bn
    interpret_blockscaled(190, 330, 384, ag.bf16, Fp8GemmSchedule(
        bn=144, stages=3, promote=True, epilogue="tma", cluster_m=2))
    with pytest.raises(ValueError, match="64, 32 or 16 columns"):
        Fp8GemmSchedule(bn=104, promote=True, epilogue="tma")
    with pytest.raises(ValueError, match="accumulator of 88 columns"):
        _split(bn=176, epilogue="tma")


@pytest.mark.parametrize("kwargs,message", [
    ({"n_split": 3, "bn": 192}, "1 or 2 column halves"),
    ({"n_split": 2, "bn": 256}, "needs promote=True"),
    ({"n_split": 2, "bn": 128, "promote": True, "overlap": True}, "none of"),
    ({"n_split": 2, "bn": 128, "promote": True, "late_release": True}, "none of"),
    ({"n_split": 2, "bn": 128, "promote": True, "smem_scales": True, "split_overlap": True},
     "none of"),
    ({"n_split": 2, "bn": 200, "promote": True}, "multiple of 16"),
    ({"n_split": 2, "bn": 256, "promote": True, "split_overlap": True},
     "256 per thread exceeds the budget of 192"),
    ({"split_overlap": True, "bn": 128, "promote": True}, "split_overlap orders"),
])
def test_split_schedule_checks(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Fp8GemmSchedule(**kwargs)


def test_split_schedule_repr_and_budget():
    # the halves lift the promoting loop's bn <= 160; repr names n_split only when set
    s = _split(bn=256, epilogue="tma")
    assert s.piece == 128 and s.smem_bytes == 4 * 384 * 128 + 128 * 128 * 2
    assert eval(repr(s), {"Fp8GemmSchedule": Fp8GemmSchedule}) == s
    assert "n_split" not in repr(Fp8GemmSchedule(bn=128, promote=True))
    o = _split(bn=192, split_overlap=True)
    assert "split_overlap=True" in repr(o)
    assert eval(repr(o), {"Fp8GemmSchedule": Fp8GemmSchedule}) == o


@pytest.mark.parametrize("schedule", [
    _split(bn=256, stages=3, epilogue="tma"),
    _split(bn=192, stages=4, split_overlap=True, cluster_m=2, epilogue="tma"),
    # the multicast 128 x 256 tuning candidate (fp8_schedules._SPLIT_256_TMA_C2)
    _split(bn=256, stages=4, cluster_m=2, epilogue="tma"),
])
def test_split_verifies_clean(schedule):
    from argus import verify

    report = verify.run(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=schedule))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= {"store.coverage", "store.once"}, \
        "\n".join(str(d) for d in report.unknowns)
    k_once = [d for d in report.proven if d.code == "wgmma.k-once"]
    # both halves' reductions: the serial form's fresh partials are per-site k-once (2 claims
    # each), the overlapped form's overwritten ones the promoted sums into acc0 and acc1
    assert len(k_once) >= 4, [d.subject for d in k_once]
    if schedule.split_overlap:
        assert {"acc0", "acc1"} <= {name for d in k_once for name in ("acc0", "acc1")
                                    if f"promoted into {name}" in d.subject}


def test_serial_split_promotes_the_first_half_before_issuing_the_second():
    """The CUDA of the serial form's K step: half 0's wgmma group, a wait for it, its FFMAs
    (the one-trip loop), then half 1's group: one partial live at a time."""
    text = codegen.render(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16),
                                     s=_split(bn=256, stages=3, epilogue="tma"))).text
    lines = text.splitlines()
    calls = [i for i, line in enumerate(lines) if "wgmma_m64n128k32" in line and "(t" in line]
    # the consumer's K loop: 8 calls, two groups of 4 on two partials
    first, second = calls[:4], calls[4:8]
    part0 = re.search(r"\((t\d+),", lines[first[0]]).group(1)
    part1 = re.search(r"\((t\d+),", lines[second[0]]).group(1)
    assert part0 != part1
    between = lines[first[-1]:second[0]]
    assert any("wgmma_wait" in line and "<0>" in line for line in between), "\n".join(between)
    assert sum(f"{part0}[" in line and " * " in line for line in between) == 64, \
        "\n".join(between)
    # half 1's issue is pinned behind those FFMAs (ag.wgmma pinned), half 0's is not; both
    # halves' scales are multiplied before half 0's group, so neither wait is pinned
    fences = [i for i, line in enumerate(lines) if "ag::wgmma_fence" in line]
    pinned = [i for i in fences if "wgmma_fence_pinned" in lines[i]]
    assert len(pinned) == 1 and first[-1] < pinned[0] < second[0], pinned
    assert not any("wgmma_wait_pinned" in line for line in lines[first[0]:second[-1] + 8])


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _k_loop(sass: str) -> list[str]:
    """The SASS lines of the innermost loop around the QGMMAs (argus.runtime.sass.k_loop)."""
    from argus.runtime.sass import k_loop

    return k_loop(sass, "QGMMA")


def _k_loop_spills(sass: str) -> int:
    """Local-memory instructions (LDL / STL) in the K loop."""
    return sum(bool(re.search(r"\b(LDL|STL)\b", line)) for line in _k_loop(sass))


@needs_nvrtc
@pytest.mark.parametrize("schedule", [
    _split(bn=256, stages=3, epilogue="tma"),
    _split(bn=256, stages=4),
    _split(bn=192, stages=4, split_overlap=True, cluster_m=2, epilogue="tma"),
    # multicast at 128 x 256: spilled 480 B (58 LDL/STL in the K loop) before half 1's
    # wgmma was pinned; a tuning candidate since, so it must stay without local memory
    _split(bn=256, stages=4, cluster_m=2, epilogue="tma"),
])
def test_nvrtc_builds_split_without_k_loop_spills(schedule):
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    source = codegen.render(lower_only(gemm_fp8_blockscaled_kernel(ag.bf16), s=schedule))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    # no local memory anywhere: before half 1's wgmma was pinned, bn = 256 kept a few
    # tile-loop values there (88 B) and spilled in the K loop with the warp-uniform index
    assert not binary.resource(source.name).spills, binary.resource(source.name)
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no disassembler (cuobjdump / nvdisasm) for the SASS checks")
    assert _k_loop_spills(sass) == 0
    n = schedule.bn // 2
    seq = re.findall(rf"QGMMA\.64x{n}x32|WARPGROUP\.DEPBAR\.LE gsb0, 0x[0-9]|FFMA", sass)
    text = " ".join("Q" if x.startswith("QGMMA") else "W" + x[-1] if "DEPBAR" in x else "F"
                    for x in seq)
    if not schedule.split_overlap:
        # the serial step: group, wait 0, all of the first half's 64 x n / 128 FFMAs, then
        # the next group (pinned: ptxas hoisted it above the last FFMAs, and with the
        # warp-uniform index far enough that both partials were live and spilled)
        assert re.search(rf"Q Q Q Q W0 (F ){{{n // 2}}}Q Q Q Q W0", text), text


def test_block_scaled_kernels_refuse_tiles_spanning_three_weight_blocks():
    """A 152-wide tile at column 760 spans weight blocks 5, 6 and 7 (760..911), and the two
    scales a tile takes gave columns 896..911 block 6's: the kernels refuse such widths; the
    split halves of a 256-wide tile never span three; per-tensor scales do not care."""
    from argus.kernels.gemm_fp8 import (gemm_fp8_blockscaled_smem_kernel,
                                        weight_blocks_spanned)

    assert [w for w in range(8, 161, 8) if weight_blocks_spanned(w) > 2] == [152]
    assert all(weight_blocks_spanned(w) <= 2 for w in range(8, 129, 8))
    s = Fp8GemmSchedule(bn=152, stages=2, promote=True)
    with pytest.raises(ag.TraceError, match="three 128-column weight blocks"):
        gemm_fp8_blockscaled_kernel(ag.f32).trace(s=s)
    with pytest.raises(ag.TraceError, match="three 128-column weight blocks"):
        gemm_fp8_blockscaled_smem_kernel(ag.f32).trace(
            s=Fp8GemmSchedule(bn=152, stages=2, promote=True, smem_scales=True))
    gemm_fp8_kernel(ag.f32).trace(s=s)
    gemm_fp8_blockscaled_kernel(ag.f32).trace(s=_split(bn=176, stages=2))


@pytest.mark.parametrize("m,n,k,out,schedule", [
    (128, 512, 640, ag.f32, _split(bn=256, stages=2, smem_scales=True)),   # 5 K steps
    # 96-wide halves, tiles straddling weight blocks, ragged, cluster, TMA epilogue
    (200, 460, 384, ag.bf16, _split(bn=192, stages=3, smem_scales=True, cluster_m=2,
                                    epilogue="tma")),
    # DeepGEMM's configuration at 128 x 256 (--variants "split 128x256 smem scales
    # cluster"): W multicast, the ring wrapped by 5 K blocks, ragged M
    (300, 512, 640, ag.bf16, _split(bn=256, stages=3, smem_scales=True, cluster_m=2,
                                    epilogue="tma")),
])
def test_split_with_shared_memory_scales(m, n, k, out, schedule):
    """The serial split reading each stage's block scales from shared memory
    (gemm_fp8_blockscaled_smem_kernel): float64 agreement and bit-identical to the global
    scales' split loop."""
    c = interpret_blockscaled(m, n, k, out, schedule)
    global_scales = Fp8GemmSchedule(**{f: getattr(schedule, f) for f in (
        "bn", "stages", "cluster_m", "epilogue")}, promote=True, n_split=2)
    assert torch.equal(c, interpret_blockscaled(m, n, k, out, global_scales))


def test_split_with_shared_memory_scales_verifies_and_builds():
    from argus import verify
    from argus.kernels.gemm_fp8 import gemm_fp8_blockscaled_smem_kernel

    s = _split(bn=256, stages=3, smem_scales=True, epilogue="tma")
    kernel = lower_only(gemm_fp8_blockscaled_smem_kernel(ag.bf16), s=s)
    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= {"store.coverage", "store.once"}
    assert sum(d.code == "wgmma.k-once" for d in report.proven) >= 4
    if not nvrtc_available():
        return
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    source = codegen.render(kernel)
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    sass = disassemble(binary.cubin)
    if sass is not None:
        loop = _k_loop(sass)
        # the scales come from shared memory: no global load in the K loop; the halves of a
        # 256-wide tile lie in one weight block each, and ptxas folds their per-column
        # select (64 FSEL per half) away: only the few that pick column k % 4 of the boxes
        assert not any("LDG" in line for line in loop)
        assert sum("LDS" in line for line in loop) >= 2
        assert sum("FSEL" in line for line in loop) < 16
