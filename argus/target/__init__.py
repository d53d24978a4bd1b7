"""Leaf library: hardware facts of the sm_90a target (limits, fragment layouts, wgmma
descriptors, TMA swizzles).

`from argus.target import sm90` (or this package) gives every public name; the definitions live
one concept per submodule: `limits`, `fragments`, `wgmma_desc`, `tma`. The package re-exports
sm90's namespace rather than listing its names a second time.
"""

from argus.target import fragments, sm90, tma, wgmma_desc
from argus.target.sm90 import *  # noqa: F403 (sm90.__all__ is the list)

__all__ = sorted([*sm90.__all__, "fragments", "sm90", "tma", "wgmma_desc"])
