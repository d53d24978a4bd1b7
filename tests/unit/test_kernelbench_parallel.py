"""The parallel KernelBench judge on the CPU: the GPU gate (timings alone, other GPU work
together, writers first, compiles let go), the memory budget (never above it, a large task is
not starved), direct judging (reference in the judge's process, inputs handed to the candidate)
against the judge through files, the parallel runner against the serial one, its time budget,
the task selection by what a composition leaves to torch, and the per-level summary."""

from __future__ import annotations

import dataclasses
import math
import os
import random
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from argus.bench.kernelbench import gpumem  # noqa: E402
from argus.bench.kernelbench.judge import JudgeOptions, ReferenceSession, judge_with  # noqa: E402
from argus.bench.kernelbench.runner import load_results, missing_judgment, run_suite  # noqa: E402
from argus.bench.kernelbench.shrink import SizeBudget  # noqa: E402
from argus.bench.kernelbench.tasks import discover  # noqa: E402
from argus.runtime.gpu_gate import GpuGate  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "kernelbench"
KB_DIR = Path(os.environ.get("ARGUS_KERNELBENCH_DIR", REPO.parent / "shared" / "kernelbench"))
needs_tasks = pytest.mark.skipif(not (KB_DIR / "level1").is_dir(),
                                 reason=f"KernelBench tasks not found at {KB_DIR}")
OPTIONS = JudgeOptions(device="cpu", timeout_s=180,
                       cpu_budget=SizeBudget(elements=1 << 16, flops=2e7))


def _task(level: int, pid: int):
    return discover(KB_DIR, levels=[level], ids=[pid])[0]


# ------------------------------------------------------------------------------- the gate
class _Log:
    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.spans: dict[str, tuple[float, float]] = {}

    def span(self, name: str, hold, seconds: float) -> None:
        with hold:
            start = time.monotonic() - self.t0
            time.sleep(seconds)
            self.spans[name] = (start, time.monotonic() - self.t0)


def _threads(*targets) -> None:
    threads = []
    for delay, fn in targets:
        def run(delay=delay, fn=fn):
            time.sleep(delay)
            fn()
        threads.append(threading.Thread(target=run))
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)


def test_exclusive_waits_for_shared_holders_and_new_shared_wait_for_it(tmp_path):
    gate = GpuGate(tmp_path / "g")
    log = _Log()
    _threads((0.0, lambda: log.span("reader1", gate.shared(), 0.6)),
             (0.15, lambda: log.span("timing", gate.exclusive(), 0.3)),
             (0.3, lambda: log.span("reader2", gate.shared(), 0.1)))
    r1, t, r2 = log.spans["reader1"], log.spans["timing"], log.spans["reader2"]
    assert t[0] >= r1[1] - 0.02          # the timing waited for the reader inside
    assert r2[0] >= t[1] - 0.02          # a reader arriving after the timing waited for it


def test_readers_share_the_gate(tmp_path):
    gate = GpuGate(tmp_path / "g")
    log = _Log()
    _threads((0.0, lambda: log.span("a", gate.shared(), 0.5)),
             (0.1, lambda: log.span("b", gate.shared(), 0.1)))
    a, b = log.spans["a"], log.spans["b"]
    assert b[0] < a[1]                   # b ran inside a's hold


def test_yielding_lets_a_waiting_timing_in_during_a_compile(tmp_path):
    gate = GpuGate(tmp_path / "g")
    log = _Log()
    marks: dict[str, float] = {}

    def correctness_run():
        with gate.shared():
            with gate.yielding():          # a compile: no GPU work
                marks["compile_start"] = time.monotonic() - log.t0
                time.sleep(0.6)
            marks["gpu_again"] = time.monotonic() - log.t0

    _threads((0.0, correctness_run), (0.15, lambda: log.span("timing", gate.exclusive(), 0.2)))
    t = log.spans["timing"]
    assert t[0] < marks["compile_start"] + 0.6   # the timing ran during the compile
    assert marks["gpu_again"] >= t[1] - 0.02     # GPU work resumed only after the timing


def test_exclusive_inside_a_shared_hold_fails_fast(tmp_path):
    """The thread's own shared flock would block its exclusive one forever: an error instead
    of a hang (and the shared hold survives it)."""
    gate = GpuGate(tmp_path / "g")
    with gate.shared():
        with pytest.raises(RuntimeError, match="wait for itself"):
            with gate.exclusive():
                pass
        assert gate.holding_shared()
    with gate.exclusive():                 # outside the hold it works
        pass


def test_the_timing_lock_can_be_taken_twice(tmp_path):
    from argus.bench.kernelbench.worker import _GpuLock

    lock = _GpuLock(str(tmp_path / "g"), None, None)
    for _ in range(2):
        with lock:
            pass


def test_without_a_path_the_gate_is_a_no_op():
    gate = GpuGate(None)
    with gate.exclusive(), gate.shared(), gate.yielding():
        pass
    assert not gate.active


# ---------------------------------------------------------------------- the memory budget
def test_memory_budget_is_never_exceeded_and_a_too_large_task_runs_alone():
    budget = gpumem.GpuMemoryBudget(10.0)
    lock = threading.Lock()
    state = {"in_use": 0.0, "max": 0.0, "big_with_others": False, "running": 0, "big": False}
    rng = random.Random(3)
    needs = [rng.choice([1, 2, 3, 5, 6]) for _ in range(30)] + [15.0]
    rng.shuffle(needs)

    def task(need: float) -> None:
        assert budget.acquire(need)
        with lock:
            state["in_use"] += min(need, 10.0)
            state["running"] += 1
            state["max"] = max(state["max"], state["in_use"])
            if need > 10:
                state["big"] = True
            if state["big"] and state["running"] > 1:
                state["big_with_others"] = True
        time.sleep(rng.random() * 0.03)
        with lock:
            if need > 10:
                state["big"] = False
            state["in_use"] -= min(need, 10.0)
            state["running"] -= 1
        budget.release(need)

    threads = [threading.Thread(target=task, args=(n,)) for n in needs]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    assert state["max"] <= 10.0
    assert not state["big_with_others"]
    assert budget.in_use == 0 and budget.running == 0


def test_a_large_task_is_passed_only_max_passes_times():
    budget = gpumem.GpuMemoryBudget(10.0, max_passes=1)
    order: list[str] = []
    assert budget.acquire(5)                      # A holds 5
    admitted = {}

    def wait(name: str, need: float) -> None:
        assert budget.acquire(need)
        order.append(name)
        admitted[name] = need

    big = threading.Thread(target=wait, args=("big", 8))
    big.start()
    time.sleep(0.2)
    small = threading.Thread(target=wait, args=("small", 3))   # fits beside A: passes big
    small.start()
    small.join(timeout=5)
    late = threading.Thread(target=wait, args=("late", 1))     # fits too, but big waited enough
    late.start()
    time.sleep(0.3)
    assert order == ["small"]
    budget.release(5)
    budget.release(3)
    big.join(timeout=5)
    late.join(timeout=5)
    assert order == ["small", "big", "late"]


def test_acquire_gives_up_at_its_deadline():
    budget = gpumem.GpuMemoryBudget(10.0)
    assert budget.acquire(8)
    t0 = time.monotonic()
    assert not budget.acquire(5, until=time.monotonic() + 0.3)
    assert 0.25 <= time.monotonic() - t0 < 3
    budget.release(8)
    assert budget.acquire(5, until=time.monotonic() + 0.3)


# ---------------------------------------------------------------------- direct judging
@needs_tasks
def test_direct_judging_matches_judging_through_files():
    """The reference in this process and inputs made by the candidate give the same verdict
    and, on the CPU (the same generator), the same errors per set as the worker-and-files
    path."""
    task = _task(1, 19)
    with ReferenceSession(task, OPTIONS) as session:
        files = judge_with(session, FIXTURES / "relu_copy.py")
    with ReferenceSession(task, dataclasses.replace(OPTIONS, direct=True)) as session:
        direct = judge_with(session, FIXTURES / "relu_copy.py")
        zeros = judge_with(session, FIXTURES / "zeros.py")
        echo = judge_with(session, FIXTURES / "echo.py")
        inplace = judge_with(session, FIXTURES / "inplace.py")
        empty = judge_with(session, FIXTURES / "empty_like.py")
    assert files.correct and direct.correct
    assert [s.distribution for s in files.sets] == [s.distribution for s in direct.sets]
    assert [s.errors for s in files.sets] == [s.errors for s in direct.sets]
    assert direct.phases and direct.phases.get("candidate runs", 0) > 0
    assert zeros.reason == "zeros_output"
    assert echo.reason == "echo_input"
    assert inplace.reason == "output_aliases_input"
    assert empty.reason == "uninitialized_output"


@needs_tasks
def test_direct_judging_catches_solutions_that_fake_their_timed_calls():
    """Honest only while watched, or caching by input identity (the reviewer's hole): both
    right on every watched run, both wrong in the timed calls that are checked."""
    options = dataclasses.replace(OPTIONS, direct=True, cpu_timing=True, trials=10, warmup=1)
    with ReferenceSession(_task(1, 19), options) as session:
        sneaky = judge_with(session, FIXTURES / "honest_when_watched.py")
        cheat = judge_with(session, FIXTURES / "cached_by_identity.py")
        honest = judge_with(session, FIXTURES / "relu_copy.py")
    for j in (sneaky, cheat):
        assert all(s.strict_ok for s in j.sets)
        assert j.reason == "timed_output_wrong" and "timed call" in j.detail, j.detail
    assert "[zeros_output]" in sneaky.detail
    assert "timing measure" in sneaky.phases
    assert honest.correct and honest.timing is not None


RESEEDS_AND_DRAWS = """
import torch

_seed = torch.manual_seed


def manual_seed(seed):
    # a stand-in for anything in the candidate's process that consumes the global generator
    # between a seeding and a draw (a library's lazy initialisation, a background thread)
    generator = _seed(seed)
    torch.rand(7)
    return generator


torch.manual_seed = manual_seed
torch.rand(3)                   # and a draw at import


class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.randn(5)          # and one in __init__, after the judge's seeding

    def forward(self, x):
        return torch.relu(x)
"""

ALTERS_WHAT_IT_RECEIVES = """
import torch

_load = torch.load


def load(*args, **kwargs):
    value = _load(*args, **kwargs)
    if isinstance(value, list) and value and isinstance(value[0], torch.Tensor) \\
            and value[0].is_floating_point():
        value[0] = value[0] * 0.5          # the inputs the judge handed over, altered
    return value


torch.load = load


class ModelNew(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""


@needs_tasks
@pytest.mark.parametrize("direct", [True, False])
def test_a_candidate_whose_process_draws_other_random_numbers_is_judged_on_the_judges_inputs(
        tmp_path, direct):
    """The H200 run rejected honest solutions of L1/44 and L1/74 because the candidate's
    process drew its input set itself and drew other numbers than the reference worker. The
    candidate now copies the judge's own inputs: a solution whose process consumes the
    generator (at import, in __init__, after every seeding) is still judged correct, on every
    set, and the inputs it received are the reference's (fingerprints)."""
    solution = tmp_path / "reseeds.py"
    solution.write_text(RESEEDS_AND_DRAWS)
    options = dataclasses.replace(OPTIONS, direct=direct)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, solution)
    assert j.correct, (j.reason, j.detail)
    assert len(j.sets) == options.sets and all(s.strict_ok for s in j.sets)
    assert all(max(e["rel_l2"] for e in s.errors) == 0.0 for s in j.sets)   # relu is exact


@needs_tasks
@pytest.mark.parametrize("direct", [True, False])
def test_a_candidate_that_alters_the_inputs_it_received_fails(tmp_path, direct):
    """Handing over the inputs keeps the check that used to catch an altered generation: what
    the candidate's process received and ran on must have the reference's fingerprints."""
    solution = tmp_path / "alters.py"
    solution.write_text(ALTERS_WHAT_IT_RECEIVES)
    options = dataclasses.replace(OPTIONS, direct=direct)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, solution)
    assert not j.correct and not j.correct_relaxed
    assert j.reason == "input_mutated" and "received differ" in j.detail, j.detail


@needs_tasks
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA IPC of the inputs needs a GPU")
@pytest.mark.parametrize("solution", ["reseeds", "alters"])
def test_direct_judging_on_the_gpu_hands_over_the_judges_inputs(tmp_path, solution):
    """On a GPU, direct judging hands the candidate (forked by the fork server) CUDA IPC
    handles of the judge's inputs; it copies them, the fingerprints agree, and the judge's own
    tensors are unchanged afterwards. The reseeding solution is correct, the altering one is
    not (it alters a copy of what it received: here at the forward's start, seen as a wrong
    output, since IPC inputs never pass through torch.load)."""
    path = tmp_path / f"{solution}.py"
    path.write_text(RESEEDS_AND_DRAWS if solution == "reseeds" else
                    "import torch\n"
                    "class ModelNew(torch.nn.Module):\n"
                    "    def forward(self, x):\n"
                    "        return torch.relu(x * 0.5)\n")
    options = JudgeOptions(device="cuda", direct=True, timing=False, baselines=False,
                           overrides={"batch_size": 64, "dim": 65536}, timeout_s=300)
    with ReferenceSession(_task(1, 19), options) as session:
        j = judge_with(session, path)
        assert not session.ipc_error, session.ipc_error
    if solution == "reseeds":
        assert j.correct, (j.reason, j.detail)
        assert all(max(e["rel_l2"] for e in s.errors) == 0.0 for s in j.sets)
    else:
        assert not j.correct and j.reason in ("mismatch", "imprecise")


def test_tf32_stays_off_while_any_thread_calibrates():
    """Calibrations of several tasks overlap in the judge's process: TF32 is restored only
    when the last one leaves, to the value it had before the first entered."""
    from argus.bench.kernelbench.worker import _NoTF32

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cudnn.allow_tf32 = True
    try:
        outer, inner = _NoTF32(), _NoTF32()
        outer.__enter__()
        inner.__enter__()
        outer.__exit__(None, None, None)       # the first leaves while the second still runs
        assert torch.backends.cudnn.allow_tf32 is False
        inner.__exit__(None, None, None)
        assert torch.backends.cudnn.allow_tf32 is True
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def test_a_staged_input_that_does_not_fit_its_buffer_is_refused_before_mapping():
    """The candidate checks each staged input against the judge's buffer before it maps
    anything (no GPU needed: the refusal comes first)."""
    from argus.bench.kernelbench.cudaipc import CudaIpcError, open_staged
    from argus.bench.kernelbench.worker import _DTYPES

    buffer = {"handle": "AAAA", "nbytes": 60, "device": 0}
    staged = {"offset_bytes": 0, "shape": [4, 4], "stride": [1, 4], "dtype": "torch.float32",
              "buffer": buffer}
    with pytest.raises(CudaIpcError, match="does not fit"):
        open_staged([{"staged": staged}], _DTYPES)     # a transposed view reaching byte 64 of 60
    with pytest.raises(CudaIpcError, match="bad shape or stride"):
        open_staged([{"staged": {**staged, "stride": [-4, 1]}}], _DTYPES)
    with pytest.raises(CudaIpcError, match="does not fit"):
        open_staged([{"staged": {**staged, "offset_bytes": -4}}], _DTYPES)
    assert open_staged([{"value": 3}], _DTYPES) == [3]    # plain values pass through


class _FakeIpc:
    """The CUDA runtime calls open_staged makes, on the CPU: a mapping at address 4096, and
    a log of the mappings closed and of device synchronizations, in order."""

    def __init__(self, log):
        self.log = log

    def cudaIpcOpenMemHandle(self, ptr, handle, flags):
        ptr._obj.value = 4096
        self.log.append("open")
        return 0

    def cudaIpcCloseMemHandle(self, ptr):
        self.log.append(f"close {ptr.value}")
        return 0


@pytest.mark.parametrize("fails", ["wrap", "second copy"])
def test_open_staged_closes_every_mapping_after_the_copies_when_a_step_fails(monkeypatch, fails):
    """A failure after the mapping was opened (wrapping it, or allocating the candidate's own
    copy of a later input: out of memory) still closes it, and only after the device finished
    the copies already queued from it (before: a failed wrap left it mapped, and a failed later
    input closed it without waiting, so a queued copy read unmapped memory: an illegal
    address, a sticky error in place of the out-of-memory one)."""
    import base64
    import contextlib

    from argus.bench.kernelbench import cudaipc
    from argus.bench.kernelbench.worker import _DTYPES

    log: list[str] = []
    monkeypatch.setattr(cudaipc, "_cudart", lambda: _FakeIpc(log))
    monkeypatch.setattr(torch.cuda, "device", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: log.append("synchronize"))

    def wrap(ptr, nbytes, device):
        if fails == "wrap":
            raise RuntimeError("wrap failed")
        return torch.zeros(nbytes, dtype=torch.uint8)

    monkeypatch.setattr(cudaipc, "_bytes_tensor", wrap)
    allocate = torch.empty_strided

    def empty_strided(*args, **kwargs):
        if log.count("allocated") == 1:
            raise torch.OutOfMemoryError("out of memory")
        log.append("allocated")
        return allocate(*args, **kwargs)

    monkeypatch.setattr(torch, "empty_strided", empty_strided)
    buffer = {"handle": base64.b64encode(bytes(64)).decode(), "nbytes": 512, "device": 0}
    item = {"offset_bytes": 0, "shape": [4, 4], "stride": [4, 1], "dtype": "torch.float32",
            "buffer": buffer}
    with pytest.raises((RuntimeError, torch.OutOfMemoryError), match="wrap failed|out of memory"):
        cudaipc.open_staged([{"staged": item}, {"staged": {**item, "offset_bytes": 256}}],
                            _DTYPES)
    assert log[0] == "open" and log[-1] == "close 4096" and log.count("close 4096") == 1, log
    if fails == "second copy":
        assert log.index("synchronize") < log.index("close 4096"), log


def test_forked_candidates_are_separate_processes_killed_and_reaped_by_the_server(tmp_path):
    """Candidates forked by the fork server (process.Zygote): each is a process of its own
    with the judge's environment, it answers the protocol, and killing one (its process group,
    through the server that forked it) leaves the other running."""
    from argus.bench.kernelbench.process import Worker, WorkerError, _Forked

    a = Worker("candidate", tmp_path / "a.log", env={"ARGUS_KB_TEST_MARK": "a"},
               cwd=tmp_path, forked=True)
    b = Worker("candidate", tmp_path / "b.log", forked=True)
    try:
        assert isinstance(a.proc, _Forked) and isinstance(b.proc, _Forked)
        assert a.proc.pid != b.proc.pid and os.getpid() not in (a.proc.pid, b.proc.pid)
        reply = a.request("drop", 30.0)
        assert reply["ok"] and reply["boot_s"] < 2.0       # forked, not a fresh interpreter
        a.kill()
        assert a.proc.poll() is not None                    # reaped, with its exit code
        with pytest.raises(WorkerError) as err:
            a.request("drop", 30.0)
        assert err.value.kind == "crash" and "killed by SIGKILL" in str(err.value)
        assert b.request("drop", 30.0)["ok"]
    finally:
        a.close()
        b.close()


def test_a_shared_output_handle_that_does_not_fit_is_refused():
    from argus.bench.kernelbench.worker import open_shared_cuda

    handle = {"shape": [4, 4], "stride": [4, 1], "offset": 0, "dtype": "torch.float32",
              "device": 0, "handle": None, "size_bytes": 32, "offset_bytes": 0,
              "counter_handle": None, "counter_offset": 0, "event_handle": None,
              "event_sync": False}
    with pytest.raises(ValueError, match="do not fit"):
        open_shared_cuda(handle)                              # 64 bytes in a 32-byte block
    with pytest.raises(ValueError, match="do not fit"):
        open_shared_cuda({**handle, "stride": [1, 4], "size_bytes": 64})   # not contiguous


def test_input_fingerprints_compare_values_not_identity():
    from argus.bench.kernelbench.worker import _fingerprint, same_fingerprints

    x = torch.rand(1000, dtype=torch.float32)
    a = [_fingerprint(x), None, _fingerprint(torch.arange(5))]
    assert same_fingerprints(a, [_fingerprint(x.clone()), None, _fingerprint(torch.arange(5))])
    y = x.clone()
    y[7] += 0.5
    assert not same_fingerprints(a, [_fingerprint(y), None, _fingerprint(torch.arange(5))])


def test_input_fingerprints_allow_the_rounding_of_a_cancelling_sum():
    """A signed heavy-tailed set's sum cancels to almost nothing; another summation order
    moves it by ~n * 2^-53 * sum|x|, which is not a different input (a suspected cause of the
    H200 run's rejections of L1/10, L1/98 and L2/98 on input sets 1-2, under a 1e-9 bound
    relative to the sum itself; the rejection message now prints both fingerprints)."""
    from argus.bench.kernelbench.worker import _fingerprint, same_fingerprints

    shape, total, square, magnitude = _fingerprint(torch.tensor([1e6, -1e6, 1e-3]))
    assert magnitude > 2e6 and abs(total - 1e-3) < 1e-9
    nudged = [shape, total + 1e-6, square, magnitude]    # 1e-6 against 2e6: rounding
    assert same_fingerprints([[shape, total, square, magnitude]], [nudged])
    moved = [shape, total + 0.5, square, magnitude]      # a changed element
    assert not same_fingerprints([[shape, total, square, magnitude]], [moved])


# ---------------------------------------------------------------------- the parallel runner
def _solutions(root: Path) -> Path:
    sol = root / "solutions" / "level1"
    sol.mkdir(parents=True)
    (sol / "19_ReLU.py").write_text((FIXTURES / "relu_copy.py").read_text())
    (sol / "23_Softmax.py").write_text(_task(1, 23).path.read_text() + "\nModelNew = Model\n")
    (sol / "24_LogSoftmax.py").write_text(_task(1, 24).path.read_text()
                                          + "\nclass ModelNew(Model):\n"
                                            "    def forward(self, x):\n"
                                            "        return torch.zeros_like(x)\n")
    return root / "solutions"


@needs_tasks
def test_parallel_runner_agrees_with_the_serial_one_and_resumes(tmp_path):
    from argus.bench.kernelbench.parallel import ParallelOptions, run_parallel

    tasks = [_task(1, 19), _task(1, 23), _task(1, 24), _task(1, 21)]   # 21: no solution
    sols = _solutions(tmp_path)
    serial = run_suite(tasks, sols, tmp_path / "serial", OPTIONS, progress=None,
                       write_reports=False)
    par = run_parallel(tasks, sols, tmp_path / "par", OPTIONS, ParallelOptions(jobs=2),
                       progress=None, write_reports=False)
    by = {j.task: j for j in par.judgments}
    for j in serial.judgments:
        p = by[j.task]
        assert (p.correct, p.correct_relaxed, p.reasons) == (j.correct, j.correct_relaxed,
                                                            j.reasons), j.task
        assert [s.errors for s in p.sets] == [s.errors for s in j.sets], j.task
    assert by["L1/19"].correct and by["L1/23"].correct
    assert by["L1/24"].reason == "zeros_output"
    assert par.missing == ("L1/21",)
    lines = (tmp_path / "par" / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3                        # one line per judged task, none for missing
    again = run_parallel(tasks, sols, tmp_path / "par", OPTIONS, ParallelOptions(jobs=2),
                         progress=None, write_reports=False)
    assert set(again.resumed) == {"L1/19", "L1/23", "L1/24"}
    assert len((tmp_path / "par" / "results.jsonl").read_text().splitlines()) == 3


@needs_tasks
def test_parallel_runner_records_nothing_it_did_not_finish_in_its_budget(tmp_path):
    """Every forward sleeps 6 s (a forked candidate starts in milliseconds), so a task's 5 sets
    take 30 s, 10 times the 3 s budget. The runner records no judgment and stops the tasks at
    the budget: no task gets through all its sets. Counted in forwards, not in seconds (a
    wall-clock bound failed on a loaded CI machine): a runner that ran on to the end would
    log 5 forwards per task, however slow or fast the machine."""
    from argus.bench.kernelbench.parallel import ParallelOptions, run_parallel

    tasks = [_task(1, 19), _task(1, 23)]
    sols = _solutions(tmp_path)
    log = tmp_path / "forwards.log"
    for path in (sols / "level1").iterdir():
        path.write_text(path.read_text()
                        + "\n_fwd = ModelNew.forward\n"
                          "def _slow(self, *a):\n"
                          "    import time\n"
                          f"    with open({str(log)!r}, 'a') as f:\n"
                          f"        f.write({path.stem!r} + '\\n')\n"
                          "    time.sleep(6.0)\n"
                          "    return _fwd(self, *a)\n"
                          "ModelNew.forward = _slow\n")

    def forwards() -> dict[str, int]:
        names = log.read_text().split() if log.exists() else []
        return {name: names.count(name) for name in set(names)}

    run = run_parallel(tasks, sols, tmp_path / "out", OPTIONS,
                       ParallelOptions(jobs=2, budget_s=3.0, min_start_s=0.0),
                       progress=None, write_reports=False)
    assert run.judgments == ()                    # none finishes within 3 s
    assert load_results(tmp_path / "out") == {}
    started = forwards()
    assert all(n < 5 for n in started.values()), started   # stopped, not run to the end
    late = run_parallel(tasks, sols, tmp_path / "late", OPTIONS,
                        ParallelOptions(jobs=2, budget_s=5.0, min_start_s=10.0),
                        progress=None, write_reports=False)
    assert late.judgments == ()                   # too little time to start anything
    assert forwards() == started                  # not one forward more


# ---------------------------------------------------------------------- selection, summary
def test_skip_torch_ops_selects_by_what_the_composition_leaves_to_torch():
    from argus.compose.cli import skipped_for

    assert skipped_for(("conv2d", "dropout"), "conv") == ["conv2d"]
    assert skipped_for(("conv_transpose3d",), "pool,CONV") == ["conv_transpose3d"]
    assert skipped_for(("dropout",), "conv") == []
    assert skipped_for(("conv2d",), "") == []


@needs_tasks
def test_level_summary_counts_and_geomeans():
    from argus.bench.kernelbench.summary import level_rows, markdown

    base = missing_judgment(_task(1, 19), "cuda")

    def j(key, level, correct, relaxed, argus, eager=None, comp=None, degenerate=()):
        # a probe passing the strict check passes the looser relaxed one too
        return dataclasses.replace(base, task=key, level=level, correct=correct,
                                   correct_relaxed=relaxed, reasons=() if correct else ("x",),
                                   argus_kernels=argus, speedup_eager=eager,
                                   speedup_compile=comp, degenerate=degenerate,
                                   degenerate_relaxed=degenerate)

    js = [j("L1/1", 1, True, True, "yes", 2.0, 1.5), j("L1/2", 1, True, True, "partial", 0.5),
          j("L1/3", 1, False, True, "yes"), j("L1/4", 1, True, True, "no", 9.0, 9.0),
          j("L1/5", 1, True, True, "yes", 4.0, 3.0, degenerate=("zeros",)),
          j("L2/1", 2, True, True, "yes", 3.0, 2.0)]
    rows = level_rows({1: ["L1/1", "L1/2", "L1/3", "L1/4", "L1/5", "L1/6"], 2: ["L2/1"]}, js)
    r1, r2 = rows
    # relaxed: L1/1, L1/2 and L1/3 (relaxed-correct only); not L1/4 (PyTorch's work) nor
    # L1/5 (degenerate on both tracks)
    assert (r1["selected"], r1["judged"], r1["strict"], r1["relaxed"], r1["argus"]) == \
        (6, 5, 2, 3, 1)
    assert math.isclose(r1["geomean_eager"], math.sqrt(2.0 * 0.5))
    assert math.isclose(r1["geomean_compile"], 1.5)
    assert (r2["strict"], r2["relaxed"]) == (1, 1) and math.isclose(r2["geomean_eager"], 3.0)
    # the relaxed track's geomean: the strict passes' speedups and a relaxed-only pass's (the
    # judge times those whose only strict failure is precision); never PyTorch's own work
    relaxed_timed = j("L1/3", 1, False, True, "yes", 8.0)
    (r1b, _) = level_rows({1: ["L1/1", "L1/2", "L1/3", "L1/4", "L1/5", "L1/6"], 2: ["L2/1"]},
                          [relaxed_timed if x.task == "L1/3" else x for x in js])
    assert math.isclose(r1b["geomean_eager"], math.sqrt(2.0 * 0.5))      # strict: unchanged
    assert r1b["timed_relaxed"] == 3 and \
        math.isclose(r1b["geomean_eager_relaxed"], (2.0 * 0.5 * 8.0) ** (1 / 3))
    text = markdown(rows)
    assert "2/6 (33%)" in text and "1.00x" in text


# ------------------------------------------------------------------ chunked measurements
@pytest.mark.parametrize("case", ["plain", "nonfinite_ref", "mismatch", "zero_ref", "wrong"])
def test_chunked_errors_equal_the_whole_tensor_errors(case):
    """Outputs above tolerance.CHUNK elements are measured in chunks (no full-size float64
    temporaries): the same errors as the whole-tensor computation, chunk borders anywhere."""
    from argus.bench.kernelbench import tolerance

    g = torch.Generator().manual_seed(5)
    ref = torch.randn(1000, dtype=torch.float64, generator=g)
    y = (ref + 1e-7 * torch.randn(1000, dtype=torch.float64, generator=g)).float()
    if case == "nonfinite_ref":
        ref[[3, 500]] = float("inf")
        ref[999] = float("nan")
        y[[3, 500]] = float("inf")
        y[999] = float("nan")
    elif case == "mismatch":
        y[10] = float("nan")
    elif case == "zero_ref":
        ref.zero_()
        y.zero_()
        y[7] = 1e-3
    elif case == "wrong":
        y[::3] += 0.5
    whole = tolerance.errors(y, ref, chunk=1 << 30)
    for chunk in (1, 7, 128, 999):
        part = tolerance.errors(y, ref, chunk=chunk)
        assert part.nonfinite_mismatch == whole.nonfinite_mismatch
        assert part.relaxed_ok == whole.relaxed_ok and part.exact == whole.exact
        for a, b in ((part.rel_l2, whole.rel_l2), (part.max_elem, whole.max_elem)):
            assert (math.isinf(a) and math.isinf(b)) or math.isclose(a, b, rel_tol=1e-9,
                                                                      abs_tol=1e-300)


def test_chunked_fingerprint_equals_the_whole_one():
    from argus.bench.kernelbench import probes

    x = torch.randn(10_001)
    x[5] = float("nan")
    whole = probes.fingerprint(x, chunk=1 << 30)
    assert probes.fingerprint(x, chunk=97) == whole == probes.fingerprint(x.clone(), chunk=4096)
    y = x.clone()
    y[9000] = 0.0
    assert probes.fingerprint(y, chunk=97) != whole
    big = torch.full((5000,), -1, dtype=torch.int64) * (1 << 62)     # sums wrap around
    assert probes.fingerprint(big, chunk=3) == probes.fingerprint(big, chunk=1 << 30)


def test_first_fit_picks_what_fits_and_stops_passing_the_largest():
    from argus.bench.kernelbench.parallel import pick_first_fit

    memory = gpumem.GpuMemoryBudget(10.0)
    assert memory.try_acquire(5)                      # something running holds 5
    queue = [("big", 8), ("a", 3), ("b", 2), ("c", 1), ("d", 1)]
    passed = [0]

    def pick():
        return pick_first_fit(queue, lambda item: item[1], memory, passed, max_passes=2)

    assert pick() == ("a", 3)                         # big does not fit; a passes it
    assert pick() == ("b", 2)                         # 5 + 3 + 2 = 10
    assert pick() is False                            # c would fit nowhere, and big has
    memory.release(3)                                 # been passed twice: c waits
    assert pick() is False                            # 7 + 1 fits, but no more passing
    memory.release(2)
    memory.release(5)
    assert pick() == ("big", 8)                       # the head, once there is room
    assert passed == [0]
    assert pick() == ("c", 1) and pick() == ("d", 1)
    queue.append(("e", 1))
    assert pick() is False                            # 10 in use
    memory.release(8)
    memory.release(1)
    memory.release(1)
    assert pick() == ("e", 1)
    memory.release(1)
    assert pick() is None                             # empty queue
    assert memory.in_use == 0


@needs_tasks
def test_a_judge_out_of_memory_is_that_tasks_retryable_failure():
    """An exception in the judge's own process ends that task, never the slot; running out
    of GPU memory (the in-process reference beside other tasks) is out_of_memory, which the
    runner retries alone, any other is task_error."""
    from argus.bench.kernelbench.judge import _reference_kind
    from argus.bench.kernelbench.runner import judge_failure as _judge_failure
    from argus.bench.kernelbench.process import LocalWorker, WorkerError

    task = _task(1, 19)
    oom = _judge_failure(task, "cuda", torch.OutOfMemoryError("CUDA out of memory"))
    other = _judge_failure(task, "cuda", ValueError("bad"))
    assert oom.reason == "out_of_memory" and not oom.correct and "OutOfMemoryError" in oom.detail
    assert other.reason == "task_error"
    assert _reference_kind(WorkerError("out_of_memory", "x")) == "out_of_memory"
    assert _reference_kind(WorkerError("worker_error", "x")) == "task_error"
    worker = LocalWorker("reference")
    with pytest.raises(WorkerError) as info:
        worker.request("init", 10, task_path=str(KB_DIR / "level1" / "nonexistent.py"),
                       device="cpu", seed=0, overrides={}, cpu_budget=None, workdir="/tmp")
    assert info.value.kind == "task_error"


def test_holding_shared_is_per_thread(tmp_path):
    gate = GpuGate(tmp_path / "g")
    seen = {}
    with gate.shared():
        seen["main"] = gate.holding_shared()
        th = threading.Thread(target=lambda: seen.setdefault("other", gate.holding_shared()))
        th.start()
        th.join()
        with gate.yielding():
            seen["yielding"] = gate.holding_shared()
        seen["after"] = gate.holding_shared()
    seen["outside"] = gate.holding_shared()
    assert seen == {"main": True, "other": False, "yielding": False, "after": True,
                    "outside": False}


def test_a_cuda_out_of_memory_error_of_any_kind_is_retried_alone():
    """On the H200 a CUDA 'out of memory' raised as torch.AcceleratorError (a kernel launch or
    a non-torch allocation) was judged task_error / init_error instead of being retried alone
    like torch's OutOfMemoryError."""
    import torch

    from argus.bench.kernelbench.runner import judge_failure as _judge_failure
    from argus.bench.kernelbench.tasks import Task
    from argus.bench.kernelbench.worker import out_of_memory

    accelerator = getattr(torch, "AcceleratorError", RuntimeError)
    try:
        launch = accelerator("CUDA error: out of memory\nSearch for `cudaErrorMemoryAllocation'")
    except TypeError:                       # a constructor that wants an error code first
        launch = RuntimeError("CUDA error: out of memory")
    assert out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert out_of_memory(launch)
    assert not out_of_memory(RuntimeError("CUDA error: an illegal memory access"))
    assert not out_of_memory(ValueError("out of memory"))      # not a CUDA runtime error
    task = Task(level=1, problem_id=19, name="ReLU", path=Path("19_ReLU.py"), sha256="0" * 64)
    assert _judge_failure(task, "cuda", launch).reasons == ("out_of_memory",)
    assert _judge_failure(task, "cuda", RuntimeError("boom")).reasons == ("task_error",)


@needs_tasks
def test_sets_prepared_ahead_give_the_same_judgment(tmp_path, monkeypatch):
    """Direct judging prepares the next set (and, after the last, the timing sets) in a
    thread while the candidate runs (`ReferenceSession.prefetch`): the verdicts and per-set
    errors equal those of a session that prepares each set when it needs it (ref_cache_bytes
    0: no task is small enough to prefetch), the waits are in the phase table, and the judge
    never waits for a preparation while it holds the gate (which raises)."""
    monkeypatch.setenv("ARGUS_GPU_GATE", str(tmp_path / "gpu.gate"))
    task = _task(1, 19)
    options = dataclasses.replace(OPTIONS, direct=True, cpu_timing=True, trials=10, warmup=1)
    with ReferenceSession(task, dataclasses.replace(options, ref_cache_bytes=0)) as session:
        plain = judge_with(session, FIXTURES / "relu_copy.py")
    with ReferenceSession(task, options) as session:
        ahead = judge_with(session, FIXTURES / "relu_copy.py")
        zeros = judge_with(session, FIXTURES / "zeros.py")
        cheat = judge_with(session, FIXTURES / "cached_by_identity.py")
    assert plain.correct and ahead.correct, (ahead.reasons, ahead.detail)
    assert [s.errors for s in plain.sets] == [s.errors for s in ahead.sets]
    assert "reference sets waited for (prepared ahead)" in ahead.phases, ahead.phases
    assert "reference sets waited for (prepared ahead)" not in plain.phases
    # at most one more entry a set (a set still being prepared is waited for outside the
    # hold), the first set's reference (prepared before the candidate starts, in an entry of
    # its own) and three for the timing sets and their check. The worst case is reached when
    # every preparation ahead is still running as the judge needs it (a busy machine: CI
    # measured 14 for 5 sets)
    entries = ahead.phases["# judge gate shared entries"]
    assert entries <= 2 * len(ahead.sets) + 1 + 3, (entries, ahead.phases)
    assert zeros.reason == "zeros_output"
    assert cheat.reason == "timed_output_wrong"


def test_a_set_with_big_inputs_is_not_prepared_ahead():
    """A reduction's reference is small while its inputs are not: preparing its next set beside
    the candidate holds the inputs, their float64 copies and the rungs' (L1/47-53, 8 GB of
    inputs, ran out of memory alone on the H200 with the judge's process at 116 GB). Only a
    set whose reference and preparation both fit ref_cache_bytes is prepared ahead."""
    import types

    from argus.bench.kernelbench.judge import ReferenceSession, _RefSet

    def entry(ref_elems: int, input_elems: int) -> _RefSet:
        return _RefSet(spec=None, reply={}, inputs_path=Path("/nonexistent"),
                       ref=[torch.zeros(ref_elems)], tols=[],
                       inputs=[torch.zeros(input_elems), 3])
    fake = types.SimpleNamespace(
        options=dataclasses.replace(OPTIONS, ref_cache_bytes=1 << 20), specs=[None] * 5,
        _preparation_bytes=ReferenceSession._preparation_bytes)
    assert ReferenceSession.small(fake, entry(16, 1024))            # both small: ahead
    assert not ReferenceSession.small(fake, entry(16, 1 << 18))     # 1 MB of inputs: not
    assert not ReferenceSession.small(fake, entry(1 << 16, 16))     # a big reference: not


def test_a_set_of_unknown_input_size_is_not_prepared_ahead(tmp_path):
    """When the size of a set's inputs cannot be read (its file is gone or unreadable), the set
    is not prepared ahead: an unknown size counted as 0 bytes would always pass the bound, the
    direction that ran the judge out of memory (L1/47-53)."""
    import types

    from argus.bench.kernelbench.judge import ReferenceSession, _RefSet

    fake = types.SimpleNamespace(
        options=dataclasses.replace(OPTIONS, ref_cache_bytes=1 << 20), specs=[None] * 5,
        _preparation_bytes=ReferenceSession._preparation_bytes)
    on_disk = tmp_path / "set0.pt"
    on_disk.write_bytes(b"\0" * 1024)
    known = _RefSet(spec=None, reply={}, inputs_path=on_disk, ref=[torch.zeros(16)], tols=[])
    gone = _RefSet(spec=None, reply={}, inputs_path=tmp_path / "missing.pt",
                   ref=[torch.zeros(16)], tols=[])
    assert ReferenceSession.small(fake, known)       # a small file: prepared ahead
    assert not ReferenceSession.small(fake, gone)    # unknown: not prepared ahead
