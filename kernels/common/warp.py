"""Warp-level reductions shared by several families' kernels."""

from __future__ import annotations

from numba import cuda

FULL_MASK = 0xFFFFFFFF


@cuda.jit(device=True)
def warp_sum(v):
    """Shuffle-down tree sum over the 32 lanes; lane 0 ends with the total."""
    v += cuda.shfl_down_sync(FULL_MASK, v, 16)
    v += cuda.shfl_down_sync(FULL_MASK, v, 8)
    v += cuda.shfl_down_sync(FULL_MASK, v, 4)
    v += cuda.shfl_down_sync(FULL_MASK, v, 2)
    v += cuda.shfl_down_sync(FULL_MASK, v, 1)
    return v
