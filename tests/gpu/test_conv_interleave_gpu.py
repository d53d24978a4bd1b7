"""GPU tier: a strided transposed convolution's phases interleaved by the Argus kernel
(argus/kernels/conv_interleave.py) on the H200.

- the op (argus.ops.conv_transpose2d / 3d, bf16 / fp16 / fp32 tf32) against torch's own
  transposed convolution in float64, and the interleave bit-for-bit against torch's strided
  copies of the same phase outputs (`_INTERLEAVE_DTYPES` emptied: the fallback);
- composed KernelBench strided ConvTranspose tasks (tf32 track, upstream sizes): the second
  forward launches only Argus kernels (profiler names start with argus_; before, one
  at::native elementwise copy per phase), and matches the task in float64 within tf32's bound.
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only
from tests.loading import load_file

pytestmark = hopper_only()

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT.parent / "shared" / "kernelbench"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "f16"])
@pytest.mark.parametrize("dims,stride,padding,output_padding,groups", [
    (2, 2, 1, 1, 1), (2, (2, 3), (1, 2), (1, 0), 2), (3, 2, 1, 1, 4), (2, 4, 0, 0, 1)])
def test_op_matches_float64_and_the_strided_copies(dims, stride, padding, output_padding,
                                                   groups, dtype, monkeypatch):
    import torch.nn.functional as F

    from argus.ops import conv as conv_op

    g = torch.Generator(device="cuda").manual_seed(0)
    spatial = (5, 9, 11)[-dims:]
    x = torch.randn(2, 64, *spatial, device="cuda", generator=g).to(dtype)
    w = torch.randn(64, 96 // groups, *(3,) * dims, device="cuda", generator=g).to(dtype)
    b = torch.randn(96, device="cuda", generator=g).to(dtype)
    fn = conv_op.conv_transpose2d if dims == 2 else conv_op.conv_transpose3d
    y = fn(x, w, b, stride, padding, output_padding, groups)
    ref = getattr(F, f"conv_transpose{dims}d")(x.double(), w.double(), b.double(), stride,
                                               padding, output_padding, groups)
    assert y.shape == ref.shape and y.is_contiguous()
    err = ((y.double() - ref).norm() / ref.norm()).item()
    assert err <= 1e-2, err
    monkeypatch.setattr(conv_op, "_INTERLEAVE_DTYPES", {})
    copied = fn(x, w, b, stride, padding, output_padding, groups)
    assert torch.equal(y, copied)


STRIDED_TASKS = [
    ("level1", ("73_conv_transposed_3D_asymmetric_input_square_kernel__strided_padded__"
                "grouped.py")),
    ("level1", ("75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____"
                "padded____dilated__.py")),
    ("level1", ("79_conv_transposed_1D_asymmetric_input_square_kernel___padded____strided____"
                "dilated__.py")),
    ("level2", "20_ConvTranspose3d_Sum_ResidualAdd_Multiply_ResidualAdd.py"),
    ("level2", "44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py"),
    ("level2", "100_ConvTranspose3d_Clamp_Min_Divide.py"),
]


@pytest.mark.skipif(not KB.exists(), reason="KernelBench tasks not found")
@pytest.mark.parametrize("level,name", STRIDED_TASKS, ids=[f"{l[-1]}_{n.split('_')[0]}" for
                                                             l, n in STRIDED_TASKS])
def test_composed_strided_conv_transpose_runs_only_argus_kernels(level, name, tmp_path):
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose import compose_task
    from argus.compose.conv import ConvRun

    path = KB / level / name
    comp = compose_task(path, {"conv": ConvRun(precision="tf32")})
    assert comp.complete, comp.describe()
    (tmp_path / name).write_text(comp.source)
    solution = load_file(tmp_path / name, f"gpu_interleave_{path.stem}")
    task = load_task(path)
    torch.manual_seed(0)
    init = list(task.get_init_inputs())
    ref = task.Model(*init).cuda()
    new = solution.ModelNew(*init).cuda()
    new.load_state_dict(ref.state_dict())
    torch.manual_seed(1)
    xs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    with torch.no_grad():
        new(*xs)                                       # first call: lower and compile
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            y = new(*xs)
            torch.cuda.synchronize()
        r = ref.double()(*[x.double() if isinstance(x, torch.Tensor) and
                           x.is_floating_point() else x for x in xs])
    events = [e for e in prof.events() if e.device_type.name == "CUDA"
              and "memcpy" not in e.name.lower() and "memset" not in e.name.lower()]
    others = sorted({e.name for e in events if not e.name.startswith("argus_")})
    assert not others, others[:5]
    assert any(e.name.startswith("argus_conv_interleave") for e in events)
    assert tuple(y.shape) == tuple(r.shape)
    err = ((y.double() - r).norm() / r.norm()).item()
    assert err <= 2e-3, err


def test_rows_interleave_past_65535_row_blocks_along_y():
    """A stride-2 interleave of outputs 2 * (16 * 65535 + 1) rows tall: each rows-form launch
    has cdiv(Hq, 16) = 65536 row blocks along y (past CUDA's 65535), launched folded onto x;
    bit for bit against torch's strided assignment."""
    import itertools

    from argus.kernels.conv_interleave import rows_tile
    from argus.ops import conv as conv_op

    hq, ow = 16 * 65535 + 1, 3
    outs, st = (2 * hq, ow), (2, 2)
    threads, rh = rows_tile(ow, hq, 2)
    assert -(-hq // rh) > 65535, (threads, rh)
    g = torch.Generator(device="cuda").manual_seed(0)
    phases, ref = {}, torch.full((1, 2, *outs), 7.0, device="cuda")
    for phase in itertools.product(*(range(s_) for s_ in st)):
        counts = tuple(len(range(a, o, s_)) for a, o, s_ in zip(phase, outs, st))
        phases[phase] = torch.randn(1, 2, *counts, device="cuda", generator=g)
        ref[(slice(None), slice(None)) + tuple(slice(a, None, s_)
                                               for a, s_ in zip(phase, st))] = phases[phase]
    out = torch.full((1, 2, *outs), 7.0, device="cuda")
    conv_op._interleave(out, phases, None, st)
    torch.cuda.synchronize()
    assert torch.equal(out, ref)
