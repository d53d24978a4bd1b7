"""The interleave of a strided transposed convolution's phases (argus/kernels/conv_interleave.py,
argus.ops.conv `_interleave`), on the CPU: the interpreted kernel writes exactly what torch's
per-phase strided copies wrote (bit for bit, -0.0 included; NaN stays NaN, with its payload in
fp32; phase outputs channels-last or NCDHW), the transposed convolutions match torch's in float64, the kernel verifies with zero
findings and compiles for sm_90a, and a composed KernelBench strided ConvTranspose makes no
torch data movement in the transposed convolution (every byte moved by Argus kernels)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from argus import kernel_api
from argus.kernels.conv_interleave import interleave_kernel, interleave_rows_kernel, rows_tile
from argus.ops import conv as conv_op

ROOT = Path(__file__).resolve().parents[2]
KB = ROOT.parent / "shared" / "kernelbench"


class _Launches:
    """Counts interpreted kernel launches by kernel name while active, and says whether an
    interpreter launch is running (its own torch ops are the interpreter's, not the op's)."""

    def __init__(self, monkeypatch):
        self.names = collections.Counter()
        self.inside = 0
        orig = kernel_api.KernelFunction.interpret

        def interpret(kf, *a, **k):
            self.names[kf.name] += 1
            self.inside += 1
            try:
                return orig(kf, *a, **k)
            finally:
                self.inside -= 1
        monkeypatch.setattr(kernel_api.KernelFunction, "interpret", interpret)

    def interleaves(self) -> int:
        return sum(n for k, n in self.names.items() if k.startswith("conv_interleave"))


def _phase_conv(dtype, seed: int = 0, layout: str = "mixed"):
    """A `run` for the transposed convolutions: torch's stride-1 convolution (float32, the
    result in `dtype`) with -0.0 and NaN planted in each phase output; "mixed": every other
    phase channels-last (the im2col route's and the channels-last epilogue's layout) and the
    others NCDHW (the NCHW epilogue's, the depthwise route's); "nc": all NCDHW (the interleave
    kernel's direct form)."""
    calls = [0]

    def run(x, w, b, stride, padding, dilation, groups):
        conv = F.conv2d if x.dim() == 4 else F.conv3d
        y = conv(x.float(), w.float(), None if b is None else b.float(), stride, padding,
                 dilation, groups).to(dtype)
        g = torch.Generator().manual_seed(seed * 1000 + calls[0])
        u = torch.rand(y.shape, generator=g)
        y = torch.where(u < 0.05, torch.full_like(y, float("nan")), y)
        y = torch.where((u >= 0.05) & (u < 0.1), torch.full_like(y, -0.0), y)
        if calls[0] % 2 and layout == "mixed":
            y = y.contiguous(memory_format=torch.channels_last if y.dim() == 4 else
                             torch.channels_last_3d)
        calls[0] += 1
        return y
    return run


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int32 if t.dtype == torch.float32 else torch.int16)


# (dims, in channels, spatial, out channels / groups, kernel, stride, padding, output_padding,
#  dilation, groups, bias)
CASES = [
    (1, 4, (9,), 3, 3, 3, 1, 1, 2, 1, True),                  # L1/79's shape: stride 3, dil 2
    (2, 4, (5, 4), 6, 3, 2, 1, 1, 1, 1, True),                # output_padding, odd sizes
    (2, 6, (3, 5), 2, (3, 4), (2, 3), (1, 2), (1, 0), (1, 2), 3, False),   # groups 3, (2,3)
    (2, 4, (4, 3), 5, 3, 4, 0, 0, 1, 1, True),                # stride 4, 3 taps: bias phases
    (2, 4, (4, 3), 5, 3, 4, 0, 0, 1, 1, False),               # ... zero phases
    (3, 4, (3, 4, 5), 2, 3, 2, 1, 1, 1, 2, True),             # L1/73's form: 3-d, grouped
    (3, 2, (2, 3, 3), 3, (2, 3, 3), (3, 2, 2), (0, 1, 1), (2, 0, 1), 1, 1, True),
    (2, 3, (4, 5), 2, 3, (1, 2), 1, (0, 1), 1, 1, True),      # stride 1 along H
    (3, 2, (3, 2, 4), 3, 2, (2, 1, 3), (1, 0, 1), (1, 0, 2), 1, 1, False),  # stride 1 along H
    (2, 2, (3, 4), 2, 2, (3, 1), 0, 0, 1, 1, True),           # stride 1 along W: one phase
]


def _inputs(case, dtype, seed=0):
    dims, c, spatial, kg, k, *_, groups, bias = case
    g = torch.Generator().manual_seed(seed)
    ks = (k,) * dims if isinstance(k, int) else k
    x = torch.randn(2, c, *spatial, generator=g).to(dtype)
    w = torch.randn(c, kg, *ks, generator=g).to(dtype)
    b = torch.randn(kg * groups, generator=g).to(dtype) if bias else None
    return x, w, b


def _transposed(case, x, w, b, run):
    dims, *_, stride, padding, output_padding, dilation, groups, _ = case
    fn = {1: conv_op.conv_transpose1d, 2: conv_op.conv_transpose2d,
          3: conv_op.conv_transpose3d}[dims]
    return fn(x, w, b, stride, padding, output_padding, groups, dilation, run=run)


@pytest.mark.parametrize("layout", ["mixed", "nc", "cl_out"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["f32", "bf16", "f16"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d_s{c[5]}_g{c[9]}_b{int(c[10])}")
def test_interleave_is_the_strided_copy_bit_for_bit(case, dtype, layout, monkeypatch):
    """The Argus interleave writes the bits torch's per-phase strided copies wrote (the
    fallback path of `_conv_transpose`, kept for other dtypes), in prod(stride[:-1])
    launches; NaN and -0.0 planted in the phase outputs come through unchanged. "cl_out": a
    channels-last x, so a channels-last output (torch's layout), mixed sources, written by
    the out="cl" form."""
    x, w, b = _inputs(case, dtype)
    dims, stride = case[0], case[5]
    if layout == "cl_out":
        if dims == 1:
            pytest.skip("a 1-d result is contiguous")
        x = x.contiguous(memory_format=torch.channels_last if dims == 2 else
                         torch.channels_last_3d)
    sources = "mixed" if layout == "cl_out" else layout
    launches = _Launches(monkeypatch)
    y = _transposed(case, x, w, b, _phase_conv(dtype, layout=sources))
    st = (stride,) * dims if isinstance(stride, int) else stride
    rows = 1
    for s_, n in zip(st[:-1], y.shape[2:-1]):
        rows *= min(s_, n)
    assert launches.interleaves() == rows, launches.names
    names = [k for k in launches.names if k.startswith("conv_interleave")]
    if layout == "cl_out":
        assert all(k.endswith("_ocl") for k in names), launches.names
    else:
        staged = [k for k in names if "_cl" in k]
        assert bool(staged) == (layout == "mixed") or dims == 1 and rows == 1, launches.names
    monkeypatch.setattr(conv_op, "_INTERLEAVE_DTYPES", {})     # torch's strided copies
    ref = _transposed(case, x, w, b, _phase_conv(dtype, layout=sources))
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    assert y.shape == ref.shape and (y.is_contiguous(memory_format=fmt)
                                     if layout == "cl_out" else y.is_contiguous())
    # a 16-bit value moves through an fp32 register (bf16 / fp16 -> fp32 is exact, back is
    # exact for every number); a NaN stays NaN, its payload the conversion's canonical one
    nan = ref.isnan()
    assert torch.equal(y.isnan(), nan)
    if dtype == torch.float32:
        assert torch.equal(_bits(y), _bits(ref))              # payloads too: a select
    assert torch.equal(_bits(y)[~nan], _bits(ref)[~nan]), (y - ref).abs().nan_to_num().max()
    assert y.isnan().any() and (_bits(y) == _bits(torch.tensor(-0.0, dtype=dtype))).any()


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}d_s{c[5]}_g{c[9]}_b{int(c[10])}")
def test_strided_transposed_convolution_matches_float64(case):
    """fp32 phases from torch's fp32 convolution, interleaved by the kernel, against
    F.conv_transpose{1,2,3}d in float64."""
    x, w, b = _inputs(case, torch.float32, seed=1)

    def run(x, w, b, stride, padding, dilation, groups):
        conv = F.conv2d if x.dim() == 4 else F.conv3d
        return conv(x, w, b, stride, padding, dilation, groups)
    y = _transposed(case, x, w, b, run)
    dims, *_, stride, padding, output_padding, dilation, groups, _ = case
    ref = getattr(F, f"conv_transpose{dims}d")(
        x.double(), w.double(), None if b is None else b.double(), stride, padding,
        output_padding, groups, dilation)
    assert y.shape == ref.shape
    err = (y.double() - ref).abs().max().item()
    assert err <= 1e-5 * ref.abs().max().item(), err


# staged (a channels-last source: through shared memory) and direct (NCDHW sources only)
KINDS = [(("cl", "nc", "bias"), 3, "f32", 32), (("cl", "cl"), 2, "bf16", 64),
         (("zero", "cl"), 2, "f16", 64), (("bias", "bias"), 2, "f32", 32),
         (("nc", "nc"), 2, "f32", 32), (("nc", "zero", "bias"), 3, "bf16", 32)]
# (kinds, stride, dtype, bk, out): the channels-last output's form as well
KINDS_OUT = [(*k, "nc") for k in KINDS] + \
    [(("cl", "nc", "bias"), 3, "f32", 32, "cl"), (("cl", "cl"), 2, "bf16", 64, "cl"),
     (("zero", "cl"), 2, "f16", 32, "cl"), (("nc", "zero", "bias"), 3, "bf16", 32, "cl")]


@pytest.mark.parametrize("kinds,stride,dtype,bk,out", KINDS_OUT, ids=lambda v: str(v))
def test_interleave_kernel_verifies_with_zero_findings(kinds, stride, dtype, bk, out):
    """Every output element stored exactly once, proven (store.once and store.coverage are
    notes, not unknowns), the shared exchange's barrier proven (sync.exchange), nothing else
    found."""
    from argus import verify

    # lowered: the IR that runs, with the barrier between the shared writes and the gather
    found = verify.check(interleave_kernel(kinds, stride, dtype, bk, out=out),
                         include_proven=True, timeout_ms=20000, lower=True)
    bad = [d for d in found if d.severity != "note"]
    assert bad == [], [str(d) for d in bad]
    proven = {d.code for d in found if d.severity == "note"}
    staged = {"sync.exchange"} if "cl" in kinds and out == "nc" else set()
    assert {"store.once", "store.coverage"} | staged <= proven, proven


@pytest.mark.parametrize("kinds,stride,dtype,bk,out", KINDS_OUT, ids=lambda v: str(v))
def test_interleave_kernel_compiles_for_sm90a(kinds, stride, dtype, bk, out):
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(interleave_kernel(kinds, stride, dtype, bk, out=out)))
    binary = compile_cuda(source.text, [source.name], filename=f"{source.name}.cu")
    assert binary.cubin
    # a thread holds its channel's row and its output's channels (2 x bk values): in registers
    (res,) = binary.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res


# the rows form (NCDHW, bias and zero sources): threads along the output rows
ROWS_KINDS = [(("nc", "nc"), 2, "f32", 256, 16), (("nc", "nc", "nc"), 3, "f32", 256, 16),
              (("nc", "zero", "bias"), 3, "bf16", 64, 8), (("bias", "bias"), 2, "f32", 128, 1),
              (("nc",), 1, "f16", 256, 16), (("nc", "nc", "nc", "nc"), 4, "f32", 128, 8),
              (("zero", "nc"), 2, "f16", 64, 4)]


@pytest.mark.parametrize("kinds,stride,dtype,threads,rh", ROWS_KINDS, ids=lambda v: str(v))
def test_interleave_rows_kernel_verifies_with_zero_findings(kinds, stride, dtype, threads, rh):
    """The rows form stores every output element exactly once (store.once, store.coverage
    proven), nothing else found."""
    from argus import verify

    found = verify.check(interleave_rows_kernel(kinds, stride, dtype, threads, rh),
                         include_proven=True, timeout_ms=20000, lower=True)
    bad = [d for d in found if d.severity != "note"]
    assert bad == [], [str(d) for d in bad]
    assert {"store.once", "store.coverage"} <= {d.code for d in found}


@pytest.mark.parametrize("kinds,stride,dtype,threads,rh", ROWS_KINDS, ids=lambda v: str(v))
def test_interleave_rows_kernel_compiles_for_sm90a_without_spills(kinds, stride, dtype,
                                                                  threads, rh):
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    source = codegen.render(lower_only(interleave_rows_kernel(kinds, stride, dtype, threads,
                                                              rh)))
    binary = compile_cuda(source.text, [source.name], filename=f"{source.name}.cu")
    (res,) = binary.resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res


@pytest.mark.parametrize("ow,hq,sources", [(255, 64, 2), (255, 63, 4), (9, 1, 1), (64, 200, 3),
                                           (129, 5, 2), (1000, 1000, 1)])
def test_rows_tile_builds_without_spills(ow, hq, sources):
    """Every tile `rows_tile` picks fits 64 registers a thread (no spills) and spans the row."""
    from argus import codegen
    from argus.compiler import lower_only
    from argus.runtime.compile import compile_cuda

    threads, rh = rows_tile(ow, hq, sources)
    assert threads >= min(ow, 256) and 1 <= rh <= 16 and rh <= max(1, 2 * hq)
    kinds = ("nc",) * sources
    source = codegen.render(lower_only(interleave_rows_kernel(kinds, sources, "f32", threads,
                                                              rh)))
    (res,) = compile_cuda(source.text, [source.name], filename=f"{source.name}.cu").resources
    assert res.spill_stores == 0 and res.spill_loads == 0, (threads, rh, res)


@pytest.mark.parametrize("hq,rh", [(101, 8), (100, 8), (64, 16), (128, 16), (97, 8), (112, 16),
                                   (250, 16), (1000, 16), (40, 8)])
def test_rows_tile_halves_where_that_pads_the_plane_less(hq, rh):
    """16 rows a thread unless 8 pad the plane's rows at least 5% less: 101 rows are 7 x 16 =
    112 (11% idle) or 13 x 8 = 104 (the H200's 0.408 vs 0.351 ms, bf16 stride 3); 64 and 128
    tie; 1000 rows (1008 vs 1000, 0.8%) keep 16 and half the CTAs."""
    threads, got = rows_tile(301, hq, 1)
    assert got == rh, (hq, got)
    assert -(-hq // got) * got <= -(-hq // 16) * 16


# (batch, channels, output [D, H, W] or [H, W], stride, bias, None phases): odd sizes,
# several column and row blocks of the rows form, cropped phases
ROWS_SHAPES = [
    (3, 5, (7, 37, 131), (2, 3, 2), True, ((0, 1, 1),)),
    (2, 3, (45, 300), (3, 2), False, ((1, 0),)),
    (2, 4, (1, 70), (1, 3), True, ((0, 2),)),          # 1-d: conv_transpose1d's [N, K, 1, W]
    (1, 2, (5, 18, 257), (1, 2, 1), True, ()),
    (2, 3, (33, 65), (1, 3), True, ((0, 1),)),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize("case", ROWS_SHAPES, ids=lambda c: f"{c[2]}_s{c[3]}")
def test_interleave_writes_each_phase_at_its_stride(case, dtype, monkeypatch):
    """`_interleave` on NCDHW phase outputs (every launch the rows form; cropped, strided
    views of bigger outputs as the convolutions' results are) against torch's strided
    assignment out[..., a_d::s_d, a_h::s_h, a_w::s_w] = phase (bias or 0 where a phase has
    no taps), bit for bit with NaN and -0.0 planted."""
    import itertools

    n, k, outs, st, bias, empty = case
    g = torch.Generator().manual_seed(len(outs) * 7 + sum(outs))
    b = torch.randn(k, generator=g).to(dtype) if bias else None
    phases, ref = {}, torch.full((n, k, *outs), 7.0, dtype=dtype)
    for phase in itertools.product(*(range(min(s_, o)) for s_, o in zip(st, outs))):
        counts = tuple(len(range(a, o, s_)) for a, o, s_ in zip(phase, outs, st))
        target = (slice(None), slice(None)) + tuple(slice(a, None, s_)
                                                    for a, s_ in zip(phase, st))
        if phase in empty:
            phases[phase] = None
            ref[target] = 0.0 if b is None else b.view(1, k, *(1,) * len(outs))
            continue
        big = torch.randn(n, k, *(c + 2 for c in counts), generator=g)
        u = torch.rand(big.shape, generator=g)
        big = torch.where(u < 0.05, torch.full_like(big, float("nan")), big)
        big = torch.where((u >= 0.05) & (u < 0.1), torch.full_like(big, -0.0), big).to(dtype)
        y = big[(slice(None), slice(None)) + tuple(slice(1, 1 + c) for c in counts)]
        phases[phase] = y
        ref[target] = y
    launches = _Launches(monkeypatch)
    out = torch.full((n, k, *outs), 7.0, dtype=dtype)
    conv_op._interleave(out, phases, b, st)
    assert launches.names and all(name.startswith("conv_interleave_rows")
                                  for name in launches.names), launches.names
    assert torch.equal(_bits(out), _bits(ref))


def test_interleave_kernel_refuses_bad_kinds():
    with pytest.raises(ValueError, match="'cl' source"):
        interleave_rows_kernel(("cl", "nc"), 2)
    with pytest.raises(ValueError, match="threads=32"):
        interleave_rows_kernel(("nc",), 1, "f32", 32, 1)
    with pytest.raises(ValueError, match="rh=32"):
        interleave_rows_kernel(("nc",), 1, "f32", 256, 32)
    with pytest.raises(ValueError, match="kinds"):
        interleave_kernel(("cl", "cl", "cl"), 2)
    with pytest.raises(ValueError, match="dtype"):
        interleave_kernel(("cl",), 2, "f64")
    with pytest.raises(ValueError, match="bk=128"):
        interleave_kernel(("cl",), 2, "f32", 128)
    with pytest.raises(ValueError, match="out="):
        interleave_kernel(("cl",), 2, "f32", 32, out="nhwc")


# data-movement-free aten ops: views and allocations (no kernel on the GPU)
_NO_DATA = {"aten.view.default", "aten.slice.Tensor", "aten.alias.default",
            "aten.unsqueeze.default", "aten.squeeze.dim", "aten.permute.default",
            "aten.transpose.int", "aten.empty.memory_format", "aten.as_strided.default",
            "aten.empty_strided.default", "aten.select.int", "aten.expand.default"}

STRIDED_TASKS = [
    ("level1", ("79_conv_transposed_1D_asymmetric_input_square_kernel___padded____strided____"
                "dilated__.py")),
    ("level1", ("75_conv_transposed_2D_asymmetric_input_asymmetric_kernel_strided__grouped____"
                "padded____dilated__.py")),
    ("level2", "44_ConvTranspose2d_Multiply_GlobalAvgPool_GlobalAvgPool_Mean.py"),
    # 3-d, grouped, 8 phases: 3.06 of its 5.90 ms were the strided copies (H200, tf32 track)
    ("level1", ("73_conv_transposed_3D_asymmetric_input_square_kernel__strided_padded__"
                "grouped.py")),
]


@pytest.mark.skipif(not KB.exists(), reason="KernelBench tasks not found")
@pytest.mark.parametrize("level,name", STRIDED_TASKS, ids=[n[:2] + l[-1] for l, n in
                                                             STRIDED_TASKS])
def test_composed_strided_conv_transpose_moves_no_data_in_torch(level, name, tmp_path,
                                                                 monkeypatch):
    """A composed KernelBench strided ConvTranspose (tf32 track, small sizes, interpreted):
    the transposed convolution itself (`_conv_transpose`, `_interleave`) calls no aten op
    that moves data (before: a copy_ per phase, a zeros_like for a phase without taps), the
    interleave kernel runs, and the result matches the task in float64 (tf32 bound)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    from argus.bench.kernelbench.shrink import SizeBudget, plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose import compose_task
    from argus.compose.conv import ConvRun
    from tests.loading import load_file

    path = KB / level / name
    comp = compose_task(path, {"conv": ConvRun(precision="tf32")})
    assert comp.complete, comp.describe()
    (tmp_path / name).write_text(comp.source)
    solution = load_file(tmp_path / name, f"sol_interleave_{path.stem}")
    task = load_task(path, plan_sizes(path, SizeBudget(1 << 14, 1e6)).overrides)
    torch.manual_seed(0)
    init = list(task.get_init_inputs())
    ref = task.Model(*init)
    new = solution.ModelNew(*init)
    new.load_state_dict(ref.state_dict())
    xs = list(task.get_inputs())
    launches = _Launches(monkeypatch)
    mine = {conv_op._conv_transpose.__code__, conv_op._interleave.__code__}

    class Record(TorchDispatchMode):
        """aten ops whose innermost argus/ops/conv.py caller is the transposed convolution
        (the convolutions and weight caches it calls are other functions)."""

        def __init__(self):
            super().__init__()
            self.ops = collections.Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not launches.inside:
                f = sys._getframe(1)
                while f is not None and f.f_code.co_filename != conv_op.__file__:
                    f = f.f_back
                if f is not None and f.f_code in mine:
                    self.ops[str(func)] += 1
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Record() as rec:
        y = new(*xs)
    moved = {op: n for op, n in rec.ops.items() if op not in _NO_DATA}
    assert moved == {}, moved
    assert launches.interleaves() >= 1, launches.names
    with torch.no_grad():
        r = ref.double()(*[x.double() if isinstance(x, torch.Tensor) else x for x in xs])
    assert tuple(y.shape) == tuple(r.shape)
    assert ((y.double() - r).norm() / r.norm()).item() <= 2e-3


# the rows form's grid is (N * K * Dq planes, cdiv(Hq, RH) row blocks, cdiv(OW, BW) width
# blocks): y and z pass CUDA's 65535 at 16 * 65535 rows or 256 * 65535 outputs a row; such a
# launch runs with the whole grid folded onto x (runtime/interp/launch.py launch_grid: the
# rows form uses no clusters; codegen decodes the ids from blockIdx.x), one past 2^31 - 1
# CTAs is a LaunchError before anything runs
@pytest.mark.parametrize("ow,hq,sources,axis", [(3, 16 * 65535 + 1, 1, 1),
                                                (256 * 65535 + 1, 2, 2, 2)])
def test_rows_grid_past_65535_along_y_or_z_is_launched_folded_onto_x(ow, hq, sources, axis):
    import math

    from argus import codegen
    from argus.compiler import lower_only
    from argus.errors import LaunchError
    from argus.runtime.interp.launch import GRID_LIMITS, grid_extents, launch_grid

    threads, rh = rows_tile(ow, hq, sources)
    kernel = lower_only(interleave_rows_kernel(("nc",) * sources, sources, "f32", threads, rh))
    shape = {"N": 2, "K": 3, "DQ": 1, "OW": ow, "HQ": hq}
    grid = grid_extents(kernel, shape)
    # independently: planes, row blocks of rh rows, width blocks of `threads` outputs
    assert grid == (2 * 3 * 1, -(-hq // rh), -(-ow // threads))
    assert grid[axis] > GRID_LIMITS[axis], grid
    assert launch_grid(kernel, grid) == (math.prod(grid), 1, 1)
    assert "gridDim.y * gridDim.z == 1u" in codegen.render(kernel).text
    huge = grid_extents(kernel, {**shape, "K": 40000})        # 2.6e9 CTAs folded
    with pytest.raises(LaunchError, match="more than x"):
        launch_grid(kernel, huge)


@pytest.mark.slow
def test_rows_kernel_interprets_a_grid_past_65535_along_y():
    """65536 row blocks (rh 1) along y: the interpreter runs what the GPU runs folded (~20 s)."""
    kernel = interleave_rows_kernel(("nc",), 1, "f32", 64, 1)
    hq = 65536
    g = torch.Generator().manual_seed(5)
    y = torch.randn(1, 1, 1, hq, 1, generator=g)
    out = torch.full((1, 1, 1, 1, hq, 1), 7.0)
    kernel.interpret(out, y)
    assert torch.equal(out.reshape(-1), y.reshape(-1))
