"""Op families the agent can optimize: each maps a task to a schedule space and its legality (its
Schedule classes' declarations, schedule.py), a cost model and DSL source (see base.py).
`get_family(name)` returns the one instance."""

from __future__ import annotations

from argus.agent.families.attention import AttentionFamily
from argus.agent.families.base import Family, params_key
from argus.agent.families.schedule import ScheduleFamily
from argus.agent.families.composed import ComposedFamily
from argus.agent.families.conv import ConvFamily
from argus.agent.families.elementwise import ElementwiseFamily
from argus.agent.families.gemm import GemmFamily
from argus.agent.families.kernel import KernelFamily
from argus.agent.families.moe import MoeFamily
from argus.agent.families.moe_fp8 import MoeFp8Family

FAMILIES: dict[str, Family] = {f.name: f for f in (GemmFamily(), ElementwiseFamily(),
                                                   KernelFamily(), ComposedFamily(),
                                                   AttentionFamily(), MoeFamily(),
                                                   MoeFp8Family(), ConvFamily())}


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise KeyError(f"no op family {name!r}; the agent knows {', '.join(FAMILIES)}")
    return FAMILIES[name]


__all__ = ["FAMILIES", "Family", "ScheduleFamily", "get_family", "params_key"]
