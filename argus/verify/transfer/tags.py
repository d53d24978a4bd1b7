"""Transfer functions of the tag ops (ir/tag_ops.py): tag.fn, tag.tensor, tag.assume,
tag.assert.

Job: tag functions and tensor tag fields are declarations, read by the model before the walk
(`Model._build`, since they may appear after their first use in nested regions), so their
rules do nothing; an assumption is recorded with its site (a launch precondition when it binds
no variables, else an axiom instantiated on ground terms); a `require` (checked at every launch,
runtime/preconditions.py) is recorded as a premise; an assertion is recorded with its
site, the ops after it in its region (for use-site pairing) and the states of the tiles it
refers to at that point.

Invariant kept: only the recorded pass records assumptions and assertions (a loop's dry pass
would otherwise add them twice), and an assertion keeps the tile states of its own program
point, not the ones at the end of the walk.
"""

from __future__ import annotations

from argus.ir import tag_ops as T
from argus.verify.transfer.domain import AssertSite, Rule


def declaration(m: Model, op: T.TagFn | T.TagTensor | T.TagCopy, scopes, role, counters,
                following) -> None:
    pass  # declared before the walk (Model._build); a tag.copy is read by its copy's rule


def assume(m: Model, op: T.TagAssume, scopes, role, counters, following) -> None:
    if m._recording:
        m.axioms.append((op, m._site(op, scopes, role)))


def require(m: Model, op: T.Require, scopes, role, counters, following) -> None:
    if m._recording:
        m.requires.append(op)


def assert_(m: Model, op: T.TagAssert, scopes, role, counters, following) -> None:
    if m._recording:
        m.asserts.append(AssertSite(op, m._site(op, scopes, role), tuple(following),
                                    {r.id: m.tiles[r.id] for r in op.refs
                                     if r.id in m.tiles}))


RULES: dict[type, Rule] = {
    T.TagFn: declaration,
    T.TagTensor: declaration,
    T.TagCopy: declaration,
    T.TagAssume: assume,
    T.TagAssert: assert_,
    T.Require: require,
}
