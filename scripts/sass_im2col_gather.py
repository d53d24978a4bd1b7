"""Static SASS of the im2col route's run gathers for a stem (CPU only: NVRTC sm_90a and
nvdisasm): SASS instructions per output pixel, registers, spills, and the global loads and
stores by width, for the warp kernel (`im2col_rows_kernel`: one pixel's filter-row runs a warp,
one element a lane per store) and the pixel kernel (`im2col_pixels_kernel`: one pixel a
thread, ag.gather and 16-byte stores) of a channels-last x, and their NCHW counterparts
(`im2col_planes_kernel`, `im2col_pixel_planes_kernel`: "warp_planes", "pixel_planes"), and
the staged pixel kernel ("staged": `im2col_pixels_staged_kernel`, 16-byte shared stores
(STS.128) and a TMA store (UTMASTG) a piece instead of global stores). The
variant measured is the one the stem's launch runs (analysis/alignment.py: contiguous
tensors, 32-bit offsets).

Instructions per pixel: the warp kernel's CTA is one warp of BQ pixels (straight-line code:
its static count is what the warp issues), so count / BQ; the pixel kernel's warp runs 32
pixels, so count / 32 (its loads are predicated, not branched: padding costs no path of its
own). "On the vector path" is the count less any chunk store's element-by-element fallback
that a whole chunk branches over (`skipped_fallbacks`; none since the pixel kernels take A's
pitch as a compile-time extent, which proves every chunk whole).

    PATH=/dir/of/nvdisasm:$PATH .venv/bin/python scripts/sass_im2col_gather.py [--sass DIR]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# (name, N, C, H, W, R, S, stride, padding)
STEMS = [("ResNet-50 stem 7x7/2, batch 32", 32, 3, 224, 224, 7, 7, 2, 3),
         ("AlexNet stem 11x11/4, batch 32", 32, 3, 224, 224, 11, 11, 4, 2)]


def _specialized(kernel, symbols: dict):
    """The kernel as the launch on contiguous tensors of these symbol values runs it."""
    from argus.analysis import alignment
    from argus.ir.types import TensorType

    tensors = {}
    for p in kernel.params:
        t = p.value.type
        if not isinstance(t, TensorType):
            continue
        shape = [d if isinstance(d, int) else symbols[d] for d in t.shape]
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        tensors[p.name] = (0, tuple(shape), tuple(strides), t.dtype.bytes)
    return alignment.specialize(kernel, alignment.of_arguments(tensors, symbols))


def skipped_fallbacks(sass: str) -> int:
    """Instructions of the chunk stores' scalar fallbacks in `sass`: the blocks between a
    chunk's conditional branch to its vector store (`@P BRA P, .L_x_k`: the chunk whole and in
    bounds) and that store's label, which a chunk that takes the vector store skips."""
    items = []
    for line in sass.splitlines():
        label = re.match(r"^\s*(\.L_x_\d+):", line)
        if label:
            items.append(("label", label.group(1)))
        elif re.match(r"^\s+/\*[0-9a-f]{4}\*/", line):
            items.append(("ins", line))
    skipped, i = 0, 0
    while i < len(items):
        kind, text = items[i]
        branch = re.search(r"@!?P\d BRA !?P\d, `\((\.L_x_\d+)\)", text) if kind == "ins" else None
        if branch:
            j = i + 1
            while j < len(items) and items[j] != ("label", branch.group(1)):
                skipped += items[j][0] == "ins"
                j += 1
            i = j
            continue
        i += 1
    return skipped


def measure(kind: str, stem, sass_dir: Path | None = None) -> dict:
    from argus import codegen, dtypes
    from argus.compiler import lower_only
    from argus.kernels.conv_im2col import (PIXELS_PER_CTA, Im2colGeometry,
                                           im2col_pixel_planes_kernel,
                                           im2col_pixel_planes_span_kernel,
                                           im2col_pixel_planes_staged_kernel,
                                           im2col_pixels_kernel, im2col_pixels_span_kernel,
                                           im2col_pixels_staged_kernel, im2col_planes_kernel,
                                           im2col_rows_kernel, plane_slot, planes_tile,
                                           row_slot, rows_tile, span_tile)
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble, instruction_histogram

    name, N, C, H, W, R, S, st, pad = stem
    g = Im2colGeometry(R, S, st, st, pad, pad, 1, 1, C)
    P, Q = (H + 2 * pad - R) // st + 1, (W + 2 * pad - S) // st + 1
    slot = row_slot(g)
    if kind == "warp":
        bq, lb = rows_tile(g)
        kernel = lower_only(im2col_rows_kernel(dtypes.bf16), geom=g, BQ=bq, LB=lb)
        symbols = {"N": N, "H": H, "E": W * C, "NP": N * P, "J": Q * (R + 1), "L": slot}
        pixels = bq
    elif kind == "warp_planes":       # NCHW x: the plane-run kernel
        bq, cb, lb = planes_tile(g)
        sp = plane_slot(g)
        kernel = lower_only(im2col_planes_kernel(dtypes.bf16), geom=g, BQ=bq, CB=cb, LB=lb,
                            SP=sp)
        symbols = {"N": N, "H": H, "C": C, "W": W, "NP": N * P, "J": Q * (R + 1), "CA": C,
                   "SP": sp}
        pixels = bq
    elif kind == "pixel_planes":
        sp = plane_slot(g)
        kernel = lower_only(im2col_pixel_planes_kernel(dtypes.bf16, (R + 1) * C * sp),
                            geom=g, BM=PIXELS_PER_CTA, SP=sp)
        symbols = {"N": N, "H": H, "C": C, "W": W, "M": N * P * Q, "K": (R + 1) * C * sp}
        pixels = 32
    elif kind == "staged":            # the pixel kernel staging A through shared memory
        kernel = lower_only(im2col_pixels_staged_kernel(dtypes.bf16, (R + 1) * slot), geom=g)
        symbols = {"N": N, "H": H, "E": W * C, "M": N * P * Q}
        pixels = 32
    elif kind == "staged_planes":
        sp = plane_slot(g)
        kernel = lower_only(im2col_pixel_planes_staged_kernel(dtypes.bf16, (R + 1) * C * sp),
                            geom=g, SP=sp)
        symbols = {"N": N, "H": H, "C": C, "W": W, "M": N * P * Q}
        pixels = 32
    elif kind == "span":              # the staged kernel reading each input span once a CTA
        bq, lead, length = span_tile(g, Q, dtypes.bf16)
        kernel = lower_only(im2col_pixels_span_kernel(dtypes.bf16, (R + 1) * slot, bq),
                            geom=g, LEAD=lead, L=length)
        symbols = {"N": N, "H": H, "E": W * C, "NP": N * P, "Q": Q}
        pixels = 32 * Q / (bq * -(-Q // bq))     # a warp's useful pixels (idle past Q)
    elif kind == "span_planes":
        sp = plane_slot(g)
        bq, lead, length = span_tile(g, Q, dtypes.bf16, planes=True)
        kernel = lower_only(im2col_pixel_planes_span_kernel(dtypes.bf16, (R + 1) * C * sp,
                                                            bq),
                            geom=g, SP=sp, LEAD=lead, L=length)
        symbols = {"N": N, "H": H, "C": C, "W": W, "NP": N * P, "Q": Q}
        pixels = 32 * Q / (bq * -(-Q // bq))
    else:
        kernel = lower_only(im2col_pixels_kernel(dtypes.bf16, (R + 1) * slot), geom=g,
                            BM=PIXELS_PER_CTA)
        symbols = {"N": N, "H": H, "E": W * C, "M": N * P * Q, "K": (R + 1) * slot}
        pixels = 32
    source = codegen.render(_specialized(kernel, symbols))
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    sass = disassemble(binary.cubin)
    if sass is None:
        raise SystemExit("no disassembler: put nvdisasm or cuobjdump on PATH")
    if sass_dir is not None:
        stem_name = f"{kind}_{R}x{S}"
        (sass_dir / f"{stem_name}.cu").write_text(source.text)
        (sass_dir / f"{stem_name}.sass").write_text(sass)
    hist = instruction_histogram(sass)
    total = sum(hist.values())
    widths = {}
    # global accesses by width; shared accesses by width (the staged kernel's STS.128, the
    # span kernel's LDS.U16 gathers) and the TMA stores (UTMASTG) that copy a staged block out
    for m in re.finditer(r"\b(LDG|STG)\.E(\.[A-Z0-9.]+)?|\b(STS|LDS|UTMASTG)(\.[A-Z0-9.]+)?"
                         r"\b", sass):
        key = (m.group(1) + (m.group(2) or "")) if m.group(1) else \
            m.group(3) + (m.group(4) or "")
        widths[key] = widths.get(key, 0) + 1
    path = total - (skipped_fallbacks(sass) if kind.startswith(("pixel", "staged", "span"))
                    else 0)
    return {"kind": kind, "instructions": total, "per_pixel": total / pixels,
            "path": path, "path_per_pixel": path / pixels,
            "registers": res.registers, "spills": res.spill_stores + res.spill_loads,
            "branches": hist.get("BRA", 0), "memory": dict(sorted(widths.items())),
            "a_bytes_per_pixel": 2 * (R + 1) * (C * plane_slot(g) if kind.endswith("planes")
                                                else slot)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sass", type=Path, help="write each kernel's .cu and .sass here")
    args = parser.parse_args()
    if args.sass:
        args.sass.mkdir(parents=True, exist_ok=True)
    for stem in STEMS:
        print(f"== {stem[0]}")
        for kind in ("warp", "pixel", "staged", "span", "warp_planes", "pixel_planes",
                     "staged_planes", "span_planes"):
            m = measure(kind, stem, args.sass)
            print(f"{kind:13s} {m['instructions']:5d} SASS instructions, "
                  f"{m['per_pixel']:6.1f} a pixel, {m['path_per_pixel']:6.1f} on the vector "
                  f"path ({m['a_bytes_per_pixel']} bytes of A), "
                  f"{m['registers']} registers, {m['spills']} spill bytes, "
                  f"{m['branches']} BRA; {m['memory']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
