"""`argus.ops.conv2d` / `conv1d` / `conv3d`: convolutions with torch semantics on Argus's
implicit-GEMM kernel (argus/kernels/conv.py).

Layout: the kernel reads channels-last activations. An NCHW-contiguous input is copied to
channels-last once per call (`x.contiguous(memory_format=torch.channels_last)`); a channels-last
input (NCHW shape, NHWC memory, as `x.to(memory_format=torch.channels_last)` makes) is read in
place. The result has NCHW shape in channels-last memory, like cuDNN's result for a
channels-last input. Weights are repacked to [G, R * S, Kg, Cg] per call (small next to the
activations). A copy is also made when C / groups is not a multiple of 8 (TMA needs 16-byte
pixel pitches: the channels are zero-padded) or when W is not a multiple of stride_w (the
strided view of argus/kernels/conv.py needs whole strides: W is zero-padded).

dtypes: bf16 / fp16 inputs with fp32 accumulation, output in the input dtype. fp32 inputs run
as a bf16 split (`terms`): x = x0 + x1 + x2 and w = w0 + w1 + w2 (exact remainders, each piece
bf16), and the products of SPLIT_SLOTS[terms] are one implicit GEMM over terms * Cg channels
(the pieces side by side in K, smallest products first) with an fp32 output. 3 terms
(x0*w1 + x1*w0 + x0*w0, the default of the public ops) drop products of ~2^-16 relative: an
error of order 1e-5 of the output scale (the tests assert 1e-4); 6 terms (every product whose
pieces sum to at most 2, the strict fp32 track: argus/compose) drop ~2^-24; 1 term is plain
bf16 (relaxed track only). The table is argus/agent/split_numerics.py's SLOTS, which derives
their accuracy (ops does not import the agent, so it is repeated here and a unit test holds
the two equal).

conv1d is conv2d on [N, C, 1, L] with a 1 x K filter; conv3d runs the same kernel with the
depth taps as more K steps and (n, depth) as the flattened image axis.

The op runs as the torch.library custom op `argus::conv2d` (2-d and 3-d).
"""

from __future__ import annotations

import sys
from collections import OrderedDict

from argus import dtypes
from argus.errors import LaunchError
from argus.kernels.conv import ACTIVATIONS, ConvGeometry, ConvSchedule, conv_kernel

_IN = {"torch.bfloat16": dtypes.bf16, "torch.float16": dtypes.f16, "torch.float32": dtypes.f32}
_COMPILED: OrderedDict = OrderedDict()
_MEMO_SIZE = 256
# (piece of x, piece of w) per K slot of the fp32 split, smallest products first: the same
# table as argus/agent/split_numerics.py SLOTS (tests/interp/test_conv_interp.py holds them equal)
SPLIT_SLOTS = {1: ((0, 0),), 3: ((0, 1), (1, 0), (0, 0)),
               6: ((0, 2), (1, 1), (2, 0), (0, 1), (1, 0), (0, 0))}


def _pair(v, name: str, n: int = 2) -> tuple:
    if isinstance(v, int):
        return (v,) * n
    v = tuple(v)
    if len(v) != n or not all(isinstance(e, int) for e in v):
        raise LaunchError(f"argus.ops.conv{n}d: {name}={v!r} must be an int or {n} ints")
    return v


def schedule_for(x, weight, stride, padding, dilation, groups) -> ConvSchedule:
    """A first heuristic, not tuned: bw = Q rounded up to a power of two in [8, 64] (fewer
    wasted tile rows on narrow layers; below 64 it needs the TMA-store epilogue, so a 16-bit
    output with 16-byte aligned channel rows), bn 128 unless the layer has <= 64 output
    channels per group; fp32 (split) inputs promote every K step's partial."""
    W, K, S = x.shape[-1], weight.shape[0], weight.shape[-1]
    sw, pw, dw = (_pair(v, name, x.dim() - 2)[-1] for v, name in (
        (stride, "stride"), (padding, "padding"), (dilation, "dilation")))
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    Kg = K // groups
    bn = 64 if Kg <= 64 else 128
    bw = 8
    while bw < min(Q, 64):
        bw *= 2
    tma_ok = x.element_size() == 2 and Kg % 8 == 0
    # fp32 (the bf16 split): promote each K step's partial, so the tensor core's truncating
    # accumulation spans one 64-deep slice, not all of K (split_numerics: the strict track)
    promote = x.element_size() == 4
    if bw < 64 and tma_ok:
        return ConvSchedule(bm=128, bn=bn, bk=64, bw=bw, stages=4, consumers=2,
                            epilogue="tma")
    return ConvSchedule(bm=128, bn=bn, bk=64, bw=64, stages=4, consumers=2, promote=promote)


def check(x, weight, bias, stride, padding, dilation, groups) -> None:
    """Raise a LaunchError for input that cannot be right, saying what and how to fix it."""
    import torch

    for name, t in (("x", x), ("weight", weight)) + ((("bias", bias),) if bias is not None
                                                     else ()):
        if not isinstance(t, torch.Tensor):
            raise LaunchError(f"argus.ops.conv2d: {name} must be a torch.Tensor, got "
                              f"{type(t).__name__}")
    if x.dim() not in (4, 5) or weight.dim() != x.dim():
        raise LaunchError(f"argus.ops.conv2d: x is [N, C, H, W] and weight [K, C / groups, R, "
                          f"S] (conv3d: [N, C, D, H, W] and [K, C / groups, T, R, S]); got "
                          f"{tuple(x.shape)} and {tuple(weight.shape)}")
    if str(x.dtype) not in _IN or weight.dtype != x.dtype:
        raise LaunchError(f"argus.ops.conv2d: x and weight must both be bfloat16, float16 or "
                          f"float32; got {x.dtype} and {weight.dtype}",
                          fix="cast both, e.g. x.bfloat16(), weight.bfloat16()")
    if x.device != weight.device or (bias is not None and bias.device != x.device):
        raise LaunchError("argus.ops.conv2d: tensors are on different devices",
                          fix="move them to one GPU")
    if not isinstance(groups, int) or groups < 1:
        raise LaunchError(f"argus.ops.conv2d: groups={groups!r} must be an int >= 1")
    C, K, Cg = x.shape[1], weight.shape[0], weight.shape[1]
    if C % groups or K % groups:
        raise LaunchError(f"argus.ops.conv2d: groups={groups} must divide the input channels "
                          f"({C}) and the output channels ({K})")
    if Cg != C // groups:
        raise LaunchError(f"argus.ops.conv2d: weight has {Cg} input channels per group; x has "
                          f"{C} channels in {groups} groups ({C // groups} each)",
                          fix="weight is [out_channels, in_channels / groups, R, S]")
    if bias is not None and tuple(bias.shape) != (K,):
        raise LaunchError(f"argus.ops.conv2d: bias has shape {tuple(bias.shape)}, expected "
                          f"({K},)")
    dims = x.dim() - 2
    st, pd, dl = (_pair(stride, "stride", dims), _pair(padding, "padding", dims),
                  _pair(dilation, "dilation", dims))
    if min(st + dl) < 1 or min(pd) < 0:
        raise LaunchError(f"argus.ops.conv2d: stride {stride}, dilation {dilation} must be >= 1 "
                          f"and padding {padding} >= 0")
    out = [(n + 2 * p - d * (k - 1) - 1) // s_ + 1
           for n, k, s_, p, d in zip(x.shape[2:], weight.shape[2:], st, pd, dl)]
    if min(out) < 1:
        raise LaunchError(f"argus.ops.conv2d: a {tuple(weight.shape[2:])} filter (dilation "
                          f"{dilation}, padding {padding}) does not fit a {tuple(x.shape[2:])} "
                          f"input")


def weight_operand(wt, bk: int):
    """[G, taps, Kg, Cg] -> the kernel's [G, Kg, taps * Cgp]: each tap's channels zero-padded
    to Cgp = a multiple of bk, so a K slice of the weight never holds two taps."""
    import torch.nn.functional as F

    G, taps, Kg, Cg = wt.shape
    padded = F.pad(wt, (0, -Cg % bk)).permute(0, 2, 1, 3)         # [G, Kg, taps, Cgp]
    return padded.contiguous().reshape(G, Kg, -1)


def _triple(v, name: str, dims: int) -> tuple:
    """stride / padding / dilation of a `dims`-d convolution as (depth, height, width)."""
    return (1 if name != "padding" else 0,) * (3 - dims) + _pair(v, name, dims)


def _bf16_pieces(t, n: int) -> list:
    """t (fp32) as n bf16 pieces whose sum approximates it: t0 = bf16(t), t1 = bf16(t - t0),
    ... (each remainder is exact in fp32)."""
    import torch

    pieces, rest = [], t
    for _ in range(n):
        piece = rest.to(torch.bfloat16)
        pieces.append(piece)
        rest = rest - piece.float()
    return pieces


_WEIGHTS: OrderedDict = OrderedDict()


def _weight_side(weight, bias, groups: int, terms: int, bk: int):
    """(Wt [G, Kg, taps * Cgp], Bias [G, Kg] fp32) of a 5-d weight [K, Cg, T, R, S]: the
    weight's pieces of the fp32 split (terms > 0: SPLIT_SLOTS[terms] side by side along the
    channels), each tap's channels zero-padded to a multiple of bk. On the GPU they are kept
    per weight and bias object and version (a module's parameters are repacked once, not per
    call; an in-place update bumps the version), checked by identity through weak
    references so a new tensor at a freed address is never mistaken for the old one. Not seen:
    a write through `weight.data` (`.data` has a version counter of its own, so
    `w.data.mul_(2)` leaves w._version as it was and the old pieces are used); update
    parameters in place under torch.no_grad() instead."""
    import weakref

    import torch

    key = None
    # a view (conv1d's and conv2d's unsqueeze) is new per call: its base is the parameter
    owner = weight if weight._base is None else weight._base
    if weight.is_cuda:
        key = (id(owner), weight._version, weight.data_ptr(), tuple(weight.shape),
               weight.stride(), weight.dtype, id(bias),
               None if bias is None else bias._version, groups, terms, bk)
        hit = _WEIGHTS.get(key)
        if hit is not None and hit[0]() is owner and \
                (bias is None or hit[1] is not None and hit[1]() is bias):
            _WEIGHTS.move_to_end(key)
            return hit[2], hit[3]
    K, Cg, T, R, S = weight.shape if weight.dim() == 5 else weight.unsqueeze(2).shape
    G, Kg = groups, K // groups
    wt = weight.detach().reshape(G, Kg, Cg, T * R * S).permute(0, 3, 1, 2)   # [G, taps, Kg, Cg]
    if terms:
        slots = SPLIT_SLOTS[terms]
        wp = _bf16_pieces(wt, 1 + max(max(pair) for pair in slots))
        wt = torch.cat([wp[j] for _, j in slots], dim=-1)
    Wt = weight_operand(wt, bk)
    b = torch.zeros(G, Kg, dtype=torch.float32, device=weight.device) if bias is None else \
        bias.detach().float().reshape(G, Kg).contiguous()
    if key is not None:
        _WEIGHTS[key] = (weakref.ref(owner), None if bias is None else weakref.ref(bias), Wt, b)
        if len(_WEIGHTS) > 64:
            _WEIGHTS.popitem(last=False)
    return Wt, b


def operands(x, weight, bias, stride, padding, dilation, groups, bk: int = 64, terms: int = 3,
             pack_x=None):
    """The kernel's operands for conv2d or conv3d(x, weight, ...) (checked already): (X view,
    Wt, the channels-last result [N, OD, P, Q, K], its [G, N*OD*P, Q, Kg] view, Bias [G, Kg]
    fp32, the runtime scalars (H, P, D, OD), geometry, in dtype, out dtype). A 2-d problem is
    depth 1; `terms` is the fp32 split (SPLIT_SLOTS). `pack_x(x5, slots, groups)` (fp32 only;
    None: torch) makes the split input instead: x5 is the [N, C, D, H, W] input, the result
    the contiguous bf16 [N, D, H, W, G * Cg'] with each group's channels the pieces of
    slots side by side (slot t: piece slots[t][0] of its Cg channels), zero-padded to Cg', a
    multiple of 8 (argus.compose packs it with Argus kernels). Runs on CPU tensors too (the
    interpreter tests use it)."""
    import torch
    import torch.nn.functional as F

    dims = x.dim() - 2
    weight_in = weight
    if dims == 2:
        x, weight = x.unsqueeze(2), weight.unsqueeze(2)
    N, C, D, H, W = x.shape
    K, Cg, T, R, S = weight.shape
    G, Kg = groups, K // groups
    (sd, sh, sw), (pd, ph, pw), (dd, dh, dw) = (_triple(stride, "stride", dims),
                                                _triple(padding, "padding", dims),
                                                _triple(dilation, "dilation", dims))
    OD = (D + 2 * pd - dd * (T - 1) - 1) // sd + 1
    P = (H + 2 * ph - dh * (R - 1) - 1) // sh + 1
    Q = (W + 2 * pw - dw * (S - 1) - 1) // sw + 1
    ndhwc = x.permute(0, 2, 3, 4, 1)                   # a view; contiguous if channels-last
    Wt, b = _weight_side(weight_in, bias, groups, terms if x.dtype == torch.float32 else 0, bk)
    if x.dtype == torch.float32 and pack_x is not None:
        slots = SPLIT_SLOTS[terms]
        ndhwc = pack_x(x, slots, G)
        Cg = ndhwc.shape[-1] // G                       # already a multiple of 8
        in_dtype, out_dtype = dtypes.bf16, dtypes.f32
    elif x.dtype == torch.float32:                      # the bf16 split: slot t multiplies
        slots = SPLIT_SLOTS[terms]                      # x piece slots[t][0] by w piece [1]
        xp = _bf16_pieces(ndhwc, 1 + max(max(pair) for pair in slots))
        xg = [xp[i].reshape(N, D, H, W, G, Cg) for i, _ in slots]
        ndhwc = torch.cat(xg, dim=-1).reshape(N, D, H, W, G * len(slots) * Cg)
        Cg = len(slots) * Cg
        in_dtype, out_dtype = dtypes.bf16, dtypes.f32
    else:
        in_dtype = out_dtype = _IN[str(x.dtype)]
    cpad = -Cg % 8                                      # 16-byte pixel pitch for TMA
    wpad = -W % sw                                      # whole strides along W
    if cpad or wpad or not ndhwc.is_contiguous():
        grouped = ndhwc.reshape(N, D, H, W, G, Cg)
        ndhwc = F.pad(grouped, (0, cpad, 0, 0, 0, wpad)).contiguous().reshape(
            N, D, H, W + wpad, G * (Cg + cpad))       # pad keeps a permuted input's strides
        Cg, W = Cg + cpad, W + wpad
    X = ndhwc.as_strided((N * D * H, sw * G, W // sw, Cg), (W * G * Cg, Cg, sw * G * Cg, 1))
    out = torch.empty(N, OD, P, Q, K, dtype=out_dtype.torch_dtype(), device=x.device)
    out_view = out.view(N * OD * P, Q, G, Kg).permute(2, 0, 1, 3)
    geom = ConvGeometry(R, S, sh, sw, ph, pw, dh, dw, G, Wt.shape[2] // (T * R * S), T, sd, pd,
                        dd)
    return X, Wt, out, out_view, b, (H, P, D, OD), geom, in_dtype, out_dtype


def _result(x, out):
    """The [N, OD, P, Q, K] channels-last result as an NC(D)HW-shaped tensor in the input's
    dtype (depth dropped for a 2-d input)."""
    y = out.permute(0, 4, 1, 2, 3).to(x.dtype)
    return y.squeeze(2) if x.dim() == 4 else y


def convolve(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
             activation: str = "none", terms: int = 3, schedule: ConvSchedule | None = None,
             pack_x=None):
    """conv2d (conv3d for 5-d x and weight), checked, with the fp32 split of `terms` products:
    compiled for sm_90a on CUDA tensors, in the numpy interpreter on CPU tensors (tests; no
    GPU). The one entry below the torch.library op; argus.compose calls it directly (it picks
    `terms` for the strict or the relaxed track, and packs fp32 inputs itself: `pack_x`, see
    `operands`)."""
    repeat = _Repeat.key(x, weight, bias, stride, padding, dilation, groups, activation, terms,
                         schedule)
    hit = _REPEATS.get(repeat) if repeat is not None else None
    if hit is not None and hit.holds(x, weight, bias):
        _REPEATS.move_to_end(repeat)
        return hit.launch(x)
    check(x, weight, bias, stride, padding, dilation, groups)
    if activation not in ACTIVATIONS:
        raise LaunchError(f"argus.ops.conv: activation={activation!r} is not one of "
                          f"{ACTIVATIONS}", fix="apply it after the convolution")
    if terms not in SPLIT_SLOTS:
        raise LaunchError(f"argus.ops.conv: terms={terms!r} is not one of "
                          f"{sorted(SPLIT_SLOTS)}", fix="6: strict fp32, 3 or 1: relaxed")
    s = schedule or schedule_for(x, weight, stride, padding, dilation, groups)
    X, Wt, out, view, b, sizes, geom, idt, odt = operands(x, weight, bias, stride, padding,
                                                          dilation, groups, s.bk, terms, pack_x)
    if out.numel() == 0:
        return _result(x, out)
    kernel = conv_kernel(idt, odt, bias is not None, activation)
    if not x.is_cuda:
        kernel.interpret(X, Wt, view, b, *sizes, geom=geom, s=s)
        return _result(x, out)
    import torch

    key = (idt, odt, bias is not None, activation, geom, s, x.device.index)
    compiled = _COMPILED.get(key)
    if compiled is None:
        compiled = kernel.compile(geom=geom, s=s)
        _COMPILED[key] = compiled
        if len(_COMPILED) > _MEMO_SIZE:
            _COMPILED.popitem(last=False)
    with torch.cuda.device(x.device):
        compiled(X, Wt, view, b, *sizes)
    if repeat is not None and X.untyped_storage().data_ptr() == x.untyped_storage().data_ptr():
        # X is a view of x itself (no copy, no split): the next call with these tensors
        # rebuilds the view and launches, skipping the checks and the operand preparation
        _REPEATS[repeat] = _Repeat.of(x, weight, bias, X, Wt, b, sizes, out, compiled)
        if len(_REPEATS) > 64:
            _REPEATS.popitem(last=False)
    return _result(x, out)


_REPEATS: OrderedDict = OrderedDict()


class _Repeat:
    """A call's prepared launch, for the next call with the same tensors (measured: the checks
    and the operand preparation cost more host time than a ResNet layer's kernel runs). Valid
    only while the same x, weight (its parameter) and bias objects are passed, unchanged in
    version (weak references: nothing is kept alive); x is re-viewed per call, so its current
    contents are read, and the output is a new tensor every call."""

    __slots__ = ("refs", "x_view", "Wt", "b", "sizes", "out_shape", "out_dtype", "compiled")

    @staticmethod
    def key(x, weight, bias, stride, padding, dilation, groups, activation, terms, schedule):
        if not getattr(x, "is_cuda", False) or not hasattr(weight, "_version"):
            return None
        owner = weight if weight._base is None else weight._base
        try:
            return (x.data_ptr(), tuple(x.shape), x.stride(), x.dtype, x.device.index,
                    id(owner), weight._version, weight.data_ptr(), tuple(weight.shape),
                    weight.stride(), id(bias), None if bias is None else bias._version,
                    repr(stride), repr(padding), repr(dilation), groups, activation, terms,
                    schedule)
        except (AttributeError, TypeError, RuntimeError):
            return None            # not tensors: the checked path says what is wrong

    @classmethod
    def of(cls, x, weight, bias, X, Wt, b, sizes, out, compiled) -> "_Repeat":
        import weakref

        r = cls()
        owner = weight if weight._base is None else weight._base
        r.refs = (weakref.ref(x), weakref.ref(owner),
                  None if bias is None else weakref.ref(bias))
        r.x_view = (tuple(X.shape), X.stride(), X.storage_offset())
        r.Wt, r.b, r.sizes, r.compiled = Wt, b, sizes, compiled
        r.out_shape, r.out_dtype = tuple(out.shape), out.dtype
        return r

    def holds(self, x, weight, bias) -> bool:
        owner = weight if weight._base is None else weight._base
        return self.refs[0]() is x and self.refs[1]() is owner and \
            (bias is None if self.refs[2] is None else self.refs[2]() is bias)

    def launch(self, x):
        import torch

        shape, strides, offset = self.x_view
        X = x.as_strided(shape, strides, offset)
        out = torch.empty(self.out_shape, dtype=self.out_dtype, device=x.device)
        G, Kg = self.Wt.shape[0], self.Wt.shape[1]
        view = out.view(-1, self.out_shape[3], G, Kg).permute(2, 0, 1, 3)
        if x.device.index == torch.cuda.current_device():
            self.compiled(X, self.Wt, view, self.b, *self.sizes)
        else:
            with torch.cuda.device(x.device):
                self.compiled(X, self.Wt, view, self.b, *self.sizes)
        return _result(x, out)


def conv2d_interpret(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
                     activation: str = "none", schedule: ConvSchedule | None = None,
                     terms: int = 3):
    """conv2d (conv3d for 5-d x and weight) in the numpy interpreter on CPU tensors (tests;
    no GPU)."""
    if getattr(x, "is_cuda", False):
        raise LaunchError("argus.ops.conv2d_interpret runs on CPU tensors",
                          fix="x.cpu(), or argus.ops.conv2d on the GPU")
    return convolve(x, weight, bias, stride, padding, dilation, groups, activation=activation,
                    terms=terms, schedule=schedule)


def _run(x, weight, bias, stride, padding, dilation, groups, activation="none",
         schedule=None):
    if not x.is_cuda:
        raise LaunchError(f"argus.ops.conv2d: x is on {x.device}; Argus kernels run on a CUDA "
                          f"device (sm_90a)", fix="x.cuda(), or torch.nn.functional.conv2d")
    return convolve(x, weight, bias, stride, padding, dilation, groups, activation=activation,
                    schedule=schedule)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
           activation: str = "none"):
    """torch.nn.functional.conv2d(x, weight, bias, stride, padding, dilation, groups) on an
    Argus kernel (see the module docstring for layouts and dtypes); `activation` (one of
    argus.kernels.conv.ACTIVATIONS) is applied in the kernel's epilogue, after the bias."""
    check(x, weight, bias, stride, padding, dilation, groups)
    if activation not in ACTIVATIONS:
        raise LaunchError(f"argus.ops.conv2d: activation={activation!r} is not one of "
                          f"{ACTIVATIONS}", fix="apply it after the convolution")
    if not x.is_cuda:
        raise LaunchError(f"argus.ops.conv2d: x is on {x.device}; Argus kernels run on a CUDA "
                          f"device (sm_90a)", fix="x.cuda(), or torch.nn.functional.conv2d")
    return _op()(x, weight, bias, list(_pair(stride, "stride")), list(_pair(padding, "padding")),
                 list(_pair(dilation, "dilation")), groups, activation)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """torch.nn.functional.conv1d as conv2d on [N, C, 1, L] with a 1 x K filter (exact)."""
    if getattr(x, "dim", lambda: 0)() != 3 or getattr(weight, "dim", lambda: 0)() != 3:
        raise LaunchError("argus.ops.conv1d: x is [N, C, L] and weight [K, C / groups, R]")
    (s,), (p,), (d,) = (_pair(stride, "stride", 1), _pair(padding, "padding", 1),
                        _pair(dilation, "dilation", 1))
    out = conv2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), (1, d), groups)
    return out.squeeze(2)


def conv3d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *,
           activation: str = "none"):
    """torch.nn.functional.conv3d on the same implicit-GEMM kernel: the depth taps are more K
    steps, the (n, depth) pairs the flattened image axis (depth outside [0, D): zero rows)."""
    if getattr(x, "dim", lambda: 0)() != 5 or getattr(weight, "dim", lambda: 0)() != 5:
        raise LaunchError("argus.ops.conv3d: x is [N, C, D, H, W] and weight "
                          "[K, C / groups, T, R, S]")
    check(x, weight, bias, stride, padding, dilation, groups)
    if activation not in ACTIVATIONS:
        raise LaunchError(f"argus.ops.conv3d: activation={activation!r} is not one of "
                          f"{ACTIVATIONS}", fix="apply it after the convolution")
    if not x.is_cuda:
        raise LaunchError(f"argus.ops.conv3d: x is on {x.device}; Argus kernels run on a CUDA "
                          f"device (sm_90a)", fix="x.cuda(), or torch.nn.functional.conv3d")
    return _op()(x, weight, bias, list(_pair(stride, "stride", 3)),
                 list(_pair(padding, "padding", 3)), list(_pair(dilation, "dilation", 3)),
                 groups, activation)


def conv_transpose2d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, *, run=None):
    """torch.nn.functional.conv_transpose2d in the gradient form (`_conv_transpose`). `run`
    replaces conv2d (the interpreter tests pass conv2d_interpret)."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                           2, run or conv2d)


def conv_transpose3d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, *, run=None):
    """torch.nn.functional.conv_transpose3d in the gradient form, on conv3d."""
    return _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                           3, run or conv3d)


def conv_transpose1d(x, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1,
                     dilation=1, *, run=None):
    """torch.nn.functional.conv_transpose1d as conv_transpose2d on [N, C, 1, L] (exact)."""
    if getattr(x, "dim", lambda: 0)() != 3 or getattr(weight, "dim", lambda: 0)() != 3:
        raise LaunchError("argus.ops.conv_transpose1d: x is [N, C, L] and weight "
                          "[C, K / groups, R]")
    (s,), (p,), (o,), (d,) = (_pair(v, n, 1) for v, n in (
        (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"),
        (dilation, "dilation")))
    y = conv_transpose2d(x.unsqueeze(2), weight.unsqueeze(2), bias, (1, s), (0, p), (0, o),
                         groups, (1, d), run=run)
    return y.squeeze(2)


def _conv_transpose(x, weight, bias, stride, padding, output_padding, groups, dilation,
                    dims: int, run):
    """A transposed convolution in the gradient form: each output pixel gathers the input
    pixels that map to it, no zero insertion. Stride 1: one convolution with the weight's
    channels swapped per group, the taps flipped and padding dil * (k - 1) - padding. Strided
    (or output_padding): one stride-1 convolution per output phase (o % stride on every axis)
    over the taps of that residue (`_phase`), copied into the strided output positions
    (correct, not yet fast: prod(stride) launches and a copy each)."""
    import itertools

    import torch

    name = f"argus.ops.conv_transpose{dims}d"
    if getattr(x, "dim", lambda: 0)() != dims + 2 or \
            getattr(weight, "dim", lambda: 0)() != dims + 2:
        raise LaunchError(f"{name}: x is [N, C, *spatial] and weight [C, K / groups, "
                          f"*kernel] with {dims} spatial dims")
    st, pd, op, dl = (_pair(v, n, dims) for v, n in (
        (stride, "stride"), (padding, "padding"), (output_padding, "output_padding"),
        (dilation, "dilation")))
    if not isinstance(groups, int) or groups < 1 or weight.shape[0] % groups or \
            x.shape[1] != weight.shape[0]:
        raise LaunchError(f"{name}: x has {x.shape[1]} channels, weight "
                          f"{tuple(weight.shape)} ([C, K / groups, *kernel]); groups={groups} "
                          f"must divide C")
    if min(st) < 1 or min(dl) < 1 or min(pd) < 0 or any(o >= max(s_, d) for o, s_, d in
                                                          zip(op, st, dl)):
        raise LaunchError(f"{name}: stride {st}, dilation {dl} >= 1, padding {pd} >= 0, "
                          f"output_padding {op} < max(stride, dilation)")
    ks = tuple(weight.shape[2:])
    C, Kg = weight.shape[0], weight.shape[1]
    K = Kg * groups
    swapped = weight.reshape(groups, C // groups, Kg, *ks).transpose(1, 2) \
        .reshape(K, C // groups, *ks)                  # [K, C / groups, *kernel], unflipped
    conv_pad = tuple(d * (k - 1) - p for d, k, p in zip(dl, ks, pd))
    if set(st) == {1} and set(op) == {0} and min(conv_pad) >= 0:
        flipped = _derived(weight, ("flip", groups, dims),
                           lambda: swapped.flip(list(range(2, 2 + dims))))
        return run(x, flipped, bias, 1, conv_pad, dl, groups)
    ins = tuple(x.shape[2:])
    outs = tuple((i - 1) * s_ - 2 * p + d * (k - 1) + o + 1
                 for i, s_, p, d, k, o in zip(ins, st, pd, dl, ks, op))
    if min(outs) < 1:
        raise LaunchError(f"{name}: output size {outs} is empty")
    out = torch.empty(x.shape[0], K, *outs, dtype=x.dtype, device=x.device)
    for phase in itertools.product(*(range(min(s_, o)) for s_, o in zip(st, outs))):
        target = out[(slice(None), slice(None)) +
                     tuple(slice(a, None, s_) for a, s_ in zip(phase, st))]
        axes = [_phase(a, k, s_, d, p, o, i)
                for a, k, s_, d, p, o, i in zip(phase, ks, st, dl, pd, outs, ins)]
        if any(ax is None for ax in axes):             # no tap reaches this phase
            target.copy_(torch.zeros_like(target) if bias is None else
                         bias.view(1, K, *(1,) * dims).expand_as(target))
            continue
        def select(axes=axes):
            w = swapped
            for axis, (taps, _, _, _) in enumerate(axes):
                w = w.index_select(2 + axis, torch.tensor(taps, device=x.device))
            return w.contiguous()

        w_phase = _derived(weight, ("phase", groups, tuple(tuple(ax[0]) for ax in axes)),
                           select)
        y = run(x, w_phase, bias, 1, tuple(ax[2] for ax in axes),
                tuple(ax[1] for ax in axes), groups)
        target.copy_(y[(slice(None), slice(None)) + tuple(
            slice(ax[3], ax[3] + n) for ax, n in zip(axes, target.shape[2:]))])
    return out


_DERIVED: OrderedDict = OrderedDict()


def _derived(weight, what: tuple, make):
    """A tensor derived from a weight (a transposed convolution's flipped or per-phase
    weights), kept per weight object and version on the GPU like `_weight_side`'s operands:
    the same derived tensor object each call, so the operand cache below it hits too."""
    import weakref

    if not weight.is_cuda:
        return make()
    owner = weight if weight._base is None else weight._base   # conv_transpose1d's unsqueeze
    key = (id(owner), weight._version, weight.data_ptr(), tuple(weight.shape),
           weight.stride(), weight.dtype, what)
    hit = _DERIVED.get(key)
    if hit is not None and hit[0]() is owner:
        _DERIVED.move_to_end(key)
        return hit[1]
    made = make()
    _DERIVED[key] = (weakref.ref(owner), made)
    if len(_DERIVED) > 64:
        _DERIVED.popitem(last=False)
    return made


def _phase(a: int, R: int, st: int, dil: int, pad: int, P: int, H: int):
    """Output positions o = st * j + a of a strided transposed convolution along one axis as a
    stride-1 convolution over j: the taps r with (a + pad - r * dil) % st == 0 read input
    j - e_r, e_r = (r * dil - a - pad) / st. Returns (tap indices in convolution order, its
    dilation, its symmetric padding, the first computed row that is output j = 0), or None
    when no tap reaches the phase. Taps in convolution order read increasing inputs: r
    descending."""
    taps = [r for r in range(R) if (a + pad - r * dil) % st == 0]
    if not taps:
        return None
    taps = taps[::-1]
    e = [(r * dil - a - pad) // st for r in taps]
    d = e[0] - e[1] if len(taps) > 1 else 1           # consecutive taps: a constant step
    count = -(-(P - a) // st)                         # outputs of this phase
    span = d * (len(taps) - 1)
    p = max(0, e[0], count - e[0] + span - H)
    return taps, d, p, p - e[0]


_OP = None


def _op():
    """torch.ops.argus.conv2d, registered once: opaque to torch.compile (the fake gives the
    shape), captured by CUDA graphs like any launch on the current stream."""
    global _OP
    if _OP is None:
        _OP = _register()
    return _OP


def _register():
    import torch

    try:
        return torch.ops.argus.conv2d.default
    except (AttributeError, RuntimeError):
        pass

    @torch.library.custom_op("argus::conv2d", mutates_args=(),
                             schema="(Tensor x, Tensor weight, Tensor? bias, int[] stride, "
                                    "int[] padding, int[] dilation, int groups, "
                                    "str activation) -> Tensor")
    def conv2d_op(x, weight, bias, stride, padding, dilation, groups, activation):
        return _run(x, weight, bias, tuple(stride), tuple(padding), tuple(dilation), groups,
                    activation)

    @conv2d_op.register_fake
    def _(x, weight, bias, stride, padding, dilation, groups, activation):
        out = [(n + 2 * p - d * (k - 1) - 1) // s_ + 1 for n, k, s_, p, d in
               zip(x.shape[2:], weight.shape[2:], stride, padding, dilation)]
        y = x.new_empty((x.shape[0], *out, weight.shape[0]))
        return y.permute(0, y.dim() - 1, *range(1, y.dim() - 1))

    return conv2d_op


if "torch" in sys.modules:
    _op()
