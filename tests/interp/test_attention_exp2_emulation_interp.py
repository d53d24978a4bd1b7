"""The attention forward with part of the softmax's exp2 on the FMA pipe
(AttentionSchedule.exp2_emulate; argus/target/exp2_emulation.py) in the numpy interpreter
against float64 attention: the FP8 forward at head_dim 128 and the bf16 one at head_dim 64 (the
two kernels where ncu finds the SFU as busy as the tensor core; FP8 through the op, which runs
the permuted V^T kernel), at their op's schedules with
2..16 of every 16 key groups emulated, ragged lengths (tiles and key blocks partly past the
ends: the masked -inf must give exactly 0 in the emulated columns too), full and causal (rows
without keys), GQA. The emulated result must differ from the SFU's (the knob reaches the
code) and stay as close to float64 as the SFU's."""

import dataclasses

import pytest
import torch

from argus.kernels.attention import default_schedule, fp8_schedule
from tests.interp import test_attention_fp8_interp as fp8
from tests.interp import test_attention_interp as bf16


@pytest.mark.parametrize("count", [4, 16])
@pytest.mark.parametrize("causal", [False, True])
def test_fp8_head_dim_128(count, causal):
    q, k, v, qs, ks, vs = fp8.inputs(1, 2, 1, 100, 150, 128, seed=count + causal)
    want, want_lse = fp8.reference(q, k, v, qs, ks, vs, causal)
    base = fp8_schedule(128, causal)
    got, lse = fp8.run(q, k, v, qs, ks, vs, causal,
                       schedule=dataclasses.replace(base, exp2_emulate=count))
    fp8.assert_close(got, lse, want, want_lse)
    sfu, _ = fp8.run(q, k, v, qs, ks, vs, causal, schedule=base)
    assert not torch.equal(got, sfu), "the emulated exp2 left the output unchanged"
    # the polynomial's 1e-4 is far below e4m3's rounding of P: the error is the SFU's
    err, err_sfu = ((x.double() - want).abs().max().item() for x in (got, sfu))
    assert err < 1.5 * err_sfu + 1e-3, (err, err_sfu)


@pytest.mark.parametrize("count", [2, 6])
@pytest.mark.parametrize("causal", [False, True])
def test_bf16_head_dim_64(count, causal):
    """The op's head_dim 64 schedule (ping-pong, 192 x 128, three warpgroups), 130 queries
    (a tile partly past the end) against 300 keys, GQA 2:1."""
    schedule = dataclasses.replace(default_schedule(64, causal, 4096), exp2_emulate=count)
    got, want, lse, want_lse = bf16.run(1, 4, 2, 130, 300, 64, causal, schedule,
                                        seed=count + causal)
    bf16.assert_close(got, want, lse, want_lse)
    sfu = bf16.run(1, 4, 2, 130, 300, 64, causal, default_schedule(64, causal, 4096),
                   seed=count + causal)[0]
    assert not torch.equal(got, sfu), "the emulated exp2 left the output unchanged"
    err, err_sfu = ((x.double() - want).abs().max().item() for x in (got, sfu))
    assert err < 1.5 * err_sfu + 1e-3, (err, err_sfu)


def test_the_schedule_names_its_problems():
    with pytest.raises(ValueError, match="exp2_emulate=17"):
        dataclasses.replace(fp8_schedule(128), exp2_emulate=17)
    with pytest.raises(ValueError, match="needs approx_exp2=True"):
        dataclasses.replace(fp8_schedule(128), approx_exp2=False, exp2_emulate=4)
