"""TMA swizzle placement, its inverse, box legality, and the TMA-write -> wgmma/ldmatrix-read
agreement (INVARIANTS.md §2.2-2.3, prototype checks 1 and 2)."""

from __future__ import annotations

import numpy as np
import pytest
import z3

from argus.layout import z3enc
from argus.target import sm90


def grid(*sizes: int) -> list[np.ndarray]:
    return [g.ravel() for g in np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij")]


def test_enums_spans_periods():
    assert [int(sm90.tma_swizzle_enum(b)) for b in (0, 32, 64, 128)] == [0, 1, 2, 3]
    assert sm90.TmaSwizzle.B128 == 3 and sm90.tma_swizzle_bytes(3) == 128
    assert [sm90.swizzle_span(b) for b in (32, 64, 128)] == [32, 64, 128]
    assert [sm90.swizzle_period(b) for b in (0, 32, 64, 128)] == [1, 256, 512, 1024]
    assert sm90.smem_swizzle(128).params == (3, 4, 3)
    with pytest.raises(ValueError):
        sm90.tma_swizzle_enum(16)
    with pytest.raises(ValueError):
        sm90.tma_swizzle_bytes(4)


@pytest.mark.parametrize(("sw", "inner"), [(0, 48), (0, 128), (32, 32), (64, 64), (128, 128),
                                           (64, 32), (128, 64)])
def test_box_coord_inverts_placement(sw, inner):
    rows = 64
    base = 0x6000
    r, cb = grid(rows, inner)
    addr = sm90.tma_smem_offset(r, cb, sw, inner, base=base)
    assert len(np.unique(addr)) == addr.size
    assert addr.min() >= base and addr.max() < base + rows * inner
    r2, c2, inside = sm90.tma_box_coord(addr, base, sw, inner, rows)
    assert inside.all() and (r2 == r).all() and (c2 == cb).all()
    _, _, outside = sm90.tma_box_coord(np.array([base - 16, base + rows * inner]), base, sw,
                                       inner, rows)
    assert not outside.any()


def test_128b_placement_is_chunk_xor_row():
    for r in range(16):
        for chunk in range(8):
            addr = sm90.tma_smem_offset(r, chunk * 16 + 3, 128, 128, base=0x400 * 8)
            assert addr == 0x2000 + r * 128 + ((chunk ^ (r % 8)) * 16) + 3


def test_box_rules():
    assert sm90.tma_box_problems([64, 64], 2, 128, smem_addr=0x2000, global_addr=0x1000,
                                 global_strides_bytes=[8192], tensor_map_addr=0x40) == []
    problems = sm90.tma_box_problems([128, 300], 2, 128, smem_addr=0x2200, global_addr=0x1008,
                                     global_strides_bytes=[8200], tensor_map_addr=0x20)
    text = " | ".join(problems)
    assert len(problems) == 6
    for needle in ("box dim 1 = 300", "exceeds the 128B swizzle span", "not 1024-B aligned",
                   "global address", "global stride of dim 1", "tensor map"):
        assert needle in text
    assert "multiple of 16" in " ".join(sm90.tma_box_problems([12], 1, 0))
    assert sm90.tma_box_problems([8, 8, 8, 8, 8, 8], 2, 0)[0].startswith("box rank 6")
    assert sm90.tma_box_problems([64], 2, 0, smem_addr=0x80) == []       # 128 B is enough
    with pytest.raises(ValueError, match="illegal TMA box"):
        sm90.check_tma_box([128, 64], 2, 128)


def wgmma_reads(base, m, kb, kk, n_rows, *, desc_sw=128, tma_sw=128):
    """(row, k) of the bf16 A tile that wgmma reads for (m, kb, kk) out of a 64-wide TMA tile."""
    addr = sm90.wgmma_smem_addr(m, kk, start=base + 32 * kb, lbo=16, sbo=8 * max(desc_sw, 16),
                                swizzle_bytes=desc_sw, elem_bytes=2)
    row, col_bytes, inside = sm90.tma_box_coord(addr, base, tma_sw, 128, n_rows)
    return row, col_bytes // 2, inside


@pytest.mark.parametrize("base", [0x0, 0x2000, 0x1C400 & ~1023])
def test_tma_write_then_wgmma_read_agree_128b(base):
    # bf16 tile 64 x BK=64 (128-byte rows): every (m, kb, kk) reads A[m, 16*kb + kk]
    m, kb, kk = grid(64, 4, 16)
    row, k, inside = wgmma_reads(base, m, kb, kk, 64)
    assert inside.all() and (row == m).all() and (k == 16 * kb + kk).all()


@pytest.mark.parametrize(("sw", "bk"), [(32, 16), (64, 32), (128, 64)])
def test_tma_write_then_wgmma_read_agree_each_swizzle(sw, bk):
    # the TMA box inner dim = one swizzle row (bk bf16); k-blocks advance 32 B inside the row
    base = 0x4000
    m, kb, kk = grid(64, bk // 16, 16)
    addr = sm90.wgmma_smem_addr(m, kk, start=base + 32 * kb, lbo=16, sbo=8 * sw,
                                swizzle_bytes=sw, elem_bytes=2)
    row, col_bytes, inside = sm90.tma_box_coord(addr, base, sw, sw, 64)
    assert inside.all() and (row == m).all() and (col_bytes // 2 == 16 * kb + kk).all()


def test_mn_major_b_tile_agrees_with_tma():
    # B stored K x N with N contiguous (x @ W, W row-major): two 64-wide N boxes of 64 k-rows,
    # the second box LBO = 64 rows * 128 B after the first; wgmma reads it MN-major
    base = 0x8000
    n, k = grid(128, 16)
    kb = 1
    addr = sm90.wgmma_smem_addr(n, k, start=base + kb * 16 * 128, lbo=64 * 128, sbo=1024,
                                swizzle_bytes=128, elem_bytes=2, major="MN")
    box = n // 64
    row, col_bytes, inside = sm90.tma_box_coord(addr, base + box * 64 * 128, 128, 128, 64)
    assert inside.all() and (row == 16 * kb + k).all() and (col_bytes // 2 == n % 64).all()


def test_descriptor_and_tensor_map_swizzle_mismatch_is_visible():
    m, kb, kk = grid(64, 4, 16)
    for desc_sw, tma_sw in ((64, 128), (128, 64), (0, 128)):
        row, k, inside = wgmma_reads(0x2000, m, kb, kk, 64, desc_sw=desc_sw, tma_sw=tma_sw)
        assert not (inside & (row == m) & (k == 16 * kb + kk)).all()


def relative_swizzle_consumer(base, row, k):
    """The classic bug: a consumer (hand-written ldmatrix addressing) that swizzles the
    buffer-RELATIVE offset while TMA swizzled the ABSOLUTE address."""
    return base + sm90.smem_swizzle(128)(row * 128 + 2 * k)


def test_relative_swizzle_consumer_is_right_only_on_aligned_bases():
    row, k = grid(64, 64)
    for base, expect_ok in ((0x2000, True), (0x2200, False), (0x2080, False)):
        addr = relative_swizzle_consumer(base, row, k)
        r2, cb, inside = sm90.tma_box_coord(addr, base, 128, 128, 64)
        ok = inside & (r2 == row) & (cb // 2 == k)
        assert ok.all() == expect_ok
        if not expect_ok:
            bad = np.nonzero(~ok)[0][0]
            assert (int(r2[bad]), int(cb[bad]) // 2) != (int(row[bad]), int(k[bad]))


def test_z3_proves_agreement_and_finds_the_misaligned_base():
    w = 20
    base, m, kb, kk, stage = (z3enc.bitvec(n, w) for n in ("base", "m", "kb", "kk", "stage"))
    dom = [z3.ULT(base, 1 << 16), z3.ULT(m, 64), z3.ULT(kb, 4), z3.ULT(kk, 16),
           z3.ULT(stage, 4), base & 127 == 0]
    buf = base + stage * (64 * 128)
    # wgmma through the descriptor: proved for every stage when the base is 1024-aligned
    addr = sm90.wgmma_smem_addr(m, kk, start=buf + 32 * kb, lbo=16, sbo=1024,
                                swizzle_bytes=128, elem_bytes=2)
    row, cb, inside = sm90.tma_box_coord(addr, buf, 128, 128, 64)
    claim = z3.And(inside, row == m, z3.LShR(cb, 1) == kb * 16 + kk)
    assert z3enc.find_counterexample(claim, dom + [base & 1023 == 0]) is None
    # relative-swizzle consumer: refuted without the alignment, proved with it
    k = kb * 16 + kk
    addr = relative_swizzle_consumer(buf, m, k)
    row, cb, inside = sm90.tma_box_coord(addr, buf, 128, 128, 64)
    claim = z3.And(inside, row == m, z3.LShR(cb, 1) == k)
    cex = z3enc.find_counterexample(claim, dom, variables=[base, stage, m, kb, kk])
    assert cex is not None and cex["base"] % 1024 != 0
    assert z3enc.find_counterexample(claim, dom + [base & 1023 == 0]) is None
