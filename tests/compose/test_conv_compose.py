"""argus.compose lowers convolutions (nn.Conv1d/2d/3d, nn.ConvTranspose1d/2d/3d and their
functional forms) to the implicit-GEMM kernel: the capture makes one `conv` step per
convolution (nothing left to torch), and the composed program, interpreted on the CPU at small
sizes, matches the model in float64 within the strict fp32 bound (the 6-term split; depthwise
convolutions on their CUDA-core template); plus KernelBench convolution tasks (level 1 and 2)
through the solution file the judge loads."""

from __future__ import annotations
from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from argus.compose.runtime import Program
from tests.loading import load_file

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT.parent / "shared" / "kernelbench"


class ConvChain(nn.Module):
    """Conv2d with 'same' padding and groups, then bias-free conv, ReLU, a channel bias and a
    scale: the level-2 shape (convolution, then elementwise epilogue)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(6, 8, 3, padding="same", groups=2)
        self.conv2 = nn.Conv2d(8, 4, (1, 3), stride=(1, 2), bias=False)
        self.bias = nn.Parameter(torch.randn(4, 1, 1))

    def forward(self, x):
        return torch.relu(self.conv2(self.conv(x))) * 0.5 + self.bias


class Transposed(nn.Module):
    def __init__(self):
        super().__init__()
        self.up1 = nn.ConvTranspose1d(4, 6, 3, stride=2, padding=1, output_padding=1)
        self.up3 = nn.ConvTranspose3d(2, 4, 2, stride=1, groups=2)

    def forward(self, x, v):
        return torch.tanh(self.up1(x)), F.gelu(self.up3(v)).sum()


class Functional(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 3, 3, 2, 2))

    def forward(self, x):
        return F.conv3d(x, self.w, None, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1))


def _err(y, r):
    return ((y.double() - r).norm() / r.norm()).item()


def _program(model, inputs):
    prog = Program.build(model, inputs)
    convs = [s for s in prog.plan.steps if s.kind == "conv"]
    return prog, convs


def test_conv_chain_composes_fully_and_matches():
    torch.manual_seed(0)
    model = ConvChain()
    x = torch.randn(2, 6, 7, 9)
    prog, convs = _program(model, [x])
    assert len(convs) == 2 and prog.unsupported == []
    assert convs[0].node.attrs["padding"] == (1, 1) and convs[0].node.attrs["groups"] == 2
    with torch.no_grad():
        y = prog.run(model, [x])
        r = model.double()(x.double())
    assert y.shape == r.shape and y.is_contiguous()
    assert _err(y, r) <= 1e-5


def test_transposed_1d_3d_compose_and_match():
    torch.manual_seed(1)
    model = Transposed()
    x, v = torch.randn(2, 4, 5), torch.randn(1, 2, 3, 4, 3)

    class First(nn.Module):       # one output per program: the first, then the second
        def __init__(self, m, i):
            super().__init__()
            self.m, self.i = m, i

        def forward(self, a, b):
            return self.m(a, b)[self.i]

    for i in (0, 1):
        wrapped = First(model, i)
        prog, convs = _program(wrapped, [x, v])
        assert any(c.node.attrs["transposed"] for c in convs) and prog.unsupported == []
        with torch.no_grad():
            y = prog.run(wrapped, [x, v])
            r = First(model.double(), i)(x.double(), v.double())
        assert _err(y, r) <= 1e-5, i
        model.float()


def test_functional_conv3d_with_a_parameter_weight():
    torch.manual_seed(2)
    model = Functional()
    x = torch.randn(1, 3, 5, 6, 4)
    prog, convs = _program(model, [x])
    assert len(convs) == 1 and prog.unsupported == []
    with torch.no_grad():
        y = prog.run(model, [x])
        r = model.double()(x.double())
    assert _err(y, r) <= 1e-5


@pytest.mark.parametrize("module,shape", [
    (lambda: nn.Conv2d(4, 8, 3, stride=2, padding=1, groups=4), (2, 4, 9, 8)),   # multiplier 2
    (lambda: nn.Conv2d(4, 4, (3, 2), padding=(2, 0), dilation=(2, 1), groups=4, bias=False),
     (1, 4, 7, 6)),
    (lambda: nn.Conv1d(3, 6, 5, padding=2, groups=3), (2, 3, 11)),
    (lambda: nn.Conv3d(2, 2, 3, stride=(1, 1, 2), padding=1, groups=2), (1, 2, 4, 5, 6))],
    ids=["2d_mult2_stride2", "2d_dilated_nobias", "1d", "3d_stride_w2"])
def test_depthwise_runs_on_the_cuda_core_kernels(module, shape, monkeypatch):
    """groups = input channels: exact fp32 on the CUDA cores, not the split GEMM: 1-d and 2-d
    on argus.ops.conv's depthwise route (its kernel beat compose's template on every row on the
    H200, docs/perf/conv.md 2026-12-03), 3-d on compose's template; matches float64 with
    multiplier, stride, dilation, padding, bias."""
    from argus.compose import conv
    from argus.ops import conv as conv_ops

    used = []
    real_template, real_route = conv.run_depthwise, conv_ops._depthwise
    monkeypatch.setattr(conv, "run_depthwise",
                        lambda *a: used.append("template") or real_template(*a))
    monkeypatch.setattr(conv_ops, "_depthwise",
                        lambda *a: used.append("route") or real_route(*a))
    torch.manual_seed(3)
    model, x = module(), torch.randn(*shape)
    prog, convs = _program(model, [x])
    assert len(convs) == 1 and prog.unsupported == []
    with torch.no_grad():
        y = prog.run(model, [x])
        r = model.double()(x.double())
    assert used == (["template"] if x.dim() == 5 else ["route"]), used
    assert _err(y, r) <= 1e-6


def test_same_padding_with_an_even_kernel_is_left_to_torch():
    """torch pads an even 'same' kernel asymmetrically; the rule declines (torch runs it,
    named as unsupported) instead of computing something else."""
    model = nn.Conv2d(2, 2, 2, padding="same")
    prog, convs = _program(model, [torch.randn(1, 2, 5, 5)])
    assert convs == [] and prog.unsupported


TASKS = [("level1", "67_conv_standard_1D.py"), ("level1", "74_conv_transposed_1D_dilated.py"),
         ("level1", "82_conv_depthwise_2D_square_input_square_kernel.py"),
         ("level2", "1_Conv2D_ReLU_BiasAdd.py")]


def _import(path: Path):
    return load_file(path, f"sol_{path.stem}")


@pytest.mark.skipif(not KB.exists(), reason="KernelBench tasks not found")
@pytest.mark.parametrize("level,name", TASKS)
def test_kernelbench_conv_task(level, name, tmp_path):
    from argus.bench.kernelbench.shrink import SizeBudget, plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose import compose_task

    path = KB / level / name
    comp = compose_task(path)
    assert comp.complete and comp.steps.get("convolutions"), comp.describe()
    (tmp_path / name).write_text(comp.source)
    solution = _import(tmp_path / name)
    task = load_task(path, plan_sizes(path, SizeBudget(1 << 14, 1e6)).overrides)
    torch.manual_seed(0)
    init = list(task.get_init_inputs())
    ref = task.Model(*init)
    new = solution.ModelNew(*init)
    new.load_state_dict(ref.state_dict())
    ref = ref.double()
    torch.manual_seed(1)
    own = list(task.get_inputs())
    signed = [torch.randn_like(x) if isinstance(x, torch.Tensor) and x.is_floating_point()
              else x for x in own]
    for xs in (own, signed):
        with torch.no_grad():
            r = ref(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                      else x for x in xs])
            y = new(*xs)
        assert tuple(y.shape) == tuple(r.shape)
        assert _err(y, r) <= 1e-5, name


def test_pack_split_is_the_ops_split_bit_for_bit():
    """The Argus packing of an fp32 input (transpose + split_pieces) equals argus.ops.conv's
    torch packing, for every split and group count (the kernel then reads the same bytes)."""
    import torch.nn.functional as F

    from argus.compose.conv import pack_split
    from argus.ops import conv as conv_ops

    x = torch.randn(2, 6, 3, 5, 4, generator=torch.Generator().manual_seed(0))
    N, C, D, H, W = x.shape
    for terms, slots in conv_ops.SPLIT_SLOTS.items():
        for groups in (1, 3):
            cg = C // groups
            pieces = conv_ops._bf16_pieces(x.permute(0, 2, 3, 4, 1), 3)
            ref = torch.cat([pieces[i].reshape(N, D, H, W, groups, cg) for i, _ in slots], -1)
            ref = F.pad(ref, (0, -(len(slots) * cg) % 8)).reshape(N, D, H, W, -1)
            assert torch.equal(pack_split(x, slots, groups), ref), (terms, groups)


@pytest.mark.parametrize("which", ["split_pieces", "conv_promoted_f32", "depthwise"])
def test_conv_compose_kernels_compile_for_sm90a(which):
    """NVRTC compiles the kernels the conv step adds to sm_90a (no GPU needed)."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.compose import conv
    from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
    from argus.runtime.compile import compile_cuda

    import argus as ag

    if which == "split_pieces":
        kernel, constexprs = conv.split_pieces, {"SLOTS": (0, 1, 2, 0, 1, 0), "ROWS": 16,
                                                 "BC": 64}
    elif which == "conv_promoted_f32":
        kernel = conv_kernel(ag.bf16, ag.f32, True, "none")
        constexprs = {"geom": ConvGeometry(3, 3, 1, 1, 1, 1, cg_padded=64),
                      "s": ConvSchedule(bm=128, bn=64, bw=64, promote=True)}
    else:
        from argus.compose import tile

        src = conv._depthwise_source((9, 8), (5, 4), (3, 3), (2, 2), (1, 1), (1, 1), 4, 2,
                                     True, 4, 2)
        kernel, constexprs = tile.load_source(src, "depthwise_sm90a")["depthwise"], {}
    source = codegen.render(lower_only(kernel, **constexprs))
    binary = compile_cuda(source.text, [source.name], filename=f"{source.name}.cu")
    assert binary.cubin


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(2, 24, 5, 7), (1, 16, 3, 4, 6)], ids=["2d", "3d"])
def test_a_channels_last_result_is_made_nchw_by_an_argus_kernel(dtype, shape, monkeypatch):
    """The routes that return channels-last (a 16-bit TMA-store epilogue, the im2col route
    below its NCHW bound, the 16-bit pointwise route) are made NCHW by compose's `_nchw` with
    Argus's layout copy, for the 16-bit types as for fp32 (once torch's `.contiguous()` did the
    16-bit ones: GPU time that was not Argus's); bit for bit, and nothing for an NCHW y."""
    from argus.compose import conv as compose_conv
    from argus.compose import launch

    ran = []
    real = launch._run
    monkeypatch.setattr(launch, "_run", lambda kernel, tensors, **kw:
                        ran.append(kernel.name) or real(kernel, tensors, **kw))
    fmt = torch.channels_last if len(shape) == 4 else torch.channels_last_3d
    g = torch.Generator().manual_seed(len(shape))
    y = torch.randn(shape, generator=g).to(dtype).contiguous(memory_format=fmt)
    assert not y.is_contiguous()
    out = compose_conv._nchw(y)
    assert out.is_contiguous() and out.dtype == dtype and torch.equal(out, y)
    assert ran and all("transpose" in name or "copy" in name for name in ran), ran
    ran.clear()
    assert compose_conv._nchw(out) is out and not ran
