#!/usr/bin/env python3
"""The layout passes around the fp32 convolutions against torch's permute copy (device run).

Run from the repository root on a Hopper GPU:

    python3 -u scripts/gpu_transpose_bench.py [--out "$OUT"] [--trials 100] [--rounds 3]

For each fp32 shape [B, R, C] of --shapes (default [8, 64, 524288], [32, 64, 131072],
[16, 64, 1048576]; a shape with R <= 32, e.g. 16,4,16777216, adds round_nhwc_for(R), the
narrow tile the tf32 convolution takes for few channels) it times, side by side:
  - compose's `transpose` (argus/compose/launch.py: X [B, R, C] -> Y [B, C, R], a transposed
    store of 64x64 tiles, issue 17), with its default tiles and two other tile shapes;
  - `round_nhwc` (argus/kernels/conv_tf32.py: X [B, C, R] -> Y [B, R, C] rounded to tf32,
    the tf32 convolution's input pass; here C = the shape's R, i.e. 64 channels);
  - the selection kernels both replaced (kept in this script only: a [BR, BC, BR] where + max
    / sum, their old tile sizes), for the before / after;
  - torch: y.copy_(x.permute(0, 2, 1)) into a preallocated y (cuDNN-free: what eager's
    x.permute(...).contiguous() runs, without the allocation).
Timing: argus.runtime.timing.measure_alternating (CUDA events, 256 MB L2 flush before every
trial, median of >= 100 trials a round, rounds alternated so that clock drift falls on all
variants alike). TB/s = (bytes read + bytes written) / median time. Every variant's output is
checked bit for bit against torch (round_nhwc against torch's tf32 rounding of the permute)
before it is timed.

--check-only: no timing, small shapes; on a machine without CUDA the kernels run in the
interpreter (a smoke test of this script).
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch

import argus as ag

# ----------------------------------------------------------------------------- the old kernels
# The selection transposes this work replaced (HEAD before issue 17's transposed store), for
# the before / after only: element (i, j, k) of a [BR, BC, BR] selection keeps x[i, j] where
# i == k and the reduction over i places it at (j, k).

@ag.kernel(threads=256, name="transpose_select")
def transpose_select(X: ag.Tensor["B", "R", "C", ag.f32],
                     Y: ag.Tensor["B", "C", "R", ag.f32], BR: int = 16, BC: int = 32):
    tiles_r = ag.cdiv(X.shape[1], BR)
    tiles_c = ag.cdiv(X.shape[2], BC)
    (p,) = ag.grid(X.shape[0] * tiles_r * tiles_c)
    j = p % tiles_c
    i = (p // tiles_c) % tiles_r
    b = p // (tiles_c * tiles_r)
    x = ag.load(X, (b, i * BR, j * BC), (BR, BC))
    sel = ag.arange(BR)[:, None, None] == ag.arange(BR)[None, None, :]
    t = ag.where(sel, x[:, :, None], float("-inf")).max(axis=0)
    ag.store(Y, (b, j * BC, i * BR), t)


@ag.kernel(threads=256, name="round_nhwc_select")
def round_nhwc_select(X: ag.Tensor["B", "C", "R", ag.f32],
                      Y: ag.Tensor["B", "R", "CP", ag.f32], BR: int = 32, BC: int = 16):
    tiles_r = ag.cdiv(Y.shape[1], BR)
    tiles_c = ag.cdiv(Y.shape[2], BC)
    (p,) = ag.grid(Y.shape[0] * tiles_r * tiles_c)
    j = p % tiles_c
    i = (p // tiles_c) % tiles_r
    b = p // (tiles_c * tiles_r)
    x = ag.load(X, (b, j * BC, i * BR), (BC, BR))
    sel = ag.arange(BC)[:, None, None] == ag.arange(BC)[None, None, :]
    t = ag.where(sel, x[:, :, None], 0.0).sum(axis=0)
    ag.store(Y, (b, i * BR, j * BC), ag.round_tf32(t))


# ----------------------------------------------------------------------------- the run


def _launcher(kernel, x, y, consts: dict):
    """A no-argument call of `kernel` on (x, y): compiled once on CUDA, interpreted on CPU."""
    if x.is_cuda:
        compiled = kernel.compile(**consts)
        return lambda: compiled(x, y)
    return lambda: kernel.interpret(x, y, **consts)


def _variants(shape):
    """(name, kernel-or-None, consts, rounded) of one shape: rounded for round_nhwc's family."""
    from argus.compose.launch import transpose
    from argus.kernels.conv_tf32 import round_nhwc, round_nhwc_for

    out = [("torch permute copy", None, {}, False)]
    for consts in ({}, {"BR": 32, "BC": 128}, {"BR": 128, "BC": 32}):
        tag = "64x64" if not consts else f"{consts['BR']}x{consts['BC']}"
        out.append((f"argus transpose {tag}", transpose, consts, False))
    out.append(("old selection transpose 16x32", transpose_select, {}, False))
    for consts in ({}, {"BR": 128, "BC": 32}, {"BR": 32, "BC": 128}):
        tag = "64x64" if not consts else f"{consts['BR']}x{consts['BC']}"
        out.append((f"argus round_nhwc {tag}", round_nhwc, consts, True))
    if shape[1] <= 32:      # few channels: the tile the tf32 convolution picks for them
        narrow = round_nhwc_for(shape[1])
        out.append((f"argus {narrow.name} (op's pick)", narrow, {}, True))
    out.append(("old selection round_nhwc 32x16", round_nhwc_select, {}, True))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="8,64,524288;32,64,131072;16,64,1048576",
                    help="B,R,C triples separated by ';'")
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default="")
    ap.add_argument("--check-only", action="store_true")
    args = ap.parse_args()

    from argus.ops.conv import round_to_tf32
    from argus.runtime.timing import measure_alternating

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    shapes = [tuple(int(v) for v in s.split(",")) for s in args.shapes.split(";") if s]
    if args.check_only:
        shapes = [(2, 64, 200), (1, 37, 130), (2, 4, 1500)]
    results = []
    for shape in shapes:
        b, r, c = shape
        gib = b * r * c * 4 / 2 ** 30
        print(f"\n== [B, R, C] = {list(shape)} fp32 ({gib:.2f} GiB each way)", flush=True)
        x = torch.randn(shape, device=device)
        x.view(-1)[:3] = torch.tensor([-0.0, float("nan"), float("inf")])
        want = x.permute(0, 2, 1).contiguous()
        want_rounded = round_to_tf32(want)
        ys, calls, names = [], [], []
        for name, kernel, consts, rounded in _variants(shape):
            y = torch.empty(b, c, r, device=device)
            if kernel is None:
                call = (lambda x=x, y=y: y.copy_(x.permute(0, 2, 1)))
            else:
                call = _launcher(kernel, x, y, consts)
            y.fill_(float("nan"))
            call()
            if cuda:
                torch.cuda.synchronize()
            ref = want_rounded if rounded else want
            exact = torch.equal(y.view(torch.int32), ref.view(torch.int32))
            print(f"  {name:34s} bit-exact: {exact}", flush=True)
            if not exact:
                differ = y.view(torch.int32) != ref.view(torch.int32)
                bad = [(i, y[tuple(i)].item(), ref[tuple(i)].item())
                       for i in differ.nonzero()[:3].tolist()]
                note = " (expected: the old sum over zeros turns -0.0 into +0.0)" \
                    if kernel is round_nhwc_select else ""
                print(f"    MISMATCH: {int(differ.sum())} elements differ, e.g. (index, got, "
                      f"want) {bad}{note}", flush=True)
            ys.append(y)
            calls.append(call)
            names.append(name)
        if args.check_only or not cuda:
            continue
        timings = measure_alternating(calls, rounds=args.rounds, trials=args.trials)
        moved = 2 * b * r * c * 4
        base = timings[0].median_ms
        for name, t in zip(names, timings):
            tbs = moved / (t.median_ms * 1e-3) / 1e12
            print(f"  {name:34s} {t.median_ms:9.4f} ms  {tbs:6.3f} TB/s  "
                  f"x torch {base / t.median_ms:5.2f}", flush=True)
            results.append({"shape": list(shape), "variant": name, "median_ms": t.median_ms,
                            "tb_s": tbs, "timing": t.to_json()})
        del ys, calls, x, want, want_rounded
        torch.cuda.empty_cache()
    if args.out and results:
        out = Path(args.out) / "transpose_bench.json"
        out.write_text(json.dumps(results, indent=1))
        print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
