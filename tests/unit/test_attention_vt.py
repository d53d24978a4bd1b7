"""FP8 attention's V^T kernels (argus/kernels/attention_vt.py) without a GPU: in the numpy
interpreter, byte for byte against the torch word passes the op used before them
(`_word_transpose`; tests/unit/test_attention_fp8_permuted.py checks those against a plain loop)
on small and ragged key counts, both layouts, every head dim, natural and permuted order, every
byte value (the interpreter keeps NaN bytes and -0); the flat view the op picks; the verifier
clean and NVRTC builds for sm_90a; and the permutation formula of the index map equal to
acc_order_col. The GPU tier (tests/gpu/test_attention_vt_gpu.py) compares the device's bytes."""

import importlib

import numpy as np
import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.attention_vt import key_of_column, vt_flat_kernel, vt_kernel
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
