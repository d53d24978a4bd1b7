"""argus.runtime.args: argument checks and shape-symbol binding, on CPU tensors."""

from __future__ import annotations

import pytest
import torch

from argus import dtypes
from argus.errors import LaunchError
from argus.runtime import bind_shapes, check_tensor_arg


def test_the_documented_message():
    a = torch.zeros(4, 4, dtype=torch.float32)
    with pytest.raises(LaunchError) as info:
        check_tensor_arg(a, kernel="gemm", param="A", dtype=dtypes.bf16, ndim=2)
    text = str(info.value)
    assert text.startswith("kernel gemm, parameter A: expected a CUDA tensor of dtype bf16 with "
                           "2 dims, got float32 on cpu")
    assert info.value.fix == "A.to('cuda', torch.bfloat16)"


def test_good_cpu_tensor_passes():
    check_tensor_arg(torch.zeros(8, 16, dtype=torch.bfloat16), kernel="k", param="x",
                     dtype=dtypes.bf16, ndim=2, device="cpu")


def test_dtype_only_and_rank_only():
    with pytest.raises(LaunchError) as info:
        check_tensor_arg(torch.zeros(8, dtype=torch.float16), kernel="k", param="x",
                         dtype=dtypes.f16, ndim=2, device="cpu")
    assert "with 1 dims" in str(info.value) and "reshape x to 2 dims" in info.value.fix
    with pytest.raises(LaunchError) as info:
        check_tensor_arg(torch.zeros(8, 8, dtype=torch.float16), kernel="k", param="x",
                         dtype=dtypes.bf16, ndim=2, device="cpu")
    assert info.value.fix == "x.to(torch.bfloat16)"


def test_not_a_tensor():
    with pytest.raises(LaunchError, match="got a list") as info:
        check_tensor_arg([1.0], kernel="k", param="x", dtype=dtypes.f32, ndim=1)
    assert "torch.as_tensor(x, dtype=torch.float32, device='cuda')" in info.value.fix


def test_inner_stride_and_alignment():
    t = torch.zeros(16, 16, dtype=torch.bfloat16).t()
    with pytest.raises(LaunchError, match="innermost dim has stride 16") as info:
        check_tensor_arg(t, kernel="k", param="B", dtype=dtypes.bf16, ndim=2, device="cpu")
    assert info.value.fix.startswith("B.contiguous()")
    check_tensor_arg(t, kernel="k", param="B", dtype=dtypes.bf16, ndim=2, device="cpu",
                     inner_contiguous=False)
    base = torch.zeros(64, dtype=torch.bfloat16)
    shifted = base[1:17]  # 2 bytes past an aligned allocation
    with pytest.raises(LaunchError, match="not 16-byte aligned") as info:
        check_tensor_arg(shifted, kernel="k", param="x", dtype=dtypes.bf16, ndim=1, device="cpu")
    assert "x.clone()" in info.value.fix
    check_tensor_arg(shifted, kernel="k", param="x", dtype=dtypes.bf16, ndim=1, device="cpu",
                     align_bytes=2)


def test_bind_shapes():
    specs = {"A": ("M", "K"), "B": ("N", "K"), "C": ("M", "N"), "bias": ("N", 1)}
    values = {"A": torch.empty(64, 32), "B": (48, 32), "C": (64, 48), "bias": (48, 1)}
    assert bind_shapes(specs, values, kernel="gemm") == {"M": 64, "K": 32, "N": 48}


def test_bind_shapes_names_both_parameters():
    specs = {"A": ("M", "K"), "B": ("N", "K")}
    with pytest.raises(LaunchError) as info:
        bind_shapes(specs, {"A": (64, 32), "B": (48, 16)}, kernel="gemm")
    assert str(info.value).startswith("kernel gemm: dimension K is 32 in parameter A (dim 1) but "
                                      "16 in parameter B (dim 1)")
    assert "make A and B agree on K" in info.value.fix


def test_bind_shapes_rank_literal_and_missing():
    with pytest.raises(LaunchError, match="parameter A: expected 2 dims \\[M, K\\], got shape"):
        bind_shapes({"A": ("M", "K")}, {"A": (4, 4, 4)})
    with pytest.raises(LaunchError, match="parameter bias: dim 1 must be 1, got 3"):
        bind_shapes({"bias": ("N", 1)}, {"bias": (4, 3)})
    with pytest.raises(LaunchError, match="parameter C was not given"):
        bind_shapes({"C": ("M",)}, {})


def test_check_on_one_gpu_names_the_op_the_tensor_and_both_devices():
    """The device check argus.ops.scaled_matmul, moe and attention share: a CPU tensor is
    named with the op's fix, a tensor on another GPU than the first input with both devices."""
    from types import SimpleNamespace

    from argus.runtime.args import check_on_one_gpu

    on = [SimpleNamespace(is_cuda=True, device=torch.device("cuda", i)) for i in (0, 1)]
    check_on_one_gpu("argus.ops.x", [("a", on[0]), ("b", on[0])])
    with pytest.raises(LaunchError) as info:
        check_on_one_gpu("argus.ops.x", [("a", on[0]), ("scale_b", torch.zeros(2))])
    assert str(info.value).startswith("argus.ops.x: scale_b is on cpu; Argus kernels run on a "
                                      "CUDA device (sm_90a)")
    assert info.value.fix == "scale_b.cuda()"
    with pytest.raises(LaunchError) as info:
        check_on_one_gpu("argus.ops.attention", [("q", torch.zeros(2))],
                         fix_cpu="{name}.cuda(), or torch SDPA on the CPU")
    assert info.value.fix == "q.cuda(), or torch SDPA on the CPU"
    with pytest.raises(LaunchError, match="argus.ops.x: w is on cuda:1 but x is on cuda:0"):
        check_on_one_gpu("argus.ops.x", [("x", on[0]), ("y", on[0]), ("w", on[1])])
