"""sync.store-read (verify/check_sync.py): a shared-memory write follows the retirement of
every bulk store that may still read the same slot. lower/sync.py's reduced read-waits
(`cp.async.bulk.wait_group.read N`, N > 0: e319e38) are proven, and waits one group too lax,
a dropped wait, a dropped barrier, or a var stage read as a fixed slot are caught with the
thread, the iteration, the write's line and the store's line."""

from __future__ import annotations

from argus import verify
from argus.compiler import lower_only
from argus.ir import ops as O
from tests.mutations.corpus import _fp8_split_tma_epilogue, _read_wait, rewrite
from tests.unit.test_tma_store_slots import _rolling_slots


def _store_reads(kernel):
    return [f for f in verify.run(kernel).findings if f.code == "sync.store-read"]


def test_the_fp8_split_epilogue_read_1_waits_are_proven():
    kernel = _fp8_split_tma_epilogue()
    waits = [op.pending for op in kernel.walk() if isinstance(op, O.TmaStoreWait) and op.read]
    assert waits == [1, 1, 1, 1], waits
    found = _store_reads(kernel)
    assert len(found) == 4 and all(f.status == "proven" for f in found), found


def test_read_2_leaves_the_store_of_the_same_slot_reading():
    found = _store_reads(rewrite(_fp8_split_tma_epilogue(), O.TmaStoreWait, _read_wait(2)))
    bad = [f for f in found if f.status == "violated"]
    assert len(bad) == 4, found
    w = bad[0].witness
    assert w["write"] != w["store"] and w["thread"].startswith("0 ")
    assert "wait_group.read N with N <= 1" in bad[0].message


def test_a_stage_read_from_a_var_is_any_slot():
    """The rolling-slot kernel (stages s and s + 1 of a var s): its lowered read 0 waits are
    proven; read 1 (what e319e38 computed before d01c7a9) is caught: the next iteration's
    first stmatrix writes the slot the previous iteration's last store still reads."""
    kernel = lower_only(_rolling_slots)
    assert all(f.status == "proven" for f in _store_reads(kernel))
    bad = [f for f in _store_reads(rewrite(kernel, O.TmaStoreWait, _read_wait(1)))
           if f.status == "violated"]
    assert bad and "earlier iteration" in bad[0].witness["iteration"], bad
    assert "slot any" in bad[0].message


def test_a_write_outside_any_staging_buffer_is_not_checked():
    """A kernel with no TMA store has no sync.store-read finding (nothing to prove)."""
    from argus.kernels import gemm as G

    assert _store_reads(lower_only(G.gemm)) == []
