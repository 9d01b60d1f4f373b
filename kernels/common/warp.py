"""Warp-level reductions shared by several families' kernels."""

from __future__ import annotations

from numba import cuda

from .launch import device_inline

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


@device_inline
def warp_max(x):
    """The max of ``x`` over the warp's 32 lanes, a butterfly (every lane gets it)."""
    for off in (16, 8, 4, 2, 1):
        x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, off))
    return x


@device_inline
def half_warp_max(x):
    """The max of ``x`` over the 16 lanes of the lane's half-warp (every lane gets it)."""
    x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, 8))
    x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, 4))
    x = max(x, cuda.shfl_xor_sync(FULL_MASK, x, 2))
    return max(x, cuda.shfl_xor_sync(FULL_MASK, x, 1))


@device_inline
def half_warp_sum(x):
    """The sum of ``x`` over the 16 lanes of the lane's half-warp, a butterfly
    tree (every lane gets it)."""
    x += cuda.shfl_xor_sync(FULL_MASK, x, 8)
    x += cuda.shfl_xor_sync(FULL_MASK, x, 4)
    x += cuda.shfl_xor_sync(FULL_MASK, x, 2)
    return x + cuda.shfl_xor_sync(FULL_MASK, x, 1)
