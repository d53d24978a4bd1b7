"""Transposed convolutions of channels-last inputs return channels-last results (torch's layout,
`_channels_last`), and the kernel == stride case (UNet's 2x2 / 2 up-convolution) runs as ONE
1x1 implicit GEMM whose epilogue writes the output depth-to-space (convolve(shuffle=),
ConvGeometry.out_blocks: each output row phase's channel block stored through its own slab of
the Out view): no interleave pass, no intermediate tensor. Interpreter against torch in
float64, the result's memory format against torch's on CPU, the launches counted; the
out_blocks kernel verified with zero findings and built for sm_90a."""

from __future__ import annotations

import collections

import pytest
import torch
import torch.nn.functional as F

import argus as ag
from argus import kernel_api, verify
from argus.errors import LaunchError
from argus.kernels.conv import ConvGeometry, ConvSchedule, conv_kernel
from argus.kernels.conv_interleave import interleave_kernel
from argus.ops import conv as conv_op


def _launches(monkeypatch) -> collections.Counter:
    names: collections.Counter = collections.Counter()
    orig = kernel_api.KernelFunction.interpret

    def interpret(kf, *a, **k):
        names[kf.name] += 1
        return orig(kf, *a, **k)
    monkeypatch.setattr(kernel_api.KernelFunction, "interpret", interpret)
    return names


def _close(y, ref, rtol):
    err = (y.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= rtol * scale + 1e-6, f"max error {err} vs scale {scale}"


def _channels_last(t):
    """t made channels-last: channels_last / channels_last_3d, or for a 1-d [N, C, L] the
    permuted [N, L, C] storage (conv_transpose1d's 2-d form is then channels-last)."""
    if t.dim() == 3:
        return t.permute(0, 2, 1).contiguous().permute(0, 2, 1)
    return t.contiguous(memory_format=torch.channels_last if t.dim() == 4 else
                        torch.channels_last_3d)


def _layout(t) -> str:
    if t.is_contiguous():
        return "contiguous"
    fmt = torch.channels_last if t.dim() == 4 else torch.channels_last_3d
    return "channels_last" if t.dim() in (4, 5) and t.is_contiguous(memory_format=fmt) else \
        "other"


RTOL = {torch.bfloat16: 1e-2, torch.float16: 2e-3, torch.float32: 1e-4}

# (dims, N, C, spatial, K, stride, bias, dtype): odd sizes, K whose sw * K channel rows are
# not 16-byte aligned (the direct epilogue), 3-d with and without a depth stride
CASES = [
    (2, 2, 16, (3, 5), 8, (2, 2), True, torch.bfloat16),
    (2, 1, 8, (4, 3), 4, (3, 2), False, torch.bfloat16),
    (2, 2, 12, (5, 7), 3, (2, 2), True, torch.bfloat16),
    (2, 2, 64, (3, 4), 16, (2, 2), False, torch.bfloat16),     # weight read in place (C = bk)
    (2, 1, 8, (3, 4), 8, (2, 1), True, torch.float16),
    (2, 2, 8, (3, 4), 4, (2, 2), True, torch.float32),         # the fp32 split
    (1, 2, 16, (7,), 8, (3,), True, torch.bfloat16),
    (3, 2, 8, (2, 3, 4), 8, (1, 2, 2), True, torch.bfloat16),
    (3, 1, 8, (2, 3, 3), 4, (2, 2, 2), False, torch.bfloat16),  # depth stride: + interleave
    # 64 input columns: bw 64, the wide TMA-store epilogue of a channels-last x (stop 50)
    (2, 1, 8, (2, 64), 8, (2, 2), True, torch.bfloat16),
]


def _case_id(c):
    return f"{c[0]}d_s{'x'.join(map(str, c[5]))}_k{c[4]}_b{int(c[6])}_{str(c[7])[6:]}"


def _fns(dims):
    return ({1: conv_op.conv_transpose1d, 2: conv_op.conv_transpose2d,
             3: conv_op.conv_transpose3d}[dims],
            {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[dims])


@pytest.mark.parametrize("last", [True, False], ids=["channels_last", "nchw"])
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_kernel_is_stride_matches_torch_in_its_layout(case, last, monkeypatch):
    dims, n, c, spatial, k, st, bias, dtype = case
    g = torch.Generator().manual_seed(sum(spatial) * 31 + k)
    x = torch.randn(n, c, *spatial, generator=g).to(dtype)
    if last:
        x = _channels_last(x)
    w = torch.randn(c, k, *st, generator=g).to(dtype)
    b = torch.randn(k, generator=g).to(dtype) if bias else None
    fn, tfn = _fns(dims)
    names = _launches(monkeypatch)
    y = fn(x, w, b, st, 0, 0, 1, 1, run=conv_op.conv2d_interpret)
    ref = tfn(x.double(), w.double(), None if b is None else b.double(), st)
    assert y.shape == ref.shape and y.dtype == dtype
    _close(y, ref, RTOL[dtype])
    # torch's layout for this input (CPU, bf16: its float32 conv_transpose3d returns an
    # NCDHW result for a one-image channels-last input, the bf16 one and cuDNN follow x)
    want = tfn(x.bfloat16(), w.bfloat16(), None if b is None else b.bfloat16(), st)
    assert _layout(y) == _layout(want), (_layout(y), _layout(want))
    interleaves = sum(v for name, v in names.items() if name.startswith("conv_interleave"))
    shuffled = last and (dims < 3 or st[0] == 1)
    if shuffled:
        # one launch: the 1x1 implicit GEMM writes the output; no interleave
        assert len(names) == 1 and list(names.values()) == [1], names
        assert next(iter(names)).startswith("conv2d"), names
    elif dims > 1:
        rows = 1
        for s_ in st[:-1]:
            rows *= s_
        assert interleaves == rows, names
        if last:         # into the channels-last output: the out="cl" form
            assert all(name.endswith("_ocl") for name in names
                       if name.startswith("conv_interleave")), names


def test_a_repeated_call_replays_the_shuffled_launch(monkeypatch):
    """The second convolve(shuffle=) with the same tensors is the replay (`_Repeat`; on the GPU
    `_conv_transpose` passes the same derived weight and bias each call, `_derived`), its Out
    view and the weight's blocks rebuilt from the replay's record: the same values."""
    g = torch.Generator().manual_seed(3)
    x = _channels_last(torch.randn(2, 64, 3, 5, generator=g).bfloat16())
    w = torch.randn(64, 64, 1, 1, generator=g).bfloat16()
    b = torch.randn(64, generator=g).bfloat16()
    first = conv_op.convolve(x, w, b, shuffle=(2, 2))
    hits = []
    find = conv_op._Repeat.find

    def spy(*a):
        hit = find(*a)
        hits.append(hit)
        return hit
    monkeypatch.setattr(conv_op._Repeat, "find", spy)
    again = conv_op.convolve(x, w, b, shuffle=(2, 2))
    assert hits and hits[-1] is not None and hits[-1].run.shuffle == (2, 2)
    assert hits[-1].Wt is None                     # the weight's [2, 32, 64] view, per call
    assert torch.equal(first, again) and _layout(again) == "channels_last"
    _close(again, _shuffle_ref(x, w, b, 2, 2), 1e-2)


def _shuffle_ref(x, w, b, sh, sw):
    y = F.conv2d(x.double(), w.double(), None if b is None else b.double())
    n, kk, h, wd = y.shape
    k = kk // (sh * sw)
    return y.reshape(n, sh, sw, k, h, wd).permute(0, 3, 4, 1, 5, 2).reshape(n, k, h * sh,
                                                                            wd * sw)


@pytest.mark.parametrize("sh,sw", [(2, 2), (3, 1), (1, 3)])
def test_convolve_shuffle_is_depth_to_space(sh, sw):
    """convolve(shuffle=(sh, sw)): channel (a * sw + b) * Kc + k of pixel (i, j) lands at
    output pixel (i * sh + a, j * sw + b), the result channels-last; an NCHW x too."""
    g = torch.Generator().manual_seed(sh * 10 + sw)
    for last in (True, False):
        x = torch.randn(2, 16, 3, 5, generator=g).bfloat16()
        if last:
            x = _channels_last(x)
        w = torch.randn(sh * sw * 8, 16, 1, 1, generator=g).bfloat16()
        b = torch.randn(sh * sw * 8, generator=g).bfloat16()
        y = conv_op.convolve(x, w, b, shuffle=(sh, sw))
        assert y.shape == (2, 8, 3 * sh, 5 * sw) and _layout(y) == "channels_last"
        _close(y, _shuffle_ref(x, w, b, sh, sw), 1e-2)


def test_convolve_shuffle_refuses_what_it_does_not_take():
    x = torch.randn(1, 8, 4, 4).bfloat16()
    for w, kw in [(torch.randn(16, 8, 3, 3), {}), (torch.randn(16, 8, 1, 1), {"stride": 2}),
                  (torch.randn(16, 4, 1, 1), {"groups": 2}), (torch.randn(6, 8, 1, 1), {}),
                  (torch.randn(16, 8, 1, 1), {"nchw": True})]:
        with pytest.raises(LaunchError, match="shuffle"):
            conv_op.convolve(x, w.bfloat16(), shuffle=(2, 2), **kw)


def test_stride_one_and_general_strided_keep_a_channels_last_layout():
    """A channels-last x's stride-1 and general strided (kernel != stride) transposed
    convolutions return channels-last too (the interleave's out="cl" form); NCHW stays."""
    g = torch.Generator().manual_seed(5)
    for stride, padding, groups in [(1, 1, 1), (2, 1, 1), ((2, 3), (1, 0), 2), (1, 1, 8)]:
        for dtype in (torch.bfloat16, torch.float32):
            x = _channels_last(torch.randn(2, 8, 4, 5, generator=g).to(dtype))
            w = torch.randn(8, 8 // groups if groups > 1 else 6, 3, 3, generator=g).to(dtype)
            y = conv_op.conv_transpose2d(x, w, None, stride, padding, 0, groups,
                                         run=conv_op.conv2d_interpret)
            ref = F.conv_transpose2d(x.double(), w.double(), None, stride, padding, 0, groups)
            _close(y, ref, RTOL[dtype])
            assert _layout(y) == "channels_last", (stride, groups, dtype)
            y = conv_op.conv_transpose2d(x.contiguous(), w, None, stride, padding, 0, groups,
                                         run=conv_op.conv2d_interpret)
            if stride != 1:
                assert _layout(y) == "contiguous"


def test_channels_last_follows_torchs_rule():
    """torch's suggest_memory_format: a trivial channel or pixel axis counts by strides."""
    for shape, perm in [((2, 4, 6, 1), (0, 3, 1, 2)), ((2, 1, 1, 8), (0, 3, 1, 2)),
                        ((1, 4, 6, 8), (0, 3, 1, 2)), ((2, 1, 6, 8), (0, 3, 1, 2)),
                        ((2, 8, 4, 6), (0, 1, 2, 3)), ((2, 1, 4, 6), (0, 1, 2, 3)),
                        ((2, 8, 1, 1), (0, 1, 2, 3)), ((2, 3, 4, 5, 8), (0, 4, 1, 2, 3))]:
        x = torch.randn(*shape).permute(*perm)
        fn = F.conv_transpose2d if x.dim() == 4 else F.conv_transpose3d
        w = torch.randn(x.shape[1], 3, *(2,) * (x.dim() - 2))
        want = fn(x, w, stride=2)
        got = conv_op._channels_last(x, w)
        assert (got is not None) == (_layout(want) == "channels_last"), (shape, perm)


# what schedule_for picks for the UNet up-convolutions (rowbox with the TMA-store epilogue,
# bw 16-64, bias), the per-row boxes in a cluster, and the direct epilogue
BLOCKED = ConvGeometry(1, 1, cg_padded=64, out_blocks=2)
BLOCKED_SCHEDULES = [
    (True, ConvSchedule(bm=128, bn=128, bw=16, stages=4, epilogue="tma", rowbox=True)),
    (False, ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, num_sms=2)),
    (False, ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma", cluster_m=2,
                         num_sms=4)),
    (True, ConvSchedule(bm=128, bn=64, bw=64, stages=2, epilogue="tma", rowbox=True,
                        num_sms=2)),
]


@pytest.mark.parametrize("bias,schedule", BLOCKED_SCHEDULES,
                         ids=["rowbox_tma_bw16_bias", "rowbox_direct", "rows_tma_cluster",
                              "rowbox_tma_bw64_bias"])
def test_out_blocks_kernel_verifies_with_zero_findings(bias, schedule):
    """Each block's batch index reads the input of group g // out_blocks: the groups still
    agree (wgmma.agree proven), every Out element stored once and all covered."""
    found = verify.check(conv_kernel(bias=bias), include_proven=True, timeout_ms=20000,
                         geom=BLOCKED, s=schedule)
    bad = [str(d) for d in found if d.severity != "note"]
    assert bad == [], bad
    proven = {d.code for d in found}
    assert {"store.coverage", "store.once", "wgmma.agree"} <= proven, proven


def test_out_blocks_kernel_and_cl_interleave_compile_for_sm90a():
    from argus import codegen
    from argus.compiler import compile_kernel, lower_only
    from argus.runtime import nvrtc_available
    from argus.runtime.compile import compile_cuda

    if not nvrtc_available():
        pytest.skip("no NVRTC")
    bias, schedule = BLOCKED_SCHEDULES[0]
    assert compile_kernel(conv_kernel(ag.bf16, ag.bf16, bias), verify=False, geom=BLOCKED,
                          s=schedule).source
    source = codegen.render(lower_only(interleave_kernel(("cl", "nc", "bias"), 3, "f32", 32,
                                                         out="cl")))
    (res,) = compile_cuda(source.text, [source.name], filename=f"{source.name}.cu").resources
    assert res.spill_stores == 0 and res.spill_loads == 0, res


def test_a_block_reading_its_own_input_group_is_caught(monkeypatch):
    """Mutation: a block's batch index taken for the input's group (block 1 reading plane 1,
    past the one group's input) pairs the weight of group 1 with the input of group 0: the
    verifier reports wgmma.agree."""
    monkeypatch.setattr(ConvGeometry, "input_group", lambda self, g: g)
    found = verify.check(conv_kernel(), include_proven=True, timeout_ms=20000, geom=BLOCKED,
                         s=ConvSchedule(bm=128, bn=64, bw=8, stages=2, epilogue="tma",
                                        cluster_m=2, num_sms=6))
    assert any(d.code == "wgmma.agree" and d.severity == "error" for d in found), \
        [f"{d.severity} {d.code}" for d in found]


def test_argument_checks_hold_with_the_forms_memo():
    """`_transpose_form` runs once per (arguments, weight shape, channels): a repeated call
    is a lookup, a list argument (unhashable) is checked every call, and a bad argument
    still raises after good calls of the same shapes."""
    g = torch.Generator().manual_seed(9)
    x = _channels_last(torch.randn(1, 8, 3, 4, generator=g).bfloat16())
    w = torch.randn(8, 4, 2, 2, generator=g).bfloat16()
    run = conv_op.conv2d_interpret
    a = conv_op.conv_transpose2d(x, w, None, 2, run=run)
    b = conv_op.conv_transpose2d(x, w, None, [2, 2], run=run)
    assert torch.equal(a, b) and _layout(b) == "channels_last"
    assert (2, 2, 0, 0, 1, 1, w.shape, 8) in conv_op._TRANSPOSE_FORMS
    with pytest.raises(LaunchError, match="must divide"):
        conv_op.conv_transpose2d(x, w, None, 2, 0, 0, 3, run=run)
    with pytest.raises(LaunchError, match="output_padding"):
        conv_op.conv_transpose2d(x, w, None, 2, 0, 2, run=run)
    # the message names the op that was called (it said argus.ops.conv2d)
    with pytest.raises(LaunchError, match=r"conv_transpose2d: stride="):
        conv_op.conv_transpose2d(x, w, None, (2, 2, 2), run=run)
    with pytest.raises(LaunchError, match=r"conv_transpose1d: padding="):
        conv_op.conv_transpose1d(x[:, :, 0], w[:, :, 0], None, 2, 1.0, run=run)
    with pytest.raises(LaunchError, match="channels"):
        conv_op.conv_transpose2d(x[:, :4], w, None, 2, run=run)


@pytest.mark.parametrize("form", ["weight_channels_last", "sliced_x", "channel_slice_x"])
@pytest.mark.parametrize("stride", [1, 2, 3], ids=["flip", "shuffle", "phases"])
def test_layout_follows_torch_for_a_channels_last_weight_or_a_strided_x(form, stride):
    """torch (cuDNN's cudnn_conv_suggest_memory_format, and the CPU's) returns a channels-last
    result where x OR the weight is channels-last by strides (suggest_memory_format: dense or
    not): a model converted with .to(memory_format=channels_last) fed an NCHW x, or a sliced
    channels-last x. The values match either way."""
    g = torch.Generator().manual_seed(11 + stride)
    x = torch.randn(2, 8, 4, 6, generator=g).bfloat16()
    w = torch.randn(8, 4, 2, 2, generator=g).bfloat16()
    if form == "weight_channels_last":
        w = w.contiguous(memory_format=torch.channels_last)
    elif form == "sliced_x":
        x = x.contiguous(memory_format=torch.channels_last)[:, :, :, ::2]
    else:
        x, w = x.contiguous(memory_format=torch.channels_last)[:, :4], w[:4]
    y = conv_op.conv_transpose2d(x, w, None, stride, run=conv_op.conv2d_interpret)
    ref = F.conv_transpose2d(x.double(), w.double(), None, stride)
    want = F.conv_transpose2d(x, w, None, stride)
    _close(y, ref, RTOL[torch.bfloat16])
    assert _layout(want) == "channels_last" and _layout(y) == _layout(want), \
        (form, _layout(y), _layout(want))


@pytest.mark.parametrize("bad", [2.0, (2.0, 2.0), True], ids=["float", "float_pair", "bool"])
def test_an_equal_but_not_int_argument_is_not_a_memo_hit(bad):
    """2.0, (2.0, 2.0) and True equal (and hash as) 2, (2, 2) and 1: after a good call of the
    same shapes the forms memo must not hand their form back unchecked: each is refused as on
    a first call (a float or bool stride is no int: torch refuses both with a TypeError)."""
    x = _channels_last(torch.randn(1, 8, 3, 4).bfloat16())
    w = torch.randn(8, 4, 2, 2).bfloat16()
    run = conv_op.conv2d_interpret
    good = 1 if bad is True else bad if not isinstance(bad, tuple) else (2, 2)
    conv_op.conv_transpose2d(x, w, None, int(good) if not isinstance(good, tuple) else good,
                             run=run)
    calls = []
    form = conv_op._transpose_form

    def spy(*a):
        calls.append(a)
        return form(*a)
    import unittest.mock
    with unittest.mock.patch.object(conv_op, "_transpose_form", spy):
        with pytest.raises(LaunchError, match="must be an int"):
            conv_op.conv_transpose2d(x, w, None, bad, run=run)
    assert len(calls) == 1                          # checked, not a memo hit


@pytest.mark.parametrize("groups", [True, 2.0, 0])
def test_a_groups_that_is_no_int_is_refused_as_such(groups):
    """groups=True (or 2.0, or 0) is refused for what it is, as conv2d refuses it, not as a
    groups that does not divide C (True and 2.0 do divide 8)."""
    x = _channels_last(torch.randn(1, 8, 3, 4).bfloat16())
    w = torch.randn(8, 4, 2, 2).bfloat16()
    with pytest.raises(LaunchError, match=f"groups={groups!r} must be an int >= 1"):
        conv_op.conv_transpose2d(x, w, None, 2, groups=groups, run=conv_op.conv2d_interpret)
