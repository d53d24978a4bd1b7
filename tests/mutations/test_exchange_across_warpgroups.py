"""sync.exchange between two warpgroups of ONE role (verify/check_sync.py
`_across_warpgroups`): a role's group barrier is its warpgroup's (named barrier 1 +
warpgroup, 128 threads), so a gather of rows another warpgroup of the role wrote is ordered by
nothing. The check decides it element by element on the gather's own indices:

  * correct: each consumer warpgroup writes its 64 rows of a [128, 64] buffer and gathers
    them back through a view of the WHOLE buffer (rows wg * 64 + t): proven, and smem.race
    (whose view row ranges would overlap) no longer reports the pair;
  * BUG: each warpgroup gathers the OTHER warpgroup's rows ((1 - wg) * 64 + t): reported by
    sync.exchange naming both warpgroups, the element, the thread holding it, the row, the
    write's line and the barrier that orders one warpgroup only.
"""

from pathlib import Path

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


def _exchange_in_ordered_section():
    """The BUG exchange with the write and the gather in one ag.ordered section: turns go
    warpgroup 0 then 1, yet warpgroup 0 still gathers rows warpgroup 1 writes only in its
    later turn. sync.exchange models no ordering between one role's warpgroups."""
    @ag.kernel(threads=384)
    def exchange_ordered(X: ag.Tensor["M", 64, ag.f32], Y: ag.Tensor["M", 64, ag.f32]):
        (b,) = ag.grid(ag.cdiv(Y.shape[0], 128))
        sX = ag.smem((128, 64), ag.f32)
        with ag.role("producer", warpgroups=1, regs=40):
            pass
        with ag.role("consumer", warpgroups=2, regs=232) as wg:
            with ag.ordered("swap"):
                ag.store_shared(sX.view().rows_of(wg * 64, 64),
                                ag.load(X, (b * 128 + wg * 64, 0), (64, 64)))
                rows = (1 - wg) * 64 + ag.arange(64)[:, None]
                x = ag.gather(sX.view(), (rows, ag.arange(64)[None, :]), other=0.0)
            ag.store(Y, (b * 128 + wg * 64, 0), x)
    return exchange_ordered


def test_the_fix_recommends_nothing_the_check_would_flag_again():
    """The fix text once suggested an ag.ordered section; the check models no ordered-section
    (or pipeline) ordering between one role's warpgroups, so such a kernel is still reported:
    the fix must not offer it as the remedy, and must say it is not modelled."""
    report = verify.run(lower_only(_exchange_in_ordered_section()))
    bad = [d for d in report.errors if d.code == "sync.exchange"]
    assert bad, "\n".join(map(str, report.errors))   # still flagged inside ag.ordered
    fix = bad[0].fix
    assert "ag.ordered" in fix and "still reported" in fix, fix
    assert "or an ag.ordered section" not in fix, fix
    assert "index them by the warpgroup" in fix, fix
