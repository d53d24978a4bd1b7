"""The composer maps KernelBench tasks to Argus families honestly: square matmul -> the GEMM
family (a 6-term bf16 split of the fp32 operands, strict track), elementwise chains -> one fused DSL kernel (fp32,
strict track), anything else -> argus.compose (the composed family; NoTemplate with a clear
message from the matchers alone); and the generated ModelNew
computes the task's function (checked on the CPU through the interpreter)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from argus.agent.composer import NoTemplate, compose
from argus.agent.evaluate import import_source
from argus.agent.families import get_family

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT.parent / "shared" / "kernelbench" / "level1"
needs_kb = pytest.mark.skipif(not KB.exists(), reason="KernelBench tasks not found")


@needs_kb
def test_square_matmul_is_the_gemm_family():
    t = compose(KB / "1_Square_matrix_multiplication_.py")
    assert t.family == "gemm" and t.dims == {"M": 4096, "N": 4096, "K": 4096}
    assert (t.dtype, t.compute, t.track) == ("f32", "bf16x6", "strict")
    assert "strict track" in t.precision_note
    # keyed as the fp32 problem it is: argus.ops (bf16/fp16 inputs) never picks it up
    assert t.signature() == "1x4096x4096x4096:f32->f32:kn:tma"


@needs_kb
@pytest.mark.parametrize("name,ops", [("19_ReLU.py", 1), ("26_GELU_.py", 1),
                                      ("88_MinGPTNewGelu.py", 8), ("25_Swish.py", 2)])
def test_elementwise_tasks_fuse_into_one_kernel(name, ops):
    t = compose(KB / name)
    assert t.family == "elementwise" and t.ops == ops and t.track == "strict"
    assert t.expr.splitlines()[-1].startswith("y = ")


@needs_kb
@pytest.mark.parametrize("name", ["23_Softmax.py",
                                  "50_conv_standard_2D__square_input__square_kernel.py",
                                  "3_Batched_matrix_multiplication.py",
                                  "8_Matmul_with_irregular_shapes_.py", "42_Max_Pooling_2D.py",
                                  "89_cumsum.py"])
def test_unmapped_tasks_say_so(name):
    """The single-family matchers refuse these; by default the composer delegates them to
    argus.compose (the composed family), which lowers all of each (a lone convolution too,
    since argus.compose lowers convolutions to the implicit-GEMM kernel)."""
    from argus.agent.composer import compose_kernelbench

    with pytest.raises(NoTemplate, match="no Argus template|multiple of 16"):
        compose_kernelbench(KB / name, delegate=False)
    t = compose(KB / name)
    assert t.family == "composed" and "PARTIAL" not in t.note


def _solution(task, params, tmp_path):
    family = get_family(task.family)
    src = family.render_solution(task, family.render_kernel(task, params), params)
    return import_source(src, tmp_path, f"sol_{task.family}")


@needs_kb
def test_elementwise_solution_matches_the_model_on_cpu(tmp_path):
    from argus.bench.kernelbench.tasks import load_task

    task = compose(KB / "88_MinGPTNewGelu.py")
    mod = _solution(task, {"rows": 2, "bn": 512, "threads": 128}, tmp_path)
    ref = load_task(task.path).Model()
    x = torch.randn(37, 700)
    torch.testing.assert_close(mod.ModelNew()(x), ref(x), rtol=1e-5, atol=1e-6)


@needs_kb
@pytest.mark.parametrize("terms,chunks,low,high", [(6, 4, 0.0, 1e-6), (6, 1, 0.0, 1e-6),
                                                   (3, 1, 1e-6, 1e-5), (1, 1, 1e-4, 1e-2)])
def test_gemm_solution_matches_the_model_on_cpu(tmp_path, terms, chunks, low, high):
    """Through the interpreter (exact fp32 accumulation): 6 terms are fp32-accurate with or
    without K chunks; 3 terms lose ~4.5e-6 and one bf16 rounding ~2e-3."""
    task = compose(KB / "1_Square_matrix_multiplication_.py")
    family = get_family("gemm")
    params = dict(family.naive_params(task), split_terms=terms, k_chunks=chunks)
    mod = _solution(task, params, tmp_path)
    assert mod.BATCHED == (chunks > 1) and mod.SPLIT_TERMS == terms
    a, b = torch.randn(96, 256), torch.randn(256, 136)
    out = mod.ModelNew()(a, b)
    assert out.dtype == torch.float32
    ref = a.double() @ b.double()
    err = ((out.double() - ref).norm() / ref.norm()).item()
    assert low < err < high, err


def test_argus_example_files():
    g = compose(ROOT / "examples" / "gemm.py")
    assert g.family == "gemm" and g.origin == "argus" and g.opts["b_layout"] == "nk"
    e = compose(ROOT / "examples" / "elementwise.py")
    assert e.family == "kernel" and dict(e.constexprs) == {"ROWS": 4, "BN": 1024}
    assert dict(e.metrics)["bytes"] > 0
