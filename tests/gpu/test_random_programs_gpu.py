"""GPU tier: random small tile programs (tests/random_programs.py) compiled for the H200 compute
what the interpreter computes (float32 to a few ulps; a program's seed, kernel and numpy
reference print on failure)."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.random_programs import compare_outputs, generate, interpret  # noqa: E402

pytestmark = hopper_only()

SAMPLE = range(1000, 1040)
QUICK = 8   # the first seeds run in the quick tier (`-m "gpu and not slow"`), the rest are slow


@pytest.mark.parametrize("seed", [pytest.param(s, marks=[pytest.mark.slow] if i >= QUICK else [])
                                  for i, s in enumerate(SAMPLE)])
def test_gpu_matches_interpreter(seed):
    program = generate(seed)
    expected, error = interpret(program)
    if error is not None:
        pytest.skip(f"refused by the front end: {error}")
    arrays = [torch.from_numpy(a).cuda() for a in program.arrays()]
    program.kernel()(*arrays)
    torch.cuda.synchronize()
    names = [n for n, _ in program.params]
    got = {n: arrays[names.index(n)].cpu().numpy() for n in program.outputs}
    compare_outputs(program, got, expected, rtol=1e-3, atol=1e-3, what="GPU",
                    against="interpreter")
