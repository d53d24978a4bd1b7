"""The catalogue of built-in invariants, as data: code → title, bug classes, tier, fix.

Job: one table that names every check the verifier runs (the codes in `Diagnostic.code`),
which INVARIANTS.md §4 bug classes it catches, which solver tier decides it, and the generic
fix shown when a violation's own decoder has nothing more specific. docs/verify.md renders it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    code: str
    title: str
    bug_classes: tuple[int, ...]
    tier: str
    fix: str


_RULES = [
    Rule("wgmma.defined", "every wgmma operand element was written (by a TMA copy of this "
         "step, or an earlier shared-memory store) before it is read", (5, 7, 11), "LIA",
         "load the whole operand tile (box = view shape) in the produce step the consume "
         "matches"),
    Rule("wgmma.agree", "wgmma operands agree: A[m, k] and B[n, k] carry the same contracted "
         "coordinate (k) and the same user tags (expert, head, …)", (1, 2, 3, 18, 20, 21), "LIA",
         "load A and B with the same k offset (k * BK) and matching tag functions"),
    Rule("wgmma.k-once", "each k of the reduction is multiplied exactly once (any permutation "
         "is legal): (iteration, k in tile) -> k is injective and covers [0, K)", (2, 14),
         "LIA", "make the k loop run cdiv(K, BK) times with offset k * BK"),
    Rule("wgmma.smem-layout", "what wgmma reads through its descriptor (swizzle, LBO, SBO, k "
         "advance) is the element the TMA copy put there (absolute-address swizzles)",
         (1, 2, 3, 4, 5), "F2/QF_BV",
         "make the descriptor match the buffer: swizzle = the tensor map's, SBO = 8 rows x "
         "row bytes, k16 advance = 32 bytes (bf16, K-major)"),
    Rule("tma.box", "a TMA box fills the smem view row-major (inner extent = the view's "
         "columns, outer extents multiply to its rows) and fits the swizzle span", (5,),
         "arith", "set box = view shape (outermost first); inner box bytes <= swizzle span"),
    Rule("tma.swizzle", "the tensor map's swizzle equals the buffer's (which its readers use)",
         (1,), "arith", "use the buffer's swizzle in the tensor map"),
    Rule("tma.tx-bytes", "expect_tx bytes equal the bytes the step's TMA copies deliver (full "
         "boxes, zero-filled parts included; a multicast box once from every CTA of the "
         "cluster)", (6,), "arith",
         "tx_bytes = own box bytes + cluster size x multicast box bytes of the produce step"),
    Rule("smem.align", "swizzled buffers and each of their stages start on the swizzle period "
         "(1024 B for 128B); every stage and row offset a tma.load or tma.store copies, "
         "swizzled or not, starts on 128 B; buffers fit the CTA's shared memory and do not "
         "overlap", (4,), "arith",
         "align the buffer to the swizzle period and keep stage sizes multiples of it; pad "
         "each TMA-copied stage to a multiple of 128 bytes"),
    Rule("tma.inner-align", "every tma.load / tma.store starts its box on a 16-byte boundary "
         "of the row: innermost coordinate x element bytes is a multiple of 16 for every "
         "runtime value (loop indices, program ids, parameters under their requires); else "
         "the device stops with an illegal instruction", (5,), "LIA",
         "start the box at a multiple of 16 / element-bytes elements along the innermost dim "
         "(round the coordinate down and pick the wanted column from the box)"),
    Rule("pipe.producers", "one thread arrives on a slot's full barrier per pipeline step: "
         "one producer warpgroup, and in it the threads of the `elect` around the step (the "
         "full barrier's init count, PipelineCreate.FULL_ARRIVALS = 1, expects one "
         "arrive.expect_tx)", (6, 13), "arith",
         "give the producer role warpgroups=1 (lower/elect.py elects one of its threads), or "
         "guard the produce with a uniform condition"),
    Rule("pipe.totals", "producer and consumers run the same number of steps, and so do the "
         "CTAs of a cluster whose pipelines are coupled (else the last slots are never filled "
         "or never released: a hang)", (10, 14), "LIA",
         "iterate the same loops in the producer and consumer roles"),
    Rule("pipe.arrivals", "the empty barrier's arrival count equals the consumer warpgroups "
         "that release each step, times the CTAs whose slots they release (peers: the "
         "cluster size when the pipeline's loads multicast, else 1)", (6, 23), "arith",
         "arrivals = consumer warpgroups x peers (ag.pipeline(..., consumers=W))"),
    Rule("pipe.slot", "the slot a step uses is the ring slot n % S of its counter, identical "
         "in producer and consumer", (7, 9, 10), "LIA",
         "stage = n % S with n the role's step counter, continued across loops"),
    Rule("pipe.data", "O1: the slot a consumer reads at step i holds the tile of step i "
         "(parity waits, unbounded i)", (7, 9, 10), "LIA",
         "consumer full-barrier parity (n / S) & 1"),
    Rule("pipe.no-overwrite", "O2: a producer never refills a slot its consumers have not "
         "released (C <= P <= C + S stays inductive); in a cluster, no CTA's producer multicasts "
         "into a slot another CTA's consumers still read", (8, 11), "LIA",
         "producer empty-barrier parity ((n / S) & 1) ^ 1"),
    Rule("pipe.no-early-read", "O3: a consumer never passes its wait before the slot is "
         "filled", (7,), "LIA", "consumer full-barrier parity (n / S) & 1"),
    Rule("pipe.deadlock", "O4: no reachable state where both roles wait forever", (8, 10),
         "LIA", "fix the parity expressions; keep fewer than S wgmma groups in flight"),
    Rule("pipe.release", "a slot is released only after the wgmma/TMA-store reading it "
         "retired, and every read of a pipelined buffer is inside its consume step", (11, 24),
         "LIA", "read stage buffers only inside `with pipe.consume() as st:` using `st`"),
    Rule("proxy.fence", "a generic-proxy smem write (stmatrix, st.shared) is fenced "
         "(fence.proxy.async) before an async-proxy read (wgmma, TMA store)", (12,), "arith",
         "emit fence.proxy.async.shared::cta after the writes and before the async read"),
    Rule("wgmma.a-fragment", "a register A operand of wgmma is held in the A fragment (the "
         "accumulator pattern of a 64-row tile), so each thread feeds the elements it holds",
         (2,), "arith", "pass a tile converted from a 64-row accumulator (p = s.to(ag.bf16)) "
         "or loaded as a wgmma A operand"),
    Rule("ordered.pairs", "each ordered section (ag.ordered) opens and closes in one region, "
         "not nested in another section, a produce step or a consume step of a pipeline the "
         "role skips steps of", (10,), "arith",
         "open and close each section with one `with ag.ordered(name):` block"),
    Rule("ordered.barriers", "an ordered section's turn barriers: one id per warpgroup, the "
         "same at its wait and pass, 256 threads, clear of the CTA and group barriers and of "
         "other sections, one initial pass at the role's start", (10,), "arith",
         "lower/sync.py numbers them: barriers[w] waited on by warpgroup w, passed to by w - 1"),
    Rule("ordered.turns", "every warpgroup reaches an ordered section in its turn: in each "
         "iteration all warpgroups run it, or exactly warpgroup i % W, in a loop that no "
         "other loop repeats or whose trip count is a multiple of W (no skipped turn, no "
         "deadlock, sections in round-robin order)", (10,), "LIA",
         "run the section in every warpgroup, or in warpgroup i % W in iteration i"),
    Rule("ordered.skip", "a warpgroup that skips pipeline steps (pipe.skip) consumes its own "
         "steps inside an ordered section, so the steps are taken in ring order", (10, 14),
         "arith", "wrap the consume loop in `with ag.ordered(name):`"),
    Rule("sync.release", "a pipeline slot is released (pipe.release) only after every wgmma "
         "group reading it retired (wgmma.wait), on every path of the explicit sync ops",
         (11,), "arith", "retire the step's wgmma group (wait 0, or wait 1 and release the "
         "previous slot) before the release; lower/sync.py places it"),
    Rule("sync.acc", "no op reads or writes a wgmma's accumulator or register A operand "
         "while the group that uses it is still in flight (before the wgmma.wait retiring it)",
         (11,), "arith", "wait for the group (wgmma.wait 0) before the tile is read or "
         "overwritten; lower/sync.py places it before the first such use"),
    Rule("sync.arrive", "each consume step's slot is released exactly once on every path (a "
         "pipe.release of it, or one that holds it until the next step's or the role's last "
         "release): one arrive per consumer warpgroup per phase of its empty barrier, the "
         "arrival count its init count expects", (6, 8, 23), "arith",
         "one pipe.release per consume step and a release of the held slot after the last "
         "step (lower/sync.py places them)"),
    Rule("sync.elect", "an `elect` holds only work one thread does for its group (index "
         "math, control, scalar reads, produce steps, TMA loads; ir.ops.electable), is not "
         "nested, and elects a divisor of the group's threads: a wgmma, barrier or register "
         "tile op run by some threads of a warpgroup hangs or computes for those threads only",
         (6, 13), "arith", "keep the elected body to index math, scalar reads and TMA loads; "
         "lower/elect.py elects only such roles"),
    Rule("sync.store-read", "a shared-memory write (stmatrix, a TMA load) follows every bulk "
         "tensor store that may read the same slot: the issuing thread's "
         "cp.async.bulk.wait_group.read N retired the store's group (older than the newest N, "
         "in commit order) and a group barrier since then orders the other threads' writes",
         (11,), "arith", "wait_group.read N (N = the groups committed after the newest store "
         "of an aliasing slot) and a group barrier before the write (lower/sync.py places "
         "them)"),
    Rule("sync.exchange", "a gather from a shared view (ag.gather of a buffer the group "
         "wrote with store_shared) comes after a group barrier that follows the buffer's "
         "writes, and the buffer's next write after a barrier that follows the gather: the "
         "threads read elements other threads wrote (a buffer another role writes is "
         "never proven: no barrier orders two roles' generic accesses; in a role of several "
         "warpgroups, whose barrier orders one warpgroup, no element a warpgroup gathers is "
         "written by another warpgroup of the role)", (11,), "arith",
         "a group barrier between the writes and the gather, and between the gather and the "
         "next write (lower/sync.py places them); the writes in the gathering role, and in "
         "the gathering warpgroup (index the rows by the warpgroup)"),
    Rule("sync.fixpoint", "the sync check of a loop settles (else its findings are unknown)",
         (), "arith", "report the kernel: the loop's pending state did not converge"),
    Rule("smem.race", "no two warpgroups touch the same shared bytes unordered (one of them "
         "writing), and the TMA copies filling one slot in one step (every CTA's, in a "
         "cluster) write disjoint rows", (12, 22), "LIA",
         "give each warpgroup its own rows (rows_of(wg * rows, rows)) or order them with the "
         "pipeline"),
    Rule("smem.bounds", "every shared-memory view lies inside its buffer and stage", (5,),
         "LIA", "keep row0 + rows <= buffer rows for every warpgroup index"),
    Rule("smem.gather-inside", "a gather from a shared view whose trace proved an index "
         "inside the view (SmemGather.inside: codegen drops that dim's bounds check) names an "
         "index inside the view for every element and thread", (5,), "LIA",
         "keep the index in [0, extent) (clamp it, or send an outside element through "
         "ag.where(..., -1) so its guard stays)"),
    Rule("smem.dead", "every shared-memory buffer a TMA copy fills is read (by a wgmma, an "
         "ldmatrix, a TMA store or a tag assertion): a copy nothing reads is data the kernel "
         "loaded for a use that reads another buffer instead (a warning)", (3, 21), "arith",
         "pass the buffer the data was loaded into to the op meant to read it (the reads of "
         "the buffers filled beside it are listed), or drop the copy"),
    Rule("ew.broadcast", "a broadcast operand (a row or column vector) describes the same "
         "rows/columns as the tile it is combined with", (16, 17, 19), "LIA",
         "load or reduce the vector at the tile's offsets"),
    Rule("ew.agree", "two tiles combined element by element (`X[b] + Y[b]`) describe the same "
         "element: the coordinate fields both carry as points agree at every element, for "
         "the fields of the tensors the result is stored into (the batch, row and column of "
         "each operand; user tags and a field no destination has, split-K's slice, are not "
         "compared)", (17, 19, 20), "LIA",
         "load both operands at the same offsets (the batch index, not a constant; the "
         "column tile j, not j + 1)"),
    Rule("reduce.layout", "a row reduction over a thread-distributed tile sees every element "
         "of its row exactly once and no other row", (16,), "QF_BV/LIA",
         "reduce within the threads that hold the row (quad shuffles xor 1, 2 for wgmma "
         "accumulators)"),
    Rule("store.coords", "every stored element carries its own coordinates (tag == "
         "destination), for rows, columns and user tags of the output", (13, 14, 22), "LIA",
         "store the tile at the offsets its data came from"),
    Rule("store.once", "no output element is stored twice (by two CTAs, warpgroups, "
         "iterations or elements)", (14,), "LIA",
         "offset each warpgroup's/CTA's store by its own index"),
    Rule("store.coverage", "every output element is stored (grid x tile covers the output)",
         (14,), "LIA", "launch cdiv(extent, tile) CTAs and step by the tile size"),
    Rule("reduce.coverage", "a reduction carried over a loop sees every element of its row "
         "(or segment) exactly once: the loop's blocks cover [0, extent) without overlap",
         (16,), "LIA", "run the loop over cdiv(extent, block) blocks at offset j * block and "
         "mask the tail"),
    Rule("reduce.mean", "a mean (a sum divided by a count) divides by the number of elements "
         "the sum combined: the reduced extent (the row's length), proven from the "
         "reduction's coverage, not the block width", (15, 16), "LIA",
         "divide by the reduced extent (X.shape[1]), not by the block size"),
    Rule("fill.identity", "a masked load's fill value is the identity of the reduction that "
         "consumes the masked elements (-inf before a max, +inf before a min, 0 before a sum)",
         (15,), "arith", "load with other=<the reduction's identity>"),
    Rule("softmax.stats", "an online softmax rescales its running sum and output accumulator "
         "from the running max they are relative to (alpha = exp(m_prev - m_new)), adds only "
         "terms relative to the same max, and stores the output divided by the row sum carried "
         "with that max", (17,), "arith",
         "rescale by exp(m_prev - m_new) before adding the block's terms, and store o / l"),
    Rule("reduce.slices", "a sum of partials (split-K's second half: C = P[0] + P[1] + ...) "
         "adds every slice of the partials exactly once: distinct slices, inside the tensor, "
         "as many as it has", (2, 14), "LIA", "add each slice index once, 0 .. splits - 1"),
    Rule("wgmma.provenance", "each wgmma operand is read from data of the tensor its role "
         "names: A from A's tensor (rows of the output), B from B's (columns), not the other "
         "operand's buffer", (1, 3, 21), "LIA", "pass the buffer the B tensor was loaded into"),
    Rule("grid.cluster", "every clustered grid extent is a multiple of the cluster size for "
         "every shape (a partial cluster cannot launch)", (14,), "LIA",
         "round the extent up: ag.cdiv(M, cluster * BM) * cluster"),
    Rule("regs.budget", "the warp roles' setmaxnreg counts fit the CTA's share of the "
         "register file: sum of regs x 128 x warpgroups <= 65536 / CTAs per SM (a "
         "setmaxnreg.inc the file cannot grant waits forever)", (), "arith",
         "lower a role's regs (e.g. 240/240/24 = 64512 for two consumers and a producer)"),
    Rule("atomic.exclusive", "a tensor that atomics update is not also stored, TMA-stored or "
         "read by a plain load in the kernel (a plain access racing other CTAs' atomics)",
         (14,), "arith", "keep counters and atomic accumulators in tensors of their own"),
    Rule("atomic.tickets", "a self-resetting counter (atomic_fetch_add with wrap) is reached "
         "unconditionally by exactly `wrap` instances per element, so they draw the old values "
         "0 .. wrap - 1 once each (one draws wrap - 1) and leave it at 0; a guard comparing the "
         "old value lets through the last arrival only (old == wrap - 1)", (14,), "LIA",
         "index the counter by every program id but one, whose grid extent is the wrap"),
    Rule("pdl.wait-first", "in a kernel that waits for its predecessor (ag.wait_prior_grids), "
         "every global store and atomic, and every load of a tensor not declared stable, comes "
         "after the wait on every path of every role", (), "arith",
         "move the access after ag.wait_prior_grids(), or declare a weight stable=(W,)"),
    Rule("pdl.trigger", "ag.allow_dependent_launch comes after the kernel's own "
         "ag.wait_prior_grids (else the dependent may run beside this kernel's predecessor)",
         (), "arith", "call ag.wait_prior_grids() first"),
    Rule("pdl.placement", "ag.wait_prior_grids sits at the top level of the kernel or of a "
         "role, where it dominates what follows", (), "arith",
         "move it out of the loop or branch, before the first one"),
    Rule("pdl.stable", "a kernel writes no tensor it declares stable in "
         "ag.wait_prior_grids (a following PDL launch reads it before its own wait)", (),
         "arith", "drop the tensor from stable=(...) and load it after the wait"),
    Rule("lower", "the kernel lowers (a lowering pass rejects a construct it cannot compile)",
         (), "-", "see the message: the pass says what to change"),
    Rule("tag.assert", "a user tag assertion", (), "LIA/UF", "see the assertion's message"),
    Rule("uniform", "warpgroup-wide instructions (wgmma, pipeline steps) run under uniform "
         "conditions", (23,), "arith", "guard them with a condition that does not depend on "
         "the thread index"),
    Rule("model", "the verifier could represent this construct exactly", (), "-",
         "simplify the construct, or report it so the model can be extended"),
]

RULES: dict[str, Rule] = {r.code: r for r in _RULES}
