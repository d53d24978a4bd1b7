"""On a Hopper GPU: integer tiles past 2^24 (index tiles, masks at 2^24 + 1, integer fills and
cross-warp sums, i64 element offsets, float -> integer conversions at the range's ends, a
decode causal mask by remainders past 2^24 keys) give exactly what the interpreter gives
(tests/unit/test_integer_tiles.py holds the kernels)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from tests.gpu import hopper_only  # noqa: E402
from tests.unit import test_integer_tiles as K  # noqa: E402

pytestmark = hopper_only()


def test_index_tile_and_mask_past_2_24():
    X = torch.randn(4, 256)
    base, limit = (1 << 24) - 300, K.BIG
    Idx, Y = torch.zeros(4, 256, dtype=torch.int32), torch.zeros(4, 256)
    K.index_past_2_24.interpret(X, Idx, Y, base, limit)
    gIdx, gY = torch.zeros_like(Idx).cuda(), torch.zeros_like(Y).cuda()
    K.index_past_2_24(X.cuda(), gIdx, gY, base, limit)
    torch.cuda.synchronize()
    assert torch.equal(gIdx.cpu(), Idx)
    assert torch.equal(gY.cpu(), Y)


def test_integer_fill_and_warp_sums():
    S, F = torch.zeros(4, 1, dtype=torch.int32), torch.zeros(4, 256, dtype=torch.int32)
    K.full_and_sum.interpret(S, F)
    gS, gF = torch.zeros_like(S).cuda(), torch.zeros_like(F).cuda()
    K.full_and_sum(gS, gF)
    torch.cuda.synchronize()
    assert torch.equal(gF.cpu(), F) and torch.equal(gS.cpu(), S)


def test_i64_element_offsets():
    Off = torch.zeros(4, 256, dtype=torch.int64)
    K.element_offsets.interpret(Off, 5, 1 << 30)
    gOff = torch.zeros_like(Off).cuda()
    K.element_offsets(gOff, 5, 1 << 30)
    torch.cuda.synchronize()
    assert torch.equal(gOff.cpu(), Off)
    assert int(Off.max()) > 2 ** 32 and np.array_equal(Off.numpy()[0, :2], [5 * (1 << 30),
                                                                         5 * (1 << 30) + 1])


def test_float_to_integer_conversion():
    X = torch.from_numpy(K.CONVERT_X)
    Y, Z = torch.zeros(1, 8, dtype=torch.int32), torch.zeros(1, 8, dtype=torch.int64)
    K.float_to_int.interpret(X, Y, Z)
    gY, gZ = torch.zeros_like(Y).cuda(), torch.zeros_like(Z).cuda()
    K.float_to_int(X.cuda(), gY, gZ)
    torch.cuda.synchronize()
    assert torch.equal(gY.cpu(), Y) and torch.equal(gZ.cpu(), Z)


def test_decode_causal_mask_past_2_24_keys():
    SK, q_len = (1 << 24) + 3, 4
    args = (9, q_len, SK - 200, SK)
    Keep = torch.zeros(8, 256, dtype=torch.int32)
    K.decode_causal_mask.interpret(Keep, *args)
    gKeep = torch.zeros_like(Keep).cuda()
    K.decode_causal_mask(gKeep, *args)
    torch.cuda.synchronize()
    assert torch.equal(gKeep.cpu(), Keep) and 0 < int(Keep.sum()) < Keep.numel()
