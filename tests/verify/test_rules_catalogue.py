"""Every diagnostic code the verifier can emit has an entry in the rules catalogue
(argus/verify/rules.py: title, bug classes, tier, fix), so no finding reaches a user with a
bare code and no fix."""

import re
from pathlib import Path

from argus.verify.rules import RULES

VERIFY = Path(__file__).resolve().parents[2] / "argus" / "verify"


def _emitted_codes() -> set[str]:
    codes = set()
    for path in VERIFY.rglob("*.py"):
        text = path.read_text()
        codes |= set(re.findall(r'(?:Finding|Obligation)\(\s*"([a-z0-9]+\.[a-z0-9.-]+)"', text))
        codes |= set(re.findall(r'self\.report\(\s*"([a-z0-9]+\.[a-z0-9.-]+)"', text))
    return codes


def test_every_emitted_code_is_in_the_catalogue():
    codes = _emitted_codes()
    assert len(codes) >= 20  # the scan finds the checks (it would find none if it broke)
    missing = sorted(c for c in codes if c not in RULES)
    assert not missing, f"codes without a rules.py entry: {missing}"
