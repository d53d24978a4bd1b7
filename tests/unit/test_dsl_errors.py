"""Misuse of the DSL is a clear error at the user's line."""

import inspect

import pytest

import argus as ag
from argus.errors import CompileError, TraceError


def _line_of(marker: str, fn) -> int:
    lines, start = inspect.getsourcelines(fn)
    for i, line in enumerate(lines):
        if marker in line:
            return start + i
    raise AssertionError(marker)


def test_tensor_op_outside_kernel():
    with pytest.raises(TraceError, match="outside an @ag.kernel") as e:
        ag.zeros((64, 64))
    assert e.value.loc.file.endswith("test_dsl_errors.py")


def test_nonuniform_condition_around_wgmma_points_at_user_line():
    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        s = ag.smem((64, 64), ag.bf16, swizzle=128)
        acc = ag.zeros((64, 64), ag.f32)
        with ag.when(ag.thread_index() < 64):
            ag.wgmma(s, s, acc)  # MARK-wgmma

    with pytest.raises(TraceError, match="differs between threads") as e:
        bad.trace()
    assert e.value.loc.line == _line_of("MARK-wgmma", bad.fn)


def test_shape_that_cannot_tile_on_wgmma():
    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        s = ag.smem((128, 64), ag.bf16, swizzle=128)
        acc = ag.zeros((128, 64), ag.f32)
        ag.wgmma(s, s, acc)

    with pytest.raises(TraceError, match="64 rows"):
        bad.trace()


def test_swizzled_buffer_needs_span_rows():
    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        ag.smem((2, 64, 32), ag.bf16, swizzle=128)

    with pytest.raises(TraceError, match="128B-swizzled buffer needs rows of 128 bytes"):
        bad.trace()


def test_runtime_value_in_python_if():
    @ag.kernel
    def bad(X: ag.Tensor["M", ag.f32]):
        (pid,) = ag.grid(X.shape[0])
        if pid < 3:  # MARK-if
            pass

    with pytest.raises(TraceError, match="Python control flow") as e:
        bad.trace()
    assert e.value.loc.line == _line_of("MARK-if", bad.fn)


def test_missing_grid_and_bad_store_dtype():
    @ag.kernel
    def no_grid(X: ag.Tensor["M", "N", ag.f32]):
        ag.zeros((1, 128))

    with pytest.raises(TraceError, match="never declared its launch grid"):
        no_grid.trace()

    @ag.kernel
    def wrong_dtype(X: ag.Tensor["M", "N", ag.bf16]):
        (pid,) = ag.grid(1)
        ag.store(X, (0, 0), ag.zeros((1, 128)))

    with pytest.raises(TraceError, match="convert with"):
        wrong_dtype.trace()


def test_tma_outside_pipeline_step():
    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        s = ag.smem((64, 64), ag.bf16, swizzle=128)
        ag.tma.load(s, A, (0, 0))

    with pytest.raises(TraceError, match="pipe.produce"):
        bad.trace()


def test_missing_compile_time_argument():
    @ag.kernel
    def needs(X: ag.Tensor["M", ag.f32], BLOCK: int):
        ag.grid(1)

    with pytest.raises(TraceError, match="BLOCK"):
        needs.trace()


def test_lowering_rejects_too_much_shared_memory(examples):
    from argus.compiler import lower_only

    gemm = examples("gemm")
    with pytest.raises(CompileError, match="shared memory"):
        lower_only(gemm.KERNEL, s=gemm.GemmSchedule(stages=6))


def test_lowering_rejects_pipeline_consumer_mismatch():
    from argus.compiler import lower_only

    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1, regs=40):
            with pipe.produce() as st:
                ag.tma.load(sA[st], A, (0, 0))
        with ag.role("consumer", warpgroups=2, regs=232):
            with pipe.consume() as st:
                acc = ag.zeros((64, 64), ag.f32)
                ag.wgmma(sA[st], sA[st], acc)

    with pytest.raises(CompileError, match="consumers=2"):
        lower_only(bad)


def test_register_budget_over_sm():
    from argus.compiler import lower_only

    @ag.kernel
    def greedy(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        with ag.role("a", warpgroups=2, regs=256):
            pass
        with ag.role("b", warpgroups=1, regs=256):
            pass

    with pytest.raises(CompileError, match="registers"):
        lower_only(greedy)


def test_zero_by_wgmma_needs_a_pipelined_wgmma_accumulator():
    from argus.compiler import lower_only

    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        ag.grid(1)
        ag.zeros((64, 64), by_wgmma=True)

    with pytest.raises(CompileError, match="by_wgmma"):
        lower_only(bad)


def test_conditional_tma_copy_in_a_produce_step_is_rejected():
    from argus.compiler import lower_only

    @ag.kernel
    def bad(A: ag.Tensor["M", "K", ag.bf16]):
        (pid,) = ag.grid(1)
        sA = ag.smem((2, 64, 64), ag.bf16, swizzle=128)
        pipe = ag.pipeline(2, consumers=1)
        with ag.role("producer", warpgroups=1, regs=40):
            with pipe.produce() as st:
                with ag.when(pid < 1):
                    ag.tma.load(sA[st], A, (0, 0))  # MARK-guarded
        with ag.role("consumer", warpgroups=1, regs=232):
            with pipe.consume() as st:
                acc = ag.zeros((64, 64), ag.f32)
                ag.wgmma(sA[st], sA[st], acc)

    with pytest.raises(CompileError, match="under ag.when") as e:
        lower_only(bad)
    assert e.value.loc.line == _line_of("MARK-guarded", bad.fn)


def test_scalar_equality_records_a_comparison():
    import numpy as np

    @ag.kernel(threads=128)
    def first_row_only(Y: ag.Tensor["M", 128, ag.f32]):
        (pid,) = ag.grid(Y.shape[0])
        with ag.when(pid == 0):
            ag.store(Y, (pid, 0), ag.full((1, 128), 1.0))

    y = np.zeros((3, 128), dtype=np.float32)
    first_row_only.interpret(y)
    assert y[0].sum() == 128 and y[1:].sum() == 0


def test_interpreter_writes_numpy_outputs_back_and_checks_dtypes():
    import numpy as np

    from argus.errors import LaunchError

    @ag.kernel(threads=128)
    def fill(Y: ag.Tensor["M", 128, ag.f16]):
        (pid,) = ag.grid(Y.shape[0])
        ag.store(Y, (pid, 0), ag.full((1, 128), 2.0, ag.f16))

    y = np.zeros((2, 128), dtype=np.float16)
    fill.interpret(y)
    assert (y == 2).all()
    with pytest.raises(LaunchError, match="expected f16"):
        fill.interpret(np.zeros((2, 128), dtype=np.int32))


def test_negative_offsets_are_masked_in_generated_code():
    from argus import codegen
    from argus.compiler import lower_only

    @ag.kernel(threads=128)
    def shifted(X: ag.Tensor["M", 128, ag.f32], Y: ag.Tensor["M", 128, ag.f32]):
        (pid,) = ag.grid(X.shape[0])
        ag.store(Y, (pid, 0), ag.load(X, (pid - 1, 0), (1, 128), other=-7.0))

    text = codegen.render(lower_only(shifted)).text
    assert ">= 0 &&" in text
