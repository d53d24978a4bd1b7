"""wgmma.provenance: each wgmma operand is read from its own operand's data.

Job (bug classes 1, 3, 21): the accumulator element (m, n) is the dot product of A's row m and
B's row n. Its row coordinate must come from A and its column coordinate from B; when the B
operand reads A's buffer (`ag.wgmma(sA[st], sA[st], acc)`), B's rows carry A's row coordinate
(m), the tags of the two operands collide in the accumulator (the column coordinate n never
appears), and the store's coordinate check has no column to compare. This check needs no tag
field of the output: a coordinate field that varies with the accumulator row in A and with the
accumulator column in B means both operands read the same tensor's rows (and the same buffer
when they are one view): the product is A Aᵀ, not A Bᵀ. (A Gram matrix A Aᵀ is the one legal
kernel of that shape; write it from two loads into two buffers.)
"""

from __future__ import annotations

import z3

from argus.verify import witness as W
from argus.verify.model import Model, b_index
from argus.verify.obligation import Finding
from argus.verify.tagdomain import META_FIELDS, fresh_int, mentions


def obligations(model: Model) -> tuple[list, list[Finding]]:
    finds: list[Finding] = []
    seen: set = set()
    # tensor coordinates only: user tags (an expert) are meant to vary on both sides alike
    coords = {n for info in model.tensors.values() for n in info.field_names}
    for site in model.wgmmas:
        op = site.op
        if (op.loc.file, op.loc.line) in seen:
            continue
        mm, n, kk = fresh_int("m"), fresh_int("n"), fresh_int("kk")
        ra = model.wgmma_a(site, mm, kk)
        rb = model.read_smem(site.b, b_index(site.b, n, kk, op.k_extent, op.trans_b),
                             site.site)
        subject = f"wgmma at {op.loc} (a = {site.a_name}, b = {site.b.buffer})"
        ta, tb = ra.fields.get("tensor"), rb.fields.get("tensor")
        ta, tb = (None if t is None else z3.simplify(t.term) for t in (ta, tb))
        if ta is not None and tb is not None and z3.is_int_value(ta) and \
                z3.is_int_value(tb) and ta.as_long() != tb.as_long():
            # two tensors whose rows share a dim name (self-attention's Q["S", D] and
            # K["S", D]): equal lengths, two coordinates; B reads its own tensor
            finds.append(Finding("wgmma.provenance", op.loc, subject, "proven"))
            continue
        clash = sorted(name for name in set(ra.fields) & set(rb.fields)
                       if name in coords and name not in META_FIELDS
                       and ra.fields[name].is_point and rb.fields[name].is_point
                       # the contracted coordinate (k) varies with kk on both sides, and a
                       # stage of several k slices selects its slice by row: not a clash
                       and not mentions(ra.fields[name].term, kk)
                       and not mentions(rb.fields[name].term, kk)
                       and mentions(ra.fields[name].term, mm)
                       and mentions(rb.fields[name].term, n))
        if not clash:
            finds.append(Finding("wgmma.provenance", op.loc, subject, "proven"))
            continue
        seen.add((op.loc.file, op.loc.line))
        same_view = site.a is not None and site.a.buffer.id == site.b.buffer.id
        wit = {"accumulator": (0, 1), "element": (0, 1), **W.acc_thread(0, 1),
               "field": clash[0], "a_source": ra.source, "b_source": rb.source,
               "a_buffer": str(site.a.buffer) if site.a is not None else site.a_name,
               "b_buffer": str(site.b.buffer)}
        what = (f"B is the same shared-memory buffer as A ({site.b.buffer})" if same_view
                else f"B's rows come from the same tensor rows as A's ({rb.source})")
        finds.append(Finding(
            "wgmma.provenance", op.loc, subject, "violated",
            f"{what}: accumulator column n (thread 0, warp 0, lane 0, d[1] holds element "
            f"(0, 1)) is multiplied by an element whose '{clash[0]}' varies with the column, "
            f"the coordinate A's rows carry; the result is A·Aᵀ, and the output's column "
            f"coordinate is never read", wit,
            fix=f"pass the buffer B was loaded into as the wgmma's B operand (not "
                f"{site.b.buffer})"))
    return [], finds
