"""How much of KernelBench argus.compose lowers, measured on the CPU with the interpreter.

For every non-convolution task of the selected levels: does torch.fx capture it, does it
partition fully into templates (no op left to torch), and does the composed ModelNew match the
float64 reference at reduced sizes (the judge's CPU shrinking with a smaller budget) on input
sets of the judge's plan (the task's own rand, signed normal, heavy-tailed), each within the
strict fp32 bound (argus/bench/kernelbench/tolerance.py floors: rel_l2 <= 1e-5, max_elem <=
1e-4)? Prints a markdown table and the totals; the old matcher's count (argus/agent/composer.py
before it delegated here: one fp32 A @ B or a chain of unary elementwise ops) is the baseline.

    .venv/bin/python scripts/compose_coverage.py --level 1 --level 2 [--ids 1-20] [--sets 3]
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def check_task(task, sets: int, budget) -> dict:
    from argus.bench.kernelbench import inputs as kb_inputs
    from argus.bench.kernelbench import tolerance
    from argus.bench.kernelbench.shrink import plan_sizes
    from argus.bench.kernelbench.tasks import load_task
    from argus.compose.capture import CaptureError
    from argus.compose.runtime import ComposedModel

    row = {"task": task.key, "name": task.path.stem, "capture": False, "full": False,
           "match": False, "unsupported": "", "kernels": 0, "detail": ""}
    plan = plan_sizes(task.path, budget)
    module = load_task(task.path, plan.overrides)
    torch.manual_seed(0)
    init = list(module.get_init_inputs())
    torch.manual_seed(0)
    ref = module.Model(*init)

    class ModelNew(ComposedModel):
        MODEL = module.Model

    torch.manual_seed(0)
    new = ModelNew(*init)
    new.load_state_dict(ref.state_dict())
    ref = ref.double()
    worst = 0.0
    ok = True
    for spec in kb_inputs.plan(max(5, sets))[:sets]:
        base = kb_inputs.task_inputs(module, spec.seed)
        for absolute in (False, True):
            xs, _ = kb_inputs.transform(base, spec.distribution, spec.seed, absolute=absolute)
            with torch.no_grad():
                r = ref(*kb_inputs.to_float64(xs))
            if bool(torch.isfinite(r).all()):
                break
        try:
            with torch.no_grad():
                y = new(*[x.clone() if isinstance(x, torch.Tensor) else x for x in xs])
        except CaptureError as exc:
            row["detail"] = str(exc).splitlines()[0][:120]
            return row
        prog = next(iter(new._programs.values()))
        row["capture"] = True
        row["kernels"] = prog.plan.argus_steps
        row["unsupported"] = ", ".join(prog.unsupported)
        row["full"] = not prog.unsupported
        if tuple(y.shape) != tuple(r.shape):
            row["detail"] = f"shape {tuple(y.shape)} vs {tuple(r.shape)}"
            return row
        if not r.is_floating_point():
            good = bool((y == r).all())
            worst = max(worst, 0.0 if good else 1.0)
        else:
            err = tolerance.errors(y.detach(), r)
            good = tolerance.strict_ok(err, tolerance.strict_tolerance(torch.float32, None))
            worst = max(worst, err.rel_l2)
        ok = ok and good
    row["match"] = ok
    row["detail"] = f"rel_l2 {worst:.1e}; {plan.describe()}"
    return row


def old_matcher(task) -> bool:
    """The agent's matcher before this work: the GEMM or unary-chain rules alone."""
    from argus.agent import composer

    try:
        composer.compose_kernelbench(task.path, delegate=False)
        return True
    except TypeError:   # a composer without the delegate switch is the old one
        try:
            composer.compose_kernelbench(task.path)
            return True
        except Exception:  # noqa: BLE001
            return False
    except Exception:  # noqa: BLE001
        return False


def main(argv=None) -> int:
    from argus.bench.kernelbench.shrink import SizeBudget
    from argus.bench.kernelbench.tasks import discover, parse_ids

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--level", action="append", type=int, default=[])
    ap.add_argument("--ids", default=None)
    ap.add_argument("--sets", type=int, default=3)
    ap.add_argument("--elements", type=int, default=1 << 17)
    ap.add_argument("--flops", type=float, default=2e7)
    ap.add_argument("--out", default=None, help="also write the table here")
    args = ap.parse_args(argv)
    tasks = [t for t in discover(levels=args.level or [1, 2], ids=parse_ids(args.ids))
             if "conv" not in t.path.stem.lower()]
    budget = SizeBudget(args.elements, args.flops)
    lines = ["| task | captured | fully in templates | matches torch (interpreter) | old "
             "matcher | torch runs | detail |", "|---|---|---|---|---|---|---|"]
    totals: dict[int, dict[str, int]] = {}
    for t in tasks:
        t0 = time.monotonic()
        try:
            row = check_task(t, args.sets, budget)
        except Exception as exc:  # noqa: BLE001 - one task's failure is that task's row
            row = {"task": t.key, "name": t.path.stem, "capture": False, "full": False,
                   "match": False, "unsupported": "", "kernels": 0,
                   "detail": f"{type(exc).__name__}: {str(exc).splitlines()[0][:100]}"}
            if "-v" in sys.argv:
                traceback.print_exc()
        old = old_matcher(t)
        tot = totals.setdefault(t.level, {"n": 0, "capture": 0, "full": 0, "match": 0,
                                          "full_match": 0, "old": 0})
        tot["n"] += 1
        tot["capture"] += row["capture"]
        tot["full"] += row["full"]
        tot["match"] += row["match"]
        tot["full_match"] += row["full"] and row["match"]
        tot["old"] += old
        yn = {True: "yes", False: "no"}
        lines.append(f"| {t.key} {t.path.stem} | {yn[row['capture']]} | {yn[row['full']]} | "
                     f"{yn[row['match']]} | {yn[old]} | {row['unsupported'] or '-'} | "
                     f"{row['detail']} |")
        print(lines[-1], f"({time.monotonic() - t0:.1f}s)", file=sys.stderr, flush=True)
    summary = ["| level | non-conv tasks | captured | fully in templates | matches torch | "
               "full and matching | old matcher |", "|---|---|---|---|---|---|---|"]
    for level, tot in sorted(totals.items()):
        summary.append(f"| {level} | {tot['n']} | {tot['capture']} | {tot['full']} | "
                       f"{tot['match']} | {tot['full_match']} | {tot['old']} |")
    text = "\n".join(summary) + "\n\n" + "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
