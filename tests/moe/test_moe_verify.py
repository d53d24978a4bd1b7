"""The MoE kernels verify with zero findings, at the sizes the library uses (Mixtral's 8 and
DeepSeek-V3's 256 experts, both GEMM tiles), and prove the MoE invariants their tags state:
each GEMM tile multiplies rows with their own expert's weights (wgmma.agree on `expert`, given
routing's contract route(r) == tile_expert(r // BM)); the permute writes distinct rows
(store.once, given position() injective); the combine sums rows of its own token only
(store.coords on `token`, given token_of(position(i)) == i // k). The seeded bugs are in
tests/mutations/moe_mutations.py."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import moe_routing as R
from argus.runtime import nvrtc_available
from argus.kernels.moe import (PREFILL, PREFILL_CLUSTER, PREFILL_TMA, PREFILL_TMA_CLUSTER, SMALL,
                              TINY, decode_schedule, grouped_gemm_kernel, split_finish_kernel)

from argus.ops import moe_module as M

KERNELS = [
    ("gate_up 128x256", lambda: (grouped_gemm_kernel(True), dict(s=PREFILL))),
    ("down 128x256", lambda: (grouped_gemm_kernel(False), dict(s=PREFILL))),
    ("gate_up 64x128", lambda: (grouped_gemm_kernel(True), dict(s=SMALL))),
    ("down 64x128", lambda: (grouped_gemm_kernel(False), dict(s=SMALL))),
    ("gate_up 64x64", lambda: (grouped_gemm_kernel(True), dict(s=TINY))),
    ("down 64x64", lambda: (grouped_gemm_kernel(False), dict(s=TINY))),
    ("gate_up 128x256 tma", lambda: (grouped_gemm_kernel(True), dict(s=PREFILL_TMA))),
    ("down 128x256 tma", lambda: (grouped_gemm_kernel(False), dict(s=PREFILL_TMA))),
    ("gate_up 128x256 cluster", lambda: (grouped_gemm_kernel(True), dict(s=PREFILL_CLUSTER))),
    ("down 128x256 cluster", lambda: (grouped_gemm_kernel(False), dict(s=PREFILL_CLUSTER))),
    ("gate_up tma cluster", lambda: (grouped_gemm_kernel(True), dict(s=PREFILL_TMA_CLUSTER))),
    ("down tma cluster", lambda: (grouped_gemm_kernel(False), dict(s=PREFILL_TMA_CLUSTER))),
    ("gate_up decode n8", lambda: (grouped_gemm_kernel(True), dict(s=decode_schedule(8)))),
    ("down decode n8", lambda: (grouped_gemm_kernel(False), dict(s=decode_schedule(8)))),
    ("gate_up decode n64", lambda: (grouped_gemm_kernel(True), dict(s=decode_schedule(64)))),
    ("down decode n32", lambda: (grouped_gemm_kernel(False), dict(s=decode_schedule(32)))),
    # argus.ops.moe.decode_stages: the down's ring twice as deep as the gate-up's
    ("down decode n8 15 stages", lambda: (grouped_gemm_kernel(False),
                                          dict(s=decode_schedule(8, stages=15)))),
    ("gate_up decode split 4", lambda: (grouped_gemm_kernel(True, True),
                                        dict(s=decode_schedule(8, split_k=4)))),
    ("down decode split 2", lambda: (grouped_gemm_kernel(False, True),
                                     dict(s=decode_schedule(16, split_k=2)))),
    ("split finish", lambda: (split_finish_kernel(4, 8), {})),
    ("combine split 2", lambda: (R.combine_kernel(8, M.BH, 2), {})),
    ("layout pad 8", lambda: (R.layout_kernel(256, 8), {})),
    ("topk softmax", lambda: (R.topk_softmax_kernel(ag.bf16, 2, True, 32), {})),
    ("topk softmax k8 E256", lambda: (R.topk_softmax_kernel(ag.f32, 8, False, 256), {})),
    ("topk grouped sigmoid", lambda: (R.topk_sigmoid_grouped_kernel(ag.f32, 8, True, 256, 8, 4,
                                                                     2.5), {})),
    ("count", lambda: (R.count_kernel(256), {})),
    ("scan", lambda: (R.scan_kernel(256), {})),
    ("layout", lambda: (R.layout_kernel(256, 128), {})),
    ("positions", lambda: (R.positions_kernel(32), {})),
    ("positions E256", lambda: (R.positions_kernel(256), {})),
    ("scan E32", lambda: (R.scan_kernel(32), {})),
    ("layout small", lambda: (R.layout_small_kernel(256, 8), {})),
    ("layout small E32", lambda: (R.layout_small_kernel(32, 16), {})),
    # tile_rows: the layouts that also write TileRows (MoeSchedule.skip_pad_halves)
    ("layout rows", lambda: (R.layout_kernel(256, 128, True), {})),
    ("layout rows pad 8", lambda: (R.layout_kernel(256, 8, True), {})),
    ("layout rows E32", lambda: (R.layout_kernel(32, 64, True), {})),
    ("layout small rows", lambda: (R.layout_small_kernel(128, 8, True), {})),
    ("layout small rows E32", lambda: (R.layout_small_kernel(32, 16, True), {})),
    ("combine", lambda: (R.combine_kernel(8, M.BH), {})),
    ("permute", lambda: (R.permute_kernel(8, M.BH), {})),
]


@pytest.mark.parametrize("name,build", KERNELS, ids=[k[0] for k in KERNELS])
def test_moe_kernel_verifies_clean(name, build):
    kernel, kw = build()
    report = verify.run(lower_only(kernel, **kw))
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    proven = {o.code for o in report.proven}
    if name.startswith(("gate_up", "down")):   # decode too: wgmma.agree with weights as A
        assert {"wgmma.agree", "store.coords", "wgmma.k-once"} <= proven, proven
    if name == "permute":   # the scatter's rows are distinct: position() is injective
        assert "store.once" in proven, proven
    if name.startswith("combine"):
        assert "store.coords" in proven, proven


def test_fused_split_finish_verifies_but_its_ticket_counter():
    """The decode gate-up with its split finish inside (MoeSchedule.fused_finish): the
    verifier proves what the partial gate-up proves (each tile multiplies its own expert's
    weights, k-once per K slice, the stored coordinates) and that h is stored once (the guard
    of the last ticket), but atomic.tickets is not proven: the rule covers a counter reached
    by one CTA per program id, and here the ticket is drawn inside the persistent unit loop
    (argus/verify/check_atomics.py: "in no runtime loop"). A gap of the verifier (not of this
    package's files), recorded here so that this test fails once it is closed: then
    argus.ops.moe.decode_schedules may take fused_finish (it never does now: the op compiles
    with the verifier on)."""
    s = decode_schedule(8, split_k=4, fused_finish=True)
    report = verify.run(lower_only(grouped_gemm_kernel(True, True, True), s=s))
    codes = [d.code for d in report.errors]
    assert codes == ["atomic.tickets"], "\n".join(str(d) for d in report.errors)
    assert "runtime loop" in str(report.errors[0])
    proven = {o.code for o in report.proven}
    assert {"wgmma.agree", "store.coords", "wgmma.k-once", "store.once",
            "atomic.exclusive"} <= proven, proven


needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


@needs_nvrtc
@pytest.mark.parametrize("bn,splits", [(8, 2), (8, 4), (64, 2)])
def test_fused_split_finish_builds_for_sm90a(bn, splits):
    """The fused split finish compiles with NVRTC without spills: the partial gate-up's
    wgmma and 5-d tensor map, one atom.inc per unit (the self-resetting counter) and no
    separate finish kernel."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    s = decode_schedule(bn, split_k=splits, fused_finish=True)
    source = codegen.render(lower_only(grouped_gemm_kernel(True, True, True), s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and not binary.resource(source.name).spills
    assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16" in binary.ptx
    assert "cp.async.bulk.tensor.5d" in binary.ptx
    assert "atom.acq_rel.gpu.global.inc.u32" in binary.ptx, "no self-resetting counter"


@needs_nvrtc
@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
@pytest.mark.parametrize("bn,splits", [(8, 1), (64, 1), (8, 4), (32, 2)])
def test_decode_gemm_builds_for_sm90a(gated, bn, splits):
    """The swap-AB decode GEMMs compile with NVRTC: wgmma with the token tile as N (m64nBNk16),
    the weights through the 4-d (gate-up) or 3-d (down) tensor map, one more dim for the K
    slice of the partial kernels, no spills; and the split's finishing kernels."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    s = decode_schedule(bn, split_k=splits)
    kernels = [(grouped_gemm_kernel(gated, splits > 1), dict(s=s))]
    if splits > 1:
        kernels.append((split_finish_kernel(splits, bn), {}) if gated else
                       (R.combine_kernel(8, M._combine_width(8, splits), splits), {}))
    for i, (kernel, kw) in enumerate(kernels):
        source = codegen.render(lower_only(kernel, **kw))
        binary = compile_cuda(source.text, [source.name], use_cache=False)
        assert binary.arch == "sm_90a" and binary.cubin[:4] == b"\x7fELF"
        res = binary.resource(source.name)
        assert not res.spills, res.summary()
        if i == 0:
            assert f"wgmma.mma_async.sync.aligned.m64n{bn}k16.f32.bf16.bf16" in binary.ptx
            rank = (4 if gated else 3) + (splits > 1)
            assert f"cp.async.bulk.tensor.{rank}d" in binary.ptx


@needs_nvrtc
@pytest.mark.parametrize("be", [32, 128, 256])
def test_small_layout_builds_for_sm90a_without_spills(be):
    """layout_small at every expert width it takes (R.small_layout): NVRTC, no spills."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(R.layout_small_kernel(be, 8)))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and not binary.resource(source.name).spills


@needs_nvrtc
@pytest.mark.parametrize("build", [
    lambda: R.topk_softmax_kernel(ag.f32, 8, True, 128),                 # Qwen3
    lambda: R.topk_softmax_kernel(ag.bf16, 2, True, 32),                 # Mixtral
    lambda: R.topk_softmax_kernel(ag.f32, 8, False, 1024),               # the widest router
    lambda: R.topk_sigmoid_grouped_kernel(ag.f32, 8, True, 256, 8, 4, 2.5),   # DeepSeek-V3
], ids=["softmax_k8_E128", "softmax_k2_E32", "softmax_k8_E1024", "sigmoid_grouped"])
def test_routers_are_one_warp_without_block_barriers(build):
    """The routers run one warp per token (R.ROUTER_THREADS): their dozens of row reductions
    are warp shuffles, with no block barrier (bar.sync) in the binary, and no spills even at
    1024 experts."""
    from argus import codegen
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(build()))
    assert source.threads == R.ROUTER_THREADS == 32
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    assert res.barriers == 0 and not res.spills, res.summary()
    assert "shfl.sync" in binary.ptx
