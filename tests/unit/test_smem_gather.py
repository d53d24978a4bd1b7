"""ag.gather of a shared-memory view (ir.ops.SmemGather): the interpreter reads the named
elements (`other` outside the view), the sync lowering puts a group barrier between a
buffer's writes and a gather from it and between the gather and the buffer's next write (in a
loop too: the back edge), the verifier proves those barriers (sync.exchange) and reports them
missing, codegen reads one ld.shared an element, and the DSL refuses a swizzled view or a
wrong index count with a fix. An index outside a sub-view reads `other` (interpreter) and
its element has no record in the verifier (not the buffer's neighbouring row's: that made a
halo tap replaced by padding prove, and a correct padding tap fail, store.coords); a padding
tap reading a real element is reported; a gather of a buffer another role writes is
reported by sync.exchange and smem.race, never proven."""

import dataclasses

import pytest
import torch
import z3

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.errors import TraceError
from argus.ir import ops as O
from argus.ir.core import Region
from argus.verify.model import Model


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


# -- an index outside a sub-view reads `other`, not the buffer's neighbouring row -----------
# The gather reads rows 32..63 of a [64, 32] buffer whose rows 0..31 hold other data: row
# index -1 (thread 0) lies outside the view, so the hardware and the interpreter read `other`
# there (codegen guards by the view's rows), although buffer row 31 was written. The verifier
# must give that element no record (nothing claimed, as a load past a tensor's edge), never
# buffer row 31's.

@ag.kernel(threads=32)
def shift_with_halo(X: ag.Tensor["N", 32, ag.f32], Y: ag.Tensor["M", 32, ag.f32]):
    # meant: Y[i] = X[i - 1] for every i (the block's previous row staged as a halo); the
    # bug: the gather reads the block's own view, so row -1 is padding, not the halo row
    ag.tag_tensor(X, src=lambda i, j: i + 1)
    ag.tag_tensor(Y, src=lambda i, j: i)
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((64, 32), ag.f32)
    ag.store_shared(sX.view().rows_slice(0, 32), ag.load(X, (b * 32 - 32, 0), (32, 32)))
    ag.store_shared(sX.view().rows_slice(32, 32), ag.load(X, (b * 32, 0), (32, 32)))
    t = ag.arange(32)[:, None]
    y = ag.gather(sX.view().rows_slice(32, 32), (t - 1, ag.arange(32)[None, :]), other=0.0)
    ag.store(Y, (b * 32, 0), y)


@ag.kernel(threads=32)
def shift_with_padding(X: ag.Tensor["N", 32, ag.f32], Y: ag.Tensor["M", 32, ag.f32]):
    # correct: Y[i] = X[i - 1] within each 32-row block, 0 at a block's first row (padding);
    # the buffer's rows 0..31 hold the NEXT block's rows, whose tags contradict Y's
    ag.tag_tensor(X, src=lambda i, j: i + 1)
    ag.tag_tensor(Y, src=lambda i, j: i)
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((64, 32), ag.f32)
    ag.store_shared(sX.view().rows_slice(0, 32), ag.load(X, (b * 32 + 32, 0), (32, 32)))
    ag.store_shared(sX.view().rows_slice(32, 32), ag.load(X, (b * 32, 0), (32, 32)))
    t = ag.arange(32)[:, None]
    y = ag.gather(sX.view().rows_slice(32, 32), (t - 1, ag.arange(32)[None, :]), other=0.0)
    ag.store(Y, (b * 32, 0), y)


def _padded_shift(x):
    ref = torch.zeros_like(x)
    for i in range(x.shape[0]):
        if i % 32:
            ref[i] = x[i - 1]
    return ref


def test_an_index_outside_a_sub_view_reads_other_in_the_interpreter():
    x = torch.randn(96, 32)
    for kernel in (shift_with_halo, shift_with_padding):
        y = torch.full_like(x, 7.0)
        kernel.interpret(x, y)
        assert torch.equal(y, _padded_shift(x)), kernel.name


def test_an_element_outside_the_view_gets_no_neighbouring_record():
    """Seeded bug (shift_with_halo: a halo tap replaced by padding): the verifier used to
    give thread 0's element the record of buffer row 31 (X[b*32 - 1], the halo row), so
    store.coords proved Y[b*32] = X[b*32 - 1] while the kernel stores 0 there. Its record
    must be undefined: no store claim can then rest on it."""
    model = Model(lower_only(shift_with_halo))
    (st,) = model.stores
    j = z3.Int("j")
    rec = st.tile.fn((z3.IntVal(0), j))   # thread 0: gather row -1
    s = z3.Solver()
    s.add(*model.premises, *st.site.constraints(), *rec.cond, j >= 0, j < 32, rec.defined)
    assert s.check() == z3.unsat, \
        f"the element gathered at row -1 of the view has a record: {rec.source}"
    # inside the view the records stay: thread 1 reads the block's row 0 (X[b*32])
    rec = st.tile.fn((z3.IntVal(1), j))
    s = z3.Solver()
    s.add(*model.premises, *st.site.constraints(), *rec.cond, j >= 0, j < 32)
    assert s.check(z3.Not(rec.defined)) == z3.unsat


def test_a_correct_padding_tap_is_not_blamed_on_the_neighbouring_row():
    """shift_with_padding is correct (the interpreter test above): the padding element must
    not carry buffer row 31's tags (the next block's X row), which store.coords would report
    as a wrong element."""
    report = verify.run(lower_only(shift_with_padding))
    assert not report.errors and not report.unknowns, \
        "\n".join(str(d) for d in report.errors + report.unknowns)
    assert "store.coords" in {f.code for f in report.proven}


@ag.kernel(threads=256)
def gather_across_roles(X: ag.Tensor["M", 32, ag.f32], Y: ag.Tensor["M", 32, ag.f32]):
    # one role writes the buffer, the other gathers it: the lowering's barrier (a warpgroup
    # barrier in the reader's role) orders neither role after the other's writes
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
    sX = ag.smem((128, 32), ag.f32)
    with ag.role("writer", warpgroups=1):
        ag.store_shared(sX.view(), ag.load(X, (b * 128, 0), (128, 32)))
    with ag.role("reader", warpgroups=1):
        t = ag.arange(128)[:, None]
        ag.store(Y, (b * 128, 0), ag.gather(sX.view(), (t, ag.arange(32)[None, :])))


def test_a_gather_of_another_roles_writes_is_reported():
    """Seeded bug: a cross-role store_shared -> gather, unordered. sync.exchange walks one
    role at a time, so its own walk sees no pending write: it must not prove the gather
    (it reports the other role's write), and smem.race reports the overlapping pair."""
    report = verify.run(lower_only(gather_across_roles))
    codes = {d.code for d in report.errors}
    assert {"sync.exchange", "smem.race"} <= codes, "\n".join(map(str, report.errors))
    bad = next(d for d in report.errors if d.code == "sync.exchange")
    assert "which role 'writer' writes" in bad.message and "test_smem_gather.py" in bad.message
    # the proven sync.exchange left is the writer's (its write), never the gather's
    assert not [f for f in report.proven if f.code == "sync.exchange"
                and "shared gather" in f.subject]


@ag.kernel(threads=32)
def shift_with_clamp(X: ag.Tensor["N", 32, ag.f32], Y: ag.Tensor["M", 32, ag.f32]):
    # seeded bug of shift_with_padding: the padding tap clamped to row 0, a real element
    ag.tag_tensor(X, src=lambda i, j: i + 1)
    ag.tag_tensor(Y, src=lambda i, j: i)
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((64, 32), ag.f32)
    ag.store_shared(sX.view().rows_slice(0, 32), ag.load(X, (b * 32 + 32, 0), (32, 32)))
    ag.store_shared(sX.view().rows_slice(32, 32), ag.load(X, (b * 32, 0), (32, 32)))
    t = ag.arange(32)[:, None]
    y = ag.gather(sX.view().rows_slice(32, 32),
                  (ag.maximum(t - 1, 0), ag.arange(32)[None, :]), other=0.0)
    ag.store(Y, (b * 32, 0), y)


def test_a_padding_tap_reading_a_real_element_is_reported():
    """Seeded bug: the padding tap reads the block's row 0 (X[b*32]) instead of `other`;
    store.coords names thread 0's element and its tags."""
    report = verify.run(lower_only(shift_with_clamp))
    bad = [d for d in report.errors if d.code == "store.coords"]
    assert bad and "tile element (0, " in bad[0].message, "\n".join(map(str, report.errors))


@ag.kernel(threads=32)
def write_once_gather_in_loop(X: ag.Tensor["M", 32, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
    (b,) = ag.grid(ag.cdiv(Y.shape[0], 32))
    sX = ag.smem((32, 32), ag.f32)
    ag.store_shared(sX.view(), ag.load(X, (b * 32, 0), (32, 32)))
    t = ag.arange(32)[:, None]
    for c in ag.range(2):
        x = ag.gather(sX.view(), ((t + 1 + c) % 32, ag.arange(32)[None, :]))
        ag.store(Y, (b * 32, c * 32), x)


def test_a_loop_gathering_a_buffer_written_before_it_waits_for_the_writes():
    """The buffer is written once, before the loop, and gathered in it: a barrier before the
    gather (the loop's walk to its back-edge fixpoint walks copies: it cleared the real
    walk's record of the write, and no barrier was put; seen in
    argus/kernels/conv_interleave.py's first form)."""
    kernel = lower_only(write_once_gather_in_loop)
    loop = next(op for op in kernel.walk() if isinstance(op, O.For))
    kinds = [type(op).__name__ for op in loop.body.ops
             if isinstance(op, (O.GroupBarrier, O.SmemGather))]
    assert kinds == ["GroupBarrier", "SmemGather"], kinds
    report = verify.run(kernel)
    assert "sync.exchange" in {f.code for f in report.proven}
    assert not [d for d in report.errors if d.code.startswith(("sync.", "smem."))], \
        "\n".join(map(str, report.errors))
    x = torch.randn(64, 32)
    y = torch.zeros(64, 64)
    write_once_gather_in_loop.interpret(x, y)
    for c in range(2):
        idx = torch.tensor([(b // 32) * 32 + (b % 32 + 1 + c) % 32 for b in range(64)])
        assert torch.equal(y[:, c * 32:(c + 1) * 32], x[idx])
