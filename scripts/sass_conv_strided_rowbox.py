"""The strided rowbox (ConvSchedule.rowbox on a stride > 1 layer: the A tile one TMA box read
with the tensor map's element strides) against the default per-row boxes, CPU only: for
ResNet-50's strided convolutions (bf16, channels-last, batch 32), the schedule `schedule_for`
picks with and without strided_rowbox=True, the verifier's findings on it (errors and unknowns;
0 / 0 is the bar) and its time, and the NVRTC sm_90a build's registers and spill bytes.

    .venv/bin/python scripts/sass_conv_strided_rowbox.py            # every strided layer
    .venv/bin/python scripts/sass_conv_strided_rowbox.py --no-verify # builds only

No GPU: the timing is scripts/gpu_conv_bench.py --rowbox (its "strided rowbox" rows) or
--strided (docs/perf/conv.md "Strided rowbox").
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _strided_layers() -> list[tuple]:
    """(name, N, C, H, W, K, R, S, stride, padding): ResNet-50's strided convolutions at batch
    32, as scripts/gpu_conv_bench.py lists them (one list: its RESNET50 rows with a stride, the
    stem and c3/2, then RESNET50_STRIDED_EXTRA), so this table and the GPU one time the same
    layers."""
    spec = importlib.util.spec_from_file_location("gpu_conv_bench",
                                                  ROOT / "scripts" / "gpu_conv_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return [r for r in bench.RESNET50 if r[8] > 1] + list(bench.RESNET50_STRIDED_EXTRA)


def measure(layer, strided: bool, check: bool) -> dict:
    import torch

    from argus import verify
    from argus.compiler import compile_kernel
    from argus.ops import conv as conv_ops

    name, N, C, H, W, K, R, S, st, pad = layer
    x = torch.empty(N, C, H, W, dtype=torch.bfloat16, device="meta")
    w = torch.empty(K, C, R, S, dtype=torch.bfloat16, device="meta")
    s = conv_ops.schedule_for(x, w, st, pad, 1, 1, strided_rowbox=strided)
    # the op's own geometry (operands: the padded channels per tap, the strides)
    *_, geom, idt, odt = conv_ops.operands(x, w, None, st, pad, 1, 1, s.bk, rowbox=s.rowbox)
    kernel = conv_ops.conv_kernel(idt, odt, False, "none")
    out = {"schedule": f"rowbox {s.rowbox} bm {s.bm} bn {s.bn} bw {s.bw} bk {s.bk} taps "
                       f"{s.taps_per_slice} stages {s.stages} cluster {s.cluster_m} epilogue "
                       f"{s.epilogue}"}
    if check:
        t0 = time.perf_counter()
        found = verify.check(kernel, timeout_ms=20000, geom=geom, s=s)
        out["verify_s"] = time.perf_counter() - t0
        out["errors"] = sorted(d.code for d in found if d.severity == "error")
        out["unknown"] = sorted(d.code for d in found if d.severity == "unknown")
    res = compile_kernel(kernel, verify=False, geom=geom, s=s).resources
    out["registers"], out["spills"] = res.registers, (res.spill_stores, res.spill_loads)
    return out


def main(argv: list[str]) -> int:
    check = "--no-verify" not in argv
    for layer in _strided_layers():
        for strided in (False, True):
            m = measure(layer, strided, check)
            ver = f"verify {m['verify_s']:5.1f} s, errors {m['errors'] or 0}, unknown " \
                  f"{m['unknown'] or 0}; " if check else ""
            print(f"{layer[0]:20s} strided_rowbox={strided!s:5s} {m['schedule']}: {ver}"
                  f"{m['registers']} registers, spill stores / loads {m['spills']} B",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
