"""FP8 attention's V^T as Argus kernels: V [B, H, S, D] e4m3 -> V^T [B, H, D, P] (P = the
padded key count: a multiple of 32 permuted, of 16 in natural order), the copy
argus.ops.attention_fp8 hands its kernel (`kernel_v`, `_kernel_transpose`).

Why: the op's torch path (`_word_transpose`: 8-byte words, then the bytes inside each word,
through a temporary) ran at 0.45-0.47 TB/s (read + write counted) on the H200; these kernels
read V once and write V^T once.

How: one CTA of D threads makes a [D, BS] tile of V^T (all D rows, BS keys) with `ag.gather`,
whose "rows" layout gives thread t the whole row d = t: it reads V[b, h, key, t] for the row's
BS keys (one byte each; a warp's 32 lanes read 32 consecutive bytes of one key's row of V, one
sector) and `ag.store` writes the row with 8-byte vector stores. The key of column c is the
index map itself, so the permutation and the padding cost no pass: permuted, column 32g + c'
holds key 32g + acc_order_col(c') (target/fragments.py, the bit permutation
16h + 4q + 2a + e -> 16h + 8a + 2q + e), the order the shuffle-free P reads (AccOrderA8); a key
>= S reads 0 (the tail of the last 32-key group and the TMA padding are zero, as the torch path
writes them).

- `vt_flat_kernel` (the op's, for a V that is bhsd or bshd of a contiguous block): V as its
  flat storage, element (b, h, key, d) at b sb + h sh + key sk + d; with sk a compile-time int
  (bhsd: D) every load is the row's base plus an immediate offset (one predicated LDG.U8).
- `vt_kernel` (any strides): the 4-d gather, a 64-bit multiply by the runtime key stride and
  four bounds per element.
- `vt_word_kernel` (the op's default since 2026-12-07, where V's flat storage and V^T can be
  viewed as int32 words: argus.ops.attention_fp8._word_operands): the same transpose on 32-bit
  words with integer shifts and masks (the DSL's bitwise ops), no f32 round trip. A thread
  reads one word (4 bytes of d) of each key of its 4-key groups, a warp a whole 128-byte row
  of V, and writes F rows of V^T (F = 4 for D 128 / 256, 2 for D 64) as runs of 8 words,
  32 bytes a row (two 16-byte stores). A key past S has index -1 (reads 0), so the keys of a
  ragged head's padding never read the next head's V. Its design, SASS and what a GPU run
  should show: docs/perf/attention.md, "V^T by 32-bit words"; not yet measured.

Measured on the H200 (2026-12-04, scripts/gpu_fp8_vt_bench.py: B 8, H 16, D 128, L2 flushed,
median of >= 100; us at S 2048 / 8192 / 16384, TB/s read + written):

    flat, 16 keys a CTA (the op's)   64 / 242 / 506 us   1.05 / 1.11 / 1.06 TB/s
    flat, 32 / 64 / 128 keys         68 / 256 / 509, 76 / 258 / 513, 97 / 332 / 640 us
    4-d, 32 keys                     90 / 339 / 676 us   0.74 / 0.79 / 0.79 TB/s
    torch word passes (the old op)  149 / 571 / 1132 us  0.45 / 0.47 / 0.47 TB/s
    a plain copy of V                20 /  68 / 129 us   3.33 / 3.98 / 4.18 TB/s

and at S 2048 / 16384 (same B, H): D 64, the op's 35 / 243 us (0.96 / 1.11 TB/s) against the
word passes' 77 / 530 (0.44 / 0.51); D 256, 126 / 1182 us (1.07 / 0.91) against 291 / 2274
(0.46 / 0.47).

The op end to end (argus.ops.attention_fp8, hd 128, B H = 16384 / S x 16, same run) went from
482 to 575 TFLOP/s at S 2048 full, 338 to 434 causal, 657 to 709 / 571 to 631 at S 8192 and
713 to 736 / 679 to 705 at S 16384 (full / causal).

Why not a copy (not profiled): each byte is a one-byte predicated load (a warp's load is one
32-byte sector), its bounds compare, a widening (F2FP + HADD2: an e4m3 tile lives in f32
registers), a share of a narrowing pack and the ragged-key select (616 SASS instructions for a
thread's 32 bytes at 32 keys, the stores' ragged fallback included). Fewer keys a CTA ran
faster (16 keys: 37 registers, more warps an SM), which points at loads in flight more than at
issue. A copy-speed transpose needs bytes moved in wide accesses without the f32 round trip (a
TMA tile in shared memory read transposed, or a transposed ag.store of a loaded tile through a
shared-memory layout conversion), which the DSL does not have today (docs/dsl.md: a transposed
ag.store is rendered for wgmma accumulators only, ag.load_shared reads 32-bit types only).

Bit-exactness: the word kernel moves bytes unchanged (integer ops only): bit-exact, 0xFF
included. In the byte kernels every finite e4m3 value, -0 included, round-trips through f32
exactly, but a NaN loses its sign in the GPU's conversions, so a 0xFF byte of V (NaN with the
sign bit) comes back as 0x7F (measured: exactly the 0xFF bytes differ; the interpreter keeps
them). Both are NaN, and
the attention output is NaN for them either way. (Keeping the sign in ag.store's narrowing alone
did not help: the widening had lost it already.)

Invariant: every element of VT[b, h, :, :P] is written exactly once (the grid's CTAs take
disjoint [D, BS] tiles: cdiv(P, BS) along x, H along y, B along z; the word kernel's disjoint
[D, 4 groups] word tiles, cdiv(P / 4, groups) along x, B H along y; the verifier proves
store.once and store.coverage), with VT[b, h, d, c] = V[b, h, key(c), d] where key(c) < S,
else 0.
"""

import functools

import argus as ag

__all__ = ["FLAT_KEYS_PER_CTA", "KEYS_PER_CTA", "WORD_GROUPS_PER_CTA", "key_of_column",
           "vt_flat_kernel", "vt_kernel", "vt_word_kernel", "word_rows_per_thread"]

# keys (columns of V^T) a CTA: multiples of 16 (acc_order_col keeps bit 4, so each 16-key half
# of a 32-key group is permuted within itself: a CTA's columns hold whole halves); the H200's
# best of those measured (module docstring; the bench's --keys sweeps the flat kernel's)
KEYS_PER_CTA = 32
FLAT_KEYS_PER_CTA = 16
# 4-key groups (words of a V^T row) a CTA of the word kernel: 8 = 32 keys, 32 bytes of each
# row a thread (one whole sector where the row is 32-byte aligned: P permuted); not measured
WORD_GROUPS_PER_CTA = 8


def key_of_column(c, permuted: bool):
    """The key (row of V) that column c of V^T holds, relative to its 32-key group's start when
    c is: acc_order_col's bit permutation written with integer tile ops (c - c % 16 keeps the
    group and half, then a = bit 1, q = bits 2-3, e = bit 0 of c move to 8a + 2q + e), or c
    itself in natural order. `c` is an integer tile (`/` truncates; c >= 0)."""
    if not permuted:
        return c
    r = c % 16
    return (c - r) + (r / 2 % 2) * 8 + (r / 4) * 2 + r % 2


def _check(who: str, head_dim: int, keys: int) -> None:
    if head_dim % 32 or not 0 < head_dim <= 256:
        raise ValueError(f"{who}: head dim {head_dim} is not a multiple of 32 in [32, 256] "
                         f"(one thread a row of V^T)")
    if keys % 16 or keys <= 0:
        raise ValueError(f"{who}: keys={keys} is not a positive multiple of 16 (a CTA must "
                         f"hold whole 16-key halves of the permutation's 32-key groups)")


@functools.lru_cache(maxsize=None)
def vt_kernel(head_dim: int, permuted: bool = True, keys: int = KEYS_PER_CTA
              ) -> ag.KernelFunction:
    """The 4-d V^T kernel (any strides, D contiguous): k(v, vt) with v [B, H, S, D] and
    vt [B, H, D, P] e4m3, `keys` columns a CTA (the module docstring)."""
    _check("vt_kernel", head_dim, keys)
    D, BS = head_dim, keys

    def attention_fp8_vt(V: ag.Tensor["B", "H", "S", D, ag.e4m3],
                         VT: ag.Tensor["B", "H", D, "P", ag.e4m3]):
        j, h, b = ag.grid(ag.cdiv(VT.shape[3], BS), V.shape[1], V.shape[0])
        s0 = j * BS
        c = ag.arange(BS)[None, :]                        # [1, BS]: this CTA's columns
        d = ag.arange(D)[:, None]                         # [D, 1]: the rows of V^T
        key = s0 + key_of_column(c, permuted)             # past S: outside V, reads 0
        ag.store(VT, (b, h, 0, s0), ag.gather(V, (b, h, key, d), other=0.0))

    return ag.kernel(attention_fp8_vt, threads=D,
                     name=f"attention_fp8_vt_d{D}{'_perm' if permuted else ''}_k{BS}")


@functools.lru_cache(maxsize=None)
def vt_flat_kernel(head_dim: int, permuted: bool = True, keys: int = FLAT_KEYS_PER_CTA,
                   key_stride: int = 0) -> ag.KernelFunction:
    """The V^T kernel reading V through its flat storage: k(v_flat, vt, S, sb, sh, sk) with
    v_flat the B H S D elements of V from its first one as one dim (V bhsd or bshd of a
    contiguous block: argus.ops.attention_fp8._flat_storage), S the key count and sb, sh, sk
    the element strides of its [B, H, S, D] view (D's stride 1); key_stride > 0 fixes sk at
    compile time (D for bhsd), so that a load's offset from its row base is an immediate."""
    _check("vt_flat_kernel", head_dim, keys)
    D, BS = head_dim, keys

    def attention_fp8_vt_flat(V: ag.Tensor["N", ag.e4m3],
                              VT: ag.Tensor["B", "H", D, "P", ag.e4m3],
                              S: ag.i32, sb: ag.i32, sh: ag.i32, sk: ag.i32):
        j, h, b = ag.grid(ag.cdiv(VT.shape[3], BS), VT.shape[1], VT.shape[0])
        s0 = j * BS
        c = ag.arange(BS)[None, :]
        d = ag.arange(D)[:, None]
        key = key_of_column(c, permuted)                  # relative to s0
        step = key_stride if key_stride else sk
        base = b * sb + h * sh + s0 * step + d            # [D, 1]: key s0's element d
        # a key past S may index the next head's V (inside the tensor: read, then dropped by
        # the where) or run past V's end (outside: the gather reads 0); the index is left
        # unmasked so that each load is the row base plus a compile-time offset
        x = ag.gather(V, (base + key * step,), other=0.0)
        ag.store(VT, (b, h, 0, s0), ag.where(s0 + key < S, x, 0.0))

    return ag.kernel(attention_fp8_vt_flat, threads=D,
                     name=f"attention_fp8_vt_flat_d{D}{'_perm' if permuted else ''}_k{BS}"
                          f"_s{key_stride}")


def word_rows_per_thread(head_dim: int) -> int:
    """Rows of V^T a thread of the word kernel makes (F): 4 (all four bytes of each word it
    reads, no load twice) where that leaves at least 32 threads (D/4 >= 32: D 128, 256), else
    D/32 (D 64: two rows, the two threads of a word each read it; a CTA is a whole warp)."""
    return max(1, min(4, head_dim // 32))


@functools.lru_cache(maxsize=None)
def vt_word_kernel(head_dim: int, permuted: bool = True, groups: int = WORD_GROUPS_PER_CTA,
                   key_stride: int = 0, rows: int = 0) -> ag.KernelFunction:
    """The V^T kernel on 32-bit words (the module docstring's "word kernel"):
    k(v_words, vt_words, S, H, sb, sh, sk) with v_words V's flat storage (as vt_flat_kernel's)
    viewed as int32 (B H S D/4 words) and vt_words V^T [B, H, D, P] viewed as int32
    [B H, D/F, F, P/4] (F = `rows` per thread, word_rows_per_thread by default; V^T
    contiguous), S the key count, H the heads and sb, sh, sk the word strides of V's
    [B, H, S, D/4] view; key_stride > 0 fixes sk at compile time (D/4 for bhsd).

    Thread r makes rows d = F r .. F r + F - 1 of V^T over the CTA's 4 `groups` keys: it
    reads word w = d / 4 of V (bytes d - d % 4 .. + 3) of each of those keys, four words per
    4-key group, X_j = V[key(4g + j), w] (a warp reads whole 128-byte rows of V: coalesced),
    and writes, for each of its rows d and group g, the word
    OR_j ((X_j >> 8 (d % 4)) & 255) << 8 j: bytes d of keys key(4g) .. key(4g + 3), the
    column order V^T wants; `groups` consecutive words of a row a thread (8: a 32-byte run).
    Integer shifts and masks only: every byte moves unchanged (0xFF too, unlike the f32
    round trip of the byte kernels). A key past S reads 0: its index is -1, outside V (the
    gather's `other`), so that a key past a head's end never reads the next head's V."""
    if head_dim % 32 or not 0 < head_dim <= 256:
        raise ValueError(f"vt_word_kernel: head dim {head_dim} is not a multiple of 32 in "
                         f"[32, 256] (whole 128-byte rows of V a warp)")
    if groups % 4 or groups <= 0:
        raise ValueError(f"vt_word_kernel: groups={groups} is not a positive multiple of 4 "
                         f"(a CTA must hold whole 16-key halves of the permutation's 32-key "
                         f"groups)")
    D, G, F = head_dim, groups, rows or word_rows_per_thread(head_dim)
    R = D // F
    if F not in (1, 2, 4) or R % 32:
        raise ValueError(f"vt_word_kernel: rows={F} a thread gives {R} threads for head dim "
                         f"{D}; need F in (1, 2, 4) and a multiple of 32 threads")

    def attention_fp8_vt_words(V: ag.Tensor["N", ag.i32],
                               VT: ag.Tensor["BH", R, F, "P4", ag.i32],
                               S: ag.i32, H: ag.i32, sb: ag.i32, sh: ag.i32, sk: ag.i32):
        j, bh = ag.grid(ag.cdiv(VT.shape[3], G), VT.shape[0])
        b, h = bh / H, bh % H
        s0 = j * (4 * G)
        r = ag.arange(R)[:, None, None]                   # [R, 1, 1]: a thread's rows
        g = ag.arange(G)[None, None, :]                   # [1, 1, G]: its 4-key groups
        byte = ag.arange(F)[None, :, None] + (r * F % 4 if F < 4 else 0)   # [R, F, 1]: d % 4
        step = key_stride if key_stride else sk
        base = b * sb + h * sh + s0 * step + r * F / 4     # [R, 1, 1]: key s0's word w
        out = None
        for k in range(4):
            key = key_of_column(4 * g + k, permuted)      # relative to s0
            x = ag.gather(V, (ag.where(s0 + key < S, base + key * step, -1),), other=0)
            part = ((x >> 8 * byte) & 255) << 8 * k        # byte d of key(4g + k), at byte k
            out = part if out is None else out | part
        ag.store(VT, (bh, 0, 0, j * G), out)

    return ag.kernel(attention_fp8_vt_words, threads=R,
                     name=f"attention_fp8_vt_words_d{D}{'_perm' if permuted else ''}_g{G}"
                          f"_r{F}_s{key_stride}")
