"""argus.ops.attention_fp8's V transpose (transposed_v, _word_transpose): the two-pass copy
(8-byte words, else 4-byte, then the bytes inside each word) must give exactly torch's
transpose, byte for byte, for every byte value (NaN payloads and -0 included), ragged key
counts, both layouts, GQA-sized head counts and every head dim, into rows padded to a
multiple of 16 keys (the kernel's TMA map). CPU tensors: the same torch copies run on the
GPU (tests/gpu/test_attention_fp8_gpu.py checks them there)."""

import pytest

torch = pytest.importorskip("torch")

import importlib  # noqa: E402

# the module itself: the attribute argus.ops.attention_fp8 is the op function
mod = importlib.import_module("argus.ops.attention_fp8")

E4M3 = torch.float8_e4m3fn


def _v(B, HKV, SK, D, layout, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (B, HKV, SK, D) if layout == "bhsd" else (B, SK, HKV, D)
    # every byte value appears: 0x7f / 0xff (NaN) and 0x80 (-0) are bit patterns a float
    # conversion would change
    return torch.randint(0, 256, shape, generator=g, dtype=torch.uint8).view(E4M3)


def _reference(v, layout):
    vb = v if layout == "bhsd" else v.transpose(1, 2)
    return vb.transpose(-1, -2).contiguous().view(torch.uint8)


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("SK", [1, 3, 16, 17, 63, 130])
def test_word_transpose_is_bit_exact(layout, D, SK):
    v = _v(2, 3, SK, D, layout, seed=SK * D)
    calls = []
    real = mod._word_transpose
    try:  # the op must take the two-pass path, not the byte copy fallback
        mod._word_transpose = lambda *a: calls.append(real(*a)) or calls[-1]
        vt = mod.transposed_v(v, layout, False)
    finally:
        mod._word_transpose = real
    assert calls == [True], f"transposed_v did not take the word path: {calls}"
    assert vt.shape == (2, 3, D, SK) and vt.dtype == E4M3
    # rows padded to a multiple of 16 keys, unit stride on the keys (the TMA map's pitch)
    assert vt.stride() == (3 * D * max(16, -(-SK // 16) * 16), D * max(16, -(-SK // 16) * 16),
                           max(16, -(-SK // 16) * 16), 1)
    assert torch.equal(vt.view(torch.uint8), _reference(v, layout))


def test_the_word_pass_keeps_every_byte_in_place():
    """Each byte of V names its source ((s * D + d) % 251): a byte moved to the wrong place
    inside its word, or a word to the wrong key, reads back as the wrong name."""
    SK, D = 37, 64
    codes = (torch.arange(SK * D) % 251).to(torch.uint8).view(1, 1, SK, D)
    vt = mod.transposed_v(codes.view(E4M3), "bhsd", False).view(torch.uint8)
    for d in (0, 1, 2, 3, 5, 63):
        for s in (0, 1, 36):
            assert vt[0, 0, d, s].item() == (s * D + d) % 251, (d, s)


def test_unviewable_v_falls_back_to_the_byte_copy():
    """A V whose storage offset is not a multiple of 4 bytes cannot be viewed as words:
    _word_transpose declines (writes nothing) and transposed_v copies bytes, still exact."""
    base = _v(1, 2, 21, 64 * 2 + 1, "bhsd", seed=1)
    v = base[..., 1:65]                         # storage offset 1: not word-aligned
    store = torch.zeros((1, 2, 64, 32), dtype=E4M3)
    assert mod._word_transpose(v, store) is False
    assert not store.view(torch.uint8).any(), "a declined word pass must write nothing"
    vt = mod.transposed_v(v, "bhsd", False)
    assert torch.equal(vt.view(torch.uint8), _reference(v, "bhsd"))


def test_a_v_viewable_only_as_4_byte_words_takes_them():
    """Rows 4 bytes past a multiple of 8 (pitch 68, offset 4): no 8-byte view, so the 4-byte
    pass runs (the head dims above all take the 8-byte one) and is exact; with 8-byte words
    alone it declines."""
    base = _v(1, 2, 21, 64 + 4, "bhsd", seed=2)
    v = base[..., 4:68]                         # storage offset 4, row pitch 68 bytes
    store = torch.zeros((1, 2, 64, 32), dtype=E4M3)
    words = mod._WORDS
    try:
        mod._WORDS = (8,)
        assert mod._word_transpose(v, store) is False
    finally:
        mod._WORDS = words
    assert mod._word_transpose(v, store) is True
    assert torch.equal(store[..., :21].view(torch.uint8), _reference(v, "bhsd"))


@pytest.mark.parametrize("SK", [32, 21])
def test_v_given_transposed(SK):
    """v [B, Hkv, D, Skv]: read in place when TMA can address it (SK % 16 == 0), else copied
    into padded rows; either way the same bytes."""
    v = _v(2, 2, 64, SK, "bhsd", seed=SK)       # [B, Hkv, D, SK]
    vt = mod.transposed_v(v, "bhsd", True)
    assert (vt.data_ptr() == v.data_ptr()) == (SK % 16 == 0)
    assert torch.equal(vt.view(torch.uint8), v.view(torch.uint8))
