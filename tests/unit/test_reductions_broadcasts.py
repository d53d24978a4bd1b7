"""Reductions over any axis, broadcasts, index tiles, boolean ops and runtime scalars:
interpreter vs numpy, NVRTC builds for sm_90a inside and outside roles, the structure of the
generated code, and the verifier (tests/unit/reduce_kernels.py holds the kernels)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import argus as ag
from argus import codegen
from argus.compiler import compile_kernel, lower_only
from argus.ir import ops as O
from tests.unit import reduce_kernels as K

CASES = [(rank, axis, fn) for rank in (1, 2, 3, 4) for axis in range(rank) for fn in K.FNS]


def _ref(x, fn, axis):
    if fn.startswith("arg"):
        return np.expand_dims(getattr(np, fn)(x, axis=axis), axis)
    return getattr(np, fn)(x, axis=axis, keepdims=True)


@pytest.mark.parametrize("rank,axis,fn", CASES)
def test_interpreter_matches_numpy(rank, axis, fn):
    rng = np.random.default_rng(rank * 100 + axis)
    X = rng.standard_normal((2, 2, 8, 512)).astype(np.float32)
    X[..., 3] = X[..., 5]  # ties: the smallest index wins
    S, I = np.zeros_like(X), np.zeros(X.shape, np.int32)
    K.reduce_any.interpret(X, S, I, rank=rank, axis=axis, fn=fn)
    shape = K.SHAPES[rank]
    x = X[(0,) * (4 - rank)][tuple(slice(0, n) for n in shape)]
    ref = _ref(x, fn, axis)
    got = (I if fn.startswith("arg") else S)[(0,) * (4 - rank)]
    got = got[tuple(slice(0, n) for n in ref.shape)]
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-3)


BUILDS = [(2, 1, "sum", False), (2, 0, "max", True), (3, 1, "argmax", False),
          (4, 0, "argmin", True), (1, 0, "prod", False), (4, 3, "sum", True),
          (2, 1, "argmax", True), (3, 2, "min", False)]


@pytest.mark.parametrize("rank,axis,fn,in_role", BUILDS)
def test_reductions_build_for_sm90a(rank, axis, fn, in_role):
    src = codegen.render(lower_only(K.reduce_any, rank=rank, axis=axis, fn=fn, in_role=in_role))
    if in_role:  # a warpgroup synchronizes with its named barrier, never the whole CTA
        assert "__syncthreads" not in src.text.split("role compute")[1]
    c = compile_kernel(K.reduce_any, verify=False, rank=rank, axis=axis, fn=fn, in_role=in_role)
    assert c.binary.cubin[:4] == b"\x7fELF" and c.resources.spill_stores == 0


def test_rmsnorm_compiles_and_matches_numpy():
    x = np.random.default_rng(0).standard_normal((3, 1000)).astype(np.float32)
    w = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    y = np.zeros_like(x)
    K.rmsnorm.interpret(x, w, y, eps=1e-5)
    ref = x / np.sqrt((x * x).mean(1, keepdims=True) + 1e-5) * w
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
    c = compile_kernel(K.rmsnorm, verify=False)
    assert "const float eps" in c.source.text
    assert [a.dtype for a in c.source.abi if a.name == "eps"] == ["f32"]


def test_masks_where_and_runtime_scalars():
    X = (np.random.default_rng(2).standard_normal((4, 256)) * 2).astype(np.float32)
    Y = np.zeros_like(X)
    K.masked.interpret(X, Y, 1, shift=3)  # causal positionally, shift by keyword
    r, c = np.arange(4)[:, None], np.arange(256)[None, :]
    np.testing.assert_array_equal(Y, np.where((c <= r * 64 + 3) & ~(X > 2), X, -1))
    src = codegen.render(lower_only(K.masked)).text
    assert "__shared__" not in src  # index tiles are coordinate expressions
    compile_kernel(K.masked, verify=False)


def test_accumulator_statistics_render_without_shared_memory():
    lowered = lower_only(K.acc_softmax)
    src = codegen.render(lowered).text
    # only the column sum (axis 0, across the warps of the warpgroup) uses shared memory;
    # the row max, row sum and the o * alpha rescale stay in registers (2 per thread)
    exchanges = [op for op in lowered.walk() if isinstance(op, O.Reduce) and op.scratch]
    assert [(op.fn, op.axis) for op in exchanges] == [("sum", 0)], exchanges
    assert "__shared__ float" not in src   # the exchange is a buffer of the smem plan
    assert "convert_layout" not in str(lowered)
    assert "__shfl_xor_sync(0xffffffffu, t" in src
    c = compile_kernel(K.acc_softmax, verify=False)
    assert c.resources.spill_stores == 0


def test_accumulator_statistics_interpreter():
    torch = pytest.importorskip("torch")
    A, B = torch.randn(64, 64).bfloat16(), torch.randn(64, 64).bfloat16()
    O, Mx, Cs = torch.zeros(64, 64), torch.zeros(64, 64), torch.zeros(64, 64)
    Ix = torch.zeros(64, 64, dtype=torch.int32)
    K.acc_softmax.interpret(A, B, O, Mx, Ix, Cs)
    s = A.float() @ B.float().T
    sm = torch.where(torch.arange(64)[None, :] <= torch.arange(64)[:, None], s * 0.125,
                     -float("inf"))
    p = torch.exp(sm - sm.max(1, keepdim=True).values)
    torch.testing.assert_close(O, p * 0.5 / p.sum(1, keepdim=True))
    assert torch.equal(Ix[:, 0], s.argmax(1).int())
    torch.testing.assert_close(Cs[0], s.sum(0), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kfn,cx", [(K.rmsnorm, {}), (K.masked, {})])
def test_verifier_clean(kfn, cx):
    from argus import verify  # z3: imported here so the GPU tier can import this module

    report = verify.run(kfn, lower=True, **cx)
    assert not report.errors and not report.unknowns, report.errors + report.unknowns


def test_verifier_proves_reduction_plans():
    from argus import verify

    report = verify.run(K.reduce_any, lower=True, include_proven=True, rank=3, axis=0,
                        fn="argmax", in_role=True)
    assert any(f.code == "reduce.layout" and f.status == "proven" for f in report.proven)


@ag.kernel(threads=256)
def two_warpgroup_rows(X: ag.Tensor["M", "N", ag.f32], S: ag.Tensor["M", 1, ag.f32],
                       I: ag.Tensor["M", 1, ag.i32]):
    """Each of a role's two warpgroups reduces its own 4 rows across its 4 warps."""
    (pid,) = ag.grid(1)
    with ag.role("rows", warpgroups=2) as wg:
        x = ag.load(X, (wg * 4, 0), (4, 128))
        ag.store(S, (wg * 4, 0), x.sum(axis=1))
        ag.store(I, (wg * 4, 0), x.argmax(axis=1))


def test_warpgroups_of_one_role_reduce_in_their_own_shared_scratch():
    x = np.random.default_rng(0).standard_normal((8, 128)).astype(np.float32)
    s, i = np.zeros((8, 1), np.float32), np.zeros((8, 1), np.int32)
    two_warpgroup_rows.interpret(x, s, i)
    np.testing.assert_allclose(s, x.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(i, x.argmax(axis=1)[:, None])
    lowered = lower_only(two_warpgroup_rows)
    text = codegen.render(lowered).text
    # the partials of both warpgroups meet behind per-warpgroup named barriers only: each
    # warpgroup must write and read its own copy of the scratch, offset by its role index;
    # the scratch buffers (partials, and the argmax's indices) are in the smem plan
    scratch = [v for op in lowered.walk() if isinstance(op, O.Reduce) for v in op.scratch]
    assert [v.type.dtype.name for v in scratch] == ["f32", "f32", "i32"], scratch
    assert all(v.type.shape == (2 * 16,) for v in scratch), scratch
    plan = {vid: (off, nbytes) for vid, off, nbytes, _ in lowered.attr("smem_plan")}
    assert all(plan[v.id][1] == 2 * 16 * 4 for v in scratch), plan
    for name in (f"s{v.id}" for v in scratch):
        accesses = re.findall(rf"\b{name}\[([^\]]+)\]", text.split("role rows")[1])
        assert accesses and all(re.match(r"v\d+ \* 16 \+ ", a) for a in accesses), accesses
    c = compile_kernel(two_warpgroup_rows, verify=False)
    assert c.binary.cubin[:4] == b"\x7fELF"


def test_exchange_buffers_are_in_the_smem_plan_and_verified():
    """A cross-warp reduction's exchange is an `smem.alloc` of the plan (lower/smem.py): it
    counts in smem_bytes (the CTA budget) and the verifier's smem.align places it, alignment
    and overlaps included, instead of a static array codegen declared outside both."""
    from argus import verify

    k = lower_only(K.reduce_any, rank=2, axis=1, fn="argmax", in_role=False)
    (red,) = [op for op in k.walk() if isinstance(op, O.Reduce)]
    assert [v.type.dtype.name for v in red.scratch] == ["f32", "i32"]
    allocs = {op.result.id for op in k.walk() if isinstance(op, O.SmemAlloc)}
    assert {v.id for v in red.scratch} <= allocs
    plan = {vid: (off, nbytes) for vid, off, nbytes, _ in k.attr("smem_plan")}
    ends = [plan[v.id][0] + plan[v.id][1] for v in red.scratch]
    assert k.attr("smem_bytes") >= max(ends)
    report = verify.run(k, include_proven=True)
    placed = [f for f in report.proven if f.code == "smem.align" and "scratch" in f.subject]
    assert len(placed) == 2, [str(f) for f in report.findings if f.code == "smem.align"]
    # two exchange buffers placed on top of each other: the verifier's overlap check fires
    a, b = red.scratch
    bad = k.with_attrs(smem_plan=tuple((vid, plan[a.id][0] if vid == b.id else off, n, al)
                                       for vid, off, n, al in k.attr("smem_plan")))
    assert any(f.code == "smem.align" and "overlaps" in f.message
               for f in verify.run(bad).errors)
