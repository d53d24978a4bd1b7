"""GPU tier: the untuned matmul path (argus/ops/gemm_model.py through schedules.choose) with an
empty tuning cache: the first call of a shape compiles exactly one kernel (the model never picks
split-K, whose sum is a second kernel), runs the model's choice, and is right against float64;
for skinny shapes the heuristic's weight-streaming schedule runs, also one kernel."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


@pytest.mark.parametrize("batch,m,n,k,layout", [
    (1, 2048, 7168, 2048, "NT"), (1, 3000, 5000, 2000, "NN"), (1, 1000, 1500, 4096, "NT"),
    (4, 512, 1024, 1024, "NN"), (1, 16, 4096, 4096, "NT"), (1, 300, 8192, 1024, "NN")])
def test_first_call_compiles_one_kernel_and_is_right(tmp_path, monkeypatch, batch, m, n, k,
                                                     layout):
    import argus as ag
    from argus.ops import matmul
    from argus.ops.matmul import forget_choices, problem_of
    from argus.ops.schedules import choose, untuned

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))      # nothing tuned
    forget_choices()
    lead = (batch,) if batch > 1 else ()
    a = torch.randn(*lead, m, k, device="cuda").bfloat16()
    b = (torch.randn(*lead, n, k, device="cuda").bfloat16().transpose(-1, -2)
         if layout == "NT" else torch.randn(*lead, k, n, device="cuda").bfloat16())
    compiled = []
    original = ag.KernelFunction.compile

    def counting(self, *args, **kwargs):
        compiled.append(self.name)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ag.KernelFunction, "compile", counting)
    out = matmul(a, b)
    torch.cuda.synchronize()
    assert len(compiled) == 1, compiled
    problem, _ = problem_of(a, b, out)
    assert choose(problem, torch.cuda.get_device_name()) == untuned(problem)
    ref = a.double() @ b.double()
    assert ((out.double() - ref).norm() / ref.norm()).item() < 4e-3
    matmul(a, b, out)                                          # warm: nothing compiles
    assert len(compiled) == 1
