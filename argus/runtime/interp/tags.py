"""Rules for the tag ops (ir/tag_ops.py): no-ops in the interpreter.

Invariant: tags, tag functions, axioms and tag assertions are facts for the verifier; they
change no data, so running a kernel with or without them gives the same results.
"""

from __future__ import annotations

from argus.ir.core import Op
from argus.ir.tag_ops import TAG_OPS
from argus.runtime.interp.machine import _Group, _Interp
from argus.runtime.interp.registry import rule


@rule(*TAG_OPS)
def tag_no_op(m: _Interp, g: _Group, op: Op) -> None:
    """Tags and tag assertions are for the verifier; they change no data."""
