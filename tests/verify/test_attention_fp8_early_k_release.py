"""FA3's early K release on the FP8 forward (fp8 bench token "ekr", h328) verifies with zero
findings: head dim 128 at the default's wide key blocks (224 full: 7 V^T atoms of 32 keys;
192 causal: 3 of 64), the natural V^T, the 128-key tile with fp32 P, the early rescale, the
LSE kernel, head dims 64 and 256. O is rescaled after P V retires (rescale_after_pv, the FP8
default), so the loop's P V atoms accumulate in place into the loop's own O and the peeled last
P V into the same variable after the loop: k-once proves the chain of both (check_wgmma.
_siblings joins sites of one variable over different loops, h328; before, each stood alone and
the peeled one was reported as missing the loop's keys). sync.acc proves each atom's register
A retired before the end of V's step, the region that declares it. The seeded bugs:
tests/mutations/test_attention_fp8_early_k_release.py."""

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel, fp8_vt_atom
from tests.loading import load_script
from tests.mutations.seeded import line_of

BENCH = load_script("gpu_attention_bench")

# (fp8 variant, head_dim, causal, lse)
CASES = [("pvt+ekr", 128, False, False), ("pvt+ekr", 128, True, False),
         ("pvt+ekr", 128, False, True), ("ekr", 128, True, False),
         ("pvt+ekr+narrow", 128, False, False), ("pvt+ekr+oearly", 128, True, False),
         ("pvt+ekr", 64, True, False), ("pvt+ekr", 256, False, False)]


@pytest.mark.parametrize("variant,head_dim,causal,lse", CASES,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}{'-lse' if l_ else ''}"
                              for v, d, c, l_ in CASES])
def test_fp8_early_k_release_verifies_with_zero_findings(variant, head_dim, causal, lse):
    s = BENCH.fp8_variant_schedule(variant, head_dim, causal)
    assert s.early_k_release and s.problems_for(head_dim, ag.e4m3) == []
    kernel = lower_only(attention_kernel(head_dim, ag.e4m3, causal, lse, s.permuted_vt), s=s)
    atoms = s.block_n // fp8_vt_atom(s.block_n)
    fences = [op for op in kernel.walk() if isinstance(op, O.WgmmaFence) and op.a_registers]
    assert sorted(f.a_scope for f in fences) == [0] * atoms + [1] * atoms
    report = verify.run(kernel)
    assert report.diagnostics == [], "\n".join(str(d) for d in report.diagnostics)
    # k-once over the loop's atoms and the peeled ones as one reduction, proven
    cover = [f for f in report.findings if f.code == "wgmma.k-once"
             and f"and {2 * atoms} wgmma sites" in f.subject and "covers [0, K)" in f.subject]
    assert cover and all(f.status == "proven" for f in cover), cover
    # each loop atom's register A retired before the end of V's step (its declaring region)
    loop_pv = {op.loc for op in kernel.walk() if isinstance(op, O.Wgmma) and op.a_in_registers
               and op.loc.line == _line("ag.wgmma(pas[a],")}
    assert len(loop_pv) == 1
    scope = [f for f in report.findings if f.code == "sync.acc"
             and f.subject == f"register A of the wgmma at {next(iter(loop_pv))} at the end "
                              f"of its scope"]
    assert scope and all(f.status == "proven" for f in scope), scope


def _line(text: str) -> int:
    """The line of attention.py holding `text` (once)."""
    import argus.kernels.attention as A

    return line_of(A.__file__, text)
