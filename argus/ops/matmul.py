"""`argus.ops.matmul(a, b, out=None)`: C = A @ B on Hopper with Argus's verified GEMM kernels.

bf16 or fp16 inputs, fp32 accumulation, bf16 / fp16 / fp32 output; fp32 inputs with
`precision="tf32"` (the tensor cores' tf32 product: 10-bit mantissa inputs, fp32 accumulation,
as PyTorch computes with allow_tf32 on; relaxed accuracy, about 3e-4 relative, not fp32's,
so it is never chosen without being asked for; both operands are rounded to tf32 to nearest
first, as cuBLAS does: `tf32_operands`). A is [M, K] or [batch, M, K]
with K contiguous; B is [K, N] (or batched) in either memory layout: a transposed view of a
row-major [N, K] weight (`x @ W.T`) runs K-major, a row-major [K, N] (`x @ W`) runs MN-major
(tf32 has no MN-major operands: such a B is made K-major in its rounding pass, kept per
parameter version when B is an nn.Parameter or a view of one).
Anything the tensor-memory accelerator cannot address directly (a strided inner dimension, a
row pitch or pointer that is not 16-byte aligned) is copied into an aligned buffer first, so the
result is always right; inputs that cannot be right (CPU tensors, mixed dtypes, shapes that do
not multiply) raise a LaunchError that says what and how to fix it.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.gemm import GemmSchedule
from argus.build_memo import BuildMemo
from argus.ops import split_k
from argus.ops.dynamic_walk import DynamicMatmul
from argus.ops.moe import card_of
from argus.ops.weight_cache import DerivedCache
from argus.ops.schedules import Problem, choose, kernel_for

_IN = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16}
# Per-process memo of (problem, device) -> (schedule, compiled kernel): a repeated call costs a
# dictionary lookup, not a disk read or a recompile. Bounded: dynamic shapes must not grow it
# without limit.
_CHOSEN: BuildMemo = BuildMemo()
# Repeated calls on the same buffers (a training or decode loop, a benchmark) skip the checks
# and the problem analysis: (pointers, shapes, strides, dtypes, device) -> the launch. Small
# GEMMs run in tens of microseconds, so host time per call is part of what users measure.
_LAUNCHES: BuildMemo = BuildMemo()
_SPLIT_LAUNCHES: BuildMemo = BuildMemo()
_MEMO_SIZE = 512
# A split-K launch owns its fp32 workspace, so fewer of them are kept (least recently used
# first out), and none while a CUDA graph is being captured: a captured launch would keep the
# workspace's address after the memo dropped it.
_SPLIT_MEMO_SIZE = 32
# A tf32 launch replays its rounding passes too (_Tf32Replay) and owns their buffers (an
# activation's rounded copy each): bounded by count as the split-K launches and by the bytes
# of those buffers, least recently used first out; none kept while a graph is captured.
_TF32_LAUNCHES: BuildMemo = BuildMemo()
_TF32_MEMO_BYTES = 1 << 30
_DEVICE_NAMES: dict = {}
_OUT = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16, "torch.float32": dtypes.f32}


def _aligned(t, elem_bytes: int) -> bool:
    """TMA can address `t`: inner stride 1, 16-byte base and outer strides, positive (a
    tensor map has no stride 0: an expand()ed operand is copied)."""
    if t.stride(-1) != 1 or t.data_ptr() % 16:
        return False
    return all((t.stride(d) * elem_bytes) % 16 == 0 and t.stride(d) > 0
               for d in range(t.dim() - 1) if t.shape[d] > 1)


def _tma_ready(t, elem_bytes: int):
    """`t` itself when TMA can read it, else an aligned copy with the inner dim padded to a
    multiple of 16 bytes (the padding is zeros and never read by the kernel's bounds)."""
    import torch

    if _aligned(t, elem_bytes):
        return t
    inner = t.shape[-1]
    padded = -(-inner * elem_bytes // 16) * 16 // elem_bytes
    buf = torch.zeros(*t.shape[:-1], padded, dtype=t.dtype, device=t.device)
    buf[..., :inner] = t
    return buf[..., :inner]


def _overlap(x, y) -> bool:
    """Whether the byte ranges two tensors span intersect."""
    def span(t):
        lo = t.data_ptr()
        return lo, lo + (sum((n - 1) * s for n, s in zip(t.shape, t.stride())) + 1) * \
            t.element_size()
    (a0, a1), (b0, b1) = span(x), span(y)
    return a0 < b1 and b0 < a1


def _check(a, b, out, precision: str | None = None) -> None:
    import torch

    if precision not in (None, "tf32"):
        raise LaunchError(f"argus.ops.matmul: precision={precision!r}; the only choice is "
                          f"'tf32' (fp32 inputs on the tensor cores with a 10-bit mantissa)")
    # what the request asks for, before where it runs (a CPU test can see these)
    dt = getattr(a, "dtype", None), getattr(b, "dtype", None)
    if dt == (torch.float32, torch.float32) and precision != "tf32":
        raise LaunchError("argus.ops.matmul: float32 inputs run only as tf32 (a 10-bit "
                          "mantissa, about 1e-3 relative error, what torch.matmul gives with "
                          "torch.backends.cuda.matmul.allow_tf32 = True)",
                          fix="pass precision='tf32' to accept that, or torch.matmul for "
                              "fp32 accuracy")
    if precision == "tf32" and dt != (torch.float32, torch.float32):
        raise LaunchError(f"argus.ops.matmul: precision='tf32' takes float32 inputs, got "
                          f"{dt[0]} and {dt[1]}", fix="pass float32 tensors, or leave "
                                                          "precision out")
    for name, t in (("a", a), ("b", b)) + ((("out", out),) if out is not None else ()):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"argus.ops.matmul: {name} must be a torch.Tensor, got "
                              f"{type(t).__name__}")
        if not t.is_cuda:
            raise LaunchError(f"argus.ops.matmul: {name} is on {t.device}; Argus kernels run on "
                              f"a CUDA device (sm_90a)", fix=f"{name}.cuda(), or torch.matmul "
                                                             f"on the CPU")
    if precision != "tf32" and (str(a.dtype) not in _IN or a.dtype != b.dtype):
        raise LaunchError(f"argus.ops.matmul: inputs must both be bfloat16 or both float16, got "
                          f"{a.dtype} and {b.dtype}", fix="cast both, e.g. a.bfloat16(), "
                                                          "b.bfloat16()")
    if a.device != b.device or (out is not None and out.device != a.device):
        raise LaunchError("argus.ops.matmul: tensors are on different devices",
                          fix="move them to one GPU")
    if a.dim() not in (2, 3) or b.dim() not in (2, 3) or (b.dim() == 3 and a.dim() != 3):
        raise LaunchError(f"argus.ops.matmul: shapes {tuple(a.shape)} @ {tuple(b.shape)}: a is "
                          f"[M, K] or [batch, M, K]; b is [K, N], or [batch, K, N] with a batched")
    if out is not None and out.numel() and any(
            t.numel() and _overlap(out, t) for t in (a, b)):
        raise LaunchError("argus.ops.matmul: out shares memory with an input",
                          fix="pass a separate output tensor (or out=None)")
    if a.shape[-1] != b.shape[-2] or (b.dim() == 3 and a.shape[0] != b.shape[0]):
        raise LaunchError(f"argus.ops.matmul: shapes {tuple(a.shape)} and {tuple(b.shape)} do "
                          f"not multiply (inner dims {a.shape[-1]} vs {b.shape[-2]})")


def device_name(device) -> str:
    """torch.cuda.get_device_name, asked once per device (it names the tuning cache file)."""
    import torch

    if device.index not in _DEVICE_NAMES:
        _DEVICE_NAMES[device.index] = torch.cuda.get_device_name(device)
    return _DEVICE_NAMES[device.index]


def _remember(memo: OrderedDict, key, value, size: int = _MEMO_SIZE) -> None:
    memo[key] = value
    if len(memo) > size:
        memo.popitem(last=False)


def _launch_key(a, b, out, schedule, precision=None):
    try:
        return (a.data_ptr(), b.data_ptr(), out.data_ptr(), a.shape, b.shape, out.shape,
                a.stride(), b.stride(), out.stride(), a.dtype, b.dtype, out.dtype, a.device,
                b.device, out.device, schedule, precision)
    except (AttributeError, TypeError, RuntimeError):
        return None  # not tensors: the checks below say what is wrong


def matmul(a, b, out=None, *, schedule: GemmSchedule | None = None,
           precision: str | None = None):
    """Return a @ b (and write it into `out` when given). precision="tf32": fp32 a and b
    multiplied as tf32 (see the module docstring); the result is fp32 unless `out` says
    otherwise."""
    key = _launch_key(a, b, out, schedule, precision) if out is not None else None
    launch = _LAUNCHES.get(key) if key is not None else None
    if launch is None and key in _SPLIT_LAUNCHES and not _capturing():
        _SPLIT_LAUNCHES.move_to_end(key)
        launch = _SPLIT_LAUNCHES[key]
    if launch is None and key in _TF32_LAUNCHES and not _capturing():
        _TF32_LAUNCHES.move_to_end(key)
        if _TF32_LAUNCHES[key](a, b):
            return out
    if launch is not None:
        launch()
        return out
    return _matmul(a, b, out, schedule, key, precision)


def _capturing() -> bool:
    import torch

    return torch.cuda.is_current_stream_capturing()


def _matmul(a, b, out, schedule: GemmSchedule | None, key, precision=None):
    """The checked path; `key` (None: do not cache) names the launch for the fast path."""
    import torch

    _check(a, b, out, precision)
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] == 1:
        # a batch of one is the 2-d problem (its kernels, schedules and tuning entries)
        flat = matmul(a[0], b[0], None if out is None else out[0], schedule=schedule,
                      precision=precision)
        return flat.unsqueeze(0) if out is None else out
    batched = a.dim() == 3
    if batched and b.dim() == 2:
        # one weight shared by every batch: a single [batch * M, K] GEMM (reshape copies a
        # non-contiguous a; an out that cannot be flattened gets the result copied in)
        if out is not None and tuple(out.shape) != (*a.shape[:-1], b.shape[-1]):
            raise LaunchError(f"argus.ops.matmul: out has shape {tuple(out.shape)}, expected "
                              f"{(*a.shape[:-1], b.shape[-1])}")
        flat_a, flat_out, copy_back = _shared_weight_flat(a, b, out)
        matmul(flat_a, b, flat_out, schedule=schedule, precision=precision)
        if out is None:
            return flat_out.view(*a.shape[:-1], b.shape[-1])
        if copy_back:
            out.copy_(flat_out.view_as(out))
        return out
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    lead = (a.shape[0],) if batched else ()
    if out is None:
        out = torch.empty(*lead, m, n, dtype=a.dtype, device=a.device)
    if tuple(out.shape) != (*lead, m, n):
        raise LaunchError(f"argus.ops.matmul: out has shape {tuple(out.shape)}, expected "
                          f"{(*lead, m, n)}")
    if str(out.dtype) not in _OUT:
        raise LaunchError(f"argus.ops.matmul: out must be bfloat16, float16 or float32, got "
                          f"{out.dtype}")
    if out.stride(-1) != 1:
        raise LaunchError("argus.ops.matmul: out needs a contiguous last dimension",
                          fix="pass out=None, or a contiguous tensor")
    if out.numel() == 0:
        return out
    if k == 0:
        return out.zero_()

    problem = _problem(a, b, out, precision)
    in_dtype, out_dtype = _in_dtype(a, precision), _OUT[str(out.dtype)]
    eb = in_dtype.bytes
    if precision == "tf32":
        # both operands rounded to tf32 to nearest on their way to TMA (tf32_operands says why)
        (a_ready, a_step), (b_ready, b_step) = _tf32_prepared(a, b)
    elif problem.b_layout == "nk":
        a_ready, b_ready = _tma_ready(a, eb), _tma_ready(b.transpose(-1, -2), eb)  # x @ W.T
    else:
        a_ready, b_ready = _tma_ready(a, eb), _tma_ready(b, eb)                    # x @ W
    tma_store_ok = problem.tma_store_ok
    memo_key = (problem, a.device.index, schedule)
    compiled = _CHOSEN.get(memo_key)
    if compiled is None:
        chosen = schedule or choose(problem, device_name(a.device), card_of(a.device))
        if precision == "tf32" and (chosen.split_k > 1 or chosen.tail_splits > 1 or
                                    chosen.bk != 32):
            raise LaunchError("argus.ops.matmul(precision='tf32'): the tf32 kernel runs whole "
                              "K (no split_k or tail_splits yet) with bk=32 (a 128-byte row "
                              "of fp32)", fix="GemmSchedule(bk=32, split_k=1, tail_splits=1), "
                                              "or schedule=None")
        if chosen.epilogue == "tma" and not (tma_store_ok and out_dtype.bits == 16):
            raise LaunchError("argus.ops.matmul: the TMA-store epilogue needs a 16-bit output "
                              "with 16-byte aligned rows",
                              fix="use GemmSchedule(epilogue='direct')")
        compiled = compiled_for(problem, chosen)
        _remember(_CHOSEN, memo_key, compiled)
    if a.device.index == torch.cuda.current_device():
        replay = compiled(a_ready, b_ready, out)
    else:
        with torch.cuda.device(a.device):
            replay = compiled(a_ready, b_ready, out)
    if precision == "tf32":
        if key is not None and not _capturing() and a_step and b_step and \
                not isinstance(compiled, _RUNNERS):
            plan = compiled.plan_for(a_ready, b_ready, out)
            if plan is not None:
                _remember_tf32(key, _Tf32Replay((a_step, b_step), plan))
        return out
    if key is not None and a_ready.data_ptr() == a.data_ptr() and \
            b_ready.data_ptr() == b.data_ptr():
        # the kernel read the caller's buffers themselves (no aligned copy): the same buffers
        # next time can go straight to the launch
        if isinstance(compiled, _RUNNERS):
            if replay is not None and not _capturing():
                _remember(_SPLIT_LAUNCHES, key, replay, _SPLIT_MEMO_SIZE)
        else:
            plan = compiled.plan_for(a_ready, b_ready, out)
            if plan is not None:
                _remember(_LAUNCHES, key, plan)
    return out


# runners around a kernel whose call returns a replayable launch (not a compiled kernel)
_RUNNERS = (split_k.SplitKMatmul, split_k.TailSplitMatmul, DynamicMatmul)


def _remember_tf32(key, replay) -> None:
    _remember(_TF32_LAUNCHES, key, replay, _SPLIT_MEMO_SIZE)
    total = sum(r.nbytes for r in _TF32_LAUNCHES.values())
    while total > _TF32_MEMO_BYTES and len(_TF32_LAUNCHES) > 1:
        total -= _TF32_LAUNCHES.popitem(last=False)[1].nbytes


def compiled_for(problem: Problem, chosen: GemmSchedule):
    """What runs `problem` under `chosen`: the compiled kernel, or the split-K / tail-split
    runner around its kernels. The host-side cost of a first call (trace, lower, verify or its
    remembered verdict, NVRTC or its disk cache) is spent here; argus/ops/prebuild.py calls it
    ahead of time. Needs no GPU."""
    if chosen.split_k > 1:
        split_k.check(problem.k, chosen.split_k, problem.batch)
        return split_k.SplitKMatmul(problem, chosen, *kernel_for(problem, chosen))
    if chosen.tail_splits > 1:
        split_k.tail_check(problem.k, chosen.tail_splits)
        plain = dataclasses.replace(chosen, tail_splits=1, tail_finish="kernel")
        return split_k.TailSplitMatmul(problem, chosen, *kernel_for(problem, chosen),
                                       kernel_for(problem, plain))
    if chosen.scheduler == "dynamic":   # the kernel and its per-stream work word
        return DynamicMatmul(*kernel_for(problem, chosen))
    kernel, run = kernel_for(problem, chosen)
    return kernel.compile(s=run)


def _shared_weight_flat(a, b, out):
    """[batch, M, K] @ [K, N] as one [batch * M, K] GEMM: (flat a, flat out, whether the result
    must be copied into `out`). reshape copies a non-contiguous a; an out that cannot be
    flattened gets a buffer of its own dtype (the result is copied in afterwards)."""
    import torch

    flat_a = a.reshape(-1, a.shape[-1])
    if out is not None and out.is_contiguous():
        return flat_a, out.view(-1, out.shape[-1]), False
    flat_out = torch.empty(flat_a.shape[0], b.shape[-1], device=a.device,
                           dtype=a.dtype if out is None else out.dtype)
    return flat_a, flat_out, out is not None


def _in_dtype(a, precision: str | None):
    return dtypes.f32 if precision == "tf32" else _IN[str(a.dtype)]


def _b_is_nk(b) -> bool:
    """b [.., K, N] is a transposed view of a row-major [.., N, K] (K contiguous)."""
    n = b.shape[-1]
    return b.stride(-2) == 1 and b.stride(-1) != 1 or (b.stride(-2) == 1 and n == 1)


# The tf32 operands derived from a parameter (B of x @ W or x @ W.T; A of W @ x), rounded and
# K-major, kept per parameter version (argus/ops/weight_cache.py: one store, byte bound and
# CUDA-graph guard with conv's and compose's weight derivations). Activations are not kept.
_TF32_OPERANDS = DerivedCache("matmul.tf32", parameters_only=True)


def tf32_operands(a, b):
    """(A, B) for the tf32 kernel: a [.., M, K] as [.., M, K] and b [.., K, N] as K-major
    [.., N, K], every value rounded to tf32 to nearest (cvt.rna.tf32.f32, ties away from
    zero), each in an aligned buffer whose row pitch is K padded to 16 bytes (the padding
    zero, never read).

    Why: the kernel's producer moves both operands by TMA straight into shared memory and wgmma
    reads A and B from there (tf32 has no register A in the DSL), so no instruction of the GEMM
    touches an input value; the tensor core reads an unrounded fp32 operand by dropping its 13
    low bits, a bias toward zero that does not average out over K (normwise 7.8e-4 on the
    H200, against 2.9e-4 for cuBLAS TF32, which rounds first). So each operand takes one Argus
    pass (argus/kernels/conv_tf32.py) that reads it, rounds it and writes it where the GEMM
    reads it: a K-contiguous operand by `round_rows` (the aligned copy an unaligned operand
    needed anyway, or one extra read and write of it), an M- or N-contiguous one by
    `round_nhwc`, which also transposes it (a [K, N] B becomes K-major in the same pass: tf32
    has no MN-major operand). An operand derived from an nn.Parameter (or a view of one) is kept
    per parameter version (`_TF32_OPERANDS`), so x @ W rounds and transposes W once, not every
    call; any other operand (an activation, a non-leaf, a changing buffer) is derived anew each
    call. On CPU tensors the passes run in the interpreter (the CPU tests), on meta tensors
    they are only built."""
    (a_ready, _), (b_ready, _) = _tf32_prepared(a, b)
    return a_ready, b_ready


def _tf32_prepared(a, b):
    """tf32_operands' (A, B), each with how a repeated call gets it again (`_tf32_operand`)."""
    return _tf32_operand(a, "tf32 A", False), _tf32_operand(b, "tf32 B^T", True)


def _tf32_operand(t, what: str, transposed: bool):
    """(ready, step): t's tf32 operand, and how a call with the same tensor gets it again: a
    `_Kept` (the store's tensor for t's current version), a `_Pass` (the rounding pass that read
    t itself, replayed into the same buffer), or None (a pass over a contiguous copy of t:
    nothing to replay)."""
    import weakref

    hit = _TF32_OPERANDS.get(t, what)
    if hit is not None:
        return hit, _Kept(what, weakref.ref(hit))
    ready, step = _tf32_k_major(t, transposed)
    _TF32_OPERANDS.put(t, what, ready)
    if _TF32_OPERANDS.get(t, what) is ready:
        return ready, _Kept(what, weakref.ref(ready))
    return ready, step


def _tf32_k_major(t, transposed: bool):
    """(round_tf32(t) (or of t^T when `transposed`) as [.., rows, K] with K contiguous, in a
    [.., rows, K padded to 4] buffer, made by one rounding pass from t's own layout; that pass
    as a `_Pass` when it read t itself on the GPU, else None)."""
    import torch

    from argus.kernels.conv_tf32 import round_nhwc_for, round_rows

    x = t.detach() if t.dim() == 3 else t.detach().unsqueeze(0)   # data only: no autograd
    rows_k = x.transpose(-1, -2) if transposed else x          # [B, rows, K], a view
    batch, rows, k = rows_k.shape
    buf = torch.empty(batch, rows, -(-k // 4) * 4, dtype=torch.float32, device=t.device)
    kernel, src = round_rows, rows_k
    if rows_k.stride(-1) != 1 and k > 1:
        # K is the outer dim of the source ([B, K, rows] read row by row, transposed in the
        # tile); a source strided in both dims is made row-contiguous first
        kernel, src = round_nhwc_for(buf.shape[-1]), rows_k.transpose(-1, -2)
        if src.stride(-1) != 1 and rows > 1:
            src = src.contiguous()
    _launch_pass(kernel, src, buf)
    ready = buf[..., :k]
    plan = kernel.compile().plan_for(src, buf) if buf.is_cuda and \
        src.data_ptr() == x.data_ptr() else None
    return ready if t.dim() == 3 else ready[0], None if plan is None else _Pass(plan, buf)


@dataclasses.dataclass(frozen=True)
class _Kept:
    """A replayed call's operand is the store's tensor for the operand's current version: the
    one the launch was prepared with (`ready`, weakly: the store decides how long it lives),
    else the replay is refused (the weight was updated, evicted or freed)."""

    what: str
    ready: object     # weakref.ref to the tensor

    def check(self, t) -> bool:
        ready = self.ready()
        return ready is not None and _TF32_OPERANDS.get(t, self.what) is ready

    def __call__(self) -> None:
        pass


@dataclasses.dataclass(frozen=True)
class _Pass:
    """A rounding pass that read the operand where the caller keeps it: its launch plan into
    `dst` (owned here while a replay keeps it), so a repeated call with the same buffers rounds
    their current values again."""

    plan: object
    dst: object

    def check(self, _t) -> bool:
        return True

    def __call__(self) -> None:
        self.plan()


@dataclasses.dataclass(frozen=True)
class _Tf32Replay:
    """A tf32 call prepared once, for the next call with the same buffers, layouts, dtypes,
    schedule and out (matmul's launch key): the operands' steps (their rounding passes again, or
    the kept weight operand checked still current) and the GEMM's launch plan on the same
    operand buffers. Called with the call's (a, b): False, and nothing launched, when a kept
    operand is no longer the store's (the slow path prepares the call again)."""

    steps: tuple
    gemm: object

    @property
    def nbytes(self) -> int:
        """Bytes of the rounding passes' buffers this replay owns."""
        return sum(s.dst.numel() * 4 for s in self.steps if isinstance(s, _Pass))

    def __call__(self, a, b) -> bool:
        if not all(step.check(t) for step, t in zip(self.steps, (a, b))):
            return False
        for step in self.steps:
            step()
        self.gemm()
        return True


def _launch_pass(kernel, src, dst) -> None:
    """One of tf32_operands' passes: compiled on CUDA tensors (on the source's device), only
    built on meta tensors, interpreted on CPU tensors (on a copy of `src`: the interpreter
    writes every argument back, and the caller's tensor keeps its contents and version)."""
    import torch

    if dst.is_meta:
        kernel.compile().build_for(src, dst)
    elif not dst.is_cuda:
        kernel.interpret(src.clone(), dst)
    elif dst.device.index == torch.cuda.current_device():
        kernel.compile()(src, dst)
    else:
        with torch.cuda.device(dst.device):
            kernel.compile()(src, dst)


def _problem(a, b, out, precision: str | None = None) -> Problem:
    """The kernel kind and tuning key of a 2-d or batched (batch > 1) a @ b into out. A tf32
    problem's in_dtype is "tf32" (its own kernels and tuning entries) and its B is always
    read K-major ("nk")."""
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    out_dtype = _OUT[str(out.dtype)]
    in_name = "tf32" if precision == "tf32" else _IN[str(a.dtype)].name
    nk = _b_is_nk(b) or precision == "tf32"
    return Problem(m, n, k, a.shape[0] if a.dim() == 3 else 1, in_name, out_dtype.name,
                   "nk" if nk else "kn", _aligned(out, out_dtype.bytes))


def problem_of(a, b, out, precision: str | None = None):
    """(Problem, (a, b, out)): the problem `matmul(a, b, out)` runs, which keys its kernel and
    its tuning entry, and the operands in that problem's shape. A batch of one and a weight
    shared by every batch are 2-d problems (out may come back as a buffer of its own, as
    matmul uses when out cannot be flattened)."""
    if a.dim() == 3 and b.dim() == 3 and a.shape[0] == 1:
        return problem_of(a[0], b[0], out[0], precision)
    if a.dim() == 3 and b.dim() == 2:
        flat_a, flat_out, _ = _shared_weight_flat(a, b, out)
        return problem_of(flat_a, b, flat_out, precision)
    return _problem(a, b, out, precision), (a, b, out)


def forget_choices() -> None:
    """Drop the in-process schedule memo (after tuning wrote new choices to disk)."""
    _CHOSEN.clear()
    _LAUNCHES.clear()
    _SPLIT_LAUNCHES.clear()
    _TF32_LAUNCHES.clear()


def bmm(a, b, out=None, *, schedule: GemmSchedule | None = None,
        precision: str | None = None):
    """Batched matmul: a [batch, M, K] @ b [batch, K, N]."""
    if a.dim() != 3 or b.dim() != 3:
        raise LaunchError(f"argus.ops.bmm takes 3-d tensors, got {a.dim()}-d and {b.dim()}-d")
    return matmul(a, b, out, schedule=schedule, precision=precision)
