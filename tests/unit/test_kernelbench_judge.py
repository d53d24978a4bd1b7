"""KernelBench judge against adversarial solutions, on real tasks, on the CPU.

Each adversarial fixture in tests/fixtures/kernelbench must be rejected with its own reason
code; a correct copy of the reference must be judged correct and "not an Argus kernel". One
reference session per task is shared by the fixtures (each still gets its own process).
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from argus.bench.kernelbench.judge import JudgeOptions, ReferenceSession, judge_with
from argus.bench.kernelbench.shrink import SizeBudget
from argus.bench.kernelbench.tasks import discover

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))
pytestmark = pytest.mark.skipif(not (KB_DIR / "level1").is_dir(),
                                reason=f"KernelBench tasks not found at {KB_DIR}")
GPU = torch.cuda.is_available()
# Small CPU sizes keep CI fast; the judge's default budget is 4x larger.
OPTIONS = JudgeOptions(device="cpu", timeout_s=180,
                       cpu_budget=SizeBudget(elements=1 << 18, flops=5e7))
_CACHE: dict[tuple[str, str], object] = {}


def _task(level: int, pid: int):
    return discover(KB_DIR, levels=[level], ids=[pid])[0]


@pytest.fixture(scope="module")
def relu():
    """Level-1 task 19 (ReLU): the identity on upstream's [0, 1) inputs."""
    with ReferenceSession(_task(1, 19), OPTIONS) as session:
        yield session


@pytest.fixture(scope="module")
def matmul():
    """Level-1 task 1 (square GEMM)."""
    with ReferenceSession(_task(1, 1), OPTIONS) as session:
        yield session


def _judge(session, fixture: str):
    """Judge a fixture once per session (several tests look at the same judgment)."""
    key = (str(session.dir), fixture)
    if key not in _CACHE:
        _CACHE[key] = judge_with(session, FIXTURES / f"{fixture}.py")
    return _CACHE[key]


def test_correct_copy_is_correct_but_not_argus(relu):
    j = _judge(relu, "relu_copy")
    assert j.correct and j.correct_relaxed and j.reasons == ()
    assert j.precision == "fp32" and j.verifiable
    assert j.argus_kernels == "no" and "never imports argus" in j.argus_evidence
    assert not j.solved
    assert len(j.sets) >= 5 and {"task", "normal", "heavy", "large"} <= \
        {s.distribution for s in j.sets}
    if not GPU:
        assert j.sizes.startswith("reduced for CPU")


def test_forwarding_to_torch_behind_an_argus_import(relu):
    j = _judge(relu, "forwards_with_argus_import")
    assert j.correct
    assert j.argus_kernels == "no"  # GPU: the profiler sees only PyTorch's kernels
    if not GPU:  # CPU: no Argus kernel can run, and all compute came from PyTorch
        assert "aten::relu" in j.argus_evidence
    assert "relu" in j.torch_ops


@pytest.mark.parametrize("fixture, reason", [
    ("zeros", "zeros_output"),
    ("echo", "echo_input"),
    ("constant", "constant_output"),
    ("cached", "cached_output"),
    ("empty_like", "uninitialized_output"),
    ("partial_write", "uninitialized_output"),
    ("patched_timer", "timer_tampering"),
    ("sets_tf32", "global_state_changed"),
    ("inplace", "output_aliases_input"),
    ("no_modelnew", "load_error"),
    ("raises", "runtime_error"),
    ("out_of_memory", "out_of_memory"),
    ("crash", "crash"),
])
def test_adversarial_solution_is_rejected_with_its_reason(relu, fixture, reason):
    j = _judge(relu, fixture)
    assert not j.correct
    assert j.reason == reason, (j.reasons, j.detail)
    assert not j.solved


def test_echo_would_pass_upstream_but_not_here(relu):
    j = _judge(relu, "echo")
    task_sets = [s for s in j.sets if s.distribution == "task"]
    signed_sets = [s for s in j.sets if s.distribution != "task"]
    assert all(s.strict_ok for s in task_sets)  # upstream's rand inputs: echo looks right
    assert not any(s.strict_ok for s in signed_sets)
    assert j.degenerate == ()  # the mixed sets make ReLU verifiable


def test_inplace_also_reports_mutation(relu):
    j = _judge(relu, "inplace")
    assert {"output_aliases_input", "input_mutated"} <= set(j.reasons)


def test_solution_that_behaves_only_when_watched_is_caught_in_its_timed_calls():
    options = dataclasses.replace(OPTIONS, cpu_timing=True, trials=10, warmup=1)
    with ReferenceSession(_task(1, 19), options) as session:
        honest = judge_with(session, FIXTURES / "relu_copy.py")
        sneaky = judge_with(session, FIXTURES / "honest_when_watched.py")
    assert honest.correct and honest.timing["clock"] == "cpu-perf-counter"
    assert all(s.strict_ok for s in sneaky.sets)  # every watched run was right
    assert sneaky.reason == "timed_output_wrong", (sneaky.reasons, sneaky.detail)
    assert "timed call" in sneaky.detail and "[zeros_output]" in sneaky.detail
    assert not sneaky.correct_relaxed


def test_solution_that_caches_by_input_identity_is_caught_in_its_timed_calls():
    """The reviewer's hole: a forward that returns what it computed for the very same tensor
    object (a weak reference, keyed by data_ptr too) passes every correctness run (each gets
    new tensors) and, timed on one set of tensors, measured a lookup. Timing now refills the
    same tensors with two unseen sets in a shuffled order and checks one timed call of each:
    the cached answer belongs to the other set. Judged correct before the fix."""
    options = dataclasses.replace(OPTIONS, cpu_timing=True, trials=10, warmup=1)
    with ReferenceSession(_task(1, 19), options) as session:
        honest = judge_with(session, FIXTURES / "relu_copy.py")
        cheat = judge_with(session, FIXTURES / "cached_by_identity.py")
    assert honest.correct and honest.timing is not None
    assert "check of the timed calls" in honest.phases
    assert all(s.strict_ok for s in cheat.sets)  # every watched run was right
    assert not cheat.correct and not cheat.correct_relaxed
    assert cheat.reason == "timed_output_wrong", (cheat.reasons, cheat.detail)
    assert "timed call" in cheat.detail and "unseen" in cheat.detail


INPLACE_WHEN_UNWATCHED = """
import torch


class ModelNew(torch.nn.Module):
    def forward(self, x):
        if torch._C._len_torch_dispatch_stack() > 0:
            return torch.relu(x)
        return x.relu_()          # unwatched (timed): the input is the output
"""


def test_a_timed_call_that_writes_its_input_is_caught(tmp_path):
    """The timed calls get the aliasing and mutation checks of the watched runs: the check
    copies the outputs before the next call refills the inputs, so an in-place forward's
    output is right, and only these checks see it."""
    solution = tmp_path / "inplace_unwatched.py"
    solution.write_text(INPLACE_WHEN_UNWATCHED)
    options = dataclasses.replace(OPTIONS, cpu_timing=True, trials=10, warmup=1)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, solution)
    assert all(s.strict_ok for s in j.sets)
    assert {"output_aliases_input", "input_mutated"} <= set(j.reasons), (j.reasons, j.detail)
    assert "timed_output_wrong" not in j.reasons and "timed call" in j.detail


def test_hang_is_a_timeout():
    options = dataclasses.replace(OPTIONS, candidate_timeout_s=4)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, FIXTURES / "hang.py")
    assert j.reason == "timeout" and "did not finish within 4 s" in j.detail


@pytest.mark.gpu
@pytest.mark.skipif(not GPU, reason="side streams need CUDA; the decision logic is tested "
                                    "on the CPU in test_kernelbench.py::test_side_stream_logic")
def test_side_stream_work_is_rejected():
    options = JudgeOptions(device="cuda", overrides={"batch_size": 1024, "dim": 4096},
                           baselines=False, timeout_s=300)
    with ReferenceSession(_task(1, 19), options) as session:
        honest = judge_with(session, FIXTURES / "relu_copy.py")
        j = judge_with(session, FIXTURES / "side_stream.py")
    assert honest.correct and honest.timing["clock"] == "cuda-events+device-sync"
    assert honest.argus_kernels == "no"
    assert all(s.strict_ok for s in j.sets)  # the answer is right; only the timing cheats
    assert j.reason == "side_stream_work"


def test_matmul_copy_is_fp32_correct(matmul):
    path = matmul.dir / "matmul_copy.py"
    path.write_text(_task(1, 1).path.read_text() + "\n\nModelNew = Model\n")
    j = judge_with(matmul, path)
    assert j.correct and j.precision == "fp32"


@pytest.mark.parametrize("fixture, precision", [("matmul_tf32", "tf32"),
                                                ("matmul_bf16", "bf16")])
def test_reduced_precision_fails_strict_and_is_classified(matmul, fixture, precision):
    j = _judge(matmul, fixture)
    assert not j.correct and j.precision == precision
    assert set(j.reasons) <= {"imprecise", "mismatch"}
    # on upstream's all-positive inputs it would have passed the old 1e-2 rule
    assert all(s.relaxed_ok for s in j.sets if s.distribution == "task")


def test_cli_judge_exit_codes_and_json(tmp_path, capsys):
    from argus.bench.kernelbench import cli

    task = _task(1, 19).path
    out = tmp_path / "j.json"
    small = ["--device", "cpu", "--cpu-elements", str(1 << 18), "--cpu-flops", "5e7"]
    args = cli.build_parser().parse_args(["kernelbench", "judge", str(task),
                                          str(FIXTURES / "relu_copy.py"), "--json", str(out),
                                          *small])
    assert cli.main(args) == 0
    data = json.loads(out.read_text())
    assert data["correct"] and data["argus_kernels"] == "no" and data["reasons"] == []
    assert "correct (strict, fp32)" in capsys.readouterr().out
    # the real command line, in its own process: exit code 1 and the reason
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    bad = subprocess.run([sys.executable, "-m", "argus.bench.kernelbench", "judge", str(task),
                          str(FIXTURES / "zeros.py"), "--json", str(out), *small],
                         capture_output=True, text=True, env=env, timeout=300)
    assert bad.returncode == 1 and "zeros_output" in bad.stdout, bad.stdout + bad.stderr
    assert json.loads(out.read_text())["reasons"][0] == "zeros_output"


def test_no_gate_hold_across_a_reference_worker_request(tmp_path, monkeypatch):
    """Judging through a reference worker process (not `direct`) with a GPU gate: the judge's
    thread holds no shared hold while it waits for that process, which enters the gate itself.
    Else a timing queued at the turnstile waits for the judge's hold, the worker waits at the
    turnstile and the judge waits for the worker: a deadlock until the request times out (the
    hold kept from a set's comparison through the next set's reference did this)."""
    from argus.runtime.gpu_gate import holding_shared

    monkeypatch.setenv("ARGUS_GPU_GATE", str(tmp_path / "gpu.gate"))
    with ReferenceSession(_task(1, 19), OPTIONS) as session:
        assert not session.options.direct
        session.start()
        worker, seen = session.worker, []
        plain = worker.request

        def request(op, timeout, **args):
            seen.append((op, args.get("index"), holding_shared()))
            return plain(op, timeout, **args)

        worker.request = request
        j = judge_with(session, FIXTURES / "relu_copy.py")
    assert j.correct, (j.reasons, j.detail)
    prepared = [s for s in seen if s[0] == "prepare"]
    assert len(prepared) >= 2, seen                   # the sets after set 0 were prepared here
    assert not any(held for _, _, held in seen), seen


class _RunsCode:
    """A pickle that calls Path.touch(marker) when it is loaded."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_a_candidates_outputs_file_is_never_unpickled(tmp_path):
    """The outputs file comes from the candidate's process, whose code can write anything
    there: the judge reads tensors only (weights_only), and an object in it fails the
    candidate instead of running code in the judge (before: torch.load(weights_only=False)
    called the pickle's Path.touch)."""
    from argus.bench.kernelbench.judge import _receive_outputs
    from argus.bench.kernelbench.process import WorkerError

    class Session:
        compare_device = torch.device("cpu")

    marker, out = tmp_path / "ran-in-the-judge", tmp_path / "out0.pt"
    torch.save([torch.ones(3)], out)
    (got,) = _receive_outputs(Session(), None, {}, out)
    assert torch.equal(got, torch.ones(3)) and not out.exists()
    torch.save([torch.ones(3), _RunsCode(marker)], out)
    with pytest.raises(WorkerError) as err:
        _receive_outputs(Session(), None, {}, out)
    assert err.value.kind == "shape_mismatch" and not marker.exists() and not out.exists()


def test_the_input_hand_over_copies_inside_the_gate(tmp_path, monkeypatch):
    """The hand-over stages copies of the inputs on the GPU (cudaipc.StagedInputs) just before
    the candidate's request, where the judge holds no gate: it enters the gate's shared hold
    for them, so they never run beside another process's timing (before: outside any hold)."""
    from argus.bench.kernelbench import cudaipc
    from argus.runtime.gpu_gate import holding_shared

    seen = []

    class Staged:
        def __init__(self, values, dtypes):
            seen.append(holding_shared())
            self.handles = [{"value": v} for v in values]

        def free(self):
            seen.append(("free", holding_shared()))

    monkeypatch.setattr(cudaipc, "StagedInputs", Staged)
    monkeypatch.setenv("ARGUS_GPU_GATE", str(tmp_path / "gpu.gate"))
    session = ReferenceSession.__new__(ReferenceSession)
    session.device, session._handed, session.ipc_error, session.phases = "cuda", None, "", {}
    assert session.hand_over([1, 2], tmp_path / "x.pt") == {"shared": [{"value": 1},
                                                                       {"value": 2}]}
    session.hand_over([3], tmp_path / "x.pt")
    assert seen == [True, ("free", True), True] and not holding_shared()


def test_a_hand_over_of_an_object_goes_through_the_file(tmp_path, monkeypatch):
    """An input that is not a tensor nor a plain JSON value (a dtype) cannot travel in the
    request (its JSON writes str() of what it cannot encode: the candidate would get the
    string "torch.float16"): the hand-over falls back to the file, which keeps the object."""
    from argus.bench.kernelbench import cudaipc

    class Staged:
        def __init__(self, values, dtypes):
            self.handles = [{"staged": {"shape": list(v.shape)}} if isinstance(v, torch.Tensor)
                            else {"value": v} for v in values]

        def free(self):
            pass

    monkeypatch.setattr(cudaipc, "StagedInputs", Staged)
    session = ReferenceSession.__new__(ReferenceSession)
    session.device, session._handed, session.ipc_error, session.phases = "cuda", None, "", {}
    assert "shared" in session.hand_over([torch.zeros(2), 3, [4, 5]], tmp_path / "a.pt")
    got = session.hand_over([torch.zeros(2), torch.float16], tmp_path / "b.pt")
    assert got == {"inputs_path": str(tmp_path / "b.pt")}
    assert torch.load(tmp_path / "b.pt", weights_only=True)[1] is torch.float16


class _ExportingCandidate:
    """An in-process stand-in for a candidate worker that hands its outputs over by "CUDA IPC"
    (handles of tensors it keeps, mapped by a patched open_shared_cuda) and can write to them
    after the hand-over, as a candidate's thread could. Records where each request came from."""

    def __init__(self, holding_shared):
        self.holding_shared = holding_shared
        self.exported: dict[int, torch.Tensor] = {}
        self.seen: list[tuple[str, bool, float]] = []

    def open(self, handle):
        return self.exported[handle["id"]]

    def write_after_hand_over(self):
        for out in self.exported.values():
            out.fill_(7.0)

    def request(self, op, timeout, **args):
        from argus.bench.kernelbench.worker import _fingerprint

        self.seen.append((op, self.holding_shared(), timeout))
        if op == "init":
            return {"weights": "seeded init"}
        if op == "drop":
            self.write_after_hand_over()
            self.exported.clear()
            return {}
        assert op == "run", op
        inputs = torch.load(args["inputs_path"], weights_only=True)
        out = torch.relu(inputs[0])
        self.exported[len(self.exported)] = out
        return {"ipc": [{"id": len(self.exported) - 1}],
                "fingerprints": [_fingerprint(v) for v in inputs], "poison": [0]}

    def close(self):
        pass


def test_exported_outputs_are_copied_and_let_go_of_outside_the_gate(tmp_path, monkeypatch):
    """Outputs handed over by CUDA IPC stay the candidate's memory: the judge compares a copy
    taken on receipt (the stand-in writes 7s into them while the judge compares, and when
    told to let go: compared in place, every set failed), and the candidate's `drop` is
    requested right after the copy, outside
    the judge's shared hold of the GPU gate and with a bounded wait (before: under the hold,
    up to 60 s, while timings of other tasks queued behind it)."""
    from argus.bench.kernelbench import judge as judge_mod
    from argus.bench.kernelbench import worker as worker_mod
    from argus.runtime.gpu_gate import holding_shared

    monkeypatch.setenv("ARGUS_GPU_GATE", str(tmp_path / "gpu.gate"))
    fake = _ExportingCandidate(holding_shared)
    monkeypatch.setattr(worker_mod, "open_shared_cuda", fake.open)
    monkeypatch.setattr(ReferenceSession, "candidate_worker", lambda self: fake)
    compare = judge_mod._compare_set

    def compare_while_written(*args, **kwargs):
        fake.write_after_hand_over()        # the candidate's thread, during the comparison
        return compare(*args, **kwargs)

    monkeypatch.setattr(judge_mod, "_compare_set", compare_while_written)
    options = dataclasses.replace(OPTIONS, timing=False)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, FIXTURES / "relu_copy.py")
    assert j.correct, (j.reasons, j.detail)
    drops = [s for s in fake.seen if s[0] == "drop"]
    assert len(drops) == len(j.sets), fake.seen
    assert not any(held for _, held, _ in drops), fake.seen
    assert all(timeout <= judge_mod.DROP_TIMEOUT_S <= 30 for _, _, timeout in drops)


def test_staged_inputs_are_freed_once_the_candidate_has_read_them(monkeypatch):
    """Direct judging on a GPU stages each hand-over in a buffer of its own (cudaipc): it is
    freed once the request that read it has returned, before the next set's reference is
    prepared, and the two timing sets' buffer before the check of the timed calls (before:
    each was held until the next hand-over, the timing sets' until the session closed,
    through the check and the baselines). A stand-in buffer records when it is freed."""
    from argus.bench.kernelbench import judge as judge_mod

    events: list[tuple[str, object]] = []

    class Staged:
        def __init__(self, n):
            self.n = n

        def free(self):
            events.append(("free", self.n))

    real_hand_over, real_prepare = ReferenceSession.hand_over, ReferenceSession._prepare
    real_timed = judge_mod._check_timed

    def hand_over(self, values, path):
        got = real_hand_over(self, values, path)
        self._free_handed()
        self._handed = Staged(sum(1 for e in events if e[0] == "hand"))
        events.append(("hand", self._handed.n))
        return got

    def prepare(self, spec, *args, **kwargs):
        events.append(("prepare", spec.index))
        return real_prepare(self, spec, *args, **kwargs)

    def check_timed(*args, **kwargs):
        events.append(("check", None))
        return real_timed(*args, **kwargs)

    monkeypatch.setattr(ReferenceSession, "hand_over", hand_over)
    monkeypatch.setattr(ReferenceSession, "_prepare", prepare)
    monkeypatch.setattr(judge_mod, "_check_timed", check_timed)
    options = dataclasses.replace(OPTIONS, direct=True, cpu_timing=True, trials=10, warmup=1,
                                  ref_cache_bytes=0)        # no set prepared ahead
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, FIXTURES / "relu_copy.py")
        events.append(("judged", None))
    assert j.correct, (j.reasons, j.detail)
    hands = [n for kind, n in events if kind == "hand"]
    assert len(hands) == len(j.sets) + 1, events             # every set, then the timing sets
    for n in hands:                 # freed before the next set's reference, the check, the end
        start = events.index(("hand", n))
        after = next(k for k in range(start + 1, len(events)) if events[k][0] != "free")
        assert events.index(("free", n)) < after, (n, events)


def test_a_preparation_ahead_that_failed_is_done_again_in_the_judges_thread(monkeypatch):
    """A set prepared ahead runs beside the candidate (which may hold the memory it lacked)
    and a session judges several solutions: a failed preparation is done again when the set
    is taken, not raised there (before: the judgment failed with the reference's error, and a
    session would replay a failure kept ahead to a later solution)."""
    import threading

    from argus.bench.kernelbench.process import WorkerError

    real_prepare = ReferenceSession._prepare
    failed: list[int] = []

    def prepare(self, spec, *args, **kwargs):
        if threading.current_thread().name.startswith("kb-prefetch") and \
                spec.index not in failed:
            failed.append(spec.index)        # each set's first preparation ahead fails
            raise WorkerError("out_of_memory", "CUDA out of memory beside the candidate")
        return real_prepare(self, spec, *args, **kwargs)

    monkeypatch.setattr(ReferenceSession, "_prepare", prepare)
    options = dataclasses.replace(OPTIONS, direct=True, cpu_timing=True, trials=10, warmup=1)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, FIXTURES / "relu_copy.py")
    assert failed, "no set was prepared ahead"
    assert j.correct and j.timing is not None, (j.reasons, j.detail)
    assert j.phases.get("# preparations ahead failed, done again", 0) >= 2, j.phases


def test_closing_a_session_frees_its_workers_and_folder_when_dropping_a_preparation_fails():
    """A preparation ahead that raises while the session closes (review of 2a96afe) still
    leaves no worker process running and no folder behind; the error is not swallowed."""
    session = ReferenceSession(_task(1, 19), OPTIONS)
    closed = []

    class FakeWorker:
        def close(self):
            closed.append(self)

    session.worker, session._spare = FakeWorker(), FakeWorker()

    def fails():
        raise RuntimeError("a preparation ahead failed")

    session._drop_ahead = fails
    folder = session.dir
    assert folder.is_dir()
    with pytest.raises(RuntimeError, match="preparation ahead"):
        session.close()
    assert len(closed) == 2 and session.worker is None and session._spare is None
    assert not folder.exists()
