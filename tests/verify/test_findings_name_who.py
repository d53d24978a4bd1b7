"""reduce.coverage, reduce.mean, fill.identity, store.coords, ew.agree, softmax.stats and the
pipeline protocol (pipe.slot, pipe.data / no-early-read / no-overwrite / deadlock) name the role,
warpgroup and thread that run the reported op themselves, in the message and the witness (W.context: the site's role
and the solver's warpgroup, "every thread" of a register op with thread 0 shown or the holder
W.holder names; W.placed puts them into the message). Before, these families named no thread
in the message, and the witness got one only from names.who's lookup of the finding's line
(docs/verify.md "who runs it"), which is switched off here so that only the rules' own words
count."""

from __future__ import annotations

import pytest

from argus import verify
from argus.verify import names
from tests.mutations import verifier2_kernels as V
from tests.mutations.corpus import CORPUS

BY_NAME = {m.name: m for m in CORPUS}

CASES = [("fa_qonce/kv_skips_last", "reduce.coverage", "role 'consumer', warpgroup 0, thread"),
         ("fa_qonce/mask_fill_zero", "fill.identity",
          "in role 'consumer', warpgroup 0, every thread (thread 0)"),
         ("online_softmax/blocks_skip_last", "reduce.coverage", "thread 0 of the CTA"),
         ("fa_qonce/l_not_rescaled", "softmax.stats",
          "(in role 'consumer', warpgroup 0, every thread (thread 0))"),
         ("fa_qonce/no_final_division", "softmax.stats",
          "(in role 'consumer', warpgroup 0, every thread (thread 0))")]


@pytest.fixture
def no_line_lookup(monkeypatch):
    monkeypatch.setattr(names.Names, "who", lambda self, loc: {})


@pytest.mark.parametrize("name,code,words", CASES, ids=[c[0] for c in CASES])
def test_corpus_reductions_name_who(no_line_lookup, name, code, words):
    errs = [d for d in verify.check(BY_NAME[name].build())
            if d.severity == "error" and d.code == code]
    assert errs, name
    assert any(words in d.message for d in errs), [d.message for d in errs]
    wit = errs[0].counterexample
    assert "thread" in wit and "threads" in wit, wit


@pytest.mark.parametrize("bug", ["pool_divisor", "pool_row_repeat"])
def test_window_mean_names_the_ctas_thread(no_line_lookup, bug):
    """No warp specialization: every thread of the CTA runs the mean (thread 0 shown)."""
    errs = [d for d in verify.check(V.make_avg_pool_2x2(bug).trace())
            if d.severity == "error" and d.code == "reduce.mean"]
    assert errs
    assert "(thread 0 of the CTA)" in errs[0].message, errs[0].message
    wit = errs[0].counterexample
    assert wit["thread"] == 0 and "of the CTA" in wit["threads"] and "role" not in wit, wit


@pytest.mark.parametrize("factory,bug,code", [(V.make_scale_fixed_cols, "next_col_tile",
                                                "store.coords"),
                                               (V.make_residual_batched, "gate_batch_zero",
                                                "ew.agree")])
def test_stores_and_elementwise_name_the_thread(no_line_lookup, factory, bug, code):
    errs = [d for d in verify.check(factory(bug).trace())
            if d.severity == "error" and d.code == code]
    assert errs
    assert any("thread 0 of the CTA)" in d.message or "warpgroup" in d.message
               for d in errs), [d.message for d in errs]
    assert all("thread" in d.counterexample and "threads" in d.counterexample
               for d in errs), [d.counterexample for d in errs]


PIPES = [("lowered/consumer_stage_off_by_one", "pipe.slot",
          "consumer warpgroup 0, thread 0", "consumer"),
         ("lowered/consumer_parity_flipped", "pipe.data",
          "(the consumers: role 'consumer', warpgroup each of 0..1, every thread (thread 0))",
          "consumer"),
         ("lowered/producer_parity_not_inverted", "pipe.no-overwrite",
          "(the producer: role 'producer', warpgroup 0, the elected thread (thread 0))",
          "producer"),
         ("lowered/in_flight_deadlock", "pipe.deadlock",
          "(the producer: role 'producer', warpgroup 0, the elected thread (thread 0); the "
          "consumers: role 'consumer'", "consumer")]


@pytest.mark.parametrize("name,code,words,role", PIPES, ids=[p[0] for p in PIPES])
def test_pipeline_protocol_names_who_waits(no_line_lookup, name, code, words, role):
    errs = [d for d in verify.check(BY_NAME[name].build())
            if d.severity == "error" and d.code == code]
    assert errs, name
    assert any(words in d.message for d in errs), [d.message for d in errs]
    wit = next(d for d in errs if words in d.message).counterexample
    assert wit.get("role") == role and "thread" in wit, wit
