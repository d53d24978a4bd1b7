"""MoeFp8Schedule.pair_multicast (argus/kernels/moe_fp8.py): the smem-scale fp8 grouped GEMMs
in 2-CTA clusters along M whose pair of consecutive m-tiles multicasts the weight tile when
both have one expert, with the 128-row padding kept. In the interpreter bit-identical to the
default (FP8_PREFILL_SPLIT_SMEM_TMA) at routings with same-expert pairs, pairs straddling two
experts, an odd m-tile count (the last pair's second CTA has no m-tile) and zero-row experts,
both GEMMs, with quantize_out and skip_pad_halves; lowering's byte count of the two guarded
forms; the schedule's checks; the verifier with zero findings; NVRTC sm_90a without spills."""

from dataclasses import replace

import pytest

from argus import codegen, verify
from argus.compiler import lower_only
from argus.kernels.moe_fp8 import (FP8_PREFILL_SPLIT_SMEM_TMA, MoeFp8Schedule,
                                   grouped_gemm_fp8_smem_kernel)
from argus.runtime import nvrtc_available

torch = pytest.importorskip("torch")
from argus.ops import moe_module as M  # noqa: E402

from tests.moe.test_moe_fp8_layer import _fp8_weights, _rel  # noqa: E402

PAIR = replace(FP8_PREFILL_SPLIT_SMEM_TMA, pair_multicast=True)

# routed rows per expert (bm = 128): m-tiles 0 0 0 | 2 2 | 3 | 5 5 -> pairs (0,0) one expert,
# (0,2) and (2,3) straddling, (5,5) one expert; experts 1 and 4 have no rows
EVEN = (260, 0, 129, 5, 0, 140)
# without expert 3: 7 m-tiles, pairs (0,0) (0,2) (2,5) (5,-): the last pair's second is missing
ODD = (260, 0, 129, 0, 0, 141)


def _routing(counts, k=2):
    """ids [T, k] with exactly counts[e] entries of expert e (no token twice on an expert)."""
    flat = [e for e, c in enumerate(counts) for _ in range(c)]
    assert len(flat) % k == 0
    T = len(flat) // k
    assert max(counts) <= T
    ids = torch.tensor([[flat[t + j * T] for j in range(k)] for t in range(T)],
                       dtype=torch.int32)
    return ids


def _layer(counts, schedule, H=256, I=256, seed=5):
    E = len(counts)
    ids = _routing(counts)
    T, k = ids.shape
    w13, w2, s13, s2 = _fp8_weights(E, H, I, seed, "block")
    g = torch.Generator().manual_seed(seed + 3)
    x = torch.randn(T, H, generator=g).bfloat16()
    weights = torch.rand(T, k, generator=g)
    gate_up, down = schedule if isinstance(schedule, tuple) else (schedule, None)
    out = M.experts(x, w13, w2, ids, weights, M.Layer(T, H, I, E, k, gate_up, down),
                    interpret=True, scales=(s13, s2))
    return out, M.reference_fp8(x, w13, w2, s13, s2, ids, weights)


@pytest.mark.parametrize("counts", [EVEN, ODD], ids=["even", "odd"])
@pytest.mark.parametrize("form", ["both", "gate_up"])
def test_pair_multicast_is_bit_identical_to_the_default(counts, form):
    schedule = PAIR if form == "both" else (PAIR, FP8_PREFILL_SPLIT_SMEM_TMA)
    out, exact = _layer(counts, schedule)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    default, _ = _layer(counts, FP8_PREFILL_SPLIT_SMEM_TMA)
    assert torch.equal(out, default)


QUANT = replace(FP8_PREFILL_SPLIT_SMEM_TMA, quantize_out=True, stages=4)
SKIP = replace(FP8_PREFILL_SPLIT_SMEM_TMA, skip_pad_halves=True)


@pytest.mark.parametrize("counts", [EVEN, ODD], ids=["even", "odd"])
@pytest.mark.parametrize("pair,base", [
    # the gate-up quantizing its own h (bench's split_smem_fusedq4), paired
    ((replace(QUANT, pair_multicast=True), PAIR), (QUANT, FP8_PREFILL_SPLIT_SMEM_TMA)),
    # a consumer warpgroup of all-padding rows skips its work, with the missing m-tile's skip
    (replace(SKIP, pair_multicast=True), SKIP),
], ids=["quantize_out", "skip_pad_halves"])
def test_pair_multicast_composes(counts, pair, base):
    out, exact = _layer(counts, pair)
    assert not torch.isnan(out).any(), "a padding row reached the output"
    assert _rel(out, exact) < 1e-2, _rel(out, exact)
    default, _ = _layer(counts, base)
    assert torch.equal(out, default)


def test_pair_multicast_wraps_on_two_clusters():
    """4 persistent CTAs (2 clusters), 2 stages: the ring wraps across units of both kinds."""
    s = replace(PAIR, stages=2, num_sms=4, group_m=1)
    out, _ = _layer(EVEN, s, H=512)
    default, _ = _layer(EVEN, FP8_PREFILL_SPLIT_SMEM_TMA, H=512)
    assert torch.equal(out, default)


@pytest.mark.parametrize("kwargs,words", [
    (dict(pair_multicast=True), "pair_multicast"),                      # no smem_scales
    (dict(pair_multicast=True, smem_scales=True, n_split=2, bn=256, stages=3,
          cluster_m=2), "pair_multicast"),
])
def test_pair_multicast_schedule_checks(kwargs, words):
    with pytest.raises(ValueError, match=words):
        MoeFp8Schedule(**kwargs)


def test_the_global_scale_kernel_refuses_pair_multicast():
    """grouped_gemm_fp8_kernel (global block scales) has no paired grid: a pair_multicast
    schedule (smem_scales=True is what allows it) is refused, not traced unpaired."""
    from argus.kernels.moe_fp8 import grouped_gemm_fp8_kernel
    with pytest.raises(Exception, match="pair_multicast is built by the smem-scale kernel"):
        lower_only(grouped_gemm_fp8_kernel(False), s=PAIR)


def test_pair_multicast_keeps_the_padding_and_the_repr():
    assert PAIR.pad == 128
    assert repr(PAIR).endswith("pair_multicast=True)")
    assert "pair_multicast" not in repr(FP8_PREFILL_SPLIT_SMEM_TMA)


@pytest.mark.parametrize("gated", [True, False], ids=["gate_up", "down"])
def test_pair_multicast_expects_the_same_bytes_either_way(gated):
    """Lowering arms each step's full barrier with its A, one B tile and its scales: the
    multicast branch (2 CTAs x half of each box) and the own branch (the whole box) agree."""
    kernel = lower_only(grouped_gemm_fp8_smem_kernel(gated), s=PAIR)
    from argus.ir import ops as O
    produce = [op for op in kernel.walk() if isinstance(op, O.Produce)]
    assert len(produce) == 1
    b = PAIR.bn * PAIR.bk            # e4m3: one byte an element
    a = PAIR.bm * PAIR.bk
    assert b + a < produce[0].tx_bytes <= b + a + 4096   # plus the scale boxes


# (kernel factory arguments, schedule): both GEMMs, the quantizing gate-up, skip_pad_halves
KERNELS = [((True,), PAIR), ((False,), PAIR),
           ((True, True, True), replace(QUANT, pair_multicast=True)),
           ((True, False, True, True), replace(SKIP, pair_multicast=True)),
           ((False, False, True, True), replace(SKIP, pair_multicast=True))]
KERNEL_IDS = ["gate_up", "down", "gate_up_quantize_out", "gate_up_skip", "down_skip"]


@pytest.mark.parametrize("args,schedule", KERNELS, ids=KERNEL_IDS)
def test_pair_multicast_verifies_clean(args, schedule):
    report = verify.run(lower_only(grouped_gemm_fp8_smem_kernel(*args), s=schedule))
    findings = [d for d in report.diagnostics if d.severity in ("error", "warning")]
    assert not findings, "\n".join(str(d) for d in findings)
    assert {"wgmma.agree", "wgmma.k-once", "tma.inner-align", "tma.tx-bytes"} <= \
        {o.code for o in report.proven}


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("args,schedule", KERNELS, ids=KERNEL_IDS)
def test_pair_multicast_builds_without_spills(args, schedule):
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(grouped_gemm_fp8_smem_kernel(*args), s=schedule))
    assert source.dynamic_smem <= 227 * 1024, source.dynamic_smem
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert "C7514" not in binary.log and "C7517" not in binary.log, binary.log
    assert "multicast::cluster" in binary.ptx
    res = binary.resource(source.name)
    assert not res.spills, res.summary()


def test_pair_multicast_needs_a_row_past_the_m_tiles():
    """TileExpert with exactly M / bm rows is refused at launch: the last pair of an odd
    count reads its missing second m-tile's row (argus.ops.moe allocates one more)."""
    import numpy as np

    from argus.kernels.moe_fp8 import GROUP
    M_rows, K, N = 256, 256, 256
    kernel = grouped_gemm_fp8_smem_kernel(False)
    args = dict(A=torch.zeros(M_rows, K, dtype=torch.float8_e4m3fn),
                W=torch.zeros(1, N, K, dtype=torch.float8_e4m3fn),
                ScaleA=torch.ones(M_rows, 4), ScaleW=torch.ones(1, N // GROUP, 4),
                TileExpert=torch.zeros(M_rows // 128, 1, dtype=torch.int32),
                Tiles=torch.tensor([[1]], dtype=torch.int32),
                C=torch.zeros(M_rows, N, dtype=torch.bfloat16))
    with pytest.raises(Exception, match="row past"):
        kernel.interpret(*args.values(), s=PAIR)
    args["TileExpert"] = torch.zeros(M_rows // 128 + 1, 1, dtype=torch.int32)
    kernel.interpret(*args.values(), s=PAIR)
    assert np.isfinite(args["C"][:128].float().numpy()).all()
