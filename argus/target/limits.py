"""Numeric limits of the sm_90a target (H100 / H200 SXM), each with its source.

Job: one place for the hardware numbers that resource analysis, lowering, codegen and the
agent's legality checks compare against, plus the two small checks whose rules are more than a
number (`check_setmaxnreg`, `check_register_split`). Hardware facts only, no policy.

Invariant kept: every constant names the document it comes from; a number we could not source
is not here. "CUDA Guide" = CUDA C++ Programming Guide, "Compute Capabilities" table for 9.0.
"""

from __future__ import annotations

from collections.abc import Sequence

# ---- the chip ------------------------------------------------------------------------------
# H100 SXM5 and H200 SXM have 132 SMs (NVIDIA H100 whitepaper; H100 PCIe has 114, not a target).
NUM_SMS = 132
COMPUTE_CAPABILITY = (9, 0)
ARCH = "sm_90a"  # the "a" target is required for wgmma (PTX ISA §9.7.15) and setmaxnreg

# ---- threads -------------------------------------------------------------------------------
WARP_SIZE = 32
WARPGROUP_SIZE = 128          # 4 contiguous warps, first warp index % 4 == 0 (PTX ISA §9.7.15.1)
WARPS_PER_WARPGROUP = 4
MAX_THREADS_PER_CTA = 1024    # CUDA Guide, compute capability 9.0
MAX_THREADS_PER_SM = 2048     # CUDA Guide, compute capability 9.0
MAX_WARPS_PER_SM = 64         # CUDA Guide, compute capability 9.0
MAX_CTAS_PER_SM = 32          # CUDA Guide, compute capability 9.0
MAX_GRID_DIM_X = 2**31 - 1    # CUDA Guide, compute capability 9.0
MAX_GRID_DIM_YZ = 65535       # CUDA Guide, compute capability 9.0

# ---- clusters ------------------------------------------------------------------------------
CLUSTER_MAX_PORTABLE = 8       # CUDA Guide "Thread Block Clusters": portable cluster size limit
CLUSTER_MAX_NONPORTABLE = 16   # H100 with cudaFuncAttributeNonPortableClusterSizeAllowed

# ---- registers -----------------------------------------------------------------------------
REGISTERS_PER_SM = 65536       # 64K 32-bit registers per SM (CUDA Guide, cc 9.0)
REGISTERS_PER_CTA = 65536      # maximum registers per thread block (CUDA Guide, cc 9.0)
MAX_REGISTERS_PER_THREAD = 255  # CUDA Guide, cc 9.0
# setmaxnreg.{inc,dec}.sync.aligned.u32 imm: imm in [24, 256] and a multiple of 8
# (PTX ISA, instruction "setmaxnreg"); executed by all threads of a warpgroup.
SETMAXNREG_MIN = 24
SETMAXNREG_MAX = 256
SETMAXNREG_STEP = 8

# ---- shared memory -------------------------------------------------------------------------
SMEM_PER_SM = 233472           # 228 KB per SM (CUDA Guide, cc 9.0)
SMEM_PER_CTA_OPTIN = 232448    # 227 KB with cudaFuncAttributeMaxDynamicSharedMemorySize (cc 9.0)
SMEM_PER_CTA_DEFAULT = 49152   # 48 KB without the opt-in (CUDA Guide)
SMEM_RESERVED_PER_CTA = 1024   # 1 KB reserved per CTA by the system (CUDA Guide, cc 8.x/9.0)
SMEM_BANKS = 32                # 32 banks of 4 bytes (CUDA Guide "Shared Memory")
SMEM_BANK_BYTES = 4
NAMED_BARRIERS = 16            # bar.sync ids 0..15; 0 is __syncthreads (PTX ISA "bar, barrier")

# ---- mbarrier ------------------------------------------------------------------------------
MBARRIER_BYTES = 8             # 64-bit object in shared memory, 8-byte aligned (PTX ISA §9.7.13.15)
MBARRIER_TX_COUNT_MAX = 2**20 - 1   # tx-count range [-(2^20-1), 2^20-1] (PTX ISA §9.7.13.15)

# ---- TMA (cp.async.bulk.tensor; CUDA driver API cuTensorMapEncodeTiled) --------------------
TMA_MAX_RANK = 5
TMA_BOX_DIM_MAX = 256          # every boxDim[i] <= 256
TMA_INNER_BOX_BYTES_MULTIPLE = 16   # boxDim[0] * elementSize must be a multiple of 16 bytes
TMA_GLOBAL_ADDR_ALIGN = 16     # globalAddress 16-byte aligned (32 with interleave)
TMA_GLOBAL_STRIDE_ALIGN = 16   # globalStrides[i] multiples of 16 bytes ...
TMA_GLOBAL_STRIDE_MAX = 2**40  # ... and < 2^40
TMA_SMEM_ALIGN = 128           # shared-memory destination of a non-swizzled box
TENSOR_MAP_BYTES = 128         # sizeof(CUtensorMap)
TENSOR_MAP_ALIGN = 64          # a CUtensorMap must be 64-byte aligned

# ---- wgmma (PTX ISA §9.7.15 "Asynchronous Warpgroup Level Matrix Multiply-Accumulate") -----
WGMMA_M = 64
WGMMA_N_MIN = 8
WGMMA_N_MAX = 256
WGMMA_N_STEP = 8               # dense f16/bf16/tf32/fp8 N: multiples of 8 in [8, 256]
WGMMA_K_BYTES = 32             # K per instruction is 32 bytes of A: k16 bf16/f16, k8 tf32, k32 fp8
WGMMA_K_BY_ELEM_BYTES = {4: 8, 2: 16, 1: 32}
WGMMA_SMEM_ADDR_ALIGN = 16     # descriptor start, LBO and SBO are 16-byte aligned (§9.7.15.5.1.2.2)
# wgmma.wait_group N: the most groups a wait may leave pending (CUTLASS's warpgroup_wait<N>
# asserts N in [0, 7], cute/arch/mma_sm90_gmma.hpp)
WGMMA_WAIT_MAX = 7


def check_setmaxnreg(n: int) -> None:
    """Raise ValueError unless `setmaxnreg` accepts `n` (multiple of 8 in [24, 256])."""
    if not (SETMAXNREG_MIN <= n <= SETMAXNREG_MAX and n % SETMAXNREG_STEP == 0):
        raise ValueError(
            f"setmaxnreg {n}: the register count must be a multiple of {SETMAXNREG_STEP} in "
            f"[{SETMAXNREG_MIN}, {SETMAXNREG_MAX}] (PTX ISA setmaxnreg); fix: round "
            f"to {max(SETMAXNREG_MIN, min(SETMAXNREG_MAX, n - n % SETMAXNREG_STEP))}")


def check_register_split(regs_per_warpgroup: Sequence[int]) -> None:
    """Raise ValueError unless per-warpgroup register counts (after setmaxnreg) are legal and
    their total over the CTA fits the register file (128 threads per warpgroup)."""
    for n in regs_per_warpgroup:
        check_setmaxnreg(n)
    total = sum(n * WARPGROUP_SIZE for n in regs_per_warpgroup)
    if total > REGISTERS_PER_CTA:
        raise ValueError(
            f"register split {list(regs_per_warpgroup)} needs {total} registers, more than the "
            f"{REGISTERS_PER_CTA} of an SM; fix: lower the consumer counts "
            "(e.g. 240/240/24 = 64512)")


def entry_registers(threads: int, ctas_per_sm: int = 1) -> int:
    """Registers per thread at kernel entry for `__launch_bounds__(threads, ctas_per_sm)`:
    the register file shared by `ctas_per_sm` CTAs of `threads` threads, rounded down to the
    allocation unit of 8 (256 for one CTA of 256 threads: the 255 a thread addresses occupy
    256 in the file). setmaxnreg moves a warpgroup's budget up or down from this value (it
    must know which: `.inc` or `.dec`)."""
    return REGISTERS_PER_SM // (threads * ctas_per_sm) // SETMAXNREG_STEP * SETMAXNREG_STEP


def smem_per_sm_share(ctas_per_sm: int) -> int:
    """Dynamic shared memory one CTA may use so that `ctas_per_sm` CTAs fit on one SM: the
    SM's 228 KB less the 1 KB the system reserves per CTA, split evenly (CUDA Guide, cc 9.0;
    one CTA: the 227 KB opt-in limit)."""
    share = SMEM_PER_SM // ctas_per_sm - SMEM_RESERVED_PER_CTA
    return min(share, SMEM_PER_CTA_OPTIN)


def wgmma_n_is_valid(n: int) -> bool:
    """Dense wgmma N for 16-bit, tf32 and fp8 inputs: a multiple of 8 in [8, 256]."""
    return WGMMA_N_MIN <= n <= WGMMA_N_MAX and n % WGMMA_N_STEP == 0
