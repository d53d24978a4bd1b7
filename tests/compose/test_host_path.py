"""The host path of a composed forward, on the CPU: what a call costs in Python before its
kernels launch. A forward of tens of microseconds of GPU time (L1/12, diag(A) @ B at 4096 x
4096) is host-bound when the Python before the launch takes as long: the timings count it (the
GPU waits for the launch). Bounds here are on counts of Python-level calls (deterministic) and
one generous timing, so that the path cannot grow back silently.

* `Program.run` reads its plan once (`_RunPlan`, `_KernelCall`): a forward of one fused kernel
  makes a handful of Python calls (the launch stubbed: 23 Python and 29 C calls before, 8 and
  10 now; with a parameter, 25 / 30 before, 15 / 21 now);
* `compose.launch.run` keeps each kernel's CompiledKernel per compile-time values, so a repeat
  launch neither looks the compile cache up again nor re-validates: it calls the prepared plan
  (shown with stand-ins for CUDA tensors and the compiled kernel: no GPU here)."""

import sys
import time

import pytest
import torch
import torch.nn as nn

from argus.build_memo import BuildMemo
from argus.compose import launch, runtime


class DiagMatmul(nn.Module):
    def forward(self, a, b):
        return a.unsqueeze(1) * b


class WithParam(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(32))

    def forward(self, x):
        return torch.relu(x * self.scale).sum(dim=1)


def _composed(model):
    return type("New", (runtime.ComposedModel,), {"MODEL": model})()


def _count_calls(fn) -> dict:
    counts = {"call": 0, "c_call": 0}

    def prof(frame, event, arg):
        if event in counts:
            counts[event] += 1
    sys.setprofile(prof)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return counts


@pytest.mark.parametrize("model, make, bound", [
    (DiagMatmul, lambda: (torch.rand(64), torch.rand(64, 48)), (10, 14)),
    (WithParam, lambda: (torch.randn(16, 32),), (17, 24)),
])
def test_forward_host_path_is_a_few_python_calls(model, make, bound, monkeypatch):
    new = _composed(model)
    inputs = make()
    with torch.no_grad():
        ref = model()
        ref.load_state_dict(new.state_dict())
        want = ref(*inputs)
        torch.testing.assert_close(new(*inputs), want)     # the real path, interpreted
        launched = []
        monkeypatch.setattr(runtime, "_run", lambda kernel, tensors, **kw:
                            launched.append(kernel))
        new(*inputs)                                       # the run plan is read here
        launched.clear()
        counts = _count_calls(lambda: new(*inputs))
    # the kernels still launch, with the same tensors' shapes, on every call
    assert launched and all(k in {l.fn for l in next(iter(new._programs.values()))
                                  .launches.values()} for k in launched), launched
    assert counts["call"] <= bound[0] and counts["c_call"] <= bound[1], counts


def test_forward_host_time_generous_bound(monkeypatch):
    """Median over many calls, the launch stubbed: ~15 us on the 2-core CI machine, 33 us
    before the run plan. The bound is 10x the former to stay quiet on a loaded machine."""
    new = _composed(DiagMatmul)
    a, b = torch.rand(64), torch.rand(64, 48)
    with torch.no_grad():
        new(a, b)
        monkeypatch.setattr(runtime, "_run", lambda kernel, tensors, **kw: None)
        samples = []
        for _ in range(20):
            t = time.perf_counter()
            for _ in range(200):
                new(a, b)
            samples.append((time.perf_counter() - t) / 200)
    samples.sort()
    assert samples[len(samples) // 2] < 300e-6, samples


def test_output_aliasing_an_input_is_still_copied():
    """The alias check is skipped only for an output a kernel wrote: a model that returns a
    view of its input still gets its own buffer."""
    class Ident(nn.Module):
        def forward(self, x):
            return x.view(4, 6)

    new = _composed(Ident)
    x = torch.randn(24)
    with torch.no_grad():
        y = new(x)
    assert torch.equal(y, x.view(4, 6)) and y.data_ptr() != x.data_ptr()


# ------------------------------------------------------------------ compose.launch.run
class _FakeCuda:
    """What compose.launch.run reads of a CUDA tensor."""
    is_cuda, is_meta = True, False


class _Plan:
    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1


class _Compiled:
    def __init__(self):
        self.plan, self.direct, self.lookups = _Plan(), 0, 0

    def __call__(self, *tensors):
        self.direct += 1

    def plan_for(self, *tensors):
        self.lookups += 1
        return self.plan

    def ready_for(self, tensors):
        return True


class _Kernel:
    """A KernelFunction's compile cache: one compiled kernel per compile-time values."""

    def __init__(self):
        self.by_values, self.compiles = {}, 0

    def compile(self, **constexprs):
        self.compiles += 1
        return self.by_values.setdefault(tuple(sorted(constexprs.items())), _Compiled())

    def built(self, **constexprs):
        return self.by_values.get(tuple(sorted(constexprs.items())))


@pytest.mark.parametrize("gate_held", [False, True])
def test_repeat_launch_skips_the_compile_lookup(gate_held, monkeypatch):
    monkeypatch.setattr(launch, "_COMPILED", BuildMemo())
    monkeypatch.setattr(launch.gpu_gate, "holding_shared", lambda: gate_held)
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    k, t = _Kernel(), _FakeCuda()
    for _ in range(5):
        launch.run(k, (t, t), BN=256)
    assert k.compiles == 1                         # the first launch only
    (compiled,) = k.by_values.values()
    if gate_held:       # a prepared plan is called, never re-validated under the gate
        assert compiled.plan.calls == 4 and compiled.direct == 1
    else:               # the CompiledKernel's own plan cache serves the repeats
        assert compiled.direct == 5
    launch.run(k, (t, t), BN=512)                  # other compile-time values: their own
    assert k.compiles == 2


def test_unverified_kernel_is_not_reused_once_verification_is_asked(monkeypatch):
    """KernelFunction.built's rule: a kernel built with ARGUS_VERIFY=0 is compiled (and
    verified) again when a later launch asks for verification."""
    monkeypatch.setattr(launch, "_COMPILED", BuildMemo())
    monkeypatch.setattr(launch.gpu_gate, "holding_shared", lambda: False)
    k, t = _Kernel(), _FakeCuda()
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    launch.run(k, (t,))
    monkeypatch.setenv("ARGUS_VERIFY", "1")
    launch.run(k, (t,))
    assert k.compiles == 2
    launch.run(k, (t,))
    assert k.compiles == 2                         # verified now: reused


def test_compiled_cache_is_bounded(monkeypatch):
    monkeypatch.setattr(launch, "_COMPILED", BuildMemo())
    monkeypatch.setattr(launch, "_COMPILED_MAX", 4)
    monkeypatch.setattr(launch.gpu_gate, "holding_shared", lambda: False)
    monkeypatch.setenv("ARGUS_VERIFY", "0")
    t = _FakeCuda()
    kernels = [_Kernel() for _ in range(6)]
    for k in kernels:
        launch.run(k, (t,))
    assert len(launch._COMPILED) == 4
    # the stored keys are (build choices, (kernel, *constexprs)): the oldest two are out
    assert [key[1][0] for key in launch._COMPILED] == kernels[2:]
