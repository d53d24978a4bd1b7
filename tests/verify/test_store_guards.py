"""store.coverage reads the `ag.when` around a store (argus/verify/store_guards.py), on both of
its paths: the per-dim count (one program id a dim) and the tile decomposition (a raster of
one program id into row and column blocks, which answered unknown for any condition but
ping-pong's `wg == turn` before). A condition that holds wherever the store reaches the
output is proven at its line; one on data read at run time is an error naming the value
read. The seeded bugs of the per-dim path and the ticket case are in tests/mutations
(guarded_store, last_split_stores)."""

import argus as ag
from argus import verify


def _raster(flag: bool):
    @ag.kernel(threads=128, name="guarded_raster")
    def guarded_raster(X: ag.Tensor["M", "N", ag.f32], F: ag.Tensor[1, ag.i32],
                       Y: ag.Tensor["M", "N", ag.f32]):
        ROWS, BN = 4, 256
        nb = ag.cdiv(X.shape[1], BN)
        (pid,) = ag.grid(ag.cdiv(X.shape[0], ROWS) * nb)
        pm, pn = pid // nb, pid % nb
        y = ag.relu(ag.load(X, (pm * ROWS, pn * BN), (ROWS, BN)))
        cond = ag.load_scalar(F, (0,)) > 0 if flag else pm * ROWS < X.shape[0]
        with ag.when(cond):
            ag.store(Y, (pm * ROWS, pn * BN), y)
    return guarded_raster


def _coverage(report):
    return [d for d in report.diagnostics if d.code == "store.coverage"]


def test_raster_under_a_mask_is_proven():
    report = verify.run(_raster(False), include_proven=True)
    cov = _coverage(report)
    assert cov and all(d.severity == "note" for d in cov), [str(d) for d in cov]
    assert any("the condition at" in d.message for d in cov)
    assert any("tiles of Y" in d.message for d in cov)


def test_raster_under_a_flag_is_an_error_at_the_condition():
    report = verify.run(_raster(True))
    bad = [d for d in report.errors if d.code == "store.coverage"]
    assert bad, [str(d) for d in report.diagnostics]
    assert "values_read" in bad[0].counterexample and "never written" in bad[0].message
    assert bad[0].loc.line == _raster.__code__.co_firstlineno + 10   # the `with ag.when` line
