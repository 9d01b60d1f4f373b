"""int8 faith5: the int8 arm's second tiling of the same arithmetic, 64 x
128 tiles (one warpgroup, twice faith2's columns: each A fragment feeds 16
MMAs instead of 8; three stages in 73 KiB); its outputs are bitwise those
of faith2."""

from __future__ import annotations

from .int8_faith2 import build_with

WGS, BN = 1, 128


def build(shape):
    return build_with(shape, WGS, BN)
