"""No false positives: every example kernel and every library kernel verifies without a
violation, traced and lowered; proven invariants come back as notes; the interfaces
(ir.Kernel or KernelFunction, JSON diagnostics, the CLI) behave as documented."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from argus import verify
from argus.compiler import lower_only

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ["gemm", "softmax", "elementwise", "rmsnorm", "softmax_online", "flash_attention"]


@pytest.mark.parametrize("name", EXAMPLES)
@pytest.mark.parametrize("lowered", [False, True], ids=["traced", "lowered"])
def test_examples_verify_clean(examples, name, lowered):
    kernel_fn = examples(name).KERNEL
    kernel = lower_only(kernel_fn) if lowered else kernel_fn.trace()
    errors = [d for d in verify.check(kernel) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)


@pytest.mark.parametrize("head_dim", [64, 128])
def test_flash_attention_example_is_proven_clean(examples, head_dim):
    """Nothing unknown, nothing violated: carried row statistics, the accumulator rescale, the
    register A operand (P) and the masks are all modelled. The causal variant skips the keys
    past the diagonal: k-once proves that they are zero in P at the iterations the loop would
    need for them (the mask's -inf through exp2: transfer/values.py), so no warning either
    (a k-once warning before the value facts)."""
    ex = examples("flash_attention")
    diags = verify.check(lower_only(ex.attention_kernel(head_dim)))
    assert not diags, "\n".join(str(d) for d in diags)
    causal = verify.run(lower_only(ex.attention_kernel(head_dim, causal=True)),
                        include_proven=True)
    open_ = [d for d in causal.diagnostics if d.severity != "note"]
    assert not open_, "\n".join(str(d) for d in open_)
    assert any(f.code == "wgmma.k-once" and f.subject.endswith("covers [0, K)") and
               f.status == "proven" for f in causal.findings)


def _library():
    from argus.kernels import gemm as G
    from argus.kernels import gemm_fp8 as F

    promoted = F.Fp8GemmSchedule(bn=128, stages=6, promote=True)
    return [("gemm", G.gemm, {}), ("gemm_kn", G.gemm_kernel(b_layout="kn"), {}),
            ("gemm_fp8_promoted", F.gemm_fp8_kernel(), {"s": promoted}),
            ("gemm_fp8_blockscaled", F.gemm_fp8_blockscaled_kernel(), {"s": promoted}),
            ("gemm_fp8_blockscaled_160", F.gemm_fp8_blockscaled_kernel(),
             {"s": F.Fp8GemmSchedule(bn=160, stages=5, promote=True, cluster_m=2)}),
            ("gemm_batched", G.gemm_kernel(batched=True), {}),
            ("gemm_f16", G.gemm_kernel(in_dtype=G.ag.f16, out_dtype=G.ag.f16), {}),
            ("gemm_nonpersistent", G.gemm, {"s": G.GemmSchedule(persistent=False)}),
            ("gemm_3_stages_bn128", G.gemm, {"s": G.GemmSchedule(stages=3, bn=128)})]


@pytest.mark.parametrize("name,kernel_fn,cx", _library(), ids=[n for n, _, _ in _library()])
def test_library_kernels_verify_clean(name, kernel_fn, cx):
    report = verify.run(kernel_fn, lower=True, **cx)
    assert not report.errors, "\n".join(str(d) for d in report.errors)
    assert len(report.proven) >= 20


def test_include_proven_and_json(examples):
    diags = verify.check(examples("elementwise").KERNEL, include_proven=True, lower=True)
    notes = [d for d in diags if d.severity == "note"]
    assert notes and all(d.message.startswith("proven:") for d in notes)
    data = json.loads(json.dumps([d.to_json() for d in diags]))
    assert {"severity", "code", "message", "loc", "counterexample", "fix"} <= set(data[0])


def test_cli_exit_codes(tmp_path):
    env_py = sys.executable
    ok = subprocess.run([env_py, "-m", "argus", "verify", "examples/elementwise.py", "--quiet"],
                        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "invariants proven" in ok.stdout
    bad = tmp_path / "bad.py"
    bad.write_text(
        "import argus as ag\n"
        "@ag.kernel(threads=256)\n"
        "def k(X: ag.Tensor['M', 'N', ag.f32], b: ag.Tensor[1, 'N', ag.f32],\n"
        "      Y: ag.Tensor['M', 'N', ag.f32]):\n"
        "    pm, pn = ag.grid(ag.cdiv(X.shape[0], 4), ag.cdiv(X.shape[1], 256))\n"
        "    x = ag.load(X, (pm * 4, pn * 256), (4, 256))\n"
        "    v = ag.load(b, (0, 0), (1, 256))\n"
        "    ag.store(Y, (pm * 4, pn * 256), x + v)\n")
    out = subprocess.run([env_py, "-m", "argus", "verify", f"{bad}::k", "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    diags = json.loads(out.stdout)
    assert any(d["code"] == "ew.broadcast" and d["severity"] == "error" for d in diags)
    missing = subprocess.run([env_py, "-m", "argus", "verify", f"{bad}::nope"], cwd=ROOT,
                             capture_output=True, text=True, timeout=300, check=False)
    assert missing.returncode == 2
