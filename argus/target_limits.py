"""sm_90a limits the lowering passes check against (a stand-in until argus.target lands)."""

SMEM_PER_CTA_OPTIN = 232448      # bytes, CUDA C Programming Guide, compute capability 9.0
REGISTERS_PER_SM = 65536         # 32-bit registers
MAX_THREADS_PER_CTA = 1024
