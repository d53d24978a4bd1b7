"""Compose every KernelBench convolution task (level 1 `*conv*`, level 2 `*Conv*`) and check
the solution against the task's Model in float64, on the CPU in the interpreter at reduced
sizes (or on the GPU with --device cuda): one line per task, then the counts.

A task passes when it composes fully (nothing left to torch) and, on its own inputs and on
signed ones, the normwise error is within the judge's strict floor: max(1e-5, 16 x the error of
torch's own fp32 forward), which is what admits ill-conditioned outputs (a mean of normalized
values). This is a check of the composition, not the judge (argus kernelbench solve is).

    python scripts/compose_conv_sweep.py                        # all 81 tasks (CPU: ~40 min)
    python scripts/compose_conv_sweep.py --ids 67,82 --level 1  # some
    python scripts/compose_conv_sweep.py --device cuda          # on the GPU, larger sizes
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _floating(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor) and x.is_floating_point()


def check(path: Path, device: str, elements: int, flops: float, out: Path) -> tuple[bool, str]:
    import torch

    from argus.bench.kernelbench.shrink import SizeBudget, plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose import compose_task

    comp = compose_task(path)
    if not comp.complete:
        return False, f"not fully composed: {comp.describe()}"
    sol = out / path.parent.name / path.name
    sol.parent.mkdir(parents=True, exist_ok=True)
    sol.write_text(comp.source)
    spec = importlib.util.spec_from_file_location(f"sweep_{path.parent.name}_{path.stem}", sol)
    solution = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(solution)
    task = load_task(path, plan_sizes(path, SizeBudget(elements, flops)).overrides)
    torch.manual_seed(0)
    init = list(task.get_init_inputs())
    ref = task.Model(*init).to(device)
    new = solution.ModelNew(*init).to(device)
    new.load_state_dict(ref.state_dict())
    torch.manual_seed(1)
    own = [x.to(device) if isinstance(x, torch.Tensor) else x for x in task.get_inputs()]
    signed = [torch.randn_like(x) if _floating(x) and x.dim() > 0 else x for x in own]
    worst = 0.0
    for xs in (own, signed):
        with torch.no_grad():
            r32 = ref.float()(*[x.float() if _floating(x) else x for x in xs])
            r = ref.double()(*[x.double() if _floating(x) else x for x in xs])
            y = new(*xs)
        if tuple(y.shape) != tuple(r.shape):
            return False, f"shape {tuple(y.shape)} != {tuple(r.shape)}"
        err = ((y.double() - r).norm() / r.norm()).item()
        floor = max(1e-5, 16 * ((r32.double() - r).norm() / r.norm()).item())
        worst = max(worst, err / floor)
    return worst <= 1.0, f"error {worst:.2e} of the strict floor; {comp.describe()}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernelbench", type=Path, default=ROOT.parent / "shared" / "kernelbench")
    ap.add_argument("--level", type=int, action="append", default=[])
    ap.add_argument("--ids", default=None, help="problem ids, e.g. 1,67")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--elements", type=int, default=None,
                    help="size budget (default: 16384 on CPU, 4M on CUDA)")
    ap.add_argument("--flops", type=float, default=None,
                    help="size budget (default: 1e6 on CPU, 2e9 on CUDA)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/compose_conv_sweep"))
    args = ap.parse_args()
    cuda = args.device.startswith("cuda")
    elements = args.elements or ((1 << 22) if cuda else (1 << 14))
    flops = args.flops or (2e9 if cuda else 1e6)
    ids = {int(i) for i in args.ids.split(",")} if args.ids else None
    passed, total = 0, 0
    for level in args.level or [1, 2]:
        word = "conv" if level == 1 else "Conv"
        for path in sorted((args.kernelbench / f"level{level}").glob(f"*{word}*.py"),
                           key=lambda p: int(p.stem.split("_")[0])):
            if ids is not None and int(path.stem.split("_")[0]) not in ids:
                continue
            total += 1
            t0 = time.monotonic()
            try:
                ok, what = check(path, args.device, elements, flops, args.out)
            except Exception as exc:  # noqa: BLE001 - one task's failure is a row
                ok, what = False, f"{type(exc).__name__}: {str(exc)[:200]}"
            passed += ok
            print(f"L{level}/{path.stem[:60]:60s} {'ok  ' if ok else 'FAIL'} "
                  f"{time.monotonic() - t0:6.1f}s  {what[:160]}", flush=True)
    print(f"{passed} of {total} tasks composed fully and within the strict floor "
          f"({args.device})")


if __name__ == "__main__":
    main()
