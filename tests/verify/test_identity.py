"""argus.verify.identity: sets and maps of objects by identity that hold their members (the
checks' tables of IR ops, which are frozen dataclasses comparing by value)."""

import gc
import weakref
from dataclasses import dataclass

from argus.verify.identity import ObjectMap, ObjectSet


@dataclass(frozen=True)
class Fence:      # like an IR op: equal by value, two program points by identity
    loc: str


def test_members_are_by_identity():
    a, b = Fence("k.py:3"), Fence("k.py:3")
    assert a == b and a is not b
    s = ObjectSet([a])
    assert a in s and b not in s
    m = ObjectMap([(a, 1)])
    assert m.get(a) == 1 and m.get(b) is None and b not in m
    m[a] = 2
    assert m.values() == [2] and len(m) == 1
    assert ObjectSet([a]) == ObjectSet([a]) and ObjectSet([a]) != ObjectSet([b])


def test_members_stay_alive_so_ids_are_not_reused():
    s, m = ObjectSet(), ObjectMap()

    def add():
        x = Fence("tmp")
        s.add(x)
        m[x] = "x"
        return weakref.ref(x)
    ref = add()
    gc.collect()
    assert ref() is not None      # held by the containers: its id cannot go to a new object
    assert ref() in s and m.get(ref()) == "x"
    assert all(Fence("tmp") not in s for _ in range(100))
