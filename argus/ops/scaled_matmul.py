"""`argus.ops.scaled_matmul(a, b, scale_a, scale_b)`: scaled fp8 GEMM on Hopper.

Computes `(a.float() * scale_a) @ (b.float() * scale_b).T` with fp32 accumulation and writes
bf16 (default), fp16 or fp32. Two kinds of scales:

  per-tensor   scale_a, scale_b one-element float32 tensors (torch._scaled_mm's);
  block-scaled scale_a [M, K/128] float32 (one per token and 128-K block, "1x128") and scale_b
               [ceil(N/128), K/128] float32 (one per 128x128 weight block), the DeepSeek-V3 /
               DeepGEMM convention: a[i, k] is scaled by scale_a[i, k // 128] and b[j, k] by
               scale_b[j // 128, k // 128]. K must be a multiple of 128. Either layout of
               scale_a is read in place by one of two kernels: MN-major (`scale_a.stride(0)
               == 1`, DeepGEMM's layout, e.g. `scale_a.t().contiguous().t()`) by the kernel
               that loads scales from global memory; row-major (K-major, K/128 a multiple of
               4) by the one that stages them in shared memory (smem_scales), which the
               default takes at M >= 4096, N >= 2048 with a 16-bit output (the faster one
               there on the H200, docs/perf/fp8.md), in 128 x 256 split tiles or 192 x 128
               tiles of three consumers, whichever fills its waves better
               (fp8_schedules.wave_pick; a tie keeps the split where N is a multiple of 256).
               A schedule that reads the other layout gets a copy of scale_a on every call.
               Each 128-K block's partial product is promoted into fp32 on the CUDA cores
               with its scales (argus/kernels/gemm_fp8.py).

The arguments:

  a        [M, K] torch.float8_e4m3fn, K contiguous (the activations);
  b        [N, K] torch.float8_e4m3fn, K contiguous: the weight W of `x @ W.T` exactly as it is
           stored row-major. (torch._scaled_mm takes the column-major view `W.t()` instead:
           `torch._scaled_mm(a, W.t(), sa, sb)` == `scaled_matmul(a, W, sa, sb)`.)
  scale_a, scale_b  float32 CUDA tensors: one element each (0-d or [1]), like torch._scaled_mm's
           per-tensor scales, or the block scales above; the kernel reads them on the device,
           so nothing syncs the host.

Small M with per-tensor scales (M <= 128: the GEMM is the read of the weights) runs the
weight-streaming schedules (argus/ops/fp8_schedules.py `weight_streaming`): swap-AB tiles of
64 or 128 weight rows, and where those leave SMs idle, split-K: fp32 partials of equal K slices
summed in slice order by a second kernel that applies scale_a * scale_b once
(argus/ops/fp8_split_k.py), the result rounded once as by the unsplit kernel.

Both fp8 wgmma operands must be K-major (PTX transposes only 16-bit operands), so an N-major b
is refused with a LaunchError that says how to fix it, rather than silently transposed on every
call. K must be a multiple of 16 (TMA needs 16-byte row pitches). Operands with the right
layout but a misaligned pointer or row pitch are copied into an aligned buffer first. Every
input that cannot be right raises a LaunchError that says what and how to fix it.

A repeated call on the same buffers (pointers, shapes, strides, dtypes, devices, out_dtype and
schedule all equal to an earlier call's that passed the checks and read its operands in place)
costs a dictionary lookup and one launch (`_LAUNCHES`; with out=None also the allocation of
`out`); anything else takes the checked path again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.gemm_fp8 import (SCALE_BLOCK, Fp8GemmSchedule, gemm_fp8_blockscaled_kernel,
                                    gemm_fp8_blockscaled_smem_kernel, gemm_fp8_kernel)
from argus.build_memo import BuildMemo
from argus.ops import fp8_schedules, fp8_split_k
from argus.ops.fp8_schedules import Fp8Problem, choose
from argus.ops.fp8_split_k import Fp8SplitK
# one definition for both
from argus.ops.matmul import _SPLIT_MEMO_SIZE, _capturing, _overlap, _remember, device_name
from argus.runtime.args import check_on_one_gpu

_OUT = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16, "torch.float32": dtypes.f32}
_FP8 = "torch.float8_e4m3fn"
_WHO = "argus.ops.scaled_matmul"
# Per-process memo of (problem, device, schedule, scale_a K-major in place) -> (compiled kernel,
# smem_scales) (`_memo_key`; bounded:
# dynamic shapes must not grow it without limit).
_CHOSEN: BuildMemo = BuildMemo()
# Repeated calls on the same buffers (a decode loop, a benchmark) skip the checks and the
# choice: _launch_key (every tensor's pointer, shape, strides, dtype and device, out_dtype,
# schedule) -> _Replay (into the caller's `out`: the prepared launch) or _FreshReplay (out=None:
# a new `out`, launched through the compiled kernel's own plan cache). Only a call that passed
# every check and launched the caller's own buffers (no aligned or transposed copy) is
# remembered, and every property a check reads is in the key, so a call that differs in any of
# them takes the checked path and gets its error. On the H200 (2026-12-04, fp8pt37) the checked
# path cost the op 6-47 us over its prepared launch (128x8192x8192: 75.4 against 28.5 us): its
# host time (checks, _overlap, the memo) outlasted the benchmark's L2 flush, leaving the device
# idle between the flush and the kernel. Bounded as matmul's launch memo.
_LAUNCHES: BuildMemo = BuildMemo()
# A split-K launch owns its [S, M, N] fp32 workspace: kept apart from _LAUNCHES and bounded as
# matmul's split-K memo (_SPLIT_MEMO_SIZE, least recently used first out), so that many `out`
# buffers pin at most that many workspaces, not 512 of them.
_SPLIT_LAUNCHES: BuildMemo = BuildMemo()


def _aligned(t, elem_bytes: int) -> bool:
    """TMA can address `t`: inner stride 1, 16-byte base and outer strides."""
    if t.stride(-1) != 1 and t.shape[-1] > 1 or t.data_ptr() % 16:
        return False
    return all((t.stride(d) * elem_bytes) % 16 == 0 for d in range(t.dim() - 1) if t.shape[d] > 1)


def _check_types(named) -> None:
    import torch

    for name, t in named:
        if not isinstance(t, torch.Tensor):
            fix = f"wrap it: torch.tensor({t!r}, device='cuda')" if name.startswith("scale") \
                and isinstance(t, (int, float)) else ""
            raise LaunchError(f"{_WHO}: {name} must be a torch.Tensor, got {type(t).__name__}",
                              fix=fix)


def _check(a, b, scale_a, scale_b, out) -> bool:
    """What is wrong with the call itself first, then where the tensors live (so the checks
    run, and are tested, without a GPU). Returns whether the scales are block scales."""
    named = [("a", a), ("b", b), ("scale_a", scale_a), ("scale_b", scale_b)] + \
        ([("out", out)] if out is not None else [])
    _check_types(named)
    for name, t in (("a", a), ("b", b)):
        if str(t.dtype) != _FP8:
            hint = " (e5m2 is not supported yet)" if "e5m2" in str(t.dtype) else ""
            raise LaunchError(f"{_WHO}: {name} must be torch.float8_e4m3fn, got {t.dtype}{hint}",
                              fix=f"quantize it, e.g. ({name} / scale).to(torch.float8_e4m3fn), "
                                  f"or use argus.ops.matmul for bf16/fp16")
        if t.dim() != 2:
            raise LaunchError(f"{_WHO}: {name} must be 2-d, got shape {tuple(t.shape)}",
                              fix="a is [M, K] (flatten leading dims: a.reshape(-1, K)), b is "
                                  "[N, K]")
    k = a.shape[1]
    if b.shape[1] != k:
        if b.shape[0] == k:
            raise LaunchError(f"{_WHO}: b has shape {tuple(b.shape)} but must be [N, K] = "
                              f"[N, {k}]: this looks like torch._scaled_mm's b (W.t(), [K, N])",
                              fix="pass the weight W itself, i.e. b.t()")
        raise LaunchError(f"{_WHO}: shapes a {tuple(a.shape)} and b {tuple(b.shape)} do not "
                          f"match: a is [M, K], b is [N, K] (K = {k} vs {b.shape[1]})")
    for name, t in (("a", a), ("b", b)):
        if t.stride(1) != 1 and t.shape[1] > 1 and t.shape[0] > 0:
            extra = (" If this is torch._scaled_mm's b = W.t(), pass W (= b.t()) instead."
                     if name == "b" else "")
            raise LaunchError(f"{_WHO}: {name} {tuple(t.shape)} has strides {t.stride()}: fp8 "
                              f"wgmma reads both operands K-major (K contiguous), PTX transposes "
                              f"only 16-bit operands.{extra}",
                              fix=f"pass {name}.contiguous() (for a weight: store it as [N, K] "
                                  f"row-major once)")
    block = _check_scales(a, b, scale_a, scale_b)
    if block and k % SCALE_BLOCK:
        raise LaunchError(f"{_WHO}: K = {k} is not a multiple of {SCALE_BLOCK}: block scales "
                          f"cover 128-deep K blocks (one scale per block)",
                          fix="zero-pad K of a and b to a multiple of 128 (zeros add nothing, "
                              "whatever the padded blocks' scales), or use per-tensor scales")
    if k % 16:
        raise LaunchError(f"{_WHO}: K = {k} is not a multiple of 16: TMA needs 16-byte row "
                          f"pitches of e4m3",
                          fix="zero-pad K of both a and b to a multiple of 16, e.g. "
                              "torch.nn.functional.pad(a.view(torch.uint8), (0, pad))"
                              ".view(torch.float8_e4m3fn)")
    check_on_one_gpu(_WHO, named)
    return block


def _check_scales(a, b, scale_a, scale_b) -> bool:
    """Whether the scales are block scales (else per-tensor); a LaunchError for anything else:
    wrong dtypes, shapes that do not match a and b, or one kind mixed with the other."""
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if str(t.dtype) != "torch.float32":
            raise LaunchError(f"{_WHO}: {name} must be float32, got {t.dtype} of shape "
                              f"{tuple(t.shape)}", fix=f"pass {name}.float()")
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        # per-tensor ([1, 1] too); where block scales would also be one element each (M = 1,
        # N and K <= 128) there is one block, and both readings compute the same product
        return False
    m, k = a.shape
    n = b.shape[0]
    kb, nb = -(-k // SCALE_BLOCK), -(-n // SCALE_BLOCK)
    want = {"scale_a": (m, kb), "scale_b": (nb, kb)}
    for name, t in (("scale_a", scale_a), ("scale_b", scale_b)):
        if tuple(t.shape) != want[name]:
            kind = "per token and 128-K block (1x128)" if name == "scale_a" else \
                "per 128x128 weight block"
            raise LaunchError(f"{_WHO}: {name} has shape {tuple(t.shape)}; per-tensor scales "
                              f"are one-element tensors, block scales for a {tuple(a.shape)} "
                              f"and b {tuple(b.shape)} are scale_a [M, ceil(K/128)] = "
                              f"{list(want['scale_a'])} and scale_b [ceil(N/128), ceil(K/128)] "
                              f"= {list(want['scale_b'])}: {name} is one scale {kind}",
                              fix="pass both scales of one kind (DeepSeek-V3 / DeepGEMM block "
                                  "scales, or two one-element tensors)")
    return True


def _block_scale_views(scale_a, scale_b):
    """The kernel's scale operands: scale_a as its MN-major transpose [K/128, M] (a view when
    scale_a is already MN-major, else a copy) and scale_b with contiguous rows."""
    at = scale_a.t()
    if at.stride(-1) != 1 and at.shape[-1] > 1:
        at = at.contiguous()
    bt = scale_b if scale_b.stride(-1) == 1 or scale_b.shape[-1] == 1 else scale_b.contiguous()
    return at, bt


def _kmajor_ready(t) -> bool:
    """A block-scale tensor TMA reads K-major in place (`_kmajor_block_scales` copies any
    other): row-major, rows 16-byte pitched, a 16-byte aligned start."""
    return t.stride(-1) == 1 and (t.stride(0) * 4) % 16 == 0 and t.data_ptr() % 16 == 0


def _kmajor_block_scales(scale_a, scale_b):
    """The smem-scales kernel's scale operands (`gemm_fp8_blockscaled_smem_kernel`): scale_a
    [M, K/128] and scale_b [N/128, K/128], each K-major with rows 16-byte pitched and a
    16-byte aligned start, as TMA reads them: the tensors themselves when they are (K/128 a
    multiple of 4, row-major), else the views [:, :K/128] of zero-padded copies."""
    import torch

    out = []
    for t in (scale_a, scale_b):
        rows, kb = t.shape
        if _kmajor_ready(t):
            out.append(t)
            continue
        padded = torch.zeros(rows, -(-kb // 4) * 4, dtype=t.dtype, device=t.device)
        padded[:, :kb] = t
        out.append(padded[:, :kb])
    return tuple(out)


def _tma_ready(t):
    """`t` itself when TMA can read it, else an aligned contiguous copy."""
    import torch

    if _aligned(t, 1):
        return t
    return t.clone(memory_format=torch.contiguous_format)


# The shared-memory block-scale kernel (Fp8GemmSchedule(smem_scales=True)) stopped with
# CUDA_ERROR_ILLEGAL_INSTRUCTION on the H200 on shapes with several K blocks (2026-12-02): its
# scale copies' innermost TMA coordinate was the K block k, 4 k bytes into a row, and a TMA copy
# traps unless that offset is 16-byte aligned. SharedBlockScales starts them at k - k % 4
# (77a82d4); on the H200 (2026-12-03 03:40 UTC) scripts/gpu_fp8_smem_diag2.sh trapped every
# misaligned probe and passed every aligned one and the three smem GEMMs, and
# tests/gpu/test_fp8_smem_scales_gpu.py passed 6 of 6. The interpreter now refuses a misaligned
# copy (argus/runtime/interp/tma.py). A kill switch: False makes the op refuse a schedule the
# caller passes with smem_scales, and run its own pick (the default since 940417e) without them.
SMEM_SCALES_ON_DEVICE = True


def _launch_key(a, b, scale_a, scale_b, out, out_dtype, schedule):
    """What every check of a call reads, for the launch memo: each tensor's pointer, shape,
    strides, dtype and device (the overlap and alignment checks read pointers, shapes, strides
    and element sizes; the rest dtypes, shapes and devices), out_dtype and the schedule; None
    when an argument is not a tensor (the checked path says what is wrong)."""
    try:
        key = (a.data_ptr(), b.data_ptr(), scale_a.data_ptr(), scale_b.data_ptr(), a.shape,
               b.shape, scale_a.shape, scale_b.shape, a.stride(), b.stride(), scale_a.stride(),
               scale_b.stride(), a.dtype, b.dtype, scale_a.dtype, scale_b.dtype, a.device,
               b.device, scale_a.device, scale_b.device, out_dtype, schedule)
        if out is None:     # a shorter key: never equal to one with an `out`
            return key
        return key + (out.data_ptr(), out.shape, out.stride(), out.dtype, out.device)
    except (AttributeError, TypeError, RuntimeError):   # not tensors, or without storage
        return None


@dataclass(frozen=True)
class _Replay:
    """A remembered call into the caller's `out`: its prepared launch (one cuLaunchKernelEx on
    torch's current stream of the plan's device)."""

    plan: Any
    smem_scales: bool
    # a split-K launch (what an Fp8SplitK call returns) owns its fp32 workspace, freed when the
    # split memo (_SPLIT_LAUNCHES) drops the launch: never replayed into a CUDA graph capture (the graph would keep the address)
    owns_workspace: bool = False

    def __call__(self, a, b, scale_a, scale_b, out):
        self.plan()
        return out


@dataclass(frozen=True)
class _FreshReplay:
    """A remembered call with out=None: a new `out` as the checked path makes it, launched
    through the compiled kernel, whose plan cache is keyed by the new out's pointer (the
    caching allocator mostly hands back the same few)."""

    compiled: Any
    smem_scales: bool
    block: bool
    shape: tuple
    dtype: Any

    def __call__(self, a, b, scale_a, scale_b, out):
        import torch

        out = torch.empty(self.shape, dtype=self.dtype, device=a.device)
        _launch(self.compiled, a, b, *_kernel_scales(scale_a, scale_b, self.block,
                                                     self.smem_scales), out)
        return out


def scaled_matmul(a, b, scale_a, scale_b, out_dtype=None, out=None, *,
                  schedule: Fp8GemmSchedule | None = None):
    """Return (a * scale_a) @ (b * scale_b).T for fp8 a [M, K] and b [N, K] (see the module
    docstring). out_dtype: torch.bfloat16 (default), torch.float16 or torch.float32; with `out`
    given it defaults to out.dtype and must agree with it."""
    key = _launch_key(a, b, scale_a, scale_b, out, out_dtype, schedule)
    launch = _LAUNCHES.get(key) if key is not None else None
    if launch is None and key is not None:
        launch = _SPLIT_LAUNCHES.get(key)
    if launch is not None and getattr(launch, "owns_workspace", False) and _capture_on(a):
        launch = None   # a capture launches afresh: its workspace from the capture's pool
    # the kill switch is read on every call, so that turning it off stops remembered launches
    if launch is not None and (SMEM_SCALES_ON_DEVICE or not launch.smem_scales):
        return launch(a, b, scale_a, scale_b, out)
    return _scaled_matmul(a, b, scale_a, scale_b, out_dtype, out, schedule, key)


def _scaled_matmul(a, b, scale_a, scale_b, out_dtype, out, schedule, key):
    """The checked path; `key` (None: do not remember) names the launch for the memo."""
    import torch

    block = _check(a, b, scale_a, scale_b, out)
    m, k = a.shape
    n = b.shape[0]
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else torch.bfloat16
    if str(out_dtype) not in _OUT:
        raise LaunchError(f"{_WHO}: out_dtype must be torch.bfloat16, torch.float16 or "
                          f"torch.float32, got {out_dtype}")
    fresh = out is None
    if fresh:
        out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    if out.dtype != out_dtype:
        raise LaunchError(f"{_WHO}: out is {out.dtype} but out_dtype is {out_dtype}",
                          fix="leave out_dtype=None to use out.dtype")
    if tuple(out.shape) != (m, n):
        raise LaunchError(f"{_WHO}: out has shape {tuple(out.shape)}, expected {(m, n)}")
    if out.stride(-1) != 1 and n > 1:
        raise LaunchError(f"{_WHO}: out needs a contiguous last dimension",
                          fix="pass out=None, or a contiguous tensor")
    # a fresh allocation cannot share memory with a live input
    if not fresh and out.numel() and \
            any(t.numel() and _overlap(out, t) for t in (a, b, scale_a, scale_b)):
        raise LaunchError(f"{_WHO}: out shares memory with an input",
                          fix="pass a separate output tensor (or out=None)")
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()

    out_type = _OUT[str(out.dtype)]
    a_ready, b_ready = _tma_ready(a), _tma_ready(b)
    problem = Fp8Problem(m, n, k, out_type.name, _aligned(out, out_type.bytes), block)
    # which scale_a layout the caller passes decides the default's kernel (below)
    memo_key = _memo_key(problem, a.device.index, schedule, block and _kmajor_ready(scale_a))
    kmajor_a = memo_key[-1]
    memo = _CHOSEN.get(memo_key)
    compiled, smem_scales = memo if memo is not None else (None, False)
    if compiled is not None and smem_scales and schedule is None and \
            not SMEM_SCALES_ON_DEVICE:
        compiled = None   # the kill switch turned off since the op picked smem scales
    if compiled is None:
        chosen = schedule or choose(problem, device_name(a.device))
        if schedule is None and chosen.smem_scales and not SMEM_SCALES_ON_DEVICE:
            # the op's own pick (the default at M >= 4096, or a tuned entry) under the kill
            # switch: the same schedule with the scales read from global memory, not an
            # error the caller cannot fix by dropping a schedule it never passed
            chosen = fp8_schedules.without_smem_scales(chosen)
        elif schedule is None and chosen.smem_scales and not kmajor_a:
            # the op's smem pick reads scale_a K-major; an MN-major scale_a (DeepGEMM's layout,
            # the one the docstring asks for) would be copied on every call, which its H200
            # measurement (K-major scales) did not pay: the split reading it in place instead
            chosen = fp8_schedules.without_smem_scales(chosen)
        if chosen.epilogue == "tma" and not problem.tma_epilogue_ok:
            raise LaunchError(f"{_WHO}: the TMA-store epilogue needs a 16-bit output with "
                              f"16-byte aligned rows", fix="use Fp8GemmSchedule(epilogue='direct')")
        if block and not chosen.promote:
            raise LaunchError(f"{_WHO}: block scales are applied by promotion: the schedule "
                              f"needs promote=True", fix="pass Fp8GemmSchedule(..., promote=True)")
        if chosen.smem_scales and not block:
            raise LaunchError(f"{_WHO}: smem_scales reads block scales from shared memory; "
                              f"these are per-tensor scales",
                              fix="drop smem_scales from the schedule")
        _check_smem_switch(chosen.smem_scales)
        if chosen.split_k > 1:
            compiled, smem_scales = _split_k(chosen, block, k, out_type), False
        else:
            kernel = (gemm_fp8_blockscaled_smem_kernel(out_type) if chosen.smem_scales
                      else gemm_fp8_blockscaled_kernel(out_type)) if block else \
                gemm_fp8_kernel(out_type)
            compiled, smem_scales = kernel.compile(s=chosen), chosen.smem_scales
        _remember(_CHOSEN, memo_key, (compiled, smem_scales))
    else:   # the switch may have been turned off since the kernel was built
        _check_smem_switch(smem_scales)
    sa, sb = _kernel_scales(scale_a, scale_b, block, smem_scales)
    ran = _launch(compiled, a_ready, b_ready, sa, sb, out)
    # the kernel read the caller's buffers themselves (a copy is a new allocation, so its
    # pointer differs from the live original's): the same buffers next time skip the checks;
    # a copied operand is copied again on every call, so that call is not kept
    if key is not None and all(x.data_ptr() == y.data_ptr() for x, y in (
            (a_ready, a), (b_ready, b), (sa, scale_a), (sb, scale_b))):
        if fresh:
            _remember(_LAUNCHES, key, _FreshReplay(compiled, smem_scales, block, (m, n),
                                                   out.dtype))
        else:
            if isinstance(compiled, Fp8SplitK):
                # a split-K launch made during a capture is not kept: its workspace is the
                # capture's (argus.ops.matmul keeps no split-K launch while capturing either)
                if ran is not None and not _capture_on(a):
                    _remember(_SPLIT_LAUNCHES, key, _Replay(ran, False, owns_workspace=True),
                              _SPLIT_MEMO_SIZE)
            else:
                plan = compiled.plan_for(a_ready, b_ready, sa, sb, out)
                if plan is not None:
                    _remember(_LAUNCHES, key, _Replay(plan, smem_scales))
    return out


def _split_k(chosen: Fp8GemmSchedule, block: bool, k: int, out_type) -> Fp8SplitK:
    """The split-K launch of a per-tensor schedule with split_k > 1 (argus/ops/fp8_split_k.py);
    a LaunchError for block scales or a K the slices cannot tile."""
    if block:
        raise LaunchError(f"{_WHO}: split_k={chosen.split_k} sums unscaled partials and applies "
                          f"per-tensor scales once; block scales are applied per K block by "
                          f"promotion", fix="drop split_k from the schedule (split_k=1)")
    reason = fp8_split_k.why_not(k, chosen.split_k)
    if reason is not None:
        raise LaunchError(f"{_WHO}: Fp8GemmSchedule(split_k={chosen.split_k}): {reason}",
                          fix="use split_k=1, or a split count that cuts K into equal slices "
                              "of a multiple of 16")
    return Fp8SplitK(chosen, out_type)


def _memo_key(problem: Fp8Problem, device_index, schedule, kmajor_a: bool) -> tuple:
    """`_CHOSEN`'s key: one definition for the op and `prepared_launch` (per-tensor scales
    have no scale_a layout: kmajor_a False)."""
    return (problem, device_index, schedule, bool(kmajor_a))


def _kernel_scales(scale_a, scale_b, block: bool, smem_scales: bool):
    """The scale operands the kernel takes: per-tensor scales as [1] views; block scales as
    the smem-scales kernel (K-major) or the other one (scale_a MN-major) reads them."""
    if block:
        return _kmajor_block_scales(scale_a, scale_b) if smem_scales else \
            _block_scale_views(scale_a, scale_b)
    return scale_a.reshape(1), scale_b.reshape(1)


def _capture_on(t) -> bool:
    """Whether a CUDA graph capture runs on the current stream of CUDA tensor `t` (never for
    CPU tensors: the interpreter, and torch builds without CUDA)."""
    return t.is_cuda and _capturing()


def _launch(compiled, a, b, sa, sb, out):
    """Launch on the operands' device, whichever is current; what the call returns (a split-K
    run's replayable launch, see Fp8SplitK)."""
    import torch

    if a.device.index == torch.cuda.current_device():
        return compiled(a, b, sa, sb, out)
    with torch.cuda.device(a.device):
        return compiled(a, b, sa, sb, out)


def _check_smem_switch(smem_scales: bool) -> None:
    if smem_scales and not SMEM_SCALES_ON_DEVICE:
        raise LaunchError(f"{_WHO}: smem_scales=True is not run on the device: "
                          f"argus.ops.scaled_matmul.SMEM_SCALES_ON_DEVICE is False (the "
                          f"kill switch); it runs in the interpreter "
                          f"(gemm_fp8_blockscaled_smem_kernel.interpret)",
                          fix="drop smem_scales from the schedule, or set the switch True")


def forget_choices() -> None:
    """Drop the in-process schedule memo and the launches made with its choices (after tuning
    wrote new choices to disk, so that the next call runs them)."""
    _CHOSEN.clear()
    _LAUNCHES.clear()
    _SPLIT_LAUNCHES.clear()


def prepared_launch(a, b, scale_a, scale_b, out, *, schedule: Fp8GemmSchedule | None = None):
    """A callable with no arguments that replays the launch an earlier `scaled_matmul(a, b,
    scale_a, scale_b, out=out, schedule=schedule)` prepared, for per-tensor scales and operands
    the kernel read in place; None otherwise (block scales, copied operands, no such call yet,
    or a split-K launch the op's split memo has since dropped). Unsplit, it is the kernel's
    argus.runtime.driver.LaunchPlan (one cuLaunchKernelEx per call); under a split_k > 1
    schedule it is the op's remembered split-K launch (argus/ops/fp8_split_k.py): two
    cuLaunchKernelEx per call, the partials kernel then the scaled sum, and it owns their fp32
    workspace. For benchmarks: timing it beside the op's call shows how much of the op's time
    is its host work (a repeat call of the op is its launch memo's lookup and this launch, so
    the two should agree within a few us)."""
    block = _check(a, b, scale_a, scale_b, out)
    if block or not (_aligned(a, 1) and _aligned(b, 1)) or str(out.dtype) not in _OUT:
        return None
    out_type = _OUT[str(out.dtype)]
    problem = Fp8Problem(a.shape[0], b.shape[0], a.shape[1], out_type.name,
                         _aligned(out, out_type.bytes), block)
    memo = _CHOSEN.get(_memo_key(problem, a.device.index, schedule, False))
    if memo is None:
        return None
    if isinstance(memo[0], Fp8SplitK):
        key = _launch_key(a, b, scale_a, scale_b, out, None, schedule)
        replay = _SPLIT_LAUNCHES.get(key) if key is not None else None
        return None if replay is None else replay.plan
    return memo[0].plan_for(a, b, scale_a.reshape(1), scale_b.reshape(1), out)
