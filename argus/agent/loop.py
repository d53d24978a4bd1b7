"""The optimization loop: plan -> edit -> verify -> compile -> check -> measure -> reward -> record.

`optimize(task, out_dir, config)` runs it with a budget (iterations, minutes) and writes the
outputs (report.py). Step 0 evaluates the starting point; step 1, when the experience store
knows a better schedule for this exact task, evaluates that (a warm start); every later step
asks the planner. Each candidate is evaluated in the worker subprocess (worker.py) with a time
limit, so a crash or a hang is a recorded failure; each completed step is written to the
experience store at once, so a killed run resumes where it stopped: rerunning the same command
with the same --out replays the recorded steps into the planner and continues.

Timing: on a Hopper GPU candidates and baselines are measured; without one every time is the
cost model's estimate, and both the progress lines and the reports say "estimate".
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from argus.agent import store as store_module
from argus.agent.bandit import BanditPlanner
from argus.agent.candidate import Candidate, Outcome, Step, gain, reward
from argus.agent.evaluate import EvalOptions
from argus.agent.families import get_family, params_key
from argus.agent.planner import FEEDBACK_MODES, Planner, PlanState, Proposal
from argus.agent.result import OptimizeConfig, RunResult
from argus.agent.store import ExperienceStore
from argus.agent.task import TaskSpec
from argus.agent.worker import WorkerClient, WorkerCrash, WorkerError, WorkerTimeout


def resolve_device(device: str) -> str:
    if device != "auto":
        return device
    from argus.demo import gpu_available

    return "cuda" if gpu_available() else "cpu"


def run_card_class(task: TaskSpec, device: str) -> str:
    """The card class (argus.ops.moe CARD_H100 / CARD_H200) a run's times are for, the key
    its steps are stored and its priors read under: on a CUDA device that device's class
    (argus.ops.moe.card_of: the card that measures); without one the card the task's cost
    model reads (TaskSpec.features' `card`: a moe_fp8 task's `card` option, else
    argus.ops.moe.card_or_default's, as families/moe_fp8.py task_card), else the H100 class
    (default_card's without CUDA, and the class stored rows without one are read as)."""
    from argus.ops import moe_module

    if device.startswith("cuda"):
        import torch

        return moe_module.card_of(torch.device(device))
    return task.features().get("card") or moe_module.CARD_H100


def _say(verbose: bool) -> Callable[[str], None]:
    def say(text: str) -> None:
        if verbose:
            print(text, flush=True)
    return say


class Optimizer:
    """One run of the loop on one task (see the module docstring)."""

    def __init__(self, task: TaskSpec, out_dir: str | Path,
                 config: OptimizeConfig = OptimizeConfig(), *, planner: Planner | None = None,
                 log: Callable[[str], None] | None = None):
        if config.feedback not in FEEDBACK_MODES:
            raise ValueError(f"feedback {config.feedback!r}: use one of {FEEDBACK_MODES}")
        self.task = task
        self.out = Path(out_dir)
        self.config = config
        self.family = get_family(task.family)
        self.planner_override = planner
        self.say = log or _say(config.verbose)
        # per-step lines: a progress bar with ETA on a terminal, plain lines otherwise (a
        # caller's own `log` gets the plain lines)
        self.bar = None if log is not None else False
        self.device = resolve_device(config.device)
        self.card_class = run_card_class(task, self.device)
        self.track = config.track if config.track != "auto" else task.track
        self.worker: WorkerClient | None = None
        self.scratch: Path | None = None

    # -- worker requests -----------------------------------------------------------------------
    def _options(self) -> EvalOptions:
        return EvalOptions(device=self.device, check_sets=self.config.check_sets,
                           track=self.track, trials=self.config.trials,
                           scratch=str(self.scratch))

    def _request(self, op: str, cand: Candidate | None, timeout: float) -> dict[str, Any]:
        assert self.worker is not None
        args: dict[str, Any] = {"task": self.task.to_json(), "options": self._options().to_json()}
        if cand is not None:
            args["candidate"] = cand.to_json()
        return self.worker.request(op, timeout, **args)

    def _outcome(self, op: str, cand: Candidate) -> Outcome:
        try:
            reply = self._request(op, cand, self.config.timeout_s)
        except WorkerTimeout as exc:
            return Outcome("timeout", "", message=str(exc))
        except WorkerCrash as exc:
            return Outcome("crash", "", message=str(exc)[-3000:])
        except WorkerError as exc:  # pragma: no cover - base class
            return Outcome("error", "", message=str(exc))
        if not reply.get("ok"):
            return Outcome("error", "", message=f"{reply.get('error')}\n"
                                                f"{reply.get('traceback', '')}"[-3000:])
        return Outcome.from_json(reply["outcome"])

    def screen(self, cand: Candidate) -> Outcome:
        return self._outcome("screen", cand)

    # -- setup ---------------------------------------------------------------------------------
    def _start(self) -> Candidate:
        mode = self.config.start
        if mode == "auto":
            mode = "naive" if self.task.origin == "kernelbench" else "default"
        if mode == "naive":
            params = self.family.naive_params(self.task)
        elif mode == "default":
            params = self.family.default_params(self.task)
        else:
            raise ValueError(f"start {self.config.start!r}: use auto, naive or default")
        return Candidate.of(self.family.normalize(self.task, params), card="start")

    def _baselines(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(baselines in the unit candidates are timed in, cost-model estimates of them)."""
        estimates = {k: {"ms": e.ms, "kind": "estimate", "model": e.model}
                     for k, e in self.family.baseline_estimates(self.task).items()}
        if not self.device.startswith("cuda"):
            return estimates, estimates
        measured: dict[str, dict[str, Any]] = {}
        if self.config.baselines == "off":
            return measured, estimates
        if self.task.origin == "kernelbench":
            try:
                from argus.bench.kernelbench.baselines import BaselineCache, get_or_measure
                from argus.bench.kernelbench.tasks import task_from_path

                self.say("measuring the eager and torch.compile baselines (cached per card) ...")
                rec = get_or_measure(task_from_path(self.task.path), BaselineCache(),
                                     device="cuda", trials=self.config.trials,
                                     timeout_s=self.config.baseline_timeout_s)
                if rec.eager_ms:
                    measured["eager"] = {"ms": rec.eager_ms, "kind": "measured"}
                if rec.compile_ms:
                    measured["torch.compile"] = {"ms": rec.compile_ms, "kind": "measured"}
            except Exception as exc:  # noqa: BLE001 - baselines are context, not the search
                self.say(f"  baselines failed: {type(exc).__name__}: {exc}")
        else:
            try:
                reply = self._request("baseline", None, self.config.timeout_s)
                measured.update(reply.get("baselines", {}) if reply.get("ok") else {})
            except WorkerError as exc:
                self.say(f"  baseline failed: {exc}")
        return measured, estimates

    def _planner(self, state: PlanState, store: ExperienceStore, run_id: str) -> Planner:
        if self.planner_override is not None:
            return self.planner_override
        priors = store.arm_stats(self.task.family, self.card_class, exclude_run=run_id)
        bandit = BanditPlanner(self.task, self.family, strategy=self.config.strategy,
                               priors=priors, screen_limit=self.config.screen_limit,
                               explore=self._explore())
        if self.config.planner == "bandit":
            return bandit
        if self.config.planner == "llm":
            from argus.agent.llm import LLMConfig, LLMPlanner, make_provider

            cfg = LLMConfig.from_env(self.config.llm_provider, self.config.llm_model,
                                     self.config.llm_base_url)
            return LLMPlanner(make_provider(cfg), bandit,
                              experience=lambda: store.similar_steps(self.task,
                                                                     self.card_class, run_id))
        raise ValueError(f"planner {self.config.planner!r}: use bandit or llm")

    def _explore(self) -> bool:
        """Explore the budget (issue 15): with a GPU the measurement may disagree with the cost
        model; without one each explored candidate is still verified, compiled and re-estimated
        with the compiler's resources, which the planner's ranking does not have. `off` keeps
        the early stop when nothing is predicted to be faster."""
        return self.config.explore != "off"

    def _run_state(self) -> dict[str, Any] | None:
        path = self.out / "run.json"
        if self.config.fresh or not path.exists():
            return None
        try:
            data = json.loads(path.read_text())
        except ValueError:
            return None
        if data.get("signature") != self.task.signature() or \
                data.get("task_sha256") != self.task.sha256:
            self.say(f"{path} belongs to another task (or the task file changed): starting a "
                     "new run")
            return None
        # a run.json written before card classes: the class the store reads such rows as
        recorded = data.get("card_class") or store_module.legacy_card_class()
        if recorded != self.card_class:
            said = (f"the {recorded} card class" if data.get("card_class") else
                    f"an unrecorded card class (read as {recorded})")
            self.say(f"{path} was measured on {said}, this run is on the {self.card_class} "
                     "class: starting a new run (its steps would mix the two cards' times)")
            return None
        return data

    def _write_state(self, run_id: str, status: str, baselines, estimates) -> None:
        data = {"run_id": run_id, "status": status, "signature": self.task.signature(),
                "task_sha256": self.task.sha256, "task": self.task.to_json(),
                "config": self.config.to_json(), "device": self.device,
                "card_class": self.card_class,
                "baselines": baselines, "estimates": estimates, "updated": time.time()}
        tmp = self.out / "run.json.tmp"
        tmp.write_text(json.dumps(data, indent=1, default=str))
        os.replace(tmp, self.out / "run.json")

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> RunResult:
        cfg = self.config
        self.out.mkdir(parents=True, exist_ok=True)
        prev = self._run_state()
        run_id = prev["run_id"] if prev else (
            f"{self.task.name[:40]}-{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}")
        store = ExperienceStore(cfg.db)
        self.scratch = Path(tempfile.mkdtemp(prefix="argus-agent-"))
        self.worker = WorkerClient(self.scratch)
        started = time.time()
        t0 = time.monotonic()
        try:
            store.start_run(run_id, self.task, cfg.to_json(), str(self.out), self.card_class)
            where = (f"the GPU ({self.card_class} card class)" if self.device.startswith("cuda")
                     else f"CPU: correctness in the interpreter, times from the cost model "
                          f"(estimates, stored as the {self.card_class} card class's)")
            self.say(f"argus optimize: {self.task.name} ({self.task.family}, "
                     f"{', '.join(f'{k}={v}' for k, v in self.task.shape)}) on {where}; "
                     f"planner {cfg.planner}, feedback {cfg.feedback}, budget {cfg.iterations} "
                     f"iterations" + (f" / {cfg.minutes:.1f} min" if cfg.minutes else ""))
            self.say(f"  precision: {self.task.precision_note}; correctness track: {self.track}")
            if prev and prev.get("baselines") is not None:
                baselines, estimates = prev["baselines"], prev.get("estimates", {})
            else:
                baselines, estimates = self._baselines()
            self._write_state(run_id, "running", baselines, estimates)
            for k, v in baselines.items():
                name = "baseline" if k == "baseline" else f"baseline {k}"   # the file's own
                self.say(f"  {name}: {v['ms']:.4f} ms ({v['kind']})")
            result = RunResult(run_id, self.out, self.task, self.device, [], baselines, estimates,
                               started=started, config=cfg)
            start = self._start()
            state = PlanState(self.task, self.family, cfg.feedback, start, baselines,
                              screen=self.screen if cfg.feedback == "dense" else None)
            planner = self._planner(state, store, run_id)
            steps = store.steps(run_id)
            for s in steps:
                planner.observe(state.add(s), state)
            if steps:
                result.resumed_at = len(steps)
                self.say(f"  resuming run {run_id} at step {len(steps)} "
                         f"({len(steps)} steps recorded)")
            base_ms = self._primary_baseline(baselines)
            stop = "budget: iterations"
            if self.bar is False:
                from argus.runtime.progress import Progress

                self.bar = Progress(cfg.iterations, f"optimize {self.task.name}",
                                    stream=sys.stdout, done=len(steps),
                                    enabled=cfg.verbose).__enter__()
            while len(steps) < cfg.iterations:
                if cfg.minutes and time.monotonic() - t0 > cfg.minutes * 60:
                    stop = "budget: minutes"
                    break
                idx = len(steps)
                proposal = self._propose(idx, start, state, planner, store)
                if proposal is None:
                    stop = ("planner: nothing left to try" if self._explore()
                            else "planner: no untried candidate is predicted to beat the best "
                                 "(cost model)")
                    break
                t_step = time.monotonic()
                outcome = self._outcome("evaluate", proposal.candidate)
                inc = state.incumbent
                inc_ms = inc.outcome.time_ms if inc else None
                r = reward(outcome, base_ms[0] if base_ms and outcome.time_kind == base_ms[1]
                           else None)
                step = Step(idx, proposal.planner, proposal.card, proposal.candidate, outcome, r,
                            gain(outcome, inc_ms), proposal.rationale, proposal.events,
                            proposal.pruned, time.monotonic() - t_step, time.time())
                store.record_step(run_id, self.task, step, self.card_class)
                steps.append(step)
                planner.observe(state.add(step), state)
                self._progress(step, steps, cfg.iterations, base_ms)
            if self.bar:
                self.bar.__exit__(None, None, None)
            result.steps = steps
            result.stop_reason = stop
            self.say(f"  stopped: {stop}")
            self._finish(result)
            store.finish_run(run_id, "done")
            self._write_state(run_id, "done", baselines, estimates)
            result.seconds = time.time() - started
            from argus.agent import report

            result.files = report.write_outputs(result)
            self.say(report.summary_line(result))
            return result
        finally:
            if self.bar:
                self.bar.__exit__(None, None, None)
            if self.worker is not None:
                self.worker.close()
            store.close()
            shutil.rmtree(self.scratch, ignore_errors=True)

    def _primary_baseline(self, baselines) -> tuple[float, str] | None:
        for name in ("eager", "baseline", "torch.compile"):
            if name in baselines and baselines[name].get("ms"):
                return float(baselines[name]["ms"]), baselines[name]["kind"]
        return None

    def _propose(self, idx: int, start: Candidate, state: PlanState, planner: Planner,
                 store: ExperienceStore) -> Proposal | None:
        if idx == 0:
            return Proposal(start, "start", "start", "the starting point")
        if idx == 1 and self.config.warm_start:
            kind = "measured" if self.device.startswith("cuda") else "estimate"
            best = store.best(self.task.signature(), self.card_class, kind)
            if best is not None:
                cand = Candidate.of(self.family.normalize(self.task, best["params"]),
                                    best.get("source") or None, "store.best")
                if cand.key not in state.tried:
                    return Proposal(cand, "store.best", "store",
                                    f"warm start: the best {kind} candidate of run "
                                    f"{best['run_id']} ({best['time_ms']:.4f} ms)")
        return planner.propose(state, seed=self.config.seed * 100003 + idx)

    def _progress(self, step: Step, steps: list[Step], total: int, base) -> None:
        o = step.outcome
        start = self.first_ok_ms(steps)
        best = min((s.outcome.time_ms for s in steps if s.outcome.ok and s.outcome.time_ms),
                   default=None)
        params = params_key(step.candidate.params_dict) if step.index == 0 else \
            _changes(steps, step)
        head = f"[{step.index + 1:>3}/{total}] {step.planner:<11} {step.card:<28} "
        if o.ok and o.time_ms is not None:
            kind = "est" if o.time_kind == "estimate" else "GPU"
            line = head + f"ok   {o.time_ms:9.4f} ms {kind}"
            if best:
                line += f"  best {best:.4f} ms"
            if start and best:
                line += f" ({start / best:.2f}x vs start"
                line += f", {base[0] / best:.2f}x vs baseline)" if base and base[1] == \
                    o.time_kind else ")"
        elif o.ok:
            line = head + "ok   (correct; no time without a GPU or a cost model)"
        else:
            line = head + f"FAIL {o.failure()[:110]}"
        lines = [line + f"   {params}"]
        if step.index == 0 and o.check_sizes:
            lines.append(f"        correctness checked at {o.check_sizes}; times are for the "
                         f"task's sizes")
        lines += [f"        event: {e}" for e in step.events]
        if step.pruned:
            lines.append(f"        pruned before running: {len(step.pruned)} "
                         f"({', '.join(sorted({p['by'] for p in step.pruned}))})")
        if self.bar:
            self.bar.advance(lines[0])
            for extra in lines[1:]:
                self.bar.note(extra)
        else:
            for text in lines:
                self.say(text)

    @staticmethod
    def first_ok_ms(steps: list[Step]) -> float | None:
        return next((s.outcome.time_ms for s in steps if s.outcome.ok and s.outcome.time_ms),
                    None)

    def _finish(self, result: RunResult) -> None:
        best = result.best
        if best is None:
            self.say("  no correct candidate: nothing to write but the report")
            return
        try:
            reply = self._request("artifacts", best.candidate, self.config.timeout_s)
            if reply.get("ok"):
                result.artifacts = reply["artifacts"]
            else:
                self.say(f"  artifacts failed: {reply.get('error')}")
        except WorkerError as exc:
            self.say(f"  artifacts failed: {exc}")
        judge = self.config.judge
        if judge == "auto":
            judge = "on" if self.device.startswith("cuda") else "off"
        if judge == "on" and self.task.origin == "kernelbench" and \
                result.artifacts.get("solution_source"):
            result.judgment = self._judge(result)

    def _judge(self, result: RunResult) -> dict[str, Any] | None:
        from argus.bench.kernelbench.judge import JudgeOptions, judge

        path = self.out / "solution.py"
        path.write_text(result.artifacts["solution_source"])
        self.say("  judging the best solution with the hardened KernelBench judge ...")
        try:
            j = judge(self.task.path, path, JudgeOptions(
                device="cuda" if self.device.startswith("cuda") else "cpu",
                timing=self.device.startswith("cuda"), trials=self.config.trials,
                timeout_s=self.config.judge_timeout_s))
        except Exception as exc:  # noqa: BLE001 - report it, keep the run's results
            self.say(f"  judge failed: {type(exc).__name__}: {exc}")
            return {"error": f"{type(exc).__name__}: {exc}"}
        self.say("  judge: " + j.summary())
        return j.to_json()


def _changes(steps: list[Step], step: Step) -> str:
    start = steps[0].candidate.params_dict if steps else {}
    new = step.candidate.params_dict
    diff = [f"{k}={new[k]}" for k in sorted(new) if start.get(k) != new[k]]
    text = ", ".join(diff) if diff else "(start schedule)"
    return text + (" +source" if step.candidate.source else "")


def optimize(task: TaskSpec, out_dir: str | Path, config: OptimizeConfig = OptimizeConfig(),
             **kwargs: Any) -> RunResult:
    """Run the loop on `task`, writing outputs to `out_dir` (see Optimizer)."""
    return Optimizer(task, out_dir, config, **kwargs).run()
