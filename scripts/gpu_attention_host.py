"""Where the host time of one argus.ops.attention prefill call goes (H200): host microseconds
per call of the op and of torch's cuDNN SDPA (launches queued behind a long GPU sleep, so the
host never waits on the device), then cProfile of 300 op calls (top functions by own and by
cumulative time). `ours` is the op as a model calls it (no schedule=); `ours schedule=` as
scripts/gpu_attention_bench.py times it (schedule=default_schedule(...) given): both repeat a
signature, so both take the prepared launch without checks (argus/ops/attention.py _Entry).
80 calls with q at a new address each (`ours new buffers`) time a call whose buffers have
no prepared launch (checks and prepare: what a model's layers with their own activations
see). When the op's host time exceeds the L2 flush that `measure` runs before each
call (about 75 us for 256 MB), the device idles inside the timed region and `measure` of the
op reads above its kernel (docs/perf/attention.md, 2026-12-03: hd128 S 2048 op 457-468 TFLOP/s,
its prepared launch 541-563).

Each timed window starts after gc.collect() and says what ran inside it: the median and the
longest call (a pause or a cost of every call), calls that entered the op's checked
implementation (`checked`: attention's _run, attention_fp8's run_fp8; 0 when every call
replayed) and Python's garbage collections by generation with their time (`gc`). On 2026-12-04
(675fb54) `schedule=` read 432 us against 40.9 without; on the CPU, with the launch stubbed,
both replay (tests/unit/test_attention_host.py), so the counters tell a checked path from a
pause (a full collection in a process holding the traced kernels: 50-100+ ms).

    python3 -u scripts/gpu_attention_host.py [--seq 2048] [--causal] [--fp8]
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--causal", action="store_true")
    parser.add_argument("--fp8", action="store_true",
                        help="also time argus.ops.attention_fp8 (float scales: the repeated-"
                             "call memo; V transposed by the op every call)")
    args = parser.parse_args()
    import torch
    from gpu_launch_overhead import host_us  # scripts/ is sys.path[0] when run as a script
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import argus.ops
    from argus.kernels.attention import default_schedule

    timed = _Windows(host_us)

    S, D, H = args.seq, 128, 16
    B = max(1, 16384 // S)
    q, k, v = (torch.randn(B, H, S, D, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def ours():
        return argus.ops.attention(q, k, v, causal=args.causal)

    chosen = default_schedule(D, args.causal, S)

    def ours_schedule():
        return argus.ops.attention(q, k, v, causal=args.causal, schedule=chosen)

    # q at 80 offsets of one buffer (128 B apart: TMA-aligned), taken in turn: the same
    # signature on a new address each call (more than the 8 plans kept per signature and the
    # 64 of _LAUNCHES), as a model's layers call it with their own activations
    spare = torch.randn(q.numel() + 80 * 64, device="cuda", dtype=torch.bfloat16)
    shifted = [spare[i * 64:i * 64 + q.numel()].view(q.shape) for i in range(80)]
    turn = iter(range(1 << 30))

    def ours_new_buffers():
        return argus.ops.attention(shifted[next(turn) % 80], k, v, causal=args.causal)

    def cudnn():
        with sdpa_kernel([SDPBackend.CUDNN_ATTENTION]):
            return torch.nn.functional.scaled_dot_product_attention(q, k, v,
                                                                    is_causal=args.causal)

    for fn in (ours, ours_schedule, cudnn):
        fn()
    for _ in shifted:   # each address's launch-specialized variant built (once) before timing
        ours_new_buffers()
    torch.cuda.synchronize()
    if args.fp8:
        q8, k8, v8 = (t.to(torch.float8_e4m3fn) for t in (q, k, v))

        def ours_fp8():
            return argus.ops.attention_fp8(q8, k8, v8, q_scale=1.0, k_scale=1.0, v_scale=1.0,
                                           causal=args.causal)

        ours_fp8()
        torch.cuda.synchronize()

        def ours_fp8_schedule():
            return argus.ops.attention_fp8(q8, k8, v8, q_scale=1.0, k_scale=1.0, v_scale=1.0,
                                           causal=args.causal, schedule=chosen8)

        from argus.kernels.attention import fp8_schedule
        chosen8 = fp8_schedule(D, args.causal)
        ours_fp8_schedule()
        torch.cuda.synchronize()
        print(f"host us per call, attention_fp8: {timed('fp8', ours_fp8)}, "
              f"schedule= {timed('fp8 schedule=', ours_fp8_schedule)}", flush=True)
    # schedule= before and again after ours: a pause that lands in one window shows as a
    # difference between the two, a checked path in both (and in `checked`)
    print(f"host us per call, hd{D} S {S} B {B} causal {args.causal}: "
          f"ours schedule= {timed('schedule= (first)', ours_schedule)}, "
          f"ours {timed('ours', ours)}, ours schedule= {timed('schedule=', ours_schedule)}, "
          f"cuDNN SDPA {timed('cudnn', cudnn)}, ours new buffers (moved plans) "
          f"{timed('new buffers', ours_new_buffers, calls=80)}", flush=True)
    for label, fn, lines in (("op calls", ours, 22), ("op calls with schedule=", ours_schedule,
                                                        14)):
        torch.cuda.synchronize()
        torch.cuda._sleep(4_000_000_000)
        gc.collect()
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(300):
            fn()
        profile.disable()
        torch.cuda.synchronize()
        for key in ("tottime", "cumulative"):
            out = io.StringIO()
            pstats.Stats(profile, stream=out).sort_stats(key).print_stats(lines)
            print(f"== cProfile of 300 {label}, by {key}")
            print("\n".join(line for line in out.getvalue().splitlines() if line.strip())[:6000])
    return 0


class _Windows:
    """host_us of a timed window, as text with what ran inside it: calls that entered the op's
    checked implementation (argus.ops.attention._run, argus.ops.attention_fp8.run_fp8: a
    repeated signature replays without them) and garbage collections by generation with the
    milliseconds they took. gc.collect() first: a full collection pending from the warm-up's
    compiles runs before the window, not inside it."""

    def __init__(self, host_us):
        import importlib
        import time

        self.host_us, self.checked, self.clock = host_us, 0, time.perf_counter
        self.collections, self.gc_seconds, self.started = [0, 0, 0], 0.0, None
        for name, function in (("argus.ops.attention", "_run"),
                               ("argus.ops.attention_fp8", "run_fp8")):
            module = importlib.import_module(name)
            setattr(module, function, self._counted(getattr(module, function)))
        gc.callbacks.append(self._gc)

    def _counted(self, real):
        def counted(*args, **kw):
            self.checked += 1
            return real(*args, **kw)
        return counted

    def _gc(self, phase, info):
        if phase == "start":
            self.started = self.clock()
        elif self.started is not None:
            self.collections[info["generation"]] += 1
            self.gc_seconds += self.clock() - self.started
            self.started = None

    def __call__(self, label: str, fn, calls: int = 300) -> str:
        each = []

        def call():
            # each call's own time too: one pause (median low, max high) reads apart from a
            # cost every call pays (median high)
            t0 = self.clock()
            fn()
            each.append(self.clock() - t0)

        gc.collect()
        self.checked, self.collections, self.gc_seconds = 0, [0, 0, 0], 0.0
        us = self.host_us(call, calls=calls)
        gen = "/".join(map(str, self.collections))
        each.sort()
        return (f"{us:.1f} (median {each[len(each) // 2] * 1e6:.1f}, max "
                f"{each[-1] * 1e6:.0f}; checked {self.checked}/{calls}, gc {gen} in "
                f"{self.gc_seconds * 1e3:.1f} ms)")


if __name__ == "__main__":
    sys.exit(main())
