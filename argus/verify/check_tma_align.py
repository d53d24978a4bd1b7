"""TMA coordinate alignment: the innermost coordinate of every tma.load / tma.store starts on a
16-byte boundary of its row.

Job (tma.inner-align; bug class 5): a TMA copy whose innermost box coordinate times the element
size is not a multiple of 16 bytes stops the H200 with CUDA_ERROR_ILLEGAL_INSTRUCTION
(confirmed 2026-12-03: the fp8 kernel's f32 block-scale loads at K-block k, probes in
scripts/gpu_fp8_smem_diag2.py, docs/perf/fp8.md). The interpreter refuses such a copy when it
runs it (argus/runtime/interp/tma.py `_check_inner_alignment`); here it is proven for every
runtime value the model has (loop indices, program ids, scalar parameters under their
`ag.require` / `tag_assume` facts): `coords[-1] * elem_bytes % 16 == 0`, one small linear
query per copy (a constant coordinate is decided by arithmetic).
"""

from __future__ import annotations

import z3

from argus.verify import witness as W
from argus.verify.model import Model, _num
from argus.verify.obligation import Finding, Obligation
from argus.verify.solver import value
from argus.verify.tagdomain import free_consts

ALIGN = 16   # bytes: the start of a TMA box along the innermost dim


def obligations(model: Model) -> tuple[list[Obligation], list[Finding]]:
    obs: list[Obligation] = []
    finds: list[Finding] = []
    sites = [(w.op, w.site, w.tensor.name, w.coords, "load from")
             for writes in model.writes.values() for w in writes if w.kind == "tma"]
    sites += [(st.op, st.site, st.tensor.name, st.offsets, "store to")
              for st in model.stores if st.kind == "tma-store"]
    for op, site, tensor, coords, what in sites:
        if not coords:
            continue
        e = op.tensor.type.dtype.bytes
        inner = _num(coords[-1])
        subject = f"TMA {what} {tensor} at {op.loc}"
        fix = (f"start the box at a multiple of {max(1, ALIGN // e)} elements along the "
               f"innermost dim of {tensor} ({e}-byte elements): round the coordinate down and "
               f"pick the wanted column from the box, or lay the tensor out so the copy starts "
               f"on a 16-byte boundary")
        start = z3.simplify(inner * e)
        if z3.is_int_value(start):
            b = start.as_long()
            if b % ALIGN:
                finds.append(Finding("tma.inner-align", op.loc, subject, "violated",
                                     f"the innermost coordinate {b // e} starts {b} bytes "
                                     f"into a row ({e}-byte elements), not a multiple of "
                                     f"{ALIGN}: the device stops with an illegal instruction",
                                     {"inner_coordinate": b // e, "byte_offset": b,
                                      "elem_bytes": e}, fix))
            else:
                finds.append(Finding("tma.inner-align", op.loc, subject, "proven"))
            continue
        obs.append(_obligation(model, op, site, subject, inner, e, fix))
    return obs, finds


def _obligation(model: Model, op, site, subject: str, inner, e: int, fix: str) -> Obligation:
    claim = (inner * e) % ALIGN == 0
    prem = list(model.premises) + site.constraints()
    prem += model.axiom_instances([claim] + prem)
    names = free_consts(inner)
    # the smallest counterexample reads best (k = 1, not k = 8191)
    minimize = [z3.Int(n) for n in sorted(names)]

    def decode(zm, violated):
        c = value(zm, inner)
        parts = []
        for n in sorted(names):
            info = model.vars.get(n)
            label = n
            if info is not None:
                # the IR name of a loop index or program id: annotate (names.py) rewrites it
                # to the user's Python name and line (k@gemm.py:45)
                label = info.label if info.kind == "param" or info.value is None else \
                    str(info.value)
            parts.append(f"{label} = {value(zm, z3.Int(n))}")
        b = c * e
        msg = (f"{', '.join(parts) or 'a reachable instance'}: the innermost coordinate {c} "
               f"starts {b} bytes into a row ({b % ALIGN} mod {ALIGN}, {e}-byte elements); "
               f"the device stops with an illegal instruction")
        wit = W.context(model, zm, site)
        wit.update({"inner_coordinate": c, "byte_offset": b, "elem_bytes": e})
        return msg, wit

    return Obligation("tma.inner-align", op.loc, subject, prem,
                      [(f"innermost coordinate x {e} B is a multiple of {ALIGN}", claim)],
                      decode, minimize=minimize, fix=fix, tier="LIA")
