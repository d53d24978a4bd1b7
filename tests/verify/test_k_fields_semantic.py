"""wgmma.k-once asks injectivity of the fields that follow the instruction's k, decided by
value, not by name (check_wgmma._reduction_fields): a field whose term mentions k but whose
value is the same at every k (the multicast A tile's `expert` with MoE's CTA pairs along N) is
no reduction coordinate, and one whose value moves with k through an auxiliary is one. A
pair-N kernel that really multiplies k twice is still caught, on `k`, with a counterexample."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import z3

from argus import verify
from argus.compiler import lower_only
from argus.kernels.moe import PREFILL_DOWN_PAIR_N, PREFILL_GATE_UP_PAIR_N, grouped_gemm_kernel
from argus.verify import check_wgmma, solver
from argus.verify.model import Model
from argus.verify.tagdomain import Record, TagVal, fresh_int, is_coordinate_field, mentions
from argus.verify.wgmma_facts import _operands
from tests.mutations.moe_mutations import pair_n_half_k_step


@pytest.fixture
def queries(monkeypatch):
    """The solver queries asked while the test runs (each still answered)."""
    asked = []
    real = solver.prove

    def prove(premises, claims, *a, **kw):
        asked.append([name for name, _ in claims])
        return real(premises, claims, *a, **kw)
    monkeypatch.setattr(solver, "prove", prove)
    return asked


def _mentioning_k(model, site) -> list[str]:
    """The syntactic candidates obligations() hands _reduction_fields."""
    m, n, kk, ra, rb, _ = _operands(model, site)
    return [x for x in sorted(set(ra.fields) & set(rb.fields)) if is_coordinate_field(x)
            and (mentions(ra.fields[x].term, kk) or mentions(rb.fields[x].term, kk))]


@pytest.mark.parametrize("gated,schedule", [(True, PREFILL_GATE_UP_PAIR_N),
                                            (False, PREFILL_DOWN_PAIR_N)],
                         ids=["gate_up", "down"])
def test_pair_n_expert_mentions_k_but_is_no_reduction_coordinate(gated, schedule, queries):
    model = Model(lower_only(grouped_gemm_kernel(gated), s=schedule))
    assert model.wgmmas
    for site in model.wgmmas:
        names = _mentioning_k(model, site)
        assert names == ["expert", "k"], names   # the syntactic rule made both k coordinates
        assert check_wgmma._reduction_fields(model, site, names) == ["k"]
    assert queries == [], "rewriting alone decides it: no solver query"


def test_pair_n_k_walk_half_step_is_caught_on_k():
    """The seeded bug (tests/mutations/moe_mutations.py): the producer's K walk steps bk / 2.
    Reported on `k` with two instances that truly read one column; no `expert` finding."""
    report = verify.run(pair_n_half_k_step())
    k_once = [d for d in report.errors if d.code == "wgmma.k-once"]
    assert k_once, [str(d) for d in report.errors]
    assert not any("global expert" in str(d) for d in report.diagnostics)
    twice = [d for d in k_once if "global k =" in str(d) and "multiplied twice" in str(d)]
    assert twice, "\n".join(str(d) for d in k_once)
    cx = twice[0].counterexample
    (i1,), (i2,) = cx["first"]["iteration"].values(), cx["second"]["iteration"].values()
    kk1, kk2 = cx["first"]["k_in_tile"], cx["second"]["k_in_tile"]
    assert (i1, kk1) != (i2, kk2)
    # the mutated walk: step i reads the columns i * 32 + kk (bk = 64 halved)
    assert i1 * 32 + kk1 == i2 * 32 + kk2 == cx["k"]


# ---------------------------------------------------------------- the decision on small records
# A fake site and model holding hand-made records: A's at (m, kk), B's at (n, kk). Every call
# builds its auxiliaries afresh, as the model's memoized records rename theirs per instance.

K = 64


def _fake(a_fields, b_fields=None, a_cond=None, coordinates=("m", "n", "k")):
    """(model, site): a_fields(kk, aux) -> {name: term}; a_cond(kk, aux) -> record conditions;
    b_fields likewise (default: the same as A's). Both records read one tensor whose
    coordinate fields are `coordinates`; the other fields are user tags (`ag.tag_tensor`)."""
    b_fields = b_fields or a_fields
    a_cond = a_cond or (lambda kk, aux: [])
    op = SimpleNamespace(k_extent=K, trans_b=False,
                         acc=SimpleNamespace(type=SimpleNamespace(shape=(64, 128))))
    site = SimpleNamespace(op=op, b=None, site=SimpleNamespace(constraints=lambda: [], seq=0))

    def record(fields, kk, cond=lambda kk, aux: []):
        aux = fresh_int("aux")
        tags = {x: TagVal(t) for x, t in fields(kk, aux).items()}
        tags["tensor"] = TagVal(z3.IntVal(0))
        return Record(tags, cond=tuple(cond(kk, aux)))

    class FakeModel:
        premises: list = []
        tensors = {0: SimpleNamespace(field_names=tuple(coordinates))}

        def wgmma_a(self, s, m, kk):
            return record(a_fields, kk, a_cond)

        def read_smem(self, view, idx, reader):
            return record(b_fields, idx[1])

    model = FakeModel()
    m, n, kk = fresh_int("m"), fresh_int("n"), fresh_int("kk")
    memo = model.__dict__.setdefault("_wgmma_operands", {})   # keyed by Site.seq
    memo[site.site.seq] = (m, n, kk, model.wgmma_a(site, m, kk),
                           model.read_smem(None, (n, kk), None), ())
    return model, site


@pytest.fixture
def fake_b_index(monkeypatch):
    monkeypatch.setattr(check_wgmma, "b_index", lambda view, n, kk, k, trans: (n, kk))


def test_guarded_constant_is_dropped_by_the_solver(fake_b_index, queries):
    """expert = If(0 <= kk < K, e, -1): the guard holds for every k of the instruction, which
    rewriting does not know; the solver proves the value independent of k."""
    e = z3.Int("e")
    model, site = _fake(lambda kk, aux: {"k": kk, "expert": z3.If(z3.And(kk >= 0, kk < K), e, -1)})
    assert check_wgmma._reduction_fields(model, site, ["expert", "k"]) == ["k"]
    # only the user tag is asked: the coordinate `k` is kept without a question
    assert [q[0] for q in queries] == ["expert independent of k"]


def test_dependence_through_an_auxiliary_is_kept(fake_b_index):
    """j's term is an auxiliary that the record's conditions tie to kk: it follows k although
    its term never names kk, so it stays a reduction coordinate."""
    model, site = _fake(lambda kk, aux: {"k": kk, "j": aux},
                        b_fields=lambda kk, aux: {"k": kk, "j": z3.IntVal(1)},
                        a_cond=lambda kk, aux: [aux == kk + 1])
    assert check_wgmma._reduction_fields(model, site, ["j", "k"]) == ["j", "k"]


def test_no_field_following_k_keeps_the_coordinate(fake_b_index):
    """Every candidate the same at all k: the instruction multiplies one k K times, and
    k-once must still be asked (it reports it): the coordinate `k` is kept (the constant
    user tag may go: k-once on `k` already fails)."""
    e = z3.Int("e")
    model, site = _fake(lambda kk, aux: {"k": kk * 0 + 3, "expert": z3.If(kk < K, e, e)})
    assert check_wgmma._reduction_fields(model, site, ["expert", "k"]) == ["k"]


def test_one_candidate_asks_nothing(fake_b_index, queries):
    model, site = _fake(lambda kk, aux: {"k": kk})
    assert check_wgmma._reduction_fields(model, site, ["k"]) == ["k"]
    assert check_wgmma._reduction_fields(model, site, []) == []
    assert queries == []


def test_seeded_constant_k_beside_a_moving_tag_is_kept(fake_b_index):
    """Seeded bug (issue 13): one K column read at every k of the instruction (the contracted
    coordinate `k` is a guarded constant, as the multicast tile's terms are) while a user tag
    `lane` moves with k. Dropping `k` as 'independent of k' left k-once to `lane` alone, which
    is injective: the duplicate reads were never reported. The contracted coordinate (a
    coordinate of the tensor read) is kept whatever its dependence on k."""
    model, site = _fake(lambda kk, aux: {"k": z3.If(z3.And(kk >= 0, kk < K), 7, -1),
                                         "lane": kk})
    assert check_wgmma._reduction_fields(model, site, ["k", "lane"]) == ["k", "lane"]


def test_a_user_tag_alone_is_never_dropped(fake_b_index, queries):
    """No coordinate of the tensor among the candidates (paged KV: the contracted coordinate
    is the user tag `key`, the page row an integer extent): every candidate is kept and
    nothing is asked, so a constant `key` beside another moving tag still gets k-once."""
    model, site = _fake(lambda kk, aux: {"key": z3.If(kk < K, 5, 5), "lane": kk},
                        coordinates=("pages", "hkv"))
    assert check_wgmma._reduction_fields(model, site, ["key", "lane"]) == ["key", "lane"]
    assert queries == []
