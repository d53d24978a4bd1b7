"""argus.runtime.timing.measure_alternating(setups=...): each function's own `measure` setup
(the MoE bench times the rule's layer with and without a GPU sleep that hides its host work, in
the same rounds) runs before each of that function's warm-up and timed calls, and never before
another function's. Checked on the CPU path (no GPU here)."""

import pytest

from argus.runtime import timing


def test_each_function_gets_its_own_setup():
    order = []
    fns = [lambda: order.append("a"), lambda: order.append("b")]
    pooled = timing.measure_alternating(fns, rounds=2, trials=3, warmup=1,
                                        allow_few_trials=True,
                                        setups=[None, lambda: order.append("s")])
    per_round = 3 + 1                                # warm-up plus timed calls
    assert "".join(order) == ("a" * per_round + "sb" * per_round) * 2
    assert [t.trials for t in pooled] == [6, 6]


def test_setups_must_match_the_functions():
    with pytest.raises(ValueError, match="one per function"):
        timing.measure_alternating([lambda: None] * 2, rounds=1, trials=3,
                                   allow_few_trials=True, setups=[None])
