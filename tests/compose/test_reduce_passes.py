"""How the fused tile template reads a tensor for its statistics (argus/compose/tile.py), on the
CPU interpreter against float64:

- a looped reduction combines each thread's elements lane-wise across the blocks and reduces
  across the CTA once, after its loops (no cross-thread reduction inside the block loop);
- the online softmax keeps a running maximum and rescaled sum per lane, combined after the
  loop (one pass for both statistics, no CTA-wide reduction in it);
- a variance's sum of squared deviations joins the pass of its mean (Welford lanes combined
  after the loop), so a norm reads its input twice (statistics, apply), not three times,
  and stays fp32-accurate where the naive sum of squares cancels (large mean, small spread).
"""

from __future__ import annotations

import re

import pytest
import torch
import torch.nn as nn

from argus.compose.runtime import ComposedModel
from argus.compose.tile import TileSchedule


def run(f, inputs, schedule: TileSchedule | None = None):
    model = type("M", (nn.Module,), {"forward": lambda self, a: f(a)})

    class ModelNew(ComposedModel):
        MODEL = model
        SCHEDULES = {"tile": schedule} if schedule else {}

    new = ModelNew()
    with torch.no_grad():
        y = new(*inputs)
        ref = f(*[x.double() for x in inputs])
    prog = next(iter(new._programs.values()))
    assert not prog.unsupported, prog.unsupported
    err = ((y.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
    return prog, err


def sources(prog) -> list[str]:
    return [k.source for k in prog.launches.values()]


def loop_bodies(src: str) -> list[str]:
    """The indented lines under each `for ... in ag.range(...)` of a kernel's source."""
    lines, out = src.splitlines(), []
    for i, line in enumerate(lines):
        if re.match(r"\s*for \w+ in ag\.range", line):
            ind = len(line) - len(line.lstrip())
            body = []
            for nxt in lines[i + 1:]:
                if len(nxt) - len(nxt.lstrip()) <= ind:
                    break
                body.append(nxt)
            out.append("\n".join(body))
    return out


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


LOOPED = TileSchedule(rows=2, bn=64, threads=64)      # rows of 512: 8 blocks a pass


@pytest.mark.parametrize("op", [lambda x: x.sum(-1), lambda x: x.amax(-1),
                                lambda x: x.amin(-1, keepdim=True),
                                lambda x: (x * 0.01 + 1).prod(-1),
                                lambda x: x / x.abs().sum(-1, keepdim=True),
                                lambda x: x.mean(0), lambda x: torch.softmax(x, -1),
                                lambda x: torch.logsumexp(x, -1)])
@pytest.mark.parametrize("n", [512, 500])             # 500: a masked tail block
def test_looped_reductions_combine_lanes_after_the_loop(op, n):
    prog, err = run(op, [randn(6, n)], LOOPED)
    assert err <= 2e-6, err
    for src in sources(prog):
        for body in loop_bodies(src):
            assert ".sum(axis" not in body and ".max(axis" not in body and \
                ".min(axis" not in body and ".prod(axis" not in body, body


@pytest.mark.parametrize("norm,loads", [
    (lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]), 2),
    (lambda x: torch.nn.functional.instance_norm(x.view(2, 3, -1)).view(x.shape), 2),
    (lambda x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1e-5).sqrt(), 2),
    (lambda x: x.var(-1, unbiased=False), 1),
    (lambda x: x.std(0), 1),
])
def test_variance_joins_the_pass_of_its_mean(norm, loads):
    """Mean 1000, spread 1: the sum of squares around 0 would lose every digit of the
    variance in fp32; the Welford lanes (on X minus the first block's mean) keep it
    fp32-accurate. One statistics pass (and the
    apply pass of a norm): `loads` block loops read the input."""
    x = randn(6, 512) + 1000.0
    prog, err = run(norm, [x], LOOPED)
    # a norm's output is x - mean in fp32: |mean| / spread = 1000 costs it ~3e-5 whatever the
    # variance (the two-pass form: 4e-5); a variance itself stays at fp32 accuracy
    assert err <= (2e-6 if loads == 1 else 5e-5), err
    _, err = run(norm, [randn(6, 512) * 3 + 2], LOOPED)
    assert err <= 2e-6, err
    kernels = [s for s in sources(prog) if "_m = " in s]
    assert len(kernels) == 1, sources(prog)
    # one block loop reads X for the statistics, one more applies (the pilot block before
    # the loops is one block, not a pass)
    passes = [b for b in loop_bodies(kernels[0]) if "ag.load(" in b]
    assert len(passes) == loads, kernels[0]


def test_variance_of_heavy_tailed_rows_is_accurate():
    torch.manual_seed(3)
    x = (torch.distributions.StudentT(1.5).sample((6, 512)) * 10 + 5).float()
    prog, err = run(lambda t: torch.nn.functional.layer_norm(t, t.shape[-1:]), [x], LOOPED)
    assert err <= 2e-6, err
    assert any("_m = " in s for s in sources(prog))


def test_masked_variance_keeps_two_passes():
    """A tail block (500 = 7 x 64 + 52) gives the lanes different counts: the variance is
    the second statistics pass there, and still exact."""
    prog, err = run(lambda x: x.var(-1), [randn(6, 500) + 50], LOOPED)
    assert err <= 2e-6, err
    assert not any("_m = " in s for s in sources(prog))


def test_norm_reads_its_input_twice_at_the_default_schedule():
    prog, err = run(lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:]),
                    [randn(4, 8192) * 3 + 2])
    assert err <= 2e-6, err
    (src,) = sources(prog)
    assert len([b for b in loop_bodies(src) if "ag.load(" in b]) == 2, src


def test_variance_over_an_outer_loop_and_the_tile():
    """Reduced dims 0 and 2 of [4, 6, 512]: dim 0 is a scalar loop around the block loop, so
    every lane counts the blocks of both loops."""
    x = randn(4, 6, 512) * 2 + 300
    prog, err = run(lambda t: t.var((0, 2)), [x], LOOPED)
    assert err <= 2e-6, err
    (src,) = [s for s in sources(prog) if "_m = " in s]
    assert src.count("in ag.range") == 2, src


@pytest.mark.parametrize("n", [512, 500])
def test_online_softmax_lanes_that_start_at_minus_infinity(n):
    """The first half of every row is -inf (a mask): each lane's running maximum is -inf for
    its first blocks, where exp(-inf - -inf) would poison its sum with NaN."""
    x = randn(6, n) * 4
    x[:, : n // 2] = float("-inf")
    prog, err = run(lambda t: torch.softmax(t, -1), [x], LOOPED)
    assert err <= 2e-6, err
    (src,) = sources(prog)
    assert "mnew" in src and len([b for b in loop_bodies(src) if "ag.load(" in b]) == 2, src


def test_rows_a_thread_holds_whole_keep_their_in_register_reduction():
    """A reduction over ROWS alone whose rows each thread holds whole (BN / 4 columns of 16
    bytes = the CTA's threads) reduces in registers every block: no lane-wise accumulator
    (it would only cost registers)."""
    prog, err = run(lambda x: x.mean(0), [randn(40, 256)],
                    TileSchedule(rows=4, bn=256, threads=64))
    assert err <= 2e-6, err
    src = next(s for s in sources(prog) if "ag.range" in s)
    assert any(".sum(axis=0)" in b for b in loop_bodies(src)), src
