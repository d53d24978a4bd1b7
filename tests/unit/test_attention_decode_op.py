"""argus.ops.attention_decode's input checks, the split heuristic, DecodeSchedule's legality
checks and argus.ops.attention's dispatch to the decode path (no GPU: shapes and dtypes are
checked before devices, and the host path runs with the interpreter as its executor)."""

import math

import pytest
import torch

import importlib
from argus.errors import LaunchError
from argus.kernels.attention_decode import (MAX_QUERIES, DecodeSchedule,
                                            default_decode_schedule, num_splits)
from argus.ops import attention_decode
from argus.ops.attention_decode import run_decode

# the module (argus.ops.attention is the function of the same name)
attention_mod = importlib.import_module("argus.ops.attention")


def _qkv(B=1, H=4, HKV=2, S=1, SK=40, D=64, dtype=torch.bfloat16):
    return (torch.randn(B, H, S, D).to(dtype), torch.randn(B, HKV, SK, D).to(dtype),
            torch.randn(B, HKV, SK, D).to(dtype))


def _interpret(kernel_fn, compile_time, tensors, scalars):
    kernel_fn.interpret(*tensors, **scalars, **compile_time)


@pytest.mark.parametrize("change,words", [
    (lambda q, k, v: (q.float(), k, v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q, k.half(), v), "all be bfloat16 or all float16"),
    (lambda q, k, v: (q[0], k, v), "4-d tensors"),
    (lambda q, k, v: (q[..., :32], k[..., :32], v[..., :32]), "head dim 32 is not supported"),
    (lambda q, k, v: (q, k[:, :, :7], v), "differ"),
    (lambda q, k, v: (q[:, :3], k, v), "multiple of the key/value heads"),
    (lambda q, k, v: (torch.cat([q, q]), k, v), "batch sizes differ"),
    (lambda q, k, v: (q, k, v), "Argus kernels run on a CUDA device"),
])
def test_bad_input_gets_a_clear_error(change, words):
    q, k, v = change(*_qkv())
    with pytest.raises(LaunchError, match=words):
        attention_decode(q, k, v)


def test_host_path_errors():
    q, k, v = _qkv(S=MAX_QUERIES + 1)
    with pytest.raises(LaunchError, match="17 query tokens; the decode kernels take at most 16"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, execute=_interpret)
    q, k, v = _qkv()
    with pytest.raises(LaunchError, match=r"splits=0 must be an int in \[1, 128\]"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, splits=0, execute=_interpret)
    with pytest.raises(LaunchError, match="is not a DecodeSchedule"):
        run_decode(q, k, v, False, 0.125, "bhsd", False, schedule="fast", execute=_interpret)
    strided = torch.randn(1, 2, 40, 128).bfloat16()[..., ::2]       # head dim stride 2
    with pytest.raises(LaunchError, match="k .* cannot be read by TMA"):
        run_decode(q, strided, v, False, 0.125, "bhsd", False, execute=_interpret)
    # a schedule of one warpgroup (64 rows) for 4 heads x 16 tokens = 64 rows: fine; 8 x 16
    # = 128 rows need two
    q8, k8, v8 = _qkv(H=8, HKV=1, S=16)
    with pytest.raises(LaunchError, match="cannot run 128 packed rows"):
        run_decode(q8, k8, v8, False, 0.125, "bhsd", False,
                   schedule=DecodeSchedule(consumers=1), execute=_interpret)


def test_num_splits():
    # enough (batch, kv head) units: one split, no combine
    assert num_splits(256, 64) == 1 and num_splits(106, 1024) == 1
    # batch 1 with 8 kv heads: enough splits to put a CTA on nearly every SM
    for blocks in (64, 256, 1024):
        s = num_splits(8, blocks)
        assert 8 * s <= 132 and 8 * s >= 0.9 * 132, (blocks, s)
    # never an empty trailing split, never more splits than 2-block pieces
    for units in (1, 2, 3, 8, 16, 40, 100):
        for blocks in range(1, 300, 7):
            s = num_splits(units, blocks)
            per = math.ceil(blocks / s)
            assert (s - 1) * per < blocks and (s == 1 or blocks // s >= 2), (units, blocks, s)


def test_schedules():
    with pytest.raises(ValueError, match="consumers=3"):
        DecodeSchedule(consumers=3)
    with pytest.raises(ValueError, match="block_n=100"):
        DecodeSchedule(block_n=100)
    with pytest.raises(ValueError, match="stages=1"):
        DecodeSchedule(stages=1)
    assert "shared memory" in " ".join(DecodeSchedule(stages=6).problems_for(128))
    assert "registers per thread" in " ".join(DecodeSchedule(block_n=256).problems_for(256))
    for d in (64, 128, 256):
        for rows in (1, 64, 65, 128):
            s = default_decode_schedule(d, rows)
            assert s.problems_for(d) == [] and s.block_m >= rows and s.stages >= 2


def test_attention_takes_the_decode_path_for_short_queries(monkeypatch):
    """argus.ops.attention's implementation sends Sq <= 16 to run_decode (the custom op and
    its fake stay the same: same shapes)."""
    calls = []
    monkeypatch.setattr(attention_mod, "check", lambda *a, **kw: None)
    monkeypatch.setattr(attention_mod, "run_decode",
                        lambda *a, **kw: calls.append(a[0].shape) or ("out", "lse"))
    q, k, v = _qkv(S=16)
    assert attention_mod._run(q, k, v, True, 0.125, "bhsd", False) == ("out", "lse")
    assert calls == [q.shape]


def test_broadcast_kv_is_refused_and_a_broadcast_q_is_copied():
    """A tensor expanded along a dim (stride 0: one KV cache shared by every sequence, as the
    batch-size error's fix suggests) cannot be read through a tensor map (strides must be
    positive multiples of 16 bytes: argus/runtime/tma.py), so k / v say so up front with the
    .contiguous() fix instead of failing at the launch with the tensor map's 'pad the inner
    dim' advice; q's packed rows are copied like any other view TMA cannot read."""
    from argus.ops.attention_decode import _tma_ready
    from argus.ops.attention_inputs import _check_strides

    q, k, v = _qkv(B=1)
    k2, v2 = k.expand(3, -1, -1, -1), v.expand(3, -1, -1, -1)
    assert k2.stride(0) == 0
    with pytest.raises(LaunchError, match="k .* cannot be read by TMA"):
        _check_strides((("k", k2), ("v", v2)))
    with pytest.raises(LaunchError, match="k .* cannot be read by TMA"):
        run_decode(q.expand(3, -1, -1, -1), k2, v2, False, 0.125, "bhsd", False,
                   execute=_interpret)
    _check_strides((("k", k), ("v", v)))            # extent-1 dims are never stepped over
    assert not _tma_ready(q.expand(3, -1, -1, -1).reshape(3, 2, 2, 64))
    assert _tma_ready(q.reshape(1, 2, 2, 64))
