"""What the fp8 GEMM kernels' interpreter tests share (tests/unit/test_fp8_{gemm,blockscaled,
overlap,split,release,smem_scales,smem_tma_coords,bench_variants}.py): e4m3 operands, block
scales spread over two orders of magnitude, the float64 product of the dequantized operands,
the tolerance of one output rounding plus fp32 accumulation, the K-major scale layout of the
shared-memory kernel, one block-scaled kernel run checked against float64, and the verifier's
clean bill for a promoting kernel.

Invariant: `blockscaled_inputs(m, n, k)` depends on the shape alone, so two kernels run on one
shape see the same values and their outputs may be compared bit for bit.

The importing test module skips itself without torch (`pytest.importorskip`) before it
imports this one."""

import numpy as np
import torch

from argus.kernels.gemm_fp8 import gemm_fp8_blockscaled_kernel, gemm_fp8_blockscaled_smem_kernel

ULP = {"bf16": 2.0 ** -8, "f16": 2.0 ** -10, "f32": 2.0 ** -23}


def e4m3(shape, scale, seed):
    """Seeded N(0, scale^2) values cast to float8_e4m3fn."""
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*shape, generator=g) * scale).to(torch.float8_e4m3fn)


def scales(shape, seed):
    """Scales spread over two orders of magnitude, so that a scale applied to the wrong block
    (row, or weight block, or K block) shows."""
    g = torch.Generator().manual_seed(seed)
    return torch.exp(torch.rand(*shape, generator=g) * 4.6 - 2.3)


def dequantized(a, w, sa, sb):
    """float64 a * scale_a (1x128) and w * scale_b (128x128): the reference's operands."""
    m, k = a.shape
    n = w.shape[0]
    a64 = a.double() * sa.double().repeat_interleave(128, 1)[:, :k]
    w64 = w.double() * sb.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
    return a64, w64


def check_close(got, a64, w64, out, k):
    """`got` (no NaN left) within one rounding to `out` of a64 @ w64.T plus fp32 accumulation
    of the partials and across blocks."""
    want = (a64 @ w64.T).numpy()
    got = got.double().numpy()
    assert not np.isnan(got).any()
    bound = (a64.abs() @ w64.abs().T).numpy()
    tol = ULP[out.name] * np.abs(want) + (k + 128) * 2.0 ** -24 * bound + 1e-30
    err = np.abs(got - want)
    assert (err <= tol).all(), float(np.max(err / tol))


def kmajor(t):
    """t [rows, kb] as the smem kernel takes it: rows 16-byte pitched (a view of a padded
    buffer, as argus.ops.scaled_matmul makes it)."""
    rows, kb = t.shape
    padded = torch.zeros(rows, -(-kb // 4) * 4)
    padded[:, :kb] = t
    return padded[:, :kb]


def blockscaled_inputs(m, n, k):
    """One shape's a [m, k] (e4m3, scale 3), w [n, k] (e4m3, scale 0.5), scale_a [m, k/128]
    and scale_b [ceil(n/128), k/128], both row-major."""
    return (e4m3((m, k), 3.0, m), e4m3((n, k), 0.5, n), scales((m, k // 128), 1),
            scales((-(-n // 128), k // 128), 2))


def interpret_blockscaled(m, n, k, out, schedule):
    """C [m, n] of the block-scaled kernel over blockscaled_inputs(m, n, k), interpreted into a
    NaN-filled C and checked against float64: the shared-memory-scales kernel (K-major scales)
    when schedule.smem_scales, else the global-scales one (scale_a MN-major)."""
    a, w, sa, sb = blockscaled_inputs(m, n, k)
    c = torch.full((m, n), float("nan"), dtype=out.torch_dtype())
    if schedule.smem_scales:
        gemm_fp8_blockscaled_smem_kernel(out).interpret(a, w, kmajor(sa), kmajor(sb), c,
                                                        s=schedule)
    else:
        gemm_fp8_blockscaled_kernel(out).interpret(a, w, sa.t().contiguous(), sb, c, s=schedule)
    check_close(c, *dequantized(a, w, sa, sb), out, k)
    return c


def verify_clean(kernel):
    """The verifier's report on a promoting fp8 kernel: no error, unknowns only where the
    store coverage is not proven, and the promoted sum proven k-once."""
    from argus import verify

    report = verify.run(kernel)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert {d.code for d in report.unknowns} <= {"store.coverage", "store.once"}, \
        "\n".join(str(d) for d in report.unknowns)
    assert any(d.code == "wgmma.k-once" for d in report.proven)
    return report


__all__ = ["ULP", "blockscaled_inputs", "check_close", "dequantized", "e4m3",
           "interpret_blockscaled", "kmajor", "scales", "verify_clean"]
