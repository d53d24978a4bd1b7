"""Thread election is an IR op (`elect`, placed by lower/elect.py), not codegen's choice.

The producer role of a TMA pipeline runs on one elected thread of its warpgroup: lowering
wraps its body (after setmaxnreg) in `elect(threads=1)`, the printer and parser keep it, the
interpreter runs it once for the group, the verifier counts the full barrier's arrivals from
it (pipe.producers) and proves its body holds only work one thread can do (sync.elect), and
codegen renders it as `if (gtid == 0)`. The seeded bugs (two elected threads, no elect, an
elect around a consume step) are in tests/mutations/corpus.py; here they are checked by what
each stage does with them."""

from __future__ import annotations

import numpy as np
import pytest

import argus as ag
from argus import codegen, verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.parser import parse_kernel
from argus.ir.printer import print_kernel
from argus.runtime import interp
from argus.runtime.interp import InterpError
from tests.mutations import kernels as K
from tests.mutations.corpus import rewrite


@pytest.fixture(scope="module")
def gemm():
    return lower_only(K.make_gemm(None, stages=2, consumers=2))


def _roles(kernel) -> dict[str, O.RoleOp]:
    return {op.name: op for op in kernel.body.ops if isinstance(op, O.RoleOp)}


def test_lowering_elects_the_producer_only(gemm):
    roles = _roles(gemm)
    producer = roles["producer"].body.ops
    assert [type(op) for op in producer] == [O.SetMaxNReg, O.Elect]
    assert producer[1].threads == 1
    inside = list(producer[1].body.walk())
    assert any(isinstance(op, O.Produce) for op in inside)
    assert all(O.electable(op) for op in inside)
    # the consumers run wgmma on every thread: no elect anywhere in them
    assert not any(isinstance(op, O.Elect) for op in roles["consumer"].body.walk())
    assert gemm.attr("elected") is True


def test_elect_prints_and_parses(gemm):
    text = print_kernel(gemm)
    assert 'elect() {threads=1, group=128, note="one thread issues the async copies"} body {' \
        in text
    assert parse_kernel(text) == gemm


def test_the_elect_states_its_group_and_both_stages_read_it(gemm):
    """The group an elect picks from is one datum, Elect.group (lower/elect.py: the role's
    warpgroup); codegen renders from it and the verifier checks it against the group it runs
    in: an elect claiming the 256 threads of two warpgroups inside a one-warpgroup role is
    refused by codegen and is a sync.elect error, not rendered as `gtid % 64`."""
    (op,) = [op for op in gemm.walk() if isinstance(op, O.Elect)]
    assert op.group == 128
    wrong = rewrite(gemm, O.Elect, lambda op: op.replace(group=256, threads=4))
    with pytest.raises(ag.CompileError, match="group of 256 threads but runs in a group of 128"):
        codegen.render(wrong)
    hits = [d for d in verify.run(wrong).errors if d.code == "sync.elect"]
    assert hits and hits[0].counterexample["group"] == 256, hits
    # threads that do not divide the group are refused by both, from the same field
    odd = rewrite(gemm, O.Elect, lambda op: op.replace(threads=3))
    with pytest.raises(ag.CompileError, match="elect of 3 threads in a group of 128"):
        codegen.render(odd)
    assert [d for d in verify.run(odd).errors if d.code == "sync.elect"]


def test_a_kernel_lowered_again_keeps_one_elect(gemm):
    from argus.lower import elect
    again = elect.run(gemm)
    assert again == gemm


def test_codegen_renders_the_elected_threads(gemm):
    text = codegen.render(gemm).text
    producer = text[text.index("// role producer"):text.index("// role consumer")]
    head = "if (gtid == 0) {  // one thread issues the async copies"
    assert producer.count(head) == 1
    assert producer.index(head) < producer.index("mbar_arrive_expect_tx")
    # one thread per warp (elect.sync's pattern) renders as such: the IR decides, not codegen
    four = codegen.render(rewrite(gemm, O.Elect, lambda op: op.replace(threads=4))).text
    assert "if (gtid % 32 == 0) {  // one thread issues the async copies" in four


def test_the_verifier_counts_arrivals_from_the_elect(gemm):
    clean = verify.run(gemm)
    assert not [d for d in clean.errors if d.code in ("pipe.producers", "sync.elect")]
    assert any(d.code == "sync.elect" for d in clean.proven)
    for threads in (2, 4):
        bad = verify.run(rewrite(gemm, O.Elect, lambda op: op.replace(threads=threads)))
        hits = [d for d in bad.errors if d.code == "pipe.producers"]
        assert hits and hits[0].counterexample["threads"] == threads, bad.errors


def test_the_verifier_refuses_collective_work_in_an_elect(gemm):
    bad = rewrite(gemm, O.Consume, lambda op: O.Elect(Region((op,)), loc=op.loc), nth=0)
    hits = [d for d in verify.run(bad).errors if d.code == "sync.elect"]
    assert hits and "wgmma" in hits[0].counterexample["ops"]


def _gemm_args(M=200, N=128, Kd=160, seed=0):
    torch = pytest.importorskip("torch")
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(M, Kd, generator=g).bfloat16()
    b = torch.randn(N, Kd, generator=g).bfloat16()
    return a, b, torch.full((M, N), float("nan")).bfloat16()


def test_the_interpreter_runs_the_elected_body_once(gemm):
    """The lowered kernel (elect, sync ops and all) computes the GEMM: a produce step run
    more than once per step would deadlock the ring or land the wrong tiles."""
    a, b, c = _gemm_args()
    interp.run(gemm, a, b, c)
    want = a.double().numpy() @ b.double().numpy().T
    np.testing.assert_allclose(c.double().numpy(), want, rtol=2e-2, atol=0.25)


def test_the_interpreter_refuses_several_threads_producing(gemm):
    bad = rewrite(gemm, O.Elect, lambda op: op.replace(threads=2))
    with pytest.raises(InterpError, match="arriving 2 times per step"):
        interp.run(bad, *_gemm_args())


def test_every_election_renders_cuda_nvrtc_builds_for_sm90a(gemm):
    """The default (one thread) and one thread per warp: both compile for sm_90a, and the
    full barrier's init count is the op's FULL_ARRIVALS."""
    from argus.runtime.compile import compile_cuda

    for threads in (1, 4):
        src = codegen.render(rewrite(gemm, O.Elect, lambda op: op.replace(threads=threads)))
        assert "mbar_init(&full" in src.text and \
            f"[s], {O.PipelineCreate.FULL_ARRIVALS});" in src.text
        binary = compile_cuda(src.text, [src.name], use_cache=False)
        assert binary.arch == "sm_90a" and binary.cubin[:4] == b"\x7fELF"
