"""Time a piece of GPU (or CPU) work: the one timing implementation that all of Argus uses
(`argus.bench.timing` re-exports it; it lives here, below ops, so that `argus.ops.tune_matmul`
times candidates without importing the bench that sits above it, ARCHITECTURE.md §2).

`measure(fn)` runs `fn` for warm-ups, then times at least `trials` calls and returns a frozen
`Timing` (median, mean, min, max, std in milliseconds, plus how it was measured).

On a CUDA device each trial is timed by CUDA events on a fresh stream, and the whole device is
synchronized before the end event is taken, so work that `fn` launches on other streams is
counted too ("whole-device timing"). A second end event recorded on the launch stream, before
the device synchronization, gives the stream-only time that upstream KernelBench reports; when the
two differ a lot, `fn` left work running on other streams (`side_stream_suspect`). The fixed cost
of the synchronization itself is measured on an empty function and subtracted. Before every trial
the L2 cache is flushed by writing a buffer of `l2_flush_bytes` (256 MB: four times an H200's
L2), as upstream does.

Without CUDA the same API times with `time.perf_counter` and says so in `Timing.clock`
("cpu-perf-counter"): such numbers are for smoke tests, never for speedup claims.

Invariant: the clock functions used here are captured when this module is imported, so code that
is imported later and replaces `time.perf_counter`, `torch.cuda.Event` or `torch.cuda.synchronize`
cannot change what `measure` reads (the KernelBench judge also reports such tampering). Unlike
the rest of argus.runtime this module imports torch, so `import argus.runtime` does not load it.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# Captured at import: later monkey-patching of these names does not reach `measure`.
_perf_counter = time.perf_counter
_CudaEvent = torch.cuda.Event
_cuda_synchronize = torch.cuda.synchronize
_CudaStream = torch.cuda.Stream
_cuda_stream_ctx = torch.cuda.stream
_event_record = torch.cuda.Event.record
_event_elapsed = torch.cuda.Event.elapsed_time
_event_synchronize = torch.cuda.Event.synchronize

CLOCK_CUDA = "cuda-events+device-sync"
CLOCK_CPU = "cpu-perf-counter"

L2_FLUSH_BYTES = 256 * 1024 * 1024
CPU_FLUSH_BYTES = 32 * 1024 * 1024
MIN_TRIALS = 100
# The least warm-up a CUDA measurement runs (wall time, every call synchronized): a count alone
# is 2-5 ms for a half-millisecond kernel, too short for a card that sat idle while the process
# built its kernels to settle (triton.testing.do_bench warms up for 25 ms by default). This was
# suspected of the prefill bench's first case reading 15% below its prepared launch; the next
# run, with this warm-up, showed the op's call below its launch in later cases too: host time
# outlasting the L2 flush inside the timed region, not the warm-up (docs/perf/attention.md,
# 2026-12-03 18:10). The warm-up stays as the safer default.
MIN_WARMUP_MS = 25.0


@dataclass(frozen=True)
class Timing:
    """How long one call took, over `trials` timed calls (milliseconds).

    median_ms, mean_ms, min_ms, max_ms, std_ms: statistics of the per-call whole-device times.
    stream_median_ms: median of the time seen by events on the launch stream alone (what upstream
        KernelBench reports); None on the CPU clock.
    overhead_ms: measured cost of the device synchronization, already subtracted.
    clock: CLOCK_CUDA or CLOCK_CPU ("cpu-perf-counter" numbers are not GPU timings).
    """

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    std_ms: float
    trials: int
    warmup: int
    clock: str
    l2_flush: bool
    device: str
    stream_median_ms: float | None = None
    overhead_ms: float = 0.0
    samples_ms: tuple[float, ...] = ()

    @property
    def escaped_ms(self) -> float:
        """Median time that ran outside the launch stream (0 on the CPU clock)."""
        if self.stream_median_ms is None:
            return 0.0
        return max(0.0, self.median_ms - self.stream_median_ms)

    def to_json(self, samples: bool = False) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        if not samples:
            data.pop("samples_ms")
        else:
            data["samples_ms"] = list(self.samples_ms)
        return data

    @staticmethod
    def from_json(data: dict[str, Any]) -> Timing:
        fields = {f.name for f in dataclasses.fields(Timing)}
        kwargs = {k: v for k, v in data.items() if k in fields}
        kwargs["samples_ms"] = tuple(kwargs.get("samples_ms", ()))
        return Timing(**kwargs)

    def __str__(self) -> str:
        return (f"median {self.median_ms:.4f} ms, mean {self.mean_ms:.4f} ms "
                f"({self.trials} trials, {self.clock}"
                f"{', L2 flushed' if self.l2_flush else ''})")


def summarize(samples_ms: list[float], *, warmup: int, clock: str, l2_flush: bool, device: str,
              stream_samples_ms: list[float] | None = None, overhead_ms: float = 0.0,
              keep_samples: bool = True) -> Timing:
    """Statistics of per-call times (exposed so callers and tests can build a `Timing`)."""
    if not samples_ms:
        raise ValueError("summarize: no samples; measure at least one trial")
    std = statistics.pstdev(samples_ms) if len(samples_ms) > 1 else 0.0
    stream_median = statistics.median(stream_samples_ms) if stream_samples_ms else None
    return Timing(
        median_ms=statistics.median(samples_ms), mean_ms=statistics.fmean(samples_ms),
        min_ms=min(samples_ms), max_ms=max(samples_ms), std_ms=std, trials=len(samples_ms),
        warmup=warmup, clock=clock, l2_flush=l2_flush, device=device,
        stream_median_ms=stream_median, overhead_ms=overhead_ms,
        samples_ms=tuple(samples_ms) if keep_samples else ())


def measure(fn: Callable[[], Any], *, trials: int = MIN_TRIALS, warmup: int = 10,
            flush_l2: bool = True, device: torch.device | str | None = None,
            l2_flush_bytes: int = L2_FLUSH_BYTES, keep_samples: bool = True,
            allow_few_trials: bool = False, setup: Callable[[], Any] | None = None,
            min_warmup_ms: float = MIN_WARMUP_MS) -> Timing:
    """Time `fn()` (no arguments; its result is ignored) and return a `Timing`.

    device: a CUDA device (default: the current one when CUDA is available) or "cpu" for the
        labelled perf_counter fallback.
    warmup, min_warmup_ms: on a CUDA device the warm-up runs at least `warmup` calls and at
        least `min_warmup_ms` of wall time (each call synchronized; so warmup=0 still warms up
        unless min_warmup_ms=0; see MIN_WARMUP_MS). Timing.warmup records the calls made.
    trials: timed calls; at least 100 unless `allow_few_trials` (for tests and smoke runs).
    setup: called before every warm-up and timed call of `fn`, before the L2 flush and outside
        the timed region (the KernelBench judge refills the inputs there, so that no call can
        return a result cached from an earlier one).
    """
    if trials < MIN_TRIALS and not allow_few_trials:
        raise ValueError(f"measure: trials={trials} is below the minimum of {MIN_TRIALS}; "
                         "fix: pass trials>=100 (or allow_few_trials=True for a smoke test)")
    if trials < 1 or warmup < 0:
        raise ValueError(f"measure: trials={trials}, warmup={warmup}; need trials>=1, warmup>=0")
    dev = _resolve_device(device)
    if dev.type == "cuda":
        return _measure_cuda(fn, trials=trials, warmup=warmup, flush_l2=flush_l2, device=dev,
                             l2_flush_bytes=l2_flush_bytes, keep_samples=keep_samples,
                             setup=setup, min_warmup_ms=min_warmup_ms)
    return _measure_cpu(fn, trials=trials, warmup=warmup, flush_l2=flush_l2,
                        keep_samples=keep_samples, setup=setup)


def _resolve_device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() \
            else torch.device("cpu")
    dev = torch.device(device)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    if dev.type not in ("cuda", "cpu"):
        raise ValueError(f"measure: device {dev} is neither cuda nor cpu")
    return dev


def warm_up(call: Callable[[], Any], *, warmup: int, min_ms: float,
            clock: Callable[[], float], synchronize: Callable[[], Any]) -> int:
    """Run `call` at least `warmup` times and until `min_ms` of `clock` (seconds) have passed,
    synchronizing after each call so the wall time is the device's; returns the calls made."""
    start = clock()
    done = 0
    while done < warmup or (clock() - start) * 1e3 < min_ms:
        call()
        synchronize()
        done += 1
    return done


def _measure_cuda(fn: Callable[[], Any], *, trials: int, warmup: int, flush_l2: bool,
                  device: torch.device, l2_flush_bytes: int, keep_samples: bool,
                  setup: Callable[[], Any] | None = None,
                  min_warmup_ms: float = MIN_WARMUP_MS) -> Timing:
    flush_buf = torch.empty(max(1, l2_flush_bytes // 4), dtype=torch.int32, device=device) \
        if flush_l2 else None
    stream = _CudaStream(device=device)
    _cuda_synchronize(device)

    def one_warm_call():
        if setup is not None:
            setup()
        if flush_buf is not None:
            flush_buf.zero_()
        fn()

    with _cuda_stream_ctx(stream):
        warmed = warm_up(one_warm_call, warmup=warmup, min_ms=min_warmup_ms,
                         clock=_perf_counter, synchronize=lambda: _cuda_synchronize(device))
        overhead = _cuda_trials(lambda: None, trials=max(10, min(trials, 50)), stream=stream,
                                device=device, flush_buf=None)
        overhead_ms = statistics.median(overhead[1])
        stream_ms, device_ms = _cuda_trials(fn, trials=trials, stream=stream, device=device,
                                            flush_buf=flush_buf, setup=setup)
    samples = [max(s, d - overhead_ms) for s, d in zip(stream_ms, device_ms)]
    return summarize(samples, warmup=warmed, clock=CLOCK_CUDA, l2_flush=flush_l2,
                     device=torch.cuda.get_device_name(device), stream_samples_ms=stream_ms,
                     overhead_ms=overhead_ms, keep_samples=keep_samples)


def _cuda_trials(fn: Callable[[], Any], *, trials: int, stream: torch.cuda.Stream,
                 device: torch.device, flush_buf: torch.Tensor | None,
                 setup: Callable[[], Any] | None = None) -> tuple[list[float], list[float]]:
    """Per trial: (launch-stream time, whole-device time incl. sync cost), in milliseconds."""
    starts = [_CudaEvent(enable_timing=True) for _ in range(trials)]
    ends_stream = [_CudaEvent(enable_timing=True) for _ in range(trials)]
    ends_device = [_CudaEvent(enable_timing=True) for _ in range(trials)]
    for i in range(trials):
        if setup is not None:
            setup()
        if flush_buf is not None:
            flush_buf.zero_()
        _event_record(starts[i], stream)
        fn()
        _event_record(ends_stream[i], stream)
        _cuda_synchronize(device)  # waits for every stream on the device, side streams included
        _event_record(ends_device[i], stream)
    _cuda_synchronize(device)
    stream_ms = [_event_elapsed(s, e) for s, e in zip(starts, ends_stream)]
    device_ms = [_event_elapsed(s, e) for s, e in zip(starts, ends_device)]
    return stream_ms, device_ms


def _measure_cpu(fn: Callable[[], Any], *, trials: int, warmup: int, flush_l2: bool,
                 keep_samples: bool, setup: Callable[[], Any] | None = None) -> Timing:
    flush_buf = torch.empty(CPU_FLUSH_BYTES // 4, dtype=torch.int32) if flush_l2 else None
    for _ in range(warmup):
        if setup is not None:
            setup()
        fn()
    samples = []
    for _ in range(trials):
        if setup is not None:
            setup()
        if flush_buf is not None:
            flush_buf.zero_()
        t0 = _perf_counter()
        fn()
        samples.append((_perf_counter() - t0) * 1e3)
    return summarize(samples, warmup=warmup, clock=CLOCK_CPU, l2_flush=flush_l2, device="cpu",
                     keep_samples=keep_samples)


def measure_alternating(fns: list[Callable[[], Any]], *, rounds: int = 3,
                        trials: int = MIN_TRIALS, warmup: int = 10,
                        on_round: Callable[[int, list[Timing]], None] | None = None,
                        allow_few_trials: bool = False,
                        setups: list[Callable[[], Any] | None] | None = None) -> list[Timing]:
    """Time several functions in `rounds` alternating rounds of `measure(fn, trials=...)` each
    and pool each function's samples, so that clock and power drift over a long run (a card
    heating up) falls on all of them alike instead of on whichever ran first. Returns one
    Timing per function: statistics over its pooled samples; its stream median is the median
    of the rounds' stream medians. on_round(r, pooled so far) is called after each round;
    allow_few_trials as for `measure` (smoke runs); setups: one `measure` setup per function
    (None: none), e.g. a GPU sleep that hides one function's host work, so that the same
    function timed with and without it in the same rounds says what its host work costs."""
    if setups is not None and len(setups) != len(fns):
        raise ValueError(f"measure_alternating: {len(setups)} setups for {len(fns)} functions; "
                         "fix: one per function (None where there is none)")
    runs: list[list[Timing]] = [[] for _ in fns]
    pooled: list[Timing] = []
    for r in range(rounds):
        for fn, done, setup in zip(fns, runs, setups or [None] * len(fns)):
            done.append(measure(fn, trials=trials, warmup=warmup,
                                allow_few_trials=allow_few_trials, setup=setup))
        pooled = [_pool(done) for done in runs]
        if on_round is not None:
            on_round(r, pooled)
    return pooled


def _pool(timings: list[Timing]) -> Timing:
    first = timings[0]
    streams = [t.stream_median_ms for t in timings if t.stream_median_ms is not None]
    return summarize([x for t in timings for x in t.samples_ms], warmup=first.warmup,
                     clock=first.clock, l2_flush=first.l2_flush, device=first.device,
                     stream_samples_ms=streams or None,
                     overhead_ms=statistics.fmean(t.overhead_ms for t in timings))


def graph_replay_us(fn: Callable[[], Any], *, per_graph: int = 20, replays: int = 20) -> float:
    """Microseconds per call of `fn` with no host work in the loop: `per_graph` calls captured
    in one CUDA graph, replayed `replays` times, median per call. What the kernels alone cost,
    back to back (no L2 flush between calls), as opposed to `measure`'s one call per trial."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):   # warm up (first-call compiles) outside the capture
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(per_graph):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / per_graph)
    times.sort()
    return times[len(times) // 2]
