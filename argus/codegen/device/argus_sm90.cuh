// argus_sm90.cuh: the small device vocabulary that Argus-generated CUDA C++ is written in.
//
// One job: give generated code (and hand-written references) one named, documented inline-PTX
// wrapper per Hopper (sm_90a) instruction it uses, so that generated kernels read as a sequence
// of instructions rather than as asm strings.
//
// Invariants this file keeps:
//   * NVRTC-clean: no #include at all (no system, no CUDA header); compiles with NVRTC and with
//     nvcc, without -I paths, for -arch=sm_90a (wgmma and setmaxnreg need the `a` target).
//   * Everything lives in `namespace ag` and is `__device__ __forceinline__` (no ABI, no calls).
//   * Every wrapper names the PTX ISA instruction it emits and the section that defines it: by
//     number where INVARIANTS.md checked it (PTX ISA 9.x numbering) and always by title,
//     because NVIDIA renumbers sections between versions.
//   * Coordinates for TMA are in elements, innermost dimension first (c0 = column / inner dim),
//     exactly as the PTX tensorCoords operand.
//   * wgmma instructions themselves are NOT here: they need one asm operand per accumulator
//     register, so argus/codegen/wgmma.py generates them per (N, dtypes, operand source).
//
// Asm statements that order memory (barriers, fences, async copies) are `volatile` with a
// "memory" clobber so the compiler does not move ordinary loads/stores across them.

#pragma once

namespace ag {

// ------------------------------------------------------------------------------------------
// Fixed-width integer types (no <cstdint>: NVRTC has no system headers).
// ------------------------------------------------------------------------------------------
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long long int64_t;
typedef unsigned long long uint64_t;

static_assert(sizeof(uint16_t) == 2 && sizeof(uint32_t) == 4 && sizeof(uint64_t) == 8,
              "argus_sm90.cuh: fixed-width typedefs have the wrong size");

// A TMA tensor map: 128 opaque bytes, 64-byte aligned, layout-compatible with CUtensorMap
// (CUDA driver API, cuTensorMapEncodeTiled). Pass it to a kernel as
// `const __grid_constant__ ag::TensorMap tmap` and use `&tmap` (a generic address into the
// kernel parameter space), as PTX ISA "cp.async.bulk.tensor" (Data Movement and
// Conversion Instructions) requires for tensorMap.
struct alignas(64) TensorMap {
    unsigned long long opaque[16];
};
static_assert(sizeof(TensorMap) == 128, "TensorMap must be 128 bytes like CUtensorMap");

// ------------------------------------------------------------------------------------------
// 16-bit and 8-bit floating-point storage types. They are raw bits: arithmetic happens in f32
// after conversion. bf16x2 / f16x2 are two values packed in one 32-bit register, low half =
// the element with the lower index (the order wgmma fragments and memory use).
// ------------------------------------------------------------------------------------------
struct bf16 { uint16_t x; };
struct f16 { uint16_t x; };
struct bf16x2 { uint32_t x; };
struct f16x2 { uint32_t x; };
struct e4m3 { uint8_t x; };

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rn.bf16.f32 (round to nearest
// even; NaN stays NaN).
__device__ __forceinline__ bf16 f32_to_bf16(float v) {
    bf16 r;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.f32.bf16 (exact widening, sm_90).
__device__ __forceinline__ float bf16_to_f32(bf16 v) {
    float r;
    asm("cvt.f32.bf16 %0, %1;" : "=f"(r) : "h"(v.x));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rn.bf16x2.f32 d, a, b puts cvt(a)
// in the UPPER half and cvt(b) in the lower half, so `hi` is passed first. Result: low 16 bits =
// lo, high 16 bits = hi.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// Unpack a bf16x2 register: the low half is element 0. bf16 -> f32 is a 16-bit left shift.
__device__ __forceinline__ float bf16x2_lo(uint32_t v) { return __uint_as_float(v << 16); }
__device__ __forceinline__ float bf16x2_hi(uint32_t v) { return __uint_as_float(v & 0xFFFF0000u); }

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rn.f16.f32.
__device__ __forceinline__ f16 f32_to_f16(float v) {
    f16 r;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.f32.f16 (exact widening).
__device__ __forceinline__ float f16_to_f32(f16 v) {
    float r;
    asm("cvt.f32.f16 %0, %1;" : "=f"(r) : "h"(v.x));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rn.f16x2.f32 d, a, b (cvt(a) in
// the upper half, as for bf16x2).
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rn.satfinite.e4m3x2.f32 d, a, b
// (sm_89+): two f32 to two e4m3 in a 16-bit register, cvt(a) in the upper byte. satfinite clamps
// finite values beyond the e4m3 range to +-448.
__device__ __forceinline__ uint16_t pack_e4m3x2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rn.f16x2.e4m3x2 (exact widening of
// two e4m3 to two f16).
__device__ __forceinline__ uint32_t e4m3x2_to_f16x2(uint16_t v) {
    uint32_t r;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(r) : "h"(v));
    return r;
}

// One f32 to one e4m3 (what a store of an e4m3 tile element keeps): the low byte of the pair
// conversion above, so the same rounding (nearest even) and saturation: finite values and
// infinities beyond +-448 become +-448, NaN stays NaN. This is what cuda_fp8.h's
// __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3) emits on sm_89+ (this header includes no
// CUDA header), what the interpreter's argus.dtypes.round_to computes, and torch 2.13's
// .to(torch.float8_e4m3fn); older torch made |v| > 464 and infinities NaN (pytorch PR 178817).
__device__ __forceinline__ e4m3 f32_to_e4m3(float v) {
    e4m3 r;
    r.x = static_cast<uint8_t>(pack_e4m3x2(v, 0.0f) & 0xFFu);
    return r;
}

// One e4m3 to f32: exact (every e4m3 value, subnormals included, is an f16 value).
__device__ __forceinline__ float e4m3_to_f32(e4m3 v) {
    f16 h;
    h.x = static_cast<uint16_t>(e4m3x2_to_f16x2(v.x) & 0xFFFFu);
    return f16_to_f32(h);
}

// Four f32 to four e4m3 in one 32-bit word, a in the lowest byte (memory order: one 4-byte
// global store of four consecutive elements); conversion as f32_to_e4m3.
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
    return static_cast<uint32_t>(pack_e4m3x2(a, b)) |
           (static_cast<uint32_t>(pack_e4m3x2(c, d)) << 16);
}

// The 8-bit wgmma A fragment from the accumulator pattern (target/fragments.py AccToA8): every
// lane of the warp offers `word`; this lane reads the words of lanes `src` and `src | 1` (two
// lanes of its quad) and keeps bytes `sel` of the pair (PTX ISA "prmt": nibble n picks result
// byte n, 0-3 from the first word, 4-7 from the second). All 32 lanes must take part.
__device__ __forceinline__ uint32_t quad_gather_b16x2(uint32_t word, int src, uint32_t sel) {
    const uint32_t x0 = __shfl_sync(0xFFFFFFFFu, word, src);
    const uint32_t x1 = __shfl_sync(0xFFFFFFFFu, word, src | 1);
    return __byte_perm(x0, x1, sel);
}

// The four e4m3 of a 32-bit word (lowest byte first) widened exactly to f32.
__device__ __forceinline__ void unpack_e4m3x4(uint32_t w, float& a, float& b, float& c,
                                              float& d) {
    const uint32_t lo = e4m3x2_to_f16x2(static_cast<uint16_t>(w & 0xFFFFu));
    const uint32_t hi = e4m3x2_to_f16x2(static_cast<uint16_t>(w >> 16));
    a = f16_to_f32(f16{static_cast<uint16_t>(lo & 0xFFFFu)});
    b = f16_to_f32(f16{static_cast<uint16_t>(lo >> 16)});
    c = f16_to_f32(f16{static_cast<uint16_t>(hi & 0xFFFFu)});
    d = f16_to_f32(f16{static_cast<uint16_t>(hi >> 16)});
}

// ------------------------------------------------------------------------------------------
// Math. NVRTC also provides the CUDA math API without includes (expf, logf, erff, tanhf,
// sqrtf, fmaxf, rsqrtf, __expf ...); these wrappers pin the exact SFU instruction instead.
// ------------------------------------------------------------------------------------------

// IEEE special values as bit patterns: NVRTC without headers has no INFINITY / NAN / FLT_MAX
// macros and no __builtin_huge_valf (softmax needs -inf to start its running max).
__device__ __forceinline__ float inf_f32() { return __int_as_float(0x7F800000); }
__device__ __forceinline__ float neg_inf_f32() { return __uint_as_float(0xFF800000u); }
__device__ __forceinline__ float nan_f32() { return __int_as_float(0x7FC00000); }
__device__ __forceinline__ float max_f32() { return __int_as_float(0x7F7FFFFF); }

// PTX ISA "max" / "min" with .NaN (sm_80+): a NaN operand gives NaN, like torch.maximum and
// the interpreter's numpy; fmaxf / fminf would return the other operand.
__device__ __forceinline__ float max_nan(float a, float b) {
    float r;
    asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float min_nan(float a, float b) {
    float r;
    asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// PTX ISA "ex2" (Floating Point Instructions): ex2.approx.ftz.f32, 2^x on the SFU (max rel. error
// 2^-22, ftz).
__device__ __forceinline__ float exp2_approx(float x) {
    float r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// 2^x on the FMA pipe instead of the SFU (FlashAttention-4's partial emulation of ex2): the
// sequence, constants and error bound of argus/target/exp2_emulation.py (its tests check these
// literals). Clamp to [-127, 128] keeping NaN (max/min.NaN); add.rm of 1.5 * 2^23 + 127 rounds
// to floor(x) and leaves 127 + floor(x) in the low bits; f = x - floor(x) in [0, 1]; p ~ 2^f by
// Horner (p(0) = 1, p(1) = 2); times 2^floor(x) made by a shift (0 for floor -127: the SFU's
// ftz; +inf for 128). NaN, +-inf, ftz as ex2.approx.ftz.f32; relative error <= 1.05e-4.
__device__ __forceinline__ float exp2_emu(float x) {
    float r;
    asm("{\n\t"
        ".reg .f32 c, t, n, f, p;\n\t"
        ".reg .b32 e;\n\t"
        "max.NaN.f32 c, %1, 0fC2FE0000;\n\t"
        "min.NaN.f32 c, c, 0f43000000;\n\t"
        "add.rm.ftz.f32 t, c, 0f4B40007F;\n\t"
        "sub.rn.ftz.f32 n, t, 0f4B40007F;\n\t"
        "sub.rn.ftz.f32 f, c, n;\n\t"
        "fma.rn.ftz.f32 p, f, 0f3DA04AF4, 0f3E67BD34;\n\t"
        "fma.rn.ftz.f32 p, p, f, 0f3F320754;\n\t"
        "fma.rn.ftz.f32 p, p, f, 0f3F800000;\n\t"
        "shl.b32 e, t, 23;\n\t"
        "mul.rn.ftz.f32 %0, p, e;\n\t"
        "}"
        : "=f"(r) : "f"(x));
    return r;
}

// PTX ISA "cvt" (Data Movement and Conversion Instructions): cvt.rna.tf32.f32, an f32 rounded
// to tf32 (10 mantissa bits, to nearest, ties away from zero), returned as the f32 it is. A
// tf32 wgmma reads an unrounded f32 operand by dropping its 13 low bits (toward zero).
__device__ __forceinline__ float round_tf32(float x) {
    unsigned r;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r);
}

// e^x = 2^(x * log2(e)): one FMUL + one ex2 (what softmax uses, with the scale folded in).
__device__ __forceinline__ float exp_fast(float x) { return exp2_approx(x * 1.4426950408889634f); }

// PTX ISA "lg2" (Floating Point Instructions): lg2.approx.ftz.f32, log2(x) on the SFU.
__device__ __forceinline__ float log2_approx(float x) {
    float r;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// ln(x) = log2(x) * ln(2).
__device__ __forceinline__ float log_fast(float x) { return log2_approx(x) * 0.6931471805599453f; }

// PTX ISA "tanh" (Floating Point Instructions): tanh.approx.f32 (sm_75+), relative error about
// 2^-11 (not for accuracy-critical code).
__device__ __forceinline__ float tanh_approx(float x) {
    float r;
    asm("tanh.approx.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// PTX ISA "rcp" (Floating Point Instructions): rcp.approx.ftz.f32, 1/x on the SFU.
__device__ __forceinline__ float rcp_approx(float x) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// PTX ISA "rsqrt" (Floating Point Instructions): rsqrt.approx.ftz.f32, 1/sqrt(x) on the SFU.
__device__ __forceinline__ float rsqrt_approx(float x) {
    float r;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// PTX ISA "sqrt" (Floating Point Instructions): sqrt.approx.ftz.f32.
__device__ __forceinline__ float sqrt_approx(float x) {
    float r;
    asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
}

// PTX ISA "max" / "min" (Floating Point Instructions): max.f32 / min.f32 return the non-NaN operand
// if one is NaN.
__device__ __forceinline__ float fmax(float a, float b) {
    float r;
    asm("max.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float fmin(float a, float b) {
    float r;
    asm("min.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}

// ------------------------------------------------------------------------------------------
// Shared-memory addresses and thread identity.
// ------------------------------------------------------------------------------------------

// PTX ISA "cvta" (Data Movement and Conversion Instructions): cvta.to.shared.u64, generic -> 32-bit
// shared-window address. Every shared-memory operand of mbarrier / cp.async.bulk / ldmatrix /
// stmatrix / wgmma descriptors below takes this. Through the intrinsic, not inline asm: the
// compiler sees the conversion, so `smem + offset` (smem derived from the extern __shared__
// array) folds to the array's shared address plus the offset, a 32-bit add. As an opaque asm
// block it was redone per use inside loops (S2UR SR_CgaCtaId / SR_SWINHI, 64-bit generic
// pointer arithmetic): 17 of the 202 non-FFMA, non-QGMMA SASS instructions per K block of the
// split 128 x 256 fp8 kernel (scripts/sass_fp8_k_loop.py).
__device__ __forceinline__ uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// PTX ISA "Special Registers": %laneid.
__device__ __forceinline__ uint32_t lane_id() {
    uint32_t r;
    asm("mov.u32 %0, %%laneid;" : "=r"(r));
    return r;
}

// Warp index in the CTA. The shuffle from lane 0 tells the compiler the value is warp-uniform,
// so branches on it stay uniform (convergence matters for the .sync.aligned instructions).
__device__ __forceinline__ uint32_t warp_id() {
    return __shfl_sync(0xFFFFFFFFu, threadIdx.x / 32u, 0);
}

// Warpgroup index in the CTA (4 consecutive warps = 128 threads, PTX ISA §9.7.15 "Warpgroup").
__device__ __forceinline__ uint32_t warpgroup_id() {
    return __shfl_sync(0xFFFFFFFFu, threadIdx.x / 128u, 0);
}

// Warp index inside its warpgroup (0..3): `w` in the wgmma fragment formulas.
__device__ __forceinline__ uint32_t warp_in_warpgroup() { return warp_id() % 4u; }

// PTX ISA "elect.sync" (Parallel Synchronization and Communication): true in exactly one active
// lane of the warp (the leader).
__device__ __forceinline__ bool elect_one_sync() {
    uint32_t pred = 0;
    asm volatile(
        "{\n\t.reg .b32 rx;\n\t.reg .pred px;\n\t"
        "elect.sync rx|px, %1;\n\t"
        "selp.b32 %0, 1, 0, px;\n\t}"
        : "=r"(pred) : "r"(0xFFFFFFFFu));
    return pred != 0;
}

// PTX ISA "bar / barrier" (Parallel Synchronization and Communication): bar.sync id, n. Named
// barrier `id` (1..15; 0 is __syncthreads) for `nthreads` threads, a multiple of 32, equal at every
// participant.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t nthreads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(nthreads) : "memory");
}

// PTX ISA "bar / barrier" (Parallel Synchronization and Communication): bar.arrive id, n (signal
// without waiting; producer side).
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t nthreads) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(nthreads) : "memory");
}

// PTX ISA "shfl.sync" (Data Movement and Conversion Instructions): butterfly exchange of a float
// across lanes (all 32 lanes).
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
    return __shfl_xor_sync(0xFFFFFFFFu, v, lane_mask);
}

// ------------------------------------------------------------------------------------------
// mbarrier (PTX ISA §9.7.13.15 "mbarrier"): a 64-bit shared-memory object with a phase bit, a
// pending-arrival count and a transaction (byte) count.
// ------------------------------------------------------------------------------------------

// PTX ISA §9.7.13.15 "mbarrier.init": expected arrivals per phase = count.
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(count)
                 : "memory");
}

// PTX ISA "membar / fence" (fence.mbarrier_init): makes mbarrier.init (generic proxy) visible to
// the async proxy / other CTAs of the cluster. Follow it with __syncthreads or a cluster barrier.
__device__ __forceinline__ void fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// PTX ISA "membar / fence" (proxy fence): fence.proxy.async.shared::cta. Orders this thread's
// generic shared-memory writes (st.shared, stmatrix) before later async-proxy reads (TMA store,
// wgmma).
__device__ __forceinline__ void fence_view_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// PTX ISA §9.7.13.15 "mbarrier.arrive": arrive.expect_tx adds `bytes` to the tx-count, then
// arrives once. `bytes` must equal all bytes TMA will complete on this barrier this phase.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// PTX ISA §9.7.13.15 "mbarrier.expect_tx": add to the tx-count without arriving.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
                 :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}

// PTX ISA §9.7.13.15 "mbarrier.arrive": one arrival (release semantics at CTA scope).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(smem_u32(bar)) : "memory");
}

// Arrive on the barrier at the same smem offset in CTA `cta_id` of the cluster: PTX ISA "mapa"
// (map a shared::cta address into the shared::cluster window) + mbarrier.arrive.shared::cluster
// with the default (.release.cta) semantics. The arrivals release pipeline slots whose readers
// are wgmma groups already retired by wgmma.wait_group, so no cluster-scope release is needed
// (CUTLASS's ClusterBarrier::arrive(cta_id) does the same); the .release.cluster form compiles
// to a MEMBAR that stalled every consumer step (ncu: "Stall Membar", cluster GEMM 1.5x slower).
__device__ __forceinline__ void mbar_arrive_cluster(uint64_t* bar, uint32_t cta_id) {
    asm volatile(
        "{\n\t.reg .b32 remote;\n\t"
        "mapa.shared::cluster.u32 remote, %0, %1;\n\t"
        "mbarrier.arrive.shared::cluster.b64 _, [remote];\n\t}"
        :: "r"(smem_u32(bar)), "r"(cta_id) : "memory");
}

// PTX ISA §9.7.13.15 "mbarrier.test_wait / try_wait": true once the phase with parity `parity`
// has completed (the current phase's parity differs). One potentially blocking probe.
__device__ __forceinline__ bool mbar_try_wait(uint64_t* bar, uint32_t parity) {
    uint32_t done;
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.b32 %0, 1, 0, p;\n\t}"
        : "=r"(done) : "r"(smem_u32(bar)), "r"(parity) : "memory");
    return done != 0;
}

// Block until the phase with parity `parity` has completed (loop on try_wait.parity, which
// itself suspends for a hardware time limit). Only one bit of phase history exists, so the
// protocol must keep waiters at most one phase behind (HOPPER.md §2.4 hazard 1).
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}

// ------------------------------------------------------------------------------------------
// TMA: PTX ISA "cp.async.bulk.tensor" (tensor copies between global and shared memory
// described by a TensorMap). Loads complete bytes on an mbarrier; stores use bulk groups.
// ------------------------------------------------------------------------------------------

__device__ __forceinline__ uint64_t tmap_u64(const TensorMap* tmap) {
    return reinterpret_cast<uint64_t>(tmap);
}

// PTX ISA "prefetch" (prefetch.tensormap): pull the descriptor into the cache before first use.
__device__ __forceinline__ void prefetch_tensormap(const TensorMap* tmap) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(tmap_u64(tmap)) : "memory");
}

// cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes
__device__ __forceinline__ void tma_load_2d(const TensorMap* tmap, void* smem_dst, uint64_t* bar,
                                            int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4}], [%2];"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1)
        : "memory");
}

// cp.async.bulk.tensor.3d... (e.g. [E][N][K] expert weights: c2 = expert index).
__device__ __forceinline__ void tma_load_3d(const TensorMap* tmap, void* smem_dst, uint64_t* bar,
                                            int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5}], [%2];"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1),
           "r"(c2)
        : "memory");
}

// Ranks 1, 4 and 5 (TMA tensors have 1 to 5 dims), same form as tma_load_2d.
__device__ __forceinline__ void tma_load_1d(const TensorMap* tmap, void* smem_dst, uint64_t* bar,
                                            int c0) {
    asm volatile(
        "cp.async.bulk.tensor.1d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3}], [%2];"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0)
        : "memory");
}
__device__ __forceinline__ void tma_load_4d(const TensorMap* tmap, void* smem_dst, uint64_t* bar,
                                            int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6}], [%2];"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1),
           "r"(c2), "r"(c3)
        : "memory");
}
__device__ __forceinline__ void tma_load_5d(const TensorMap* tmap, void* smem_dst, uint64_t* bar,
                                            int c0, int c1, int c2, int c3, int c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, {%3, %4, %5, %6, %7}], [%2];"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "r"(c0), "r"(c1),
           "r"(c2), "r"(c3), "r"(c4)
        : "memory");
}

// cp.async.bulk.prefetch.tensor.Nd.L2.global.tile: the box at the coordinates into L2, no
// shared memory and no barrier (a hint; the tensor map is the loads' own). Ranks 1 to 5.
__device__ __forceinline__ void tma_prefetch_1d(const TensorMap* tmap, int c0) {
    asm volatile("cp.async.bulk.prefetch.tensor.1d.L2.global.tile [%0, {%1}];"
                 :: "l"(tmap_u64(tmap)), "r"(c0) : "memory");
}
__device__ __forceinline__ void tma_prefetch_2d(const TensorMap* tmap, int c0, int c1) {
    asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
                 :: "l"(tmap_u64(tmap)), "r"(c0), "r"(c1) : "memory");
}
__device__ __forceinline__ void tma_prefetch_3d(const TensorMap* tmap, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];"
                 :: "l"(tmap_u64(tmap)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}
__device__ __forceinline__ void tma_prefetch_4d(const TensorMap* tmap, int c0, int c1, int c2,
                                                int c3) {
    asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];"
                 :: "l"(tmap_u64(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3) : "memory");
}
__device__ __forceinline__ void tma_prefetch_5d(const TensorMap* tmap, int c0, int c1, int c2,
                                                int c3, int c4) {
    asm volatile("cp.async.bulk.prefetch.tensor.5d.L2.global.tile [%0, {%1, %2, %3, %4, %5}];"
                 :: "l"(tmap_u64(tmap)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4)
                 : "memory");
}

// .multicast::cluster: the box lands at the same smem offset (and completes bytes on the
// barrier at the same offset) in every CTA of the cluster whose bit is set in cta_mask.
__device__ __forceinline__ void tma_load_2d_multicast(const TensorMap* tmap, void* smem_dst,
                                                      uint64_t* bar, int c0, int c1,
                                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5}], [%2], %3;"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "h"(cta_mask),
           "r"(c0), "r"(c1)
        : "memory");
}

// The 3-d form of tma_load_2d_multicast (batched operands: c2 = batch index).
__device__ __forceinline__ void tma_load_3d_multicast(const TensorMap* tmap, void* smem_dst,
                                                      uint64_t* bar, int c0, int c1, int c2,
                                                      uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5, %6}], [%2], %3;"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "h"(cta_mask),
           "r"(c0), "r"(c1), "r"(c2)
        : "memory");
}

// The 4-d form (e.g. MoE gate/up weights read as [E, 2, I, H]: c3 = expert, c2 = plane).
__device__ __forceinline__ void tma_load_4d_multicast(const TensorMap* tmap, void* smem_dst,
                                                      uint64_t* bar, int c0, int c1, int c2,
                                                      int c3, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster [%0], [%1, {%4, %5, %6, %7}], [%2], %3;"
        :: "r"(smem_u32(smem_dst)), "l"(tmap_u64(tmap)), "r"(smem_u32(bar)), "h"(cta_mask),
           "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}

// cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group. The source smem must have been
// made visible to the async proxy (fence_view_async_shared + barrier) by its writers, and
// must not be overwritten before tma_store_wait_read (HOPPER.md §2.4 hazards 5 and 6).
__device__ __forceinline__ void tma_store_2d(const TensorMap* tmap, const void* smem_src,
                                             int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%2, %3}], [%1];"
        :: "l"(tmap_u64(tmap)), "r"(smem_u32(smem_src)), "r"(c0), "r"(c1) : "memory");
}

__device__ __forceinline__ void tma_store_3d(const TensorMap* tmap, const void* smem_src,
                                             int c0, int c1, int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];"
        :: "l"(tmap_u64(tmap)), "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2) : "memory");
}

__device__ __forceinline__ void tma_store_1d(const TensorMap* tmap, const void* smem_src,
                                             int c0) {
    asm volatile(
        "cp.async.bulk.tensor.1d.global.shared::cta.tile.bulk_group [%0, {%2}], [%1];"
        :: "l"(tmap_u64(tmap)), "r"(smem_u32(smem_src)), "r"(c0) : "memory");
}
__device__ __forceinline__ void tma_store_4d(const TensorMap* tmap, const void* smem_src,
                                             int c0, int c1, int c2, int c3) {
    asm volatile(
        "cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4, %5}], [%1];"
        :: "l"(tmap_u64(tmap)), "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
        : "memory");
}
__device__ __forceinline__ void tma_store_5d(const TensorMap* tmap, const void* smem_src,
                                             int c0, int c1, int c2, int c3, int c4) {
    asm volatile(
        "cp.async.bulk.tensor.5d.global.shared::cta.tile.bulk_group"
        " [%0, {%2, %3, %4, %5, %6}], [%1];"
        :: "l"(tmap_u64(tmap)), "r"(smem_u32(smem_src)), "r"(c0), "r"(c1), "r"(c2), "r"(c3),
           "r"(c4)
        : "memory");
}

// PTX ISA "cp.reduce.async.bulk.tensor": global[box] += smem (split-K, scatter-add).
__device__ __forceinline__ void tma_reduce_add_2d(const TensorMap* tmap, const void* smem_src,
                                                  int c0, int c1) {
    asm volatile(
        "cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group"
        " [%0, {%2, %3}], [%1];"
        :: "l"(tmap_u64(tmap)), "r"(smem_u32(smem_src)), "r"(c0), "r"(c1) : "memory");
}

// PTX ISA "cp.async.bulk.commit_group": close the current bulk group of TMA stores.
__device__ __forceinline__ void tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// PTX ISA "cp.async.bulk.wait_group" (.read N): at most N groups still READ their smem
// source; after it the source buffers of older groups may be overwritten.
template <int N>
__device__ __forceinline__ void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// PTX ISA "cp.async.bulk.wait_group" N: at most N groups pending (writes to global complete).
template <int N>
__device__ __forceinline__ void tma_store_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

// ------------------------------------------------------------------------------------------
// wgmma fixed parts (PTX ISA §9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate").
// The mma_async wrappers themselves are generated by argus/codegen/wgmma.py.
// ------------------------------------------------------------------------------------------

// PTX ISA §9.7.15 "wgmma.fence": required before the first wgmma of a batch and after any
// other instruction wrote the accumulator or A-fragment registers (HOPPER.md hazard 7).
__device__ __forceinline__ void wgmma_fence() {
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}

// PTX ISA §9.7.15 "wgmma.commit_group": close the group of wgmma issued since the last commit.
__device__ __forceinline__ void wgmma_commit() {
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}

// PTX ISA §9.7.15 "wgmma.wait_group" N: at most N committed groups still in flight. Their smem
// operands and accumulator registers must not be touched until a wait covers them (hazard 8).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}
// The same wait kept behind the work before it (WgmmaWait.pinned). ptxas (NVRTC 13.0) moves a
// wgmma.wait_group to the top of its basic block, above independent work the wait was placed
// after: FlashAttention's softmax while P V runs kept no MUFU.EX2 between the P V HGMMA and its
// WARPGROUP.DEPBAR (scripts/sass_attention_overlap.py). A branch ends the block before the
// wait; its condition must be one ptxas cannot decide (a compare on %dynamic_smem_size was
// folded away, its bound is known), so it reads %clock, and the branch, taken once in 2^32
// visits, only sleeps a nanosecond: a clock read, a compare and a uniform branch.
template <int N>
__device__ __forceinline__ void wgmma_wait_pinned() {
    uint32_t clock;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(clock));
    if (clock == 0xffffffffu) asm volatile("nanosleep.u32 1;");
    wgmma_wait<N>();
}

// wgmma.fence kept behind the work before it (Wgmma.pinned), by the branch of
// wgmma_wait_pinned: ptxas (NVRTC 13.0) hoists a wgmma issue above independent register work
// in its basic block; the split fp8 promotion's second column half rose into the first half's
// FFMAs, both 64-register partials were live and the 128 x 256 consumer spilled
// (scripts/sass_fp8_k_loop.py).
__device__ __forceinline__ void wgmma_fence_pinned() {
    uint32_t clock;
    asm volatile("mov.u32 %0, %%clock;" : "=r"(clock));
    if (clock == 0xffffffffu) asm volatile("nanosleep.u32 1;");
    wgmma_fence();
}

// Compiler-only fence on accumulator registers: the wait above names no registers, so without
// this the compiler could move reads/writes of `d` across it. Costs no instruction.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r) :: "memory"); }
// The wgmma A fragment registers (ra[k], fenced before the wgmma and after its wait) where
// lowering chose the copy (WgmmaFence.a_copy: a fragment defined outside the loop issuing the
// wgmma): a real copy (identity prmt), not an empty asm. ptxas (NVRTC 13.0) miscompiles a register A fragment
// that is loop-invariant (ping-pong attention's Q, packed once before the KV loop): it coalesces
// the per-iteration copy with the hoisted registers, reuses them for P after the first wgmma
// retires and never restores them, so from the second KV block on S = Q K^T read P (wrong
// results at head dim 128; the SASS has no write of the A registers between the loop head and
// the wgmma). An instruction that defines the A registers inside the loop cannot be coalesced
// away: every wgmma reads registers written right before it (one PRMT per register; after the
// wait the copy is dead and ptxas drops it). tests/unit/test_wgmma_register_a_ptx.py checks it.
__device__ __forceinline__ void fence_operand(uint32_t& r) {
    asm volatile("prmt.b32 %0, %0, 0, 0x3210;" : "+r"(r) :: "memory");
}
// The pin alone (CUTLASS's warpgroup_fence_operand): no instruction, the registers live and
// unmoved across it. Lowering chooses it (WgmmaFence.a_copy false, lower/sync.py _a_copy) for
// an A fragment the loop issuing the wgmma defines before each issue (attention's P), where
// the copy above cost one PRMT a register per issue.
__device__ __forceinline__ void pin_operand(uint32_t& r) { asm volatile("" : "+r"(r) :: "memory"); }
template <int N>
__device__ __forceinline__ void fence_operands(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) fence_operand(d[i]);
}
template <int N>
__device__ __forceinline__ void fence_operands(uint32_t (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) fence_operand(d[i]);
}
template <int N>
__device__ __forceinline__ void pin_operands(uint32_t (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) pin_operand(d[i]);
}

// PTX ISA §9.7.15.5.1.2.2 "Matrix Descriptor Format" (INVARIANTS.md §2.2):
//   bits  0-13 start address >> 4      bits 16-29 leading byte offset (LBO) >> 4
//   bits 32-45 stride byte offset (SBO) >> 4      bits 49-51 base offset (0: buffer aligned to
//   the swizzle repeat, 1024 B for 128B)      bits 62-63 swizzle: 0 none, 1 128B, 2 64B, 3 32B.
// Note the swizzle code is inverted relative to CU_TENSOR_MAP_SWIZZLE_* (128B = 3 there).
// K-major 128B-swizzled bf16 tiles with 128-byte rows: LBO unused (16), SBO = 1024 (8 rows).
__device__ __forceinline__ uint64_t make_smem_desc(const void* smem_ptr, int swizzle_bytes,
                                                   uint32_t lbo_bytes, uint32_t sbo_bytes) {
    const uint64_t swizzle_code = swizzle_bytes == 128 ? 1ull
                                : swizzle_bytes == 64  ? 2ull
                                : swizzle_bytes == 32  ? 3ull
                                                       : 0ull;
    uint64_t desc = 0;
    desc |= (uint64_t)((smem_u32(smem_ptr) & 0x3FFFFu) >> 4);
    desc |= (uint64_t)((lbo_bytes & 0x3FFFFu) >> 4) << 16;
    desc |= (uint64_t)((sbo_bytes & 0x3FFFFu) >> 4) << 32;
    desc |= swizzle_code << 62;
    return desc;
}

// Advance the start-address field by `bytes` (a multiple of 16), e.g. 32 B per k16 step inside
// a 128B swizzle atom: the hardware applies the swizzle XOR to the absolute address, so moving
// the start inside the atom is correct (INVARIANTS.md §2.2). No carry out of bits 0-13 as long
// as the operand stays inside the 256 KB shared window.
__device__ __forceinline__ uint64_t desc_advance(uint64_t desc, uint32_t bytes) {
    return desc + (uint64_t)(bytes >> 4);
}

// ------------------------------------------------------------------------------------------
// Register reallocation between warpgroups: PTX ISA "setmaxnreg" (Miscellaneous Instructions;
// sm_90a). Needs a register cap at kernel entry (__launch_bounds__(threads, 1)); N a multiple of 8
// in [24, 256]; executed by all threads of the warpgroup; producers dec before consumers inc.
// ------------------------------------------------------------------------------------------
template <int N>
__device__ __forceinline__ void setmaxnreg_inc() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: N must be 8k in [24, 256]");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N));
}
template <int N>
__device__ __forceinline__ void setmaxnreg_dec() {
    static_assert(N % 8 == 0 && N >= 24 && N <= 256, "setmaxnreg: N must be 8k in [24, 256]");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N));
}

// ------------------------------------------------------------------------------------------
// ldmatrix / stmatrix (PTX ISA §9.7.14.5.15 "ldmatrix", §9.7.14.5.16 "stmatrix";
// INVARIANTS.md §2.4).
// x4: lanes 8j..8j+7 give the 8 row addresses (16-byte rows) of matrix j; register j of lane l
// holds row l/4, columns 2(l%4), 2(l%4)+1 of matrix j (.trans: the transposed matrix).
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ void ldmatrix_x4(const void* smem_row, uint32_t& r0, uint32_t& r1,
                                            uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(smem_row)) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_trans(const void* smem_row, uint32_t& r0,
                                                  uint32_t& r1, uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(smem_u32(smem_row)) : "memory");
}
__device__ __forceinline__ void stmatrix_x4(void* smem_row, uint32_t r0, uint32_t r1, uint32_t r2,
                                            uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(smem_u32(smem_row)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(void* smem_row, uint32_t r0, uint32_t r1,
                                                  uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(smem_u32(smem_row)), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}

// ------------------------------------------------------------------------------------------
// Clusters (PTX ISA "barrier.cluster"; special registers %cluster_ctarank, %cluster_nctarank).
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
__device__ __forceinline__ uint32_t cluster_nctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// barrier.cluster.arrive has release semantics by default: prior writes (e.g. mbarrier.init)
// become visible to cluster peers that complete the matching wait.
__device__ __forceinline__ void cluster_arrive() {
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_arrive_relaxed() {
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void cluster_sync() {
    cluster_arrive();
    cluster_wait();
}

// ------------------------------------------------------------------------------------------
// Global stores of register pairs (PTX ISA "st"): one 32-bit or 64-bit transaction.
// The address must be 4-byte (bf16x2) / 8-byte (f32x2) aligned.
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ void st_global_b32(void* ptr, uint32_t v) {
    asm volatile("st.global.b32 [%0], %1;" :: "l"(ptr), "r"(v) : "memory");
}
__device__ __forceinline__ void st_global_f32x2(void* ptr, float a, float b) {
    asm volatile("st.global.v2.f32 [%0], {%1, %2};" :: "l"(ptr), "f"(a), "f"(b) : "memory");
}
__device__ __forceinline__ void st_global_b16(void* ptr, uint16_t v) {
    asm volatile("st.global.b16 [%0], %1;" :: "l"(ptr), "h"(v) : "memory");
}

// ------------------------------------------------------------------------------------------
// Vector global loads and stores of one chunk of a blocked register tile: one 4-, 8- or
// 16-byte access per thread (PTX ISA "ld" / "st", Data Movement and Conversion Instructions,
// the .v2 / .v4 vector forms), so a warp moves up to 512 contiguous bytes per instruction.
// The address must be aligned to the access size (a misaligned vector access faults): the
// generated code checks aligned_to at run time before it takes the vector path, except where
// a launch-specialized variant has proven the address aligned (analysis/alignment.py).
// 16-bit dtypes move packed pairs as 32-bit words (low half = lower index, as in memory).
// Written as C++ accesses of the built-in vector types rather than inline PTX, on purpose: the
// compiler then knows which memory they read and write, so they stay ordered against barriers
// and other stores without a "memory" clobber, and a load from a __restrict__ tensor that the
// kernel never writes becomes ld.global.nc.v4 (the read-only path). Default cache operators, as
// Triton and torch emit for elementwise kernels. The PTX each one compiles to is named.
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ bool aligned_to(const void* ptr, unsigned bytes) {
    return (reinterpret_cast<unsigned long long>(ptr) & (bytes - 1u)) == 0;
}
// ld.global[.nc].v4.f32 / .v2.f32
__device__ __forceinline__ void ld_global_f32x4(const void* ptr, float& a, float& b, float& c,
                                                float& d) {
    const float4 v = *reinterpret_cast<const float4*>(ptr);
    a = v.x; b = v.y; c = v.z; d = v.w;
}
__device__ __forceinline__ void ld_global_f32x2(const void* ptr, float& a, float& b) {
    const float2 v = *reinterpret_cast<const float2*>(ptr);
    a = v.x; b = v.y;
}
// ld.global[.nc].v4.u32 / .v2.u32 / .u32
__device__ __forceinline__ void ld_global_b32x4(const void* ptr, uint32_t& a, uint32_t& b,
                                                uint32_t& c, uint32_t& d) {
    const uint4 v = *reinterpret_cast<const uint4*>(ptr);
    a = v.x; b = v.y; c = v.z; d = v.w;
}
__device__ __forceinline__ void ld_global_b32x2(const void* ptr, uint32_t& a, uint32_t& b) {
    const uint2 v = *reinterpret_cast<const uint2*>(ptr);
    a = v.x; b = v.y;
}
__device__ __forceinline__ uint32_t ld_global_b32(const void* ptr) {
    return *reinterpret_cast<const uint32_t*>(ptr);
}
// st.global.v4.f32 / .v4.u32 / .v2.u32 (st_global_f32x2 and st_global_b32 above are the
// 8-byte f32 and 4-byte forms)
__device__ __forceinline__ void st_global_f32x4(void* ptr, float a, float b, float c, float d) {
    *reinterpret_cast<float4*>(ptr) = float4{a, b, c, d};
}
__device__ __forceinline__ void st_global_b32x4(void* ptr, uint32_t a, uint32_t b, uint32_t c,
                                                uint32_t d) {
    *reinterpret_cast<uint4*>(ptr) = uint4{a, b, c, d};
}
__device__ __forceinline__ void st_global_b32x2(void* ptr, uint32_t a, uint32_t b) {
    *reinterpret_cast<uint2*>(ptr) = uint2{a, b};
}

// ------------------------------------------------------------------------------------------
// Swizzled shared-memory addressing for generated ldmatrix/stmatrix (INVARIANTS.md §2.3):
// TMA and wgmma apply Swizzle<B,4,3> to the ABSOLUTE shared address, so a generic-proxy access
// to a swizzled buffer must do the same: the 16-byte chunk bits [4, 4+B) are XORed with bits
// [7, 7+B), B = log2(swizzle_bytes / 16).
// ------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t swizzle_smem_addr(uint32_t addr, int swizzle_bytes) {
    const uint32_t mask = swizzle_bytes == 128 ? 0x70u : swizzle_bytes == 64 ? 0x30u
                        : swizzle_bytes == 32 ? 0x10u : 0u;
    return addr ^ ((addr >> 3) & mask);
}

// stmatrix / ldmatrix .x4 on a shared-window address (PTX ISA §9.7.14.5.15/16).
__device__ __forceinline__ void stmatrix_x4_addr(uint32_t addr, uint32_t r0, uint32_t r1,
                                                 uint32_t r2, uint32_t r3) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(r0), "r"(r1), "r"(r2), "r"(r3) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4_addr(uint32_t addr, uint32_t& r0, uint32_t& r1,
                                                 uint32_t& r2, uint32_t& r3) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3) : "r"(addr) : "memory");
}
__device__ __forceinline__ float f16x2_lo(uint32_t v) {
    return f16_to_f32(f16{(uint16_t)(v & 0xFFFFu)});
}
__device__ __forceinline__ float f16x2_hi(uint32_t v) {
    return f16_to_f32(f16{(uint16_t)(v >> 16)});
}

// PTX ISA "atom" (Parallel Synchronization and Communication Instructions) with .acq_rel .gpu
// semantics: atom.acq_rel.gpu.global.inc.u32 / .add.u32. ir.ops.AtomicFetchAdd runs its atomic
// in one thread of the group between two group barriers; the memory model's release pattern
// needs the release in the thread that writes the flag, after the barrier that orders the
// group's earlier stores (the others' own fences precede no strong write of theirs), and its
// acquire pattern needs the acquire in the thread that read the flag, before the barrier that
// hands the answer on: an acq_rel atomic is both (CUTLASS's red.release / ld.acquire + barrier).
__device__ __forceinline__ uint32_t atom_inc_acq_rel_gpu(uint32_t* ptr, uint32_t bound) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.inc.u32 %0, [%1], %2;"
                 : "=r"(old) : "l"(ptr), "r"(bound) : "memory");
    return old;
}
__device__ __forceinline__ uint32_t atom_add_acq_rel_gpu(uint32_t* ptr, uint32_t value) {
    uint32_t old;
    asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;"
                 : "=r"(old) : "l"(ptr), "r"(value) : "memory");
    return old;
}

}  // namespace ag
