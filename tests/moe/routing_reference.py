"""Torch / pure-Python references of MoE routing's outputs (argus/kernels/moe_routing.py), for
the interpreter tests (tests/moe/test_moe_routing_split.py) and the GPU tier
(tests/gpu/test_moe_routing_gpu.py): the routers' ids and weights with the kernels' tie rule
(the lower expert index wins, a NaN ranks above every number), and the contiguous layout of
given ids (expert_start, tile_expert, tiles, pos, totals, tile_rows). Tensors in and out on
the caller's device; the layout reference works on the host."""

import torch


def _ranked(key, k: int):
    """Indices of the k best entries of each row of `key` (NaN first, then descending, then
    the lower index), as the kernels' rounds of max and lowest-index min pick them."""
    key = torch.where(key.isnan(), torch.full_like(key, float("inf")), key)
    return key.sort(dim=-1, descending=True, stable=True).indices[..., :k]


def _weights(w, renormalize: bool, scale: float = 1.0):
    """The picked weights [T, k] divided by their sum (added in pick order, in f32, as
    _store_topk) when asked, times scale."""
    if renormalize:
        total = w[:, 0]
        for j in range(1, w.shape[1]):
            total = total + w[:, j]
        w = w / total[:, None]
    return w * scale if scale != 1.0 else w


def topk_softmax(logits, k: int, renormalize: bool):
    """(ids int32 [T, k], weights f32 [T, k]) of the softmax router."""
    p = torch.softmax(logits.float(), dim=1)
    ids = _ranked(p, k)
    return ids.int(), _weights(p.gather(1, ids), renormalize)


def _sigmoid(x):
    """The kernels' sigmoid, op for op: 1 / (1 + exp(-x)) in f32, with the exp of where they
    run (numpy's on the host, as the interpreter; CUDA's expf on the card, as the compiled
    kernel). Group sums tie to the ulp (sigmoid(x) + sigmoid(-x) = 1), so another exp, a ulp
    apart, would break those ties differently."""
    if x.device.type == "cpu":
        import numpy as np

        return torch.from_numpy(1.0 / (1.0 + np.exp(-x.numpy())))
    return 1.0 / (1.0 + torch.exp(-x))


def topk_sigmoid_grouped(logits, bias, k: int, groups: int, topk_groups: int,
                         renormalize: bool, scale: float):
    """(ids, weights) of DeepSeek-V3's router: choice = sigmoid(logits) + bias; the
    topk_groups groups whose two best choices sum highest (the lower group on ties, a NaN
    group first); the k best choices inside them; weights the unbiased scores."""
    T, E = logits.shape
    score = _sigmoid(logits.float())
    choice = score + bias.float().view(1, E)
    per_group = choice.view(T, groups, E // groups)
    best2 = per_group.gather(2, _ranked(per_group, 2))
    group_score = best2[..., 0] + best2[..., 1]                     # NaN if a group holds one
    chosen = _ranked(group_score, topk_groups)                       # [T, topk_groups]
    keep = torch.zeros(T, groups, dtype=torch.bool, device=logits.device)
    keep.scatter_(1, chosen, True)
    masked = torch.where(keep[:, :, None], per_group, float("-inf")).view(T, E)
    ids = _ranked(masked, k)
    return ids.int(), _weights(score.gather(1, ids), renormalize, scale)


def routed_rows(counts, bm: int) -> list:
    """Each m-tile's routed rows, from the per-expert counts alone (zero-row experts have no
    m-tile)."""
    return [min(bm, c - j * bm) for c in counts for j in range(-(-c // bm))]


def layout(flat, num_experts: int, bm: int, m_tiles: int) -> dict:
    """The contiguous layout of flat ids [N] (host int32 tensors): totals [1, E] (entries an
    expert), expert_start [1, E] (segments padded to bm rows, in expert order), tiles [1, 1],
    tile_expert [MT, 1] (-1 past the last segment), pos [N, 1] (entries of an expert in
    token order from its segment's start), tile_rows [MT, 1] (0 past the last)."""
    flat = flat.cpu().long().view(-1)
    E = num_experts
    n = torch.bincount(flat, minlength=E)
    padded = (n + bm - 1) // bm * bm
    first = torch.cumsum(padded, 0) - padded
    pos = torch.empty(flat.numel(), dtype=torch.long)
    for e in range(E):
        mine = (flat == e).nonzero().view(-1)
        pos[mine] = first[e] + torch.arange(mine.numel())
    owner = [e for e in range(E) for _ in range(padded[e].item() // bm)]
    rows = routed_rows(n.tolist(), bm)
    assert len(owner) <= m_tiles
    i32 = dict(dtype=torch.int32)
    return dict(totals=n.int().view(1, E), start=first.int().view(1, E),
                tiles=torch.tensor([[len(owner)]], **i32),
                te=torch.tensor(owner + [-1] * (m_tiles - len(owner)), **i32).view(-1, 1),
                pos=pos.int().view(-1, 1),
                rows=torch.tensor(rows + [0] * (m_tiles - len(rows)), **i32).view(-1, 1))
