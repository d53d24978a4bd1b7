"""tile_order "snake": the persistent walk in "head" order with every second round handed to
the CTAs in reverse (AttentionSchedule docstring), the causal short-prefill candidate. Here:
the schedule's rules and the bench token, the decode is a permutation of the units whose
causal per-CTA load is even (the balance the option is for, on the bench's shapes), each
variant builds for sm_90a without spills and verifies with zero findings, and a decode that
is no permutation is caught (store.once / store.coverage). The interpreter runs it against
float64 in tests/interp/test_attention_snake_interp.py."""

from __future__ import annotations

import dataclasses
import inspect

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from argus.kernels import attention
from argus.kernels.attention import (SNAKE_CAUSAL, AttentionSchedule, attention_kernel,
                                     default_schedule)
from tests.mutations.corpus import rewrite
from tests.unit.attention_candidates import (BENCH, assert_builds_without_spills,
                                             verified_without_errors)

CANDIDATES = [("default+snake+earlyq", 128), ("default+snake", 128),
              ("default+snake+earlyq", 256), ("default+snake", 64)]
IDS = [f"{v}-d{d}" for v, d in CANDIDATES]


def _schedule(variant: str, head_dim: int, causal: bool) -> AttentionSchedule:
    return BENCH.variant_schedule(variant, head_dim, causal, 1024)


def test_snake_needs_the_persistent_walk():
    with pytest.raises(ValueError, match="needs persistent=True"):
        AttentionSchedule(tile_order="snake")
    with pytest.raises(ValueError, match="'head', 'lpt' or 'snake'"):
        AttentionSchedule(tile_order="zigzag")
    assert AttentionSchedule(tile_order="snake", persistent=True).problems_for(128) == []


def test_the_token_sets_only_the_order_and_the_walk():
    for d in (64, 128, 256):
        for causal in (False, True):
            base = default_schedule(d, causal, 1024)
            assert _schedule("default+snake", d, causal) == \
                dataclasses.replace(base, tile_order="snake", persistent=True)
    assert _schedule("default+snake+earlyq", 128, True) == dataclasses.replace(
        default_schedule(128, True, 1024), tile_order="snake", persistent=True,
        early_q_release=True)
    # the default takes the snake exactly where it was measured ahead (SNAKE_CAUSAL: causal,
    # head dim 128 up to 8k, 256 up to 4k): never full masks, head dim 64, longer or unknown
    for d in (64, 128, 256):
        for c in (False, True):
            for n in (None, 512, 1024, 2048, 4096, 8192, 16384):
                pick = default_schedule(d, c, n)
                want = c and n is not None and n <= SNAKE_CAUSAL.get(d, 0)
                assert (pick.tile_order == "snake") == want, (d, c, n, pick)
                assert pick.persistent or not want
    assert SNAKE_CAUSAL == {128: 8192, 256: 4096}


def _snake(unit: int, programs: int, total: int) -> int:
    """The kernel's decode (tile_of), in Python."""
    r = unit // programs
    lane = unit - r * programs
    rem = min(programs, total - r * programs)
    return unit + (r % 2) * (rem - 1 - 2 * lane)


def _loads(S, B, H, bm, bn, programs, snake):
    """KV blocks each CTA of the causal walk computes, "head" order (m longest first)."""
    m_tiles = -(-S // bm)
    blocks = [-(-((m_tiles - 1 - u % m_tiles + 1) * bm) // bn)
              for u in range(B * H * m_tiles)]
    total, load = len(blocks), [0] * programs
    for pid in range(programs):
        for unit in range(pid, total, programs):
            load[pid] += blocks[_snake(unit, programs, total) if snake else unit]
    return load


@pytest.mark.parametrize("programs,total", [(3, 12), (3, 8), (132, 2048), (132, 1024),
                                            (264, 2048), (5, 5), (7, 3)])
def test_the_decode_is_a_permutation(programs, total):
    units = [_snake(u, programs, total) for p in range(min(programs, total))
             for u in range(p, total, programs)]
    assert sorted(units) == list(range(total))


@pytest.mark.parametrize("S,B,H,bm,bn,programs", [(1024, 16, 16, 128, 128, 132),
                                                  (2048, 8, 16, 128, 128, 132),
                                                  (1024, 16, 16, 128, 64, 132),
                                                  (2048, 8, 16, 128, 64, 132),
                                                  (1024, 16, 16, 128, 64, 264),
                                                  (2048, 8, 16, 128, 64, 264)])
def test_the_snake_evens_out_causal_tiles(S, B, H, bm, bn, programs):
    """The bench's causal shapes (16k tokens, 16 heads): the round robin gives its busiest CTA
    1.21x (2k) to 1.83x (1k, two CTAs an SM) the mean's KV blocks (at 1k on 132 CTAs, CTA 0
    takes tiles of 8 and 4 blocks in turn, CTA 3 of 5 and 1), the snake 1.03x."""
    plain = _loads(S, B, H, bm, bn, programs, False)
    snake = _loads(S, B, H, bm, bn, programs, True)
    mean = sum(plain) / programs
    assert sum(snake) == sum(plain)
    assert max(plain) / mean > 1.2
    assert max(snake) / mean < 1.04, (max(snake) / mean, S, bn, programs)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("variant,head_dim", CANDIDATES, ids=IDS)
def test_snake_builds_without_spills(variant, head_dim, causal):
    assert_builds_without_spills(_schedule(variant, head_dim, causal), head_dim, causal)


VERIFIED = [(v, d, c) for v, d in CANDIDATES for c in (False, True)]


@pytest.mark.parametrize("variant,head_dim,causal", VERIFIED,
                         ids=[f"{v}-d{d}-{'causal' if c else 'full'}" for v, d, c in VERIFIED])
def test_snake_verifies_clean(variant, head_dim, causal):
    report = verified_without_errors(_schedule(variant, head_dim, causal), head_dim, causal)
    assert not report.unknowns, "\n".join(str(d) for d in report.unknowns)
    assert len(report.proven) >= 100


def test_a_decode_that_is_no_permutation_is_caught():
    """The round's parity r % 2 taken as r // 2: rounds 2 and 3 reversed, rounds 4 and 5
    moved by twice the reversal: units stored twice and tiles never stored."""
    kernel = lower_only(attention_kernel(128, ag.bf16, True, False),
                        s=_schedule("default+snake+earlyq", 128, True))
    src, first = inspect.getsourcelines(attention.attention_kernel)
    line = first + next(i for i, t in enumerate(src) if "unit = unit + (r % 2)" in t)
    ops = [op for op in kernel.walk() if isinstance(op, O.Arith)]
    hits = [i for i, op in enumerate(ops) if op.loc.line == line and op.fn == "mod"]
    assert hits, "the snake's parity was not found in the lowered kernel"
    for i in hits:   # the producer's decode and the consumers'
        kernel = rewrite(kernel, O.Arith, lambda op: dataclasses.replace(op, fn="floordiv"),
                         nth=i)
    errors = [d for d in verify.check(kernel) if d.severity == "error"]
    assert {d.code for d in errors} & {"store.once", "store.coverage"}, \
        [(d.code, str(d)[:160]) for d in errors]
