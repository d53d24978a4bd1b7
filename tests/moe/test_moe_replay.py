"""argus.ops.moe's replay of decode calls (argus/ops/moe.py, _run): a call with the shapes,
options and argument addresses (its `out` buffer included) of an earlier call on the same
stream launches that call's recorded plans and nothing else; any other call records its own,
and a call without `out` records nothing. Here on the CPU, with the
launcher replaced by one that records what it would launch and plans that count their calls
(tests/gpu/test_moe_gpu.py runs the real replay against float64)."""

from collections import OrderedDict

import pytest
import torch

from argus.ops import moe_module as M

from tests.moe.conftest import stub_launches  # noqa: E402


@pytest.fixture
def launches(monkeypatch):
    """The launches of each call (tests/moe/conftest.py `stub_launches`): ("launch", kernel)
    for a launcher call, ("replay", kernel, stream) for a replayed plan, on "stream 77"."""
    return stub_launches(monkeypatch)


OUT = torch.empty(2, 64, dtype=torch.bfloat16)   # the caller's output buffer


def _call(x, w13, w2, logits, k=8, ids=None, weights=None, scoring="softmax", bias=None,
          out=OUT):
    groups = dict(num_expert_group=4, topk_group=2) if scoring == "sigmoid" else {}
    return M._run(x, w13, w2, None if ids is not None else logits, k, True, scoring, "silu",
                  ids, weights, bias, groups.get("num_expert_group", 0),
                  groups.get("topk_group", 0), 1.0, None, out=out)


def test_without_out_nothing_is_recorded(launches):
    """A fresh output per call never gets a recorded address back (the plans keep it alive):
    such calls launch every time and pin nothing."""
    x, w13, w2, logits = _inputs()
    layer = M._layer(2, 64, 64, 16, 8, None)
    for _ in range(3):
        launches.clear()
        _call(x, w13, w2, logits, out=None)
        assert launches and all(kind == "launch" for kind, _ in launches)
    assert not M._workspace(layer, None, False)["programs"]


def test_another_out_records_anew(launches):
    x, w13, w2, logits = _inputs()
    _call(x, w13, w2, logits)
    launches.clear()
    _call(x, w13, w2, logits, out=torch.empty(2, 64, dtype=torch.bfloat16))
    assert launches and all(kind == "launch" for kind, _ in launches)


def _inputs(T=2, E=16, H=64, I=64):
    x = torch.randn(T, H).bfloat16()
    w13 = torch.randn(E, 2 * I, H).bfloat16()
    w2 = torch.randn(E, H, I).bfloat16()
    return x, w13, w2, torch.randn(T, E)


def test_a_repeated_call_replays_its_plans(launches):
    x, w13, w2, logits = _inputs()
    _call(x, w13, w2, logits)
    first = [name for kind, name in launches]
    assert first[0].startswith("moe_topk_softmax") and first[-1].startswith("moe_combine")
    assert all(kind == "launch" for kind, _ in launches)
    for _ in range(2):   # the same kernels in the same order, on the workspace's stream only
        launches.clear()
        _call(x, w13, w2, logits)
        assert [entry[0] for entry in launches] == ["replay"] * len(first)
        assert [name for _, name, _ in launches] == first
        assert {stream for _, _, stream in launches} == {77}


def test_other_addresses_record_anew(launches):
    x, w13, w2, logits = _inputs()
    _call(x, w13, w2, logits)
    for other in (dict(x=x.clone()), dict(w13=w13.clone()), dict(logits=logits.clone())):
        args = {**dict(x=x, w13=w13, w2=w2, logits=logits), **other}
        launches.clear()
        _call(**args)
        assert launches and all(entry[0] == "launch" for entry in launches), other
        launches.clear()
        _call(**args)        # then that call replays
        assert launches and all(entry[0] == "replay" for entry in launches), other


def test_precomputed_int32_routing_replays(launches):
    x, w13, w2, logits = _inputs()
    ids = torch.softmax(logits, 1).topk(8, dim=1).indices.int()
    weights = torch.rand(2, 8)
    _call(x, w13, w2, logits, ids=ids, weights=weights)
    assert not any(name.startswith("moe_topk") for _, name in launches)
    launches.clear()
    _call(x, w13, w2, logits, ids=ids, weights=weights)
    assert launches and all(entry[0] == "replay" for entry in launches)


def test_converted_routing_is_never_replayed(launches):
    """int64 ids are converted to int32 each call (a new tensor): such calls launch anew."""
    x, w13, w2, logits = _inputs()
    ids = torch.softmax(logits, 1).topk(8, dim=1).indices    # int64
    weights = torch.rand(2, 8)
    for _ in range(3):
        launches.clear()
        _call(x, w13, w2, logits, ids=ids, weights=weights)
        assert launches and all(kind == "launch" for kind, _ in launches)


def test_sigmoid_routing_without_bias_is_replayable(launches):
    """No correction bias: the router reads the workspace's zero bias (one address), so the
    call can replay."""
    x, w13, w2, logits = _inputs()
    layer = M._layer(2, 64, 64, 16, 8, None)
    _call(x, w13, w2, logits, scoring="sigmoid")
    ws = M._workspace(layer, None, False)
    assert (ws["zero_bias"] == 0).all() and len(ws["programs"]) == 1


def test_cached_workspaces_keep_to_their_budget(monkeypatch):
    """Workspaces of small layers are kept per (layer, device, stream), one at most
    _WORKSPACE_BYTES, all of them at most _WORKSPACE_TOTAL: the oldest go first (with their
    replayed calls)."""
    from types import SimpleNamespace

    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: SimpleNamespace(cuda_stream=5))
    monkeypatch.setattr(M, "_WORKSPACES", OrderedDict())
    layers = [M._layer(T, 256, 128, 16, 4, None) for T in (1, 2, 3, 4)]
    sizes = [M._workspace(layer, "cpu", False)["nbytes"] for layer in layers]
    M._WORKSPACES.clear()
    monkeypatch.setattr(M, "_WORKSPACE_TOTAL", sum(sizes) - 1)   # not room for all four
    first = M._workspace(layers[0], "cpu", False)
    assert M._workspace(layers[0], "cpu", False) is first        # cached: the same buffers
    for layer in layers[1:]:
        M._workspace(layer, "cpu", False)
    total = sum(ws["nbytes"] for ws in M._WORKSPACES.values())
    assert total <= M._WORKSPACE_TOTAL and len(M._WORKSPACES) < len(layers)
    assert (layers[-1], "cpu", 5) in M._WORKSPACES              # the newest stays
    assert (layers[0], "cpu", 5) not in M._WORKSPACES           # the oldest went
    monkeypatch.setattr(M, "_WORKSPACE_BYTES", max(sizes))      # too big to keep: fresh
    big = M._layer(5, 256, 128, 16, 4, None)
    assert M._workspace(big, "cpu", False) is not M._workspace(big, "cpu", False)


@pytest.mark.parametrize("bad,why", [
    (torch.empty(2, 64, dtype=torch.float32), "float32"),
    (torch.empty(3, 64, dtype=torch.bfloat16), "(3, 64)"),
    (torch.empty(64, 2, dtype=torch.bfloat16).T, "not contiguous"),
])
def test_a_bad_out_buffer_is_refused(bad, why):
    from argus.errors import LaunchError

    with pytest.raises(LaunchError, match="out is") as info:
        M._check_out(torch.empty(2, 64, dtype=torch.bfloat16), bad)
    assert why in str(info.value) and "empty_like" in str(info.value)
