"""argus/schedule_space.py: a Schedule's legal values and constraints as data, read without
building a kernel, from field metadata or from a declaration made outside the class."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import ClassVar

import pytest

from argus.schedule_space import Constraint, Legal, declare, fixed, legal, space_of

ROWS = Constraint("rows", lambda s, f: s["bm"] == 64 * s["consumers"],
                  "bm={bm} with {consumers} consumer(s)", "set consumers = bm // 64",
                  "PTX wgmma: M = 64 per warpgroup", reads=("bm", "consumers"))
OUT16 = Constraint("out16", lambda s, f: s["epilogue"] == "direct" or f["out_bits"] == 16,
                   "epilogue={epilogue} with {out_bits}-bit output", "use epilogue='direct'",
                   "PTX stmatrix (b16 only)", reads=("epilogue",))


@dataclass(frozen=True)
class Declared:
    bm: int = field(default=128, metadata=legal((64, 128), high=256, multiple=64,
                                                rule="TMA boxDim <= 256"))
    consumers: int = field(default=2, metadata=legal(low=1, high=2))
    epilogue: str = field(default="direct", metadata=legal(("direct", "tma")))
    name: str = field(default="x", metadata=fixed())
    note: str = "undeclared"
    CONSTRAINTS: ClassVar[tuple[Constraint, ...]] = (ROWS, OUT16)


@dataclass(frozen=True)
class Plain:
    bm: int = 128
    consumers: int = 2
    epilogue: str = "direct"

    def __post_init__(self):
        if self.bm > 256:
            raise ValueError("bm > 256")


@dataclass(frozen=True)
class PlainChild(Plain):
    stages: int = 4


def test_field_metadata_gives_choices_ranges_and_constraints():
    sp = space_of(Declared)
    assert sp.names == ("bm", "consumers", "epilogue", "name", "note")
    ch = sp.choices({"out_bits": 16})
    assert ch == {"bm": (64, 128), "consumers": (1, 2), "epilogue": ("direct", "tma"),
                  "name": ("x",), "note": ("undeclared",)}
    # a one-field constraint narrows that field's choices for the problem
    assert sp.choices({"out_bits": 32})["epilogue"] == ("direct",)
    # accepted beyond the searched choices, within the declared bounds
    assert sp.accepts({"bm": 192, "consumers": 3}, {"out_bits": 16}) is False   # consumers range
    assert sp.legal_of("bm").accepts(192) and not sp.legal_of("bm").accepts(320)
    assert not sp.legal_of("bm").accepts(96)                                    # multiple of 64
    # undeclared fields accept anything (the class and the lowering judge them)
    assert sp.accepts({"note": "anything", "bm": 128, "consumers": 2}, {"out_bits": 16})


def test_findings_name_the_field_the_values_and_the_rule():
    sp = space_of(Declared)
    found = sp.diagnose({"bm": 128, "consumers": 1, "epilogue": "tma"}, {"out_bits": 32}, "k")
    codes = [d.code for d in found]
    assert codes == ["rows", "out16"]
    assert "bm=128 with 1 consumer(s)" in found[0].message
    assert found[0].counterexample["bm"] == 128 and "PTX wgmma" in found[0].fix
    assert "epilogue=tma with 32-bit output" in found[1].message and found[1].kernel == "k"
    rng = sp.diagnose({"bm": 320}, {"out_bits": 16})
    assert rng[0].code == "range" and "Declared.bm=320" in rng[0].message
    assert "TMA boxDim <= 256" in rng[0].fix


def test_a_constraint_that_cannot_read_its_inputs_does_not_vouch():
    sp = space_of(Declared)
    assert "out16" in [d.code for d in sp.diagnose({"epilogue": "tma"}, {})]   # no out_bits
    assert "out16" not in [d.code for d in sp.diagnose({"epilogue": "direct"}, {})]


def test_declared_from_outside_and_inherited_by_subclasses():
    declare(Plain, {"bm": legal((64, 128, 256)), "consumers": legal((1, 2, 4))}, (ROWS,))
    try:
        child = space_of(PlainChild)
        assert child.choices()["bm"] == (64, 128, 256)
        assert child.choices()["stages"] == (4,)                 # undeclared: its default
        assert [c.code for c in child.constraints] == ["rows"]
        assert not child.accepts({"bm": 256, "consumers": 2})
        assert child.accepts({"bm": 256, "consumers": 4})
        assert child.build({"bm": 64, "consumers": 1, "other": 1}) == PlainChild(64, 1)
        with pytest.raises(ValueError, match="bm > 256"):      # the class's own check runs
            child.build({"bm": 512})
        with pytest.raises(ValueError, match="no field 'bk'"):
            declare(Plain, {"bk": legal((64,))})
    finally:
        from argus import schedule_space

        schedule_space._DECLARED.pop(Plain, None)


def test_sampling_stays_in_the_choices():
    sp = space_of(Declared)
    rng = random.Random(0)
    for _ in range(50):
        p = sp.sample(rng, {"out_bits": 32})
        assert p["bm"] in (64, 128) and p["epilogue"] == "direct" and p["name"] == "x"


def test_legal_needs_values():
    with pytest.raises(ValueError, match="give the choices"):
        legal(low=1)
    with pytest.raises(ValueError, match="no choices"):
        legal(())
    assert isinstance(legal((1,))["argus.legal"], Legal)


def test_a_constraint_that_cannot_read_a_fact_says_which():
    """A constraint whose check reads a fact the tuner did not pass refuses the schedule (it
    cannot vouch for it), and its finding names the missing fact and how to supply it, instead
    of the constraint's own message (here: "epilogue=tma with {out_bits}-bit output", a claim
    about an output width nobody gave). The narrowing of a field's choices keeps its values
    then, so the search space does not silently collapse to the field's first choice."""
    space = space_of(Declared)
    found = [d for d in space.diagnose({"epilogue": "tma"}, {}) if d.code == "out16"]
    assert len(found) == 1, found
    text = str(found[0])
    assert "'out_bits'" in text and "could not be evaluated" in text, text
    assert "facts" in (found[0].fix or ""), found[0].fix
    # with the fact given, the constraint's own message again
    found = [d for d in space.diagnose({"epilogue": "tma"}, {"out_bits": 32})
             if d.code == "out16"]
    assert found and "32-bit output" in str(found[0]), found
    # unreadable facts do not narrow: both epilogues stay search choices
    assert space.choices({})["epilogue"] == ("direct", "tma")
    assert space.choices({"out_bits": 32})["epilogue"] == ("direct",)
