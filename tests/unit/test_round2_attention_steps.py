"""The attention bench steps of scripts/gpu_round2.sh that compare schedule variants: no two
variants of a step may be the same schedule at every head dim, length and mask it runs (such a
column pair measures the default against itself: when the hd64 / hd256 TMA-store rule became
the default, short55's `default,default+tma128` and short55b's `default,default+tma` turned
into exactly that, while the rule's H200 confirmation, direct store against the rule, was
owed)."""

import re
from pathlib import Path

import pytest

from tests.loading import load_script

ROOT = Path(__file__).resolve().parents[2]
BENCH = load_script("gpu_attention_bench")
STEPS = ("short55", "short55b", "packp56", "packp56b", "gqa56", "pp57", "pp57b", "pp57c",
         "lever59")


def _step(name: str) -> str:
    text = (ROOT / "scripts" / "gpu_round2.sh").read_text()
    m = re.search(rf"^\s*{name}\) (.*?);;", text, re.S | re.M)
    assert m, f"gpu_round2.sh has no step {name}"
    return m.group(1)


def _schedule(variant, d, causal, S):
    try:
        return BENCH.variant_schedule(variant, d, causal, S)
    except ValueError as exc:     # a refused cell is a value of its own
        return str(exc)


@pytest.mark.parametrize("name", STEPS)
def test_no_two_variants_of_a_step_coincide_everywhere(name):
    step = _step(name)
    dims = [int(x) for x in re.search(r"--dims (\S+)", step).group(1).split(",")]
    lengths = [int(x) for x in re.search(r"--lengths (\S+)", step).group(1).split(",")]
    variants = re.search(r"--variants (\S+)", step).group(1).split(",")
    cells = [(d, c, S) for d in dims for c in (False, True) for S in lengths]
    table = {v: [_schedule(v, d, c, S) for d, c, S in cells] for v in variants}
    for i, a in enumerate(variants):
        for b in variants[i + 1:]:
            assert table[a] != table[b], f"{name}: {a} and {b} are one schedule at {cells}"


FP8_STEPS = ("fp8pp57", "pp57c", "fp8late58", "fp8big58")


@pytest.mark.parametrize("name", FP8_STEPS)
def test_no_two_fp8_variants_of_a_step_coincide_everywhere(name):
    """The same for a step's --fp8 variants (fp8_variant_schedule), whose columns are the
    comparison there."""
    # the command that runs --fp8 (a step may run a bf16 comparison before it: pp57c)
    step = next(c for c in _step(name).split("run_step") if "--fp8" in c)
    dims = [int(x) for x in re.search(r"--dims (\S+)", step).group(1).split(",")]
    variants = re.search(r"--fp8 (\S+)", step).group(1).split(",")
    assert len(variants) > 1, f"{name}: one fp8 variant compares nothing"
    cells = [(d, c) for d in dims for c in (False, True)]
    table = {v: [BENCH.fp8_variant_schedule(v, d, c) for d, c in cells] for v in variants}
    for i, a in enumerate(variants):
        for b in variants[i + 1:]:
            assert table[a] != table[b], f"{name}: {a} and {b} are one schedule at {cells}"


def test_fence58_times_two_fences_of_one_schedule():
    """fence58's two variants are one schedule built twice: lowering's fence choice (P pinned)
    and, under the bench's `copyfence` token, the copy at every register-A fence."""
    from argus.kernels.attention import attention_kernel

    step = _step("fence58")
    assert re.search(r"--variants (\S+)", step).group(1).split(",") == \
        ["default", "default+copyfence"]
    for d in (64, 128, 256):
        assert BENCH.variant_schedule("default+copyfence", d, False, 4096) == \
            BENCH.variant_schedule("default", d, False, 4096)
    kernel, s = attention_kernel(256), BENCH.variant_schedule("default", 256, False, 4096)
    chosen = kernel.front_end(s=s).text
    with BENCH.a_fence("default+copyfence"):
        copied = kernel.front_end(s=s).text
    assert "ag::pin_operands(ra" in chosen
    assert "ag::pin_operands(ra" not in copied and "ag::fence_operands(ra" in copied
