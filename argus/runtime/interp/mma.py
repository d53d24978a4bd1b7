"""Rule for wgmma: the accumulator tile += A @ B^T (B stored N x K).

Invariant: products are summed in float64 and added to the float32 accumulator in place; A comes
from registers or a shared-memory view, B from a view; a transposed (MN-major) operand is stored
in column atoms [MN/W][K][W] and is read back K-major first. f32 operands are the tf32
product (O.Wgmma): the tensor core reads 10 mantissa bits of each, the 13 low bits dropped
(dtypes.truncate_to_tf32, toward zero: what the H200 measured); operands rounded to nearest
first (ag.round_tf32, cvt.rna) are read exactly. An 8-bit register A in the accumulator's
order (a_acc_order) is read through target/fragments.py acc_order_col, as the hardware reads it.
"""

from __future__ import annotations

import numpy as np

from argus.dtypes import truncate_to_tf32
from argus.ir import ops as O
from argus.runtime.interp.machine import _Group, _Interp
from argus.runtime.interp.registry import rule
from argus.target.fragments import acc_order_for


@rule(O.Wgmma)
def wgmma(m: _Interp, g: _Group, op: O.Wgmma) -> None:
    acc = m.val(g, op.acc)
    a = m.val(g, op.a)
    a = a if isinstance(a, np.ndarray) else a.array()  # registers, or a smem view
    b = m.val(g, op.b).array()
    k = op.k_extent

    def k_major(x):  # column atoms [MN/W][K][W] -> [K, MN] -> [MN, K]
        return x.reshape(-1, k, x.shape[1]).transpose(1, 0, 2).reshape(k, -1).T
    b_nk = k_major(b) if op.trans_b else b
    a = k_major(a) if op.trans_a else a
    if op.a_acc_order:  # k-position k reads A's column acc_order_col(k) (O.Wgmma.a_acc_order)
        a = a[:, acc_order_for(op.a.type.dtype.bits)(np.arange(k))]
    if op.b.type.dtype.name == "f32":  # wgmma .tf32: the tensor core sees 10 mantissa bits
        a, b_nk = truncate_to_tf32(a), truncate_to_tf32(b_nk)
    if op.overwrite:  # scale-d = 0: the old value is dropped
        acc[...] = 0.0
    acc += (a.astype(np.float64) @ b_nk.astype(np.float64).T).astype(np.float32)
