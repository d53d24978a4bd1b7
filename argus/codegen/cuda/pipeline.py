"""Rendering rules of the TMA pipelines: pipeline.create (the full/empty mbarrier rings in
shared memory), produce and consume (one step: wait on the slot, the body, count the step).

The stage and parity expressions, the transaction bytes and the consumer counts were decided by
lowering (lower/pipeline.py); the slot releases and waits are sync ops in the bodies.
"""

from __future__ import annotations

from argus.codegen.cuda.emit import _Emitter, rule
from argus.ir import ops as O


@rule(O.PipelineCreate)
def pipeline_create(em: _Emitter, op: O.PipelineCreate) -> None:
    stages = op.result.type.stages
    offset = em.smem_offset(op.result.id)
    em.pipes[op.result.id] = stages
    em.peers[op.result.id] = op.peers
    em.emit(f"ag::uint64_t* const full{op.result.id} = "
            f"reinterpret_cast<ag::uint64_t*>(smem + {offset});")
    em.emit(f"ag::uint64_t* const empty{op.result.id} = full{op.result.id} + {stages};")
    if op.payload:  # one int32 word per slot after the barriers (lower/smem.py sizes it)
        em.emit(f"int* const pay{op.result.id} = "
                f"reinterpret_cast<int*>(empty{op.result.id} + {stages});")
    em.emit("if (threadIdx.x == 0) {")
    em.emit(f"    for (int s = 0; s < {stages}; ++s) {{")
    em.emit(f"        ag::mbar_init(&full{op.result.id}[s], {op.FULL_ARRIVALS});")
    em.emit(f"        ag::mbar_init(&empty{op.result.id}[s], {op.consumers * op.peers});")
    em.emit("    }")
    em.emit("    ag::fence_barrier_init();")
    em.emit("}")
    em.names[op.result.id] = f"pipe{op.result.id}"


def _render_expr(expr: str, n: str, stages: int) -> str:
    # stage/parity expressions use n (the step counter) and S; C semantics.
    return "(" + expr.replace("n", n).replace("S", str(stages)) + ")"


def _pipeline_step(em: _Emitter, op, kind: str) -> None:
    pid = op.pipe.id
    stages = em.pipes[pid]
    n = f"n{pid}"
    st = f"v{op.stage.id}"
    em.names[op.stage.id] = st
    em.emit("{")
    em.indent += 1
    em.emit(f"const int {st} = {_render_expr(op.stage_expr, n, stages)};")
    bar = f"empty{pid}" if kind == "produce" else f"full{pid}"
    em.emit(f"ag::mbar_wait(&{bar}[{st}], {_render_expr(op.parity_expr, n, stages)});")
    if kind == "produce":
        if op.payload is not None:  # before the arrive, by its thread: the arrive releases it
            em.emit(f"pay{pid}[{st}] = {em.name(op.payload)};")
        em.emit(f"ag::mbar_arrive_expect_tx(&full{pid}[{st}], {op.tx_bytes});")
        em.current_full = f"&full{pid}[{st}]"
        em.region(op.body)
    else:
        em.region(op.body)  # its waits and slot release are ops of the body (lower/sync)
    em.emit(f"{n} += 1;")
    em.indent -= 1
    em.emit("}")


@rule(O.Produce)
def produce(em: _Emitter, op: O.Produce) -> None:
    _pipeline_step(em, op, "produce")


@rule(O.Consume)
def consume(em: _Emitter, op: O.Consume) -> None:
    _pipeline_step(em, op, "consume")


@rule(O.PipeSkip)
def pipe_skip(em: _Emitter, op: O.PipeSkip) -> None:
    steps = op.steps if isinstance(op.steps, int) else em.name(op.steps)
    em.emit(f"n{op.pipe.id} += {steps} > 0 ? {steps} : 0;  // steps another warpgroup "
            f"consumes in its turn")


@rule(O.PipePayload)
def pipe_peek(em: _Emitter, op: O.PipePayload) -> None:
    """The wait of the role's next consume step (its slot and parity from the step counter),
    then the slot's payload word: the wait acquires the producer's write, which came before
    its arrive. volatile: the compiler must not move the load above the wait (asm)."""
    pid = op.pipe.id
    stages = em.pipes[pid]
    n = f"v{op.result.id}"
    slot = _render_expr(op.stage_expr, f"n{pid}", stages)
    em.emit(f"ag::mbar_wait(&full{pid}[{slot}], "
            f"{_render_expr(op.parity_expr, f'n{pid}', stages)});  // peek at the next fill")
    em.emit(f"const int {n} = *(volatile int*)&pay{pid}[{slot}];")
    em.names[op.result.id] = n
