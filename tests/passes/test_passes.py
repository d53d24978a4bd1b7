"""Per-pass text-in/text-out tests: each lowering pass's output on each example is a golden
IR file (tests/passes/golden/<example>.<step>.ir). Regenerate with ARGUS_ACCEPT=1 and review
the diff like code."""

from pathlib import Path

import pytest

from argus import analysis, config, lower
from argus.ir import parse_kernel, print_kernel

GOLDEN = Path(__file__).parent / "golden"
EXAMPLES = ["elementwise", "softmax", "gemm"]


def _steps(kernel):
    out = [("infer_layouts", analysis.infer_layouts(kernel))]
    lower.run(out[0][1], on_step=lambda name, k: out.append((name, k)))
    return out


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_pass_matches_golden(examples, name):
    kernel = examples(name).KERNEL.trace()
    for step, k in _steps(kernel):
        text = print_kernel(k, with_locs=False)
        path = GOLDEN / f"{name}.{step}.ir"
        if config.accept_golden():
            GOLDEN.mkdir(exist_ok=True)
            path.write_text(text)
        assert path.exists(), f"missing golden {path.name}; create it with ARGUS_ACCEPT=1"
        assert text == path.read_text(), f"{path.name} changed; rerun with ARGUS_ACCEPT=1"


@pytest.mark.parametrize("name", EXAMPLES)
def test_passes_are_text_functions(examples, name):
    """Running a pass on the parsed text of its input gives the same text as the golden."""
    kernel = analysis.infer_layouts(examples(name).KERNEL.trace())
    current = parse_kernel(print_kernel(kernel, with_locs=False))
    for step, fn in lower.PASSES:
        current = fn(parse_kernel(print_kernel(current, with_locs=False)))
        assert print_kernel(current, with_locs=False) == (GOLDEN / f"{name}.{step}.ir").read_text()


def test_pipeline_pass_derives_protocol(examples):
    k = lower.run(analysis.infer_layouts(examples("gemm").KERNEL.trace()))
    from argus.ir import ops as O

    produce = [op for op in k.walk() if isinstance(op, O.Produce)]
    consume = [op for op in k.walk() if isinstance(op, O.Consume)]
    assert produce[0].tx_bytes == (128 * 64 + 256 * 64) * 2
    assert produce[0].parity_expr == "((n / S) & 1) ^ 1"
    assert consume[0].parity_expr == "(n / S) & 1" and consume[0].arrivals == 2
    wg = [op for op in k.walk() if isinstance(op, O.Wgmma)][0]
    assert wg.a_desc == (128, 16, 1024, 32) and wg.b_desc == (128, 16, 1024, 32)
    plan = dict((vid, (off, align)) for vid, off, _, align in k.attr("smem_plan"))
    assert all(off % align == 0 for off, align in plan.values())
