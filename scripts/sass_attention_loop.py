"""What one KV block costs in the attention forward's machine code, by instruction class (CPU
only: NVRTC for sm_90a, then nvdisasm).

For each bench variant given (scripts/gpu_attention_bench.py's tokens), builds the bf16 kernel
(verification off: this is about code generation), takes the KV loop (argus.runtime.sass.k_loop:
the innermost loop holding an HGMMA and an exp2, one trip = one KV block) and counts the
instructions one trip of an *unmasked* block executes: the key-tail / causal mask sits in a
block the warpgroup branches over (`jb >= unmasked`, uniform; its ISETP / FSEL run only on the
masked blocks) and the `nanosleep` of wgmma_wait_pinned's branch runs once in 2^32 visits, so
both are left out (`masked_path`). Classes (`CLASSES`): the GEMMs, the warpgroup's wgmma
fence / wait, the softmax's float work by opcode, exp2 on the SFU, the pack of P, shuffles,
barriers and mbarrier waits, integer and uniform (address) work, predicates, moves, branches.

Usage: NVDISASM=/path/to/nvdisasm python3 scripts/sass_attention_loop.py \
           [--dims 128] [--lengths 16384] [--mask full,causal] [--variants default,default+sumend]
           [--fp8] (the FP8 forward: fp8 variants, e.g. --variants pvt,pvt+ekr)
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections import Counter

from argus.runtime.sass import NO_DISASSEMBLER, have_disassembler, k_loop, sass_text

_OPCODE = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)"
                     r"((?:\.[A-Za-z0-9_]+)*)")
_BRANCH_TO = re.compile(r"@!?P\d\s+BRA\s+`\((\.L_x_\d+)\)")

# (class, test on (opcode, modifiers)), first match wins; the rest is "other"
CLASSES = (
    ("HGMMA", lambda op, mods: op in ("HGMMA", "QGMMA")),
    ("WARPGROUP.ARRIVE", lambda op, mods: op == "WARPGROUP" and ".ARRIVE" in mods),
    ("WARPGROUP.DEPBAR", lambda op, mods: op == "WARPGROUP" and ".DEPBAR" in mods),
    ("MUFU.EX2", lambda op, mods: op == "MUFU" and ".EX2" in mods),
    ("FFMA", lambda op, mods: op == "FFMA"),
    ("FMUL", lambda op, mods: op == "FMUL"),
    ("FADD", lambda op, mods: op == "FADD"),
    ("FMNMX", lambda op, mods: op == "FMNMX"),
    ("F2FP", lambda op, mods: op == "F2FP"),
    ("SHFL", lambda op, mods: op == "SHFL"),
    ("BAR", lambda op, mods: op == "BAR"),
    ("SYNCS", lambda op, mods: op == "SYNCS"),
    ("predicate", lambda op, mods: op in ("ISETP", "FSETP", "PLOP3", "VOTEU", "VOTE", "FSEL",
                                          "SEL")),
    ("move", lambda op, mods: op in ("MOV", "UMOV", "CS2R", "S2R", "S2UR", "R2UR")
     or (op == "IMAD" and (".MOV" in mods or ".U32" in mods))),
    ("uniform", lambda op, mods: op.startswith("U")),
    ("integer", lambda op, mods: op in ("IMAD", "IADD3", "VIADD", "LEA", "LOP3", "SHF",
                                        "PRMT", "IABS", "IMNMX")),
    ("branch", lambda op, mods: op in ("BRA", "BSSY", "BSYNC", "NOP", "NANOSLEEP")),
)


def masked_path(loop: list[str]) -> list[str]:
    """The lines of `loop` an unmasked KV block runs: without the block a predicated forward
    branch skips when it holds the mask's `FSEL ..., -INF` (the jb >= unmasked block), and
    without the never-taken NANOSLEEP / NOP of wgmma_wait_pinned (device header)."""
    out, skip = [], None
    for i, line in enumerate(loop):
        if skip is not None:
            if line.strip().startswith(skip + ":"):
                skip = None
                out.append(line)
            continue
        if "NANOSLEEP" in line or re.search(r"\bNOP\b", line):
            continue
        out.append(line)
        m = _BRANCH_TO.search(line)
        if m:
            end = next((k for k in range(i + 1, len(loop))
                        if loop[k].strip().startswith(m.group(1) + ":")), None)
            if end is not None and any("FSEL" in x and "-INF" in x for x in loop[i:end]):
                skip = m.group(1)
    return out


def classes(lines: list[str]) -> Counter[str]:
    """Instruction count of `lines` by CLASSES (plus "total")."""
    out: Counter[str] = Counter()
    for line in lines:
        m = _OPCODE.match(line)
        if not m:
            continue
        op, mods = m.group(1), m.group(2)
        out[next((name for name, test in CLASSES if test(op, mods)), "other")] += 1
        out["total"] += 1
    return out


def loop_report(variant: str, head_dim: int, causal: bool, seq_len: int,
                fp8: bool = False) -> Counter[str]:
    """Per-class counts of one unmasked KV block of `variant`'s kernel, with "spill" (bytes
    stored + loaded a thread), "registers" and "local" (LDL / STL anywhere in the kernel).
    fp8: the FP8 (e4m3) forward at gpu_attention_bench's fp8 variant (its QGMMA counted as
    HGMMA; seq_len is not read: fp8_schedule has one rule per mask)."""
    import argus as ag
    from argus.compiler import compile_kernel
    from argus.kernels.attention import attention_kernel
    from tests.loading import load_script

    bench = load_script("gpu_attention_bench")
    if fp8:
        s = bench.fp8_variant_schedule(variant, head_dim, causal, seq_len)
        kernel = attention_kernel(head_dim, ag.e4m3, causal, False, s.permuted_vt)
    else:
        s = bench.variant_schedule(variant, head_dim, causal, seq_len)
        kernel = attention_kernel(head_dim, ag.bf16, causal, False)
    built = compile_kernel(kernel, verify=False, s=s)
    text = sass_text(built.binary.cubin)
    loop = k_loop(text, "QGMMA" if fp8 else "HGMMA", also=("MUFU.EX2",))
    out = classes(masked_path(loop))
    out["spill"] = built.resources.spill_stores + built.resources.spill_loads
    out["registers"] = built.resources.registers
    out["local"] = len(re.findall(r"\b(?:LDL|STL)\b", text))
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", default="128")
    parser.add_argument("--lengths", default="16384")
    parser.add_argument("--mask", default="full,causal")
    parser.add_argument("--variants", default="default,default+sumend")
    parser.add_argument("--fp8", action="store_true",
                        help="the FP8 forward at gpu_attention_bench's fp8 variants (e.g. "
                             "--variants pvt,pvt+ekr)")
    args = parser.parse_args()
    if not have_disassembler():
        print(NO_DISASSEMBLER, file=sys.stderr)
        return 2
    os.environ["ARGUS_VERIFY"] = "0"
    names = [name for name, _ in CLASSES] + ["other", "total", "registers", "spill",
                                             "local"]
    print("| case | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for d in (int(x) for x in args.dims.split(",")):
        for n in (int(x) for x in args.lengths.split(",")):
            for mask in args.mask.split(","):
                for v in args.variants.split(","):
                    got = loop_report(v, d, mask == "causal", n, args.fp8)
                    print(f"| {'fp8 ' if args.fp8 else ''}{v} d{d} {mask} {n} | "
                          + " | ".join(str(got.get(c, 0)) for c in names) + " |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
