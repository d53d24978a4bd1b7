"""`argus optimize TASK --out DIR`: optimize a KernelBench task file or an Argus kernel file.

    argus optimize ../shared/kernelbench/level1/1_Square_matrix_multiplication_.py --out runs/mm
    argus optimize examples/elementwise.py --out runs/ew --iterations 30 --minutes 10
    argus optimize TASK --out DIR --planner llm        # ARGUS_LLM_MODEL, *_API_KEY in the env
    argus optimize TASK --out DIR --feedback binary    # ablation: pass/fail feedback only
    argus optimize --list-cards                        # the knowledge base

Rerunning the same command with the same --out resumes an interrupted run (--fresh starts over).
Exit status: 0 when a correct candidate was found, 1 when none was, 2 when the task has no
Argus template or the command is misused.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "optimize", help="optimize a KernelBench task or an Argus kernel with the agent",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", nargs="?", help="KernelBench task file or Argus example file")
    p.add_argument("--out", help="output directory (also the resume state)")
    p.add_argument("--iterations", type=int, default=20, help="candidates to evaluate (20)")
    p.add_argument("--minutes", type=float, help="wall-clock budget for this session")
    p.add_argument("--planner", choices=("bandit", "llm"), default="bandit")
    p.add_argument("--strategy", choices=("thompson", "ucb"), default="thompson",
                   help="the bandit's arm selection (also the LLM's fallback)")
    p.add_argument("--feedback", choices=("dense", "binary"), default="dense",
                   help="binary: the planner sees pass/fail only (ablation)")
    p.add_argument("--start", choices=("auto", "naive", "default"), default="auto",
                   help="starting schedule (auto: naive for KernelBench, the file's own "
                        "otherwise)")
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--gpus", default=None, metavar="N|all",
                   help="GPUs for the candidates: 1 runs on the first GPU this process sees "
                        "(CUDA_VISIBLE_DEVICES set for the run and its workers); more than one "
                        "is refused for now (the loop evaluates one candidate at a time)")
    p.add_argument("--timeout", type=float, default=300.0,
                   help="seconds per candidate before the worker is killed (300)")
    p.add_argument("--check-sets", type=int, default=3, help="input sets per correctness check")
    p.add_argument("--track", choices=("auto", "strict", "relaxed"), default="auto")
    p.add_argument("--judge", choices=("auto", "on", "off"), default="auto",
                   help="judge the best KernelBench solution at the end (auto: with a GPU)")
    p.add_argument("--baselines", choices=("auto", "off"), default="auto",
                   help="measure eager / torch.compile on a GPU (auto)")
    p.add_argument("--trials", type=int, default=100, help="timed calls per measurement")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--db", help="experience store (default $ARGUS_AGENT_DB or "
                                "~/.cache/argus/agent/experience.sqlite)")
    p.add_argument("--fresh", action="store_true", help="start a new run even if DIR has one")
    p.add_argument("--no-warm-start", action="store_true",
                   help="do not try the store's best schedule for this task first")
    p.add_argument("--explore", choices=("auto", "on", "off"), default="auto",
                   help="when nothing is predicted to be faster, try the best-predicted "
                        "untried candidates until the budget is spent (auto = on; off stops "
                        "at the first step where the cost model predicts no gain)")
    p.add_argument("--llm-provider", choices=("openai", "anthropic"))
    p.add_argument("--llm-model")
    p.add_argument("--llm-base-url")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--list-cards", action="store_true", help="print the knowledge base and exit")
    p.set_defaults(func=cmd_optimize)


def _list_cards() -> int:
    from argus.agent.knowledge import load_cards

    cards = load_cards()
    print(f"{len(cards)} knowledge cards (argus/agent/cards/):")
    for c in cards:
        print(f"  {c.id:<30} {c.kind:<8} {','.join(c.families):<22} {c.title}")
    return 0


def _pin_gpus(spec: str) -> int:
    """`--gpus`: this run (and the workers it starts, which inherit the environment) sees the
    one GPU asked for; 0, or the exit code of a refusal. Counting the GPUs reads NVML and
    does not initialise CUDA here, so CUDA_VISIBLE_DEVICES still applies to this process."""
    import os

    from argus.bench.kernelbench.gpus import resolve_gpus
    from argus.bench.kernelbench.tasks import KernelBenchError

    try:
        gpus = resolve_gpus(spec)
    except KernelBenchError as exc:
        print(f"argus optimize: {exc}", file=sys.stderr)
        return 2
    if len(gpus) > 1:
        print(f"argus optimize: --gpus {spec} asks for {len(gpus)} GPUs, but the loop "
              "evaluates one candidate at a time, so more than one GPU would sit idle\n"
              "  fix: pass --gpus 1, or run one `argus optimize` per task with "
              "CUDA_VISIBLE_DEVICES=<gpu> each (or `argus kernelbench solve --gpus N`, which "
              "spreads tasks over GPUs)", file=sys.stderr)
        return 2
    os.environ["CUDA_VISIBLE_DEVICES"] = gpus[0]
    return 0


def cmd_optimize(args) -> int:
    if args.list_cards:
        return _list_cards()
    if not args.task or not args.out:
        print("argus optimize: give a TASK file and --out DIR (or --list-cards)", file=sys.stderr)
        return 2
    from argus.agent.composer import NoTemplate, compose
    from argus.agent.loop import OptimizeConfig, optimize, resolve_device

    if getattr(args, "gpus", None):
        code = _pin_gpus(args.gpus)
        if code:
            return code
    task_path = Path(args.task)
    if task_path.is_file() and task_path.suffix == ".py":    # a syntax error is the user's (2)
        compile(task_path.read_text(), str(task_path), "exec", dont_inherit=True)
    if resolve_device(args.device).startswith("cuda"):
        from argus.demo import gpu_available

        if not gpu_available():
            print(f"argus optimize: --device {args.device} but no Hopper GPU is visible\n"
                  f"  fix: run on a Hopper GPU, or pass --device cpu (correctness only, "
                  f"times are the cost model's estimates)", file=sys.stderr)
            return 2
    try:
        task = compose(args.task)
    except NoTemplate as exc:
        print(f"argus optimize: {exc}", file=sys.stderr)
        return 2
    config = OptimizeConfig(
        iterations=args.iterations, minutes=args.minutes, planner=args.planner,
        strategy=args.strategy, feedback=args.feedback, start=args.start, device=args.device,
        timeout_s=args.timeout, check_sets=args.check_sets, track=args.track, seed=args.seed,
        judge=args.judge, baselines=args.baselines, db=args.db, fresh=args.fresh,
        trials=args.trials, warm_start=not args.no_warm_start, explore=args.explore,
        llm_provider=args.llm_provider,
        llm_model=args.llm_model, llm_base_url=args.llm_base_url, verbose=not args.quiet)
    try:
        result = optimize(task, args.out, config)
    except ValueError as exc:
        print(f"argus optimize: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # noqa: BLE001 - e.g. an LLM configuration error
        from argus.agent.llm.providers import ProviderError

        if isinstance(exc, ProviderError):
            print(f"argus optimize: LLM provider: {exc}", file=sys.stderr)
            return 2
        raise
    return 0 if result.best is not None else 1
