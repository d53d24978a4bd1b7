"""The decode GEMMs' weight prefetch before the PDL wait (MoeSchedule.prefetch, issue 16;
docs/pdl.md, "Reading the routing map before the wait"): one thread of the CTA (ag.elect)
reads the routing map and issues TMA prefetches into L2 of its first unit's weight boxes, then
every thread waits (griddepcontrol.wait) and reads the count again. Checked here: the kernels
verify clean with the routing map declared stable, and the verifier finds the seeded bugs
(the map not declared, the wait inside the elected block); the prefetch comes before the wait
in the IR, the CUDA and the PTX, through the loads' own tensor map; the layer is bit for bit
the one without prefetch in the interpreter, and the op launches the permute with PDL before
such a gate-up only."""

from __future__ import annotations

import importlib
from dataclasses import replace

import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels import moe_routing as R
from argus.kernels.moe import decode_schedule, grouped_gemm_kernel
from tests.moe.test_moe_interp import _ids_skewed, _weights

M = importlib.import_module("argus.ops.moe")

CASES = [(True, False, 8, 1), (False, False, 8, 1), (True, True, 8, 4), (False, True, 16, 2)]


def _errors(kernel, **ct) -> list:
    return [d for d in verify.run(kernel, **ct).diagnostics if d.severity == "error"]


@pytest.mark.parametrize("gated,partial,bn,splits", CASES)
def test_prefetch_verifies_clean_and_comes_before_the_wait(gated, partial, bn, splits):
    s = decode_schedule(bn, split_k=splits, pdl=True, prefetch=8)
    k = lower_only(grouped_gemm_kernel(gated, partial), s=s)
    report = verify.run(k)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    top = list(k.body.ops)
    wait = next(i for i, op in enumerate(top) if isinstance(op, O.GridDepWait))
    elect = next(i for i, op in enumerate(top) if isinstance(op, O.Elect))
    assert elect < wait and top[elect].group == k.attr("threads")
    prefetches = [op for op in top[elect].body.walk() if isinstance(op, O.TmaPrefetch)]
    assert len(prefetches) == (2 if gated else 1)   # one box per weight plane and K step
    # the routing map is stable; the count the roles walk is read again after the wait
    assert {v.hint for v in top[wait].stable} >= {"TileExpert", "Tiles"}
    assert any(isinstance(op, O.LoadScalar) for op in top[wait:])
    text = codegen.render(k).text
    first = text.index("ag::tma_prefetch_")
    assert first < text.index("griddepcontrol.wait;")
    # the loads' own tensor map: no extra CUtensorMap parameter for the prefetch
    tmap = text[first:].split("(&", 1)[1].split(",", 1)[0]
    assert f"ag::tma_load_{4 + partial if gated else 3 + partial}d(&{tmap}," in text


def test_without_prefetch_the_kernel_is_as_before():
    s = decode_schedule(8, pdl=True)
    k = lower_only(grouped_gemm_kernel(True), s=s)
    assert not any(isinstance(op, (O.TmaPrefetch, O.Elect)) for op in k.body.ops)
    wait = next(op for op in k.body.ops if isinstance(op, O.GridDepWait))
    assert [v.hint for v in wait.stable] == ["W"]
    assert "prefetch" not in repr(s) and repr(decode_schedule(8, pdl=True, prefetch=8)) == \
        repr(s)[:-1] + ", prefetch=8)"


def test_prefetch_needs_pdl():
    with pytest.raises(Exception, match="prefetch"):
        decode_schedule(8, prefetch=8)
    with pytest.raises(Exception, match="prefetch"):
        decode_schedule(8, pdl=True, prefetch=65)


# A small kernel of the same form, for the seeded bugs: W is a weight, Idx a map written two
# launches back (declared stable), Y the predecessor's output.
@ag.kernel
def _prefetching(W: ag.Tensor["R", "C", ag.bf16], Idx: ag.Tensor[1, 1, ag.i32],
                 Y: ag.Tensor["N", ag.f32], Z: ag.Tensor["N", ag.f32], BUG: str = ""):
    (pid,) = ag.grid(ag.cdiv(Y.shape[0], 128))
    sW = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
    stable = (W,) if BUG == "undeclared" else (W, Idx)
    with ag.elect():
        row = ag.load_scalar(Idx, (0, 0))
        ag.tma.prefetch(sW[0], W, (row * 64, 0))
        if BUG == "wait-inside":
            ag.wait_prior_grids(stable=stable)
    if BUG != "wait-inside":
        ag.wait_prior_grids(stable=stable)
    ag.allow_dependent_launch()
    ag.store(Z, (pid * 128,), ag.load(Y, (pid * 128,), (128,)))


def test_small_prefetching_kernel_is_clean():
    assert _errors(_prefetching) == []


@pytest.mark.parametrize("bug,code,what", [
    ("undeclared", "pdl.wait-first", "load.scalar of Idx"),
    ("wait-inside", "pdl.placement", "ag.wait_prior_grids"),
])
def test_seeded_prefetch_bugs_are_found(bug, code, what):
    """A map read before the wait must be declared stable (the prefetch itself reads nothing
    into the kernel, so it is no finding); a wait inside the elected block waits one thread."""
    diags = _errors(_prefetching, BUG=bug)
    d = next((d for d in diags if d.code == code), None)
    assert d is not None, [str(x) for x in diags]
    assert what in d.message and d.fix


def test_elect_must_be_at_the_top_level():
    @ag.kernel
    def nested(Y: ag.Tensor["N", ag.f32]):
        (pid,) = ag.grid(1)
        with ag.when(pid == 0):
            with ag.elect():
                ag.load_scalar(Y, (0,))
    with pytest.raises(ag.TraceError, match="top level"):
        nested.trace()


def test_prefetch_of_a_misaligned_column_is_refused_by_the_interpreter():
    @ag.kernel
    def odd(W: ag.Tensor["R", "C", ag.bf16]):
        ag.grid(1)
        sW = ag.smem((1, 64, 64), ag.bf16, swizzle=128)
        with ag.elect():
            ag.tma.prefetch(sW[0], W, (0, 3))
    with pytest.raises(Exception, match="innermost coordinate 3"):
        odd.interpret(torch.zeros(64, 128, dtype=torch.bfloat16))


@pytest.mark.parametrize("splits", [1, 2])
def test_layer_is_identical_with_and_without_prefetch(splits):
    T, E, k, H, I = 5, 4, 2, 128, 128
    w13, w2 = _weights(E, H, I, seed=7)
    g = torch.Generator().manual_seed(8)
    x = torch.randn(T, H, generator=g).bfloat16()
    ids = _ids_skewed(T, E, k, seed=9)
    weights = torch.rand(T, k, generator=g)
    outs, launched = [], []
    for prefetch in (0, 1, 64):
        names = []
        base = M._launcher(True)

        def run(kernel, *args, **constexprs):
            names.append(kernel.name)
            return base(kernel, *args, **constexprs)
        layer = M.Layer(T, H, I, E, k,
                        decode_schedule(8, stages=2, split_k=splits, pdl=True, prefetch=prefetch),
                        decode_schedule(8, stages=3, pdl=True, prefetch=prefetch))
        outs.append(M.experts(x, w13, w2, ids, weights, layer, interpret=True, run=run))
        launched.append(names)
    assert all(torch.equal(outs[0], out) for out in outs[1:])
    assert not torch.isnan(outs[0]).any()
    # the permute takes PDL (wait, then trigger) only before a prefetching gate-up
    assert any(n.startswith("moe_permute") and not n.endswith("_pdl") for n in launched[0])
    assert all(any(n.startswith("moe_permute") and n.endswith("_pdl") for n in names)
               for names in launched[1:])


def test_pdl_permute_waits_first_and_verifies_clean():
    k = lower_only(R.permute_kernel(8, 1024, pdl=True))
    assert _errors(k) == [] and k.attr("pdl") is True
    kinds = [type(op) for op in k.body.ops]
    assert kinds.index(O.GridDepWait) < kinds.index(O.GridDepLaunch)
    assert not any(isinstance(op, (O.Load, O.LoadScalar, O.Store))
                   for op in k.body.ops[:kinds.index(O.GridDepWait)])


@pytest.mark.parametrize("gated", [True, False])
def test_prefetch_is_before_the_wait_in_the_ptx(gated):
    from argus.runtime import nvrtc_available
    from argus.runtime.compile import compile_cuda

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    s = decode_schedule(8, stages=8 if gated else 15, pdl=True, prefetch=8)
    source = codegen.render(lower_only(grouped_gemm_kernel(gated), s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and not binary.resource(source.name).spills
    ptx = binary.ptx
    prefetch = ptx.index("cp.async.bulk.prefetch.tensor")
    wait = ptx.index("griddepcontrol.wait")
    assert prefetch < wait < ptx.index("cp.async.bulk.tensor")
    # the count the roles walk is loaded again after the wait (not merged with the
    # prefetch's read of it before the wait)
    loads_before = ptx[:wait].count("ld.global.nc")
    assert loads_before >= 2 and ptx[wait:].count("ld.global.nc") >= 2


def test_the_bench_times_the_prefetch_against_the_rule():
    """scripts/gpu_moe_bench.py --rule-variants: the plain launch and the prefetch at one and
    two ring depths, each one change from the rule's pair, each a Layer the op accepts, and
    --variants' decode names say whether they take PDL."""
    from tests.loading import load_script

    bench = load_script("gpu_moe_bench")
    for T, k, E, H, I in [(1, 8, 128, 2048, 768), (16, 2, 8, 4096, 14336)]:
        gate_up, down = M.decode_schedules(T, k, E, H, I)
        got = bench.decode_rule_variants(T, k, E, H, I)
        assert got["no-pdl"] == (replace(gate_up, pdl=False), replace(down, pdl=False))
        for times in (1, 2):
            g, d = got[f"prefetch{times}x"]
            assert (g.prefetch, d.prefetch) == (times * gate_up.stages, times * down.stages)
            assert replace(g, prefetch=0) == gate_up and replace(d, prefetch=0) == down
            M.Layer(T, H, I, E, k, g, d)
        assert got["prefetch-gate-up"] == (replace(gate_up, prefetch=gate_up.stages), down)
        assert got["prefetch-down"] == (gate_up, replace(down, prefetch=down.stages))
    names = bench.variants(1)
    assert all(("-pdl" in n) == s.pdl and ("-nopdl" in n) == (not s.pdl)
               for n, s in names.items() if n.startswith("decode"))
