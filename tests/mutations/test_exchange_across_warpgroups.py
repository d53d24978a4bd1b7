"""sync.exchange between two warpgroups of ONE role (verify/check_sync.py
`_across_warpgroups`): a role's group barrier is its warpgroup's (named barrier 1 +
warpgroup, 128 threads), so a gather of rows another warpgroup of the role wrote is ordered by
nothing. The check decides it element by element on the gather's own indices:

  * correct: each consumer warpgroup writes its 64 rows of a [128, 64] buffer and gathers
    them back through a view of the WHOLE buffer (rows wg * 64 + t): proven, and smem.race
    (whose view row ranges would overlap) no longer reports the pair;
  * BUG: each warpgroup gathers the OTHER warpgroup's rows ((1 - wg) * 64 + t): reported by
    sync.exchange naming both warpgroups, the element, the thread holding it, the row, the
    write's line and the barrier that orders one warpgroup only;
  * ag.ordered: the write and the gather in one ordered section are ordered by its turns
    (bar.arrive / bar.sync of both warpgroups): warpgroup 1 gathering warpgroup 0's rows in its
    later turn is proven (once and in a loop); BUG: warpgroup 0 gathering warpgroup 1's rows of
    the same round (read before written) is reported naming the section; a write outside the
    section is still unordered.
"""

from pathlib import Path

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only

HERE = Path(__file__).name


def _exchange(other: bool):
    @ag.kernel(threads=384)
    def exchange(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
        sX = ag.smem((128, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            ag.store_shared(sX.view().rows_of(wg * 64, 64),    # the write
                            ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))
            first = (1 - wg) * 64 if other else wg * 64        # the bug (when other)
            rows = first + ag.arange(64)[:, None]
            x = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
            ag.store(Y, (b * 128 + wg * 64, 0), x)
    return exchange


def _line(text: str) -> int:
    return next(i + 1 for i, line in enumerate(Path(__file__).read_text().splitlines())
                if text in line)


def test_warpgroups_gathering_their_own_rows_are_proven():
    report = verify.run(lower_only(_exchange(False)), include_proven=True)
    across = [f for f in report.findings if f.code == "sync.exchange"
              and "across the warpgroups" in f.subject]
    assert across and all(f.status == "proven" for f in across), "\n".join(map(str, across))
    assert not report.errors, "\n".join(map(str, report.errors))


def test_a_gather_of_the_other_warpgroups_rows_is_reported():
    report = verify.run(lower_only(_exchange(True)))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))
    d = bad[0]
    wit = d.counterexample
    # both warpgroups of the role, from the site (not a line lookup)
    assert wit["role"] == "consumer" and wit["writer"]["role"] == "consumer", wit
    assert {wit["warpgroup"], wit["writer"]["warpgroup"]} == {0, 1}, wit
    # the element, the thread holding it and the row: warpgroup w reads row (1 - w) * 64 + i
    i = wit["element"][0]
    assert wit["row"] == (1 - wit["warpgroup"]) * 64 + i, wit
    assert wit["thread"] == i % 128, wit
    # the write's line, the gather's line and the barrier that orders one warpgroup only
    assert wit["writer"]["op"].endswith(f"{HERE}:{_line('# the write')}"), wit
    assert "gather(sX.view()" in Path(__file__).read_text().splitlines()[
        int(wit["gather"].rsplit(":", 1)[1]) - 1], wit
    assert wit["barrier"] is not None and "own threads only" in d.message, d.message
    # the root cause: the row index's line (`rows = first + ...`)
    assert wit["index_at"].endswith(f"{HERE}:{_line('rows = first + ag.arange')}"), wit
    assert "sX" in d.message, d.message
    # the pair is sync.exchange's: smem.race does not report it a second time
    assert not [e for e in report.errors if e.code == "smem.race"], \
        "\n".join(map(str, report.errors))


def test_the_traced_kernel_is_checked_too():
    """Before lowering (no sync ops yet) the pair is checked as well: no barrier lowering
    could place orders two warpgroups of one role, and smem.race leaves the pair to it."""
    bad = [d for d in verify.check(_exchange(True).trace())
           if d.severity == "error" and d.code == "sync.exchange"]
    assert bad and bad[0].counterexample["writer"]["warpgroup"] != \
        bad[0].counterexample["warpgroup"], bad
    assert not [d for d in verify.check(_exchange(False).trace()) if d.severity == "error"]


def _exchange_in_ordered_section(first: str = "other", loop: bool = False,
                                 write_outside: bool = False):
    """The write and the gather in one ag.ordered section (turns: warpgroup 0, then 1, each
    round). `first` names the rows each warpgroup gathers: "other" (BUG: warpgroup 0 gathers
    rows warpgroup 1 writes only in its later turn of the round), "zero" (both gather
    warpgroup 0's rows: warpgroup 1's turn comes after warpgroup 0 wrote them). `loop` runs
    the section in a loop (rounds); `write_outside` moves the write out of the section
    (nothing orders it then). Y's rows are named apart from X's ("P"): warpgroup 1 stores
    warpgroup 0's rows, which store.coords would compare with its own."""
    @ag.kernel(threads=384)
    def exchange_ordered(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["P", 64, ag.f32],
                         n: ag.i32):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
        sX = ag.smem((128, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            def turn():
                if write_outside:
                    ag.store_shared(sX.view().rows_of(wg * 64, 64),
                                    ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))
                with ag.ordered("swap"):
                    if not write_outside:
                        ag.store_shared(sX.view().rows_of(wg * 64, 64),     # the ordered write
                                        ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))
                    top = (1 - wg) * 64 if first == "other" else 0
                    rows = top + ag.arange(64)[:, None]                     # the ordered rows
                    x = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
                ag.store(Y, (b * 128 + wg * 64, 0), x)
            if loop:
                for _ in ag.range(n):
                    turn()
            else:
                turn()
    return exchange_ordered


def _across(report):
    return [f for f in report.findings if f.code == "sync.exchange"
            and "across the warpgroups" in f.subject]


@pytest.mark.parametrize("loop", [False, True], ids=["once", "rounds"])
def test_an_exchange_ordered_by_the_turns_is_proven(loop):
    """ag.ordered's turns order the warpgroups (bar.arrive by the passer, bar.sync by the
    next, 256 threads): warpgroup 1 gathers warpgroup 0's rows in its later turn of the
    round, proven; in a loop the earlier and later rounds' writes are ordered too."""
    for kernel in (lower_only(_exchange_in_ordered_section("zero", loop)),
                   _exchange_in_ordered_section("zero", loop).trace()):
        report = verify.run(kernel, include_proven=True)
        across = _across(report)
        assert across and all(f.status == "proven" for f in across), \
            "\n".join(map(str, across))
        assert not [d for d in report.errors if d.code.startswith(("sync.", "smem.",
                                                                   "ordered."))], \
            "\n".join(map(str, report.errors))


@pytest.mark.parametrize("loop", [False, True], ids=["once", "rounds"])
def test_a_gather_before_the_writers_turn_is_reported(loop):
    """BUG: warpgroup 0 gathers rows warpgroup 1 writes in its LATER turn of the same round:
    ordered, but read before written. Named: both warpgroups, the section, the element, its
    thread, the row and the row index's line."""
    report = verify.run(lower_only(_exchange_in_ordered_section("other", loop)))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))
    d = bad[0]
    wit = d.counterexample
    assert wit["section"] == "swap" and wit["warpgroup"] == 0 and \
        wit["writer"]["warpgroup"] == 1, wit
    i = wit["element"][0]
    assert wit["row"] == 64 + i, wit
    assert wit["index_at"].endswith(f"{HERE}:{_line('# the ordered rows')}"), wit
    assert wit["writer"]["op"].endswith(f"{HERE}:{_line('# the ordered write')}"), wit
    assert "ordered section 'swap'" in d.message and "before warpgroup 1 writes it" in \
        d.message, d.message


def test_a_write_outside_the_section_is_not_ordered_by_it():
    """The gather in the section, the write before it (outside): warpgroup 1's write of round
    k + 1 may run while warpgroup 0 still gathers round k's rows; nothing orders them."""
    report = verify.run(lower_only(_exchange_in_ordered_section("zero", True, True)))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))
    assert bad[0].counterexample["section"] is None, bad[0].counterexample


def test_the_fix_names_the_orders_the_check_models():
    """The fix offers ag.ordered only as the check models it (the writer's turn first) and
    says a pipeline between one role's warpgroups is not modelled."""
    report = verify.run(lower_only(_exchange(True)))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))
    fix = bad[0].fix
    assert "ag.ordered" in fix and "turn comes earlier" in fix, fix
    assert "pipeline between the warpgroups of this role is not modelled" in fix, fix
    assert "index them by the warpgroup" in fix, fix


def _carried_exchange(peeled: bool):
    """A carried exchange through two buffers (ping-pong halves of a [256, 64] buffer) in one
    ordered section: round t writes half t % 2 and gathers the other warpgroup's rows of half
    (t + 1) % 2, written in round t - 1. BUG (not peeled): round 0 gathers half 1, which only
    round 1 writes (read unwritten); peeled: the gather runs from round 1 on (ag.when)."""
    @ag.kernel(threads=384)
    def carried(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["P", 64, ag.f32], n: ag.i32):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
        sX = ag.smem((256, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for t in ag.range(n):
                with ag.ordered("carry"):
                    ag.store_shared(sX.view().rows_of((t % 2) * 128 + wg * 64, 64),  # w: carry
                                    ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))

                    def gather():
                        rows = ((t + 1) % 2) * 128 + (1 - wg) * 64 + \
                            ag.arange(64)[:, None]                           # rows: carry
                        x = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
                        ag.store(Y, (b * 128 + wg * 64, 0), x)
                    if peeled:
                        with ag.when(t > 0):
                            gather()
                    else:
                        gather()
    return carried


def test_a_first_round_gathering_a_row_only_a_later_round_writes_is_reported():
    """Round 0 gathers half 1 of the buffer, which warpgroup 1 writes only in round 1: the
    turns order the two, but the gather comes first (no write of the row before it). Named:
    the section, both warpgroups, the rounds of the gather and the write, the element, the
    row (checked against the index recomputed from the rounds) and the lines."""
    for kernel in (lower_only(_carried_exchange(False)), _carried_exchange(False).trace()):
        report = verify.run(kernel)
        bad = [d for d in report.errors if d.code == "sync.exchange"]
        assert bad, "\n".join(map(str, report.errors))
        wit = bad[0].counterexample
        assert wit["section"] == "carry", wit
        gather_round, write_round = wit["round"]["gather"][0], wit["round"]["write"][0]
        assert write_round > gather_round == 0, wit
        i, w, o = wit["element"][0], wit["warpgroup"], wit["writer"]["warpgroup"]
        assert {w, o} == {0, 1}, wit
        # the row the gather names in its round, and the half the writer's round writes
        assert wit["row"] == ((gather_round + 1) % 2) * 128 + (1 - w) * 64 + i, wit
        assert (write_round % 2) * 128 + o * 64 <= wit["row"] < (write_round % 2) * 128 + \
            o * 64 + 64, wit
        assert wit["writer"]["op"].endswith(f"{HERE}:{_line('# w: carry')}"), wit
        assert "only in the later round" in bad[0].message and "unwritten" in \
            bad[0].message, bad[0].message


def test_a_peeled_carried_exchange_is_proven():
    """From round 1 on, half (t + 1) % 2 was written by round t - 1 (an earlier round):
    proven, lowered and traced."""
    for kernel in (lower_only(_carried_exchange(True)), _carried_exchange(True).trace()):
        report = verify.run(kernel, include_proven=True)
        across = _across(report)
        assert across and all(f.status == "proven" for f in across), \
            "\n".join(map(str, across))
        assert not [d for d in report.errors if d.code.startswith(("sync.", "smem.",
                                                                   "ordered."))], \
            "\n".join(map(str, report.errors))


def _pingpong_exchange(peeled: bool):
    """Ping-pong (one warpgroup a round: iteration i is warpgroup i % 2's turn): each turn
    writes the warpgroup's 64 rows and gathers the other warpgroup's, written the round
    before. BUG (not peeled): round 0 (warpgroup 0) gathers rows warpgroup 1 writes only in
    round 1; peeled: the gather runs from round 1 on."""
    @ag.kernel(threads=384)
    def pingpong(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["P", 64, ag.f32], n: ag.i32):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
        sX = ag.smem((128, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            for i in ag.range(2 * n):
                with ag.when(i % 2 == wg):
                    with ag.ordered("pp"):
                        ag.store_shared(sX.view().rows_of(wg * 64, 64),
                                        ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))

                        def gather():
                            rows = (1 - wg) * 64 + ag.arange(64)[:, None]
                            x = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]),
                                          other=0.0)
                            ag.store(Y, (b * 128 + wg * 64, 0), x)
                        if peeled:
                            with ag.when(i > 0):
                                gather()
                        else:
                            gather()
    return pingpong


def test_pingpong_first_turn_gathering_the_next_turns_rows_is_reported():
    report = verify.run(lower_only(_pingpong_exchange(False)))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))
    wit = bad[0].counterexample
    assert wit["section"] == "pp" and wit["round"]["gather"] == (0,), wit
    assert wit["round"]["write"][0] % 2 == wit["writer"]["warpgroup"] == 1, wit
    assert wit["warpgroup"] == 0 and wit["row"] == 64 + wit["element"][0], wit


def test_pingpong_exchange_from_the_second_turn_is_proven():
    report = verify.run(lower_only(_pingpong_exchange(True)), include_proven=True)
    across = _across(report)
    assert across and all(f.status == "proven" for f in across), "\n".join(map(str, across))
    assert not [d for d in report.errors if d.code.startswith(("sync.", "smem.", "ordered."))], \
        "\n".join(map(str, report.errors))
