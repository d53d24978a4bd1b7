"""The FP8 forward at head dim 128 with P carried packed as e4m3 (packed_p, h313) at the wide
key blocks 192, 224 and 256, on the permuted V^T and the natural one: zero findings, full and
causal (h319). V^T's stage there is block_n / fp8_vt_atom(block_n) column atoms (3 x 64,
7 x 32, 2 x 128), one TMA box and one P V wgmma each. Before h319, 192 and 256 full had
k-once's cross-atom injectivity unknown (out of z3 budget: the stage's two writers left the
query outside the bit-vector tier, bvtier._guarded_bounds), and 192 / 224 causal a k-once
coverage warning (the keys past the diagonal were shown zero only with the block shifted by
one site's K, `check_wgmma._masked_past_the_loop`, now the block's: the sum over the atoms).
The seeded bugs the fixed checks still catch at these tiles:
tests/mutations/test_attention_fp8_wide_atoms.py."""

import time

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention import attention_kernel, fp8_vt_atom
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")

CASES = [(bn, causal, vt) for bn in (192, 224, 256) for causal in (False, True)
         for vt in ("pvt+", "")]


def fp8_wide(block_n: int, causal: bool, vt: str = "pvt+"):
    s = BENCH.fp8_variant_schedule(f"{vt}packp+bn{block_n}", 128, causal)
    assert s.packed_p and s.block_n == block_n and s.problems_for(128, ag.e4m3) == []
    return lower_only(attention_kernel(128, ag.e4m3, causal, False, s.permuted_vt), s=s)


@pytest.mark.parametrize("block_n,causal,vt", CASES,
                         ids=[f"bn{bn}-{'causal' if c else 'full'}-{'pvt' if vt else 'natural'}"
                              for bn, c, vt in CASES])
def test_fp8_packed_p_wide_blocks_verify_with_zero_findings(block_n, causal, vt):
    kernel = fp8_wide(block_n, causal, vt)
    t0 = time.perf_counter()
    report = verify.run(kernel)
    seconds = time.perf_counter() - t0
    assert report.diagnostics == [], "\n".join(str(d) for d in report.diagnostics)
    # the P V sites: one per V^T atom inside the loop and one per atom peeled behind it, and
    # their k-once coverage proven (under the causal mask: from the zeros past the loop)
    atoms = block_n // fp8_vt_atom(block_n)
    cover = [f for f in report.findings if f.code == "wgmma.k-once"
             and f"and {2 * atoms} wgmma sites" in f.subject and "covers [0, K)" in f.subject]
    assert cover and all(f.status == "proven" for f in cover), cover
    print(f"fp8 hd128 128 x {block_n} {'causal' if causal else 'full'} {vt or 'natural'}: "
          f"{seconds:.1f} s")
