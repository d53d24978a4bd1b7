"""Count the SASS instructions of the block-scaled fp8 kernels' K loop, by class, on the CPU.

The K loop is the innermost SASS loop around the QGMMAs (argus.runtime.sass.k_loop); each
schedule's loop is reported per K block (a trip of the overlapped loop holds two) as FFMA
(the promotion), QGMMA, and the rest ("bookkeeping": integer and uniform arithmetic, loads,
moves, waits and barriers), the rest split by class, plus registers and spill bytes from
ptxas -v, of the variant a 4096 x 7168 x 2048 launch runs (launch facts of
analysis/alignment.py; --generic: the variant without them), and the promotion gap
(`promotion_gaps`: the instructions from each WARPGROUP.DEPBAR to the warp's next QGMMA). Schedules: the block-scaled defaults of argus.ops.fp8_schedules (split 128 x 256
and overlap 128 x 128) and, with --variants, every schedule of scripts/gpu_fp8_bench.py
--variants. Needs NVRTC and nvdisasm or cuobjdump (PATH, or NVDISASM=/path/to/nvdisasm).

    .venv/bin/python scripts/sass_fp8_k_loop.py [--variants] [--interval] [--generic] [--json F]
        [--sass DIR] [--only SUBSTRING ...] [--moe]

`--moe`: the fp8 MoE grouped GEMMs (argus/kernels/moe_fp8.py, the smem-scale kernel) at the
prefill default (FP8_PREFILL_SPLIT_SMEM_TMA) and the gate-up's SiLU forms, the variant of
DeepSeek-V3's T = 16384 launch (MOE_GATE_UP / MOE_DOWN), beside the dense "split 128x256 smem
scales" they copy; with each the instructions of the consumer's unit loop outside the K loop
(`unit_rest`: per unit and warp, statically, the accumulator reset and the epilogue).

`--interval`: the per-tensor kernel plain (128 x 256) and promoting every N K steps
(Fp8GemmSchedule.promote_every, 128 x 192 / 160 / 128), counted per K block (a trip of the
interval loop holds N; the promotion is FADD, in the class list).

ptxas is chaotic at the split loop's 232 registers (a change that helps one 128 x 256 variant
can spill another), so measure a split-loop change on every split variant:
`--variants --only split`.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def default_schedules() -> list[tuple[str, object]]:
    """The block-scaled defaults: split 128 x 256 where it measured best, overlap elsewhere."""
    from argus.ops import fp8_schedules as fs

    return [("default split 128x256", fs._SPLIT_256_TMA),
            ("default overlap 128x128", fs._OVERLAP_TMA)]


def interval_schedules() -> list[tuple[str, object]]:
    """--interval: the per-tensor kernel (gemm_fp8_kernel) plain at its 128 x 256 default and
    promoting every N K steps (Fp8GemmSchedule.promote_every) at the tiles
    gpu_fp8_bench.py --promote-every times: per K block, the FADDs and the waits N spreads."""
    from argus.kernels.gemm_fp8 import Fp8GemmSchedule

    out = [("per-tensor 128x256 st3 tma plain", Fp8GemmSchedule(epilogue="tma", stages=3))]
    for bn, stages in ((192, 3), (160, 4), (128, 5)):
        for every in (1, 2, 4, 8):
            if bn > 160 and every == 1:
                continue
            out.append((f"per-tensor 128x{bn} tma c2 N={every}",
                        Fp8GemmSchedule(bn=bn, stages=stages, epilogue="tma", cluster_m=2,
                                        promote=True, promote_every=every)))
    return out


def moe_schedules() -> list[tuple[str, object]]:
    """--moe: (name, MoeFp8Schedule) of the fp8 grouped GEMMs; "moe gate-up" names build the
    gated kernel, "moe down" the down (`render`), and the dense loop they share first."""
    from dataclasses import replace

    from argus.kernels.moe_fp8 import FP8_PREFILL_SPLIT_SMEM_TMA as D
    from argus.ops.fp8_schedules import _SPLIT_256_SMEM_TMA

    return [("split 128x256 smem scales", _SPLIT_256_SMEM_TMA),
            ("moe gate-up split_smem_tma", D), ("moe down split_smem_tma", D),
            ("moe gate-up split_smem_tma rsqrt_silu", replace(D, rsqrt_silu=True)),
            ("moe gate-up split_smem_tma fast+rsqrt_silu", replace(D, rsqrt_silu=True,
                                                                     fast_silu=True)),
            # MoeFp8Schedule.half_tile_last: a second K loop (the half tile's), `half_loop`
            ("moe gate-up split_smem_tma half_tile_last", replace(D, half_tile_last=True)),
            ("moe down split_smem_tma half_tile_last", replace(D, half_tile_last=True))]


def variant_schedules() -> list[tuple[str, object]]:
    spec = importlib.util.spec_from_file_location("gpu_fp8_bench",
                                                  ROOT / "scripts" / "gpu_fp8_bench.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.variant_schedules()


# The launch whose specialized variant is measured (what scaled_matmul runs: CompiledKernel
# picks the variant of each launch's arguments, analysis/alignment.py): DeepSeek-V3's
# 4096 x 7168 x 2048, contiguous tensors from a fresh (512-byte aligned) allocation.
SHAPE = {"M": 4096, "N": 7168, "K": 2048, "KB": 2048 // 128, "MS": 4096, "NB": 7168 // 128}


# DeepSeek-V3 (E 256, top-8, H 7168, I 2048) at T = 16384: 131072 routed rows, the padded
# layout's bound (each expert padded to 128 rows) as M; the gate-up [M, 7168] x [E, 2, 2048,
# 7168], the down [M, 2048] x [E, 7168, 2048]
_MOE_M = 16384 * 8 + 256 * 128
MOE_GATE_UP = {"M": _MOE_M, "MS": _MOE_M, "MT": _MOE_M // 128, "E": 256, "K": 7168,
               "KBP": 56, "KBW": 56, "NC": 2048, "NB": 16}
MOE_DOWN = {"M": _MOE_M, "MS": _MOE_M, "MT": _MOE_M // 128, "E": 256, "K": 2048,
            "KBP": 16, "KBW": 16, "NC": 7168, "NB": 56}


def launch_specialization(kernel, symbols: dict[str, int] = SHAPE):
    """analysis/alignment.py's specialization of a launch on contiguous tensors of these
    shape-symbol values (a symbol not given: 4096)."""
    from argus.analysis import alignment
    from argus.ir.types import TensorType

    tensors = {}
    for p in kernel.params:
        t = p.value.type
        if not isinstance(t, TensorType):
            continue
        shape = [d if isinstance(d, int) else symbols.get(d, 4096) for d in t.shape]
        strides = [1] * len(shape)
        for d in range(len(shape) - 2, -1, -1):
            strides[d] = strides[d + 1] * shape[d + 1]
        tensors[p.name] = (0, tuple(shape), tuple(strides), t.dtype.bytes)
    return alignment.of_arguments(tensors, symbols)


def moe_gemm(name: str) -> bool:
    """Whether a schedule name of this script means an fp8 MoE grouped GEMM (moe_schedules)."""
    return name.startswith("moe ")


def render(schedule, generic: bool = False, per_tensor: bool = False, name: str = ""):
    """codegen.Source of the block-scaled kernel of `schedule` (the per-tensor one when
    `per_tensor`; the MoE gate-up or down when `name` is one of moe_schedules', at its launch
    MOE_GATE_UP / MOE_DOWN): the variant of the SHAPE launch, or (generic) the one that
    assumes nothing about its arguments."""
    import argus as ag
    from argus import codegen
    from argus.analysis import alignment
    from argus.compiler import lower_only
    from argus.kernels.gemm_fp8 import (gemm_fp8_blockscaled_kernel,
                                        gemm_fp8_blockscaled_smem_kernel, gemm_fp8_kernel)

    if moe_gemm(name):
        from argus.kernels.moe_fp8 import grouped_gemm_fp8_smem_kernel
        gated = name.startswith("moe gate-up")
        kernel = lower_only(grouped_gemm_fp8_smem_kernel(
            gated, tile_rows=schedule.reads_tile_rows), s=schedule)
        if not generic:
            symbols = MOE_GATE_UP if gated else MOE_DOWN
            kernel = alignment.specialize(kernel, launch_specialization(kernel, symbols))
        return codegen.render(kernel)
    if per_tensor:
        kf = gemm_fp8_kernel
    else:
        kf = gemm_fp8_blockscaled_smem_kernel if schedule.smem_scales else \
            gemm_fp8_blockscaled_kernel
    kernel = lower_only(kf(ag.bf16), s=schedule)
    if not generic:
        kernel = alignment.specialize(kernel, launch_specialization(kernel))
    return codegen.render(kernel)


def measure(schedule, sass_dir: Path | None = None, name: str = "",
            generic: bool = False) -> dict:
    """Build the block-scaled kernel of `schedule` (NVRTC, sm_90a; the launch variant unless
    `generic`; the per-tensor kernel for a name starting "per-tensor") and count its K loop."""
    from argus.runtime.compile import compile_cuda
    from argus.runtime.sass import disassemble, k_loop, k_loop_classes

    per_tensor = name.startswith("per-tensor")
    source = render(schedule, generic, per_tensor, name)
    binary = compile_cuda(source.text, [source.name], use_cache=False)
    res = binary.resource(source.name)
    sass = disassemble(binary.cubin)
    if sass is None:
        raise SystemExit("no disassembler: put nvdisasm on PATH or set NVDISASM")
    if sass_dir is not None:
        stem = name.replace(" ", "_")
        (sass_dir / f"{stem}.cu").write_text(source.text)
        (sass_dir / f"{stem}.sass").write_text(sass)
    every = getattr(schedule, "promote_every", 1) * getattr(schedule, "k_atoms", 1)
    # the interval loop's group (N steps unrolled) is not the shortest loop around a QGMMA:
    # its tail (one step a trip) is; take the shortest one holding a whole group's QGMMAs
    loop = k_loop(sass) if every == 1 else _loop_with(sass, 4 * every)
    half_loop = None
    if getattr(schedule, "half_tile_last", False):
        # two K loops: the full tile's (reported as the K loop, comparable to the default's)
        # and the half tile's (half the FFMA), whichever k_loop found first
        other = _other_loop(sass, loop)
        ffma = [k_loop_classes(x).get("FFMA", 0) for x in (loop, other)]
        loop, half_loop = (other, loop) if ffma[0] < ffma[1] else (loop, other)
    classes = k_loop_classes(loop)
    # a K block is 128 deep: 4 QGMMA (k32) per 64 x bn wave, 8 for the two halves of a split
    # step; the overlapped loop holds two K blocks per trip
    # step; the overlapped loop holds two K blocks per trip, the interval loop promote_every
    blocks = 2 if getattr(schedule, "overlap", False) else every
    per_block = {k: v / blocks for k, v in classes.items()}
    extra = {} if half_loop is None else {"half_loop": dict(k_loop_classes(half_loop))}
    return {**extra, "registers": res.registers,
            "spill_bytes": res.spill_stores + res.spill_loads,
            "blocks_per_trip": blocks, "per_block": per_block, "gaps": promotion_gaps(loop),
            "total": sum(classes.values()) / blocks, "unit_rest": unit_rest(sass, loop),
            "bookkeeping": sum(v for k, v in classes.items() if k not in ("FFMA", "QGMMA"))
            / blocks}


def unit_rest(sass: str, loop: list[str]) -> int:
    """The instructions of the consumer's unit loop (the shortest loop around the K loop) that
    lie outside the K loop: per unit and warp the accumulator reset, the epilogue and the next
    unit's coordinates, counted statically (both sides of each branch; the SiLU's division
    slow path counted though rarely taken). 0 when no loop encloses the K loop."""
    import re

    lines = sass.splitlines()
    first = lines.index(loop[0])
    last = first + len(loop) - 1
    labels = {m.group(1): i for i, line in enumerate(lines)
              for m in [re.match(r"^\s*(\.L_x_\d+):", line)] if m}
    around = [(i - labels[m.group(1)], labels[m.group(1)], i) for i, line in enumerate(lines)
              for m in [re.search(r"BRA `\((\.L_x_\d+)\)", line)]
              if m and labels.get(m.group(1), len(lines)) < first and i > last]
    if not around:
        return 0
    _, a, b = min(around)
    return sum(bool(_OPCODE.match(x)) for x in lines[a:first] + lines[last + 1:b + 1])


def promotion_gaps(loop: list[str]) -> list[tuple[int, int]]:
    """The promotion gap of docs/perf/fp8.md ("Why the split loop stops near 1000", item 5):
    from each wait that drains the warpgroup's wgmma queue (`WARPGROUP.DEPBAR.LE gsb0, 0x0`)
    in the K loop, the instructions this warp issues before its next QGMMA (walking around the
    loop's back edge, both sides of a branch counted), the DEPBAR itself not counted; with
    each gap the BAR instructions in it (an ordered section's turn wait and pass:
    stagger=True). A `DEPBAR.LE gsb0, 0x1` (one group kept in flight) starts no gap."""
    lines = [line for line in loop if _OPCODE.match(line)]
    ops = [_OPCODE.match(line).group(1) for line in lines]
    gaps = []
    for i, line in enumerate(lines):
        if "WARPGROUP.DEPBAR" not in line or "0x0" not in line:
            continue
        count = bars = 0
        for j in range(1, len(ops) + 1):
            nxt = ops[(i + j) % len(ops)]
            if nxt == "QGMMA":
                break
            count += 1
            bars += nxt == "BAR"
        else:
            continue
        gaps.append((count, bars))
    return gaps


def _opcode_pattern():
    """An instruction line's opcode (runtime/sass.py's pattern, one line at a time)."""
    import re

    return re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_]*)"
                      r"(?:\.[A-Za-z0-9_.]*)?[\s;]")


_OPCODE = _opcode_pattern()


def _loop_with(sass: str, qgmma: int) -> list[str]:
    """The SASS lines of the shortest loop (a label to a backward branch to it) that holds at
    least `qgmma` QGMMA instructions (runtime/sass.k_loop's walk, another choice)."""
    import re

    lines = sass.splitlines()
    labels = {m.group(1): i for i, line in enumerate(lines)
              for m in [re.match(r"^\s*(\.L_x_\d+):", line)] if m}
    loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             for m in [re.search(r"BRA `\((\.L_x_\d+)\)", line)]
             if m and labels.get(m.group(1), len(lines)) < i]
    around = [(b - a, a, b) for a, b in loops
              if sum(bool(re.search(r"\bQGMMA\b", x)) for x in lines[a:b]) >= qgmma]
    if not around:
        raise ValueError(f"no loop holds {qgmma} QGMMA instructions in the SASS")
    _, first, last = min(around)
    return lines[first:last + 1]


def _other_loop(sass: str, loop: list[str]) -> list[str]:
    """The shortest loop around a QGMMA that does not overlap `loop` (runtime/sass.k_loop's
    walk): MoeFp8Schedule.half_tile_last's second K loop."""
    import re

    lines = sass.splitlines()
    first = lines.index(loop[0])
    last = first + len(loop) - 1
    labels = {m.group(1): i for i, line in enumerate(lines)
              for m in [re.match(r"^\s*(\.L_x_\d+):", line)] if m}
    loops = [(labels[m.group(1)], i) for i, line in enumerate(lines)
             for m in [re.search(r"BRA `\((\.L_x_\d+)\)", line)]
             if m and labels.get(m.group(1), len(lines)) < i]
    around = [(b - a, a, b) for a, b in loops if (b < first or a > last)
              and any(re.search(r"\bQGMMA\b", x) for x in lines[a:b])]
    if not around:
        raise ValueError("no second loop around a QGMMA in the SASS")
    _, a, b = min(around)
    return lines[a:b + 1]


def _row(name: str, m: dict) -> str:
    p = m["per_block"]
    rest = ", ".join(f"{k} {v:g}" for k, v in sorted(p.items(), key=lambda kv: -kv[1])
                     if k not in ("FFMA", "QGMMA"))
    gaps = " / ".join(f"{n}" + (f" ({b} BAR)" if b else "") for n, b in m["gaps"])
    return (f"| {name} | {m['registers']} / {m['spill_bytes']} | {m['total']:g} | "
            f"{p.get('QGMMA', 0):g} | {p.get('FFMA', 0):g} | {m['bookkeeping']:g} | "
            f"{gaps} | {m['unit_rest']} | {rest} |")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", action="store_true",
                        help="also every schedule of gpu_fp8_bench.py --variants")
    parser.add_argument("--interval", action="store_true",
                        help="also the per-tensor kernel plain and promoting every N K steps "
                             "(interval_schedules)")
    parser.add_argument("--moe", action="store_true",
                        help="also the fp8 MoE grouped GEMMs beside the dense loop they copy "
                             "(moe_schedules)")
    parser.add_argument("--json", type=Path, help="write the counts here")
    parser.add_argument("--sass", type=Path, help="write each kernel's .cu and .sass here")
    parser.add_argument("--generic", action="store_true",
                        help="the variant without launch facts (64-bit element offsets) "
                             "instead of the variant of a 4096x7168x2048 launch")
    parser.add_argument("--only", nargs="+", metavar="SUBSTRING",
                        help="only the schedules whose name contains one of these")
    args = parser.parse_args()
    schedules = default_schedules() + (variant_schedules() if args.variants else []) + \
        (interval_schedules() if args.interval else []) + \
        (moe_schedules() if args.moe else [])
    if args.only:
        schedules = [(n, s) for n, s in schedules if any(o in n for o in args.only)]
    if args.sass:
        args.sass.mkdir(parents=True, exist_ok=True)
    print("| schedule | regs / spill B | K loop per K block | QGMMA | FFMA | bookkeeping | "
          "promotion gap (DEPBAR -> next QGMMA) | unit loop outside K loop | "
          "bookkeeping by class |")
    print("|---|---|---|---|---|---|---|---|---|")
    out = {}
    for name, s in schedules:
        out[name] = measure(s, args.sass, name, args.generic)
        out[name]["schedule"] = repr(s)
        print(_row(name, out[name]), flush=True)
        if "half_loop" in out[name]:   # the half tile's K loop: QGMMA, FFMA, the rest
            h = out[name]["half_loop"]
            print(f"|   (half tile K loop) | | {sum(h.values())} | {h.get('QGMMA', 0)} | "
                  f"{h.get('FFMA', 0)} | "
                  f"{sum(v for k, v in h.items() if k not in ('FFMA', 'QGMMA'))} | | | |",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
