"""argus.runtime.timing.warm_up: a CUDA measurement warms up for a count of calls and for a
least wall time (MIN_WARMUP_MS), each call synchronized, so a card idle before it reaches its
working clocks before the first timed call. Checked with a fake clock (no GPU here)."""

from argus.runtime import timing


class FakeClock:
    """Each synchronize advances the clock by one call's device time."""

    def __init__(self, call_ms: float):
        self.now = 0.0
        self.call_ms = call_ms
        self.calls = 0
        self.syncs = 0

    def clock(self) -> float:
        return self.now

    def call(self) -> None:
        self.calls += 1

    def synchronize(self) -> None:
        self.syncs += 1
        self.now += self.call_ms / 1e3


def test_short_calls_warm_up_for_the_least_time():
    fake = FakeClock(call_ms=0.5)
    done = timing.warm_up(fake.call, warmup=5, min_ms=25.0, clock=fake.clock,
                          synchronize=fake.synchronize)
    assert done == fake.calls == fake.syncs == 50   # 50 x 0.5 ms reaches 25 ms
    assert fake.now * 1e3 >= 25.0


def test_long_calls_warm_up_for_the_count():
    fake = FakeClock(call_ms=40.0)
    done = timing.warm_up(fake.call, warmup=3, min_ms=25.0, clock=fake.clock,
                          synchronize=fake.synchronize)
    assert done == 3


def test_no_least_time_keeps_the_count():
    fake = FakeClock(call_ms=0.5)
    assert timing.warm_up(fake.call, warmup=7, min_ms=0.0, clock=fake.clock,
                          synchronize=fake.synchronize) == 7


def test_measure_defaults_to_the_least_warm_up():
    import inspect

    assert timing.MIN_WARMUP_MS >= 25.0
    default = inspect.signature(timing.measure).parameters["min_warmup_ms"].default
    assert default == timing.MIN_WARMUP_MS
