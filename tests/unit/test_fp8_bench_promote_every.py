"""scripts/gpu_fp8_bench.py --promote-every without a GPU: its schedules and its table."""

import pytest

pytest.importorskip("torch")


def test_bench_promote_every_mode_has_legal_schedules_and_a_table():
    """scripts/gpu_fp8_bench.py --promote-every: at the seven per-tensor shapes every interval
    has a schedule (M > 256: three tiles, two at N = 1; the weight streams: the rule's pick)
    that promotes every N steps; the table takes rows of that form."""
    from tests.loading import load_script

    bench = load_script("gpu_fp8_bench")
    for m, n, k in bench.SHAPES:
        assert not bench.plain_default(m, n, k).promote
        for every in (1, 2, 4, 8):
            named = bench.interval_schedules(m, n, k, every)
            assert named, (m, n, k, every)
            for _, s in named:
                assert s.promote and s.promote_every * s.k_atoms == every, s
    row = {"M": 16, "N": 8192, "K": 8192, "torch_rel_error": 1.7e-3, "torch_tflops": 80.0,
           "entries": {"plain default": {"every": 0, "ratio": 1.02, "rel_error": 2.6e-3},
                       "N=2 stream": {"every": 2, "ratio": 1.01, "rel_error": 1.71e-3}}}
    text = bench.promote_every_table([row], [2])
    assert "| 16x8192x8192 | 80 (1.70e-03) | 1.020 (2.60e-03) | 1.010 (1.71e-03) |" in text
    assert "| err <= 1.01 x torch | | 0 of 1 | 1 of 1 |" in text
