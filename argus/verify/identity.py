"""Sets and maps of objects by identity, holding their members.

Job: the checks group IR ops by identity (ops are frozen dataclasses that compare by value, so
two equal fences are still two program points). A bare set of `id()`s is not a stable key: once
an object is collected its id can be given to a new one, which then tests as a member. These
containers keep a reference to every member, so a member's id stays its own while the container
lives, and membership also checks that the object found is the one asked about.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


class ObjectSet:
    """A set of objects by identity."""

    __slots__ = ("_by_id",)

    def __init__(self, objs: Iterable[Any] = ()):
        self._by_id: dict[int, Any] = {}
        self.update(objs)

    def add(self, obj: Any) -> None:
        self._by_id[id(obj)] = obj

    def update(self, objs: Iterable[Any]) -> None:
        for o in objs:
            self._by_id[id(o)] = o

    def __contains__(self, obj: Any) -> bool:
        return self._by_id.get(id(obj)) is obj

    def __iter__(self) -> Iterator[Any]:
        return iter(self._by_id.values())

    def __len__(self) -> int:
        return len(self._by_id)

    def __eq__(self, other: object) -> bool:
        # equal members by identity: while both sets hold them, equal ids are the same objects
        return isinstance(other, ObjectSet) and self._by_id.keys() == other._by_id.keys()

    __hash__ = None  # mutable


class ObjectMap:
    """A dict keyed by object identity (insertion-ordered; a repeated key keeps its place
    and takes the new value, as a dict does)."""

    __slots__ = ("_by_id",)

    def __init__(self, items: Iterable[tuple[Any, Any]] = ()):
        self._by_id: dict[int, tuple[Any, Any]] = {}
        for k, v in items:
            self[k] = v

    def __setitem__(self, key: Any, value: Any) -> None:
        self._by_id[id(key)] = (key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        hit = self._by_id.get(id(key))
        return hit[1] if hit is not None and hit[0] is key else default

    def __contains__(self, key: Any) -> bool:
        hit = self._by_id.get(id(key))
        return hit is not None and hit[0] is key

    def values(self) -> list[Any]:
        return [v for _, v in self._by_id.values()]

    def __len__(self) -> int:
        return len(self._by_id)
