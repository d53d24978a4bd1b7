"""scripts/gpu_attention_bench.py's "emuN" tokens (AttentionSchedule.exp2_emulate) without a
GPU: the bf16 and FP8 variants the GPU run compares set the count on the op's own schedules
and change nothing else, and an illegal count is refused before the run."""

import dataclasses

import pytest

from argus.kernels.attention import default_schedule, fp8_schedule
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")


@pytest.mark.parametrize("count", [0, 2, 4, 6])
@pytest.mark.parametrize("causal", [False, True])
def test_tokens_set_the_count_on_the_default(count, causal):
    for S in (1024, 4096, 16384):
        want = dataclasses.replace(default_schedule(64, causal, S), exp2_emulate=count)
        assert BENCH.variant_schedule(f"default+emu{count}", 64, causal, S) == want
    # on the 128-key FP8 tile ("narrow"): the wide default's 224 keys hold 28 groups of 8,
    # where only some counts spread evenly (the schedule refuses the others)
    want = dataclasses.replace(fp8_schedule(128, causal, wide_keys=False), exp2_emulate=count)
    assert BENCH.fp8_variant_schedule(f"narrow+emu{count}", 128, causal) == want
    assert BENCH.fp8_variant_schedule(f"default+narrow+emu{count}", 128, causal) == want
    # the kernel column of the op's own kernel (the permuted V^T: no P shuffles)
    assert BENCH.fp8_variant_schedule(f"narrow+pvt+emu{count}", 128, causal) == \
        dataclasses.replace(want, permuted_vt=True)


def test_an_illegal_count_is_refused():
    with pytest.raises(ValueError, match="exp2_emulate=17"):
        BENCH.fp8_variant_schedule("emu17", 128, False)
    with pytest.raises(ValueError, match="approx_exp2"):
        BENCH.variant_schedule("default+exact+emu4", 64, False, 4096)


def test_a_count_the_block_cannot_hold_is_refused_by_the_schedule():
    # 3 of every 16 groups over a 64-key block (8 groups) would emulate a quarter: the
    # schedule refuses it (codegen would, later); 128 keys hold every count
    base = default_schedule(64, False, 4096)
    narrow = dataclasses.replace(base, block_n=64, exp2_emulate=2)
    with pytest.raises(ValueError, match="exp2_emulate=3 at block_n=64"):
        dataclasses.replace(narrow, exp2_emulate=3)
    assert dataclasses.replace(base, block_n=128, exp2_emulate=3).exp2_emulate == 3
