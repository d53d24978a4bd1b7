"""GPU tier for FP8 attention's V^T kernels (argus/kernels/attention_vt.py), the copy
argus.ops.attention_fp8 makes of V on every call: their bytes against the torch word passes'
(`_word_transpose`, the op's path before the kernels; tests/unit/test_attention_fp8_permuted.py
checks those against a plain loop) on every e4m3 byte value, ragged and 32-multiple key counts,
every head dim, both layouts (bshd's V is a strided view: the flat kernel with a runtime key
stride), a V no flat view covers (the 4-d kernel), natural and permuted order. Bit for bit,
except that a 0xFF byte (NaN with the sign bit) may come back as 0x7F (the GPU's conversions
drop a NaN's sign; measured on the H200 2026-12-04): the test says how many bytes differ and
fails on any other difference. The word kernel (vt_word_kernel, the op's default where V can
be viewed as int32 words) exactly, 0xFF included, with the byte kernels as its fallback. And
the op's output is the same with either V^T."""

import importlib

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

E4M3 = torch.float8_e4m3fn
op = importlib.import_module("argus.ops.attention_fp8")


def _bytes_v(shape, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    x.view(-1)[:4] = torch.tensor([0x7F, 0xFF, 0x80, 0x00], dtype=torch.uint8)   # NaN, -0
    return x.cuda().view(E4M3)


def _old(keys_major, store, permuted):
    assert op._word_transpose(keys_major, store, permuted=permuted)
    return store.view(torch.uint8)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("SK", [1, 31, 32, 33, 100, 1000, 2048])
@pytest.mark.parametrize("permuted", [True, False])
def test_kernel_vt_equals_the_torch_path_bit_for_bit(layout, D, SK, permuted):
    shape = (2, 3, SK, D) if layout == "bhsd" else (2, SK, 3, D)
    v = _bytes_v(shape, SK * D + permuted)
    keys_major = op._bhsd(v, layout)
    B, H = keys_major.shape[:2]
    pad = -(-SK // 32) * 32 if permuted else max(16, -(-SK // 16) * 16)
    new = torch.full((B, H, D, pad), 0xAA, dtype=torch.uint8, device="cuda").view(E4M3)
    old = torch.full_like(new.view(torch.uint8), 0x55).view(E4M3)
    assert op._kernel_transpose(keys_major, new, permuted=permuted)
    _same_bytes(new, _old(keys_major, old, permuted), SK, permuted)


def _same_bytes(new, want, SK, permuted):
    got = new.view(torch.uint8)
    if not permuted:   # the torch path leaves the TMA padding past SK unwritten
        got, want = got[..., :SK], want[..., :SK]
    diff = got != want
    nan_sign = diff & (want == 0xFF) & (got == 0x7F)
    bad = (diff & ~nan_sign).nonzero()
    assert bad.numel() == 0, (
        f"V^T kernel differs from the torch path at {bad.shape[0]} bytes (beside "
        f"{int(nan_sign.sum())} NaN signs), first at {bad[0].tolist()}: "
        f"{int(got[tuple(bad[0])]):#04x} vs {int(want[tuple(bad[0])]):#04x}")


@pytest.mark.parametrize("SK", [33, 300])
def test_the_4d_kernel_takes_a_v_no_flat_view_covers(SK):
    base = _bytes_v((2, 3, SK, 256), SK)
    v = base[..., 64:192]                       # rows of 256 bytes, 128 used: not contiguous
    assert op._flat_storage(v) is None
    new = torch.full((2, 3, 128, -(-SK // 32) * 32), 0xAA, dtype=torch.uint8,
                     device="cuda").view(E4M3)
    old = torch.zeros_like(new.view(torch.uint8)).view(E4M3)
    assert op._kernel_transpose(v, new, permuted=True)
    _same_bytes(new, _old(v, old, True), SK, True)


def test_op_output_is_the_same_with_either_vt():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = ((torch.randn(2, 4, 300, 128, device="cuda", generator=g) / 4).to(E4M3)
               for _ in range(3))
    outs = []
    for on in (False, True):
        op.VT_KERNEL = on
        try:
            outs.append(op.attention_fp8(q, k, v, q_scale=1.0, k_scale=1.0, v_scale=1.0,
                                         causal=True))
        finally:
            op.VT_KERNEL = True
    assert torch.equal(outs[0], outs[1])


def _words_compiled(D: int, permuted: bool) -> bool:
    """Whether the op has built the word kernel for D (BuildMemo iterates over
    (build choices, key) pairs; the key: ("words", D, permuted, device, key stride))."""
    return any(key[:3] == ("words", D, permuted) for _, key in op._VT_COMPILED)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("SK", [1, 31, 33, 100, 2048])
@pytest.mark.parametrize("permuted", [True, False])
def test_word_kernel_vt_is_bit_exact(layout, D, SK, permuted, monkeypatch):
    monkeypatch.setattr(op, "VT_WORDS", True)   # (the default since 2026-12-07; kept explicit)
    # the op's default V^T (vt_word_kernel: 32-bit words, integer shifts) equals torch's
    # transpose byte for byte, 0xFF included (no NaN-sign allowance), keys past S zero
    shape = (2, 3, SK, D) if layout == "bhsd" else (2, SK, 3, D)
    v = _bytes_v(shape, SK * D + permuted + 11)
    keys_major = op._bhsd(v, layout)
    B, H = keys_major.shape[:2]
    pad = -(-SK // 32) * 32 if permuted else max(16, -(-SK // 16) * 16)
    new = torch.full((B, H, D, pad), 0xAA, dtype=torch.uint8, device="cuda").view(E4M3)
    want = _old(keys_major, torch.full_like(new.view(torch.uint8), 0x55).view(E4M3), permuted)
    assert op._word_operands(op._flat_storage(keys_major), new) is not None
    assert op._kernel_transpose(keys_major, new, permuted=permuted)
    torch.cuda.synchronize()
    assert _words_compiled(D, permuted)
    got = new.view(torch.uint8)
    if not permuted:
        got, want = got[..., :SK], want[..., :SK]
        assert torch.equal(got, keys_major.view(torch.uint8).transpose(-1, -2))
    bad = (got != want).nonzero()
    assert bad.numel() == 0, f"{bad.shape[0]} bytes differ, first at {bad[0].tolist()}"
    assert (keys_major.view(torch.uint8) == 0xFF).any()


def test_byte_kernels_stay_the_fallback():
    # V whose storage starts 1 byte off a word: no int32 view, the flat byte kernel runs
    base = _bytes_v((2 * 3 * 40 * 128 + 1,), 5)
    v = base[1:].view(2, 3, 40, 128)
    assert op._word_operands(op._flat_storage(v), torch.empty(
        (2, 3, 128, 64), dtype=E4M3, device="cuda")) is None
    new = torch.full((2, 3, 128, 64), 0xAA, dtype=torch.uint8, device="cuda").view(E4M3)
    assert op._kernel_transpose(v, new, permuted=True)
    # the reference from a copy at a word-aligned address (the torch word passes cannot view
    # v as words; v.contiguous() would be v itself, already contiguous at its odd offset)
    _same_bytes(new, _old(v.clone(), torch.zeros_like(new), True), 40, True)
    # and VT_WORDS off takes the byte kernels for a V the word kernel could take
    saved, op.VT_WORDS = op.VT_WORDS, False
    try:
        x = _bytes_v((2, 3, 40, 128), 6)
        new = torch.full((2, 3, 128, 64), 0xAA, dtype=torch.uint8, device="cuda").view(E4M3)
        assert op._kernel_transpose(x, new, permuted=True)
        _same_bytes(new, _old(x, torch.zeros_like(new), True), 40, True)
    finally:
        op.VT_WORDS = saved
