"""The decode GEMMs' weight prefetch before the PDL wait (MoeSchedule.prefetch, issue 16;
docs/pdl.md, "Reading the routing map before the wait"): one thread of the CTA (ag.elect)
reads the routing map and issues TMA prefetches into L2 of its first unit's weight boxes, then
every thread waits (griddepcontrol.wait) and reads the count again. Checked here: the kernels
verify clean with the routing map declared stable, and the verifier finds the seeded bugs
(the map not declared, the wait inside the elected block); the prefetch comes before the wait
in the IR, the CUDA and the PTX, through the loads' own tensor map; per CTA, the prefetched
boxes are its producer's first weight loads (interpreter records; seeded: coordinates shifted
by a K step, a weight tile or an expert); the layer is bit for bit the one without prefetch in
the interpreter, and the op launches the permute with PDL before such a gate-up only."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels import moe_routing as R
from argus.kernels.moe import decode_schedule, grouped_gemm_kernel

from argus.ops import moe_module as M

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
def test_layer_is_identical_with_and_without_prefetch(splits, decode_case):
    outs, launched = [], []
    for prefetch in (0, 1, 64):
        out, names = decode_case.run(
            decode_schedule(8, stages=2, split_k=splits, pdl=True, prefetch=prefetch),
            decode_schedule(8, stages=3, pdl=True, prefetch=prefetch))
        outs.append(out)
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


@pytest.mark.parametrize("gated", [True, False])
def test_the_map_is_read_again_after_the_wait_through_the_read_only_path(gated):
    """The CUDA text docs/pdl.md's argument rests on ("What a wrong read would cost"): the
    prefetch reads Tiles and TileExpert before griddepcontrol.wait, and the walk reads both
    again after it, as separate statements; both reads render as __ldg (ld.global.nc) since
    ag.load_scalar offers no other form (codegen/cuda/memory.py load_scalar). So the re-read
    is no independent check (an L1 line the first read brought in can serve it): the map's
    completeness when the kernel starts is what keeps the result right. Once the DSL offers
    a coherent scalar load (ld.relaxed.gpu / ld.global.cg), the walk's reads after the wait
    should take it, and this test and docs/pdl.md change with them."""
    s = decode_schedule(8, pdl=True, prefetch=8)
    text = codegen.render(lower_only(grouped_gemm_kernel(gated), s=s)).text
    before, sep, after = text.partition("griddepcontrol.wait;")
    assert sep, "no griddepcontrol.wait in the PDL decode kernel"
    for name in ("Tiles", "TileExpert"):
        assert f"__ldg(&{name}[" in before, f"the prefetch no longer reads {name} first"
        # read again after the wait: the count the roles walk, the expert of each unit
        assert f"__ldg(&{name}[" in after, (
            f"{name} is not read again after the wait as __ldg: if the read is now coherent "
            f"(ld.relaxed / ld.global.cg), update docs/pdl.md's argument and this test")


def test_the_bench_times_the_prefetch_against_the_rule():
    """scripts/gpu_moe_bench.py --rule-variants: the plain launch and the prefetch at one and
    two ring depths, each one change from the rule's pair, each a Layer the op accepts, and
    --variants' decode names say whether they take PDL."""
    from tests.loading import load_script

    bench = load_script("gpu_moe_bench")
    for T, k, E, H, I in [(1, 8, 128, 2048, 768), (16, 2, 8, 4096, 14336)]:
        gate_up, down = M.decode_schedules(T, k, E, H, I)
        got = bench.decode_rule_variants(T, k, E, H, I)
        # the decode default prefetches one ring of each GEMM (since 2026-12-04)
        assert (gate_up.prefetch, down.prefetch) == (gate_up.stages, down.stages)
        # ... and launches the combine with PDL after the down (since 2026-12-04)
        assert down.pdl_combine and not gate_up.pdl_combine
        assert got["no-pdl"] == (replace(gate_up, pdl=False, prefetch=0),
                                 replace(down, pdl=False, prefetch=0, pdl_combine=False))
        assert got["no-prefetch"] == (replace(gate_up, prefetch=0), replace(down, prefetch=0))
        for times in (1, 2):
            g, d = got[f"prefetch{times}x"]
            assert (g.prefetch, d.prefetch) == (times * gate_up.stages, times * down.stages)
            assert replace(g, prefetch=gate_up.prefetch) == gate_up
            assert replace(d, prefetch=down.prefetch) == down
            M.Layer(T, H, I, E, k, g, d)
        assert got["prefetch-gate-up"] == (replace(gate_up, prefetch=gate_up.stages), down)
        assert got["prefetch-down"] == (gate_up, replace(down, prefetch=down.stages))
        assert got["no-pdl-combine"] == (gate_up, replace(down, pdl_combine=False))
        for g, d in got.values():
            M.Layer(T, H, I, E, k, g, d)
    names = bench.variants(1)
    assert all(("-pdl" in n) == s.pdl and ("-nopdl" in n) == (not s.pdl)
               for n, s in names.items() if n.startswith("decode"))


# -- the prefetched boxes are the producer's first loads ---------------------------------------
# What the prefetch is for: the boxes it brings into L2 must be the ones the producer loads
# first after the wait, through the same tensor map; a box shifted by a K step or a weight tile
# would still verify clean and compute the same output (the hint moves nothing the kernel
# reads), so only a comparison of the two catches it. Statically on the lowered IR (tensor,
# box, swizzle: the tensor map), and per CTA in the interpreter (the coordinates, in order).


class _TmaRecorder:
    """Records every tma.load and tma.prefetch the interpreter runs, by wrapping their rules
    (argus.runtime.interp.registry.RULES is looked up per op): (kernel, CTA, kind, tensor,
    coordinates), kernel being the name of the launch under way."""

    def __init__(self, monkeypatch):
        from argus.runtime.interp import registry

        self.kernel = ""
        self.records: list[tuple] = []
        for cls in (O.TmaLoad, O.TmaPrefetch):
            monkeypatch.setitem(registry.RULES, cls, self._wrap(cls, registry.RULES[cls]))

    def _wrap(self, cls, rule):
        def recorded(m, g, op):
            cta = g.name.split("/")[0]   # "cta(3,)" or "cta(3,)/producer[0]"
            coords = tuple(int(m.val(g, c)) for c in op.coords)
            self.records.append((self.kernel, cta, cls, op.tensor.hint, coords))
            return rule(m, g, op)
        return recorded

    def weight_boxes(self, kernel: str) -> dict:
        """{CTA: (prefetched W boxes, loaded W boxes)} of launches of `kernel`, in issue order."""
        out: dict = {}
        for name, cta, cls, hint, coords in self.records:
            if name == kernel and hint == "W":
                out.setdefault(cta, ([], []))[cls is O.TmaLoad].append(coords)
        return out


def _prefetch_mismatches(rec: _TmaRecorder, kernel: str, n: int, k_steps: int,
                         planes: int) -> list[str]:
    """Why the prefetched boxes of `kernel` are not its producer's first loads, per CTA
    (empty when they are): each CTA that loads weights prefetches exactly the first
    planes x min(n, k_steps) of its weight loads, in order; one that loads none prefetches
    none."""
    problems = []
    boxes = rec.weight_boxes(kernel)
    if not any(loads for _, loads in boxes.values()):
        return [f"{kernel}: no weight loads recorded (is the layer's unit walk empty?)"]
    for cta, (fetched, loads) in sorted(boxes.items()):
        want = loads[:planes * min(n, k_steps)] if loads else []
        if fetched != want:
            problems.append(f"{kernel} {cta}: prefetched {fetched}, but its first "
                            f"{len(want)} weight loads are {want}")
    return problems


# (gate-up schedule, down schedule, gate-up's K steps per unit, down's): H = 512, I = 256, so
# the gate-up has 8 K steps (4 per slice cut in 2) and the down 4; n below, equal to and above
# a unit's steps (the prefetch stops at the unit's last step)
PREFETCH_CASES = [
    (decode_schedule(8, stages=2, pdl=True, prefetch=3),
     decode_schedule(8, stages=3, pdl=True, prefetch=6), 8, 4),
    (decode_schedule(8, stages=2, split_k=2, pdl=True, prefetch=4),
     decode_schedule(8, stages=3, split_k=2, pdl=True, prefetch=1), 4, 2),
]


@pytest.fixture(scope="module")
def deep_case():
    from tests.moe.conftest import make_decode_case

    return make_decode_case(H=512, I=256)


@pytest.mark.parametrize("gate_up,down,gu_steps,dn_steps", PREFETCH_CASES)
def test_prefetched_boxes_are_the_producers_first_loads(gate_up, down, gu_steps, dn_steps,
                                                        deep_case, monkeypatch):
    rec = _TmaRecorder(monkeypatch)

    def run(kernel, *args, base, **constexprs):
        rec.kernel = kernel.name
        return base(kernel, *args, **constexprs)
    out, names = deep_case.run(gate_up, down, run=run)
    assert not torch.isnan(out).any()
    gu, dn = (next(n for n in names if n.startswith(p)) for p in ("moe_gate_up", "moe_down"))
    problems = (_prefetch_mismatches(rec, gu, gate_up.prefetch, gu_steps, 2) +
                _prefetch_mismatches(rec, dn, down.prefetch, dn_steps, 1))
    assert not problems, "\n".join(problems)
    # the comparison is not vacuous: some CTA prefetched (a CTA with no unit records no
    # load; had it prefetched, its loads [] would not match)
    boxes = rec.weight_boxes(gu)
    assert any(f for f, _ in boxes.values())
    # the same tensor map: each prefetch has the box and swizzle of the producer's W loads
    for kernel, s in ((grouped_gemm_kernel(True, gate_up.split_k > 1), gate_up),
                      (grouped_gemm_kernel(False, down.split_k > 1), down)):
        k = lower_only(kernel, s=s)
        maps = {(op.box, op.swizzle) for op in k.body.walk()
                if isinstance(op, (O.TmaPrefetch, O.TmaLoad)) and op.tensor.hint == "W"}
        assert len(maps) == 1, f"{kernel.name}: W read through {len(maps)} tensor maps: {maps}"


@pytest.mark.parametrize("shift", ["k-step", "weight-tile", "expert"])
def test_a_shifted_prefetch_is_caught(shift, deep_case, monkeypatch):
    """Seeded bug: the kernel's prefetch coordinates moved by one K step, one 64-row weight
    tile or one expert (a fresh trace of the kernels with ag.tma.prefetch wrapped); the
    output is unchanged, so only the box comparison sees it."""
    from argus.kernels import moe as K

    real = ag.tma.prefetch
    at = {"k-step": (-1, 64), "weight-tile": (-2, 64), "expert": (0, 1)}[shift]

    def shifted(view, tensor, coords):
        coords = list(coords)
        coords[at[0]] = coords[at[0]] + at[1]
        return real(view, tensor, tuple(coords))
    monkeypatch.setattr(ag.tma, "prefetch", shifted)
    fresh = {}   # new kernel objects: their traces are not the cached, correct ones

    rec = _TmaRecorder(monkeypatch)

    def run(kernel, *args, base, **constexprs):
        rec.kernel = kernel.name
        if kernel.name in ("moe_gate_up", "moe_down"):
            kernel = fresh.setdefault(kernel.name, K.grouped_gemm_kernel.__wrapped__(
                kernel.name == "moe_gate_up"))
        return base(kernel, *args, **constexprs)
    gate_up, down, gu_steps, dn_steps = PREFETCH_CASES[0]
    out, _ = deep_case.run(gate_up, down, run=run)
    assert not torch.isnan(out).any()
    problems = _prefetch_mismatches(rec, "moe_gate_up", gate_up.prefetch, gu_steps, 2)
    assert problems and "prefetched" in problems[0], problems
    problems = _prefetch_mismatches(rec, "moe_down", down.prefetch, dn_steps, 1)
    assert problems, "the down's shifted prefetch went unnoticed"
