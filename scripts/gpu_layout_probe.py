#!/usr/bin/env python3
"""Layout conformance probes (INVARIANTS.md §3.8): load coordinates as data through the real
TMA, wgmma, ldmatrix, stmatrix and mma.sync paths on a Hopper GPU and compare every element
with the models the verifier and codegen trust (argus.target.sm90, argus.lower descriptors).

Run on the H200:  python3 scripts/gpu_layout_probe.py [--json out.json]
Without a GPU:    python3 scripts/gpu_layout_probe.py --compile-only   (NVRTC compile check)

Probes (each prints PASS/FAIL and the first mismatches):
  tma/<swizzle>      a coordinate-coded [rows x cols] box (raw 16-bit codes r*C + c) loaded by
                     cp.async.bulk.tensor with each swizzle mode (none/32/64/128B) at a non-zero
                     global offset; every shared element vs sm90.tma_box_coord (the inverse of
                     the absolute-address swizzle the verifier uses);
  wgmma/<major>      D = A B^T for m64n64k16 x 4 k-steps, A (K-major) and B (K-major, or MN-major
                     as one [K][64] column atom) TMA-loaded with 128B swizzle and read through
                     the descriptors argus.lower.wgmma emits; A holds its own row (pass 1) or k
                     (pass 2) and B a permutation, so D[t, i] reveals exactly which A row and
                     which B column landed in thread t's register d[i]: compared with
                     sm90.wgmma_acc_coord (PTX ISA §9.7.15.5.1.1.1);
  ldmatrix[.trans]   a 16x16 coded tile, lane addresses from sm90.ldmatrix_x4_mma_a_src; every
                     register half vs sm90.ldmatrix_coord (PTX ISA §9.7.14.5.15);
  stmatrix           each lane stores the codes sm90.ldmatrix_coord says it holds; the tile must
                     come out as r*16 + c (§9.7.14.5.16);
  mma.sync           m16n8k16 bf16 with fragments built from sm90.mma16816_{a,b}_coord and a
                     permutation B; D registers vs sm90.mma16816_c_coord (§9.7.14.5.8).
Exit status 0 when every probe passes, 1 otherwise (2: no GPU and not --compile-only).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SOURCE = r"""
#include "argus_sm90.cuh"
using ag::uint64_t;
using ag::uint32_t;
using ag::uint16_t;

__device__ __forceinline__ unsigned char* aligned_smem(unsigned char* raw) {
    return raw + ((1024u - (ag::smem_u32(raw) & 1023u)) & 1023u);
}

// One TMA box into 1024-B aligned shared memory, dumped raw.
extern "C" __global__ void probe_tma(const __grid_constant__ ag::TensorMap tmap, uint16_t* out,
                                     int box_elems, int box_bytes, int c_inner, int c_outer) {
    extern __shared__ __align__(1024) unsigned char raw[];
    unsigned char* smem = aligned_smem(raw);
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 65536);
    if (threadIdx.x == 0) { ag::mbar_init(bar, 1); ag::fence_barrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        ag::mbar_arrive_expect_tx(bar, box_bytes);
        ag::tma_load_2d(&tmap, smem, bar, c_inner, c_outer);
    }
    ag::mbar_wait(bar, 0);
    const uint16_t* s = reinterpret_cast<const uint16_t*>(smem);
    for (int i = threadIdx.x; i < box_elems; i += blockDim.x) out[i] = s[i];
}

// D[64 x 64] = A[64 x 64] B^T through TMA (128B swizzle) and wgmma descriptors; one warpgroup.
template <bool TRANS_B>
__device__ void wgmma_probe(const ag::TensorMap* ta, const ag::TensorMap* tb, float* out,
                            int sw_a, int lbo_a, int sbo_a, int adv_a,
                            int sw_b, int lbo_b, int sbo_b, int adv_b) {
    extern __shared__ __align__(1024) unsigned char raw[];
    unsigned char* smem = aligned_smem(raw);
    unsigned char* sA = smem;            // 64 x 64 bf16 = 8 KB
    unsigned char* sB = smem + 8192;     // 64 x 64 bf16 = 8 KB
    uint64_t* bar = reinterpret_cast<uint64_t*>(smem + 16384);
    if (threadIdx.x == 0) { ag::mbar_init(bar, 1); ag::fence_barrier_init(); }
    __syncthreads();
    if (threadIdx.x == 0) {
        ag::mbar_arrive_expect_tx(bar, 16384);
        ag::tma_load_2d(ta, sA, bar, 0, 0);
        ag::tma_load_2d(tb, sB, bar, 0, 0);
    }
    ag::mbar_wait(bar, 0);
    float d[32];
    #pragma unroll
    for (int i = 0; i < 32; ++i) d[i] = 0.0f;
    const uint64_t da = ag::make_smem_desc(sA, sw_a, lbo_a, sbo_a);
    const uint64_t db = ag::make_smem_desc(sB, sw_b, lbo_b, sbo_b);
    ag::fence_operands(d);
    ag::wgmma_fence();
    #pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
        if (TRANS_B)
            ag::wgmma_m64n64k16_f32_bf16_ss_tb(d, ag::desc_advance(da, kk * adv_a),
                                               ag::desc_advance(db, kk * adv_b), 1);
        else
            ag::wgmma_m64n64k16_f32_bf16_ss(d, ag::desc_advance(da, kk * adv_a),
                                            ag::desc_advance(db, kk * adv_b), 1);
    }
    ag::wgmma_commit();
    ag::wgmma_wait<0>();
    ag::fence_operands(d);
    #pragma unroll
    for (int i = 0; i < 32; ++i) out[threadIdx.x * 32 + i] = d[i];
}

extern "C" __global__ void __launch_bounds__(128, 1) probe_wgmma_k(
        const __grid_constant__ ag::TensorMap ta, const __grid_constant__ ag::TensorMap tb,
        float* out, int sw_a, int lbo_a, int sbo_a, int adv_a,
        int sw_b, int lbo_b, int sbo_b, int adv_b) {
    wgmma_probe<false>(&ta, &tb, out, sw_a, lbo_a, sbo_a, adv_a, sw_b, lbo_b, sbo_b, adv_b);
}

extern "C" __global__ void __launch_bounds__(128, 1) probe_wgmma_mn(
        const __grid_constant__ ag::TensorMap ta, const __grid_constant__ ag::TensorMap tb,
        float* out, int sw_a, int lbo_a, int sbo_a, int adv_a,
        int sw_b, int lbo_b, int sbo_b, int adv_b) {
    wgmma_probe<true>(&ta, &tb, out, sw_a, lbo_a, sbo_a, adv_a, sw_b, lbo_b, sbo_b, adv_b);
}

// ldmatrix.x4 (.trans) of a 16 x 16 tile of raw 16-bit codes; lane addresses given by the host.
extern "C" __global__ void probe_ldmatrix(const uint16_t* tile, const int* row_of_lane,
                                          const int* col_of_lane, uint32_t* out, int trans) {
    __shared__ __align__(128) uint16_t s[16 * 16];
    for (int i = threadIdx.x; i < 256; i += 32) s[i] = tile[i];
    __syncwarp();
    const int l = threadIdx.x;
    const void* addr = &s[row_of_lane[l] * 16 + col_of_lane[l]];
    uint32_t r0, r1, r2, r3;
    if (trans) ag::ldmatrix_x4_trans(addr, r0, r1, r2, r3);
    else ag::ldmatrix_x4(addr, r0, r1, r2, r3);
    out[l * 4 + 0] = r0; out[l * 4 + 1] = r1; out[l * 4 + 2] = r2; out[l * 4 + 3] = r3;
}

// stmatrix.x4 of per-lane registers given by the host; the tile is dumped.
extern "C" __global__ void probe_stmatrix(const uint32_t* regs, const int* row_of_lane,
                                          const int* col_of_lane, uint16_t* out) {
    __shared__ __align__(128) uint16_t s[16 * 16];
    for (int i = threadIdx.x; i < 256; i += 32) s[i] = 0xFFFF;
    __syncwarp();
    const int l = threadIdx.x;
    ag::stmatrix_x4(&s[row_of_lane[l] * 16 + col_of_lane[l]], regs[l * 4 + 0], regs[l * 4 + 1],
                    regs[l * 4 + 2], regs[l * 4 + 3]);
    __syncwarp();
    for (int i = threadIdx.x; i < 256; i += 32) out[i] = s[i];
}

// mma.sync.m16n8k16 bf16 -> f32 with fragments given per lane by the host.
extern "C" __global__ void probe_mma16816(const uint32_t* a, const uint32_t* b, float* out) {
    const int l = threadIdx.x;
    float d0, d1, d2, d3;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
        : "=f"(d0), "=f"(d1), "=f"(d2), "=f"(d3)
        : "r"(a[l * 4 + 0]), "r"(a[l * 4 + 1]), "r"(a[l * 4 + 2]), "r"(a[l * 4 + 3]),
          "r"(b[l * 2 + 0]), "r"(b[l * 2 + 1]),
          "f"(0.0f), "f"(0.0f), "f"(0.0f), "f"(0.0f));
    out[l * 4 + 0] = d0; out[l * 4 + 1] = d1; out[l * 4 + 2] = d2; out[l * 4 + 3] = d3;
}
"""

KERNELS = ["probe_tma", "probe_wgmma_k", "probe_wgmma_mn", "probe_ldmatrix", "probe_stmatrix",
           "probe_mma16816"]


def cuda_source() -> str:
    from argus.codegen.wgmma import WgmmaSpec, wgmma_prelude

    prelude = wgmma_prelude([WgmmaSpec(n=64, a_dtype="bf16", b_dtype="bf16"),
                             WgmmaSpec(n=64, a_dtype="bf16", b_dtype="bf16", trans_b=True)])
    head, rest = SOURCE.split("using ag::uint64_t;", 1)
    return head + prelude + "using ag::uint64_t;" + rest


class Result:
    def __init__(self, name: str):
        self.name = name
        self.checked = 0
        self.mismatches: list[str] = []

    def expect(self, got, want, where: str) -> None:
        self.checked += 1
        if got != want and len(self.mismatches) < 8:
            self.mismatches.append(f"{where}: got {got}, model says {want}")
        elif got != want:
            self.mismatches.append("…")

    @property
    def ok(self) -> bool:
        return self.checked > 0 and not self.mismatches

    def line(self) -> str:
        status = "PASS" if self.ok else "FAIL"
        text = f"{status} {self.name}: {self.checked} elements"
        if self.mismatches:
            shown = [m for m in self.mismatches if m != "…"][:5]
            text += f", {len(self.mismatches)}+ mismatches:\n    " + "\n    ".join(shown)
        return text

    def json(self) -> dict:
        return {"probe": self.name, "ok": self.ok, "checked": self.checked,
                "mismatches": self.mismatches[:20]}


# ----------------------------------------------------------------------------- probes


def _codes16(rows: int, cols: int):
    import torch

    return torch.arange(rows * cols, dtype=torch.int32).reshape(rows, cols).to(torch.int16)


def probe_tma(binary, swizzle: int) -> Result:
    import torch

    from argus.runtime import launch, make_tensor_map
    from argus.target import sm90

    res = Result(f"tma/{swizzle or 'none'}")
    R, C = 96, 256                                  # global tensor of codes r * C + c
    inner = (swizzle or 128) // 2                   # bf16 elements per box row
    rows = 64
    c_outer, c_inner = 16, 64                       # a non-zero global offset
    codes = _codes16(R, C).cuda()
    tmap = make_tensor_map(codes.view(torch.bfloat16), box=(rows, inner), swizzle_bytes=swizzle,
                           name="codes")
    out = torch.zeros(rows * inner, dtype=torch.int16, device="cuda")
    launch(binary, "probe_tma", grid=1, block=128,
           args=[tmap, out, rows * inner, rows * inner * 2, c_inner, c_outer],
           smem_bytes=65536 + 1024 + 64, sync=True)
    got = out.cpu().numpy().astype("int64") & 0xFFFF
    for e in range(rows * inner):
        r, cb, inside = sm90.tma_box_coord(2 * e, 0, swizzle, inner * 2, rows)
        want = (c_outer + int(r)) * C + c_inner + int(cb) // 2 if inside else None
        res.expect(int(got[e]), want, f"smem element {e} (byte {2 * e:#x})")
    return res


def _bf16_bits(values):
    import torch

    t = torch.as_tensor(values, dtype=torch.float32).to(torch.bfloat16)
    return t.view(torch.int16).to(torch.int32) & 0xFFFF


def probe_wgmma(binary, mn_major: bool) -> Result:
    import numpy as np
    import torch

    from argus import dtypes
    from argus.ir.types import SmemViewType
    from argus.lower import wgmma as lw
    from argus.runtime import launch, make_tensor_map
    from argus.target import sm90

    res = Result(f"wgmma/{'B MN-major' if mn_major else 'B K-major'}")
    rng = np.random.default_rng(0)
    perm = rng.permutation(64)                   # B[n, k] = 1 iff k == perm[n]
    view = SmemViewType(dtypes.bf16, (64, 64), 128)
    desc_a = lw.descriptor_fields(view, None)
    desc_b = lw.mn_major_descriptor_fields(view, 64, None) if mn_major else \
        lw.descriptor_fields(view, None)
    B = torch.zeros(64, 64)
    B[torch.arange(64), torch.as_tensor(perm)] = 1.0          # [n, k]
    b_host = (B.T if mn_major else B).contiguous().to(torch.bfloat16).cuda()  # [k, n] or [n, k]
    tb = make_tensor_map(b_host, box=(64, 64), swizzle_bytes=128, name="B")
    found = {}
    for what in ("row", "k"):
        idx = torch.arange(64, dtype=torch.float32)
        A = idx[:, None].expand(64, 64) if what == "row" else idx[None, :].expand(64, 64)
        a_host = A.contiguous().to(torch.bfloat16).cuda()
        ta = make_tensor_map(a_host, box=(64, 64), swizzle_bytes=128, name="A")
        out = torch.zeros(128 * 32, dtype=torch.float32, device="cuda")
        launch(binary, "probe_wgmma_mn" if mn_major else "probe_wgmma_k", grid=1, block=128,
               args=[ta, tb, out, *desc_a, *desc_b], smem_bytes=16384 + 1024 + 64, sync=True)
        found[what] = out.cpu().numpy().reshape(128, 32)
    for t in range(128):
        for i in range(32):
            row, col = (int(x) for x in sm90.wgmma_acc_coord(t, i))
            got = (int(found["row"][t, i]), int(found["k"][t, i]))
            res.expect(got, (row, int(perm[col])),
                       f"thread {t} d[{i}] (A row, k of B column)")
    return res


def _lane_addresses():
    from argus.target import sm90

    rows, cols = [], []
    for lane in range(32):
        r, c = sm90.ldmatrix_x4_mma_a_src(lane)
        rows.append(int(r))
        cols.append(int(c))
    return rows, cols


def probe_ldmatrix(binary, trans: bool) -> Result:
    import torch

    from argus.runtime import launch
    from argus.target import sm90

    res = Result("ldmatrix.x4" + (".trans" if trans else ""))
    tile = _codes16(16, 16).cuda()
    rows, cols = _lane_addresses()
    out = torch.zeros(128, dtype=torch.int32, device="cuda")
    launch(binary, "probe_ldmatrix", grid=1, block=32,
           args=[tile, torch.tensor(rows, dtype=torch.int32).cuda(),
                 torch.tensor(cols, dtype=torch.int32).cuda(), out, int(trans)], sync=True)
    got = out.cpu().numpy().astype("int64") & 0xFFFFFFFF
    for lane in range(32):
        for j in range(4):
            for half in range(2):
                r, c = (int(x) for x in sm90.ldmatrix_coord(lane, half, trans=trans))
                # matrix j covers rows 8(j % 2).., columns 8(j / 2).. (the x4 A-tile addressing)
                want = (8 * (j % 2) + r) * 16 + 8 * (j // 2) + c
                value = (int(got[lane * 4 + j]) >> (16 * half)) & 0xFFFF
                res.expect(value, want, f"lane {lane} register {j} half {half}")
    return res


def probe_stmatrix(binary) -> Result:
    import torch

    from argus.runtime import launch
    from argus.target import sm90

    res = Result("stmatrix.x4")
    rows, cols = _lane_addresses()
    regs = []
    for lane in range(32):
        for j in range(4):
            word = 0
            for half in range(2):
                r, c = (int(x) for x in sm90.stmatrix_coord(lane, half))
                code = (8 * (j % 2) + r) * 16 + 8 * (j // 2) + c
                word |= code << (16 * half)
            regs.append(word - (1 << 32) if word >= 1 << 31 else word)
    out = torch.zeros(256, dtype=torch.int16, device="cuda")
    launch(binary, "probe_stmatrix", grid=1, block=32,
           args=[torch.tensor(regs, dtype=torch.int32).cuda(),
                 torch.tensor(rows, dtype=torch.int32).cuda(),
                 torch.tensor(cols, dtype=torch.int32).cuda(), out], sync=True)
    got = out.cpu().numpy().astype("int64") & 0xFFFF
    for e in range(256):
        res.expect(int(got[e]), e, f"tile element ({e // 16}, {e % 16})")
    return res


def probe_mma16816(binary) -> Result:
    import numpy as np
    import torch

    from argus.runtime import launch
    from argus.target import sm90

    res = Result("mma.sync.m16n8k16")
    perm = np.random.default_rng(1).permutation(16)[:8]    # B[k, n] = 1 iff k == perm[n]
    found = {}
    for what in ("row", "k"):
        a_regs, b_regs = [], []
        for lane in range(32):
            vals = []
            for i in range(8):
                row, k = (int(x) for x in sm90.mma16816_a_coord(lane, i))
                vals.append(float(row if what == "row" else k))
            bits = _bf16_bits(vals).tolist()
            a_regs += [bits[2 * j] | (bits[2 * j + 1] << 16) for j in range(4)]
            bv = []
            for i in range(4):
                k, n = (int(x) for x in sm90.mma16816_b_coord(lane, i))
                bv.append(1.0 if k == int(perm[n]) else 0.0)
            bb = _bf16_bits(bv).tolist()
            b_regs += [bb[0] | (bb[1] << 16), bb[2] | (bb[3] << 16)]
        to_i32 = [x - (1 << 32) if x >= 1 << 31 else x for x in a_regs]
        tb_i32 = [x - (1 << 32) if x >= 1 << 31 else x for x in b_regs]
        out = torch.zeros(128, dtype=torch.float32, device="cuda")
        launch(binary, "probe_mma16816", grid=1, block=32,
               args=[torch.tensor(to_i32, dtype=torch.int32).cuda(),
                     torch.tensor(tb_i32, dtype=torch.int32).cuda(), out], sync=True)
        found[what] = out.cpu().numpy().reshape(32, 4)
    for lane in range(32):
        for i in range(4):
            row, col = (int(x) for x in sm90.mma16816_c_coord(lane, i))
            got = (int(found["row"][lane, i]), int(found["k"][lane, i]))
            res.expect(got, (row, int(perm[col])), f"lane {lane} d[{i}]")
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json", type=Path, help="write the results as JSON here")
    ap.add_argument("--compile-only", action="store_true",
                    help="compile the probe kernels with NVRTC for sm_90a and stop")
    args = ap.parse_args()
    from argus.runtime import compile_cuda

    binary = compile_cuda(cuda_source(), KERNELS, filename="gpu_layout_probe.cu")
    if args.compile_only:
        print(f"compiled {len(KERNELS)} probe kernels for sm_90a: {', '.join(KERNELS)}")
        return 0
    try:
        import torch
        if not torch.cuda.is_available():
            raise RuntimeError("no CUDA device")
    except Exception as e:  # noqa: BLE001
        print(f"gpu_layout_probe: needs a Hopper GPU ({e}); use --compile-only here",
              file=sys.stderr)
        return 2
    results = [probe_tma(binary, sw) for sw in (0, 32, 64, 128)]
    results += [probe_wgmma(binary, False), probe_wgmma(binary, True)]
    results += [probe_ldmatrix(binary, False), probe_ldmatrix(binary, True),
                probe_stmatrix(binary), probe_mma16816(binary)]
    for r in results:
        print(r.line())
    ok = all(r.ok for r in results)
    print(f"\n{'ALL PROBES PASS' if ok else 'SOME PROBES FAIL'}: "
          f"{sum(r.ok for r in results)}/{len(results)} on {torch.cuda.get_device_name()}")
    if args.json:
        args.json.write_text(json.dumps([r.json() for r in results], indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
