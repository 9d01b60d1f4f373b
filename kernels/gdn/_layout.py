"""How the GDN kernels cut a head's state over blocks and threads.

Every GDN kernel gives one block a *column slice* of one value head's state:
``BV`` of the ``dv`` value columns, all ``dk`` key rows. Columns of the state
are independent in the recurrence (``delta``, the write and the output are
per column; only ``k``, ``q``, ``g``, ``beta`` are shared), so slices never
talk to each other and a head spreads over ``dv / BV`` blocks::

    state[h]  (dk x dv, row-major, fp32)
               v0        v0+BV
          +----+---------+----+
    row 0 |    | slice s |    |   block (h, s): columns v0 .. v0+BV-1
      ... |    |  dk x BV|    |
    dk-1  |    |         |    |
          +----+---------+----+

Inside a block the recurrent kernels give each thread an ``R x CW`` patch
of the slice: ``CW`` adjacent columns (4 wherever the slice width and the
state's row length are multiples of 4, so each row of the patch is one
16-byte access; else 1) by ``R = dk / KSPLIT`` rows, ``KSPLIT`` row parts
in all. A warp spans 8 column groups (one 128-byte line of a state row) by
4 row parts, so its 16-byte loads read four whole lines; a column's row
parts inside a warp are summed by shuffles, and the warps' sums through
shared memory (one barrier per token). The thread-to-patch map is
``_step``'s.

Model shapes (d = 128): ``BV = 32``, ``CW = 4``, ``KSPLIT = 16``, 128
threads, 32 state registers per thread (8 rows x 4 columns), ``4 * Hv``
blocks per sequence. Smoke shapes (d = 8 or 12) split the columns in two
so the slicing is exercised.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable

from numba import config

from ..common import launch as _launch
from ..common.launch import device_inline

WARP = 32
# Alignment of a shared array read or written 16 bytes at a time (the state
# slice of the chunked kernels); the simulator refuses an alignment and
# hands out 1024-byte-aligned addresses of its own.
SHARED_ALIGN = None if config.ENABLE_CUDASIM else 16

# The token kernels' buffers, in their argument order (prefill and verify).
TOKEN_ARGS = ("q", "k", "v", "g", "beta", "state", "o")


@dataclass(frozen=True)
class Tile:
    dk: int
    dv: int
    bv: int  # value columns per block
    ksplit: int  # row parts per column
    cw: int = 1  # adjacent columns per thread (4: 16-byte state accesses)

    @property
    def rows(self) -> int:  # state rows per thread
        return self.dk // self.ksplit

    @property
    def groups(self) -> int:  # column groups (of cw columns) per block
        return self.bv // self.cw

    @property
    def threads(self) -> int:
        return self.groups * self.ksplit

    @property
    def slices(self) -> int:
        return self.dv // self.bv


def tile_for(dk: int, dv: int) -> Tile:
    """The block tiling used at these head dims."""
    if dk <= 0 or dv <= 0:
        raise ValueError(f"head dims must be positive, got dk={dk} dv={dv}")
    if dv % 32 == 0 and dv >= 64:
        bv = 32
    elif dv % 2 == 0:
        bv = dv // 2
    else:
        bv = dv
    ksplit = 4 if dk % 4 == 0 else (2 if dk % 2 == 0 else 1)
    return step_tile(dk, dv, bv, bv * ksplit)


def step_tile(dk: int, dv: int, bv: int, threads: int) -> Tile:
    """The patch layout of a ``dk x bv`` slice over about ``threads``
    threads: 4 columns a thread where 16-byte accesses line up (``bv`` and
    ``dv`` multiples of 4), and as many row parts as fill ``threads``
    while dividing ``dk`` (fewer threads where ``dk`` does not divide)."""
    cw = 4 if bv % 4 == 0 and dv % 4 == 0 else 1
    ks = max(1, min(dk, threads // (bv // cw)))
    while dk % ks:
        ks -= 1
    return Tile(dk, dv, bv, ks, cw)


def warp_threads(tile: Tile) -> int:
    """The block size of a kernel that runs warp MMAs (the chunked prefill
    and the WY verifies): ``tile.threads`` rounded up to whole warps, since
    ``mma.sync`` needs all 32 lanes. 128 at the model shapes (unchanged); the
    16- and 24-thread blocks of the smoke shapes become 32, the extra
    threads taking part in the chunk's flat loops and MMAs only."""
    return -(-tile.threads // WARP) * WARP


def check_launch(grid: int, threads: int, shared_bytes: int, warps: bool = False) -> tuple[int, int]:
    """Refuse a launch a GPU would refuse (the simulator would accept it).
    Whole warps are required only of kernels with warp MMAs (``warps``)."""
    _launch.check_block(threads, warps=warps)
    _launch.check_grid(grid)
    _launch.check_shared(shared_bytes)
    return grid, threads


def group_of(hk: int, hv: int) -> int:
    """Value heads per q/k head (value head ``h`` reads q/k head ``h // group``)."""
    if hk <= 0 or hv % hk:
        raise ValueError(f"{hv} value heads do not split evenly over {hk} q/k heads")
    return hv // hk


def slice_launch(
    shape, shared_bytes: Callable[[Tile], int], sequences: int = 1, whole_warps: bool = False
) -> tuple[int, int]:
    """``(grid, threads)`` of a launch with one block per (sequence, value
    head, column slice) at ``shape``'s heads: ``sequences * Hv * dv/BV``
    blocks of ``BV * KSPLIT`` threads (:func:`warp_threads` of them with
    ``whole_warps``), ``shared_bytes(tile)`` of static shared memory each.
    Refuses a grouping that does not divide."""
    group_of(shape["hk"], shape["hv"])
    tile = tile_for(shape["dk"], shape["dv"])
    threads = warp_threads(tile) if whole_warps else tile.threads
    return check_launch(sequences * shape["hv"] * tile.slices, threads, shared_bytes(tile), whole_warps)


def bind(
    kern, grid: int, threads: int, names: tuple[str, ...], flat: tuple[str, ...] = (), dynamic: int = 0, static: int = 0
):
    """``launch(bufs)``: ``kern`` on the buffers ``names`` (its argument
    order), those in ``flat`` viewed as 1-D (the state, for kernels that
    address it through ``_step``'s flat offsets). ``dynamic``: bytes of
    dynamic shared memory a block takes (the chunked kernels' staged rows,
    ``_chunk.stage_bytes``), beside ``static`` declared ones; see
    :func:`dynamic_launch`."""
    views = [(name, name in flat) for name in names]
    run = dynamic_launch(kern, grid, threads, dynamic, static) if dynamic else kern[grid, threads]

    def launch(b):
        run(*[b[n].reshape(b[n].size) if f else b[n] for n, f in views])

    return launch


def dynamic_launch(kern, grid: int, threads: int, dynamic: int = 0, static: int = 0):
    """``run(*args)``: ``kern[grid, threads, 0, dynamic](*args)``. A block
    whose static and dynamic shared memory together pass 48 KiB needs the
    kernel's dynamic maximum raised first (``common/dynsmem``; Hopper allows
    227 KiB): done once, at the first launch, for the whole block's bytes
    (a bound that covers the dynamic part). Refuses a block over 227 KiB
    here, with a ValueError."""
    _launch.check_shared(static + dynamic, hopper=True)
    opted: list = []

    def run(*args):
        if not opted:
            from ..common import dynsmem

            dynsmem.opt_in(kern, args, static + dynamic)
            opted.append(True)
        kern[grid, threads, 0, dynamic](*args)

    return run


@lru_cache(maxsize=None)
def make_head_slice(NSL: int, BV: int):
    """Device function ``head_slice(b, group) -> (h, v0, hk)``: block ``b`` of
    a head-major grid (``NSL`` column slices per value head) owns columns
    ``v0 .. v0+BV-1`` of value head ``h`` and reads q/k head ``hk``
    (``group`` value heads per q/k head). Inlined into the caller before
    Numba optimises it, so the index arithmetic compiles as if written there."""

    @device_inline
    def head_slice(b, group):
        h = b // NSL
        v0 = (b - h * NSL) * BV
        return h, v0, h // group

    return head_slice


jit_bounded = _launch.jit_bounded  # shared with the other families
