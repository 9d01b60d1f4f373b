"""Launch-size checks: fast, no kernels."""

from __future__ import annotations

import numpy as np
import pytest

from leverctl_kernels.common.launch import (
    HOPPER_SMEM_BYTES,
    STATIC_SMEM_BYTES,
    blocks_for,
    check_block,
    check_grid,
    check_shared,
    grid_1d,
)


def test_blocks_for_is_ceiling_division():
    assert blocks_for(1, 128) == 1
    assert blocks_for(128, 128) == 1
    assert blocks_for(129, 128) == 2
    assert blocks_for(np.int64(1000), np.int32(7)) == 143


@pytest.mark.parametrize("n, per", [(0, 32), (-1, 32), (10, 0), (10, -32)])
def test_blocks_for_refuses_non_positive(n, per):
    with pytest.raises(ValueError, match="positive"):
        blocks_for(n, per)


@pytest.mark.parametrize("bad", [1.5, "32", None, True])
def test_sizes_must_be_integers(bad):
    with pytest.raises(ValueError, match="integer"):
        blocks_for(bad, 32)
    with pytest.raises(ValueError, match="integer"):
        check_block(bad)


def test_check_block_accepts_valid_shapes():
    assert check_block(32) == 32
    assert check_block(1024) == 1024
    assert check_block((32, 4)) == 128
    assert check_block([8, 4, 2]) == 64
    assert check_block(48, warps=False) == 48
    assert check_block(np.int32(256)) == 256


@pytest.mark.parametrize(
    "block, match",
    [
        (0, "positive"),
        (-32, "positive"),
        (1056, "exceeds the limit 1024"),
        ((32, 64), "2048 threads; the limit is 1024"),
        ((1, 1, 65), "block\\[z\\] = 65 exceeds"),
        ((1, 1, 1, 1), "1 to 3 dimensions"),
        ((), "1 to 3 dimensions"),
        (48, "not a multiple of the warp size 32"),
        ((3, 5), "15 threads, not a multiple"),
    ],
)
def test_check_block_refuses(block, match):
    with pytest.raises(ValueError, match=match):
        check_block(block)


def test_warps_false_still_limits_size():
    with pytest.raises(ValueError, match="limit 1024"):
        check_block(1025, warps=False)
    with pytest.raises(ValueError, match="1536 threads; the limit is 1024"):
        check_block((48, 32), warps=False)


def test_check_grid():
    assert check_grid(5) == (5,)
    assert check_grid((2**31 - 1, 65535, 65535)) == (2**31 - 1, 65535, 65535)
    for bad, match in [(0, "positive"), (2**31, "exceeds"), ((1, 65536), "grid\\[y\\]")]:
        with pytest.raises(ValueError, match=match):
            check_grid(bad)


def test_check_shared():
    assert check_shared(0) == 0
    assert check_shared(STATIC_SMEM_BYTES) == 48 * 1024
    with pytest.raises(ValueError, match="49153 bytes.*48 KiB"):
        check_shared(48 * 1024 + 1)
    assert check_shared(100 * 1024, hopper=True) == 100 * 1024
    assert check_shared(HOPPER_SMEM_BYTES, hopper=True) == 227 * 1024
    with pytest.raises(ValueError, match="Hopper"):
        check_shared(HOPPER_SMEM_BYTES + 1, hopper=True)
    with pytest.raises(ValueError, match=">= 0"):
        check_shared(-1)


def test_grid_1d():
    assert grid_1d(1, 32) == (1, 32)
    assert grid_1d(1000, 256) == (4, 256)
    assert grid_1d(10**6, 128, max_blocks=132) == (132, 128)
    assert grid_1d(37, 48, warps=False) == (1, 48)
    with pytest.raises(ValueError, match="multiple of the warp"):
        grid_1d(100, 48)
    with pytest.raises(ValueError, match="positive"):
        grid_1d(0, 32)
    with pytest.raises(ValueError, match="max_blocks"):
        grid_1d(100, 32, max_blocks=0)
    with pytest.raises(ValueError, match="grid\\[x\\]"):
        grid_1d(2**31 * 32, 32)
