"""The `argus kernelbench` command: judge, run, baselines, report, list.

    argus kernelbench judge TASK.py SOLUTION.py [--json OUT.json]    exit 0 iff correct
    argus kernelbench run --level 1 --ids 1-10 --solutions DIR --out RUN_DIR [--gpus N|all]
    argus kernelbench baselines --level 1 --level 2 [--jobs 8 --budget-s 420 --out DIR]
    argus kernelbench solve --level 1 --device cuda --gpus all --jobs auto --out DIR
    argus kernelbench report RUN_DIR
    argus kernelbench list --level 1
    argus kernelbench prebuild --level 1,2 --solutions DIR   (no GPU: kernels into ARGUS_CACHE_DIR)

`register(subparsers)` adds the command to an argparse subparsers object; `main(args)` runs a
parsed namespace. Importing this module does not import torch (so `argus --help` stays fast).
Also runnable alone: `python -m argus.bench.kernelbench ...`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

EXIT_OK, EXIT_INCORRECT, EXIT_USAGE = 0, 1, 2


def _judge_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("judging")
    g.add_argument("--device", default="auto", help="auto (cuda if available), cpu, cuda, "
                   "cuda:N; without a GPU only correctness is judged")
    g.add_argument("--sets", type=int, default=5, help="input sets (>= 5; default 5)")
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--cpu-scale", choices=["auto", "none"], default="auto",
                   help="on the CPU, shrink huge tasks to --cpu-elements/--cpu-flops (auto, "
                        "default) or keep upstream sizes (none)")
    g.add_argument("--cpu-elements", type=int, default=1 << 20)
    g.add_argument("--cpu-flops", type=float, default=2e8)
    g.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                   help="override a task size constant (repeatable), e.g. --size N=512")
    g.add_argument("--no-timing", action="store_true", help="correctness only")
    g.add_argument("--cpu-timing", action="store_true",
                   help="also time on the CPU (perf_counter, labelled; not a GPU result)")
    g.add_argument("--trials", type=int, default=100)
    g.add_argument("--warmup", type=int, default=10)
    g.add_argument("--no-baselines", action="store_true")
    g.add_argument("--baseline-cache", default=None,
                   help="baseline cache JSON (default ~/.cache/argus/kernelbench/baselines.json)")
    g.add_argument("--timeout", type=float, default=600.0,
                   help="seconds each worker step may take (default 600)")
    g.add_argument("--keep-files", action="store_true", help="keep the work folder")
    g.add_argument("--workdir", default=None)


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add `kernelbench` with its verbs to an argparse subparsers object."""
    p = subparsers.add_parser(
        "kernelbench", help="judge and benchmark KernelBench solutions",
        description="Judge KernelBench solutions so that cheating does not pay: float64 "
                    "reference in a separate process, mixed input sets, strict and relaxed "
                    "tracks, probes for trivial answers, poisoned memory, whole-device timing "
                    "against eager and torch.compile.")
    verbs = p.add_subparsers(dest="kb_verb", metavar="VERB")
    verbs.required = True

    j = verbs.add_parser("judge", help="judge one solution file (exit 0 iff correct)")
    j.add_argument("task", help="task file (level<N>/<id>_<Name>.py)")
    j.add_argument("solution", help="solution file defining ModelNew")
    j.add_argument("--json", dest="json_out", default=None, help="write the judgment here")
    j.add_argument("--quiet", action="store_true")
    _judge_options(j)

    r = verbs.add_parser("run", help="judge a directory of solutions over many tasks "
                                     "(resumable), then write reports")
    _selection(r)
    r.add_argument("--solutions", required=True,
                   help="folder of solutions: level<L>/<task file name> (or <id>.py, "
                        "<id>_*.py, level<L>_<id>.py)")
    r.add_argument("--out", default="kernelbench-run",
                   help="run folder: results.jsonl, report.* (default ./kernelbench-run); "
                        "running the same command again resumes")
    r.add_argument("--fresh", action="store_true", help="do not resume an earlier run")
    r.add_argument("--jobs", default="1",
                   help="tasks judged at once per GPU (auto: a default for this machine; > 1 "
                        "judges directly with timings serialized by a GPU gate, see "
                        "argus/bench/kernelbench/parallel.py)")
    r.add_argument("--budget-s", type=float, default=None,
                   help="wall seconds for judging: no task starts after, what runs is stopped "
                        "(a resumed run judges it)")
    _gpus_option(r)
    _judge_options(r)

    b = verbs.add_parser("baselines", help="measure eager and torch.compile times (GPU)")
    _selection(b)
    b.add_argument("--cache", default=None, help="baseline cache JSON")
    b.add_argument("--out", default=None, help="also write baselines.json and .md here")
    b.add_argument("--jobs", type=int, default=4, help="parallel compile workers")
    b.add_argument("--budget-s", type=float, default=3600.0)
    b.add_argument("--task-timeout-s", type=float, default=600.0)
    b.add_argument("--trials", type=int, default=100)
    b.add_argument("--warmup", type=int, default=10)
    b.add_argument("--no-compile", action="store_true")
    b.add_argument("--device", default="cuda")
    _gpus_option(b, what="compile workers per GPU (--jobs)")

    rep = verbs.add_parser("report", help="rewrite report.md/json/svg of a run folder")
    rep.add_argument("run_dir")
    rep.add_argument("--out", default=None)

    sm = verbs.add_parser("summary", help="per-level summary of a solve folder (solved "
                                          "strict / relaxed, Argus share, geomean speedups)")
    sm.add_argument("run_dir")
    sm.add_argument("--phases", action="store_true",
                    help="also where the judging time went (seconds per phase)")

    pb = verbs.add_parser("prebuild", help="compile the kernels of every task's solution "
                                           "ahead of time, without a GPU, into the compile "
                                           "cache (ARGUS_CACHE_DIR) a GPU judge then loads")
    _selection(pb)
    pb.add_argument("--solutions", required=True, help="folder of solutions (as for `run`; "
                    "`solve --compose-only --out D` writes them to D/solutions)")
    pb.add_argument("--jobs", type=int, default=2, help="tasks built at once (processes)")
    pb.add_argument("--timeout", type=float, default=600.0, help="seconds per task")

    ls = verbs.add_parser("list", help="list tasks and their size constants")
    _selection(ls)
    from argus.compose.cli import add_solve   # compose the tasks into Argus kernels, judge

    add_solve(verbs, _selection, _judge_options)
    _gpus_option(verbs.choices["solve"])
    p.set_defaults(func=main)
    return p


def _gpus_option(p: argparse.ArgumentParser, what: str = "--jobs slots") -> None:
    p.add_argument("--gpus", default=None, metavar="N|all",
                   help=f"one worker process per GPU (the first N this process sees, or all; "
                        f"choose them with CUDA_VISIBLE_DEVICES), each with {what}; tasks go "
                        "to idle GPUs, results into the same --out (see docs/kernelbench.md, "
                        "Several GPUs)")


def _selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--root", default=None, help="KernelBench folder (default: "
                   "../shared/kernelbench beside the repo, or $ARGUS_KERNELBENCH_DIR)")
    p.add_argument("--level", action="append", default=[],
                   help="level(s): repeat or comma-separate (default: all present)")
    p.add_argument("--ids", default=None, help="problem ids, e.g. 1,2,5-9")


def _levels(args: argparse.Namespace) -> list[int] | None:
    out = [int(x) for item in args.level for x in str(item).split(",") if x.strip()]
    return out or None


def _options(args: argparse.Namespace) -> Any:
    from argus.bench.kernelbench.judge import JudgeOptions
    from argus.bench.kernelbench.shrink import SizeBudget

    overrides = None
    if args.size:
        overrides = {}
        for item in args.size:
            name, _, value = item.partition("=")
            overrides[name.strip()] = int(value)
    if args.sets < 5:
        print("note: fewer than 5 input sets is below the harness's rule; using 5",
              file=sys.stderr)
    return JudgeOptions(
        device=args.device, sets=max(5, args.sets), seed=args.seed, cpu_scale=args.cpu_scale,
        cpu_budget=SizeBudget(args.cpu_elements, args.cpu_flops), overrides=overrides,
        timing=not args.no_timing, cpu_timing=args.cpu_timing, trials=args.trials,
        warmup=args.warmup, baselines=not args.no_baselines,
        baseline_cache=args.baseline_cache, timeout_s=args.timeout, workdir=args.workdir,
        keep_files=args.keep_files)


def main(args: argparse.Namespace) -> int:
    """Run a parsed `kernelbench` namespace; returns the exit code."""
    from argus.bench.kernelbench.tasks import KernelBenchError

    try:
        verb = {"judge": _cmd_judge, "run": _cmd_run, "baselines": _cmd_baselines,
                "report": _cmd_report, "list": _cmd_list, "solve": _cmd_solve,
                "prebuild": _cmd_prebuild,
                "summary": _cmd_summary}[args.kb_verb]
        return verb(args)
    except KernelBenchError as exc:
        print(f"argus kernelbench {args.kb_verb}: {exc}", file=sys.stderr)
        return EXIT_USAGE


def _cmd_judge(args: argparse.Namespace) -> int:
    from argus.bench.kernelbench.judge import REASONS, judge
    from argus.bench.kernelbench.tasks import KernelBenchError, task_from_path

    task = task_from_path(args.task)
    if not Path(args.solution).is_file():
        raise KernelBenchError(f"solution file {args.solution} does not exist",
                               fix="pass a .py file that defines ModelNew")
    options = _options(args)
    if options.resolved_device() == "cpu" and not args.quiet:
        print("no GPU: judging correctness only, on the CPU"
              + (" (sizes may be reduced, see `sizes`)" if options.cpu_scale == "auto" else ""),
              file=sys.stderr)
    j = judge(task, args.solution, options)
    if args.json_out:
        Path(args.json_out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json_out).write_text(json.dumps(j.to_json(), indent=1))
    if not args.quiet:
        print(j.summary())
        print(f"  sizes: {j.sizes}; precision: {j.precision}; relaxed track: "
              f"{'pass' if j.correct_relaxed else 'fail'}")
        for reason in j.reasons:
            print(f"  {reason}: {REASONS.get(reason, '')}")
        if j.detail:
            print(f"  detail: {j.detail[:1500]}")
        for s in j.sets:
            errs = ", ".join(f"rel_l2={e['rel_l2']:.3g}" if isinstance(e["rel_l2"], float)
                             else f"rel_l2={e['rel_l2']}" for e in s.errors)
            print(f"  set {s.index} {s.distribution:12s} strict={'ok' if s.strict_ok else 'FAIL'}"
                  f" relaxed={'ok' if s.relaxed_ok else 'FAIL'} {errs}")
        if j.degenerate:
            print(f"  task is degenerate for {', '.join(j.degenerate)}: never counted solved")
        print(f"  argus kernels: {j.argus_kernels} ({j.argus_evidence})")
        if j.timing:
            print(f"  time: median {j.timing['median_ms']:.4f} ms ({j.timing['clock']})")
    return EXIT_OK if j.correct else EXIT_INCORRECT


def _cmd_run(args: argparse.Namespace) -> int:
    from argus.bench.kernelbench.runner import run_suite
    from argus.bench.kernelbench.tasks import KernelBenchError, discover, parse_ids

    tasks = discover(args.root, levels=_levels(args), ids=parse_ids(args.ids))
    if not tasks:
        raise KernelBenchError("no task matches the selection",
                               fix="check --root, --level and --ids (see `kernelbench list`)")
    options = _options(args)
    runner = _runner(args, options, "run")
    if runner is None:
        runner = run_suite
    result = runner(tasks, args.solutions, args.out, options, resume=not args.fresh)
    solved = sum(1 for j in result.judgments if j.solved)
    print(f"{solved}/{len(result.judgments)} solved; {len(result.resumed)} resumed, "
          f"{len(result.missing)} without a solution; reports in {args.out}")
    return EXIT_OK


def _cmd_prebuild(args: argparse.Namespace) -> int:
    from argus.bench.kernelbench.prebuild import compiler_id, prebuild_all
    from argus.bench.kernelbench.tasks import KernelBenchError, discover, parse_ids
    from argus.runtime.cache import cache_dir

    tasks = discover(args.root, levels=_levels(args), ids=parse_ids(args.ids))
    if not tasks:
        raise KernelBenchError("no task matches the selection",
                               fix="check --root, --level and --ids (see `kernelbench list`)")
    print(f"[prebuild] {len(tasks)} tasks into {cache_dir()} with {compiler_id() or 'no NVRTC'}",
          file=sys.stderr, flush=True)
    results = prebuild_all(tasks, args.solutions, jobs=args.jobs, timeout_s=args.timeout)
    failed = {k: r["error"] for k, r in results.items() if "error" in r}
    built = sum(r.get("compiles", 0) for r in results.values())
    print(f"{len(results) - len(failed)}/{len(results)} solutions built ({built} kernels "
          f"compiled) into {cache_dir()}" + (f"; failed: {', '.join(sorted(failed))}"
                                             if failed else ""))
    for key, why in sorted(failed.items()):
        print(f"  {key}: {why}")
    return EXIT_OK


def _cmd_solve(args: argparse.Namespace) -> int:
    from argus.bench.kernelbench.runner import run_suite
    from argus.bench.kernelbench.tasks import KernelBenchError, discover, parse_ids
    from argus.compose.cli import cmd_solve

    tasks = discover(args.root, levels=_levels(args), ids=parse_ids(args.ids))
    if not tasks:
        raise KernelBenchError("no task matches the selection",
                               fix="check --root, --level and --ids (see `kernelbench list`)")
    options = _options(args)
    return cmd_solve(args, tasks, options, _runner(args, options, "solve") or run_suite,
                     summarize=_summarize)


def _runner(args: argparse.Namespace, options: Any, verb: str) -> Any:
    """run_parallel with the command's --jobs, --budget-s, --gpu-mem-gb and --gpus, or None
    for the serial runner (one slot, no budget, no --gpus)."""
    from argus.bench.kernelbench.gpus import check_device, resolve_gpus

    gpus = resolve_gpus(args.gpus)
    check_device(options.device, gpus)
    device = "cuda" if gpus else options.resolved_device()
    jobs = _jobs(args.jobs, device, max(1, len(gpus)))
    if jobs <= 1 and not args.budget_s and not gpus:
        return None
    from functools import partial

    from argus.bench.kernelbench.parallel import ParallelOptions, run_parallel

    where = f"{len(gpus)} GPU(s) (CUDA_VISIBLE_DEVICES={','.join(gpus)}), {jobs} slot(s) " \
            "each" if gpus else f"{jobs} parallel slots on {device}"
    print(f"[{verb}] judging with {where}"
          + (f", budget {args.budget_s:.0f} s" if args.budget_s else ""),
          file=sys.stderr, flush=True)
    return partial(run_parallel, parallel=ParallelOptions(
        jobs=jobs, budget_s=args.budget_s, gpu_mem_gb=getattr(args, "gpu_mem_gb", None),
        gpus=gpus))


def _jobs(value: str, device: str, gpus: int = 1) -> int:
    from argus.bench.kernelbench.parallel import default_jobs

    if str(value).strip().lower() == "auto":
        return default_jobs(device, gpus)
    try:
        return max(1, int(value))
    except ValueError:
        from argus.bench.kernelbench.tasks import KernelBenchError

        raise KernelBenchError(f"--jobs {value!r} is neither a number nor auto",
                               fix="pass --jobs auto or --jobs 8") from None


def _summarize(rows: dict[str, dict[str, Any]], judged: dict[str, Any]) -> str:
    """The per-level summary of a solve run: selected tasks are those not skipped."""
    from argus.bench.kernelbench.summary import level_rows, markdown

    selected: dict[int, list[str]] = {}
    for key, row in rows.items():
        if not row.get("skipped"):
            selected.setdefault(int(row["level"]), []).append(key)
    return markdown(level_rows(selected, judged.values()))


def _cmd_summary(args: argparse.Namespace) -> int:
    """The per-level summary of a solve folder from compose.jsonl and results.jsonl (also of
    a run that was stopped: tasks without a result count as not solved)."""
    from argus.bench.kernelbench.judge import Judgment
    from argus.bench.kernelbench.runner import load_results
    from argus.bench.kernelbench.tasks import KernelBenchError

    folder = Path(args.run_dir)
    compose = folder / "compose.jsonl"
    if not compose.exists():
        raise KernelBenchError(f"no compose.jsonl in {folder}",
                               fix="pass the --out folder of `argus kernelbench solve`")
    rows = {}
    for line in compose.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[row["task"]] = row
    judged = {k: Judgment.from_json(r["judgment"]) for k, r in load_results(folder).items()
              if k in rows}
    print(_summarize(rows, judged), end="")
    selected = [k for k, row in rows.items() if not row.get("skipped")]
    left = [k for k in selected if k not in judged]
    print(f"\n{len(judged)} of {len(selected)} selected tasks judged"
          + (f"; not judged: {', '.join(left)}" if left else ""))
    unsolved = [j for k, j in sorted(judged.items(), key=lambda kv: (kv[1].level,
                                                                      kv[1].problem_id))
                if not j.solved]
    if unsolved:
        def why(j: Any) -> str:
            return j.reason or ("degenerate" if j.degenerate else f"argus {j.argus_kernels}")

        print("not solved (strict): " + "; ".join(
            f"{j.task} {why(j)}" + (" (relaxed ok)" if j.correct_relaxed else "")
            for j in unsolved))
    if args.phases:
        from argus.bench.kernelbench.summary import phase_table

        print("\nWhere the judging time went (seconds, summed over tasks judged in parallel):\n")
        print(phase_table(judged.values()), end="")
    return EXIT_OK


def _cmd_baselines(args: argparse.Namespace) -> int:
    import torch

    from argus.bench.kernelbench.baseline_suite import SuiteOptions, markdown, run_baselines
    from argus.bench.kernelbench.baselines import BaselineCache
    from argus.bench.kernelbench.tasks import KernelBenchError, discover, parse_ids

    if args.device.startswith("cuda") and not torch.cuda.is_available():
        raise KernelBenchError("baselines need a CUDA GPU and none is visible",
                               fix="run on the GPU machine (or --device cpu for a labelled "
                                   "CPU smoke test)")
    tasks = discover(args.root, levels=_levels(args), ids=parse_ids(args.ids))
    options = SuiteOptions(jobs=args.jobs, budget_s=args.budget_s,
                           task_timeout_s=args.task_timeout_s, trials=args.trials,
                           warmup=args.warmup, compile=not args.no_compile, device=args.device)
    cache = BaselineCache(args.cache)
    import time

    from argus.bench.kernelbench.gpus import baselines_on_gpus, resolve_gpus

    gpus = resolve_gpus(args.gpus)
    t0 = time.monotonic()
    log_dir = Path(args.out) / "logs" if args.out else None
    if gpus:
        outcomes, env = baselines_on_gpus(
            tasks, options, gpus, cache=cache, log_dir=log_dir,
            say=lambda text: print(f"[baselines {time.monotonic() - t0:5.0f}s] {text}",
                                   file=sys.stderr, flush=True))
    else:
        outcomes, env = run_baselines(tasks, options, cache=cache, log_dir=log_dir)
    text = markdown(outcomes, env, options, time.monotonic() - t0)
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "baselines.md").write_text(text)
        (out / "baselines.json").write_text(json.dumps([o.to_json() for o in outcomes],
                                                       indent=1))
    print(text)
    print(f"cache: {cache.path}")
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from argus.bench.kernelbench.judge import Judgment
    from argus.bench.kernelbench.report import write_reports
    from argus.bench.kernelbench.runner import load_results
    from argus.bench.kernelbench.tasks import KernelBenchError

    records = load_results(args.run_dir)
    if not records:
        raise KernelBenchError(f"no results.jsonl records in {args.run_dir}",
                               fix="pass the --out folder of `argus kernelbench run`")
    judgments = sorted((Judgment.from_json(r["judgment"]) for r in records.values()),
                       key=lambda j: (j.level, j.problem_id))
    devices = sorted({j.device for j in judgments if j.device})
    paths = write_reports(judgments, args.out or args.run_dir,
                          meta={"device": ", ".join(devices) or "?"})
    for kind, path in paths.items():
        print(f"{kind}: {path}")
    return EXIT_OK


def _cmd_list(args: argparse.Namespace) -> int:
    from argus.bench.kernelbench.tasks import discover, parse_ids, size_sites

    for t in discover(args.root, levels=_levels(args), ids=parse_ids(args.ids)):
        sites = ", ".join(f"{s.name}={s.value}" for s in size_sites(t.path.read_text()).values())
        print(f"{t.key:8s} {t.name:60s} {sites}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="argus")
    register(parser.add_subparsers(dest="command"))
    return parser


def entry(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if getattr(args, "command", None) != "kernelbench":
        build_parser().print_help()
        return EXIT_USAGE
    return main(args)
