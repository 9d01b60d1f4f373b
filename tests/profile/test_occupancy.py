"""Theoretical occupancy against figures worked out by hand from the
published limits (sm_90: 64 warps, 32 blocks, 65536 registers in four
sub-partitions, 228 KiB of shared memory per SM, 227 KiB per block, 1 KiB
reserved per block, allocated in 128-byte units)."""

from __future__ import annotations

import json

import pytest

from leverctl.profile.occupancy import ARCHS, LIMITS, get_arch, occupancy

KIB = 1024


def test_the_table_holds_the_published_limits():
    want = {  # max warps, max blocks, shared per SM, shared per block (KiB)
        "sm_80": (64, 32, 164, 163),
        "sm_89": (48, 24, 100, 99),
        "sm_90": (64, 32, 228, 227),
        "sm_90a": (64, 32, 228, 227),
        "sm_100a": (64, 32, 228, 227),
    }
    got = {n: (a.max_warps, a.max_blocks, a.shared // KIB, a.max_shared_per_block // KIB) for n, a in ARCHS.items()}
    assert got == want
    for a in ARCHS.values():
        assert (a.registers, a.max_registers_per_thread, a.register_unit) == (65536, 255, 256)
        assert (a.shared_unit, a.reserved_shared, a.warp_granularity, a.max_threads_per_block) == (128, 1024, 4, 1024)


def test_256_threads_of_32_registers_fill_the_sm_and_the_warps_limit_it():
    # 8 warps a block: 64 / 8 = 8 blocks by warps; 32 x 32 = 1024 registers a warp,
    # 16384 / 1024 = 16 warps per sub-partition, 64 per SM: 8 blocks by registers too.
    o = occupancy("sm_90", 256, 32, 0)
    assert (o.blocks, o.active_warps, o.max_warps, o.fraction) == (8, 64, 64, 1.0)
    assert o.limiter == "warps" and o.limiters == ("warps", "registers")
    assert o.limits == {"warps": 8, "blocks": 32, "registers": 8, "shared memory": 228}
    assert o.registers_per_block == 8 * 1024 and o.shared_per_block == 1024  # the reserved KiB alone


def test_255_registers_limit_128_threads_to_two_blocks():
    # 255 x 32 = 8160, rounded up to 8192 a warp: 16384 / 8192 = 2 warps per sub-partition,
    # 8 per SM, 2 blocks of 4 warps: 8 of 64 warps.
    o = occupancy("sm_90", 128, 255, 0)
    assert (o.blocks, o.active_warps, o.fraction, o.limiter) == (2, 8, 0.125, "registers")
    assert o.limits["registers"] == 2 and o.registers_per_block == 4 * 8192


def test_registers_are_rounded_up_per_warp():
    # 200 x 32 = 6400 -> 6656 a warp: 16384 // 6656 = 2 warps per sub-partition, 8 per SM, 2 blocks.
    # Unrounded, 16384 // 6400 = 2 as well; 168 registers tell them apart:
    # 168 x 32 = 5376 (a multiple of 256): 3 warps per sub-partition, 12 per SM, 3 blocks;
    # 169 x 32 = 5408 -> 5632: 2 per sub-partition, 8 per SM, 2 blocks (unrounded: 3).
    assert occupancy("sm_90", 128, 168, 0).blocks == 3
    assert occupancy("sm_90", 128, 169, 0).blocks == 2


def test_48_kib_of_static_shared_memory_allows_4_blocks():
    # 49152 + 1024 reserved = 50176 bytes a block; 233472 // 50176 = 4.
    o = occupancy("sm_90", 128, 32, 48 * KIB)
    assert (o.blocks, o.active_warps, o.fraction, o.limiter) == (4, 16, 0.25, "shared memory")
    assert o.shared_per_block == 50176


def test_the_reserved_kib_counts_against_every_block():
    # 45 KiB: 46080 + 1024 = 47104, 233472 // 47104 = 4 (without the reserved KiB it would be 5).
    o = occupancy("sm_90", 128, 32, 45 * KIB)
    assert (o.blocks, o.limiter, o.shared_per_block) == (4, "shared memory", 47104)
    # Static and dynamic add up: the same with half of it dynamic.
    assert occupancy("sm_90", 128, 32, 20 * KIB, 25 * KIB).blocks == 4


def test_shared_memory_is_allocated_in_128_byte_units():
    # 45569 + 1024 = 46593, rounded up to 46720: 233472 // 46720 = 4 (unrounded: 5).
    o = occupancy("sm_90", 128, 32, 45569)
    assert (o.blocks, o.shared_per_block) == (4, 46720)


def test_a_block_over_the_per_block_shared_limit_cannot_run_and_says_why():
    fits = occupancy("sm_90", 128, 32, 0, 227 * KIB)  # the opt-in maximum: one block
    assert (fits.blocks, fits.limiter, fits.reason) == (1, "shared memory", "")
    o = occupancy("sm_90", 128, 32, 1, 227 * KIB)
    assert (o.blocks, o.active_warps, o.fraction, o.limiter) == (0, 0, 0.0, "shared memory")
    assert "232449 bytes of shared memory" in o.reason and "232448" in o.reason
    # On sm_89 the same 100 KiB block is over its 99 KiB.
    assert occupancy("sm_89", 128, 32, 0, 100 * KIB).blocks == 0
    assert occupancy("sm_80", 128, 32, 0, 100 * KIB).blocks == 1


def test_blocks_that_cannot_run_name_their_limit():
    too_many_threads = occupancy("sm_90", 1056, 16, 0)
    assert (too_many_threads.blocks, too_many_threads.limiter) == (0, "warps")
    assert "1056 threads" in too_many_threads.reason
    too_many_regs = occupancy("sm_90", 128, 256, 0)
    assert (too_many_regs.blocks, too_many_regs.limiter) == (0, "registers")
    assert "256 registers per thread" in too_many_regs.reason
    # 1024 threads x 72 registers: 2304 a warp x 32 warps = 73728, over 65536.
    big_block = occupancy("sm_90", 1024, 72, 0)
    assert (big_block.blocks, big_block.limiter) == (0, "registers")
    assert "73728" in big_block.reason
    assert occupancy("sm_90", 1024, 64, 0).blocks == 1  # 2048 x 32 = 65536 exactly


def test_small_blocks_hit_the_block_cap():
    # 32 threads: 64 blocks by warps, 64 by registers, 228 by shared memory; 32 resident.
    o = occupancy("sm_90", 32, 32, 0)
    assert (o.blocks, o.active_warps, o.fraction, o.limiter) == (32, 32, 0.5, "blocks")
    assert occupancy("sm_89", 32, 32, 0).blocks == 24


def test_sm_89_has_48_warps():
    o = occupancy("sm_89", 1024, 32, 0)
    assert (o.blocks, o.active_warps, o.max_warps, o.limiter) == (1, 32, 48, "warps")
    assert o.fraction == pytest.approx(2 / 3)
    assert occupancy("sm_90", 1024, 32, 0).fraction == 1.0


def test_ties_are_named_in_the_documented_order():
    # 128 threads x 128 registers: 4096 a warp, 16 warps per SM, 4 blocks; 48 KiB: 4 blocks.
    o = occupancy("sm_90", 128, 128, 48 * KIB)
    assert o.limiters == ("registers", "shared memory") and o.limiter == "registers"
    assert LIMITS.index("registers") < LIMITS.index("shared memory")


def test_barriers_limit_blocks_from_sm_90_on():
    # 64 named barriers per SM on sm_90: 16 a block leave room for 4 blocks.
    o = occupancy("sm_90", 128, 32, 0, barriers=16)
    assert (o.blocks, o.limiter, o.limits["barriers"]) == (4, "barriers", 4)
    assert "barriers" not in occupancy("sm_90", 128, 32, 0).limits  # not counted unless given
    assert "barriers" not in occupancy("sm_89", 128, 32, 0, barriers=16).limits


def test_no_registers_means_no_register_limit():
    assert occupancy("sm_90", 128, 0, 0).limits["registers"] == 32


def test_unknown_architecture_and_bad_input_are_refused():
    with pytest.raises(ValueError) as e:
        occupancy("sm_75", 128, 32, 0)
    msg = str(e.value)
    assert "\n" not in msg and "'sm_75'" in msg and "sm_80, sm_89, sm_90, sm_90a, sm_100a" in msg
    with pytest.raises(ValueError):
        get_arch("sm_90A")
    with pytest.raises(ValueError):
        occupancy("sm_90", 0, 32, 0)
    with pytest.raises(ValueError):
        occupancy("sm_90", 128, -1, 0)
    with pytest.raises(ValueError):
        occupancy("sm_90", 128, 32, 0, -4)


def test_to_json_is_plain_data():
    o = occupancy("sm_90a", 384, 90, 16 * KIB)
    doc = json.loads(json.dumps(o.to_json()))
    assert doc["fraction"] == o.fraction and doc["limiter"] == o.limiter
    assert doc["limits"] == dict(o.limits) and doc["limiters"] == list(o.limiters)
    assert doc["blocks"] * doc["warps_per_block"] == doc["active_warps"]
