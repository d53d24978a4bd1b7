"""Seeded bugs in the convolution's ping-pong consumers (ConvSchedule.pingpong, argus/kernels/
conv.py; the correct kernels: tests/interp/test_conv_pingpong.py), each written into the
skeleton piece the kernel calls (monkeypatched; a fresh, uncached kernel is traced) and
caught by the verifier, and where the kernel still builds, by the interpreter too:

  * the skip missing (the warpgroup whose turn it is not does not move its step counter past
    the other's K steps): its next unit reads the other's slots; the verifier reports errors
    (a stored element whose tags are another tile's; pipe.totals: a warpgroup's counter
    misses the other's unit, named with its iteration, where the producer's count is the
    walk's trip count x K steps: check_pipeline._Pair's trip form), lowering refuses it (two
    warpgroups release each step of a ring of one release);
  * one warpgroup takes every unit (the turn always 0): ordered.turns (warpgroup 0 enters
    the "mma" section twice in a row, waiting on warpgroup 1's turn that never comes); the
    interpreter reports the deadlock;
  * turns out of order (units 0, 1 warpgroup 0's, 2, 3 warpgroup 1's): ordered.turns;
  * a 128-row tile's second accumulator replaced by its first (both 64-row blocks stored
    from one): the interpreter against float64 only. The verifier does not see it: an
    accumulator row of the implicit GEMM carries no output-pixel tag for store.coords to
    compare with the row it is stored to (the same holds for the cooperative kernel's
    warpgroups; the receptive-field assertion speaks of A's rows, not of the store)."""

import re

import pytest
import torch

import argus as ag
import argus.dsl.pipe as pipe_mod
from argus import verify
from argus.errors import CompileError
from argus.runtime.interp.machine import InterpError
from argus.kernels import conv as K
from argus.kernels import warp_specialized as WS
from argus.kernels.conv import ConvGeometry, ConvSchedule
from argus.ops import conv as conv_op

GEOM = ConvGeometry(3, 3, 1, 1, 1, 1, 1, 1, groups=1, cg_padded=64)
PP = ConvSchedule(bm=128, bn=64, bw=64, stages=2, rowbox=True, pingpong=True, num_sms=2)


def _turns(turn_of):
    def turns(self, warpgroups):
        for unit in ag.range(self.first, self.total, self.programs):
            yield turn_of((unit - self.first) // self.programs, warpgroups), self.locate(unit)
    return turns


def _no_skip(monkeypatch):
    monkeypatch.setattr(pipe_mod.Pipe, "skip", lambda self, steps: None)   # BUG


def _one_warpgroup(monkeypatch):
    monkeypatch.setattr(WS.TileScheduler, "turns", _turns(lambda i, w: 0))  # BUG


def _out_of_order(monkeypatch):
    monkeypatch.setattr(WS.TileScheduler, "turns", _turns(lambda i, w: (i // 2) % w))  # BUG


def _first_block_twice(monkeypatch):
    right = WS.OperandRing.mma_tile

    def mma_tile(self, k_steps, **kw):
        accs = right(self, k_steps, **kw)
        return [accs[0]] * len(accs)                                         # BUG
    monkeypatch.setattr(WS.OperandRing, "mma_tile", mma_tile)


# (seed, the error code expected, what its message says: None for any)
BUGS = [(_no_skip, "pipe.totals",
         r"warpgroup (\d) of consumer role 'consumer'.* counts 0 steps in iteration \d+ of its "
         r"outer loop but the producer role 'producer' produces 9 .*so warpgroup \1's step n "
         r"waits on slot n % S"),
        (_one_warpgroup, "ordered.turns", None), (_out_of_order, "ordered.turns", None)]
IDS = ["no_skip", "one_warpgroup_takes_every_unit", "turns_out_of_order"]


def _report(found):
    return [f"{d.severity} {d.code}: {d.message[:120]}" for d in found]


@pytest.mark.parametrize("seed,code,says", BUGS, ids=IDS)
def test_pingpong_bug_is_a_verifier_error(monkeypatch, seed, code, says):
    seed(monkeypatch)
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM, s=PP)
    errors = [d for d in found if d.severity == "error" and d.code == code]
    assert errors, _report(found)
    if says is not None:
        assert any(re.search(says, d.message) for d in errors), _report(found)
    # every pipeline claim decided: the turns' counts are paired unit by unit (the producer's
    # trip count x K steps against each warpgroup's sum), none left unknown
    assert not [d for d in found if d.severity == "unknown" and d.code.startswith("pipe.")], \
        _report(found)


def test_the_clean_kernel_has_no_errors():
    found = verify.check(K.conv_kernel.__wrapped__(), geom=GEOM, s=PP)
    assert not [d for d in found if d.severity == "error"], _report(found)


def _interpret(monkeypatch):
    monkeypatch.setattr(conv_op, "conv_kernel", K.conv_kernel.__wrapped__)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 16, 7, 9, generator=g).bfloat16().to(memory_format=torch.channels_last)
    w = torch.randn(24, 16, 3, 3, generator=g).bfloat16()
    y = conv_op.conv2d_interpret(x, w, None, 1, 1, 1, 1, schedule=PP)
    ref = torch.nn.functional.conv2d(x.double(), w.double(), None, 1, 1)
    return (y.double() - ref).abs().max().item() / ref.abs().max().item()


def test_no_skip_is_refused_by_lowering(monkeypatch):
    _no_skip(monkeypatch)
    with pytest.raises(CompileError, match="2 warpgroups release each step"):
        _interpret(monkeypatch)


def test_one_warpgroup_taking_every_unit_deadlocks_in_the_interpreter(monkeypatch):
    _one_warpgroup(monkeypatch)
    with pytest.raises(InterpError, match="deadlock"):
        _interpret(monkeypatch)


def test_first_block_twice_changes_the_result(monkeypatch):
    _first_block_twice(monkeypatch)
    assert _interpret(monkeypatch) > 0.1


def test_the_clean_kernel_interprets_right(monkeypatch):
    assert _interpret(monkeypatch) < 1e-2
