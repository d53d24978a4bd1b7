"""GPU tier of issue 17 (tests/compose/test_conv_pack_chunks.py is the CPU tier): the fp32
split packed and convolved in chunks of images on the device gives the bytes of one pass,
including chunk slices that need the alignment step (an odd C x L: image slices of x start
16-byte aligned only every 4 images) and a result whose NCHW rows are not 16-byte aligned
(L1/76's kind: the register epilogue on every chunk)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

CASES = {
    # conv1d as run_conv runs it (2-d on a unit height): stride 3, dilation 4, like L1/76
    "1d_strided_dilated": ((9, 64, 1, 1501), (128, 64, 1, 3),
                           dict(stride=(1, 3), padding=0, dilation=(1, 4), groups=1)),
    # odd C x L: the alignment step is 4 images
    "1d_odd_image": ((9, 5, 1, 333), (8, 5, 1, 3), dict(stride=1, padding=1, dilation=1,
                                                       groups=1)),
    # L1/87's kind: a 1x1 fp32 convolution on the implicit GEMM
    "2d_pointwise": ((6, 64, 32, 32), (128, 64, 1, 1), dict(stride=1, padding=0, dilation=1,
                                                          groups=1)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_convolve_in_packed_chunks_matches_one_pass_on_the_gpu(case, monkeypatch):
    from argus.compose.conv import pack_split
    from argus.ops import conv as conv_ops

    xs, ws, kw = CASES[case]
    g = torch.Generator(device="cuda").manual_seed(17)
    x = torch.randn(*xs, device="cuda", generator=g)
    w = torch.randn(*ws, device="cuda", generator=g)
    whole = conv_ops.convolve(x, w, None, terms=6, pack_x=pack_split, nchw=True, **kw)
    per = conv_ops.packed_bytes_per_image(x, kw["groups"], 6)
    monkeypatch.setattr(conv_ops, "PACKED_CHUNK_BYTES", per)          # one image a chunk
    monkeypatch.setattr(conv_ops, "PACK_CHUNK_BYTES", 1)              # and pack_split's too
    chunks = conv_ops.packed_chunks(x, w, kw["stride"], kw["padding"], kw["dilation"],
                                    kw["groups"], 6)
    assert len(chunks) > 1
    chunked = conv_ops.convolve(x, w, None, terms=6, pack_x=pack_split, nchw=True, **kw)
    torch.cuda.synchronize()
    assert torch.equal(chunked.view(torch.int32), whole.view(torch.int32))
