"""The memo type of the per-process caches that hold built kernels (or what holds them:
prepared launches, replayable call entries, chosen (schedule, kernel) pairs): argus.ops's and
argus.compose.launch's.

Their callers key them by what the op sees (schedule, shapes, buffers, device); a built kernel
also depends on the lowering choices the environment makes (argus.config.build_choices:
ARGUS_WGMMA_A_FENCE), which KernelFunction's own cache keys on too (argus/kernel_api.py). A
BuildMemo adds those choices to every key it is given, so a process that changes the variable
gets the kernel of the choice in force, not the one memoized before (both stay memoized: a
benchmark alternates them without rebuilding), with no code at the lookups. The cost is one
read of the environment a lookup (a few hundred ns, beside a launch's tens of us).
"""

from __future__ import annotations

from collections import OrderedDict

from argus import config

_choices = config.build_choices   # looked up once: the memos are on the ops' hot path


class BuildMemo(OrderedDict):
    """An OrderedDict whose keys are (build choices, the caller's key) (module docstring).
    Lookups, stores, membership, pops and move_to_end take the caller's key; iteration,
    keys() and popitem give the stored pairs, which are not keys to hand back (evict the
    oldest with `popitem(last=False)`)."""

    def __getitem__(self, key):
        return OrderedDict.__getitem__(self, (_choices(), key))

    def __setitem__(self, key, value) -> None:
        OrderedDict.__setitem__(self, (_choices(), key), value)

    def __delitem__(self, key) -> None:
        OrderedDict.__delitem__(self, (_choices(), key))

    def __contains__(self, key) -> bool:
        return OrderedDict.__contains__(self, (_choices(), key))

    def get(self, key, default=None):
        return OrderedDict.get(self, (_choices(), key), default)

    def pop(self, key, *default):
        return OrderedDict.pop(self, (_choices(), key), *default)

    def setdefault(self, key, default=None):
        return OrderedDict.setdefault(self, (_choices(), key), default)

    def move_to_end(self, key, last: bool = True) -> None:
        OrderedDict.move_to_end(self, (_choices(), key), last)
