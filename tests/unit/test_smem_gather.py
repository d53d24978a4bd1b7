"""ag.gather of a shared-memory view (ir.ops.SmemGather): the interpreter reads the named
elements (`other` outside the view), the sync lowering puts a group barrier between a
buffer's writes and a gather from it and between the gather and the buffer's next write (in a
loop too: the back edge), the verifier proves those barriers (sync.exchange) and reports them
missing, codegen reads one ld.shared an element, and the DSL refuses a swizzled view or a
wrong index count with a fix."""

import dataclasses

import pytest
import torch

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.core import Region


@ag.kernel(threads=32)
def reverse_rows(X: ag.Tensor["M", 64, ag.bf16], Y: ag.Tensor["M", 64, ag.bf16]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((32, 64), ag.bf16)
    ag.store_shared(sX.view(), ag.load(X, (b * 32, 0), (32, 64)))
    t = ag.arange(32)[:, None]
    # thread t reads row 31 - t (written by another thread), columns shifted by one: column
    # 64 is outside the view and reads `other`
    x = ag.gather(sX.view(), (31 - t, ag.arange(64)[None, :] + 1), other=-2.0)
    ag.store(Y, (b * 32, 0), x)


def _expected(x):
    ref = torch.full_like(x, -2.0)
    for i in range(x.shape[0]):
        src = (i // 32) * 32 + 31 - i % 32
        ref[i, :63] = x[src, 1:]
    return ref


def test_interpreter_reads_the_named_elements():
    x = torch.randn(64, 64).to(torch.bfloat16)
    y = torch.zeros_like(x)
    reverse_rows.interpret(x, y)
    assert torch.equal(y, _expected(x))


def _barriers(kernel):
    return [op for op in kernel.walk() if isinstance(op, O.GroupBarrier)]


def test_lowering_puts_a_barrier_between_the_writes_and_the_gather():
    kernel = lower_only(reverse_rows)
    ops = list(kernel.walk())
    write = next(i for i, op in enumerate(ops) if isinstance(op, O.StMatrix))
    read = next(i for i, op in enumerate(ops) if isinstance(op, O.SmemGather))
    between = [op for op in ops[write:read] if isinstance(op, O.GroupBarrier)]
    assert len(between) == 1 and between[0].scope == "cta"
    report = verify.run(kernel)
    assert "sync.exchange" in {f.code for f in report.proven}
    # the one error is the kernel's purpose: the verifier follows each element through the
    # gather to the element of X it names (row 31 - t, column + 1: not its own coordinates)
    assert [d.code for d in report.errors] == ["store.coords"], \
        "\n".join(map(str, report.errors))


def test_a_missing_barrier_is_reported():
    """Seeded bug: the lowering's barrier removed; sync.exchange names the gather's line."""
    kernel = lower_only(reverse_rows)
    body = Region(tuple(op for op in kernel.body.ops if not isinstance(op, O.GroupBarrier)))
    report = verify.run(dataclasses.replace(kernel, body=body))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad and "reads elements other threads wrote" in bad[0].message, \
        "\n".join(map(str, report.errors))


@ag.kernel(threads=32)
def rotate_twice(X: ag.Tensor["M", 32, ag.f32], Y: ag.Tensor["M", 32, ag.f32]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((32, 32), ag.f32)
    t = ag.arange(32)[:, None]
    x = ag.load(X, (b * 32, 0), (32, 32))
    for _ in ag.range(2):
        ag.store_shared(sX.view(), x)
        x = ag.gather(sX.view(), ((t + 1) % 32, ag.arange(32)[None, :]))
    ag.store(Y, (b * 32, 0), x)


def test_a_loop_rewrite_waits_for_the_gathers():
    """In a loop the next iteration's store_shared rewrites the buffer the gather read: a
    barrier before it (write after read, across the back edge) and one before the gather."""
    kernel = lower_only(rotate_twice)
    loop = next(op for op in kernel.walk() if isinstance(op, O.For))
    kinds = [type(op).__name__ for op in loop.body.ops
             if isinstance(op, (O.GroupBarrier, O.StMatrix, O.SmemGather))]
    assert kinds == ["GroupBarrier", "StMatrix", "GroupBarrier", "SmemGather"], kinds
    report = verify.run(kernel)
    assert not [d for d in report.errors if d.code.startswith(("sync.", "smem."))], \
        "\n".join(map(str, report.errors))
    x = torch.randn(32, 32)
    y = torch.zeros_like(x)
    rotate_twice.interpret(x, y)
    assert torch.equal(y, torch.roll(x, -2, dims=0))
    # the write-after-read barrier removed: reported
    first = loop.body.ops.index(next(op for op in loop.body.ops
                                     if isinstance(op, O.GroupBarrier)))
    seeded_loop = loop.replace(body=Region(loop.body.ops[:first] + loop.body.ops[first + 1:]))
    body = Region(tuple(seeded_loop if op is loop else op for op in kernel.body.ops))
    report = verify.run(dataclasses.replace(kernel, body=body))
    assert any(d.code == "sync.exchange" and "may overwrite" in d.message
               for d in report.errors), "\n".join(map(str, report.errors))


def test_codegen_reads_one_shared_element_a_register():
    source = ag.compile(reverse_rows, verify=False).source.text
    assert "__syncthreads();  // the gather reads other threads' shared writes" in source
    # the row index 31 - t lies in [0, 31] by its interval: no guard; the column (up to 64)
    # keeps one unsigned compare; the element at row * 64 + column
    assert "< 64u) ?" in source and "< 32u" not in source and "* 64 + " in source
    kernel = lower_only(reverse_rows)
    assert [op.inside for op in kernel.walk() if isinstance(op, O.SmemGather)] == [(0,)]


def test_the_dsl_refuses_a_swizzled_view_and_a_wrong_index_count():
    @ag.kernel(threads=32)
    def swizzled(Y: ag.Tensor["M", 64, ag.bf16]):
        ag.grid(1)
        s = ag.smem((32, 64), ag.bf16, swizzle=128)
        ag.store(Y, (0, 0), ag.gather(s.view(), (ag.arange(32)[:, None], 0)))

    with pytest.raises(TraceError, match="unswizzled") as e:
        lower_only(swizzled)
    assert "swizzle=0" in str(e.value)

    @ag.kernel(threads=32)
    def three(Y: ag.Tensor["M", 64, ag.bf16]):
        ag.grid(1)
        s = ag.smem((32, 64), ag.bf16)
        ag.store(Y, (0, 0), ag.gather(s.view(), (ag.arange(32)[:, None], 0, 0)))

    with pytest.raises(TraceError, match="2 dims but 3 indices"):
        lower_only(three)
