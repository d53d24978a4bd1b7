"""The implicit-GEMM convolution's result epilogues, A/B on the same rounded fp32 input under
precision="tf32", at KernelBench level-1 conv shapes (batch as upstream):

  cl    channels-last result (`convolve(nchw=False)`: rows of bn channels from registers)
  reg   NCHW, the accumulator stored transposed from registers (nchw_epilogue='registers')
  tma   NCHW, staged transposed in swizzled shared memory and TMA-stored as NCHW boxes
        (nchw_epilogue='tma'; 4 ring stages instead of 6 to make room for the stage)
  stg   NCHW, the same stage read back in 4 x 4 blocks and written by 16-byte vector stores
        along the channel rows (nchw_epilogue='staged': any alignment; 4 stages)
  reg4  control: 'registers' with the 4 stages 'tma' runs on (separates the epilogue from
        the ring depth)

each call's GPU time (argus.runtime.timing.measure_alternating: CUDA events, L2 flushed,
medians), after checking that all results are equal (bit for bit). The schedules are
argus.ops.conv.schedule_for's with only nchw_epilogue (and for reg4 the stages) changed.

    python scripts/gpu_conv_nchw_ab.py [--rounds 3] [--only 67,80]

Each call includes the input's rounding pass (the same in all); the difference is the
epilogue. 'tma' needs the NCHW result's channel rows 16-byte aligned (Q * 4 % 16 == 0,
`argus.ops.conv.nchw_tma_fits`): of these shapes only L1/80 (Q = 496); L1/67 (Q = 131070),
L1/76 (174758) and L1/55 (1022) have rows 8 bytes off, where convolve falls back to the
register store: their tma column says n/a ('staged' runs everywhere). Look for: tma and stg
<= reg at L1/80, stg < reg on the unaligned shapes (their channel rows start 24 bytes off a
32-byte sector, so each 8-pixel run of the register store straddles two sectors), and
against cl.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (name, x shape, weight shape, stride, padding, dilation)
CASES = [
    ("L1/67 conv1d", (32, 64, 131072), (128, 64, 3), 1, 0, 1),
    ("L1/76 conv1d s3 d4", (64, 64, 524280), (128, 64, 3), 3, 0, 4),
    ("L1/80 conv2d dil", (8, 32, 512, 512), (64, 32, 5, 9), 1, (2, 4), (2, 3)),
    ("L1/55 conv2d", (8, 64, 512, 1024), (128, 64, 3, 3), 1, 0, 1),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", default="", help="task ids, e.g. 67,80")
    args = ap.parse_args(argv)

    import torch

    from argus.ops.conv import convolve, nchw_tma_fits, schedule_for
    from argus.runtime.timing import measure_alternating

    only = {f"L1/{i.strip()}" for i in args.only.split(",") if i.strip()}
    rows = []
    for name, xs, ws, st, pd, dl in CASES:
        if only and name.split()[0] not in only:
            continue
        one_d = len(xs) == 3
        x = torch.randn(*xs, device="cuda")
        w = torch.randn(*ws, device="cuda") / (ws[1] * ws[-1]) ** 0.5
        if one_d:
            x, w = x.unsqueeze(2), w.unsqueeze(2)
            st, pd, dl = (1, st), (0, pd), (1, dl)
        reg = schedule_for(x, w, st, pd, dl, 1, precision="tf32", nchw_epilogue="registers")
        tma = schedule_for(x, w, st, pd, dl, 1, precision="tf32", nchw_epilogue="tma")
        reg4 = dataclasses.replace(reg, stages=tma.stages)
        stg = dataclasses.replace(tma, nchw_epilogue="staged")
        variants = {"cl": (reg, False), "reg": (reg, True), "tma": (tma, True),
                    "stg": (stg, True), "reg4": (reg4, True)}
        calls = {k: (lambda s=s, nchw=nchw: convolve(x, w, None, st, pd, dl, precision="tf32",
                                                     schedule=s, nchw=nchw))
                 for k, (s, nchw) in variants.items()}
        outs = {k: c() for k, c in calls.items()}
        fits = nchw_tma_fits(outs["reg"])
        ref = outs["reg"]
        equal = all(torch.equal(ref, o.contiguous()) for o in outs.values())
        del outs
        names = [k for k in calls if fits or k != "tma"]
        times = measure_alternating([calls[k] for k in names], rounds=args.rounds)
        ms = dict(zip(names, (t.median_ms for t in times)))
        rows.append((name, ms, fits, equal, reg.stages, tma.stages))
        print(f"{name}: " + "  ".join(f"{k} {v:.3f}" for k, v in ms.items()) +
              f"  (tma applies: {fits}; equal: {equal}; stages reg {reg.stages}, "
              f"tma / stg / reg4 {tma.stages})", flush=True)
        del x, w
        torch.cuda.empty_cache()

    print()
    print("| task | cl ms | reg ms | tma ms | stg ms | reg4 ms | reg / cl | tma / cl | "
          "stg / cl | equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, ms, fits, equal, s_reg, s_tma in rows:
        tma = f"{ms['tma']:.3f}" if fits else "n/a (rows not 16-B aligned)"
        ratio = f"{ms['tma'] / ms['cl']:.2f}" if fits else "-"
        print(f"| {name} | {ms['cl']:.3f} | {ms['reg']:.3f} | {tma} | {ms['stg']:.3f} | "
              f"{ms['reg4']:.3f} | {ms['reg'] / ms['cl']:.2f} | {ratio} | "
              f"{ms['stg'] / ms['cl']:.2f} | {equal} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
