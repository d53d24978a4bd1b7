"""Pass: choose the shared-memory matrix descriptors of every wgmma.

For a K-major operand in a 128/64/32-byte swizzled buffer whose rows are exactly one swizzle
span (the only layout `ag.smem` admits for wgmma), PTX ISA "Matrix Descriptor Format" and the
canonical layouts of INVARIANTS.md §2.2 give: LBO unused (encoded as 16), SBO = 8 rows x span
(the distance between 8-row core-matrix groups), and each instruction's K step (k16 for 16-bit
inputs, k8 for tf32, k32 for fp8: 32 bytes each way) moves the start address by 32 bytes inside the
swizzle atom (the XOR applies to the absolute address, so this stays correct). An MN-major B
(`trans_b`, 16-bit only) is read as column atoms, see `mn_major_descriptor_fields`; so is
an MN-major A (`trans_a`): the canonical layouts of A and B are the same with M for N.
"""

from __future__ import annotations

from argus.errors import CompileError
from argus.ir import ops as O
from argus.ir.core import Kernel
from argus.ir.rewrite import Rules
from argus.target.limits import WGMMA_K_BYTES


def descriptor_fields(view_type, loc) -> tuple[int, int, int, int]:
    swizzle = view_type.swizzle
    if swizzle == 0:
        raise CompileError("wgmma reads shared memory through a swizzled canonical layout; this "
                           "buffer has no swizzle", loc,
                           fix="allocate it with ag.smem(..., swizzle=128) and 64 bf16 per row")
    row_bytes = view_type.shape[1] * view_type.dtype.bytes
    if row_bytes != swizzle:
        raise CompileError(f"wgmma operand rows are {row_bytes} B but the swizzle span is "
                           f"{swizzle} B", loc)
    # one instruction covers 32 bytes of K (k16 bf16/f16, k8 tf32, k32 e4m3): the next one
    # starts there
    return (swizzle, 16, 8 * swizzle, WGMMA_K_BYTES)


def mn_major_descriptor_fields(view_type, k: int, loc) -> tuple[int, int, int, int]:
    """MN-major B in column atoms of [K rows][span] (PTX ISA canonical layout
    ((T,c,m),(8,k)):((1,T,LBO),(cT,SBO))): LBO = distance between atoms (K rows of one span),
    SBO = 8 rows of one span, and a k16 step moves 16 rows."""
    swizzle = view_type.swizzle
    if swizzle == 0:
        raise CompileError("an MN-major wgmma operand needs a swizzled buffer", loc)
    return (swizzle, k * swizzle, 8 * swizzle, 16 * swizzle)


def _descs(op: O.Wgmma, _ctx):
    if op.b_desc:
        return None
    k = op.k_extent
    if (op.trans_a or op.trans_b) and op.b.type.dtype.bits != 16:
        which = "A" if op.trans_a else "B"
        raise CompileError(f"an MN-major {which} operand of a {op.b.type.dtype} wgmma: PTX "
                           f"transposes 16-bit operands only (tf32 and fp8 are K-major)",
                           op.loc, fix=f"store {which} with K contiguous (transpose it in "
                                       f"global memory) and pass trans_{which.lower()}=False")
    b_desc = (mn_major_descriptor_fields(op.b.type, k, op.loc) if op.trans_b
              else descriptor_fields(op.b.type, op.loc))
    if op.a_in_registers:  # the "rs" form: only B has a descriptor
        return op.replace(b_desc=b_desc)
    a_desc = (mn_major_descriptor_fields(op.a.type, k, op.loc) if op.trans_a
              else descriptor_fields(op.a.type, op.loc))
    return op.replace(a_desc=a_desc, b_desc=b_desc)


RULES = Rules([(O.Wgmma, _descs)])


def run(kernel: Kernel) -> Kernel:
    return RULES.apply(kernel)
