"""The decode GEMMs with programmatic dependent launch (MoeSchedule.pdl, issue 16; docs/pdl.md):
the verifier is clean (pdl.* included: the routing counts, activations and every store after
the wait), the CUDA holds griddepcontrol and the launch flag, the flag off changes nothing,
and the interpreter's layer is bit-identical with the flag on and off."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from argus import codegen, verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels import moe_routing as R
from argus.kernels.moe import PREFILL, decode_schedule, grouped_gemm_kernel

from argus.ops import moe_module as M

CASES = [(True, False, 8, 1), (False, False, 8, 1), (True, True, 8, 4), (False, True, 16, 2)]


@pytest.mark.parametrize("gated,partial,bn,splits", CASES)
def test_pdl_decode_gemm_verifies_clean_and_waits_first(gated, partial, bn, splits):
    s = decode_schedule(bn, split_k=splits, pdl=True)
    k = lower_only(grouped_gemm_kernel(gated, partial), s=s)
    report = verify.run(k)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert k.attr("pdl") is True
    top = list(k.body.ops)
    wait = next(i for i, op in enumerate(top) if isinstance(op, O.GridDepWait))
    # the wait precedes every global access at the top level and every role
    assert not any(isinstance(op, (O.LoadScalar, O.Load, O.TmaLoad, O.Store))
                   for op in top[:wait])
    assert all(i > wait for i, op in enumerate(top) if isinstance(op, O.RoleOp))
    text = codegen.render(k)
    assert text.pdl and "griddepcontrol.wait;" in text.text
    assert "griddepcontrol.launch_dependents;" in text.text


def test_flag_off_is_the_schedule_as_before():
    s = decode_schedule(8)
    assert s.pdl is False and s == decode_schedule(8, pdl=False)
    # in repr only when on: a schedule without PDL prints as before the field existed, one
    # with it says so (a bench row or a printed default cannot hide it)
    assert "pdl" not in repr(s)
    assert repr(decode_schedule(8, pdl=True)) == repr(s)[:-1] + ", pdl=True)"
    k = lower_only(grouped_gemm_kernel(True), s=s)
    src = codegen.render(k)
    assert not src.pdl and "griddepcontrol" not in src.text and k.attr("pdl") is None


def test_the_op_decode_schedules_take_pdl():
    """argus.ops.moe's decode default launches both GEMMs with PDL (c874bc4), and so does
    schedule_for's decode pick (a regression to the plain launch would keep every other test
    here green)."""
    for T, k, E, H, I in [(1, 8, 128, 2048, 768), (1, 2, 8, 4096, 14336), (16, 8, 128, 2048, 768)]:
        gate_up, down = M.decode_schedules(T, k, E, H, I)
        assert gate_up.pdl and down.pdl, (T, k, E, H, I)
        assert M.schedule_for(T, k, E, H).pdl, (T, k, E, H)
        assert "pdl=True" in repr(gate_up)


def test_pdl_needs_the_decode_schedule():
    with pytest.raises(Exception, match="pdl"):
        replace(PREFILL, pdl=True)


@pytest.mark.parametrize("splits", [1, 2])
def test_layer_is_identical_with_and_without_pdl(splits, decode_case):
    outs = [decode_case.run(decode_schedule(8, stages=2, split_k=splits, pdl=pdl),
                            decode_schedule(8, stages=3, pdl=pdl))[0]
            for pdl in (False, True)]
    assert torch.equal(outs[0], outs[1])
    assert not torch.isnan(outs[1]).any()


def test_pdl_decode_gemm_builds_for_sm90a():
    from argus.runtime import nvrtc_available
    from argus.runtime.compile import compile_cuda

    if not nvrtc_available():
        pytest.skip("NVRTC not installed")
    s = decode_schedule(8, pdl=True)
    source = codegen.render(lower_only(grouped_gemm_kernel(True), s=s))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    assert binary.arch == "sm_90a" and not binary.resource(source.name).spills
    assert "griddepcontrol.wait" in binary.ptx and "griddepcontrol.launch_dependents" in binary.ptx


# -- the combine after a PDL down (MoeSchedule.pdl_combine) ---------------------------------------


@pytest.mark.parametrize("splits", [0, 2])
def test_pdl_combine_waits_first_and_verifies_clean(splits):
    k = lower_only(R.combine_kernel(8, 1024, splits, pdl=True))
    report = verify.run(k)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert k.attr("pdl") is True and k.name.endswith("_pdl")
    kinds = [type(op) for op in k.body.ops]
    wait = kinds.index(O.GridDepWait)
    assert wait < kinds.index(O.GridDepLaunch)
    # y, pos and the weights are the kernels' before: nothing is read or stored before the wait
    assert not any(isinstance(op, (O.Load, O.LoadScalar, O.Store)) for op in k.body.ops[:wait])
    text = codegen.render(k).text
    assert text.index("griddepcontrol.wait;") < text.index("__ldg(")
    # off: the kernel as before, no PDL
    plain = codegen.render(lower_only(R.combine_kernel(8, 1024, splits)))
    assert not plain.pdl and "griddepcontrol" not in plain.text
    from argus.runtime import nvrtc_available
    from argus.runtime.compile import compile_cuda

    if nvrtc_available():
        source = codegen.render(k)
        binary = compile_cuda(source.text, [source.name], use_cache=False)
        assert binary.arch == "sm_90a" and not binary.resource(source.name).spills
        assert binary.ptx.index("griddepcontrol.wait") < binary.ptx.index("ld.global")


def test_pdl_combine_is_a_down_schedule_flag_shown_only_when_set():
    s = decode_schedule(8, pdl=True)
    on = decode_schedule(8, pdl=True, pdl_combine=True)
    assert repr(on) == repr(s)[:-1] + ", pdl_combine=True)" and "pdl_combine" not in repr(s)
    with pytest.raises(Exception, match="pdl_combine"):
        decode_schedule(8, pdl_combine=True)


@pytest.mark.parametrize("splits", [1, 2])
def test_layer_is_identical_with_and_without_the_pdl_combine(splits, decode_case):
    outs, launched = [], []
    for on in (False, True):
        out, names = decode_case.run(decode_schedule(8, stages=2, pdl=True),
                                     decode_schedule(8, stages=3, split_k=splits, pdl=True,
                                                     pdl_combine=on))
        outs.append(out)
        launched.append(names)
    assert torch.equal(outs[0], outs[1]) and not torch.isnan(outs[1]).any()
    combines = [[n for n in names if n.startswith("moe_combine")] for names in launched]
    assert [len(c) for c in combines] == [1, 1]
    assert not combines[0][0].endswith("_pdl") and combines[1][0].endswith("_pdl")
