"""argus.ops' GEMM host paths without a GPU, shared by test_tail_fused.py (the fused tail
finish and its counters), test_dynamic_scheduler.py (the dynamic walk and its work word) and
test_tail_splits.py (the two-kernel finish): `interpret_compiles` runs every kernel that
argus.compiler.compile_kernel would build in the interpreter; `assert_replays_take_their_streams`
stubs the launch plans and checks that a replay moves onto the per-stream state of the stream
current when it runs (argus.ops.split_k.per_stream)."""

from __future__ import annotations

import torch


def interpret_compiles(monkeypatch, verify) -> None:
    """compile_kernel replaced by the interpreter: each kernel must be compiled with `verify`
    (None: with the verifier's veto; False: without), is run by Kernel.interpret, and caches
    no launch plan (so the op returns nothing to replay)."""
    import argus.compiler

    expected = verify

    class Interpreted:
        def __init__(self, kernel, verify=None, **constexprs):
            assert verify is expected, (verify, expected)
            self.kernel, self.constexprs = kernel, constexprs

        def __call__(self, *tensors):
            self.kernel.interpret(*tensors, **self.constexprs)

        def plan_for(self, *tensors):
            return None

    monkeypatch.setattr(argus.compiler, "compile_kernel", Interpreted)


def assert_replays_take_their_streams(monkeypatch, problem, schedule, a, b, kept) -> None:
    """argus.ops.matmul replays a launch on whatever stream is current: two outputs' replays
    running at once on two streams must not share the per-stream state the launch draws from
    (the fused finish's counters, the dynamic walk's work word: its last tensor). On a new
    stream the plan is moved onto that stream's own; on its own stream it is launched as
    prepared. `kept(run)`: the op's kept per-stream state, by stream key. (Launch plans
    stubbed: what each replay launches with is recorded; streams "s1" and "s2" stubbed.)"""
    import argus.compiler
    from argus.ops import split_k
    from argus.ops.matmul import compiled_for

    launched = []

    class Plan:
        def __init__(self, state):
            self.state = state

        def __call__(self):
            launched.append(self.state)

        def repointed(self, moved):
            (old, new), = moved.items()
            assert old == self.state
            return Plan(new)

    class Stubbed:
        def __init__(self, kernel, verify=None, **constexprs):
            pass

        def __call__(self, *tensors):
            pass

        def plan_for(self, *tensors):
            return Plan(tensors[-1].data_ptr())

    stream = ["s1"]

    def key(device):
        return device.index, stream[0]

    monkeypatch.setattr(argus.compiler, "compile_kernel", Stubbed)
    monkeypatch.setattr(split_k, "_stream_key", key)   # per_stream's and zeroed_per_stream's
    run = compiled_for(problem, schedule)
    replay1 = run(a, b, torch.empty(problem.m, problem.n, dtype=torch.bfloat16))
    replay2 = run(a, b, torch.empty(problem.m, problem.n, dtype=torch.bfloat16))
    s1 = kept(run)[(None, "s1")].data_ptr()
    stream[0] = "s2"
    replay2()
    stream[0] = "s1"
    replay1()
    s2 = kept(run)[(None, "s2")].data_ptr()
    assert s1 != s2 and launched == [s2, s1], (launched, s1, s2)
    stream[0] = "s2"
    replay1()
    replay2()
    assert launched[2:] == [s2, s2] and len(kept(run)) == 2
