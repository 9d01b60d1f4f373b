"""Launch sizes that refuse impossible configurations up front.

A bad launch on a GPU fails late and vaguely (``CUDA_ERROR_INVALID_VALUE``)
and the simulator accepts some launches a GPU rejects (it never checks the
1024-thread limit or shared memory). Variants take their sizes from here so
both fail the same way, at build time, with a ValueError that names the
offending number and the limit.

Limits (compute capability 7.0 through 9.0):

* threads per block: at most 1024 in total, per dimension (1024, 1024, 64);
  kernels that use warp intrinsics need a multiple of 32 (``warps=True``);
* grid: per dimension (2**31 - 1, 65535, 65535) blocks;
* shared memory per block: 48 KiB static; on Hopper (sm_90) up to 227 KiB
  with the dynamic opt-in (the SM has 228 KiB, 1 KiB is reserved per block).

Nothing here imports numba; sizes are plain ints (numpy integers accepted).
"""

from __future__ import annotations

import operator
from typing import Sequence, Union

WARP_SIZE = 32
MAX_THREADS_PER_BLOCK = 1024
MAX_BLOCK_DIM = (1024, 1024, 64)
MAX_GRID_DIM = (2**31 - 1, 65535, 65535)
STATIC_SMEM_BYTES = 48 * 1024
HOPPER_SMEM_BYTES = 227 * 1024  # cudaDevAttrMaxSharedMemoryPerBlockOptin, sm_90

Dims = Union[int, Sequence[int]]


def _int(value, what: str) -> int:
    if isinstance(value, bool):  # True would pass as 1
        raise ValueError(f"{what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None


def _dims(value: Dims, what: str, limits: Sequence[int]) -> tuple[int, ...]:
    dims = (value,) if not isinstance(value, (tuple, list)) else tuple(value)
    if not 1 <= len(dims) <= 3:
        raise ValueError(f"{what} must have 1 to 3 dimensions, got {value!r}")
    out = []
    for axis, (d, lim) in enumerate(zip(dims, limits)):
        d = _int(d, f"{what}[{'xyz'[axis]}]")
        if d <= 0:
            raise ValueError(f"{what}[{'xyz'[axis]}] must be positive, got {d}")
        if d > lim:
            raise ValueError(f"{what}[{'xyz'[axis]}] = {d} exceeds the limit {lim}")
        out.append(d)
    return tuple(out)


def blocks_for(n: int, per_block: int) -> int:
    """Blocks needed to cover ``n`` items at ``per_block`` items each
    (ceiling division); both must be positive."""
    n = _int(n, "n")
    per_block = _int(per_block, "per_block")
    if n <= 0:
        raise ValueError(f"n must be positive (nothing to launch), got {n}")
    if per_block <= 0:
        raise ValueError(f"per_block must be positive, got {per_block}")
    return -(-n // per_block)


def check_block(threads: Dims, *, warps: bool = True) -> int:
    """Validate a block shape (int or up to 3 dims); return threads per block.

    ``warps=True`` (the default) also demands whole warps, as kernels using
    warp intrinsics with a full mask do."""
    dims = _dims(threads, "block", MAX_BLOCK_DIM)
    total = 1
    for d in dims:
        total *= d
    if total > MAX_THREADS_PER_BLOCK:
        raise ValueError(f"block {threads!r} has {total} threads; the limit is {MAX_THREADS_PER_BLOCK}")
    if warps and total % WARP_SIZE:
        raise ValueError(
            f"block {threads!r} has {total} threads, not a multiple of the warp "
            f"size {WARP_SIZE} (this kernel uses whole warps)"
        )
    return total


def check_grid(blocks: Dims) -> tuple[int, ...]:
    """Validate a grid shape (int or up to 3 dims); return it as a tuple."""
    return _dims(blocks, "grid", MAX_GRID_DIM)


def check_shared(nbytes: int, *, hopper: bool = False) -> int:
    """Validate shared memory per block. Without ``hopper`` the 48 KiB any
    kernel may use (static, or dynamic without the opt-in); with it the
    sm_90 opt-in maximum for dynamic shared memory. Returns ``nbytes``."""
    nbytes = _int(nbytes, "shared memory bytes")
    if nbytes < 0:
        raise ValueError(f"shared memory bytes must be >= 0, got {nbytes}")
    limit = HOPPER_SMEM_BYTES if hopper else STATIC_SMEM_BYTES
    if nbytes > limit:
        where = "with the Hopper opt-in" if hopper else "without the opt-in (static)"
        raise ValueError(
            f"{nbytes} bytes of shared memory per block exceed the {limit} ({limit // 1024} KiB) allowed {where}"
        )
    return nbytes


def grid_1d(n: int, threads: int, *, warps: bool = True, max_blocks: int | None = None) -> tuple[int, int]:
    """``(blocks, threads)`` for one thread per item over ``n`` items, both
    checked. ``max_blocks`` caps the grid for grid-stride loops."""
    threads = check_block(_int(threads, "threads"), warps=warps)
    blocks = blocks_for(n, threads)
    if max_blocks is not None:
        cap = _int(max_blocks, "max_blocks")
        if cap <= 0:
            raise ValueError(f"max_blocks must be positive, got {cap}")
        blocks = min(blocks, cap)
    check_grid(blocks)
    return blocks, threads


def device_inline(fn):
    """``cuda.jit(device=True, forceinline=True)``: a device function that
    NVVM inlines into every caller before optimising, so the caller's facts
    (an index is never negative) reach it as with Numba's ``inline="always"``.
    That one instead copies the callee's Numba IR into each call site before
    typing, which for nested helpers (a decode inside a dot inside a step)
    took most of a kernel's compile. The simulator's ``jit`` has no
    ``forceinline`` and gets a plain device function."""
    from numba import cuda

    try:
        return cuda.jit(device=True, forceinline=True)(fn)
    except TypeError:
        return cuda.jit(device=True)(fn)


def jit_bounded(threads: int, min_blocks: int = 1):
    """``cuda.jit`` with launch bounds: ptxas then keeps registers within what
    ``threads`` threads per block can have (a 512-thread block gets at most
    128 per thread, not the 255 it would take and fail to launch with), and
    with ``min_blocks``, within what that many resident blocks an SM can
    have. The simulator's ``jit`` has no such option and gets a plain
    ``cuda.jit``."""
    from numba import cuda

    try:
        return cuda.jit(launch_bounds=(threads, min_blocks))
    except TypeError:
        return cuda.jit
