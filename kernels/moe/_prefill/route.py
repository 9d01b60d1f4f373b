"""Routing bookkeeping around the grouped GEMMs: sort the routed rows by
expert, zero the scratch, and combine the experts' outputs per token.

``ids int32[T, top_k]`` names each token's experts (distinct within a
token). A *routed row* is one (token, choice) pair, ``r = t * top_k + j``;
the grouped GEMMs work on them sorted by expert:

* ``route_sort`` (one block): counts per expert, their prefix ``off[E+1]``
  (expert ``e`` owns sorted rows ``off[e] .. off[e+1]``), the prefix of
  their ``bounds.BM``-row M tiles ``tile_off[E+1]`` (the engine's exact
  tile list; the single-launch grouped GEMM walks its own 64-row tiles,
  computed from ``off`` as it goes), then each routed row's place: ``tok[p]`` is the
  token of sorted row ``p`` and ``slot[r]`` the sorted row of routed row
  ``r``. Places within an expert are taken with atomics, so their order
  varies from run to run; every sorted row is computed on its own, and the
  combine sums a token's choices in ``j`` order, so the result does not.
* ``zero_rows``: zero a float32 scratch, grid-stride.
* ``combine``: ``y[t, c] = sum_j wts[t, j] * d[slot[t * top_k + j], c]``
  in float32, ``y`` fp16.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32

from ...common import launch as L
from .bounds import BM

SORT_THREADS = 256
THREADS = 128
MAX_BLOCKS = 1024  # grid-stride loops: enough blocks to fill an H200 several times over
PER_THREAD = 8  # elements per thread at least, before the grid grows


@lru_cache(maxsize=None)
def make_route_sort():
    @cuda.jit
    def route_sort(off, tile_off, tok, slot, cursor, ids):
        e_n = cursor.shape[0]
        top_k = ids.shape[1]
        rows = ids.shape[0] * top_k
        tid = cuda.threadIdx.x
        for e in range(tid, e_n, SORT_THREADS):
            cursor[e] = 0
        cuda.syncthreads()
        for r in range(tid, rows, SORT_THREADS):
            cuda.atomic.add(cursor, ids[r // top_k, r % top_k], int32(1))
        cuda.syncthreads()
        if tid == 0:
            acc = int32(0)
            tacc = int32(0)
            for e in range(e_n):
                c = cursor[e]
                off[e] = acc
                tile_off[e] = tacc
                acc += c
                tacc += (c + BM - 1) // BM
                cursor[e] = 0
            off[e_n] = acc
            tile_off[e_n] = tacc
        cuda.syncthreads()
        for r in range(tid, rows, SORT_THREADS):
            e = ids[r // top_k, r % top_k]
            p = off[e] + cuda.atomic.add(cursor, e, int32(1))
            tok[p] = r // top_k
            slot[r] = p

    return route_sort


@lru_cache(maxsize=None)
def make_zero_rows():
    @cuda.jit
    def zero_rows(a):
        n = a.shape[0] * a.shape[1]
        w = a.shape[1]
        i = cuda.grid(1)
        while i < n:
            a[i // w, i % w] = float32(0.0)
            i += cuda.gridsize(1)

    return zero_rows


@lru_cache(maxsize=None)
def make_combine():
    @cuda.jit
    def combine(y, d, wts, slot):
        t_n = y.shape[0]
        h = y.shape[1]
        top_k = wts.shape[1]
        i = cuda.grid(1)
        while i < t_n * h:
            t = i // h
            c = i % h
            acc = float32(0.0)
            for j in range(top_k):
                acc += wts[t, j] * d[slot[t * top_k + j], c]
            y[t, c] = acc
            i += cuda.gridsize(1)

    return combine


def sorter(experts: int, rows: int):
    """``(run(ids), workspace)``: the sort's device arrays, allocated once."""
    kern = make_route_sort()
    ws = {
        "off": cuda.device_array(experts + 1, np.int32),
        "tile_off": cuda.device_array(experts + 1, np.int32),
        "tok": cuda.device_array(rows, np.int32),
        "slot": cuda.device_array(rows, np.int32),
        "cursor": cuda.device_array(experts, np.int32),
    }
    threads = L.check_block(SORT_THREADS)

    def run(ids):
        kern[1, threads](ws["off"], ws["tile_off"], ws["tok"], ws["slot"], ws["cursor"], ids)

    return run, ws


def zeroer():
    kern = make_zero_rows()

    def run(a):
        blocks, threads = L.grid_1d(L.blocks_for(a.size, PER_THREAD), THREADS, max_blocks=MAX_BLOCKS)
        kern[blocks, threads](a)

    return run


def combiner():
    kern = make_combine()

    def run(y, d, wts, slot):
        blocks, threads = L.grid_1d(L.blocks_for(y.size, PER_THREAD), THREADS, max_blocks=MAX_BLOCKS)
        kern[blocks, threads](y, d, wts, slot)

    return run
