"""A TMA copy whose innermost coordinate times the element size is not a multiple of 16 bytes
stops the H200 with CUDA_ERROR_ILLEGAL_INSTRUCTION (confirmed 2026-12-03 on the fp8 kernel's
f32 block-scale loads at K-block k; scripts/gpu_fp8_smem_diag2.py, docs/perf/fp8.md). The
verifier proves `coords[-1] * elem_bytes % 16 == 0` for every TMA load and store over all
runtime values (tma.inner-align), or names the instance that breaks it."""


import pytest

import argus as ag
from argus import verify

ROWS = 8


def _kernel(dtype, step: int, *, store: bool = False):
    """Loop k over column blocks of S (ROWS x 4 f32 or ROWS x 8 bf16 boxes, 16 B wide) and
    copy each to O by TMA; the load's inner coordinate is k * step (the store's k * cols,
    aligned), or with `store` the other way round."""
    cols = 16 // dtype.bytes
    load_step, store_step = (cols, step) if store else (step, cols)

    @ag.kernel(name=f"inner_align_{dtype}_{step}_{'store' if store else 'load'}")
    def kern(S: ag.Tensor["R", "C", dtype], O_: ag.Tensor["R", "C", dtype]):
        C = S.shape[1]
        ag.tag_assume(lambda: ag.sym(O_.shape[1]) == ag.sym(C))
        ag.tag_assume(lambda: ag.sym(O_.shape[0]) == ag.sym(S.shape[0]))
        (pid,) = ag.grid(1)
        sS = ag.smem((2, ROWS, cols), dtype)
        pipe = ag.pipeline(2, consumers=1)
        n = ag.cdiv(C, 16)
        with ag.role("producer", warpgroups=1, regs=40):
            for k in ag.range(n):
                with pipe.produce() as st:
                    ag.tma.load(sS[st], S, (pid * ROWS, k * load_step))
        with ag.role("consumer", warpgroups=1, regs=232):
            for k in ag.range(n):
                with pipe.consume() as st:
                    ag.tma.store(O_, (pid * ROWS, k * store_step), sS[st])
    return kern


def _align(report):
    return [d for d in report.diagnostics if d.code == "tma.inner-align"]


def _errors(report):
    return [d for d in _align(report) if d.severity == "error"]


@pytest.mark.parametrize("dtype, step", [(ag.f32, 4), (ag.bf16, 8)])
def test_aligned_runtime_inner_coordinate_is_proven(dtype, step):
    report = verify.run(_kernel(dtype, step), lower=True, include_proven=True)
    proven = [d for d in _align(report) if d.severity == "note"]
    assert proven and not _errors(report), [str(d) for d in _align(report)]


@pytest.mark.parametrize("dtype, step, nbytes", [(ag.f32, 1, 4), (ag.bf16, 4, 8)])
def test_misaligned_runtime_inner_coordinate_is_an_error(dtype, step, nbytes):
    report = verify.run(_kernel(dtype, step), lower=True)
    errs = _errors(report)
    assert len(errs) == 1, [str(d) for d in report.diagnostics]
    d = errs[0]
    text = str(d)
    # the smallest counterexample: the loop's second iteration, k = 1
    assert d.counterexample["inner_coordinate"] == step, d.counterexample
    assert d.counterexample["byte_offset"] == nbytes, d.counterexample
    assert "k@test_tma_inner_align.py:" in text and "= 1: the innermost coordinate" in text, text
    assert f"starts {nbytes} bytes into a row" in text, text
    assert "test_tma_inner_align.py" in str(d.loc), d.loc
    assert "multiple of" in d.fix, d.fix


def test_misaligned_tma_store_is_an_error():
    report = verify.run(_kernel(ag.f32, 2, store=True), lower=True)
    errs = _errors(report)
    assert len(errs) == 1 and "TMA store to O_" in str(errs[0]), \
        [str(d) for d in report.diagnostics]
    assert errs[0].counterexample["byte_offset"] == 8, errs[0].counterexample


def test_a_require_can_make_a_parameter_coordinate_aligned():
    """A coordinate made of a scalar parameter is aligned only under its precondition."""
    def make(require: bool):
        @ag.kernel(name=f"inner_align_param_{require}")
        def kern(S: ag.Tensor["R", "C", ag.f32], O_: ag.Tensor["R", "C", ag.f32], 
                 off: ag.Scalar[ag.i32]):
            ag.tag_assume(lambda: ag.sym(O_.shape[1]) == ag.sym(S.shape[1]))
            ag.tag_assume(lambda: ag.sym(O_.shape[0]) == ag.sym(S.shape[0]))
            if require:
                ag.require(ag.sym(off) % 4 == 0, "off is a multiple of 4")
            (pid,) = ag.grid(1)
            sS = ag.smem((2, ROWS, 4), ag.f32)
            pipe = ag.pipeline(2, consumers=1)
            with ag.role("producer", warpgroups=1, regs=40):
                with pipe.produce() as st:
                    ag.tma.load(sS[st], S, (pid * ROWS, off))
            with ag.role("consumer", warpgroups=1, regs=232):
                with pipe.consume() as st:
                    v = ag.load_shared(sS[st])
                    ag.store(O_, (pid * ROWS, 0), v)
        return kern

    assert not _errors(verify.run(make(True), lower=True))
    errs = _errors(verify.run(make(False), lower=True))
    assert errs and "off" in str(errs[0]), [str(d) for d in errs]


def test_the_fp8_kernels_scale_loads_at_k_are_refused(monkeypatch):
    """The kernel the trap came from, as it was before 77a82d4: SharedBlockScales.load
    starting its scale boxes at K block k (`kq = k`) instead of k - k % 4, 4 k bytes into
    an f32 row. The method's own source with that one line changed, so the rest (boxes,
    buffers, locations) is the library's."""
    import inspect
    import textwrap

    from argus.compiler import lower_only
    from argus.kernels import gemm_fp8
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule, SharedBlockScales

    s = Fp8GemmSchedule(promote=True, smem_scales=True, bn=128, stages=4)
    # fresh kernel functions (`__wrapped__`), not the cached one: its trace cache would keep
    # this schedule's trace for other tests that patch the module (test_tma_smem_align)
    clean = verify.run(lower_only(gemm_fp8.gemm_fp8_blockscaled_smem_kernel.__wrapped__(ag.bf16),
                                  s=s))
    assert not _errors(clean), [str(d) for d in _errors(clean)]
    src = textwrap.dedent(inspect.getsource(SharedBlockScales.load))
    fixed = "kq = k // SCALE_BOX * SCALE_BOX"
    assert fixed in src, "SharedBlockScales.load changed: update this replay"
    code = compile("\n" * (SharedBlockScales.load.__code__.co_firstlineno - 1)
                   + src.replace(fixed, "kq = k"), gemm_fp8.__file__, "exec")
    ns: dict = {}
    exec(code, vars(gemm_fp8), ns)  # noqa: S102 - the library's own method, one line changed
    monkeypatch.setattr(SharedBlockScales, "load", ns["load"])
    fresh = gemm_fp8.gemm_fp8_blockscaled_smem_kernel.__wrapped__(ag.bf16)
    errs = _errors(verify.run(lower_only(fresh, s=s)))
    assert errs, "the scale loads at block k verified clean"
    assert all(d.counterexample["byte_offset"] % 16 == 4 for d in errs), \
        "\n".join(d.message for d in errs)
    loaded = {d.message.split("TMA load from ")[1].split()[0] for d in errs}
    assert {"ScaleA", "ScaleB"} <= loaded and all("gemm_fp8.py" in str(d.loc) for d in errs), \
        "\n".join(d.message for d in errs)
