"""Seeded bugs in the library attention kernel (argus/kernels/attention.py), lowered and then
rewritten, each caught by the invariant meant to catch it (INVARIANTS.md §4), with a
counterexample that names what it should; the unmutated kernels verify without a violation.

  * P's key index is V's row: V loaded at the tile's first query row instead of the KV
    block's first key (wgmma.agree on P V: A.sk == B.sk);
  * each query row attends every allowed key exactly once: every KV step loads K's first
    block, so keys 0..BN-1 are multiplied once per block and the others never (wgmma.k-once).

The causal invariant (no key beyond the query's position) is not here. Since 9857311 the
verifier models masked values (-inf through scale, subtract and exp2 to 0) and proves that the
iterations a causal loop skips contribute nothing (k-once without a warning), but no claim
states which keys a row may see, so a flipped causal compare inside the loop is not caught.
"""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels.attention import attention_kernel, base_schedule
from tests.mutations.corpus import ACC, Mutation, rewrite
from tests.mutations.seeded import names_thread


def library_attention(causal: bool = False):
    """The library attention forward, head dim 64, in the plain loop (base_schedule: TMA loads
    in order Q, K, V), lowered."""
    return lower_only(attention_kernel(64, ag.bf16, causal, False), s=base_schedule(64))


def kv_coordinate(index: int, coordinate):
    """The kernel with the key coordinate (dim 2) of its `index`-th TMA load replaced by
    `coordinate(loads)`, a value the producer has at that point."""
    def build():
        kernel = library_attention()
        loads = [op for op in kernel.walk() if isinstance(op, O.TmaLoad)]
        value = coordinate(loads)
        return rewrite(kernel, O.TmaLoad,
                       lambda op: op.replace(coords=op.coords[:2] + (value,) + op.coords[3:]),
                       nth=index)
    return build


MUTATIONS = [
    Mutation("attention_lib/v_rows_are_queries", "attention", 18,
             kv_coordinate(2, lambda loads: loads[0].coords[2]), ("wgmma.agree",),
             ACC + ("a_element", "b_element"), ("A.sk == B.sk",),
             note="V at the query rows: P's key index is not V's row"),
    Mutation("attention_lib/k_block_fixed", "attention", 2,
             kv_coordinate(1, lambda loads: loads[1].coords[3]), ("wgmma.k-once",),
             ("first", "second", "k"), ("multiplied twice",),
             note="K's block 0 at every step: keys attended repeatedly or never",
             also=("wgmma.agree",)),
]


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m.name for m in MUTATIONS])
def test_library_attention_mutation_is_caught(mutation):
    kernel = mutation.build()
    report = verify.run(kernel)
    found = [d for d in report.diagnostics if d.severity == "error"]
    hits = [d for d in found if d.code in mutation.codes and
            all(k in d.counterexample for k in mutation.witness) and
            all(w in str(d) for w in mutation.words) and names_thread(d, kernel)]
    assert hits, (f"{mutation.name}: expected {mutation.codes} naming {mutation.witness} / "
                  f"{mutation.words} and the thread, warpgroup or role, got {[(d.code, d.message[:120]) for d in found]}")
    for code in mutation.also:
        assert any(d.code == code for d in found), f"{mutation.name}: {code} not reported"


@pytest.mark.parametrize("causal", [False, True])
def test_library_attention_base_is_clean(causal):
    errors = [d for d in verify.check(library_attention(causal)) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)
