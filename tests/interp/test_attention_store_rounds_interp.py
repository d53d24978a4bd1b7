"""The two short-prefill levers of h290 in the numpy interpreter against float64
(tests/unit/test_attention_store_rounds.py has the build, verify and token checks):

* `store_cols` (bench token "tmaN"): the stmatrix + TMA-store epilogue at head dim 256 in two
  rounds of 128 columns of O. O starts as NaN, so a round that stores the wrong columns, or a
  second round that overwrites the first's slots before they were read out, fails here.
* `prefetch_next_q` (bench token "pfq"): the walk's producer prefetches the Q tile of its
  next unit into L2. The prefetch moves no data the kernel reads, so the results are the
  same; what is checked besides them is *which* boxes it names: per CTA, exactly the Q boxes
  that CTA loads next (recorded from the interpreter's TMA rules), in the "head" walk and in
  the snake's reversed rounds, and nothing past the last unit."""

import dataclasses
from collections import defaultdict

import pytest

from argus.ir import ops as O
from argus.runtime.interp.registry import RULES
from tests.interp.test_attention_interp import assert_close, run
from tests.loading import load_script

BENCH = load_script("gpu_attention_bench")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("seq_len", [1024, 2048])
def test_staged_rounds_at_head_dim_256(causal, seq_len):
    """The default at head dim 256 (the persistent walk at 1k / 2k; causal: the snake, with
    own_blocks at 2k) with O stored through two 128-column staging rounds: 3 CTAs walk
    2 x 2 x 3 tiles (ragged queries, 330 keys: a KV tail), GQA 2:1, the LSE."""
    schedule = dataclasses.replace(BENCH.variant_schedule("default+tma128", 256, causal,
                                                          seq_len), num_sms=3)
    assert (schedule.epilogue, schedule.store_cols) == ("tma", 128)
    assert_close(*run(2, 2, 1, 300, 330, 256, causal, schedule, seed=seq_len + causal))


def test_staged_rounds_in_the_grid():
    """One CTA a tile (head dim 256's grid, as its default at 4k full), Sq > Skv."""
    schedule = BENCH.variant_schedule("default+tma128", 256, False, 4096)
    assert not schedule.persistent and schedule.store_cols == 128
    assert_close(*run(1, 2, 2, 200, 90, 256, False, schedule, seed=7))


def _recorded_run(monkeypatch, schedule, head_dim, causal, shape):
    """Run the kernel in the interpreter, recording per CTA the Q boxes (B, H, row, column)
    its producer loads and prefetches, in order."""
    loads, prefetches = defaultdict(list), defaultdict(list)
    load_rule, prefetch_rule = RULES[O.TmaLoad], RULES[O.TmaPrefetch]

    def q_param(m):
        return m.kernel.params[0].value.id

    def load(m, g, op):
        if op.tensor.id == q_param(m):
            loads[g.cta].append(tuple(int(m.val(g, c)) for c in op.coords))
        return load_rule(m, g, op)

    def prefetch(m, g, op):
        assert op.tensor.id == q_param(m), "only Q is prefetched"
        prefetches[g.cta].append(tuple(int(m.val(g, c)) for c in op.coords))
        return prefetch_rule(m, g, op)

    monkeypatch.setitem(RULES, O.TmaLoad, load)
    monkeypatch.setitem(RULES, O.TmaPrefetch, prefetch)
    B, H, HKV, S, SK = shape
    assert_close(*run(B, H, HKV, S, SK, head_dim, causal, schedule, seed=S + causal))
    return loads, prefetches


# (variant, head dim, causal, (B, H, HKV, S, SK), num_sms): 12 or 8 units on 3 CTAs, the last
# round partial (even or odd: the snake reverses odd rounds over the units they have)
WALKS = [("default+tma128+pfq", 256, False, (2, 2, 1, 300, 330), 3),
         ("default+tma128+pfq", 256, True, (2, 2, 1, 300, 330), 3),
         ("default+pfq", 128, True, (1, 4, 2, 200, 330), 3),
         ("default+pfq", 128, False, (1, 4, 2, 200, 330), 3)]


@pytest.mark.parametrize("variant,head_dim,causal,shape,num_sms", WALKS,
                         ids=[f"{w[0]}-d{w[1]}-{'causal' if w[2] else 'full'}" for w in WALKS])
def test_the_prefetch_names_each_ctas_next_q(monkeypatch, variant, head_dim, causal, shape,
                                             num_sms):
    schedule = dataclasses.replace(BENCH.variant_schedule(variant, head_dim, causal, 1024),
                                   num_sms=num_sms)
    assert schedule.prefetch_next_q and schedule.persistent
    loads, prefetches = _recorded_run(monkeypatch, schedule, head_dim, causal, shape)
    atoms = head_dim // 64   # Q's boxes: 64 columns each
    assert len(loads) == num_sms
    for cta, boxes in loads.items():
        # every unit's Q boxes but the CTA's first unit's, in the order it loads them
        assert len(boxes) % atoms == 0 and len(boxes) > atoms
        assert prefetches[cta] == boxes[atoms:], cta
