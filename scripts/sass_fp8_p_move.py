"""How FP8 attention's P reaches the P V wgmma in the machine code, per kernel (CPU only).

Compiles the FP8 forward (argus/kernels/attention.py, dtype e4m3) with NVRTC for sm_90a twice
per case: V^T in natural key order (P gathered into the 8-bit A fragment by quad shuffles,
target/fragments.py AccToA8) and V^T with its keys permuted inside each 32-key group
(schedule permuted_vt, AccOrderA8: P's A registers are the thread's own accumulator
registers), disassembles each with nvdisasm and counts, in the whole kernel and between the
first and the last register-A HGMMA of the main loop's P V group: SHFL.IDX (the gather's
shuffles; the softmax's row max and sum use SHFL.BFLY, counted apart), PRMT, F2FP (the e4m3
conversions), HGMMA, and the registers and spills ptxas reports. Verification off: this is
about code generation.

Usage: NVDISASM=/path/to/nvdisasm python3 scripts/sass_fp8_p_move.py [--dims 64,128,256]
       (nvdisasm from PATH or NVDISASM=; the pip wheel nvidia-cuda-nvdisasm has one)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import sys

from argus.runtime.sass import NO_DISASSEMBLER, have_disassembler, k_loop, sass_text

OPS = ("SHFL.IDX", "SHFL.BFLY", "PRMT", "F2FP", "QGMMA")   # QGMMA: the fp8 wgmma


def sass_of(head_dim: int, causal: bool, permuted: bool):
    import argus as ag
    from argus.kernels.attention import attention_kernel, fp8_schedule

    s = dataclasses.replace(fp8_schedule(head_dim, causal), permuted_vt=permuted)
    compiled = attention_kernel(head_dim, ag.e4m3, causal, False, permuted).compile(s=s)
    sass = sass_text(compiled.binary.cubin).splitlines()
    return sass, compiled.resources


def counts(lines: list[str]) -> dict[str, int]:
    return {op: sum(bool(re.search(r"\b" + re.escape(op) + r"\b", ln)) for ln in lines)
            for op in OPS}


def loop_body(sass: list[str]) -> list[str]:
    """The instructions of the KV loop: the smallest loop that holds a QGMMA (S_j and
    P_{j-1} V_{j-1} are issued in it; the tile loop around it is larger); [] when none."""
    try:
        return k_loop("\n".join(sass), "QGMMA")
    except ValueError:
        return []


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dims", default="64,128,256")
    args = parser.parse_args()
    if not have_disassembler():
        print(NO_DISASSEMBLER, file=sys.stderr)
        return 2
    os.environ["ARGUS_VERIFY"] = "0"
    for d in (int(x) for x in args.dims.split(",")):
        for causal in (False, True):
            for permuted in (False, True):
                sass, res = sass_of(d, causal, permuted)
                whole, loop = counts(sass), counts(loop_body(sass))
                name = "permuted V^T (AccOrderA8)" if permuted else "quad gather (AccToA8)"
                print(f"d{d} {'causal' if causal else 'full'} {name}: registers "
                      f"{res.registers}, spills {res.spill_stores}/{res.spill_loads}; kernel "
                      + " ".join(f"{k}={v}" for k, v in whole.items()) + "; KV loop (one K block) "
                      + " ".join(f"{k}={v}" for k, v in loop.items()), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
