"""Launching compose kernels, and the copies every template may need.

`run` compiles a kernel for sm_90a on CUDA tensors and interprets it on CPU tensors. `copy_into`
makes a strided tensor (any rank, permutation, step slice or expanded dim) contiguous with Argus
kernels: a row copy when the innermost dim of its merged layout is contiguous, the tile
transpose (a transposed store) from the dim that is contiguous otherwise. Every kernel reads
rows contiguously (both launches refuse another inner stride: runtime/args.check_inner_stride),
so a strided input goes through `copy_into` before a kernel sees it.
"""

from __future__ import annotations

import math
from typing import Any

import torch

import argus as ag
from argus import config
from argus.build_memo import BuildMemo
from argus.compose import tile
from argus.runtime import gpu_gate


# The CompiledKernel of each (kernel, compile-time values) a CUDA launch used, and whether it
# was verified: `kernel.compile(**constexprs)` fills its defaults and builds its cache key on
# every call (~6 us of Python on the judge's host, per launch), which a small kernel's forward
# pays before its launch (L1/12, ~40 us of GPU time). Keyed by the values as passed (one call
# site passes them alike); values that do not hash take the compile lookup every time.
# Bounded (oldest first out): every composed program renders kernels of its own, and a
# process that lowers many models (the judge) must not keep all of them.
# A BuildMemo (argus/build_memo.py): keyed on the build choices too (ARGUS_WGMMA_A_FENCE).
_COMPILED: BuildMemo = BuildMemo()
_COMPILED_MAX = 512


def _built(kernel, constexprs: dict):
    """(key, the CompiledKernel of an earlier launch or None): None too where verification is
    asked now and the kernel was built unverified (`KernelFunction.built`'s rule)."""
    try:
        key = (kernel, *constexprs.items())
        hit = _COMPILED.get(key)
    except TypeError:                 # an unhashable compile-time value
        return None, None
    if hit is None or (not hit[1] and config.verify_level() >= 1):
        return key, None
    return key, hit[0]


def run(kernel, tensors, **constexprs):
    """Compiled for sm_90a on CUDA tensors, interpreted on CPU tensors, only compiled on meta
    tensors (`CompiledKernel.build_for`: the compile cache filled ahead of time). Compiling happens on
    the first launch of each kernel and launch specialization: under a GPU gate's shared hold
    (a judge's correctness run beside other processes' timings) that CPU-only stretch lets go
    of the GPU (`gpu_gate.yielding`), so a timing waiting for the gate does not wait for
    NVRTC. Past the first launch nothing is compiled and the launch goes straight through,
    holding the gate (`CompiledKernel.ready_for`): the compiled kernel is found in `_COMPILED`
    and a prepared launch plan (same buffers and layouts) is called directly."""
    first = tensors[0]
    if first.is_cuda:
        key, compiled = _built(kernel, constexprs)
        if compiled is not None:
            if not gpu_gate.holding_shared():
                compiled(*tensors)    # its own plan cache; a new signature is prepared there
                return
            plan = compiled.plan_for(*tensors)
            if plan is not None:      # prepared: nothing to compile, the gate stays held
                plan()
                return
        _launch(kernel, tensors, constexprs)
        if key is not None:
            if len(_COMPILED) >= _COMPILED_MAX:
                _COMPILED.popitem(last=False)
            _COMPILED[key] = (kernel.built(**constexprs) or kernel.compile(**constexprs),
                              config.verify_level() >= 1)
        return
    if first.is_meta:                 # ahead-of-time compile (no GPU): build, launch nothing
        kernel.compile(**constexprs).build_for(*tensors)
        return
    kernel.interpret(*tensors, **constexprs)


def _launch(kernel, tensors, constexprs: dict) -> None:
    """The launch `run` makes when no prepared plan serves it (compiles when needed)."""
    if gpu_gate.holding_shared():     # one thread-local lookup: launches stay cheap
        compiled = kernel.built(**constexprs)
        if compiled is None or not compiled.ready_for(tensors):
            # only a launch that compiles lets go (a yield syncs the device and, with a timing
            # queued, waits for it to finish: per launch, that was most of a judged run's time)
            with gpu_gate.gate().yielding():
                compiled = kernel.compile(**constexprs)
                _compile_variant(compiled, tensors)
        compiled(*tensors)
        return
    kernel.compile(**constexprs)(*tensors)


def _compile_variant(compiled, tensors) -> None:
    """Build the launch-specialized variant the first call would build (alignment facts of
    these tensors). Best effort: a failure is left to the launch, which reports it."""
    try:
        compiled.variant(compiled.specialization(tensors, compiled.bind(tensors)))
    except Exception:  # noqa: BLE001 - the launch itself raises the real error
        pass


_run = run


@ag.kernel(threads=256)
def transpose(X: ag.Tensor["B", "R", "C", ag.f32], Y: ag.Tensor["B", "C", "R", ag.f32],
              BR: int = 64, BC: int = 64):
    """Y[b] = X[b]^T, bit for bit (-0.0, NaN and inf included: no arithmetic touches a
    value). The [BR, BC] tile is stored transposed (ag.store(transposed=True)) in 4 x 4
    blocks a thread: each block's rows load as 16 bytes of a row of X, its columns store as 16
    bytes of a row of Y, and no value moves between threads (analysis/layouts.py `_vblocks`)."""
    # one flat grid along x (up to 2^31 - 1 CTAs): y and z stop at 65535, which a batch or a
    # row count of 2^20 pixels / BR already passes (conv_pointwise_2D at upstream sizes)
    tiles_r = ag.cdiv(X.shape[1], BR)
    tiles_c = ag.cdiv(X.shape[2], BC)
    (p,) = ag.grid(X.shape[0] * tiles_r * tiles_c)
    j = p % tiles_c
    i = (p // tiles_c) % tiles_r
    b = p // (tiles_c * tiles_r)
    x = ag.load(X, (b, i * BR, j * BC), (BR, BC))
    ag.store(Y, (b, j * BC, i * BR), x, transposed=True)


# ------------------------------------------------------------------------- strided copy
# The dtypes the layout copies have kernels for (the DSL name): the dtypes KernelBench tasks
# hand a composed kernel (float32, the half types, index tensors). A copy moves values and
# never rounds. float64 is left out: no task uses it, and the interpreter (float32 working
# copies) cannot show its copies exact.
_COPY_DTYPES: dict[torch.dtype, str] = {
    torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16", torch.int64: "i64",
    torch.int32: "i32"}
_COPY: dict[tuple[int, torch.dtype], Any] = {}
_TRANSPOSE: dict[torch.dtype, Any] = {torch.float32: transpose}


def _copy_dtype(src: torch.Tensor) -> str:
    """The DSL name of the copy's dtype, or LaunchError (what, which dtype, how to fix)."""
    from argus.errors import LaunchError

    if src.dtype not in _COPY_DTYPES:
        names = ", ".join(str(d).removeprefix("torch.") for d in _COPY_DTYPES)
        raise LaunchError(f"compose copy_into: no Argus copy kernel for a strided "
                          f"{src.dtype} tensor of shape {tuple(src.shape)} and strides "
                          f"{tuple(src.stride())} (layout copies exist for {names}); fix: make "
                          "the tensor contiguous before the composed model reads it, or add "
                          "the dtype to argus/compose/launch.py _COPY_DTYPES")
    return _COPY_DTYPES[src.dtype]


def _copy_kernel(rank: int, dtype: torch.dtype = torch.float32):
    """dst = src for rank-`rank` tensors, src with any outer strides (inner stride 1)."""
    if (rank, dtype) not in _COPY:
        dt = _COPY_DTYPES[dtype]
        name = f"copy{rank}" if dtype == torch.float32 else f"copy{rank}_{dt}"
        dims = ", ".join(f'"D{i}"' for i in range(rank))
        idx = ", ".join(f"i{i}" for i in range(rank - 1))
        lines = [f"@ag.kernel(threads=256)",
                 f"def {name}(S: ag.Tensor[{dims}, ag.{dt}], D: ag.Tensor[{dims}, ag.{dt}], "
                 f"BN: int = 1024):",
                 f"    p, j = ag.grid({' * '.join(f'S.shape[{i}]' for i in range(rank - 1)) or 1}"
                 f", ag.cdiv(S.shape[{rank - 1}], BN))"]
        rest = "p"
        for i in reversed(range(rank - 1)):
            lines.append(f"    i{i} = {rest} % S.shape[{i}]")
            lines.append(f"    r{i} = {rest} // S.shape[{i}]")
            rest = f"r{i}"
        off = f"{idx}, j * BN" if idx else "j * BN"
        lines.append(f"    ag.store(D, ({off},), ag.load(S, ({off},), (1, BN)))")
        _COPY[(rank, dtype)] = tile.load_source("\n".join(lines) + "\n", name)[name]
    return _COPY[(rank, dtype)]


def _transpose_kernel(dtype: torch.dtype):
    """`transpose` for `dtype` (the float32 kernel itself for float32). The 16-bit floats
    travel in float32 registers (exact both ways for every non-NaN value): their copies keep
    every bit but a NaN's payload, which the conversion back makes the canonical NaN
    (tests/gpu/test_transposed_store_gpu.py `_copy_mismatch`)."""
    if dtype not in _TRANSPOSE:
        dt = _COPY_DTYPES[dtype]
        name = f"transpose_{dt}"
        # 16-byte accesses both ways take 16 / element-size square blocks a thread: 8 x 8 for
        # the half types, which a 64 x 64 tile has only 64 of for 256 threads
        tile_rc = 128 if dtype.itemsize == 2 else 64
        src = (f"@ag.kernel(threads=256)\n"
               f"def {name}(X: ag.Tensor[\"B\", \"R\", \"C\", ag.{dt}],\n"
               f"        Y: ag.Tensor[\"B\", \"C\", \"R\", ag.{dt}], BR: int = {tile_rc}, "
               f"BC: int = {tile_rc}):\n"
               f"    tiles_r = ag.cdiv(X.shape[1], BR)\n"
               f"    tiles_c = ag.cdiv(X.shape[2], BC)\n"
               f"    (p,) = ag.grid(X.shape[0] * tiles_r * tiles_c)\n"
               f"    j = p % tiles_c\n"
               f"    i = (p // tiles_c) % tiles_r\n"
               f"    b = p // (tiles_c * tiles_r)\n"
               f"    x = ag.load(X, (b, i * BR, j * BC), (BR, BC))\n"
               f"    ag.store(Y, (b, j * BC, i * BR), x, transposed=True)\n")
        _TRANSPOSE[dtype] = tile.load_source(src, name)[name]
    return _TRANSPOSE[dtype]


# ranks the row copy is generated for; a tensor whose layout keeps more dims after merging is
# copied one outermost index at a time
_COPY_MAX_RANK = 4


def _layout(t: torch.Tensor) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(shape, strides) of `t` with extent-1 dims dropped and each dim merged into the one
    outside it where the pair is row-major in memory (stride[i] == stride[i+1] * shape[i+1]):
    the fewest dims (at least 2) that address the same elements in the same order."""
    dims = [(n, s) for n, s in zip(t.shape, t.stride()) if n != 1]
    merged: list[tuple[int, int]] = []
    for n, s in dims:
        if merged and merged[-1][1] == s * n:
            merged[-1] = (merged[-1][0] * n, s)
        else:
            merged.append((n, s))
    if not merged:
        merged = [(1, 1)]
    if len(merged) == 1:            # the kernels take at least 2 dims: rows of one row
        merged.insert(0, (1, max(1, merged[0][0] * merged[0][1])))
    return tuple(n for n, _ in merged), tuple(s for _, s in merged)


def copy_into(src: torch.Tensor, dst: torch.Tensor) -> None:
    """dst (contiguous) = src (any strides: a permutation, a slice with a step, an expanded
    dim; any rank), with Argus layout kernels only: the row copy where src's merged layout has
    a contiguous innermost dim, else the tile transpose from the dim that is contiguous
    (through a row copy to a scratch buffer when the other dims do not merge), else (no
    contiguous dim at all) the transpose of src seen with a trailing extent-1 dim of stride 1.
    The views are torch's (`as_strided`, no compute). Every dtype of `_COPY_DTYPES` has the
    kernels; another (bool, float64, 8- or 16-bit integers) is a LaunchError saying so. A
    copy that converts (pool and the GEMM adapter stage inputs in a float32 buffer) is not a
    layout copy: torch converts."""
    if src.dtype != dst.dtype:
        dst.view(src.shape).copy_(src)          # a conversion, no layout template: torch
        return
    _copy_dtype(src)
    if src.numel() == 0:
        return
    shape, strides = _layout(src)
    s = src.as_strided(shape, strides)
    d = dst.view(shape)
    rank = len(shape)
    if rank > _COPY_MAX_RANK or (strides[-1] != 1 and 1 not in strides and rank > 2):
        # one launch per outermost index: the rest has fewer dims (or merges)
        for i in range(shape[0]):
            copy_into(s[i], d[i])
        return
    if strides[-1] == 1:
        _run(_copy_kernel(rank, src.dtype), (s, d), BN=min(1024, tile.pow2(shape[-1])))
        return
    if 1 not in strides:
        # no dim is contiguous: rows of one element (extent 1, stride 1) transposed into place
        outer = shape[0] if rank == 2 else 1
        x = src.as_strided((outer, shape[-1], 1), (strides[0] if rank == 2 else 0,
                                                    strides[-1], 1))
        _run(_transpose_kernel(src.dtype), (x, d.view(outer, 1, shape[-1])))
        return
    k = strides.index(1)                        # the contiguous dim, not the innermost
    outer, n = math.prod(shape[:k]), shape[k]
    inner = math.prod(shape[k + 1:])
    rest_shape, rest_strides = shape[:k] + shape[k + 1:], strides[:k] + strides[k + 1:]
    x = _as_3d(src, (outer, inner, n), rest_shape, rest_strides, k)
    if x is None:                               # the other dims do not merge: rows first
        scratch = torch.empty(rest_shape + (n,), dtype=src.dtype, device=src.device)
        copy_into(s.movedim(k, -1), scratch)
        x = scratch.view(outer, inner, n)
    _run(_transpose_kernel(src.dtype), (x, d.view(outer, n, inner)))


def _as_3d(src, shape3, rest_shape, rest_strides, k):
    """src seen as [outer, inner, n] (n the contiguous dim k; outer the dims before it, inner
    the dims after it, each merged into one stride), or None where they do not merge."""
    def merge(sh, st):
        if not sh:
            return 0
        for i in range(len(sh) - 1):
            if st[i] != st[i + 1] * sh[i + 1]:
                return None
        return st[-1]
    so = merge(rest_shape[:k], rest_strides[:k])
    si = merge(rest_shape[k:], rest_strides[k:])
    if so is None or si is None:
        return None
    return src.as_strided(shape3, (so, si, 1))


__all__ = ["copy_into", "run", "transpose"]
