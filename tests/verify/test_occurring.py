"""tagdomain.occurring (fbfdb98): the auxiliaries a memoized record holds, read off Z3's
SMT-LIB printer, renamed per instance. It must never return fewer than occur: an auxiliary
left out is not renamed, so two instances of the record would share it (one value where the
kernel has two), which can make a false claim provable. The printer's text is the one
assumption: the tests below hand `occurring` a printer that writes its declarations another
way (SMT-LIB's own `declare-const`, or names it does not recognize) and require every
occurring variable back."""

import re

import z3

from argus.verify import tagdomain
from argus.verify.tagdomain import OCCURRING_MIN, Record, TagVal, fresh_int, occurring


def _record():
    own = tuple((fresh_int(f"aux{i}"), f"aux{i}") for i in range(OCCURRING_MIN + 4))
    used = [v for v, _ in own[:3]]
    rec = Record({"m": TagVal(used[0] + 2 * used[1]), "k": TagVal(used[2])})
    return rec, own, used


def _names(pairs):
    return {str(v) for v, _ in pairs}


def test_occurring_keeps_exactly_the_used_auxiliaries():
    rec, own, used = _record()
    assert _names(occurring(rec, own)) == {str(v) for v in used}


def _printer(rewrite):
    real = z3.Z3_benchmark_to_smtlib_string

    def printer(*args):
        return rewrite(real(*args))
    return printer


def test_a_printer_writing_declare_const_loses_no_auxiliary(monkeypatch):
    rec, own, used = _record()
    monkeypatch.setattr(tagdomain.z3, "Z3_benchmark_to_smtlib_string", _printer(
        lambda text: re.sub(r"\(declare-fun (\S+) \(\) (\S+)\)", r"(declare-const \1 \2)",
                            text)))
    assert {str(v) for v in used} <= _names(occurring(rec, own))


def test_a_printer_naming_constants_otherwise_loses_no_auxiliary(monkeypatch):
    # e.g. a printer that disambiguates every symbol with a suffix
    rec, own, used = _record()
    monkeypatch.setattr(tagdomain.z3, "Z3_benchmark_to_smtlib_string", _printer(
        lambda text: re.sub(r"\(declare-fun (\S+) \(\) ", r"(declare-fun \1~0 () ", text)))
    assert {str(v) for v in used} <= _names(occurring(rec, own))
