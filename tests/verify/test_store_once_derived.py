"""store.once proven from store.coverage's tile decomposition (check_stores._once_implied):
when every instance variable of a store is accounted for (moves the offset inside the tile,
the tile index, or is a persistent walk's program id), the coverage proofs imply that no
element is stored twice, and the non-linear store.once query is not posed. When they do not
(a loop around the store that moves nothing), store.once is still solved and its violation
reported, although coverage holds. A loop of constant range that steps by more than 1 inside
the tile is counted with its real values (it once made coverage pass for a tile with gaps)."""

from __future__ import annotations

import pytest

import argus as ag
from argus import verify
from argus.compiler import lower_only
from argus.kernels.gemm import GemmSchedule
from argus.ops.schedules import Problem, kernel_for


@pytest.fixture(autouse=True)
def _budget(monkeypatch):
    # the answers asserted here, not the wall-clock budget of a loaded machine: a timeout
    # would be "unknown" (sound, but not what these tests look for)
    monkeypatch.setenv("ARGUS_VERIFY_TIMEOUT_MS", "20000")


def persistent_copy(body: str):
    """Y = X over 4 x `width` tiles walked persistently (u = pid, pid + programs, ...)."""
    width = 32 if body == "strided" else 64

    @ag.kernel(threads=128)
    def copy(X: ag.Tensor["M", "N", ag.f32], Y: ag.Tensor["M", "N", ag.f32]):
        n_tiles = ag.cdiv(X.shape[1], width)
        tiles = ag.cdiv(X.shape[0], 4) * n_tiles
        programs = ag.minimum(tiles, 132)
        (pid,) = ag.grid(programs)
        for u in ag.range(pid, tiles, programs):
            m, n = u // n_tiles, u % n_tiles
            if body == "repeat":       # the same tile stored twice
                for _ in ag.range(2):
                    ag.store(Y, (m * 4, n * width), ag.load(X, (m * 4, n * width), (4, width)))
            elif body == "strided":    # blocks 0 and 2 of 16 columns: a gap, and overlaps
                for j in ag.range(0, 4, 2):
                    col = n * width + j * 16
                    ag.store(Y, (m * 4, col), ag.load(X, (m * 4, col), (4, 16)))
            else:
                ag.store(Y, (m * 4, n * width), ag.load(X, (m * 4, n * width), (4, width)))
    return copy


def _findings(report, code):
    return [f for f in report.findings if f.code == code]


def test_persistent_store_once_is_derived_from_coverage():
    report = verify.run(persistent_copy("plain"))
    assert not report.errors and not report.unknowns, report.diagnostics
    (once,) = _findings(report, "store.once")
    assert once.status == "proven" and once.tier == "derived", once
    assert all(f.status == "proven" for f in _findings(report, "store.coverage"))
    # store.once, and the tile claim "no unit outside the output without spare units"
    # (implied by the tile index proven inside: check_stores._tile_obligation)
    assert report.stats.derived == 2


def test_a_loop_that_moves_nothing_is_not_derived_and_is_caught():
    report = verify.run(persistent_copy("repeat"))
    # every element is stored (coverage holds), twice: store.once is solved and violated
    assert all(f.status == "proven" for f in _findings(report, "store.coverage"))
    (once,) = _findings(report, "store.once")
    assert once.status == "violated" and once.tier != "derived", once
    assert "stored twice" in once.message


def test_a_strided_loop_inside_the_tile_is_counted_with_its_real_values():
    report = verify.run(persistent_copy("strided"))
    cov = _findings(report, "store.coverage")
    assert any(f.status == "violated" and "inside a tile" in f.subject for f in cov), cov
    (once,) = _findings(report, "store.once")
    assert once.status == "violated", once


def test_library_gemm_store_once_is_derived():
    problem = Problem(4096, 4096, 4096, 1, "bf16", "bf16", "nk", True)
    for schedule in (GemmSchedule(), GemmSchedule(stages=3, epilogue="tma")):
        fn, s = kernel_for(problem, schedule)
        report = verify.run(lower_only(fn, s=s))
        assert not report.errors, report.errors
        (once,) = _findings(report, "store.once")
        assert once.status == "proven" and once.tier == "derived", (schedule, once)
