"""int8 faith5: the int8 arm's second tiling of the same arithmetic, 64 x
128 tiles (twice faith2's columns, so each staged A tile feeds twice the
columns; two warpgroups, one a column half, each warp's A fragment feeding
8 MMAs; three stages in 73 KiB); its outputs are bitwise those of
faith2."""

from __future__ import annotations

from .int8_faith2 import build_with

WGS, BN, WN = 2, 128, 2  # two warpgroups, both along the 128 columns


def build(shape):
    return build_with(shape, WGS, BN, wn=WN)
