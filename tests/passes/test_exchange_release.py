"""lower/smem.py: a reduction's exchange (write partials, barrier, read, barrier) keeps its
second barrier (`Reduce.release`) only where the same op could rewrite its slots before any
other barrier: in a loop body with no other exchange at its top, or under an `ag.when` in a
loop. The online softmax's loop (two reductions a block) loses two of its four barriers a
block; a reduction that runs once loses its second one; the interpreter's numbers are the same
on the lowered kernels (float64 reference), and the rendered CUDA has the barriers the IR says.
"""

import numpy as np
import pytest

import argus as ag
from argus import analysis, codegen, lower
from argus.ir import ops as O
from argus.runtime import interp


def _lowered(fn, **consts):
    return lower.run(analysis.infer_layouts(fn.trace(**consts)))


def _exchanges(region):
    return [op for op in region.ops if isinstance(op, O.Reduce) and op.scratch]


@ag.kernel(threads=256)
def looped_sum(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", 1, ag.f32]):
    """One reduction in the loop: its next iteration rewrites the slots with no other barrier
    in between, so it keeps its second barrier."""
    (row,) = ag.grid(X.shape[0])
    acc = ag.full((1, 1), 0.0)
    for j in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, j * 1024), (1, 1024))
        acc = acc + x.sum(axis=1)
    ag.store(Y, (row, 0), acc)


@ag.kernel(threads=256)
def guarded_pair(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", 1, ag.f32]):
    """Two reductions in the loop, one under an ag.when: the guarded one may not run, so the
    unguarded one keeps its barrier; the guarded one keeps its own (not at the body's top)."""
    (row,) = ag.grid(X.shape[0])
    acc = ag.full((1, 1), 0.0)
    for j in ag.range(ag.cdiv(X.shape[1], 1024)):
        x = ag.load(X, (row, j * 1024), (1, 1024))
        acc = acc + x.sum(axis=1)
        with ag.when(j > 0):
            acc = ag.maximum(acc, x.max(axis=1))
    ag.store(Y, (row, 0), acc)


def test_the_online_softmax_loop_releases_no_slot_and_renders_two_barriers_a_block(examples):
    ex = examples("softmax_online")
    k = _lowered(ex.KERNEL, BN=4096)            # no ring: one copy of each loop body
    first, second = [op for op in k.walk() if isinstance(op, O.For)]
    reds = _exchanges(first.body)
    assert [r.fn for r in reds] == ["max", "sum"]
    assert [r.release for r in reds] == [False, False]
    text = codegen.render(k).text
    body = text.split(f"for (int v{first.var.id} =")[1].split(f"for (int v{second.var.id} =")[0]
    assert body.count("__syncthreads();") == 2


def test_a_reduction_that_runs_once_needs_no_release(examples):
    ex = examples("softmax")
    x, y = ex.make_inputs("small")
    k = _lowered(ex.KERNEL, **ex.constexprs(x, y)) if hasattr(ex, "constexprs") else \
        _lowered(ex.KERNEL)
    reds = [op for op in k.walk() if isinstance(op, O.Reduce) and op.scratch]
    assert reds and all(not r.release for r in reds)
    assert codegen.render(k).text.count("__syncthreads();") == len(reds)


def test_a_lone_reduction_in_a_loop_keeps_its_release():
    k = _lowered(looped_sum)
    (loop,) = [op for op in k.walk() if isinstance(op, O.For)]
    (red,) = [op for op in loop.body.walk() if isinstance(op, O.Reduce) and op.scratch]
    assert red.release


def test_a_guarded_reduction_does_not_release_its_neighbour():
    k = _lowered(guarded_pair)
    (loop,) = [op for op in k.walk() if isinstance(op, O.For)]
    (top,) = _exchanges(loop.body)
    (guarded,) = [op for op in loop.body.walk() if isinstance(op, O.Reduce) and op.scratch
                  and op is not top]
    assert top.release and guarded.release


@pytest.mark.parametrize("shape", [(3, 1500), (5, 5000)])
def test_lowered_kernels_keep_the_numbers(examples, shape):
    """The interpreter runs the lowered kernels (release cleared) against float64."""
    rng = np.random.default_rng(sum(shape))
    x = (rng.standard_normal(shape) * 4).astype(np.float32)
    ex = examples("softmax_online")
    y = np.full(shape, np.nan, np.float32)
    interp.run(_lowered(ex.KERNEL, BN=1024), x, y)
    ref = np.exp(x.astype(np.float64) - x.max(1, keepdims=True))
    ref /= ref.sum(1, keepdims=True)
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-7)
    y2 = np.full((shape[0], 1), np.nan, np.float32)
    interp.run(_lowered(guarded_pair), x, y2)
    want = np.zeros((shape[0], 1))
    for j in range(0, shape[1], 1024):
        blk = x[:, j:j + 1024].astype(np.float64)
        want = want + blk.sum(1, keepdims=True)
        if j:
            want = np.maximum(want, blk.max(1, keepdims=True))
    np.testing.assert_allclose(y2, want, rtol=1e-5, atol=1e-4)


@pytest.mark.skipif(not __import__("argus.runtime", fromlist=["x"]).nvrtc_available(),
                    reason="NVRTC not installed")
def test_sass_of_the_ringed_online_softmax_has_two_barriers_a_block(examples):
    """BN 2048: the reducing loop is rendered 4 times a trip (the ring, lower/prefetch.py),
    two barriers each; the normalizing loop has none. Each row of 8 partials is two LDS.128."""
    from argus.analysis import alignment
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    k = _lowered(examples("softmax_online").KERNEL, BN=2048)
    src = codegen.render(alignment.specialize(k, alignment.LaunchSpecialization(("X", "Y"),
                                                                                ("M", "N"))))
    binary = compile_cuda(src.text, [src.name], filename=f"{src.name}.cu", use_cache=False)
    sass = disassemble(binary.cubin)
    if sass is None:
        pytest.skip("no cuobjdump / nvdisasm to read the SASS")
    assert sass.count("BAR.SYNC") == 2 * 4
    assert sass.count("LDS.128") == 2 * 2 * 4 and " LDS " not in sass
