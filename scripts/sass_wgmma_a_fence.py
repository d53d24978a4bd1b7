"""The wgmma register-A fence, copy or pin, in the machine code of every library attention
schedule with register-A wgmma (CPU only: NVRTC for sm_90a, then nvdisasm).

lower/sync.py (_a_copy) copies the A registers (identity prmt, device header fence_operands)
only where the fragment is defined outside the loop issuing the wgmma (ping-pong's Q) and pins
them (empty asm, pin_operands) where the loop defines or rewrites it (P); ARGUS_WGMMA_A_FENCE=
copy copies at every fence (commit 9879b96's fence, the "before" column). Per schedule and
fence: PRMT and HGMMA / QGMMA in the KV loop (argus.runtime.sass.k_loop: the innermost loop
with a wgmma and an exp2, one trip = one KV block), registers, spill bytes, and the findings of
argus.runtime.sass.register_a_hazards (an A register written while its wgmma may read it, or
Q's loop-invariant registers overwritten in the loop and not restored). Then the other library
kernels with register A (flash-decoding, the pointwise NCHW convolution), whose fragments the
loop defines. Exits 1 when any build has a finding.

Usage: NVDISASM=/path/to/nvdisasm python3 scripts/sass_wgmma_a_fence.py [--only NAME,...]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys

from argus.runtime.sass import (NO_DISASSEMBLER, have_disassembler, k_loop, register_a_hazards,
                                sass_text)


def schedules():
    """(name, head_dim, dtype name, causal, schedule): every library attention schedule that
    issues register-A wgmma."""
    from argus.kernels.attention import base_schedule, default_schedule, fp8_schedule

    out = []
    for d in (64, 128, 256):
        for causal in (False, True):
            mask = "causal" if causal else "full"
            out.append((f"default d{d} {mask}", d, "bf16", causal, default_schedule(d, causal)))
    # the defaults' short-sequence forms: two CTAs an SM (hd64, the plain loop), the
    # persistent walk with Q released early (full) or in snake order (causal)
    for d, causal, seq in ((64, True, 2048), (64, False, 1024), (128, False, 1024),
                           (128, True, 4096), (256, True, 2048)):
        mask = "causal" if causal else "full"
        out.append((f"default d{d} {mask} S{seq}", d, "bf16", causal,
                    default_schedule(d, causal, seq)))
    for d in (64, 128):
        for causal in (False, True):
            mask = "causal" if causal else "full"
            out.append((f"pingpong d{d} {mask}", d, "bf16", causal,
                        dataclasses.replace(base_schedule(d), ordered=True)))
    for d in (128, 256):
        out.append((f"packp d{d} full", d, "bf16", False,
                    dataclasses.replace(default_schedule(d, False), packed_p=True)))
    for d, packp in ((64, True), (128, False)):
        s = default_schedule(d, False)
        if s.ctas_per_sm > 1 or not s.fa3_overlap:
            base = base_schedule(d)
            s = dataclasses.replace(s, **{f: getattr(base, f) for f in (
                "block_m", "block_n", "consumers", "producer_regs", "consumer_regs",
                "ctas_per_sm", "tile_order")})
        out.append((f"ppfa3 d{d} full{'+packp' if packp else ''}", d, "bf16", False,
                    dataclasses.replace(s, ordered=True, fa3_overlap=True,
                                        intra_wg_overlap=False, own_blocks=False,
                                        packed_p=packp)))
    for d in (64, 128, 256):
        for causal in (False, True):
            mask = "causal" if causal else "full"
            out.append((f"fp8 d{d} {mask}", d, "e4m3", causal, fp8_schedule(d, causal)))
    return out


def invariant(line: str) -> bool:
    """S = Q K^T with A in registers (ping-pong's Q, loaded before the KV loop): a bf16 HGMMA
    whose B is not transposed (P V reads V with .tnspB; the FP8 kernel keeps Q in shared
    memory, so its register-A QGMMA are all P V)."""
    return "HGMMA" in line and ".tnspB" not in line


def others():
    """(name, build, loop marks): the other library kernels with register-A wgmma, whose A
    fragment the loop defines (the pin since h314): flash-decoding's P (packed at the issue)
    and the pointwise NCHW convolution's tf32 A (loaded from shared memory each step)."""
    from argus.kernels.attention_decode import decode_kernel, default_decode_schedule
    from argus.kernels.conv_pointwise_nchw import pointwise_nchw_kernel

    return [("decode d128", lambda: decode_kernel(128).compile(s=default_decode_schedule(128)),
             ("MUFU.EX2",)),
            ("pointwise nchw 64x128", lambda: pointwise_nchw_kernel(64, 128).compile(), ())]


def report(name, d, dtype, causal, schedule, fence: str, build=None, also=("MUFU.EX2",),
           never_invariant: bool = False) -> dict:
    """One kernel built with `fence` ("copy" or "auto"): its KV-loop and kernel counts,
    resources and register-A hazards (`never_invariant`: no A fragment is loop-invariant)."""
    from argus import dtypes
    from argus.kernels.attention import attention_kernel

    os.environ["ARGUS_WGMMA_A_FENCE"] = fence
    if build is not None:
        compiled = build()
    else:
        dt = dtypes.bf16 if dtype == "bf16" else dtypes.e4m3
        compiled = attention_kernel(d, dt, causal, False, schedule.permuted_vt).compile(
            s=schedule)
    sass = sass_text(compiled.binary.cubin)
    op = "QGMMA" if dtype == "e4m3" else "HGMMA"
    loop = "\n".join(k_loop(sass, op, also=also))
    regs = re.search(r"Used (\d+) registers", compiled.binary.log)
    spill = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", compiled.binary.log)
    return {"prmt": len(re.findall(r"\bPRMT\b", loop)), "gmma": len(re.findall(op, loop)),
            "prmt_all": len(re.findall(r"\bPRMT\b", sass)),
            "regs": int(regs.group(1)) if regs else None,
            "spill": "/".join(spill[0]) if spill else "?",
            "hazards": register_a_hazards(sass, (lambda line: False) if never_invariant
                                          else invariant)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="", help="comma-separated substrings of names")
    args = parser.parse_args()
    if not have_disassembler():
        print(NO_DISASSEMBLER, file=sys.stderr)
        return 2
    os.environ["ARGUS_VERIFY"] = "0"   # machine code only; tests/verify proves the schedules
    only = [x for x in args.only.split(",") if x]
    print("| schedule | KV-loop PRMT copy -> pin | wgmma in loop | kernel PRMT copy -> pin "
          "| registers copy -> pin | spill st/ld copy -> pin | hazards copy / pin |")
    print("|---|---|---|---|---|---|---|")
    rows = [(name, (d, dtype, causal, schedule), {})
            for name, d, dtype, causal, schedule in schedules()]
    rows += [(name, (0, "bf16", False, None), {"build": build, "also": also,
                                                "never_invariant": True})
             for name, build, also in others()]
    failed = 0
    for name, args_, extra in rows:
        if only and not any(x in name for x in only):
            continue
        a, b = (report(name, *args_, f, **extra) for f in ("copy", "auto"))
        failed += bool(a["hazards"] or b["hazards"])
        print(f"| {name} | {a['prmt']} -> {b['prmt']} | {b['gmma']} | {a['prmt_all']} -> "
              f"{b['prmt_all']} | {a['regs']} -> {b['regs']} | {a['spill']} -> {b['spill']} | "
              f"{len(a['hazards'])} / {len(b['hazards'])} |", flush=True)
        for h in a["hazards"] + b["hazards"]:
            print(f"    {name}: {h}", flush=True)
    os.environ.pop("ARGUS_WGMMA_A_FENCE", None)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
