"""Walks of z3 terms: every distinct subterm once, and the outermost subterms that pass a test.

Job: the one walk the verifier's searches of a term share (the applications of a function,
the divisions of a variable, the values read, whether a quantifier is left, ...). z3 terms
are hash-consed DAGs: a subterm shared by many paths (a raster's decode, read by every index)
is walked once, by its ast id, not once per path. A search that needs more than a filter over
that walk (the fresh constants of a term, remembered per term) walks the C API instead
(solver._walk_consts): a wrapper object per subterm is the cost there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import z3


def subterms(*roots: z3.ExprRef, binders: bool = True,
             stop: Callable[[z3.ExprRef], bool] | None = None) -> Iterator[z3.ExprRef]:
    """Every distinct subterm of the roots (the roots included), each once, depth first, in
    order of first visit (the order a walk of the tree would first reach them).

    binders=False: a quantifier's (or lambda's) body is not entered: the searches for
    applications of free functions, whose hits are substituted or compared outside any
    binder. stop(t) true: t's own subterms are not entered from t (they still are from
    another path that reaches them)."""
    todo, seen = list(roots), set()
    while todo:
        t = todo.pop()
        i = t.get_id()
        if i in seen:
            continue
        seen.add(i)
        yield t
        if (binders or z3.is_app(t)) and (stop is None or not stop(t)):
            todo.extend(t.children())


def outermost(roots, pick: Callable[[z3.ExprRef], bool], *,
              binders: bool = True) -> list[z3.ExprRef]:
    """The distinct subterms of `roots` that pass `pick`, in order of first visit, not
    entering those that pass (one below another is found only where a path reaches it
    through none that passes)."""
    hits: list[z3.ExprRef] = []

    def hit(t) -> bool:
        if pick(t):
            hits.append(t)
            return True
        return False
    for _ in subterms(*roots, binders=binders, stop=hit):
        pass
    return hits
