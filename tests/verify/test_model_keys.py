"""The model's memos key by stable values (issue 13, the house rule), not by object identity:
the TMA read records (`Model._read_tma_at`) by the buffer's IR name, the stage term and the
seqs of the reader's scopes (Scope.seq), the produce steps a read resolves against and the
loop-nest decisions by the step's program point (Site.seq). So two traces of one kernel key
the same things the same way, and a scope the walk made twice (a loop's dry pass and its
recorded pass) is two keys, as the two scope objects were."""

from __future__ import annotations

import z3

from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, kernel_for
from argus.verify import checker, solver
from argus.verify import model as M


def _fa3():
    import argus as ag
    from argus.kernels.attention import attention_kernel, default_schedule

    return lower_only(attention_kernel(256, ag.bf16, True, False),
                      s=default_schedule(256, True, None))


def _tail_split_gemm():
    # a main walk then a tail walk into one ring: two produce steps per pipe, so each read
    # asks `_never_active` about both (its memo keyed by the step's seq)
    problem = Problem(2048, 7168, 2048, 1, "bf16", "bf16", "nk", True)
    fn, schedule = kernel_for(problem, GemmSchedule(cluster_m=2, tail_splits=2))
    return lower_only(fn, s=schedule)


def _text(key, terms: dict):
    """A memo key with its z3 term ids written as the terms' text (hash-consed ids are equal
    for equal terms within one process, not a value of the kernel)."""
    if isinstance(key, tuple) and len(key) == 2 and key[0] == "z3":
        return ("z3", str(terms[key[1]]))
    if isinstance(key, tuple):
        return tuple(_text(k, terms) for k in key)
    return key


def _keys(kernel) -> tuple[M.Model, dict]:
    """The model of a checked kernel and its memos' keys, terms as text. Built and collected
    in a z3 context of its own (`solver.own_context`, as `checker.run` does): in the shared
    one the collection's queries met the proof cache, vacuity models and term ids left by
    every test before it in the process, so their z3 searches depended on the test order (a
    full tests/verify run was seen stalled here for over 20 minutes in z3's nlsat; the file
    alone passes in about a minute)."""
    with solver.own_context():
        return _keys_here(kernel)


def _keys_here(kernel) -> tuple[M.Model, dict]:
    m = M.Model(kernel)
    checker.collect(m)
    # every z3 id in a key names a term its entry keeps alive: a view's stage, a decision's
    # reader counter and peer substitution
    live = [e[0].stage for e in m._tma_reads.values()]
    live += [e[1] for e in m._nest_decisions.values()]
    live += [t for e in m._nest_decisions.values() for pair in e[2] for t in pair]
    terms = {t.get_id(): t for t in live if z3.is_expr(t)}
    out = {"tma": [_text(k, terms) for k in m._tma_reads],
           "nest": [_text(k, terms) for k in m._nest_decisions],
           "inactive": list(m.__dict__.get("_inactive_memo", {}))}
    return m, out


def test_two_traces_key_the_memos_alike():
    """Two traces of one kernel, both alive: the memos have the same keys. Fails before:
    the TMA read keys held id() of the reader's scopes, the nest decisions id() of the step,
    the inactive-site memo id() of the produce op, which differ between the two models."""
    for make in (_fa3, _tail_split_gemm):
        # both models alive while compared: an id() is not reused for the second one's objects
        (m1, a), (m2, b) = _keys(make()), _keys(make())
        assert a["tma"] and a["nest"], a
        assert a == b
    assert a["inactive"]   # the tail-split GEMM asks about its other produce step


def test_a_scope_walked_twice_is_two_keys(monkeypatch):
    """Scope.seq numbers every scope the walk makes, in walk order: one per scope object,
    so no key merges two scopes identity kept apart. The FA3 consumer's loops carry their
    accumulators: their bodies are walked dry, then recorded, and the consume steps' scopes
    are made more than once. Readers made in the dry passes (held by the tiles' closures)
    read the same buffer and stage through scopes over the same ops as the recorded reader:
    their seqs keep them apart, where the ops' program points or IR names would merge them.
    And the 493188e cut stays: the k-slices of one wgmma share their key."""
    made: list = []
    inner = M.Model._scope

    def spy(self, *args, **kwargs):
        scope = inner(self, *args, **kwargs)
        made.append(scope)
        return scope
    monkeypatch.setattr(M.Model, "_scope", spy)
    kernel = _fa3()
    with solver.own_context():   # (as `_keys`)
        m = M.Model(kernel)
        checker.collect(m)
    assert [s.seq for s in made] == list(range(len(made)))
    by_ops: dict = {}
    for key, (view, reader, *_) in m._tma_reads.items():
        assert key == M.tma_read_key(view, reader)
        ops = tuple((s.kind, s.op.loc) for s in reader.scopes)
        by_ops.setdefault((key[0], key[1], ops), set()).add(key)
    assert any(len(keys) > 1 for keys in by_ops.values())
    wgmma_reads = [r for r in m.reads if r.kind.startswith("wgmma")]
    assert len({M.tma_read_key(r.view, r.site) for r in wgmma_reads}) < len(wgmma_reads)
