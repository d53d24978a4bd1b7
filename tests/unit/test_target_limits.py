"""sm_90a limits: the numbers other stages compare against, and the rules that are checks."""

from __future__ import annotations

import pytest

from argus.target import limits, sm90


def test_headline_numbers():
    assert limits.NUM_SMS == 132
    assert limits.SMEM_PER_CTA_OPTIN == 232448 == 227 * 1024
    assert limits.SMEM_PER_SM == 228 * 1024
    assert limits.REGISTERS_PER_SM == 64 * 1024 and limits.MAX_REGISTERS_PER_THREAD == 255
    assert limits.WARPGROUP_SIZE == 4 * limits.WARP_SIZE == 128
    assert limits.MAX_THREADS_PER_CTA == 1024 and limits.CLUSTER_MAX_PORTABLE == 8
    assert limits.TMA_BOX_DIM_MAX == 256 and limits.TMA_MAX_RANK == 5
    assert sm90.limits is limits


def test_setmaxnreg_rule():
    for n in (24, 32, 40, 232, 240, 256):
        limits.check_setmaxnreg(n)
    for n in (16, 25, 236, 264):
        with pytest.raises(ValueError, match="multiple of 8"):
            limits.check_setmaxnreg(n)


def test_register_split():
    limits.check_register_split([24, 240, 240])          # 64512 <= 65536 (HOPPER.md 2.1)
    limits.check_register_split([40, 232, 232])
    with pytest.raises(ValueError, match="needs 67584"):
        limits.check_register_split([40, 256, 232])


def test_wgmma_n():
    assert [n for n in range(300) if limits.wgmma_n_is_valid(n)] == list(range(8, 257, 8))
    assert limits.WGMMA_K_BY_ELEM_BYTES[2] * 2 == limits.WGMMA_K_BYTES
