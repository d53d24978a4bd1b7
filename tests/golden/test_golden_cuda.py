"""Golden CUDA: the generated source of every example is checked in (tests/golden/*.cu) and
NVRTC builds each to an sm_90a cubin here, in CI, with no GPU. Regenerate with ARGUS_ACCEPT=1."""

from pathlib import Path

import pytest

from argus import codegen, config
from argus.compiler import lower_only
from argus.runtime.compile import compile_cuda

GOLDEN = Path(__file__).parent
EXAMPLES = ["elementwise", "softmax", "gemm", "rmsnorm"]


@pytest.mark.parametrize("name", EXAMPLES)
def test_generated_cuda_matches_golden(examples, name):
    source = codegen.render(lower_only(examples(name).KERNEL))
    path = GOLDEN / f"{name}.cu"
    if config.accept_golden():
        path.write_text(source.text)
    assert path.exists(), f"missing golden {path.name}; create it with ARGUS_ACCEPT=1"
    assert source.text == path.read_text(), f"{path.name} changed; rerun with ARGUS_ACCEPT=1"


@pytest.mark.parametrize("name", EXAMPLES)
def test_golden_cuda_builds_for_sm90a(name):
    text = (GOLDEN / f"{name}.cu").read_text()
    symbol = f"argus_{ {'elementwise': 'bias_gelu'}.get(name, name) }".replace(" ", "")
    binary = compile_cuda(text, [symbol], use_cache=False)
    assert binary.cubin[:4] == b"\x7fELF"
    assert binary.arch == "sm_90a"
    res = binary.resource(symbol)
    assert res.registers > 0
    assert not res.spills, res.summary()
    assert ".target sm_90a" in binary.ptx


def test_gemm_uses_wgmma_tma_and_setmaxnreg():
    text = (GOLDEN / "gemm.cu").read_text()
    binary = compile_cuda(text, ["argus_gemm"])
    ptx = binary.ptx
    for instruction in ("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16",
                        "cp.async.bulk.tensor.2d", "mbarrier.try_wait.parity",
                        "setmaxnreg.inc.sync.aligned.u32 232",
                        "setmaxnreg.dec.sync.aligned.u32 40"):
        assert instruction in ptx, instruction
