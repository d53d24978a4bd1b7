"""Findings name values by the user's names (verify/names.py), in their subjects as in their
messages, proven ones included: before, Report.findings' subjects and every note's message
(`--json` with proven notes) kept the IR's ids ("shared gather of %s.12", "view of %s.10")
while the errors' messages said "sX". A view without a name of its own is "a view of sX";
the IR id stays only where no name is known."""

import re

from argus import verify
from argus.compiler import lower_only
# the two consumer warpgroups' exchange through sX: each gathers its own rows, or (other) the
# other warpgroup's (the seeded sync.exchange bug)
from tests.mutations.test_exchange_across_warpgroups import _exchange

IR_ID = re.compile(r"%([A-Za-z_]\w*)\.(\d+)|%(\d+)\b")


def test_finding_subjects_and_notes_use_the_users_names():
    for other in (False, True):
        report = verify.run(lower_only(_exchange(other)), include_proven=True)
        assert report.findings
        for f in report.findings:
            assert not IR_ID.search(f.subject), (f.code, f.subject)
            assert not IR_ID.search(f.message), (f.code, f.message)
        for d in report.diagnostics:   # notes too (what --json prints with proven notes)
            assert not IR_ID.search(d.message), (d.severity, d.code, d.message)
        subjects = [f.subject for f in report.findings]
        assert any(s.startswith("buffer sX ") for s in subjects), subjects
        assert any("shared gather of a view of sX at" in s for s in subjects), subjects
        if other:
            bad = [f for f in report.findings if f.code == "sync.exchange" and
                   f.status == "violated"]
            assert bad and "shared gather of sX at" in bad[0].subject, bad
            # the finding's own message and the diagnostic's agree on the names
            assert "the row index rows defined at" in bad[0].message, bad[0].message


def test_the_error_diagnostics_still_carry_the_subject_in_the_users_names():
    report = verify.run(lower_only(_exchange(True)))
    d = next(d for d in report.errors if d.code == "sync.exchange")
    assert "shared gather of sX at" in d.message and not IR_ID.search(d.message), d.message
