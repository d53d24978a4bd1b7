"""ag.store(transposed=True) of any 2-d register tile (issue 17): the tile's layout relabeled
(RL.transpose) is a store of its transpose. Layout inference gives a tile that is stored
transposed V x V blocks a thread (vblocks, V = 16 bytes of elements), loaded as V-wide
chunks of its rows and stored as V-wide chunks of its columns, the destination's rows: no
data moves between threads. A tile that arrives in another layout is converted (through
shared memory padded one element a row) into it.

Checked here: the layouts (exact, the relabeling), the interpreter bit for bit against torch
(odd shapes, B > 1, one-wide, every copy dtype, -0.0 / NaN / inf), the verifier (store.coords,
store.once and store.coverage proven for compose's transpose and round_nhwc; a wrong offset
caught), the CUDA that codegen renders (vector accesses, the padded exchange) and, with NVRTC,
the SASS (128-bit LDG / STG, no local memory)."""

import re

import pytest
import torch

import argus as ag
from argus import codegen, verify
from argus.analysis import alignment
from argus.compose.launch import _transpose_kernel, transpose
from argus.kernels.conv_tf32 import round_nhwc, round_nhwc_for
from argus.ops.conv import round_to_tf32
from argus.runtime import nvrtc_available
from argus.target import register_layouts as RL

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64]
SHAPES = [(2, 70, 33), (1, 1, 5), (3, 130, 1), (1, 64, 64), (2, 129, 65)]
_BITS = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def _specials(x: torch.Tensor) -> torch.Tensor:
    """x with -0.0, NaN and -inf at its first elements (floats): a copy must keep their bits."""
    if x.dtype.is_floating_point:
        flat = x.view(-1)
        for k, v in enumerate((-0.0, float("nan"), float("-inf"), float("inf"))):
            if k < flat.numel():
                flat[k] = v
    return x


def _source(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        return _specials(torch.randn(shape, generator=g).to(dtype))
    hi = 2 ** 62 if dtype == torch.int64 else 2 ** 30
    return torch.randint(-hi, hi, shape, generator=g, dtype=dtype)


# ----------------------------------------------------------------------------- layouts


@pytest.mark.parametrize("shape,threads,vec,run", [((64, 64), 256, 4, 4), ((32, 128), 256, 4, 4),
                                                   ((128, 128), 256, 8, 4), ((4, 8), 128, 2, 1),
                                                   ((64, 64), 256, 2, 4)])
def test_vblocks_is_exact_and_transposes_by_relabeling(shape, threads, vec, run):
    lay = RL.build(f"vblocks({vec},{run})", shape, threads)
    assert lay.check_exact() is None
    # registers k*vec .. k*vec + vec - 1: consecutive elements of one row; every vec x vec
    # block is one thread's
    for k in range(0, lay.nregs, vec):
        row, col = lay.regs[k]
        assert col % vec == 0
        assert [lay.regs[k + j] for j in range(vec)] == [(row, col + j) for j in range(vec)]
    assert all(img[0] % vec == 0 and img[1] % vec == 0 for img in lay.thread_bases)
    t = RL.build(f"transpose(vblocks({vec},{run}))", shape[::-1], threads)
    assert t.check_exact() is None
    for thread in range(0, threads, 7):
        for r in range(lay.nregs):
            assert t.coord(thread, r) == lay.coord(thread, r)[::-1]


def test_the_layout_keeps_one_block_a_thread():
    """V halves until every thread has a block of its own (8 x 8 bf16 blocks are 64 of a
    64 x 64 tile: replicated blocks would load and store twice)."""
    from argus.analysis.layouts import _vblocks
    from argus.dtypes import bf16, f32, i64
    from argus.ir.types import TileType

    assert _vblocks(TileType(f32, (64, 64)), 256) == "vblocks(4,4)"
    assert _vblocks(TileType(bf16, (64, 64)), 256) == "vblocks(4,8)"    # 64-byte runs
    assert _vblocks(TileType(bf16, (128, 128)), 256) == "vblocks(8,4)"
    assert _vblocks(TileType(i64, (64, 64)), 256) == "vblocks(2,4)"


# ----------------------------------------------------------------------------- interpreter


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_compose_transpose_is_bit_exact(dtype):
    k = _transpose_kernel(dtype)
    for n, shape in enumerate(SHAPES):
        x = _source(shape, dtype, n)
        y = torch.full((shape[0], shape[2], shape[1]), 7, dtype=dtype)
        k.interpret(x, y)
        ref = x.transpose(1, 2).contiguous()
        bits = _BITS[dtype.itemsize]
        assert torch.equal(y.view(bits), ref.view(bits)), (dtype, shape)


@pytest.mark.parametrize("consts", [{}, {"BR": 32, "BC": 128}, {"BR": 128, "BC": 8},
                                    "narrowest"])
def test_round_nhwc_is_the_rounded_transpose_with_zero_padding(consts):
    for n, (b, c, r, cp) in enumerate([(2, 3, 70, 4), (1, 64, 64, 64), (3, 37, 129, 40),
                                       (1, 1, 1, 4), (2, 13, 1030, 16), (1, 6, 600, 8)]):
        x = _source((b, c, r), torch.float32, n)
        y = torch.full((b, r, cp), float("nan"))
        if consts == "narrowest":       # the op's pick: round_nhwc_for(cp)
            round_nhwc_for(cp).interpret(x, y)
        else:
            round_nhwc.interpret(x, y, **consts)
        want = torch.zeros(b, r, cp)
        want[:, :, :c] = round_to_tf32(x.transpose(1, 2))
        assert torch.equal(y.view(torch.int32), want.view(torch.int32)), (b, c, r, cp)


# ----------------------------------------------------------------------------- verifier


@pytest.mark.parametrize("kernel,consts", [(transpose, {}), (transpose, {"BR": 32, "BC": 128}),
                                           (round_nhwc, {})],
                         ids=["transpose", "transpose-32x128", "round_nhwc"])
def test_transposed_store_kernels_verify(kernel, consts):
    diags = verify.check(kernel, lower=True, include_proven=True, **consts)
    errors = [d for d in diags if d.severity != "note"]
    assert not errors, "\n".join(str(d) for d in errors)
    proven = {d.code for d in diags}
    assert {"store.coords", "store.once", "store.coverage"} <= proven, proven


def _seeded(shift_r: int, shift_c: int):
    @ag.kernel(threads=256, name="transpose_seeded")
    def seeded(X: ag.Tensor["B", "R", "C", ag.f32], Y: ag.Tensor["B", "C", "R", ag.f32],
               BR: int = 64, BC: int = 64):
        tiles_r = ag.cdiv(X.shape[1], BR)
        tiles_c = ag.cdiv(X.shape[2], BC)
        (p,) = ag.grid(X.shape[0] * tiles_r * tiles_c)
        j = p % tiles_c
        i = (p // tiles_c) % tiles_r
        b = p // (tiles_c * tiles_r)
        x = ag.load(X, (b, i * BR, j * BC), (BR, BC))
        ag.store(Y, (b, j * BC + shift_c, i * BR + shift_r), x, transposed=True)
    return seeded


def test_round_nhwc_for_spans_the_padded_channels():
    from argus.kernels import conv_tf32

    assert round_nhwc_for(4) is conv_tf32.round_nhwc4
    assert round_nhwc_for(12) is conv_tf32.round_nhwc16
    assert round_nhwc_for(32) is conv_tf32.round_nhwc32
    assert round_nhwc_for(40) is round_nhwc


@pytest.mark.parametrize("shift", [(1, 0), (0, 1)], ids=["row+1", "col+1"])
def test_a_wrong_offset_of_a_transposed_store_is_caught(shift):
    codes = {d.code for d in verify.check(_seeded(*shift), lower=True)
             if d.severity == "error"}
    assert codes & {"store.coords", "store.coverage"}, codes


def test_swapped_offsets_are_caught():
    """The offsets of the untransposed store (the tile's own axes) on a transposed store."""
    @ag.kernel(threads=256, name="transpose_swapped")
    def swapped(X: ag.Tensor["B", "R", "C", ag.f32], Y: ag.Tensor["B", "C", "R", ag.f32]):
        tiles_r = ag.cdiv(X.shape[1], 64)
        tiles_c = ag.cdiv(X.shape[2], 64)
        (p,) = ag.grid(X.shape[0] * tiles_r * tiles_c)
        j = p % tiles_c
        i = (p // tiles_c) % tiles_r
        b = p // (tiles_c * tiles_r)
        ag.store(Y, (b, i * 64, j * 64), ag.load(X, (b, i * 64, j * 64), (64, 64)),
                 transposed=True)
    errors = [d for d in verify.check(swapped, lower=True) if d.severity == "error"]
    assert any(d.code == "store.coords" for d in errors), [str(d) for d in errors]


# ----------------------------------------------------------------------------- codegen


def _cuda(fn):
    lowered = fn.lower()
    spec = alignment.LaunchSpecialization(("X", "Y"), ())
    return codegen.render(alignment.specialize(lowered, spec))


def test_the_lowering_moves_no_data_between_threads():
    from argus.ir.printer import print_kernel

    text = print_kernel(transpose.lower())
    assert re.search(r"tile<f32, 64x64, vblocks\(4,4\)> = load", text), text
    assert "convert_layout" not in text and "smem.alloc" not in text, text
    cuda = _cuda(transpose).text
    assert cuda.count("ag::ld_global_f32x4(") == 4 and cuda.count("ag::st_global_f32x4(") == 4
    assert "__syncthreads" not in cuda


def test_a_tile_in_another_layout_is_converted_with_padding():
    from argus.ir.parser import parse_kernel
    from argus.ir.printer import print_kernel

    @ag.kernel(threads=256, name="sum_transposed")
    def summed(X: ag.Tensor["R", "C", ag.f32], Z: ag.Tensor["R", "C", ag.f32],
               Y: ag.Tensor["C", "R", ag.f32]):
        (p,) = ag.grid(ag.cdiv(X.shape[0], 64) * ag.cdiv(X.shape[1], 64))
        j = p % ag.cdiv(X.shape[1], 64)
        i = p // ag.cdiv(X.shape[1], 64)
        # a gather is "rows" (whole rows a thread): the store needs its tile converted
        rows = i * 64 + ag.arange(64)[:, None]
        cols = j * 64 + ag.arange(64)[None, :]
        x = ag.gather(X, (rows, cols)) + ag.load(Z, (i * 64, j * 64), (64, 64))
        ag.store(Y, (j * 64, i * 64), x, transposed=True)

    text = print_kernel(summed.lower())
    assert re.search(r"convert_layout\(.*\{pad=1\}", text), text
    assert print_kernel(parse_kernel(text)) == text      # the pad and vblocks(V,run) read back
    x, z = torch.randn(70, 130), torch.randn(70, 130)
    y = torch.full((130, 70), float("nan"))
    summed.interpret(x, z, y)
    assert torch.equal(y, (x + z).T)
    errors = [d for d in verify.check(summed, lower=True) if d.severity == "error"]
    assert not errors, "\n".join(str(d) for d in errors)


def test_accumulator_transposed_store_is_unchanged():
    """A wgmma accumulator keeps its own transposed store (no conversion, no vblocked load)."""
    from argus.ir.printer import print_kernel

    @ag.kernel(threads=128)
    def k(C: ag.Tensor["N", "M", ag.f32]):
        ag.grid(1)
        sa = ag.smem((64, 64), ag.bf16, swizzle=128)
        sb = ag.smem((64, 64), ag.bf16, swizzle=128)
        acc = ag.wgmma(sa, sb, ag.zeros((64, 64), ag.f32))
        ag.store(C, (0, 0), acc, transposed=True)
    text = print_kernel(k.lower())
    assert "convert_layout" not in text and "vblocked" not in text, text


@pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")
@pytest.mark.parametrize("dtype,vector_ops", [(torch.float32, 4), (torch.bfloat16, 8),
                                              (torch.int32, 4), (torch.int64, 8)], ids=str)
def test_sass_has_128_bit_global_accesses_and_no_spills(dtype, vector_ops):
    """One 16-byte load and store per block row a thread (4 x 4 f32 / i32 blocks; 8 x 8 bf16
    blocks of a 128 x 128 tile; four 2 x 2 i64 blocks), no shared memory, no barrier, no local
    memory."""
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble

    kernels = [_transpose_kernel(dtype)] + \
        ([round_nhwc, round_nhwc_for(4), round_nhwc_for(16)] if dtype == torch.float32 else [])
    for fn in kernels:
        src = _cuda(fn)
        binary = compile_cuda(src.text, [src.name], filename=f"{src.name}.cu", use_cache=False)
        res = binary.resource(src.name)
        assert res.spill_stores == 0 and res.spill_loads == 0 and res.stack_frame == 0, res
        sass = disassemble(binary.cubin)
        if sass is None:
            pytest.skip("no cuobjdump / nvdisasm to read the SASS (NVDISASM=path)")
        assert len(re.findall(r"\bLDG\.E\.128\b", sass)) == vector_ops, fn.name
        assert len(re.findall(r"\bSTG\.E\.128\b", sass)) == vector_ops, fn.name
        assert not re.search(r"\b(LDL|STL|LDS|STS|BAR)\b", sass), fn.name
