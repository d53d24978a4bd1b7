"""FP8 attention's V^T kernels (argus/kernels/attention_vt.py) without a GPU: in the numpy
interpreter, byte for byte against the torch word passes the op used before them
(`_word_transpose`; tests/unit/test_attention_fp8_permuted.py checks those against a plain loop)
on small and ragged key counts, both layouts, every head dim, natural and permuted order, every
byte value (the interpreter keeps NaN bytes and -0); the flat view the op picks; the verifier
clean and NVRTC builds for sm_90a; and the permutation formula of the index map equal to
acc_order_col. The word kernel (vt_word_kernel, 32-bit words, the op's default) likewise, every
rows-per-thread split, with the op's word views (`_word_operands`). The GPU tier
(tests/gpu/test_attention_vt_gpu.py) compares the device's bytes."""

import importlib

import numpy as np
import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention_vt import (key_of_column, vt_flat_kernel, vt_kernel,
                                      vt_word_kernel, word_rows_per_thread)
from argus.runtime import nvrtc_available
from argus.target import fragments as F

torch = pytest.importorskip("torch")
op = importlib.import_module("argus.ops.attention_fp8")
E4M3 = torch.float8_e4m3fn
needs_nvrtc = pytest.mark.skipif(not nvrtc_available(), reason="NVRTC not installed")


def _v(layout, D, SK, seed):
    g = torch.Generator().manual_seed(seed)
    shape = (2, 3, SK, D) if layout == "bhsd" else (2, SK, 3, D)
    x = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    x.view(-1)[:4] = torch.tensor([0x7F, 0xFF, 0x80, 0x00], dtype=torch.uint8)   # NaN, -0
    return x.view(E4M3)


def _stores(keys_major, permuted):
    B, H, SK, D = keys_major.shape
    pad = -(-SK // 32) * 32 if permuted else max(16, -(-SK // 16) * 16)
    new = torch.full((B, H, D, pad), 0xAA, dtype=torch.uint8).view(E4M3)  # never written by
    ref = torch.full((B, H, D, pad), 0x55, dtype=torch.uint8).view(E4M3)  # both paths alike
    assert op._word_transpose(keys_major, ref, permuted=permuted)
    return new, ref


def _assert_same(new, ref, SK, permuted):
    got, want = new.view(torch.uint8), ref.view(torch.uint8)
    if not permuted:  # the torch path leaves the TMA padding past SK unwritten
        got, want = got[..., :SK], want[..., :SK]
    bad = (got != want).nonzero()
    assert bad.numel() == 0, (f"{bad.shape[0]} bytes differ from the torch path, first at "
                              f"{bad[0].tolist()}")


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("SK", [1, 31, 33, 100])
@pytest.mark.parametrize("permuted", [True, False])
def test_flat_kernel_writes_the_torch_paths_bytes(layout, D, SK, permuted):
    v = _v(layout, D, SK, SK * D + permuted)
    x = op._bhsd(v, layout)
    flat = op._flat_storage(x)
    assert flat is not None and flat.numel() == x.numel()
    sb, sh, sk, _ = x.stride()
    new, ref = _stores(x, permuted)
    vt_flat_kernel(D, permuted, key_stride=D if sk == D else 0).interpret(
        flat, new, SK, sb, sh, sk)
    _assert_same(new, ref, SK, permuted)


@pytest.mark.parametrize("D", [64, 256])
@pytest.mark.parametrize("SK", [17, 64])
def test_4d_kernel_writes_the_torch_paths_bytes(D, SK):
    base = _v("bhsd", 2 * D, SK, SK + D)
    x = base[..., D // 2:D // 2 + D]          # a row of 2D bytes, D used: no flat view
    assert op._flat_storage(x) is None
    for permuted in (True, False):
        new, ref = _stores(x, permuted)
        vt_kernel(D, permuted).interpret(x, new)
        _assert_same(new, ref, SK, permuted)


def test_a_wrong_permutation_is_caught():
    # the comparison must be able to fail: the natural order against the permuted torch path
    x = op._bhsd(_v("bhsd", 64, 40, 1), "bhsd")
    new, ref = _stores(x, True)
    vt_flat_kernel(64, False, key_stride=64).interpret(op._flat_storage(x), new, 40,
                                                       *x.stride()[:3])
    with pytest.raises(AssertionError, match="bytes differ"):
        _assert_same(new, ref, 40, True)


def test_the_index_map_is_acc_order_col():
    c = np.arange(256)
    # the kernel's formula on numpy ints (its `/` is the tiles' truncating division)
    r = c % 16
    key = (c - r) + (r // 2 % 2) * 8 + (r // 4) * 2 + r % 2
    assert (key == F.acc_order_col(c)).all()
    assert key_of_column(c, False) is c


def test_flat_storage_takes_contiguous_bhsd_and_bshd_only():
    v = torch.zeros(2, 5, 3, 64, dtype=torch.uint8).view(E4M3)             # bshd
    assert op._flat_storage(v.transpose(1, 2)) is not None
    assert op._flat_storage(v) is not None                                  # read as bhsd
    assert op._flat_storage(v[1:]) is not None                              # starts later
    assert op._flat_storage(v[:, 1:]) is None                               # batches apart
    assert op._flat_storage(v[:, :, :2]) is None                            # a head cut off
    assert op._flat_storage(v.transpose(0, 1)) is None                      # batch-major no more
    one = torch.zeros(1, 1, 7, 64, dtype=torch.uint8).view(E4M3)
    assert op._flat_storage(one.expand(1, 1, 7, 64)) is not None            # size-1 dims


def test_flat_storage_refuses_offsets_past_32_bits():
    # the flat kernel's offsets are 32-bit ints: where one could reach 2^31 (the keys padded
    # to 32 included) V goes to the 4-d kernel
    big = torch.empty(2**31 // (8 * 32 * 128), 8, 32, 128, dtype=torch.uint8, device="meta")
    assert op._flat_storage(big[:-1].view(E4M3)) is not None                # 2^31 - 32768
    assert op._flat_storage(big.view(E4M3)) is None                         # 2^31
    # one key a head, padded to 32 keys: under 2^31 elements, but the pad's offsets pass it
    one = torch.empty(2**31 // (8 * 128) - 1, 8, 1, 128, dtype=torch.uint8, device="meta")
    assert one.numel() < 2**31
    assert op._flat_storage(one.view(E4M3)) is None
    assert op._flat_storage(one[:2**16].view(E4M3)) is not None


def test_the_op_keeps_the_torch_path_on_cpu():
    # CPU tensors: no kernel launch (the interpreter tests of the op rely on it)
    x = op._bhsd(_v("bhsd", 64, 9, 0), "bhsd")
    store = torch.empty((2, 3, 64, 32), dtype=E4M3)
    assert op._kernel_transpose(x, store, permuted=True) is False


@pytest.mark.parametrize("D", [64, 128, 256])
def test_kernels_verify_clean(D):
    for k in (vt_flat_kernel(D, True, key_stride=D), vt_flat_kernel(D, False),
              vt_kernel(D, True)):
        report = verify.run(lower_only(k))
        assert not report.errors and not report.unknowns, \
            "\n".join(str(d) for d in report.errors + report.unknowns)
        assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}


@needs_nvrtc
@pytest.mark.parametrize("D", [64, 128, 256])
def test_kernels_build_for_sm90a(D):
    for k in (vt_flat_kernel(D, True, key_stride=D), vt_flat_kernel(D, True),
              vt_kernel(D, True)):
        compiled = ag.compile(k)
        assert compiled.resources.spill_stores == 0, compiled.resources.summary()


def _word_views(x, store, rows: int):
    """The word kernel's operands: the op's own views (`_word_operands`: V's flat storage as
    int32 words, V^T as [B H, D/F, F, P/4] int32) where F is the op's, else the same views at
    `rows`; plus the scalars the op passes (S, H and V's word strides)."""
    B, H, SK, D = x.shape
    sb, sh, sk, _ = x.stride()
    scalars = (SK, H, sb // 4, sh // 4, sk // 4)
    if rows == word_rows_per_thread(D):
        words, vt = op._word_operands(op._flat_storage(x), store)
        return words, vt, scalars
    words = op._flat_storage(x).view(torch.uint8).view(torch.int32)
    vt = store.view(torch.uint8).view(torch.int32).view(B * H, D // rows, rows, -1)
    return words, vt, scalars


@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
@pytest.mark.parametrize("D", [64, 128, 256])
@pytest.mark.parametrize("SK", [1, 31, 33, 100])
@pytest.mark.parametrize("permuted", [True, False])
def test_word_kernel_writes_the_torch_paths_bytes(layout, D, SK, permuted):
    v = _v(layout, D, SK, SK * D + permuted + 7)
    x = op._bhsd(v, layout)
    new, ref = _stores(x, permuted)
    rows = word_rows_per_thread(D)
    words, vt, scalars = _word_views(x, new, rows)
    sk = x.stride()[2]
    vt_word_kernel(D, permuted, key_stride=D // 4 if sk == D else 0).interpret(
        words, vt, *scalars)
    _assert_same(new, ref, SK, permuted)


@pytest.mark.parametrize("rows", [1, 2, 4])
def test_word_kernel_rows_per_thread(rows):
    # every split of a word's four rows over threads writes the same bytes (bench choices)
    x = op._bhsd(_v("bhsd", 128, 45, rows), "bhsd")
    for permuted in (True, False):
        new, ref = _stores(x, permuted)
        words, vt, scalars = _word_views(x, new, rows)
        vt_word_kernel(128, permuted, rows=rows).interpret(words, vt, *scalars)
        _assert_same(new, ref, 45, permuted)


def test_word_kernel_keeps_every_byte_and_the_next_heads_keys_out():
    # all 256 byte values at every position of a word (0xFF, NaN with the sign, included),
    # and a ragged S whose padding keys lie inside the next head's V (bhsd): they must read
    # 0, not the next head's rows
    D, SK = 64, 40
    x = (torch.arange(2 * 3 * SK * D) * 7 % 256).to(torch.uint8).view(2, 3, SK, D)
    x = x.view(E4M3)
    assert (x.view(torch.uint8) == 0xFF).any()
    new, ref = _stores(x, True)
    words, vt, scalars = _word_views(x, new, 2)
    vt_word_kernel(D, True, key_stride=D // 4).interpret(words, vt, *scalars)
    _assert_same(new, ref, SK, True)
    got = new.view(torch.uint8)
    padding = torch.from_numpy(F.acc_order_col(np.arange(got.shape[-1])) >= SK)
    assert padding.any() and (got[..., padding] == 0).all()     # keys past S: zero
    assert (got == 0xFF).sum() == (x.view(torch.uint8) == 0xFF).sum()   # no 0xFF lost


def test_word_kernel_refuses_bad_shapes():
    with pytest.raises(ValueError, match="head dim 48"):
        vt_word_kernel(48)
    with pytest.raises(ValueError, match="groups=6"):
        vt_word_kernel(128, groups=6)
    with pytest.raises(ValueError, match="rows=4 a thread gives 16 threads"):
        vt_word_kernel(64, rows=4)


@pytest.mark.parametrize("D", [64, 128, 256])
def test_word_kernel_verifies_clean(D):
    for k in (vt_word_kernel(D, True, key_stride=D // 4), vt_word_kernel(D, False)):
        report = verify.run(lower_only(k))
        # zero findings: no error, no warning, nothing unknown
        assert not report.diagnostics, "\n".join(str(d) for d in report.diagnostics)
        assert {"store.once", "store.coverage"} <= {f.code for f in report.proven}


@needs_nvrtc
@pytest.mark.parametrize("D", [64, 128, 256])
def test_word_kernel_builds_with_wide_stores_and_no_local_memory(D):
    for k in (vt_word_kernel(D, True, key_stride=D // 4), vt_word_kernel(D, False)):
        compiled = ag.compile(k)
        res = compiled.resources
        assert res.spill_stores == 0 and res.spill_loads == 0, res.summary()
        text = str(getattr(compiled.source, "text", compiled.source))
        # whole 16-byte vector stores of each row's run; no shared memory (no conversion)
        assert "int4" in text and "__syncthreads" not in text, k.name


def test_word_operands_take_word_aligned_v_and_contiguous_vt():
    v = torch.zeros(2, 3, 40, 128, dtype=torch.uint8)
    store = torch.empty(2, 3, 128, 64, dtype=torch.uint8).view(E4M3)
    words, vt = op._word_operands(op._flat_storage(v.view(E4M3)), store)
    assert words.dtype == torch.int32 and words.numel() == v.numel() // 4
    assert vt.shape == (6, 128 // word_rows_per_thread(128), word_rows_per_thread(128), 16)
    assert vt.data_ptr() == store.data_ptr()
    # bshd: the same storage, read through its strides
    assert op._word_operands(op._flat_storage(v.view(E4M3).transpose(1, 2)), store) is not None
    # a storage offset of 1 byte: no int32 view (the byte kernels run)
    odd = torch.zeros(2 * 3 * 40 * 128 + 1, dtype=torch.uint8)[1:].view(2, 3, 40, 128)
    assert op._word_operands(op._flat_storage(odd.view(E4M3)), store) is None
    # a V^T that is not contiguous
    assert op._word_operands(op._flat_storage(v.view(E4M3)),
                             store.transpose(-1, -2).contiguous().transpose(-1, -2)) is None
