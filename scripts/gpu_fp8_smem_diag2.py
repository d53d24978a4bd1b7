"""Bisect the smem_scales fp8 kernel's device trap (issue 18): one variant per process (a trap
poisons the CUDA context), one line per variant: `<name>: PASS|FAIL|TRAP <detail>`.

Hypothesis under test: a TMA tile copy (cp.async.bulk.tensor) whose innermost coordinate times
the element size is not a multiple of 16 bytes stops the kernel with an illegal instruction on
Hopper (reported by Triton, triton-lang/triton#7385 and the Gluon TMA tutorial of PR #9112, and
by TileLang, tile-ai/tilelang#2527 / #2681). SharedBlockScales loaded scale_a [M, K/128] f32
with box (128, 4) at coordinates (k, m) innermost first, so every K block k % 4 != 0 started
4 k bytes into a row: K/128 = 1 (k = 0 only) passed, 1000x300x640 trapped at the scale_a load.

Two kinds of variants:
  probe <name>   a raw CUDA kernel (no Argus DSL: nothing else can trap) that TMA-loads a list
                 of 2-D boxes of one f32 tensor into separate 128-B aligned smem slots and
                 writes them back; compared to torch's slice of the same box (zero fill
                 outside). The variants vary one thing each: the inner coordinate's alignment,
                 the view vs the padded tensor, L2 promotion, the outer coordinate.
  gemm <m> <n> <k> smem|global   argus.ops.scaled_matmul with block scales, the smem-scales
                 schedule or the global-scale one, against a float64 reference.

Run all variants (one device call, ~1-2 min): scripts/gpu_fp8_smem_diag2.sh
"""

from __future__ import annotations

import os
import sys

# name -> (rows, pitch, cols, box (rows, cols), [(c_inner, c_outer), ...], l2 promotion);
# the tensor is view [:, :cols] of a zero-padded [rows, pitch] f32 buffer (pitch == cols: the
# buffer itself)
PROBES = {
    # the kernel's scale_a pattern, K/128 = 5 padded to 8: k = 0, 1, 2, 3, 4
    "view_k0to4": (1000, 8, 5, (128, 4), [(k, 128 * 7) for k in range(5)], 256),
    # only k = 0 (what 129x384x128 did): aligned
    "view_k0": (1000, 8, 5, (128, 4), [(0, 128 * 7)], 256),
    # aligned inner coordinates only (k = 0, 4: 0 and 16 bytes)
    "view_k0_k4": (1000, 8, 5, (128, 4), [(0, 0), (4, 128)], 256),
    # one unaligned inner coordinate, 4 and 8 bytes into the row
    "view_k1": (1000, 8, 5, (128, 4), [(1, 0)], 256),
    "view_k2": (1000, 8, 5, (128, 4), [(2, 0)], 256),
    # the same with no L2 promotion (rules promotion in or out)
    "view_k1_l2none": (1000, 8, 5, (128, 4), [(1, 0)], 0),
    # the padded buffer itself, not a view (rules the view's dims in or out)
    "padded_k1": (1000, 8, 8, (128, 4), [(1, 0)], 256),
    # K/128 = 4: no padding at all, k = 0..3 (the 1024x384x512 GEMM's pattern)
    "dense_k0to3": (1024, 4, 4, (128, 4), [(k, 0) for k in range(4)], 256),
    # an unaligned outer coordinate with an aligned inner one (rows are free)
    "view_row3_k0": (1000, 8, 5, (128, 4), [(0, 3)], 256),
    # the weight scales' box (1 plane x 4) at k = 1
    "sb_k1": (3, 8, 5, (1, 4), [(1, 2)], 256),
    # a wider box at an unaligned inner coordinate (16 B inner box was not the only shape)
    "wide_k1": (256, 32, 32, (64, 8), [(1, 0)], 256),
}

SOURCE = r"""
#include "argus_sm90.cuh"
extern "C" __global__ void __launch_bounds__(128, 1) tma_probe(
    float* __restrict__ out, const int* __restrict__ coords, const int loads,
    const int box_elems, const __grid_constant__ ag::TensorMap tmap) {
    extern __shared__ __align__(1024) unsigned char raw[];
    unsigned char* const smem = raw + ((1024u - (ag::smem_u32(raw) & 1023u)) & 1023u);
    // one 128-B aligned slot of box_elems f32 per load, then one mbarrier per load
    const int slot = ((box_elems * 4 + 127) / 128) * 128;
    ag::uint64_t* const bars = reinterpret_cast<ag::uint64_t*>(smem + loads * slot);
    if (threadIdx.x == 0) {
        for (int i = 0; i < loads; ++i) ag::mbar_init(&bars[i], 1);
        ag::fence_barrier_init();
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int i = 0; i < loads; ++i) {
            ag::mbar_arrive_expect_tx(&bars[i], box_elems * 4);
            ag::tma_load_2d(&tmap, smem + i * slot, &bars[i], coords[2 * i], coords[2 * i + 1]);
        }
    }
    for (int i = 0; i < loads; ++i) {
        ag::mbar_wait(&bars[i], 0);
        const float* src = reinterpret_cast<const float*>(smem + i * slot);
        for (int e = threadIdx.x; e < box_elems; e += blockDim.x) out[i * box_elems + e] = src[e];
    }
}
"""


def _expected(torch, t, box, c_inner, c_outer):
    """The box of t at (c_outer, c_inner) (torch order), zeros outside t."""
    rows, cols = box
    ref = torch.zeros(rows, cols, dtype=t.dtype, device=t.device)
    r0, r1 = max(c_outer, 0), min(c_outer + rows, t.shape[0])
    q0, q1 = max(c_inner, 0), min(c_inner + cols, t.shape[1])
    if r1 > r0 and q1 > q0:
        ref[r0 - c_outer:r1 - c_outer, q0 - c_inner:q1 - c_inner] = t[r0:r1, q0:q1]
    return ref


def probe(name: str) -> str:
    import torch

    from argus.runtime import compile_cuda, make_tensor_map, prepare_launch

    rows, pitch, cols, box, coords, l2 = PROBES[name]
    # the padding past the view holds a sentinel: a box that read it instead of TMA's zero
    # fill past the view's dims would show
    base = torch.full((rows, pitch), -7.0, device="cuda")
    base[:, :cols] = torch.arange(rows * cols, device="cuda", dtype=torch.float32).view(
        rows, cols) + 1
    t = base[:, :cols]
    tmap = make_tensor_map(t, box=box, swizzle_bytes=0, l2_promotion=l2, name=name)
    box_elems = box[0] * box[1]
    out = torch.full((len(coords), box_elems), -1.0, device="cuda")
    flat = torch.tensor([c for pair in coords for c in pair], dtype=torch.int32, device="cuda")
    binary = compile_cuda(SOURCE, ["tma_probe"], filename="tma_probe.cu")
    slot = -(-box_elems * 4 // 128) * 128
    plan = prepare_launch(binary, "tma_probe", grid=(1,), block=(128,),
                          args=[out, flat, len(coords), box_elems, tmap],
                          smem_bytes=1024 + len(coords) * slot + 8 * len(coords))
    try:
        plan(sync=True)
    except Exception as e:  # noqa: BLE001 - the line names the error
        return f"TRAP {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    bad = [c for i, c in enumerate(coords)
           if not torch.equal(out[i].view(box), _expected(torch, t, box, *c))]
    spec = tmap.spec
    detail = f"dims {spec.dims} strides {spec.strides_bytes} box {spec.box} l2 {l2} " \
             f"coords(inner,outer) {coords}"
    return f"FAIL wrong box at {bad}; {detail}" if bad else f"PASS {detail}"


def gemm(m: int, n: int, k: int, which: str) -> str:
    import importlib

    import torch

    from argus.kernels.gemm_fp8 import Fp8GemmSchedule
    from argus.ops import scaled_matmul
    from tests.gpu.test_ops_scaled_matmul_gpu import _block_ref, _quantize_blocks, _rel

    op = importlib.import_module("argus.ops.scaled_matmul")
    op.SMEM_SCALES_ON_DEVICE = True
    s = Fp8GemmSchedule(bn=128, stages=6, promote=True, smem_scales=which == "smem")
    torch.manual_seed(0)
    a, w8, sa, sb = _quantize_blocks(torch.randn(m, k, device="cuda"),
                                     torch.randn(n, k, device="cuda") * 0.05)
    try:
        out = scaled_matmul(a, w8, sa, sb, out_dtype=torch.float32, schedule=s)
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - the line names the error
        return f"TRAP {type(e).__name__}: {str(e).splitlines()[0][:160]}"
    rel = _rel(out, _block_ref(a, w8, sa, sb))
    return f"{'PASS' if rel < 5e-4 else 'FAIL'} rel {rel:.2e} {s}"


def main() -> None:
    sys.path.insert(0, os.getcwd())   # run from the repository root: argus and tests import
    kind = sys.argv[1]
    if kind == "list":
        print(" ".join(PROBES))
        return
    if kind == "probe":
        name = sys.argv[2]
        line = probe(name)
    else:
        m, n, k = (int(v) for v in sys.argv[2:5])
        name = f"gemm_{sys.argv[5]}_{m}x{n}x{k}"
        line = gemm(m, n, k, sys.argv[5])
    print(f"{name}: {line}", flush=True)


if __name__ == "__main__":
    main()
