"""Static resources of the implicit-GEMM convolution with packed taps (ConvSchedule.
taps_per_slice) against one tap a K step, CPU only (NVRTC sm_90a): for KernelBench L2/8's
Conv3d (tf32, 8 -> 16 channels, 3x3x3, NCDHW result with bias) and ResNet-50's c2 (bf16,
3x3 64, channels-last, rowbox), the schedule `schedule_for` picks with and without
taps_per_slice="auto", its K steps per tile, registers, spill bytes, the PTX's wgmma
instructions (static), and the SASS HGMMA count where a disassembler (nvdisasm / cuobjdump) is
on PATH. Compiled unverified (the interpreter tests and tests/mutations check it).

    .venv/bin/python scripts/sass_conv_taps.py
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, x shape, weight shape, stride, padding, dtype, precision, nchw result, bias)
LAYERS = [("L2/8 conv3d 8->16 k3 (tf32)", (128, 8, 16, 64, 64), (16, 8, 3, 3, 3), 1, 0,
           "float32", "tf32", True, True),
          ("ResNet-50 c2 3x3 64 (bf16)", (32, 64, 56, 56), (64, 64, 3, 3), 1, 1,
           "bfloat16", None, False, False)]


def measure(layer, taps) -> dict:
    import torch

    from argus import dtypes
    from argus.compiler import compile_kernel
    from argus.kernels.conv import ConvGeometry, conv_kernel
    from argus.ops.conv import schedule_for
    from argus.runtime.sass import disassemble

    name, xs, ws, stride, pad, dt, precision, nchw, bias = layer
    dtype = getattr(torch, dt)
    x = torch.empty(xs, dtype=dtype, device="meta")
    w = torch.empty(ws, dtype=dtype, device="meta")
    s = schedule_for(x, w, stride, pad, 1, 1, precision=precision, taps_per_slice=taps)
    elem = x.element_size()
    cg = -(-ws[1] // (16 // elem)) * (16 // elem)
    cgp = -(-cg // s.bk) * s.bk
    three = len(xs) == 5
    geom = ConvGeometry(ws[-2], ws[-1], stride, stride, pad, pad, 1, 1, 1, cgp,
                        ws[2] if three else 1, stride, pad if three else 0, 1)
    idt = dtypes.f32 if precision == "tf32" else dtypes.bf16
    kernel = conv_kernel(idt, idt, bias, "none", precision, nchw)
    compiled = compile_kernel(kernel, verify=False, geom=geom, s=s)
    res = compiled.resources
    taps_total = 1
    for k in ws[2:]:
        taps_total *= k
    slices = taps_total * (cgp // s.bk)
    sass = disassemble(compiled.binary.cubin)
    steps = -(-slices // s.taps_per_slice)
    return {"schedule": f"bk {s.bk} taps_per_slice {s.taps_per_slice} bn {s.bn} stages "
                        f"{s.stages} rowbox {s.rowbox} cluster {s.cluster_m}",
            "k_steps": steps,
            "useful_k": f"{taps_total * ws[1]} of {steps * s.taps_per_slice * s.bk}",
            "registers": res.registers, "spills": res.spill_stores + res.spill_loads,
            "ptx_wgmma": len(re.findall(r"wgmma\.mma_async", compiled.binary.ptx)),
            "sass_hgmma": None if sass is None else len(re.findall(r"\bHGMMA\b", sass))}


def main() -> int:
    for layer in LAYERS:
        print(f"== {layer[0]}")
        for taps in (1, "auto"):
            m = measure(layer, taps)
            print(f"  taps_per_slice={taps!s:5s} {m['schedule']}: {m['k_steps']} K steps a "
                  f"tile (K useful {m['useful_k']}), {m['registers']} registers, "
                  f"{m['spills']} spill bytes, {m['ptx_wgmma']} wgmma in the PTX, SASS HGMMA "
                  f"{m['sass_hgmma'] if m['sass_hgmma'] is not None else 'n/a (no disassembler)'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
