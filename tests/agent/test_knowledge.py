"""The knowledge base: at least 20 valid cards over GEMM, attention, MoE, memory-bound kernels and
reductions; schedule edits that name real schedule fields; every card parses with the standard
TOML parser (tomllib, or tomli on Python 3.10); conditions are safe; retrieval is by task
features."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from argus.agent import conditions
from argus.agent.families import FAMILIES
from argus.agent.knowledge import CardError, load_cards, parse_card, retrieve
from argus.agent.task import TaskSpec


def test_at_least_twenty_cards_cover_the_families():
    cards = load_cards()
    assert len(cards) >= 20
    covered = {f for c in cards for f in c.families}
    assert {"gemm", "attention", "moe", "elementwise", "reduction"} <= covered
    for c in cards:
        assert c.buys and c.why and c.reference and c.pitfalls and c.params, c.id
        assert c.kind in ("schedule", "source")
        for p in c.params:
            assert p.values, (c.id, p.name)
        assert c.asserts, c.id


def test_safety_entries_name_real_verifier_invariants():
    import re

    from argus.verify import rules

    known = set(re.findall(r'"([a-z]+\.[a-z_-]+)"', Path(rules.__file__).read_text()))
    for c in load_cards():
        for a in c.asserts:
            assert a.startswith(("ag.tag_assert(", "verify: ", "lowering: ")), (c.id, a)
            if a.startswith("verify: "):
                codes = re.findall(r"\b[a-z]+\.[a-z][a-z_-]+\b", a)
                assert codes and all(code in known for code in codes), (c.id, codes)


def test_schedule_edits_name_real_schedule_fields():
    dims = (("M", 4096), ("N", 4096), ("K", 4096))
    gemm_bf16 = TaskSpec("gemm", "t", "argus", "x", dims, "bf16", "bf16",
                         options=(("out", "bf16"),))
    gemm_kb = TaskSpec("gemm", "t", "kernelbench", "x", dims, "f32", "bf16x6",
                       options=(("out", "f32"), ("b_layout", "kn")))
    ew = TaskSpec("elementwise", "t", "kernelbench", "x", (("rows", 64), ("cols", 4096)), "f32",
                  "f32", expr="y = x")
    samples = {"gemm": [gemm_bf16, gemm_kb], "elementwise": [ew]}
    for c in load_cards():
        if c.kind != "schedule":
            continue
        for fam_name in c.families:
            if fam_name not in samples:
                continue
            spaces = [FAMILIES[fam_name].space(t) for t in samples[fam_name]]
            for k, v in c.edit.set:
                assert any(k in sp and v in sp[k] for sp in spaces), (c.id, k, v)
            for name in c.edit.search:
                assert any(v in sp.get(name, ()) for sp in spaces for v in c.param(name).values), \
                    (c.id, name)


def test_cards_are_read_by_the_standard_toml_parser():
    """No hand-written TOML parser: tomllib (3.11+) or its package tomli (3.10), and its errors
    name the card."""
    import argus.agent.knowledge as knowledge

    assert knowledge.loads.__module__ in ("tomllib", "tomli", "tomllib._parser",
                                          "tomli._parser")
    assert not (Path(knowledge.__file__).parent / "toml_compat.py").exists()
    with pytest.raises(CardError, match="bad.toml"):
        parse_card("[[arr]\n", "bad.toml")


def test_malformed_card_names_file_and_field():
    with pytest.raises(CardError, match="bad.toml.*missing field"):
        parse_card('id = "x"\n', "bad.toml")
    text = (resources.files("argus.agent") / "cards" / "gemm_stages.toml").read_text()
    with pytest.raises(CardError, match="b.toml: condition.*not allow"):
        parse_card(text.replace('when = ["K >= 256"]', 'when = ["__import__(\'os\')"]'), "b.toml")


def test_conditions_are_safe_and_missing_features_are_false():
    f = {"M": 4096, "N": 256, "family": "gemm"}
    assert conditions.holds("M * N >= 1 << 20", f)
    assert conditions.holds("family == 'gemm' and min(M, N) == 256", f)
    assert not conditions.holds("K >= 1", f)                # no K: false, not an error
    for bad in ("__import__('os').system('true')", "M.__class__", "[x for x in M]"):
        with pytest.raises(conditions.ConditionError):
            conditions.parse(bad)


def test_retrieval_by_features():
    big = {"family": "gemm", "M": 4096, "N": 4096, "K": 4096, "out_bits": 16, "consumers": 2}
    hits = retrieve(big)
    ids = [c.id for c in hits]
    assert "gemm.tile_128x256_2wg" in ids and "gemm.deeper_pipeline" in ids
    assert not any(c.id.startswith("ew.") for c in hits)
    assert [c.expected_gain for c in hits] == sorted((c.expected_gain for c in hits),
                                                     reverse=True)
    skinny = retrieve({"family": "gemm", "M": 16, "N": 8192, "K": 8192, "out_bits": 16})
    assert "gemm.swap_ab_small_m" in [c.id for c in skinny]
    ew = retrieve({"family": "elementwise", "numel": 1 << 26, "cols": 8192, "ops": 3})
    assert {"ew.tile_shape", "ew.fuse_chain"} <= {c.id for c in ew}
