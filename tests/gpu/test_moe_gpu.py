"""GPU tier: argus.ops.moe against a float64 torch reference on fresh random data — softmax
routing (renormalized or not), DeepSeek-V3's grouped sigmoid routing, precomputed routing with
zero-token experts, both tile schedules, the swap-AB decode path (T <= 64: token tiles, K
splits, crowded and empty experts, the split finish at Mixtral's width), repeated decode calls
replaying their launch plans on new contents, a CUDA-graph capture and replay (decode-sized),
torch.compile through the custom op — and the clear errors for inputs that cannot be right."""

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.gpu.numerics import rel as _rel  # noqa: E402

pytestmark = hopper_only()


def _layer(T, E, H, I, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(T, H, generator=g, device="cuda").bfloat16()
    w13 = (torch.randn(E, 2 * I, H, generator=g, device="cuda") / H ** 0.5).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g, device="cuda") / I ** 0.5).bfloat16()
    logits = torch.randn(T, E, generator=g, device="cuda")
    return x, w13, w2, logits


def _softmax_topk(logits, k, renormalize):
    p = torch.softmax(logits.double(), dim=1)
    w, ids = p.topk(k, dim=1)
    return ids, (w / w.sum(dim=1, keepdim=True) if renormalize else w)


@pytest.mark.parametrize("T,E,k,H,I", [
    (1, 8, 2, 4096, 14336 // 8),   # one token: decode-sized, Mixtral-like H
    (16, 8, 2, 1024, 512),
    (300, 8, 2, 1024, 768),
    (1000, 64, 8, 2048, 768),      # Qwen3-like: many experts, k 8
    (4096, 8, 2, 1024, 1024),      # 128 x 256 tiles
])
@pytest.mark.parametrize("renormalize", [True, False])
def test_moe_softmax_matches_float64(T, E, k, H, I, renormalize):
    from argus.ops import moe
    from argus.ops.moe import reference

    x, w13, w2, logits = _layer(T, E, H, I, seed=T + E)
    out = moe(x, w13, w2, logits, k, renormalize=renormalize)
    ids, w = _softmax_topk(logits, k, renormalize)
    assert out.shape == (T, H) and out.dtype == torch.bfloat16
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


@pytest.mark.parametrize("schedule", ["PREFILL", "SMALL", "PREFILL_TMA", "TINY",
                                      "PREFILL_CLUSTER", "PREFILL_TMA_CLUSTER"])
def test_moe_precomputed_routing_with_empty_experts(schedule):
    from argus.kernels import moe as MK
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, H, I = 777, 16, 4, 1024, 512
    x, w13, w2, _ = _layer(T, E, H, I, seed=7)
    g = torch.Generator(device="cuda").manual_seed(8)
    scores = torch.rand(T, E - 3, generator=g, device="cuda")   # experts 13..15 get nothing
    scores[:, 0] += 0.5                                           # expert 0 gets many
    ids = scores.topk(k, dim=1).indices
    w = torch.rand(T, k, generator=g, device="cuda")
    out = moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w,
              schedule=getattr(MK, schedule))
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


@pytest.mark.parametrize("T,E,k,H,I", [
    (1, 8, 2, 4096, 1792),     # one token, Mixtral-like H: 2 experts touched
    (5, 8, 2, 1024, 512),
    (16, 64, 8, 2048, 768),
    (64, 8, 2, 1024, 1024),    # token tiles of 32
    (1, 128, 8, 2048, 768),    # Qwen3-30B-A3B's sizes, one token (and cut in 4 along K)
])
def test_moe_decode_matches_float64(T, E, k, H, I):
    """T <= 64 takes the swap-AB decode GEMMs (argus.ops.moe.decode_schedules)."""

    from argus.ops import moe
    from argus.ops import moe_module as M
    from argus.ops.moe import reference
    gate_up, down = M.decode_schedules(T, k, E, H, I)
    assert gate_up.swap_ab and down.swap_ab
    x, w13, w2, logits = _layer(T, E, H, I, seed=T + E + 100)
    out = moe(x, w13, w2, logits, k)
    ids, w = _softmax_topk(logits, k, True)
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2
    if (T, E) == (1, 128):   # the rule does not split here; the split path at these sizes
        from argus.kernels.moe import decode_schedule

        out = moe(x, w13, w2, logits, k, schedule=decode_schedule(8, split_k=4))
        assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


@pytest.mark.parametrize("bn,splits", [(8, 1), (8, 2), (16, 4), (32, 2), (64, 1)])
def test_moe_decode_schedules_with_empty_and_crowded_experts(bn, splits):
    """Every decode schedule (token tile, K split) on routing with three zero-token experts
    and one expert holding more rows than a token tile (several tiles on the same weights)."""
    from argus.kernels.moe import decode_schedule
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, H, I = 40, 16, 4, 1024, 512
    x, w13, w2, _ = _layer(T, E, H, I, seed=bn + splits)
    g = torch.Generator(device="cuda").manual_seed(9)
    scores = torch.rand(T, E - 3, generator=g, device="cuda")   # experts 13..15 get nothing
    scores[:, 0] += 1.0                                           # expert 0: every token
    ids = scores.topk(k, dim=1).indices
    w = torch.rand(T, k, generator=g, device="cuda")
    out = moe(x, w13, w2, None, k, topk_ids=ids, topk_weights=w,
              schedule=decode_schedule(bn, split_k=splits))
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


def test_moe_split_finish_at_mixtral_width():
    """One token on Mixtral's sizes with both GEMMs cut in 2 along K: the split finish spreads
    two token tiles x 112 column blocks of I = 14336 over the SMs (argus/kernels/moe.py)."""
    from argus.kernels.moe import decode_schedule
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, H, I = 1, 8, 2, 4096, 14336
    x, w13, w2, logits = _layer(T, E, H, I, seed=61)
    out = moe(x, w13, w2, logits, k, schedule=decode_schedule(8, split_k=2))
    ids, w = _softmax_topk(logits, k, True)
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


def _sigmoid_topk(logits, bias, k, G, TG, scale):
    """DeepSeek-V3's grouped sigmoid top-k in float64: (ids, weights)."""
    T, E = logits.shape
    s = torch.sigmoid(logits.double())
    choice = s + bias.double()
    group = choice.view(T, G, E // G).topk(2, dim=2).values.sum(dim=2)
    keep = torch.zeros(T, G, device="cuda", dtype=torch.float64).scatter_(
        1, group.topk(TG, dim=1).indices, 1.0)
    mask = keep.repeat_interleave(E // G, dim=1).bool()
    ids = choice.masked_fill(~mask, float("-inf")).topk(k, dim=1).indices
    w = s.gather(1, ids)
    return ids, w / w.sum(dim=1, keepdim=True) * scale


@pytest.mark.parametrize("T,E,k,H,I,scoring", [
    (1, 8, 2, 4096, 1792, "softmax"),     # Mixtral-like H, one token
    (4, 128, 8, 2048, 768, "softmax"),    # Qwen3-30B-A3B's sizes: the gate-up cut in K
    (16, 64, 8, 1024, 256, "sigmoid"),    # grouped sigmoid without a correction bias
])
def test_moe_decode_replays_with_new_contents(T, E, k, H, I, scoring):
    """Repeated decode calls on the same buffers replay the first call's launch plans
    (argus.ops.moe._run); new tokens and logits written into those buffers, hence new
    routing, give the right answer on every call (a replay that launched nothing would leave
    the previous output, the wrong one), and only the first call recorded plans: the other
    three replayed them."""

    from argus.ops import moe
    from argus.ops import moe_module as M
    from argus.ops.moe import reference
    M._WORKSPACES.clear()          # no plans recorded by earlier tests at reused addresses
    x, w13, w2, logits = _layer(T, E, H, I, seed=70 + T)
    kw = dict(scoring="sigmoid", num_expert_group=8, topk_group=4, routed_scaling_factor=2.5) \
        if scoring == "sigmoid" else {}
    g = torch.Generator(device="cuda").manual_seed(71)
    out = torch.empty(T, H, dtype=torch.bfloat16, device="cuda")   # the caller's buffer
    for _ in range(4):
        x.copy_(torch.randn(T, H, generator=g, device="cuda").bfloat16())
        logits.copy_(torch.randn(T, E, generator=g, device="cuda"))
        out.fill_(float("nan"))   # a replay that launched nothing would leave NaN
        assert moe(x, w13, w2, logits, k, out=out, **kw) is out
        if scoring == "sigmoid":
            ids, w = _sigmoid_topk(logits, torch.zeros(E, device="cuda"), k, 8, 4, 2.5)
        else:
            ids, w = _softmax_topk(logits, k, True)
        assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2
    # one recorded call for these buffers: the first; the other three replayed it
    mine = (x.data_ptr(), x.dtype), (w13.data_ptr(), w13.dtype)
    recorded = [key for ws in M._WORKSPACES.values() for key in ws.get("programs", {})
                if key[0][:2] == mine]
    assert len(recorded) == 1, f"{len(recorded)} recorded calls for 4 identical calls"


def test_moe_grouped_sigmoid_routing():
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, G, TG, H, I, scale = 200, 64, 8, 8, 4, 1024, 256, 2.5
    x, w13, w2, logits = _layer(T, E, H, I, seed=11)
    bias = torch.randn(E, device="cuda") * 0.1
    out = moe(x, w13, w2, logits, k, scoring="sigmoid", e_score_correction_bias=bias,
              num_expert_group=G, topk_group=TG, routed_scaling_factor=scale)
    ids, w = _sigmoid_topk(logits, bias, k, G, TG, scale)
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


def test_moe_cuda_graph_replay_sees_new_routing():
    """Captured once, replayed with other logits and inputs: nothing in the layer depends on
    host-side routing results."""
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, H, I = 64, 8, 2, 1024, 512
    x, w13, w2, logits = _layer(T, E, H, I, seed=21)
    moe(x, w13, w2, logits, k)   # compile outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = moe(x, w13, w2, logits, k)
    for seed in (22, 23):
        x2, _, _, logits2 = _layer(T, E, H, I, seed=seed)
        x.copy_(x2)
        logits.copy_(logits2)
        graph.replay()
        torch.cuda.synchronize()
        ids, w = _softmax_topk(logits, k, True)
        assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


def test_moe_under_torch_compile():
    from argus.ops import moe
    from argus.ops.moe import reference

    T, E, k, H, I = 48, 8, 2, 512, 256
    x, w13, w2, logits = _layer(T, E, H, I, seed=31)
    out = torch.compile(lambda a, l: moe(a, w13, w2, l, k), fullgraph=True)(x, logits)
    ids, w = _softmax_topk(logits, k, True)
    assert _rel(out, reference(x, w13, w2, ids, w)) < 1e-2


@pytest.mark.parametrize("case,words", [
    ("top_k_gt_E", "top_k=9"),
    ("w2_shape", "shapes do not match"),
    ("fp16", "bfloat16"),
    ("cpu", "CUDA device"),
    ("noncontig", "not contiguous"),
    ("ids_only", "together"),
    ("logits_shape", "router_logits must be"),
    ("scoring", "scoring="),
])
def test_moe_bad_input_errors(case, words):
    from argus.errors import LaunchError
    from argus.ops import moe

    T, E, k, H, I = 8, 8, 2, 256, 128
    x, w13, w2, logits = _layer(T, E, H, I, seed=41)
    args = dict(x=x, w13=w13, w2=w2, router_logits=logits, top_k=k)
    kw = {}
    if case == "top_k_gt_E":
        args["top_k"] = 9
    elif case == "w2_shape":
        args["w2"] = w2[:, :, :64].contiguous()
    elif case == "fp16":
        args["x"] = x.half()
    elif case == "cpu":
        args["x"] = x.cpu()
    elif case == "noncontig":
        args["w13"] = w13.transpose(1, 2).contiguous().transpose(1, 2)
    elif case == "ids_only":
        kw["topk_ids"] = torch.zeros(T, k, dtype=torch.int32, device="cuda")
    elif case == "logits_shape":
        args["router_logits"] = logits[:, :4]
    elif case == "scoring":
        kw["scoring"] = "relu"
    with pytest.raises(LaunchError, match=words):
        moe(**args, **kw)
