"""FA3's early K release on the FP8 forward (fp8 bench token "ekr", h328): S_j and the V^T
atoms' P_{j-1} V_{j-1} groups issued in K_j's step inside V_{j-1}'s, K_j released after
wait_group(atoms) before the softmax of S_j, O rescaled after V_{j-1}'s wait 0 (the FP8
default's late rescale, rescale_after_pv: P V accumulates in place into the loop's own O).
Through argus.ops.attention_fp8 in the numpy interpreter against float64 on the dequantized
inputs, O and the LSE: head dim 128 at the default's wide key blocks (224 full: 7 atoms of
32 keys; 192 causal: 3 atoms of 64), the 128-key tile with P in fp32 (narrow), the early
rescale (oearly), head dims 64 and 256; ragged query and key lengths, several KV blocks a
tile (the loop's early-release body runs from the second), one block, rows that see no
key, GQA, both V^T orders."""

import pytest

from tests.interp.test_attention_fp8_interp import check_schedule
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

# (fp8 variant, head_dim, causal, (B, H, HKV, S, SK), permuted V^T)
CASES = [("pvt+ekr", 128, False, (1, 2, 1, 150, 700), True),      # 224 keys, 4 blocks
         ("pvt+ekr", 128, True, (1, 2, 2, 300, 500), True),       # 192 keys, diagonal
         ("ekr", 128, False, (1, 2, 2, 100, 470), False),         # natural V^T (shuffles)
         ("pvt+ekr+narrow", 128, True, (1, 2, 1, 260, 300), True),  # 128 keys, fp32 P
         ("pvt+ekr+oearly", 128, False, (1, 1, 1, 130, 500), True),  # O rescaled at issue
         ("pvt+ekr", 64, True, (2, 2, 1, 200, 333), True),
         ("pvt+ekr", 256, False, (1, 1, 1, 70, 200), True),       # 64-key blocks
         ("pvt+ekr", 128, True, (1, 1, 1, 300, 100), True),       # rows that see no key
         ("pvt+ekr", 128, False, (1, 2, 1, 64, 200), True)]       # one block: no loop trip


@pytest.mark.parametrize("variant,head_dim,causal,shape,permuted", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}-{s[3]}x{s[4]}"
                              for v, d, c, s, _ in CASES])
def test_fp8_early_k_release_against_float64(variant, head_dim, causal, shape, permuted,
                                              monkeypatch):
    schedule = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert schedule.early_k_release and schedule.fa3_overlap
    assert schedule.rescale_after_pv == ("oearly" not in variant)
    check_schedule(schedule, shape, head_dim, causal, permuted, monkeypatch)
