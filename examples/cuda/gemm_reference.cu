// gemm_reference.cu: the hand-written performance reference for Argus GEMMs on Hopper.
//
// One job: C[M,N] (bf16) = A[M,K] (bf16) @ B[N,K]^T (bf16), fp32 accumulation, written with
// nothing but argus_sm90.cuh and one generated wgmma wrapper. It is the shape the DSL compiler
// generates for a GEMM (HOPPER.md §2.1), so its speed is what generated code is measured
// against, and the device header is tested by running it.
//
// Structure (one CTA = one 128x256 tile of C, 384 threads = 3 warpgroups):
//   * WG0 producer: setmaxnreg.dec 40; one elected thread streams 64-wide K stages of
//     A (128x64) and B (256x64) with TMA (128B swizzle) into a 4-stage smem ring guarded by
//     full/empty mbarriers (full: 1 arrival + tx bytes; empty: one arrival per consumer WG).
//   * WG1, WG2 consumers: setmaxnreg.inc 232; each owns 64 rows x 256 cols (128 f32 registers
//     per thread) and issues 4 x wgmma m64n256k16 per stage, descriptors advanced 32 bytes per
//     k16 step inside the 128B swizzle atom (SBO = 1024 = 8 rows x 128 B). The first wgmma of
//     the tile uses scale-d = 0 instead of zeroing. wait_group 1 keeps one stage in flight and
//     releases the previous one.
//   * Epilogue: accumulator fragment -> bf16 pairs stored straight to global, masked at the
//     M / N edges (TMA zero-fills out-of-bounds loads, so partial tiles need no K masking).
// Launch: grid = ceil(M/128) * ceil(N/256) CTAs (1-D, grouped raster), block = 384,
// dynamic smem = GEMM_SMEM_BYTES. TMA maps: A dims (K, M) box (64, 128); B dims (K, N)
// box (64, 256); both bf16, 128B swizzle, innermost first. K must be a multiple of 8 (TMA
// strides are multiples of 16 bytes); M and N are arbitrary.

#include "argus_sm90.cuh"

// BEGIN GENERATED wgmma (argus.codegen.wgmma.wgmma_prelude; tests/unit/test_device_header.py
// checks this block; regenerate with ARGUS_ACCEPT=1)
namespace ag {

// PTX ISA §9.7.15.5.2 "wgmma.mma_async": wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16
// D[64x256] {=, +=} A[64x16] * B[16x256]; A K-major in smem, B K-major.
// scale_d == 0 overwrites D (no zero-fill needed), else accumulates.
__device__ __forceinline__ void wgmma_m64n256k16_f32_bf16_ss(float (&d)[128], uint64_t desc_a,
    uint64_t desc_b, int scale_d) {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "setp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 "
        "{"
        "%0, %1, %2, %3, %4, %5, %6, %7, "
        "%8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, "
        "%24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, "
        "%40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, "
        "%56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, "
        "%72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, "
        "%88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, "
        "%104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, "
        "%120, %121, %122, %123, %124, %125, %126, %127 "
        "}, %128, %129, p, 1, 1, 0, 0;\n"
        "}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
          "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
          "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
          "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
          "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
          "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
          "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
          "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
          "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]),
          "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]),
          "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]),
          "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]),
          "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]),
          "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]),
          "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]),
          "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d)
        : "memory");
}

}  // namespace ag
// END GENERATED wgmma

namespace gemm {
// An enum, not namespace-scope constexpr variables: NVRTC emits the latter as .global data.
enum : int {
    BM = 128,          // tile rows (2 consumer warpgroups x 64)
    BN = 256,          // tile cols (one m64n256 wgmma per consumer per k16)
    BK = 64,           // 64 bf16 = 128 bytes = one 128B swizzle row
    STAGES = 4,        // 4 x 48 KB ring
    CONSUMERS = 2,     // consumer warpgroups
    GROUP_M = 16,      // M tiles per raster group (L2 reuse of B tiles)
    A_STAGE_BYTES = BM * BK * 2,   // 16 KB
    B_STAGE_BYTES = BN * BK * 2,   // 32 KB
    // ring + full/empty barriers + slack to align the ring to 1024 B (128B swizzle repeat)
    SMEM_BYTES = STAGES * (A_STAGE_BYTES + B_STAGE_BYTES) + 2 * STAGES * 8 + 1024,
};
static_assert(SMEM_BYTES <= 232448, "exceeds the 227 KB opt-in shared memory of sm_90");
}  // namespace gemm

extern "C" __global__ void __launch_bounds__(384, 1)
argus_gemm_bf16_tn(const __grid_constant__ ag::TensorMap tmA,
                   const __grid_constant__ ag::TensorMap tmB,
                   ag::bf16* __restrict__ C, int M, int N, int K) {
    using namespace ag;
    using namespace gemm;

    extern __shared__ unsigned char smem_raw[];
    // The swizzle is a function of the absolute smem address: align the ring to 1024 B so that
    // TMA's and wgmma's 128B patterns agree with base_offset = 0 (INVARIANTS.md §2.2, §2.3).
    unsigned char* smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u);
    unsigned char* sA = smem;
    unsigned char* sB = smem + STAGES * A_STAGE_BYTES;
    uint64_t* full = reinterpret_cast<uint64_t*>(sB + STAGES * B_STAGE_BYTES);
    uint64_t* empty = full + STAGES;

    // Grouped raster: GROUP_M consecutive M tiles share each B tile while it is hot in L2.
    const int tiles_m = (M + BM - 1) / BM;
    const int tiles_n = (N + BN - 1) / BN;
    const int per_group = GROUP_M * tiles_n;
    const int first_m = (int)(blockIdx.x / per_group) * GROUP_M;
    const int group_rows = min(tiles_m - first_m, GROUP_M);
    const int local = (int)(blockIdx.x % per_group);
    const int m0 = (first_m + local % group_rows) * BM;
    const int n0 = (local / group_rows) * BN;
    const int num_k = (K + BK - 1) / BK;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);              // the producer's arrive.expect_tx
            mbar_init(&empty[s], CONSUMERS);     // one arrive per consumer warpgroup
        }
        fence_barrier_init();                    // hazard 4: init visible before first use
    }
    __syncthreads();

    const uint32_t wg = warpgroup_id();
    if (wg == 0) {
        // Producer. Registers go to the consumers: dec before they inc (hazard 9).
        setmaxnreg_dec<40>();
        if (warp_in_warpgroup() == 0 && elect_one_sync()) {
            prefetch_tensormap(&tmA);
            prefetch_tensormap(&tmB);
            for (int k = 0; k < num_k; ++k) {
                const int s = k % STAGES;
                const uint32_t parity = (uint32_t)(k / STAGES) & 1u;
                // A fresh barrier counts as having completed the phase before phase 0, so the
                // first lap waits on parity 1 and passes at once (hazard 1).
                mbar_wait(&empty[s], parity ^ 1u);
                // Full boxes are credited even when partly out of bounds (hazard 2).
                mbar_arrive_expect_tx(&full[s], A_STAGE_BYTES + B_STAGE_BYTES);
                tma_load_2d(&tmA, sA + s * A_STAGE_BYTES, &full[s], k * BK, m0);
                tma_load_2d(&tmB, sB + s * B_STAGE_BYTES, &full[s], k * BK, n0);
            }
        }
    } else {
        setmaxnreg_inc<232>();
        const int c = (int)wg - 1;               // this consumer's 64-row half of the tile
        float acc[BN / 2];
        for (int k = 0; k < num_k; ++k) {
            const int s = k % STAGES;
            mbar_wait(&full[s], (uint32_t)(k / STAGES) & 1u);
            // K-major, 128B swizzle: LBO unused (16), SBO = 8 rows x 128 B.
            const uint64_t desc_a =
                make_smem_desc(sA + s * A_STAGE_BYTES + c * 64 * BK * 2, 128, 16, 1024);
            const uint64_t desc_b = make_smem_desc(sB + s * B_STAGE_BYTES, 128, 16, 1024);
            wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BK / 16; ++kk) {
                wgmma_m64n256k16_f32_bf16_ss(acc, desc_advance(desc_a, kk * 32),
                                             desc_advance(desc_b, kk * 32),
                                             (k > 0 || kk > 0) ? 1 : 0);
            }
            wgmma_commit();
            // Keep this stage's group in flight; the previous stage's group is retired now,
            // so its smem may be refilled (hazard 8).
            wgmma_wait<1>();
            fence_operands(acc);
            if (k > 0 && threadIdx.x % 128 == 0) mbar_arrive(&empty[(k - 1) % STAGES]);
        }
        wgmma_wait<0>();
        fence_operands(acc);
        if (num_k == 0) {
#pragma unroll
            for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;
        }

        // Epilogue (INVARIANTS.md §2.1): register i holds
        //   row = 16 w + g + 8 ((i/2) % 2),  col = 2 q + (i % 2) + 8 (i/4).
        const uint32_t t = threadIdx.x % 128u, w = t / 32u, lane = t % 32u;
        const int row0 = m0 + c * 64 + 16 * (int)w + (int)(lane / 4u);
        const int col0 = n0 + 2 * (int)(lane % 4u);
        const bool pairs = (N % 2) == 0;         // 4-byte aligned bf16 pairs
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = col0 + 8 * j;
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = row0 + 8 * h;
                const float v0 = acc[4 * j + 2 * h], v1 = acc[4 * j + 2 * h + 1];
                if (row < M) {
                    bf16* out = C + (long long)row * N + col;
                    if (pairs && col + 1 < N) {
                        st_global_b32(out, pack_bf16x2(v0, v1));
                    } else {
                        if (col < N) st_global_b16(out, f32_to_bf16(v0).x);
                        if (col + 1 < N) st_global_b16(out + 1, f32_to_bf16(v1).x);
                    }
                }
            }
        }
    }
}
