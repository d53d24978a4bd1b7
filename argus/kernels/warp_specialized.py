"""Warp-specialized tile kernels on Hopper, as DSL building blocks that GEMM-like kernels share.

A kernel built from them is a grid of CTAs (persistent: one per SM, or one per unit of work),
each with one producer warpgroup that streams operand tiles through a STAGES-deep TMA ring and
`consumers` warpgroups that multiply them with wgmma and store the result:

    sched = TileScheduler.launch(M, N, s.bm, s.bn, cluster=s.cluster_m, ...)   # grid, rank
    ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, dtype, s.consumers)   # smem + mbarriers
    k_steps = ring.k_steps(K)
    with ag.role("producer", warpgroups=1, regs=s.producer_regs):
        for unit in sched.units():
            ring.load(k_steps, A, B, unit, rank=sched.rank, cluster=sched.cluster)
    with ag.role("consumer", warpgroups=s.consumers, regs=s.consumer_regs) as wg:
        for unit in sched.units():
            acc = ring.mma(k_steps, wg)
            store_tile(C, unit, wg, acc, bm=s.bm, bn=s.bn, rows=64, finish=lambda t: t.to(dt))

Ping-pong (`pingpong=True`): the two consumer warpgroups own whole tiles and take units in
turns; the ring's slots are released by one warpgroup each, the other skips those steps, and
the main loops are ordered sections, so one warpgroup's epilogue overlaps the other's MMAs:

    ring = OperandRing.alloc(s.stages, s.bm, s.bn, s.bk, dtype, consumers=1)
    with ag.role("consumer", warpgroups=2, regs=s.consumer_regs) as wg:
        for turn, unit in sched.turns(2):
            with ag.when(turn == wg):
                with ag.ordered("mma"):
                    accs = ring.mma_tile(k_steps)
                for j, acc in enumerate(accs):
                    store_tile(C, unit, j, acc, bm=s.bm, bn=s.bn, rows=64, finish=...)
            with ag.when(turn != wg):
                ring.pipe.skip(k_steps)

This is the structure of CUTLASS's KernelTmaWarpSpecializedPingpong (include/cutlass/gemm/
kernel/sm90_gemm_tma_warpspecialized_pingpong.hpp, compared 2026-12-03): each warpgroup takes
every other unit of the CTA's persistent walk (its consumer 1 starts one unit on, both advance
by two), the whole main loop is one ordered turn (the order barrier's wait before `mma`, its
arrive after the last K step is issued and before `mma_tail`'s wait_group 0 and last release),
the warpgroup that skips advances its step counter by the other's K steps, one producer loads
the units in walk order through the shared ring, registers 40 / 232. What differs: CUTLASS also
orders the epilogues (a 2-stage OrderedSequenceBarrier; here `ordered_epilogue`, opt-in) and
stores through one shared staging buffer by TMA, waiting for its stores (`store_tail`) before
passing the epilogue turn; here the default stores from registers, and epilogue='tma'
(`store_tile_stacked`) stages each warpgroup's tile in slots of its own, so no wait on bulk
stores crosses warpgroups and the epilogues need no order; it zeroes by ScaleOut::Zero (here
`zero_by_wgmma`, opt-in); and it commits one wgmma batch per k tile and waits with
K_PIPE_MMAS = 1, a whole k tile in flight, where a 128-row tile here commits one group per
64-row accumulator: its steps are whole steps (`consume(whole_step=True)`), so lower/sync.py
ends each with wait_group 2 and both stay in flight too (scripts/gpu_gemm_pingpong.py
--last-group-wait measures the former wait_group 1, which kept only the second).

Tail splits (`TileScheduler.launch(..., tail_splits=S)`): the walk is two loops in every role,
the full waves' units (`units`) and then S K slices of each unit of the last, partial wave
(`tail_units`), each slice from K-slice views of the operands with its own step count:

    for unit in sched.units(): ...                     # whole K, as above
    for part, q, unit in sched.tail_units(): ...       # slice `part` of tail tile q

The blocks: `TileScheduler` (grouped raster `tile_coords`, unit decode with batch and cluster
rank, the tail's walk), `load_tile` and `OperandRing.load` (TMA loads into the ring: MN-major
atoms, cluster multicast, several K slices per stage), `OperandRing.mma` (wgmma over the ring
into an fp32 accumulator), the epilogues `store_tile` (from registers, optionally transposed) and
`store_tile_staged` (stmatrix + TMA store in staged rounds; `store_tile_stacked`, its ping-pong
form for a warpgroup's whole tile), and `WarpSpecializedSchedule`, the fields and checks every
such kernel's schedule has. A kernel adds its own hooks: `finish`
(accumulator block -> output tile, e.g. per-tensor scales, then the conversion) and whatever
it reads before the unit loop.

Invariant: producer and consumers walk the same units in the same order and every CTA of a
cluster walks the same units, so the per-role pipeline step counters (architecture notes, item
4) stay in step across units and multicast peers fill the same stage. With tail splits both
loops are walked by every role, with the same per-unit step counts in each (whole K, then one
slice's), so the counters still agree (pipe.totals proves it).

The helpers are plain trace-time Python: the IR is the ops they record, in the order their
expressions are evaluated (the builder does not reorder or deduplicate), so a change here that
keeps that order keeps the generated code. tests/golden/test_library_cuda_replay.py hashes the
CUDA of every library schedule to hold that.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Iterator

import argus as ag
from argus.dtypes import DType
from argus.target.limits import NUM_SMS, entry_registers


@dataclass(frozen=True)
class WarpSpecializedSchedule:
    """The tunable fields every warp-specialized GEMM-like kernel has. Subclasses (GemmSchedule,
    Fp8GemmSchedule) add theirs after these, extend `_problems`, and may change defaults."""

    bm: int = 128
    bn: int = 256
    bk: int = 64
    stages: int = 4
    consumers: int = 2
    producer_regs: int = 40
    consumer_regs: int = 232
    persistent: bool = True
    # CTAs of the persistent grid (target/limits.py: H100/H200 SXM); ignored with
    # persistent=False, whose grid is one CTA (or cluster) per unit
    num_sms: int = NUM_SMS
    group_m: int = 8        # grouped raster: GROUP_M tiles down M before moving along N
    epilogue: str = "direct"  # "direct": st.global from registers; "tma": stmatrix + TMA store
    cluster_m: int = 1      # 2: CTA pairs on vertically adjacent tiles share B by TMA multicast
    zero_by_wgmma: bool = False  # scale-d = 0 on the first wgmma instead of zeroing registers
    # ping-pong: each of the 2 consumer warpgroups owns whole bm x bn tiles (bm = 64 or 128:
    # one or two m64 wgmma per k slice) and they take units in turns; their main loops are
    # ordered sections (ag.ordered), so one's epilogue overlaps the other's MMAs
    pingpong: bool = False
    # ping-pong only: the epilogues are ordered sections too (CUTLASS's ping-pong orders both
    # its MMA and its epilogue turns), so at most one warpgroup stores while the other
    # multiplies, instead of both storing at once when an epilogue outlasts a main loop
    ordered_epilogue: bool = False

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise ValueError(f"{type(self).__name__}: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        """What makes this schedule illegal for any kernel built from these blocks."""
        problems = []
        if self.epilogue not in ("direct", "tma"):
            problems.append(f"epilogue={self.epilogue!r} is not 'direct' or 'tma'")
        if self.pingpong:
            if self.consumers != 2 or self.bm not in (64, 128):
                problems.append(f"pingpong=True: 2 consumer warpgroups each own a whole tile "
                                f"of 64 or 128 rows; got consumers={self.consumers}, "
                                f"bm={self.bm}")
            if not self.persistent:
                problems.append("pingpong takes turns over a CTA's units: it needs "
                                "persistent=True (one unit per CTA leaves one consumer idle)")
            # 2x1 clusters with the TMA-store epilogue ran correct in the interpreter but one
            # ragged GPU case failed (docs/perf/gemm.md run 3) and measured no faster: refused.
            # The TMA-store epilogue alone passed every GPU case there (64x192)
            if self.cluster_m != 1:
                problems.append(f"pingpong=True runs without clusters: cluster_m={self.cluster_m} "
                                f"(use 1)")
            if self.bm * self.bn > 128 * 128 + 64 * 64:
                problems.append(f"pingpong=True: a bm={self.bm} x bn={self.bn} fp32 "
                                f"accumulator per warpgroup exceeds the register budget (at "
                                f"most 128x160 or 64x256)")
        elif self.ordered_epilogue:
            problems.append("ordered_epilogue orders ping-pong epilogues: it needs pingpong=True")
        elif self.consumers < 1 or self.bm != 64 * self.consumers:
            problems.append(f"each consumer warpgroup owns 64 rows: bm={self.bm} needs "
                            f"consumers={self.bm // 64}")
        if self.bn % 8 or not 8 <= self.bn <= 256:
            problems.append(f"bn={self.bn}: wgmma N is a multiple of 8 in [8, 256]")
        if self.stages < 1:
            problems.append(f"stages={self.stages} < 1")
        if self.cluster_m not in (1, 2):
            problems.append(f"cluster_m={self.cluster_m}: the kernel pairs at most 2 CTAs")
        if self.group_m < 1 or self.num_sms < self.cluster_m:
            problems.append(f"group_m={self.group_m}, num_sms={self.num_sms} must be positive")
        return problems


def occupancy_problems(ctas_per_sm: int, consumers: int, producer_regs: int,
                       consumer_regs: int) -> list[str]:
    """The occupancy hint's (ag.occupancy) checks shared by the schedules that take one
    (AttentionSchedule, ConvSchedule): 1 or 2 CTAs an SM, and at 2 the warpgroups' register
    split within what the CTA's threads enter with. Why per CTA: setmaxnreg moves registers
    within the CTA's allocation at entry, threads x entry_registers (80 a thread for 3
    warpgroups at 2 CTAs: 65536 / 768 rounded down to 8), not half the SM's 65536."""
    if ctas_per_sm not in (1, 2):
        return [f"ctas_per_sm={ctas_per_sm}: 1 or 2 CTAs per SM"]
    if ctas_per_sm == 1:
        return []
    threads = 128 * (1 + consumers)
    pool = entry_registers(threads, ctas_per_sm)
    if producer_regs + consumers * consumer_regs <= (1 + consumers) * pool:
        return []
    return [f"ctas_per_sm={ctas_per_sm}: {threads} threads enter with {pool} registers each, "
            f"so producer_regs + consumers x consumer_regs must be at most "
            f"{(1 + consumers) * pool} (is {producer_regs} + {consumers} x {consumer_regs})"]


# ----------------------------------------------------------------------------- tile scheduler


def tile_coords(tile, m_tiles, n_tiles, group_m: int):
    """Grouped raster order: consecutive tiles share B columns for group_m rows of tiles, so
    the B tiles they read stay in L2."""
    width = group_m * n_tiles
    group = tile // width
    first_m = group * group_m
    group_size = ag.minimum(m_tiles - first_m, group_m)
    within = tile % width
    return first_m + within % group_size, within // group_size


@dataclass(frozen=True)
class Unit:
    """One output tile of this CTA: leading batch coordinates (empty unless batched) and the
    m and n tile indices (runtime scalars)."""

    batch: tuple
    m: object
    n: object


@dataclass(frozen=True)
class TileScheduler:
    """The launch grid and the walk over units of work. A unit is `cluster` vertically adjacent
    tiles, one per CTA of a cluster, in grouped raster order, times the batch; a persistent
    grid has at most num_sms / cluster clusters, each striding over the units."""

    m_units: object
    n_tiles: object
    tiles: object           # units per batch entry
    total: object           # units in all
    first: object           # this CTA's first unit
    programs: object        # the stride: clusters in the grid
    rank: object            # this CTA's rank in its cluster (the int 0 without clusters)
    cluster: int
    group_m: int
    batched: bool

    full: object = None     # tail splits: the units of the full waves (None: all of them)
    splits: int = 1         # tail splits: K slices per unit of the last, partial wave

    @classmethod
    def plan(cls, rows, cols, bm: int, bn: int, *, batch=None, cluster: int = 1,
             persistent: bool = True, num_sms: int = 132, group_m: int = 8,
             tail_splits: int = 1) -> TileScheduler:
        """The walk over an output of rows x cols (per batch entry, `batch` of them when given)
        in bm x bn tiles, without a grid: `launch` declares the grid from it, and a kernel that
        works on the walk's tail afterwards (`tail_tile`) plans the same walk to find it.

        With tail_splits = S > 1 (persistent only) the walk's units are the units of the full
        waves (the first `full` of the raster, whole K each) and then, for each of the
        total - full units of the last partial wave, S K slices: a last wave that would leave
        most SMs idle becomes about S times as many units of 1/S the K steps each."""
        cs = cluster
        m_tiles, n_tiles = ag.cdiv(rows, bm), ag.cdiv(cols, bn)
        m_units = ag.cdiv(m_tiles, cs) if cs > 1 else m_tiles
        tiles = m_units * n_tiles
        total = tiles * batch if batch is not None else tiles
        if tail_splits > 1:
            # room for every slice of a lone partial wave; full waves of `clusters` units
            clusters = ag.minimum(total * tail_splits, num_sms // cs)
            full = total // clusters * clusters
            return cls(m_units, n_tiles, tiles, total, None, clusters, 0, cs, group_m,
                       batch is not None, full, tail_splits)
        clusters = ag.minimum(total, num_sms // cs) if persistent else total
        return cls(m_units, n_tiles, tiles, total, None, clusters, 0, cs, group_m,
                   batch is not None)

    @classmethod
    def launch(cls, rows, cols, bm: int, bn: int, *, batch=None, cluster: int = 1,
               persistent: bool = True, num_sms: int = 132, group_m: int = 8,
               tail_splits: int = 1) -> TileScheduler:
        """Declare the grid for an output of rows x cols (per batch entry, `batch` of them when
        given) in bm x bn tiles (see `plan`), and return the scheduler of this CTA."""
        cs = cluster
        walk = cls.plan(rows, cols, bm, bn, batch=batch, cluster=cs, persistent=persistent,
                        num_sms=num_sms, group_m=group_m, tail_splits=tail_splits)
        clusters = walk.programs
        (pid,) = ag.grid(clusters * cs, cluster=cs)
        rank = ag.cluster_rank() if cs > 1 else 0
        first, programs = (pid // cs, clusters) if cs > 1 else (pid, clusters)
        return dataclasses.replace(walk, first=first, programs=programs, rank=rank)

    def locate(self, unit, rank=None) -> Unit:
        """The tile of this CTA (or of the CTA of cluster rank `rank`) in flat unit `unit`."""
        cs, rank = self.cluster, self.rank if rank is None else rank
        if self.batched:
            mu, n = tile_coords(unit % self.tiles, self.m_units, self.n_tiles, self.group_m)
            return Unit((unit // self.tiles,), mu * cs + rank, n)
        mu, n = tile_coords(unit, self.m_units, self.n_tiles, self.group_m)
        return Unit((), mu * cs + rank, n)

    def units(self) -> Iterator[Unit]:
        """A runtime loop over this CTA's units (every role walks the same ones); with tail
        splits, the units of the full waves only (`tail_units` walks the rest)."""
        end = self.total if self.full is None else self.full
        for unit in ag.range(self.first, end, self.programs):
            yield self.locate(unit)

    def draws(self, counter) -> Iterator[tuple]:
        """The dynamic scheduler's producer loop (docs/design/dynamic_scheduler.md): as many
        iterations as `units` (this CTA's share of the walk), each drawing the next unit of
        the launch from the global work counter `counter` [1] int32 (atom.inc with wrap =
        total: the units in the order CTAs ask for them, so the units running at one time are
        neighbours in the raster; the total draws of a launch leave the counter where they
        found it, 0). Yields (ticket, unit); the producer hands the ticket to the consumers
        through its ring's payload words (`OperandRing.load(payload=ticket)`)."""
        for _ in ag.range(self.first, self.total, self.programs):
            ticket = ag.atomic_fetch_add(counter, (0,), wrap=self.total)
            yield ticket, self.locate(ticket)

    def slots(self) -> Iterator[object]:
        """The dynamic scheduler's consumer loop: the same iterations as `draws` (so the step
        counters agree), the unit of each read from the ring (`OperandRing.peek_unit`, then
        `locate`)."""
        yield from ag.range(self.first, self.total, self.programs)

    def tail_units(self) -> Iterator[tuple]:
        """With tail splits: a runtime loop, after `units`, over this CTA's units of the last
        partial wave's K slices, yielding (slice, q, unit): K slice `slice` of tail tile `q`
        (`tail_tile` finds its place again), whose tile is `unit`. The same slice of
        consecutive tail units is taken by consecutive clusters: units that run at the same
        time read the same K range of neighbouring tiles (the raster's L2 reuse), and every
        CTA of a cluster walks the same units (the multicast peers share the slice)."""
        tail = self.total - self.full
        for t in ag.range(self.first, tail * self.splits, self.programs):
            r = t % tail
            q = r * self.cluster + self.rank if self.cluster > 1 else r
            yield t // tail, q, self.locate(self.full + r)

    @property
    def tail_tiles(self):
        """With tail splits: how many CTA tiles the last partial wave has (the `q` of
        `tail_units` runs over [0, tail_tiles))."""
        return (self.total - self.full) * self.cluster

    def tail_tile(self, q) -> Unit:
        """Tail tile q's unit (for the kernel that sums its K slices' partials)."""
        if self.cluster > 1:
            return self.locate(self.full + q // self.cluster, rank=q % self.cluster)
        return self.locate(self.full + q, rank=0)

    def turns(self, warpgroups: int) -> Iterator[tuple]:
        """The same loop as `units`, yielding (turn, unit): iteration i is the turn of
        warpgroup turn = i % warpgroups (ping-pong consumers run `ag.when(turn == wg)`; the
        verifier proves that the ordered sections under it go round)."""
        for unit in ag.range(self.first, self.total, self.programs):
            yield ((unit - self.first) // self.programs) % warpgroups, self.locate(unit)


# ----------------------------------------------------------------------------- producer


def load_tile(view, at: int, tensor, batch: tuple, index, rows: int, k0, bk: int, *,
              mn_major: bool = False, rank=0, share: int = 1) -> None:
    """TMA-load the MN rows [index * rows, +rows) x K columns [k0, k0 + bk) of `tensor` into
    `view` from row `at`. K-major: one [rows][bk] box. MN-major (the tensor is [.., K, MN]):
    one [bk][64] box per 64 MN columns, stacked. With `share` > 1 the CTAs of a cluster each
    load 1/share of the boxes (by `rank`) and multicast them to all."""
    if mn_major:  # one [bk][64] box per 64 columns; each CTA loads count/share of them for all
        count = rows // 64
        for jj in range(count // share):
            j = rank * (count // share) + jj
            ag.tma.load(view.rows_of(at + j * bk, bk), tensor,
                        (*batch, k0, index * rows + 64 * j), multicast=share > 1)
    elif share > 1:  # each CTA loads 1/share of the rows for all
        part = rows // share
        ag.tma.load(view.rows_of(at + rank * part, part), tensor,
                    (*batch, index * rows + rank * part, k0), multicast=True)
    else:
        ag.tma.load(view.rows_of(at, rows), tensor, (*batch, index * rows, k0))


@dataclass(frozen=True)
class OperandRing:
    """The STAGES-deep ring of wgmma operand tiles in 128B-swizzled shared memory and its
    mbarrier pipeline. A stage holds k_atoms independent BK-deep slices ("atoms") stacked along
    the rows: atom j of A is rows [j * a_rows, (j + 1) * a_rows), of B [j * b_rows, ...). An
    MN-major operand is stored as [BK][64] boxes, one per 64 rows of its tile."""

    a: object               # SmemBuffer (stages, k_atoms * a_rows, cols)
    b: object
    pipe: object
    bm: int
    bn: int
    bk: int
    k_atoms: int
    consumers: int
    mn_major_a: bool
    mn_major_b: bool
    precision: str | None = None   # ag.wgmma's: "tf32" for f32 operands (K-major only)

    @property
    def a_rows(self) -> int:
        return _atom_rows(self.bm, self.bk, self.mn_major_a)

    @property
    def b_rows(self) -> int:
        return _atom_rows(self.bn, self.bk, self.mn_major_b)

    @classmethod
    def alloc(cls, stages: int, bm: int, bn: int, bk: int, dtype: DType, consumers: int, *,
              k_atoms: int = 1, mn_major_a: bool = False, mn_major_b: bool = False,
              precision: str | None = None, swizzle: int = 128,
              payload: bool = False) -> OperandRing:
        """Allocate the ring (A, then B, then the pipeline released by `consumers`).
        `precision` is ag.wgmma's (f32 operands need "tf32": 32 of them per 128-byte row,
        so bk = 32). `swizzle`: the bytes of one K-major row (bk * element bytes: 32 or 64 for
        atoms narrower than 128 bytes, e.g. the convolution's one-tap K slices of few
        channels, ConvSchedule.taps_per_slice)."""
        sA = ag.smem((stages, k_atoms * _atom_rows(bm, bk, mn_major_a), 64 if mn_major_a else bk),
                     dtype, swizzle=swizzle)
        sB = ag.smem((stages, k_atoms * _atom_rows(bn, bk, mn_major_b), 64 if mn_major_b else bk),
                     dtype, swizzle=swizzle)
        # payload: a unit id per slot, the dynamic scheduler's hand-off (TileScheduler.draws)
        # one line, one call: the tracer names the ring after the assigned variable ('pipe'),
        # which findings and reports print
        pipe = ag.pipeline(stages, consumers=consumers, payload=payload)
        return cls(sA, sB, pipe, bm, bn, bk, k_atoms, consumers, mn_major_a, mn_major_b,
                   precision)

    def k_steps(self, K):
        """Pipeline steps over K: each consumes k_atoms * bk of it."""
        return ag.cdiv(K, self.bk * self.k_atoms)

    def load(self, k_steps, a, b, unit: Unit, *, rank=0, cluster: int = 1,
             payload=None) -> None:
        """The producer's loop for one unit: every K step, A's m tile and B's n tile into the
        next free stage; B is shared by the `cluster` CTAs (multicast), A is each CTA's own.
        payload: an int32 put into every step's slot (the unit's ticket, for consumers that
        learn their unit from the ring: `peek_unit`)."""
        for k in ag.range(k_steps):
            with self.pipe.produce(**({} if payload is None else {"payload": payload})) \
                    as stage:
                for atom in range(self.k_atoms):
                    k0 = (k * self.k_atoms + atom) * self.bk
                    load_tile(self.a[stage], atom * self.a_rows, a, unit.batch, unit.m,
                              self.bm, k0, self.bk, mn_major=self.mn_major_a)
                    load_tile(self.b[stage], atom * self.b_rows, b, unit.batch, unit.n,
                              self.bn, k0, self.bk, mn_major=self.mn_major_b, rank=rank,
                              share=cluster)

    # ------------------------------------------------------------------------- consumer

    def mma(self, k_steps, wg, *, zero_by_wgmma: bool = False, check_a=None):
        """The consumer's main loop for one unit: warpgroup `wg` multiplies its 64 rows of A
        with all of B over every K step into a fresh fp32 accumulator, returned. check_a(view):
        called with each A view right before its wgmma, to state tag assertions on what it
        holds (ag.tag_assert: no code)."""
        rows = self.bm // self.consumers
        acc = ag.zeros((rows, self.bn), ag.f32, by_wgmma=zero_by_wgmma)
        for k in ag.range(k_steps):
            with self.pipe.consume() as stage:
                for atom in range(self.k_atoms):
                    # this consumer's 64 rows: one [BK][64] atom if MN-major
                    a_view = self.a[stage].rows_of(atom * self.a_rows + wg * self.bk, self.bk) \
                        if self.mn_major_a else \
                        self.a[stage].rows_of(atom * self.bm + wg * rows, rows)
                    if check_a is not None:
                        check_a(a_view)
                    ag.wgmma(a_view, self.b[stage].rows_of(atom * self.b_rows, self.b_rows), acc,
                             trans_b=self.mn_major_b, trans_a=self.mn_major_a,
                             precision=self.precision)
        return acc

    def peek_unit(self):
        """The unit id the producer put into the slot of this warpgroup's next step
        (`load(payload=...)`), read before the unit's main loop (Pipe.peek: it waits for that
        fill). Needs k_steps >= 1: with no step the fill never comes."""
        return self.pipe.peek()

    def mma_tile(self, k_steps, *, zero_by_wgmma: bool = False, check_a=None) -> list:
        """A ping-pong consumer's main loop for one unit: this warpgroup multiplies the whole
        bm x bn tile, as bm / 64 accumulators of 64 rows (one m64 wgmma each per K slice).
        Each wgmma is a commit group of its own, so a 128-row tile's step commits two; the
        step is a whole step (`consume(whole_step=True)`): its end waits with wait_group 2,
        leaving both in flight while the next full barrier is awaited, as CUTLASS keeps a
        whole k tile in flight (wait_group 1 would retire the first). The previous step's
        groups are retired by that wait before its slot is released (the verifier proves it:
        sync.release). check_a(view): as for `mma`, called with each 64-row A view right
        before its wgmma (tag assertions: no code)."""
        accs = [ag.zeros((64, self.bn), ag.f32, by_wgmma=zero_by_wgmma)
                for _ in range(self.bm // 64)]
        for k in ag.range(k_steps):
            with self.pipe.consume(whole_step=True) as stage:
                for atom in range(self.k_atoms):
                    b_view = self.b[stage].rows_of(atom * self.b_rows, self.b_rows)
                    for j, acc in enumerate(accs):
                        a_view = self.a[stage].rows_of(atom * self.a_rows + j * self.bk,
                                                       self.bk) if self.mn_major_a else \
                            self.a[stage].rows_of(atom * self.bm + j * 64, 64)
                        if check_a is not None:
                            check_a(a_view)
                        ag.wgmma(a_view, b_view, acc, trans_b=self.mn_major_b,
                                 trans_a=self.mn_major_a, precision=self.precision)
        return accs


def _atom_rows(tile_rows: int, bk: int, mn_major: bool) -> int:
    """Shared-memory rows of one K slice of an operand tile: its MN rows (K-major), or one
    [bk][64] box per 64 of them (MN-major)."""
    return (tile_rows // 64) * bk if mn_major else tile_rows


# ----------------------------------------------------------------------------- epilogues

Finish = Callable[[object], object]
"""An accumulator block (an fp32 tile) -> the tile to store (the output type)."""


def store_tile(out, unit: Unit, wg, acc, *, bm: int, bn: int, rows: int, finish: Finish,
               transposed: bool = False) -> None:
    """Store warpgroup `wg`'s rows of the unit's tile from registers (st.global). transposed:
    the accumulator is a block of out^T (swap-AB), so its rows are out's columns."""
    if transposed:
        ag.store(out, (*unit.batch, unit.n * bn, unit.m * bm + wg * rows), finish(acc),
                 transposed=True)
    else:
        ag.store(out, (*unit.batch, unit.m * bm + wg * rows, unit.n * bn), finish(acc))


@dataclass(frozen=True)
class Staging:
    """The TMA-store staging buffer: per consumer warpgroup, `staged` swizzled rows x width
    blocks; a tile of `blocks` blocks is stored in rounds of `staged`."""

    buffer: object
    width: int
    blocks: int
    staged: int

    @classmethod
    def alloc(cls, consumers: int, rows: int, bn: int, dtype: DType,
              store_cols: int = 0) -> Staging:
        """Blocks of 64 columns (128-byte swizzle), or 32 / 16 with a 64- / 32-byte swizzle for
        tiles such as 224 or 176 wide; store_cols columns staged per round (0: all bn)."""
        if dtype.bits != 16:
            raise ag.TraceError(f"the TMA-store epilogue (stmatrix) stores 16-bit outputs, "
                                f"not {dtype}", fix="use epilogue='direct'")
        width = next(w for w in (64, 32, 16) if bn % w == 0)
        staged = (store_cols or bn) // width
        buffer = ag.smem((consumers * staged, rows, width), dtype, swizzle=2 * width)
        return cls(buffer, width, bn // width, staged)

    def slot(self, wg, j: int):
        """Block j's place: rounds of `staged` blocks refill the same places."""
        return self.buffer[wg * self.staged + j - j // self.staged * self.staged]


def store_tile_staged(out, unit: Unit, wg, acc, staging: Staging, *, bm: int, bn: int,
                      rows: int, finish: Finish, run: int = 0) -> None:
    """stmatrix warpgroup `wg`'s rows of the tile into the staging buffer, then TMA-store them.
    Blocks go in runs of `run` (0: a whole round of `staging.staged`): all blocks of a run
    into shared memory first, then one run of bulk stores, so the copies proceed while the
    next tile's MMAs run (codegen defers their read-wait to the next stmatrix into the
    buffer: the next tile's, or the next round's). run must divide staging.staged."""
    run = run or staging.staged
    w = staging.width
    for first in range(0, staging.blocks, run):
        blocks = range(first, min(staging.blocks, first + run))
        for j in blocks:
            ag.stmatrix(staging.slot(wg, j), finish(acc[:, w * j:w * (j + 1)]))
        for j in blocks:
            ag.tma.store(out, (*unit.batch, unit.m * bm + wg * rows, unit.n * bn + w * j),
                         staging.slot(wg, j))


def store_tile_stacked(out, unit: Unit, wg, accs: list, staging: Staging, *, bm: int, bn: int,
                       finish: Finish) -> None:
    """A ping-pong warpgroup's epilogue through shared memory (CUTLASS's ping-pong stores by
    TMA too): its whole bm-row tile, the 64-row accumulators `accs` stacked along the rows of
    each of its staging slots (bm rows each), then one bm-row TMA store per column block. In
    rounds of `staging.staged` blocks, each after the previous round's bulk stores have read
    the slots (codegen defers that wait to the next stmatrix into them, as for
    `store_tile_staged`); a slot is this warpgroup's alone, so no wait crosses warpgroups."""
    w = staging.width
    for first in range(0, staging.blocks, staging.staged):
        blocks = range(first, min(staging.blocks, first + staging.staged))
        for j in blocks:
            for r, acc in enumerate(accs):  # accumulator r: rows [64 r, 64 r + 64) of the tile
                ag.stmatrix(staging.slot(wg, j).rows_of(64 * r, 64),
                            finish(acc[:, w * j:w * (j + 1)]))
        for j in blocks:
            ag.tma.store(out, (*unit.batch, unit.m * bm, unit.n * bn + w * j),
                         staging.slot(wg, j))
