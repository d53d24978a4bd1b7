"""argus.ops keeps the agent's measured GEMM schedules per card class (argus.ops.moe H100 /
H200): `record_agent_choice` writes under the measuring card's class, `choose` reads the
running card's, so a schedule measured best on one class never runs on the other. The agent's
older classless file is read as the H100 class's, and never lost."""

from __future__ import annotations

import dataclasses

import pytest

from argus.kernels.gemm import GemmSchedule
from argus.ops import schedules, tuning_cache
from argus.ops.moe import CARD_H100, CARD_H200

P = schedules.Problem(512, 1024, 256, 1, "bf16", "bf16", "nk", True)
A = GemmSchedule(bm=64, bn=128, consumers=1, stages=6)
B = GemmSchedule(bm=128, bn=256, stages=3)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    assert len({A, B, schedules.untuned(P)}) == 3    # each answer below tells its source


def _record(schedule, card):
    params = None if schedule is None else dataclasses.asdict(schedule)
    schedules.record_agent_choice(P.key, params, 0.01, card=card)


def test_one_class_record_does_not_change_the_others_choice():
    _record(A, CARD_H100)
    assert schedules.choose(P, "gpu", CARD_H100) == A
    assert schedules.choose(P, "gpu", CARD_H200) == schedules.untuned(P)
    _record(B, CARD_H200)                            # the H200 measures last
    assert schedules.choose(P, "gpu", CARD_H100) == A
    assert schedules.choose(P, "gpu", CARD_H200) == B
    _record(None, CARD_H200)                         # an H200 withdrawal: the H100's stays
    assert schedules.choose(P, "gpu", CARD_H100) == A
    assert schedules.choose(P, "gpu", CARD_H200) == schedules.untuned(P)
    _record(B, CARD_H200)
    _record(None, CARD_H100)                         # and the other way round
    assert schedules.choose(P, "gpu", CARD_H100) == schedules.untuned(P)
    assert schedules.choose(P, "gpu", CARD_H200) == B


def test_without_a_class_choose_takes_the_names():
    _record(A, CARD_H100)
    _record(B, CARD_H200)
    assert schedules.choose(P, "NVIDIA H100 80GB HBM3") == A
    assert schedules.choose(P, "NVIDIA H200") == B
    assert schedules.choose(P, "some unknown card") == A      # unknown: the H100 class
    assert schedules.choose(P, None) == schedules.untuned(P)  # no card: no cache is read


def test_a_tuned_entry_for_the_card_still_comes_first():
    _record(A, CARD_H200)
    schedules.store_choice("NVIDIA H200", P, B, 1.0)
    assert schedules.choose(P, "NVIDIA H200", CARD_H200) == B


def test_the_classless_record_is_the_h100_classs_and_is_kept():
    legacy = {"schedule": dataclasses.asdict(A), "ms": 0.02}
    tuning_cache.write(schedules.AGENT_KIND, schedules.AGENT_LEGACY_GPU, P.key, legacy)
    assert schedules.AGENT_LEGACY_CARD == CARD_H100
    assert schedules.choose(P, "gpu", CARD_H100) == A
    assert schedules.choose(P, "gpu", CARD_H200) == schedules.untuned(P)
    _record(B, CARD_H200)
    assert schedules.choose(P, "gpu", CARD_H100) == A
    _record(B, CARD_H100)                            # the H100 class's own entry wins
    assert schedules.choose(P, "gpu", CARD_H100) == B
    _record(None, CARD_H100)                         # its withdrawal hides the old one too
    assert schedules.choose(P, "gpu", CARD_H100) == schedules.untuned(P)
    assert schedules.choose(P, "gpu", CARD_H200) == B
    # ... which is still on disk, unchanged
    assert tuning_cache.load(schedules.AGENT_KIND, schedules.AGENT_LEGACY_GPU) == {P.key: legacy}
    _record(A, CARD_H100)
    assert schedules.choose(P, "gpu", CARD_H100) == A


def test_an_unknown_class_is_refused():
    with pytest.raises(ValueError, match="card class 'any'"):
        _record(A, "any")
    with pytest.raises(ValueError, match="CARD_H100"):
        schedules.choose(P, "gpu", "a100")
