"""GPU tier: the convolution path of argus.compose and of argus.ops.conv.convolve on the H200,
against float64 references on fresh data.

- the strict form (fp32 as 6 bf16 products, every K step's partial promoted) meets the judge's
  strict fp32 bounds (normwise 1e-5, worst element 1e-4) on a long-K layer with all-positive
  data, where the tensor core's truncating accumulation would add up;
- the weight operand cache notices an in-place update of the weight and a new weight tensor;
- a repeated call takes the prepared launch and still reads the input's current contents;
- composed KernelBench convolution tasks (level 1 and 2, at reduced sizes) match the task's
  Model in float64 within the strict bound, with the convolution on the GPU kernel.
"""

from __future__ import annotations
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.loading import load_file  # noqa: E402

pytestmark = hopper_only()

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT.parent / "shared" / "kernelbench"


def _errors(y, ref):
    """(normwise, worst element relative to max(|ref_i|, rms(ref))): the judge's measures."""
    d = (y.double() - ref).abs()
    rms = ref.pow(2).mean().sqrt()
    return ((d.norm() / ref.norm()).item(),
            (d / (ref.abs() + rms)).max().item())


@pytest.mark.parametrize("shape", [(2, 256, 14, 14, 256, 3, 3), (1, 64, 56, 56, 64, 3, 3)],
                         ids=["c4_K2304", "c2_K576"])
def test_strict_fp32_split_on_positive_data(shape):
    import torch.nn.functional as F

    from argus.ops.conv import convolve, schedule_for

    N, C, H, W, K, R, S = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.rand(N, C, H, W, device="cuda", generator=g)
    w = torch.rand(K, C, R, S, device="cuda", generator=g)
    b = torch.rand(K, device="cuda", generator=g)
    assert schedule_for(x, w, 1, 1, 1, 1).promote
    y = convolve(x, w, b, 1, 1, 1, 1, terms=6)
    ref = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
    assert y.dtype == torch.float32 and y.shape == ref.shape
    l2, elem = _errors(y, ref)
    assert l2 <= 1e-5 and elem <= 1e-4, (l2, elem)


def test_weight_cache_sees_inplace_updates_and_new_tensors():
    import torch.nn.functional as F

    from argus.ops import conv2d

    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(2, 64, 16, 16, device="cuda", generator=g).bfloat16()
    w = (torch.randn(64, 64, 3, 3, device="cuda", generator=g) / 24).bfloat16()
    y1 = conv2d(x, w, None, 1, 1).double()
    with torch.no_grad():
        w.mul_(-2)                                       # same tensor, new version
    y2 = conv2d(x, w, None, 1, 1).double()
    assert torch.allclose(y2, -2 * y1, rtol=1e-2, atol=1e-2 * y1.abs().max().item())
    del w
    w3 = (torch.randn(64, 64, 3, 3, device="cuda", generator=g) / 24).bfloat16()
    y3 = conv2d(x, w3, None, 1, 1)                       # may reuse the freed address
    ref = F.conv2d(x.double(), w3.double(), None, 1, 1)
    assert ((y3.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2


def test_repeated_calls_take_the_prepared_launch_and_read_current_data():
    """The second call with the same tensors skips the preparation (ops.conv._REPEATS) but
    reads x's current contents; a new weight version is prepared again."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    g = torch.Generator(device="cuda").manual_seed(2)
    x = torch.randn(2, 64, 14, 14, device="cuda", generator=g).bfloat16() \
        .to(memory_format=torch.channels_last)
    w = (torch.randn(64, 64, 3, 3, device="cuda", generator=g) / 24).bfloat16()
    b = torch.randn(64, device="cuda", generator=g).bfloat16()

    def check(y):
        ref = F.conv2d(x.double(), w.double(), b.double(), 1, 1)
        assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2

    conv_ops._REPEATS.clear()
    check(conv_ops.conv2d(x, w, b, 1, 1))
    assert len(conv_ops._REPEATS) == 1                  # channels-last bf16: a view of x
    (entry,) = conv_ops._REPEATS.values()
    with torch.no_grad():
        x.copy_(torch.randn(x.shape, device="cuda", generator=g).bfloat16())
    y = conv_ops.conv2d(x, w, b, 1, 1)
    # the same entry served it (a miss would have stored a new one under the same key)
    assert list(conv_ops._REPEATS.values()) == [entry]
    check(y)
    with torch.no_grad():
        w.add_(0.5)                                     # new version: prepared again
    check(conv_ops.conv2d(x, w, b, 1, 1))
    (again,) = conv_ops._REPEATS.values()
    assert again is not entry


def test_transposed_weights_are_derived_once_per_version():
    """conv_transpose2d's flipped / per-phase weights are kept per weight and version: a
    second call reuses them, an in-place update derives them again (and stays right)."""
    import torch.nn.functional as F

    from argus.ops import conv as conv_ops

    g = torch.Generator(device="cuda").manual_seed(4)
    x = torch.randn(2, 32, 9, 9, device="cuda", generator=g).bfloat16()
    w = (torch.randn(32, 16, 3, 3, device="cuda", generator=g) / 12).bfloat16()
    for stride in (1, 2):
        conv_ops._DERIVED.clear()
        conv_ops.conv_transpose2d(x, w, None, stride, 1)
        first = len(conv_ops._DERIVED)
        derived = [made for _, made in conv_ops._DERIVED.values()]
        y = conv_ops.conv_transpose2d(x, w, None, stride, 1)
        # the same derived tensors (a miss would have stored new ones under the same keys)
        again = [made for _, made in conv_ops._DERIVED.values()]
        assert first >= 1 and len(again) == first and all(
            a is b for a, b in zip(again, derived))
        with torch.no_grad():
            w.mul_(-1)
        y2 = conv_ops.conv_transpose2d(x, w, None, stride, 1)
        # derived again for the new version; the old version's tensors let go of
        # (argus.ops.weight_cache keeps one version per weight and derivation)
        assert len(conv_ops._DERIVED) == first
        assert not {id(a) for _, a in conv_ops._DERIVED.values()} & {id(b) for b in derived}
        ref = F.conv_transpose2d(x.double(), w.double(), None, stride, 1)
        assert ((y2.double() - ref).abs().max() / ref.abs().max()).item() < 1e-2
        assert torch.allclose(y2.double(), -y.double(), atol=1e-2)
        with torch.no_grad():
            w.mul_(-1)


TASKS = [("level1", "67_conv_standard_1D.py"), ("level1", "87_conv_pointwise_2D.py"),
         ("level1", "82_conv_depthwise_2D_square_input_square_kernel.py"),
         ("level1", "57_conv_transposed_2D__square_input__square_kernel.py"),
         ("level1", "60_conv_standard_3D__square_input__asymmetric_kernel.py"),
         ("level2", "1_Conv2D_ReLU_BiasAdd.py"), ("level2", "73_Conv2d_BatchNorm_Scaling.py"),
         ("level2", "46_Conv2d_Subtract_Tanh_Subtract_AvgPool.py"),
         ("level2", "15_ConvTranspose3d_BatchNorm_Subtract.py")]


def _import(path: Path, name: str):
    return load_file(path, name)


@pytest.mark.skipif(not KB.exists(), reason="KernelBench tasks not found")
@pytest.mark.parametrize("level,name", TASKS)
def test_composed_conv_task_is_strict_on_gpu(level, name, tmp_path):
    from argus.bench.kernelbench.shrink import SizeBudget, plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose import compose_task

    path = KB / level / name
    comp = compose_task(path)
    assert comp.complete and comp.steps.get("convolutions"), comp.describe()
    (tmp_path / name).write_text(comp.source)
    solution = _import(tmp_path / name, f"gpu_sol_{path.stem}")
    plan = plan_sizes(path, SizeBudget(1 << 22, 2e9))
    task = load_task(path, plan.overrides)
    torch.manual_seed(0)
    init = list(task.get_init_inputs())
    ref = task.Model(*init).cuda()
    new = solution.ModelNew(*init).cuda()
    new.load_state_dict(ref.state_dict())
    ref = ref.double()
    torch.manual_seed(1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    signed = [torch.randn_like(x) if isinstance(x, torch.Tensor) and x.is_floating_point()
              else x for x in inputs]
    for xs in (inputs, signed):
        with torch.no_grad():
            r = ref(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                      else x for x in xs])
            y = new(*xs)
        assert y.is_cuda and tuple(y.shape) == tuple(r.shape)
        l2, _ = _errors(y, r)
        assert l2 <= 1e-5, (name, l2)
