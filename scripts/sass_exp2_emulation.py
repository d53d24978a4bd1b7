"""How the softmax's exp2 splits between the SFU and the FMA pipe in the machine code, per
exp2_emulate count (AttentionSchedule.exp2_emulate; argus/target/exp2_emulation.py). CPU only.

For each case (the FP8 forward at head_dim 128 with the permuted V^T, and the bf16 forward at
head_dim 64, full and causal, at their op's schedules) and each count, compiles the kernel
with NVRTC for sm_90a (verification off: this is about code generation), disassembles it with
nvdisasm and prints, for the KV loop (kv_loop: one K block per iteration, the steady state),
how many MUFU.EX2, FFMA / FADD / FMUL / FMNMX and integer instructions it holds, per thread,
and the ptxas report's registers and spill bytes. With count c of 16, a 128-key block moves
c / 16 of the 64 (block_n / 2) exp2 per thread onto the FMA pipe: the MUFU.EX2 count should
drop by 4c at block_n 128 and FFMA / FADD / FMUL grow by 3 / 3 / 1 per moved exp2.

Usage: python3 scripts/sass_exp2_emulation.py [--counts 0,2,4,6] [--cases fp8_128,bf16_64]
       (nvdisasm from PATH or NVDISASM=; pip wheel nvidia-cuda-nvdisasm has one)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys
from collections import Counter

from argus.runtime.sass import NO_DISASSEMBLER, have_disassembler, k_loop, sass_text

_OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)"
                     r"((?:\.[A-Za-z0-9_]+)*)")
_SHOWN = ("MUFU.EX2", "FFMA", "FADD", "FMUL", "FMNMX", "SHF/SHL", "IMAD", "integer other",
          "SHFL", "F2FP", "total")
_INTEGER = ("IADD3", "LEA", "LOP3", "ISETP", "SEL", "IMNMX", "VIADD", "PRMT", "IABS")


def schedule_of(case: str, causal: bool):
    from argus.kernels.attention import default_schedule, fp8_schedule

    dtype, d = case.split("_")
    return int(d), dtype, (fp8_schedule(int(d), causal) if dtype == "fp8"
                           else default_schedule(int(d), causal, 4096))


def kv_loop(sass: str, gemm: str) -> list[str]:
    """The SASS lines of the KV loop: the shortest loop around a `gemm` wgmma that also holds
    a MUFU.EX2 (the row rescale's exp2 stays on the SFU at any count; the shortest loop
    around a wgmma alone can be a smaller one, e.g. the epilogue's)."""
    return k_loop(sass, gemm, also=("MUFU.EX2",))


def loop_counts(sass: str, gemm: str) -> Counter[str]:
    """Opcode counts of the KV loop (kv_loop)."""
    out: Counter[str] = Counter()
    for line in kv_loop(sass, gemm):
        m = _OPCODE.match(line)
        if not m:
            continue
        op, mods = m.group(1), m.group(2)
        if op == "MUFU":
            op = "MUFU" + (mods.split(".")[1:2] and "." + mods.split(".")[1] or "")
        elif op in ("SHF", "SHL") or (op == "IMAD" and ".SHL" in mods):
            op = "SHF/SHL"
        elif op in _INTEGER:
            op = "integer other"
        out[op] += 1
        out["total"] += 1
    return out


def report(case: str, causal: bool, count: int) -> str:
    import argus as ag
    from argus.kernels.attention import attention_kernel

    d, dtype, s = schedule_of(case, causal)
    fp8 = dtype == "fp8"
    # FP8: the kernel the op runs when it transposes V itself (permuted_vt: no P shuffles)
    s = dataclasses.replace(s, exp2_emulate=count, permuted_vt=fp8)
    compiled = attention_kernel(d, ag.e4m3 if fp8 else ag.bf16, causal, False,
                                fp8).compile(s=s)
    log = compiled.binary.log
    regs = re.search(r"Used (\d+) registers", log)
    spills = re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    sass = sass_text(compiled.binary.cubin)
    counts = loop_counts(sass, "QGMMA" if fp8 else "HGMMA")
    cells = "  ".join(f"{k}={counts.get(k, 0)}" for k in _SHOWN)
    spill = ",".join(f"{a}/{b}" for a, b in spills) or "?"
    return (f"{case} {'causal' if causal else 'full'} bn{s.block_n} emulate={count}/16: "
            f"{cells}  regs={regs.group(1) if regs else '?'} spill st/ld bytes={spill}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--counts", default="0,2,4,6")
    parser.add_argument("--cases", default="fp8_128,bf16_64")
    parser.add_argument("--mask", choices=("both", "full", "causal"), default="both")
    args = parser.parse_args()
    if not have_disassembler():
        print(NO_DISASSEMBLER, file=sys.stderr)
        return 2
    os.environ["ARGUS_VERIFY"] = "0"
    masks = {"both": (False, True), "full": (False,), "causal": (True,)}[args.mask]
    for case in args.cases.split(","):
        for causal in masks:
            for count in (int(c) for c in args.counts.split(",")):
                print(report(case, causal, count), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
