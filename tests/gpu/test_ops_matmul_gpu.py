"""GPU tier: argus.ops.matmul against a float64 reference on fresh random data — both B
layouts, bf16/fp16 in, bf16/fp16/fp32 out, odd sizes, sliced and transposed views, misaligned
pointers, batches, empty shapes — and the clear errors for inputs that cannot be right."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()


def _rel(out, ref):
    out, ref = out.double(), ref.double()
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def _rand(*shape, dtype=torch.bfloat16, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(*shape, generator=g, device="cuda").to(dtype)


@pytest.mark.parametrize("m,n,k", [(1, 257, 64), (7, 129, 72), (129, 300, 200), (64, 4096, 4096),
                                   (4095, 511, 256), (300, 4097, 136)])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_matmul_shapes_and_layouts(m, n, k, layout):
    from argus.ops import matmul

    a = _rand(m, k, seed=m)
    w = _rand(n, k, seed=n) if layout == "x@W.T" else _rand(k, n, seed=n)
    b = w.T if layout == "x@W.T" else w
    out = matmul(a, b)
    assert _rel(out, a.double() @ b.double()) < 1e-2


@pytest.mark.parametrize("in_dtype,out_dtype", [(torch.float16, torch.float16),
                                                (torch.bfloat16, torch.float32),
                                                (torch.float16, torch.float32)])
def test_matmul_dtypes(in_dtype, out_dtype):
    from argus.ops import matmul

    a, b = _rand(300, 520, dtype=in_dtype, seed=1), _rand(520, 260, dtype=in_dtype, seed=2)
    out = torch.full((300, 260), float("nan"), device="cuda", dtype=out_dtype)
    matmul(a, b, out=out)
    tol = 1e-5 if out_dtype == torch.float32 else 1e-2
    assert _rel(out, a.double() @ b.double()) < tol


def test_matmul_views_and_misaligned_pointers():
    from argus.ops import matmul

    big = _rand(300, 1000, seed=3)
    a = big[:, 10:210]                      # sliced: row pitch 1000, pointer offset 20 bytes
    b = _rand(400, 200, seed=4)[:, :].T     # transposed view of a row-major weight
    assert _rel(matmul(a, b), a.double() @ b.double()) < 1e-2
    flat = _rand(1 + 64 * 72, seed=5)[1:].view(64, 72)   # base pointer off by 2 bytes
    w = _rand(72, 48, seed=6)
    assert _rel(matmul(flat, w), flat.double() @ w.double()) < 1e-2
    strided = _rand(72, 96, seed=7)[:, ::2]  # neither stride is 1
    assert _rel(matmul(flat, strided), flat.double() @ strided.double()) < 1e-2


def test_batched_and_shared_weight():
    from argus.ops import bmm, matmul

    a, b = _rand(3, 200, 136, seed=8), _rand(3, 136, 300, seed=9)
    assert _rel(bmm(a, b), a.double() @ b.double()) < 1e-2
    bt = _rand(3, 300, 136, seed=10).transpose(1, 2)
    assert _rel(bmm(a, bt), a.double() @ bt.double()) < 1e-2
    w = _rand(136, 72, seed=11)
    assert _rel(matmul(a, w), a.double() @ w.double()) < 1e-2


def test_empty_shapes():
    from argus.ops import matmul

    assert matmul(_rand(0, 64), _rand(64, 32)).shape == (0, 32)
    out = matmul(_rand(5, 0), _rand(0, 7))
    assert out.shape == (5, 7) and not out.float().abs().sum()


def test_clear_errors():
    from argus.errors import LaunchError
    from argus.ops import matmul

    a = _rand(64, 64)
    with pytest.raises(LaunchError, match="cpu"):
        matmul(a.cpu(), a.cpu())
    with pytest.raises(LaunchError, match="must both be bfloat16 or both float16"):
        matmul(a, a.half())
    # fp32 runs only as tf32, and only when asked: the refusal names the opt-in
    with pytest.raises(LaunchError, match="precision='tf32'"):
        matmul(a.float(), a.float())
    with pytest.raises(LaunchError, match="takes float32 inputs"):
        matmul(a.float(), a, precision="tf32")
    with pytest.raises(LaunchError, match="do not multiply"):
        matmul(a, _rand(32, 64))
    with pytest.raises(LaunchError, match="out has shape"):
        matmul(a, a, out=torch.empty(3, 3, device="cuda", dtype=torch.bfloat16))


def test_out_overlapping_an_input_and_noncontiguous_shared_weight():
    from argus.errors import LaunchError
    from argus.ops import matmul

    a = _rand(64, 64)
    with pytest.raises(LaunchError, match="shares memory"):
        matmul(a, a, out=a)
    x = _rand(4, 50, 136, seed=12)[:, ::2]      # non-contiguous batched a, shared 2-d weight
    w = _rand(136, 72, seed=13)
    assert _rel(matmul(x, w), x.double() @ w.double()) < 1e-2


@pytest.mark.slow   # exhaustive over the candidate schedules (minutes on the H200)
@pytest.mark.parametrize("m", [16, 1000])
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_every_candidate_schedule_is_correct(m, layout):
    """Tuning may pick any candidate: each one (k_atoms slices, narrow tiles, clusters, scale-d,
    TMA store) gives the right answer on a ragged shape."""
    from argus.ops import matmul
    from argus.ops.schedules import Problem, candidates

    n, k = 4160, 1000  # K not a multiple of a 4-atom stage (256): the last stage is partial
    a = _rand(m, k, seed=3)
    w = _rand(n, k, seed=4) if layout == "x@W.T" else _rand(k, n, seed=4)
    b = w.T if layout == "x@W.T" else w
    ref = a.double() @ b.double()
    problem = Problem(m, n, k, 1, "bf16", "bf16", "nk" if layout == "x@W.T" else "kn", True)
    for s in candidates(problem):
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul(a, b, out, schedule=s)
        assert _rel(out, ref) < 1e-2, s


def test_repeated_calls_take_the_fast_path_and_stay_correct():
    """The second call on the same buffers goes straight to the cached launch; it must still
    read the buffers' current contents, and a different buffer must not reuse it."""
    import importlib

    from argus.ops import matmul

    mm_module = importlib.import_module("argus.ops.matmul")  # the module, not the function
    a, w = _rand(100, 512, seed=5), _rand(300, 512, seed=6)
    out = torch.empty(100, 300, device="cuda", dtype=torch.bfloat16)
    matmul(a, w.T, out)
    key = mm_module._launch_key(a, w.T, out, None)
    assert key in mm_module._LAUNCHES
    a.mul_(2)
    out.fill_(float("nan"))
    matmul(a, w.T, out)
    assert _rel(out, a.double() @ w.T.double()) < 1e-2
    other = torch.full_like(out, float("nan"))
    matmul(a, w.T, other)
    assert _rel(other, a.double() @ w.T.double()) < 1e-2
    # an input TMA cannot read (odd row pitch) is copied each call: never cached
    a_odd = _rand(100, 513, seed=7)[:, :512]
    matmul(a_odd, w.T, out)
    assert mm_module._launch_key(a_odd, w.T, out, None) not in mm_module._LAUNCHES
    assert _rel(out, a_odd.double() @ w.T.double()) < 1e-2


@pytest.mark.slow   # exhaustive over the candidate schedules (minutes on the H200)
@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_batched_candidates_including_clusters(layout):
    """Batched problems get 2x1-cluster candidates too (3-d multicast of B): each is right."""
    from argus.ops import matmul
    from argus.ops.schedules import Problem, candidates

    batch, m, n, k = 3, 1000, 640, 520
    a = _rand(batch, m, k, seed=8)
    w = _rand(batch, n, k, seed=9) if layout == "x@W.T" else _rand(batch, k, n, seed=9)
    b = w.transpose(-1, -2) if layout == "x@W.T" else w
    ref = a.double() @ b.double()
    problem = Problem(m, n, k, batch, "bf16", "bf16", "nk" if layout == "x@W.T" else "kn", True)
    scheds = candidates(problem)
    assert any(s.cluster_m == 2 for s in scheds)
    for s in scheds:
        out = torch.full((batch, m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul(a, b, out, schedule=s)
        assert _rel(out, ref) < 1e-2, s


@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
@pytest.mark.parametrize("out_dtype", [torch.bfloat16, torch.float32])
def test_split_k_candidates_and_their_replay(layout, out_dtype):
    """Every split-K candidate of a skinny problem is right (ragged M and N), and the cached
    two-kernel launch (partials into its own workspace, then the sum) re-reads the inputs."""
    import importlib

    from argus.ops import matmul
    from argus.ops.schedules import Problem, candidates

    mm_module = importlib.import_module("argus.ops.matmul")
    m, n, k = 13, 4160, 2048
    a = _rand(m, k + 8, seed=10)[:, :k]          # row pitches wider than the rows
    w = _rand(n, k + 16, seed=11)[:, :k] if layout == "x@W.T" else \
        _rand(k, n + 8, seed=11)[:, :n]
    b = w.T if layout == "x@W.T" else w
    problem = Problem(m, n, k, 1, "bf16", "f32" if out_dtype == torch.float32 else "bf16",
                      "nk" if layout == "x@W.T" else "kn", True)
    scheds = [s for s in candidates(problem) if s.split_k > 1]
    assert scheds
    for s in scheds:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=out_dtype)
        matmul(a, b, out, schedule=s)
        assert _rel(out, a.double() @ b.double()) < 1e-2, s
        assert mm_module._launch_key(a, b, out, s) in mm_module._SPLIT_LAUNCHES
        a2 = a * -0.5
        matmul(a2, b, out, schedule=s)           # new buffers: the checked path again
        assert _rel(out, a2.double() @ b.double()) < 1e-2, s
        a.mul_(1.5)                              # same buffers, new contents: the replay
        out.fill_(float("nan"))
        matmul(a, b, out, schedule=s)
        assert _rel(out, a.double() @ b.double()) < 1e-2, s


def test_a_batch_of_one_runs_as_the_2d_problem():
    """bmm with batch 1 takes the 2-d path: every schedule the 2-d problem may be tuned to,
    split-K and swap-AB included, is right for it."""
    from argus.ops import bmm
    from argus.ops.schedules import Problem, candidates

    a, w = _rand(1, 16, 1024, seed=12), _rand(1, 640, 1024, seed=13)
    ref = a.double() @ w.double().transpose(-1, -2)
    for s in candidates(Problem(16, 640, 1024, 1, "bf16", "bf16", "nk", True)):
        got = bmm(a, w.transpose(-1, -2), schedule=s)
        assert got.shape == (1, 16, 640) and _rel(got, ref) < 1e-2, s


def test_a_captured_split_k_matmul_keeps_its_workspace():
    """A split-K matmul captured in a CUDA graph allocates its workspace from the graph's pool
    (it never takes or leaves a cached launch whose workspace the memo could free), so the
    graph stays right after the memo is cleared."""
    import gc
    import importlib

    from argus.kernels.gemm import GemmSchedule
    from argus.ops import matmul
    from argus.ops.matmul import forget_choices

    mm_module = importlib.import_module("argus.ops.matmul")
    s = GemmSchedule(bm=64, bn=64, consumers=1, stages=4, split_k=2)
    a, w = _rand(16, 1024, seed=14), _rand(512, 1024, seed=15)
    out = torch.empty(16, 512, device="cuda", dtype=torch.bfloat16)
    matmul(a, w.T, out, schedule=s)                      # compile, cache a launch
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(side), torch.cuda.graph(graph):
        matmul(a, w.T, out, schedule=s)
    torch.cuda.current_stream().wait_stream(side)
    forget_choices()
    gc.collect()
    assert not mm_module._SPLIT_LAUNCHES
    # blocks of the workspace's size take over any memory the memo freed; a graph that still
    # wrote partials there would overwrite them
    fillers = [torch.full((2 * 16 * 512,), 7.0, device="cuda") for _ in range(64)]
    a.mul_(-1.0)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert _rel(out, a.double() @ w.T.double()) < 1e-2
    assert all(bool((f == 7.0).all()) for f in fillers)


@pytest.mark.parametrize("layout", ["x@W.T", "x@W"])
def test_wave_fitting_tiles_including_narrow_tma_store_blocks(layout):
    """The 224-, 192- and 176-wide candidates (TMA-store epilogue in 32- or 16-column blocks,
    2x1 clusters) are right on a ragged shape."""
    from argus.ops import matmul
    from argus.ops.schedules import Problem, _wave_fitting_tiles

    m, n, k = 1000, 7000, 520
    a = _rand(m, k, seed=16)
    w = _rand(n, k, seed=17) if layout == "x@W.T" else _rand(k, n, seed=17)
    b = w.T if layout == "x@W.T" else w
    ref = a.double() @ b.double()
    # the candidates of the 2048 x 7168 shape they were made for, run on this one
    scheds = _wave_fitting_tiles(Problem(2048, 7168, 2048, 1, "bf16", "bf16",
                                         "nk" if layout == "x@W.T" else "kn", True))
    assert any(s.epilogue == "tma" for s in scheds)
    for s in scheds:
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        matmul(a, b, out, schedule=s)
        assert _rel(out, ref) < 1e-2, s


@pytest.mark.slow   # exhaustive over the candidate schedules (minutes on the H200)
def test_tune_matmul_records_a_winner_that_matmul_then_runs(tmp_path, monkeypatch):
    """tune_matmul screens every candidate, times the finalists again, records the winner for
    this GPU; the next plain matmul picks it and is right."""
    from argus.ops import matmul, tune_matmul
    from argus.ops.matmul import device_name, forget_choices
    from argus.ops.schedules import choose
    from argus.ops.tune import tuning_candidates

    monkeypatch.setenv("ARGUS_CACHE_DIR", str(tmp_path))
    forget_choices()   # nothing chosen before, nothing from this cache left behind (below)
    a, w = _rand(512, 1024, seed=21), _rand(768, 1024, seed=22)
    out = torch.empty(512, 768, device="cuda", dtype=torch.bfloat16)
    lines = []
    result = tune_matmul(a, w.T, out, progress=lines.append)
    timed = tuning_candidates(result.problem)   # the model's candidates + any tail splits
    assert result.best in timed
    assert len(result.screened) + len(result.failed) == len(timed)
    assert not result.failed and len(result.finals) == 3
    assert [ms for ms, _ in result.finals] == sorted(ms for ms, _ in result.finals)
    assert {s for _, s in result.finals} == {s for _, s in result.screened[:3]}
    assert choose(result.problem, device_name(a.device)) == result.best
    assert len(lines) == len(result.screened) + 3
    out.fill_(float("nan"))
    matmul(a, w.T, out)
    assert _rel(out, a.double() @ w.double().T) < 1e-2
    forget_choices()
