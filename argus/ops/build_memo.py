"""The memo type of argus.ops's per-process caches that hold built kernels (or what holds them:
prepared launches, replayable call entries, chosen (schedule, kernel) pairs).

Their callers key them by what the op sees (schedule, shapes, buffers, device); a built kernel
also depends on the lowering choices the environment makes (argus.config.build_choices:
ARGUS_WGMMA_A_FENCE), which KernelFunction's own cache keys on too (argus/kernel_api.py). A
BuildMemo adds those choices to every key it is given, so a process that changes the variable
gets the kernel of the choice in force, not the one memoized before (both stay memoized: a
benchmark alternates them without rebuilding), with no code at the lookups.
"""

from __future__ import annotations

from collections import OrderedDict

from argus import config


class _Keyed(tuple):
    """(build choices, the caller's key): a key as a BuildMemo stores it. Iterating the memo
    hands these back; given back (`memo.pop(next(iter(memo)))`) they are taken as they are."""


def _keyed(key) -> _Keyed:
    return key if type(key) is _Keyed else _Keyed((config.build_choices(), key))


class BuildMemo(OrderedDict):
    """An OrderedDict whose keys are the caller's keys with the build choices in force added
    (module docstring). Lookups, stores, membership, pops and move_to_end take the caller's
    key; iteration, popitem and keys() give the stored (choices, key) pairs."""

    def __getitem__(self, key):
        return super().__getitem__(_keyed(key))

    def __setitem__(self, key, value) -> None:
        super().__setitem__(_keyed(key), value)

    def __delitem__(self, key) -> None:
        super().__delitem__(_keyed(key))

    def __contains__(self, key) -> bool:
        return super().__contains__(_keyed(key))

    def get(self, key, default=None):
        return super().get(_keyed(key), default)

    def pop(self, key, *default):
        return super().pop(_keyed(key), *default)

    def setdefault(self, key, default=None):
        return super().setdefault(_keyed(key), default)

    def move_to_end(self, key, last: bool = True) -> None:
        super().move_to_end(_keyed(key), last)
