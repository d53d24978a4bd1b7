"""The MoE kernels verify with zero findings, at the sizes the library uses (Mixtral's 8 and
DeepSeek-V3's 256 experts, both GEMM tiles). The one exception is named: the permute's scatter
to routed positions (argus.ops.moe.UNVERIFIED), whose store.once the verifier cannot prove
through positions loaded at run time; this test pins that it is the only finding, so a new one
shows."""

import importlib

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels import moe_routing as R
from argus.kernels.moe import PREFILL, SMALL, grouped_gemm_kernel

M = importlib.import_module("argus.ops.moe")

KERNELS = [
    ("gate_up 128x256", lambda: (grouped_gemm_kernel(True), dict(s=PREFILL))),
    ("down 128x256", lambda: (grouped_gemm_kernel(False), dict(s=PREFILL))),
    ("gate_up 64x128", lambda: (grouped_gemm_kernel(True), dict(s=SMALL))),
    ("down 64x128", lambda: (grouped_gemm_kernel(False), dict(s=SMALL))),
    ("topk softmax", lambda: (R.topk_softmax_kernel(ag.bf16, 2, True, 32), {})),
    ("topk softmax k8 E256", lambda: (R.topk_softmax_kernel(ag.f32, 8, False, 256), {})),
    ("topk grouped sigmoid", lambda: (R.topk_sigmoid_grouped_kernel(ag.f32, 8, True, 256, 8, 4,
                                                                     2.5), {})),
    ("count", lambda: (R.count_kernel(256), {})),
    ("offsets", lambda: (R.offsets_kernel(256, 128), {})),
    ("positions", lambda: (R.positions_kernel(32), {})),
    ("combine", lambda: (R.combine_kernel(8, M.BH), {})),
]


@pytest.mark.parametrize("name,build", KERNELS, ids=[k[0] for k in KERNELS])
def test_moe_kernel_verifies_clean(name, build):
    kernel, kw = build()
    report = verify.run(lower_only(kernel, **kw))
    assert not report.errors, "\n".join(str(d) for d in report.errors)


def test_permute_is_the_named_exception():
    kernel = R.permute_kernel(2, M.BH)
    assert kernel.name.startswith(M.UNVERIFIED)
    report = verify.run(lower_only(kernel))
    assert [d.code for d in report.errors] == ["store.once"]
