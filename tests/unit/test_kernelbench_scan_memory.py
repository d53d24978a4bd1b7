"""The judge's scans over whole outputs and inputs in bounded pieces (issue 17: KernelBench
L1/87's candidate ran out of memory asking for 16 GiB, the int64 copy that a bool sum over its
2^31-element output makes), and the reference's draw into fresh allocator segments. On the
CPU: the largest allocation an op makes is read from torch's profiler (`profile_memory`), the
same accounting on every device (the cast happens in the reduction, not in a backend)."""

from __future__ import annotations

import torch
from torch.profiler import ProfilerActivity, profile

from argus.bench.kernelbench import guards
from argus.bench.kernelbench import inputs as kb_inputs
from argus.bench.kernelbench import worker


def _largest_allocation(fn) -> int:
    """The most bytes any one op of `fn` allocated (net of what it freed inside)."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    return max((e.cpu_memory_usage for e in prof.events()), default=0)


def _planted(dtype: torch.dtype, n: int, where: list[int], pattern_index: int = 0
             ) -> torch.Tensor:
    t = torch.rand(n, dtype=torch.float64).to(dtype)
    view = guards._INT_VIEW[dtype]
    bits = torch.iinfo(view).bits
    patterns = guards._PATTERNS[dtype]
    for k, i in enumerate(where):
        pattern = patterns[(pattern_index + k) % len(patterns)]
        t.view(view)[i] = guards._signed(pattern, bits)
    return t


def test_poison_count_in_chunks_counts_what_one_pass_counts():
    n = 10_007                      # not a multiple of any chunk: a short last one
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32,
                  torch.int64):
        where = [0, 1, 63, 64, 65, 4095, 4096, n - 1]
        t = _planted(dtype, n, where)
        whole = guards.poison_count(t, chunk=n)
        assert whole == len(where), dtype
        for chunk in (1, 7, 64, 4096, n - 1, n + 5):
            assert guards.poison_count(t, chunk=chunk) == whole, (dtype, chunk)
    # a 2-d, non-contiguous output is counted over its elements as before
    t = _planted(torch.float32, 64 * 48, [5, 700, 3000]).reshape(64, 48).t()
    assert guards.poison_count(t, chunk=100) == guards.poison_count(t, chunk=1 << 20) == 3


def test_poison_count_allocates_a_chunk_not_the_output_in_int64():
    """One pass over n elements allocates n int64 (the bool sum's cast): 16 GiB for L1/87's
    output. In chunks, the largest allocation is one chunk's int64."""
    n, chunk = 1 << 20, 1 << 12
    t = torch.zeros(n)
    assert _largest_allocation(lambda: guards.poison_count(t, chunk=n)) >= 8 * n  # the old way
    largest = _largest_allocation(lambda: guards.poison_count(t, chunk=chunk))
    assert largest <= 8 * chunk, (
        f"poison_count allocated {largest} bytes at once over {n} elements in chunks of "
        f"{chunk} (one chunk's int64 is {8 * chunk})")


def test_same_bits_in_chunks(monkeypatch):
    monkeypatch.setattr(guards, "SCAN_CHUNK", 64)
    a = torch.rand(1000)
    a[10] = float("nan")
    assert guards.same_bits(a, a.clone())
    for i in (0, 63, 64, 999):      # a difference in the first, a middle and the last chunk
        b = a.clone()
        b.view(torch.int32)[i] ^= 1
        assert not guards.same_bits(a, b), i
    m = torch.rand(40, 30)
    assert guards.same_bits(m.t(), m.t().contiguous())
    assert not guards.same_bits(m, m.t().contiguous().t() + 1)


def test_a_set_is_drawn_after_the_cached_blocks_are_given_back(tmp_path, monkeypatch):
    """`prepare` and `make_inputs` give the allocator's cached blocks back before drawing, so
    that a set's inputs never land in a segment a previous set freed (whose free rest would
    stay reserved while they live). Recorded order of the two calls."""
    task = tmp_path / "level1" / "1_Square.py"
    task.parent.mkdir(parents=True)
    task.write_text("import torch\nimport torch.nn as nn\n\n"
                    "class Model(nn.Module):\n"
                    "    def forward(self, x):\n        return x * x\n\n"
                    "def get_inputs():\n    return [torch.rand(16, 8)]\n\n"
                    "def get_init_inputs():\n    return []\n")
    role = worker.ReferenceRole()
    role.init(str(task), "cpu", 0, None, None, str(tmp_path))
    calls: list[str] = []
    draw = kb_inputs.task_inputs
    monkeypatch.setattr(worker, "_release_cached", lambda device: calls.append("release"))
    monkeypatch.setattr(kb_inputs, "task_inputs",
                        lambda *a, **k: (calls.append("draw"), draw(*a, **k))[1])
    role.prepare(1, 18, "normal", None, None, calibrate=False)
    assert calls[:2] == ["release", "draw"], calls
    calls.clear()
    role.make_inputs(3, "task", False)
    assert calls[:2] == ["release", "draw"], calls


def test_scans_read_a_dense_non_contiguous_tensor_in_place():
    """A channels-last or transposed output is scanned through a view of its storage (no copy
    of the whole tensor), with the same answers; an overlapping one (expand) is still copied."""
    t = _planted(torch.float32, 2 * 8 * 5 * 6, [3, 77, 400]).reshape(2, 8, 5, 6)
    for other in (t.to(memory_format=torch.channels_last), t.transpose(1, 3)):
        flat = guards._flat_view(other)
        assert flat.data_ptr() == other.data_ptr() and flat.numel() == other.numel()
        assert guards.poison_count(other) == guards.poison_count(t.contiguous()) == 3
        assert guards.poison_count(other, chunk=7) == 3
    expanded = torch.zeros(4, 1).expand(4, 6)
    assert guards._flat_view(expanded).data_ptr() != expanded.data_ptr()


def test_same_bits_pairs_elements_across_layouts():
    """same_bits reads both tensors in the first one's storage order: equal values in two
    layouts are equal, and one flipped element in either layout is found."""
    a = torch.randn(3, 4, 5, 6).to(memory_format=torch.channels_last)
    b = a.contiguous()                       # same values, another layout
    assert guards.same_bits(a, b) and guards.same_bits(b, a)
    for i in (0, 200, 359):
        c = b.clone()
        c.view(-1)[i] += 1.0
        assert not guards.same_bits(a, c) and not guards.same_bits(c, a)
