"""int8 faith5: the int8 arm's second tiling of the same arithmetic. Blocks
of four warps (2 x 2: 32 rows x 32 columns) and K stages of 64 (two k32
MMAs per stage); its outputs are bitwise those of faith2."""

from __future__ import annotations

from .int8_faith2 import build_with

WARPS_M, WARPS_N, K_STEPS = 2, 2, 2


def build(shape):
    return build_with(shape, WARPS_M, WARPS_N, K_STEPS)
