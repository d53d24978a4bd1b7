"""wgmma with A from registers (the "rs" form): the DSL accepts a bf16/f16 [64, K] tile as A,
the interpreter multiplies it, codegen packs the A fragment into the instruction's registers
(no shared memory for A), NVRTC builds it for sm_90a, and the verifier checks the operands
(k agreement with B, the fragment layout) instead of giving up."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.errors import TraceError

torch = pytest.importorskip("torch")


@ag.kernel
def two_gemms(Q: ag.Tensor["BH", "S", 64, ag.bf16], K: ag.Tensor["BH", 64, 64, ag.bf16],
              V: ag.Tensor["BH", 64, 64, ag.bf16], O: ag.Tensor["BH", "S", 64, ag.f32]):
    """O = bf16(Q K^T) V for one 64-key block: Q loaded into the A fragment, P = S.to(bf16)
    straight from the accumulator into the second wgmma."""
    pid, bh = ag.grid(ag.cdiv(Q.shape[1], 64), Q.shape[0])
    sK = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    sV = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    pipe = ag.pipeline(2, consumers=1)
    with ag.role("producer", warpgroups=1):
        with pipe.produce() as st:
            ag.tma.load(sK[st], K, (bh, 0, 0))
            ag.tma.load(sV[st], V, (bh, 0, 0))
    with ag.role("consumer", warpgroups=1):
        q = ag.load(Q, (bh, pid * 64, 0), (64, 64))
        o = ag.zeros((64, 64))
        with pipe.consume() as st:
            s = ag.wgmma(q, sK[st], ag.zeros((64, 64)))
            o = ag.wgmma(s.to(ag.bf16), sV[st], o, trans_b=True)
        ag.store(O, (bh, pid * 64, 0), o)


def _inputs(bh=2, s=100, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(bh, s, 64, generator=g).bfloat16()
    k = torch.randn(bh, 64, 64, generator=g).bfloat16()
    v = torch.randn(bh, 64, 64, generator=g).bfloat16()
    return q, k, v, torch.full((bh, s, 64), float("nan"))


def _reference(q, k, v):
    s = (q.double() @ k.double().transpose(1, 2)).float().bfloat16().double()
    return s @ v.double()


def test_interpreter_matches_float64():
    q, k, v, o = _inputs()
    two_gemms.interpret(q, k, v, o)
    ref = _reference(q, k, v)
    assert (o.double() - ref).abs().max().item() < 1e-3 * ref.abs().max().item()


def test_codegen_uses_the_register_form_and_no_shared_memory_for_a():
    text = codegen.render(lower_only(two_gemms)).text
    assert text.count("ag::wgmma_m64n64k16_f32_bf16_rs(") == 4     # S = Q K^T: 4 k16 steps
    assert text.count("ag::wgmma_m64n64k16_f32_bf16_rs_tb(") == 4  # O = P V, V MN-major
    assert "ag::stmatrix" not in text                         # P never goes through smem
    # the packed A registers are fenced and the group retired before they go out of scope
    rs = text[text.index("ag::uint32_t ra"):]
    assert rs.index("ag::wgmma_wait<0>()") < rs.index("}")
    smem = [e for e in lower_only(two_gemms).attr("smem_plan")]
    assert len(smem) == 3  # sK, sV and the pipeline's barriers: nothing for Q or P


def test_builds_for_sm90a_and_verifies():
    from argus import verify

    compiled = compile_kernel(two_gemms)
    assert compiled.binary
    diags = verify.check(lower_only(two_gemms), include_proven=True)
    assert not [d for d in diags if d.severity == "error"], diags
    proven = [d for d in diags if d.severity not in ("error", "warning")]
    codes = [d.code for d in proven]
    # both register-A sites are checked, not skipped: the fragment layout and the operands'
    # agreement on k are proven
    assert codes.count("wgmma.a-fragment") == 2, codes
    assert "wgmma.agree" in codes, codes


def test_verifier_catches_a_register_a_that_is_not_the_fragment():
    """A register A operand in another layout would feed the tensor cores the wrong
    elements: the verifier says so (the layout is forced here, as a buggy pass would)."""
    import dataclasses

    from argus import verify
    from argus.ir import ops as O
    from argus.ir.core import Value, map_kernel_values
    from argus.ir.types import TileType

    k = lower_only(two_gemms)
    a_ids = {op.a.id for op in k.walk() if isinstance(op, O.Wgmma) and op.a_in_registers}

    def blocked(v: Value) -> Value:
        if v.id in a_ids and isinstance(v.type, TileType):
            return dataclasses.replace(v, type=dataclasses.replace(v.type, layout="blocked"))
        return v
    bad = map_kernel_values(k, blocked)
    errs = [d for d in verify.check(bad) if d.severity == "error"]
    assert any(d.code == "wgmma.a-fragment" for d in errs), errs


def _refused(body) -> str:
    with pytest.raises(TraceError) as info:
        ag.kernel(body).trace()
    return str(info.value)


def _q_times_k(q_dtype, q_cols: int, pinned: bool = False):
    """A kernel whose register A operand is a [64, q_cols] tile of `q_dtype` against a
    64x64 bf16 B: legal only for 16-bit A with K = 64 (and not pinned)."""
    def k(Q, K):
        (pid,) = ag.grid(1)
        sK = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(1)
        with ag.role("producer"):
            with pipe.produce() as st:
                ag.tma.load(sK[st], K, (0, 0))
        with ag.role("consumer"):
            with pipe.consume() as st:
                ag.wgmma(ag.load(Q, (0, 0), (64, q_cols)), sK[st], ag.zeros((64, 64)),
                         pinned=pinned)
    # set as objects: string annotations (this module's __future__ import) cannot see q_cols
    k.__annotations__ = {"Q": ag.Tensor[("S", q_cols, q_dtype)],
                         "K": ag.Tensor[64, 64, ag.bf16]}
    return k


def test_misuse_is_refused_at_trace_time():
    assert "bf16 or f16" in _refused(_q_times_k(ag.f32, 64))
    assert "shapes disagree" in _refused(_q_times_k(ag.bf16, 32))


def test_numpy_semantics_of_the_fragment_layout():
    """The A fragment is the accumulator pattern: element (row, k) of thread t, register i
    is wgmma_acc_coord(t, i); every element of a 64x16 block is held exactly once."""
    from argus.target.fragments import wgmma_a_coord

    seen = np.zeros((64, 16), dtype=int)
    for t in range(128):
        for i in range(8):
            r, c = wgmma_a_coord(t, i)
            seen[r, c] += 1
    assert (seen == 1).all()


def test_pinned_takes_shared_memory_operands():
    """wgmma(pinned=True) keeps a shared-memory issue behind the work before it; the
    register-A form refuses it at trace time (codegen refuses IR that carries it anyway)."""
    assert "takes shared-memory operands" in _refused(_q_times_k(ag.bf16, 64, pinned=True))
