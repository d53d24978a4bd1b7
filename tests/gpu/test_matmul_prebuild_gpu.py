"""GPU tier of issue 18 item 1: after a prebuild of the untuned choice, argus.ops.matmul's first
call of a held-out shape (every in-memory cache dropped) runs no verifier and no NVRTC compile,
loads the cached cubin and is right against float64 (tests/unit/test_matmul_prebuild.py checks
the same on the CPU up to the launch)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("m,n,k,layout", [(3000, 5000, 2000, "NN"), (2048, 7168, 2000, "NT"),
                                          (16, 8000, 8000, "NT")])
def test_first_call_after_prebuild_is_a_cache_hit_and_right(tmp_path, monkeypatch, m, n, k,
                                                            layout):
    from argus import verify
    from argus.ops import matmul, prebuild
    from argus.ops.matmul import forget_choices, problem_of
    from argus.ops.schedules import choose, kernel_for
    from argus.runtime import compile as compile_mod

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))       # nothing tuned, nothing built
    a = torch.randn(m, k, device="cuda").bfloat16()
    b = (torch.randn(n, k, device="cuda").bfloat16().t() if layout == "NT"
         else torch.randn(k, n, device="cuda").bfloat16())
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    problem, _ = problem_of(a, b, out)
    chosen = choose(problem, torch.cuda.get_device_name())
    # the prebuild, as `argus prebuild` compiles it: not from this process's memory, where
    # test_matmul_first_call_gpu.py left the same kernels compiled with ARGUS_VERIFY=0 into
    # another cache (a prebuild through that memo wrote nothing here: 2026-12-02 H200 run)
    prebuild.build(problem, chosen)

    kernel, _ = kernel_for(problem, chosen)                      # a new process, in effect
    kernel._compiled.clear()
    compile_mod.clear_memory_cache()
    forget_choices()
    counts = {"verify": 0, "nvrtc": 0}
    check, nvrtc = verify.check, compile_mod._nvrtc_compile
    monkeypatch.setattr(verify, "check",
                        lambda *x, **y: counts.__setitem__("verify", counts["verify"] + 1)
                        or check(*x, **y))
    monkeypatch.setattr(compile_mod, "_nvrtc_compile",
                        lambda *x, **y: counts.__setitem__("nvrtc", counts["nvrtc"] + 1)
                        or nvrtc(*x, **y))
    matmul(a, b, out)
    torch.cuda.synchronize()
    assert counts == {"verify": 0, "nvrtc": 0}, counts
    ref = a.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 4e-3
