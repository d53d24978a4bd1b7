"""The attention family's KernelBench solution on the GPU (argus.ops.attention with the
family's schedule): fp32 SDPA tasks through the 16-bit kernel, against torch float64, for the
fp16 hi/lo Q K^T split at a padded head dim and the plain bf16 and fp16 operands at head dim
128, full and causal."""

import math

import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402

pytestmark = hopper_only()

SDPA = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, Q, K, V):
        return torch.nn.functional.scaled_dot_product_attention(Q, K, V{kw})


def get_inputs():
    return [torch.rand(2, 4, {S}, {D}) for _ in range(3)]


def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("S,D,causal,terms,operand,bound", [
    (200, 48, False, 3, "f16", 2e-3),
    (200, 48, True, 3, "bf16", 5e-3),
    (512, 128, False, 1, "f16", 5e-3),
    (384, 128, True, 1, "bf16", 3e-2),
])
def test_family_solution_matches_float64(tmp_path, S, D, causal, terms, operand, bound):
    from argus.agent.composer import compose
    from argus.agent.evaluate import import_source
    from argus.agent.families import get_family

    path = tmp_path / "sdpa.py"
    path.write_text(SDPA.format(S=S, D=D, kw=", is_causal=True" if causal else ""))
    t = compose(path)
    fam = get_family("attention")
    p = fam.normalize(t, {**fam.default_params(t), "qk_terms": terms, "operand": operand})
    assert fam.legal(t, p), fam.static_check(t, p)
    mod = import_source(fam.render_solution(t, fam.render_kernel(t, p), p), tmp_path, "sol")
    g = torch.Generator().manual_seed(S)
    q, k, v = (torch.randn(2, 4, S, D, generator=g).cuda() for _ in range(3))
    got = mod.ModelNew()(q, k, v)
    s = (q.double() @ k.double().transpose(-1, -2)) / math.sqrt(D)
    if causal:
        s = s.masked_fill(~torch.ones(S, S, dtype=torch.bool, device=s.device).tril(),
                          float("-inf"))
    want = torch.softmax(s, -1) @ v.double()
    err = ((got.double() - want).norm() / want.norm()).item()
    assert got.dtype == torch.float32 and err < bound, err
