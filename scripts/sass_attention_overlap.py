"""Does the machine code overlap the softmax with the P V wgmma? Read from the SASS (CPU only).

For each attention schedule given, compiles the kernel with NVRTC for sm_90a (verification
off: this is about code generation), disassembles it with nvdisasm and reports, for every
register-A P V HGMMA group (the `.tnspB` HGMMA carrying `gsb0`): how many MUFU.EX2 (the
softmax's exp2) ptxas scheduled between it and the `WARPGROUP.DEPBAR.LE gsb0, 0x0` that
retires it, and whether ptxas reported that it serialized the wgmma (C7512). lower/sync.py
places `wgmma.wait 0` after the softmax in the fa3_overlap schedule (the PTX has the exp2
before the wait); ptxas may still hoist the wait, and this is where that shows.

Usage: python3 scripts/sass_attention_overlap.py [--dims 64,128,256] [--block-n N]
       (nvdisasm from PATH or NVDISASM=; pip wheel nvidia-cuda-nvdisasm has one)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from argus.runtime.sass import NO_DISASSEMBLER, have_disassembler, sass_text


def overlap_report(head_dim: int, causal: bool, schedule) -> list[str]:
    from argus.kernels.attention import attention_kernel

    compiled = attention_kernel(head_dim, causal=causal).compile(s=schedule)
    serialized = "C7512" in compiled.binary.log or "serialized" in compiled.binary.log
    sass = sass_text(compiled.binary.cubin).splitlines()
    out = []
    for i, line in enumerate(sass):
        if "HGMMA" not in line or ".tnspB" not in line or "gsb0" not in line:
            continue
        end = next((j for j in range(i + 1, len(sass))
                    if "WARPGROUP.DEPBAR.LE gsb0, 0x0" in sass[j]), len(sass))
        exps = sum("MUFU.EX2" in sass[j] for j in range(i + 1, end))
        out.append(f"  P V group at SASS line {i + 1}: {end - i - 1} instructions before "
                   f"its wait 0, {exps} MUFU.EX2 of them")
    head = (f"d{head_dim} {'causal' if causal else 'full'} block_n={schedule.block_n} "
            f"consumers={schedule.consumers} fa3_overlap={schedule.fa3_overlap}: "
            f"{'SERIALIZED by ptxas (C7512)' if serialized else 'not serialized'}")
    return [head, *out]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", default="64,128,256")
    parser.add_argument("--block-n", type=int, default=0, help="override block_n")
    parser.add_argument("--default", action="store_true", help="the default schedule too")
    args = parser.parse_args()
    if not have_disassembler():
        print(NO_DISASSEMBLER, file=sys.stderr)
        return 2
    os.environ["ARGUS_VERIFY"] = "0"
    from argus.kernels.attention import default_schedule, fa3_overlap_schedule

    for d in (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            schedules = [fa3_overlap_schedule(d, causal)]
            if args.default:
                schedules.append(default_schedule(d, causal))
            for s in schedules:
                if args.block_n:
                    s = dataclasses.replace(s, block_n=args.block_n)
                print("\n".join(overlap_report(d, causal, s)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
