"""lower/prefetch.py: a global tile load in a runtime loop is software-pipelined through a ring
of `depth` register blocks (var / assign in the IR), and codegen renders the loop depth + 1
times per trip so the ring's rotation is a renaming. The rewrite keeps the numbers (the
interpreter runs the lowered kernel against float64, with trip counts that are not a multiple
of the unroll and shorter than the ring), the verifier proves the pipelined kernel clean and
catches a prefetch of the wrong block and a ring rotated in the wrong order, NVRTC compiles the
rendered loop for sm_90a (and, where a disassembler is installed, its SASS copies no loaded
register), a load whose offsets the loop does not change is hoisted before it, not ringed, and
the pass leaves alone what it may not move: a load of a tensor the loop stores to, a load whose
offset is a loop-carried scalar, a load in a warp role.
"""

import dataclasses
import re

import numpy as np
import pytest

import argus as ag
from argus import analysis, lower
from argus.ir import ops as O
from argus.ir.core import Region
from argus.ir.types import TileType
from argus.lower import prefetch
from argus.runtime import interp
from argus.verify import check


def _lowered(fn, **consts):
    return lower.run(analysis.infer_layouts(fn.trace(**consts)))


def _loops(kernel):
    return [op for op in kernel.walk() if isinstance(op, O.For)]


@pytest.fixture
def online(examples):
    return examples("softmax_online")


def _chain(loop, start, n):
    """The values start + k * loop.step (k = 1 .. n) computed by `next` adds in the loop body
    (n = 0: `start` itself), or None when the chain is not there."""
    cur = start
    adds = {op.lhs.id: op for op in loop.body.ops if isinstance(op, O.Arith) and
            op.fn == "add" and op.rhs.id == loop.step.id}
    for _ in range(n):
        if cur.id not in adds:
            return None
        cur = adds[cur.id].result
    return cur


def test_blocks_wider_than_the_budget_are_left_alone(online):
    """BN 4096 is 16 registers per thread per block: measured on the H200 faster without a
    ring (90.2% of copy bandwidth) than with one 1, 2 or 3 deep (87.9 / 80.2 / 77.6%)."""
    k = _lowered(online.KERNEL, BN=4096)
    assert [loop.unroll for loop in _loops(k)] == [1, 1]
    assert not [op for op in k.body.ops if isinstance(op, O.Load)]   # no ring blocks ahead
    assert [sum(isinstance(op, O.Load) for op in loop.body.ops) for loop in _loops(k)] == [1, 1]


@pytest.mark.parametrize("bn, depth", [(1024, 3), (2048, 3)])
def test_both_passes_of_the_online_softmax_rotate_a_ring_of_blocks(online, bn, depth):
    k = _lowered(online.KERNEL, BN=bn)
    loops = _loops(k)
    assert len(loops) == 2
    assert [loop.unroll for loop in loops] == [depth + 1, depth + 1]
    top = list(k.body.ops)
    for loop in loops:
        (load,) = [op for op in loop.body.ops if isinstance(op, O.Load)]
        # the block issued in iteration j is j + depth*step, times BN
        ahead = _chain(loop, loop.var, depth)
        col = next(op for op in loop.body.ops if op.results() and
                   op.results()[0].id == load.offsets[-1].id)
        assert isinstance(col, O.Arith) and col.fn == "mul" and col.lhs.id == ahead.id
        # the ring: depth variables before the loop, rotated in order, the last from the load
        ring_ids = [a.dst.id for a in loop.body.ops if isinstance(a, O.Assign)
                    and a.dst.type == load.result.type]
        assert len(ring_ids) == depth
        rotate = [a for a in loop.body.ops if isinstance(a, O.Assign) and a.dst.id in ring_ids]
        assert [a.src.id for a in rotate] == ring_ids[1:] + [load.result.id]
        inits = {op.result.id: op for op in top if isinstance(op, O.Var)}
        assert all(r in inits for r in ring_ids)
        # nothing in the body reads the load's result but the rotation (it is `depth` ahead)
        readers = [op for op in loop.body.walk() if load.result.id in
                   {v.id for v in op.operands()}]
        assert readers == [rotate[-1]]
    assert sum(isinstance(op, O.Load) for op in top) == 2 * depth  # the ring's first blocks


# trip counts: 5 (a ragged unroll: 4 + 1), 3 and 2 (fewer than the ring), 1, and 8 (two trips)
@pytest.mark.parametrize("bn, rows, cols", [(1024, 9, 5000), (2048, 9, 5000), (1024, 3, 1500),
                                            (4096, 3, 5000), (1024, 2, 1000), (1024, 2, 8192)])
def test_the_lowered_kernel_computes_the_softmax(online, bn, rows, cols):
    x = (np.random.default_rng(rows * cols).standard_normal((rows, cols)) * 4).astype(np.float32)
    y = np.full_like(x, np.nan)
    interp.run(_lowered(online.KERNEL, BN=bn), x, y)
    ref = np.exp(x - x.max(1, keepdims=True).astype(np.float64))
    ref /= ref.sum(1, keepdims=True)
    assert np.abs(y - ref).max() < 1e-6


@pytest.mark.parametrize("bn", [1024, 2048, 4096])
def test_the_verifier_proves_the_prefetched_kernel(online, bn):
    assert [d for d in check(_lowered(online.KERNEL, BN=bn))
            if d.severity in ("error", "unknown")] == []


def _with_loop(k, loop, new_loop):
    return dataclasses.replace(k, body=Region(tuple(new_loop if op is loop else op
                                                    for op in k.body.ops)))


def test_the_verifier_catches_a_ring_rotated_in_the_wrong_order(online):
    k = _lowered(online.KERNEL, BN=2048)
    loop = _loops(k)[-1]   # the normalizing pass: its stores check the coordinates
    ops = list(loop.body.ops)
    rotate = [i for i, op in enumerate(ops) if isinstance(op, O.Assign)]
    # last first: b_{d-1} = the new block, then b_{d-2} = b_{d-1} (already the new one) ...
    for i, j in zip(rotate, reversed(rotate)):
        ops[i] = loop.body.ops[j]
    bad = _with_loop(k, loop, dataclasses.replace(loop, body=Region(tuple(ops))))
    errors = [d for d in check(bad) if d.severity == "error"]
    assert errors and "store to Y" in errors[0].message


def test_the_verifier_catches_a_prefetch_of_the_wrong_block(online):
    k = _lowered(online.KERNEL, BN=2048)
    loop = _loops(k)[-1]   # the normalizing pass: its stores check the coordinates

    def wrong(op):          # next = j + start (= j): each iteration reloads its own block
        if isinstance(op, O.Arith) and op.fn == "add" and op.lhs.id == loop.var.id:
            return dataclasses.replace(op, rhs=loop.start)
        return op
    bad_loop = dataclasses.replace(loop, body=Region(tuple(wrong(op) for op in loop.body.ops)))
    errors = [d for d in check(_with_loop(k, loop, bad_loop)) if d.severity == "error"]
    assert errors and "store to Y" in errors[0].message


@ag.kernel(threads=256)
def in_place(X: ag.Tensor["M", "N", ag.f32]):
    (row,) = ag.grid(X.shape[0])
    for j in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, j * 1024), (1, 1024))
        ag.store(X, (row, j * 1024), x * 2.0)


@ag.kernel(threads=256)
def carried_offset(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    (row,) = ag.grid(X.shape[0])
    col = row * 0
    for _ in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, col), (1, 1024))
        ag.store(Y, (row, col), x)
        col = col + 1024


@ag.kernel(threads=256)
def too_wide(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    (row,) = ag.grid(X.shape[0])
    for j in ag.range(ag.cdiv(X.shape[1], 8192)):
        x = ag.load(X, (row, j * 8192), (1, 8192))   # 32 registers per thread: over budget
        ag.store(Y, (row, j * 8192), x)


@pytest.mark.parametrize("fn", [in_place, carried_offset, too_wide])
def test_loads_it_may_not_move_stay_in_place(fn):
    k = _lowered(fn)
    (loop,) = _loops(k)
    assert not [op for op in k.body.ops if isinstance(op, O.Var)
                and isinstance(op.result.type, TileType)]
    assert any(isinstance(op, O.Load) for op in loop.body.ops)
    assert not any(isinstance(op, O.Load) for op in k.body.ops)


def test_the_library_gemm_is_untouched():
    from argus.kernels.gemm import gemm

    k = analysis.infer_layouts(gemm.trace())   # its loops are in warp roles
    assert prefetch.run(k) == k


@ag.kernel(threads=256)
def row_dot(X: ag.Tensor["M", "N", ag.f32], W: ag.Tensor["M", "N", ag.f32],
            Y: ag.Tensor["M", 1, ag.f32]):
    """Two loads in one loop (each its own ring), and a loop of step 2 (j = 2b for block b)."""
    (row,) = ag.grid(X.shape[0])
    acc = ag.full((1, 1), 0.0)
    for j in ag.range(0, 2 * ag.cdiv(X.shape[1], 512), 2):
        x = ag.load(X, (row, j * 256), (1, 512))
        w = ag.load(W, (row, j * 256), (1, 512))
        acc = acc + (x * w).sum(axis=1)
    ag.store(Y, (row, 0), acc)


@pytest.mark.parametrize("cols", [512, 2048, 5000, 9000])
def test_two_loads_and_a_step_of_two(cols):
    k = _lowered(row_dot)
    (loop,) = _loops(k)
    assert loop.unroll == 4   # 3 blocks ahead
    assert sum(isinstance(op, O.Load) for op in loop.body.ops) == 2
    assert [d for d in check(k) if d.severity in ("error", "unknown")] == []
    rng = np.random.default_rng(cols)
    x, w = (rng.standard_normal((3, cols)).astype(np.float32) for _ in range(2))
    y = np.full((3, 1), np.nan, np.float32)
    interp.run(k, x, w, y)
    ref = (x.astype(np.float64) * w).sum(1, keepdims=True)
    assert np.abs(y - ref).max() < 1e-4


@ag.kernel(threads=256)
def row_logsumexp(X: ag.Tensor["M", "N", ag.f32], MX: ag.Tensor["M", 1, ag.f32],
                  Y: ag.Tensor["M", 1, ag.f32]):
    """logsumexp's sum pass as compose fuses it (KernelBench L2/42, 43, 84, 92): the finished
    row max is loaded in every block, at offsets the loop does not change."""
    (row,) = ag.grid(X.shape[0])
    acc = ag.full((1, 1), 0.0)
    for j in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, j * 1024), (1, 1024), other=float("-inf"))
        m = ag.load(MX, (row, 0), (1, 1))
        acc = acc + ag.exp(x - m).sum(axis=1)
    ag.store(Y, (row, 0), ag.log(acc) + ag.load(MX, (row, 0), (1, 1)))


@ag.kernel(threads=256)
def broadcast_row(B: ag.Tensor["M", 1024, ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    """Only a loop-invariant load: hoisted, nothing to ring."""
    (row,) = ag.grid(Y.shape[0])
    for j in ag.range(ag.cdiv(Y.shape[1], 1024)):
        b = ag.load(B, (row, 0), (1, 1024))
        ag.store(Y, (row, j * 1024), b * 2.0)


def _load_of(ops, name):
    return [op for op in ops if isinstance(op, O.Load) and op.tensor.hint == name]


def test_a_loop_invariant_load_is_hoisted_not_ringed():
    """The row max's load reads the same block in every iteration: one load before the loop
    (a ring would hold 3 copies of it and reload it every iteration), while X's blocks are
    ringed; the body reads the hoisted block. The verifier proves the kernel: softmax.stats
    read the ring's copies as 3 different maxima (the false alarm of issue 13)."""
    k = _lowered(row_logsumexp)
    (loop,) = _loops(k)
    assert loop.unroll == 4 and len(_load_of(loop.body.ops, "X")) == 1
    assert _load_of(loop.body.ops, "MX") == []
    top = list(k.body.ops)
    hoisted = _load_of(top[:top.index(loop)], "MX")
    assert len(hoisted) == 1
    readers = [op for op in loop.body.walk()
               if hoisted[0].result.id in {v.id for v in op.operands()}]
    assert readers and not any(isinstance(op, O.Assign) for op in readers)
    assert len(_load_of(top[:top.index(loop)], "X")) == 3     # X's ring
    assert [d for d in check(k) if d.severity in ("error", "unknown")] == []


@pytest.mark.parametrize("rows, cols", [(3, 5000), (2, 1000), (2, 3000), (1, 8192)])
def test_the_hoisted_kernel_computes_logsumexp(rows, cols):
    x = (np.random.default_rng(cols).standard_normal((rows, cols)) * 4).astype(np.float32)
    mx = x.max(1, keepdims=True)
    y = np.full((rows, 1), np.nan, np.float32)
    interp.run(_lowered(row_logsumexp), x, mx, y)
    ref = np.log(np.exp(x.astype(np.float64) - mx).sum(1, keepdims=True)) + mx
    assert np.abs(y - ref).max() < 1e-5


def test_a_loop_with_only_an_invariant_load_is_not_unrolled():
    k = _lowered(broadcast_row)
    (loop,) = _loops(k)
    assert loop.unroll == 1 and _load_of(loop.body.ops, "B") == []
    assert len(_load_of(k.body.ops, "B")) == 1
    assert not [op for op in k.walk() if isinstance(op, O.Var)
                and isinstance(op.result.type, TileType)]
    b = np.random.default_rng(0).standard_normal((3, 1024)).astype(np.float32)
    y = np.full((3, 2500), np.nan, np.float32)
    interp.run(k, b, y)
    assert np.array_equal(y, np.tile(b * 2.0, 3)[:, :2500])
    assert [d for d in check(k) if d.severity == "error"] == []


def test_codegen_renders_the_ring_loop_unrolled(online):
    from argus import codegen

    k = _lowered(online.KERNEL, BN=2048)
    text = codegen.render(k).text
    assert text.count("// unrolled 4x (lower/prefetch.py)") == 2
    assert text.count(" break;") == 2 * 3             # between the 4 copies of each pass
    # each reduction's scratch is one buffer of the smem plan, declared once (not per copy)
    scratch = [v for op in k.walk() if isinstance(op, O.Reduce) for v in op.scratch]
    assert scratch and all(text.count(f"* const s{v.id} = ") == 1 for v in scratch)
    assert "__shared__ float" not in text


_INSN = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(@!?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.[\w.]*)?\s*([^;]*);")


def _ldg_copies(sass: str) -> list[str]:
    """Register copies (MOV, IMAD.MOV) whose source was last written, in program text order, by
    a global load: the copy waits for that load. Text order is followed up to an unconditional
    jump (what follows is reached by a label). The one-block-ahead form of the pass had them at
    the loop's back edge (MOV R5, R9 ... of the block loaded in that iteration)."""
    last: dict[str, str] = {}
    out = []
    for m in _INSN.finditer(sass):
        pred, opc, mods, args = m.group(1), m.group(2), m.group(3) or "", m.group(4)
        if opc in ("BRA", "EXIT", "RET") and not pred:
            last.clear()
            continue
        ops = [a.strip() for a in args.split(",")]
        src = ops[1] if opc == "MOV" and len(ops) == 2 else \
            ops[3] if opc == "IMAD" and mods.startswith(".MOV") and len(ops) == 4 else None
        if src is not None and last.get(src) == "LDG":
            out.append(m.group(0))
        if opc.startswith(("ST", "BAR", "BRA", "RED", "ATOM", "CALL", "BSYNC", "BSSY", "WARP")) \
                or not re.fullmatch(r"R\d+", ops[0]):
            continue
        width = 4 if ".128" in mods else 2 if ".64" in mods else 1
        for i in range(width):
            last[f"R{int(ops[0][1:]) + i}"] = opc
    return out


@pytest.mark.skipif(not __import__("argus.runtime", fromlist=["x"]).nvrtc_available(),
                    reason="NVRTC not installed")
@pytest.mark.parametrize("bn", [1024, 2048])
def test_nvrtc_compiles_the_ring_and_its_sass_copies_no_loaded_register(online, bn):
    from argus import codegen
    from argus.analysis import alignment
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    k = _lowered(online.KERNEL, BN=bn)
    # the variant the benchmark launches: 16-byte aligned tensors, N a multiple of 16
    src = codegen.render(alignment.specialize(k, alignment.LaunchSpecialization(("X", "Y"),
                                                                                ("M", "N"))))
    binary = compile_cuda(src.text, [src.name], filename=f"{src.name}.cu", use_cache=False)
    assert binary.resource(src.name).spill_stores == 0
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no cuobjdump / nvdisasm to read the SASS")
    assert "LDG.E.128" in sass
    assert _ldg_copies(sass) == []


@ag.kernel(threads=256)
def invariant_accumulate(X: ag.Tensor["M", 1024, ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    """X's row is read and written back in every iteration (a running sum kept in global
    memory): the same offsets each time, but each read must see the last write."""
    (row,) = ag.grid(X.shape[0])
    for j in ag.range(ag.cdiv(Y.shape[1], 1024)):
        acc = ag.load(X, (row, 0), (1, 1024))
        y = ag.load(Y, (row, j * 1024), (1, 1024))
        ag.store(X, (row, 0), acc + y)


@ag.kernel(threads=256)
def invariant_stored_under_if(X: ag.Tensor["M", 1024, ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    """The write-back sits in a `when` of the body: still a store to X in the loop."""
    (row,) = ag.grid(X.shape[0])
    for j in ag.range(ag.cdiv(Y.shape[1], 1024)):
        acc = ag.load(X, (row, 0), (1, 1024))
        y = ag.load(Y, (row, j * 1024), (1, 1024))
        with ag.when(j > 0):
            ag.store(X, (row, 0), acc + y)


@ag.kernel(threads=256)
def invariant_carried_offset(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
    """The offset is a carried scalar that the body reassigns (here to itself plus nothing the
    pass can see is zero): no loop variable in it, but not the same in every iteration."""
    (row,) = ag.grid(X.shape[0])
    col = row * 0
    for j in ag.range(ag.cdiv(Y.shape[1], 1024)):
        x = ag.load(X, (row, col), (1, 1024))
        ag.store(Y, (row, j * 1024), x)
        col = col + 1024


@pytest.mark.parametrize("fn", [invariant_accumulate, invariant_stored_under_if,
                                invariant_carried_offset])
def test_an_invariant_looking_load_that_the_loop_changes_is_not_hoisted(fn):
    """Review 2026-12-02: a load whose offsets name no loop variable is hoisted only when
    nothing in the loop stores to its tensor (anywhere in the body) and no offset is
    carried; hoisting these would read X's row once, before the loop's writes."""
    k = _lowered(fn)
    (loop,) = _loops(k)
    top = list(k.body.ops)
    assert _load_of(top[:top.index(loop)], "X") == []
    assert len([op for op in loop.body.walk() if isinstance(op, O.Load)
                and op.tensor.hint == "X"]) == 1


def test_the_in_place_accumulation_computes_the_running_sum():
    y = np.random.default_rng(1).standard_normal((2, 3072)).astype(np.float32)
    x = np.zeros((2, 1024), np.float32)
    interp.run(_lowered(invariant_accumulate), x, y)
    assert np.allclose(x, y.reshape(2, 3, 1024).sum(1), atol=1e-5)
