"""scripts/gpu_moe_bench.py --bias-scale: a value that is not a finite S >= 0 is refused by
the parser (NaN and inf would turn the sigmoid routing's correction bias into NaN / inf and the
run's routing into something else than the one logged), before anything touches a GPU."""

import sys

import pytest

from tests.loading import load_script

BENCH = load_script("gpu_moe_bench")


@pytest.mark.parametrize("value", ["-0.5", "nan", "inf", "-inf"])
def test_bias_scale_refuses_what_is_not_a_finite_nonnegative_number(monkeypatch, capsys, value):
    monkeypatch.setattr(sys, "argv", ["gpu_moe_bench.py", "--routing", f"--bias-scale={value}"])
    with pytest.raises(SystemExit) as exit_:
        BENCH.main()
    assert exit_.value.code == 2
    assert "--bias-scale takes a finite S >= 0" in capsys.readouterr().err
