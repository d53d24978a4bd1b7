"""The decode variants of scripts/gpu_attention_bench.py --decode-variants (decode_variant):
each token maps to the schedule, split count and launches the bench times beside the default,
so a row of the GPU table says what ran (docs/perf/attention.md, "Decode: bytes in flight")."""
from pathlib import Path

import pytest

from argus.kernels.attention_decode import default_decode_schedule, num_splits
from tests.loading import load_script



@pytest.fixture(scope="module")
def bench():
    return load_script("gpu_attention_bench")


@pytest.fixture(scope="module")
def decode_variant(bench):
    return bench.decode_variant


def test_default_and_schedule_fields(decode_variant):
    assert decode_variant("default", 128, 4) == (None, None, None)
    s, splits, launches = decode_variant("bn176+st2", 128, 4)
    assert (s.block_n, s.stages, splits, launches) == (176, 2, None, None)
    assert s.problems_for(128) == []                 # 176-key blocks fit, 2 stages
    s, splits, _ = decode_variant("s1+stagger2", 128, 4)
    assert s.stagger == 2 and s.block_n == default_decode_schedule(128, 4).block_n
    assert splits == 1
    s, splits, _ = decode_variant("streams2+stagger8", 128, 4)
    assert (s.streams, s.stagger, s.stages, splits) == (2, 8, 3, None)
    s, _, _ = decode_variant("wg2+st2+exact", 128, 4)
    assert (s.consumers, s.stages, s.approx_exp2) == (2, 2, False)


def test_occupancy_rule_splits(decode_variant):
    """ctaN: num_splits at N CTAs per SM for the case's units and keys, over the variant's
    block size: batch 1 x 8 kv heads at 8k keys takes 32 splits (16 by the op's rule)."""
    assert decode_variant("cta2", 128, 4, units=8, keys=8192)[1] == 32
    assert decode_variant("cta1", 128, 4, units=8, keys=8192)[1] == num_splits(8, 64) == 16
    assert decode_variant("cta2", 128, 4, units=256, keys=8192)[1] == 1
    # 64-key blocks: 128 blocks of 8k keys, the same 32 splits of 4 blocks each
    s, splits, _ = decode_variant("bn64+st6+cta2", 128, 4, units=8, keys=8192)
    assert s.block_n == 64 and splits == num_splits(8, 128, ctas_per_sm=2) == 32


def test_occupancy_and_fused_variants(decode_variant):
    """occ2: two CTAs an SM (the hint, the consumer's registers at 256 - 24, the op's split
    rule at 2 CTA slots: schedule.ctas_per_sm); fused: the combine in the split kernel, its
    rings shallower where the merge's buffers need it; both legal schedules."""
    s, splits, _ = decode_variant("bn64+st2+occ2", 128, 4, units=8, keys=8192)
    assert (s.block_n, s.stages, s.ctas_per_sm, s.consumer_regs, splits) == (64, 2, 2, 232,
                                                                             None)
    assert s.problems_for(128) == []
    s, _, _ = decode_variant("fused", 128, 4)
    assert s.fused_combine and s.problems_for(128) == [] and s.consumers == 1
    s, _, _ = decode_variant("bn64+st2+occ2+fused", 128, 64)
    assert (s.ctas_per_sm, s.fused_combine, s.stages) == (2, True, 2)
    assert s.problems_for(128) == []


def test_nocombine_times_the_first_launch(decode_variant):
    assert decode_variant("nocombine", 128, 4) == (None, None, 1)
    assert decode_variant("s32+nocombine", 128, 4)[1:] == (32, 1)


@pytest.mark.parametrize("variant,words", [("bn64+foo", "unknown token 'foo'"),
                                           ("cta2+s4", "ctaN and sN both set the splits"),
                                           ("stagger", "unknown token 'stagger'")])
def test_bad_variants_say_which_token(decode_variant, variant, words):
    with pytest.raises(ValueError, match=words):
        decode_variant(variant, 128, 4, units=8, keys=8192)


def test_tables_from_a_saved_run(bench, tmp_path, capsys):
    """--table-from: the tables of a run cut short, variants and backends read back from the
    saved rows' keys; `x kernel` is the default kernel's time over the column's."""
    import json

    row = {"head_dim": 128, "B": 32, "SK": 8192, "S": 1, "splits": 1, "rel_error": 2e-3,
           "copy_tbps": 4.2, "copy_ms": 0.5, "ours_ms": 0.28, "ours_pct": 91.0,
           "kernel_ms": 0.277, "kernel_pct": 92.0, "kernel_stagger2_ms": 0.25,
           "kernel_stagger2_pct": 102.0, "kernel_stagger2_rel_error": 2e-3,
           "kernel_cta2_error": "LaunchError: x", "cudnn_ms": 0.249, "cudnn_pct": 102.0}
    path = tmp_path / "attention_decode_bench.json"
    path.write_text(json.dumps([row]))
    assert bench.decode_table_from(path) == 0
    out = capsys.readouterr().out
    assert "| stagger2 % | cta2 % | cudnn % |" in out
    assert "| stagger2 x kernel | cta2 x kernel | cudnn x kernel |" in out
    assert f"| 32 | 8192 | 1 | 277.0 | {0.277 / 0.25:.3f} | n/a | {0.277 / 0.249:.3f} |" in out
