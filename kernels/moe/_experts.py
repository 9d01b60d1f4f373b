"""The routed-expert kernels every MoE path here is made of.

Routing is given as ``ids int32[R, k]`` (row ``r``'s ``k`` experts, in the
router's order) and ``rw float32[R, k]`` (their renormalised weights). An
*assignment* ``a = r * k + s`` is row ``r``'s slot ``s``; ``h float32[R*k,
I]`` holds each assignment's SiLU product ``silu(x W_gate^T) * (x W_up^T)``.
Gate and up are one stacked weight per expert, ``[E, 2I, H]`` (gate rows
``0 .. I-1``, up rows ``I .. 2I-1``), as the engines store them; down is
``[E, H, I]``. Weights are read through ``_decode.make_decode8(FMT)``.

Two ways through the experts, same arithmetic:

* **per row** (the decode kernels): block ``(j, a)`` computes outputs
  ``16 j .. 16 j + 15`` of assignment ``a`` (gate/up) or of row ``r``
  (down, summing its ``k`` experts in slot order). An expert shared by
  several rows is read once per row.
* **grouped** (rows sharing an expert together; the prefill path's shape):
  ``route_count`` and ``route_scatter`` sort the assignments by expert
  (stable: by assignment within an expert) into ``order`` (with each
  one's token in ``tok``) and ``offsets[E + 1]``; the GEMMs then read each
  expert's weights once for all its rows, on tensor cores
  (``_experts_tc``). Down writes one partial row per assignment (``ys``)
  and ``combine`` sums each row's ``k`` partials in slot order.

Launch (the per-row kernels): 128 threads, ``LANES = 8`` lanes per output (16 outputs a block):
the 8 lanes of an output read 8 consecutive 16-byte loads of its weight row
(``_decode.make_dot_wide``: 32 int4 or NVFP4 values, 16 FP8 codes a load;
128 bytes a step for the group), striding K by 256 (128 for FP8), where a
row is whole loads and the weights start on 16 bytes; otherwise 8
consecutive chunks of 8 weights (one 32-byte sector of int4 words),
striding K by 64. The group reduces with three XOR shuffles. A block past the outputs' end still
shuffles (with zeros), so every lane of a warp reaches every shuffle.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ..common.launch import blocks_for, check_block, check_grid
from ._decode import WIDE_VALUES, dot8, make_decode8, make_dot_wide

FULL_MASK = 0xFFFFFFFF
LANES = 8
THREADS = 128
OUT_PER_BLOCK = THREADS // LANES
SORT_THREADS = 32  # one warp per expert in the routing sort
COMBINE_THREADS = 128


@cuda.jit(device=True, inline=True)
def group_sum(v):
    """Sum over the 8 lanes of an output's group (all lanes get it)."""
    v += cuda.shfl_xor_sync(FULL_MASK, v, 4)
    v += cuda.shfl_xor_sync(FULL_MASK, v, 2)
    v += cuda.shfl_xor_sync(FULL_MASK, v, 1)
    return v


@cuda.jit(device=True, inline=True)
def silu_mul(g, u):
    return g / (float32(1.0) + math.exp(-g)) * u


@lru_cache(maxsize=None)
def make_gateup_rows(FMT: str):
    """``h[a] = silu(x[r] Wg_e^T) * (x[r] Wu_e^T)`` for assignments
    ``row0 * k .. (row0 + gridDim.y / k) * k``; grid ``(ceil(I / 16), rows * k)``."""
    dec = make_decode8(FMT)
    wide_ok, dot_wide = make_dot_wide(FMT, "f16")
    V = WIDE_VALUES[FMT]

    @cuda.jit
    def gateup_rows(h, x, ids, wa, wb, wc, row0):
        t = cuda.threadIdx.x
        lane = t % LANES
        n = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        inter = h.shape[1]
        topk = ids.shape[1]
        a = row0 * topk + cuda.blockIdx.y
        r = a // topk
        e = ids[r, a - r * topk]
        xr = x[r]
        g = float32(0.0)
        u = float32(0.0)
        if n < inter:
            if wide_ok(wa, x.shape[1], x):  # 16 bytes of each row a lane a step
                for q in range(lane, x.shape[1] // V, LANES):
                    g += dot_wide(wa, wb, wc, e, n, q, xr)
                    u += dot_wide(wa, wb, wc, e, n + inter, q, xr)
            else:
                for c in range(lane, x.shape[1] // 8, LANES):
                    g += dot8(dec(wa, wb, wc, e, n, c), xr, 8 * c)
                    u += dot8(dec(wa, wb, wc, e, n + inter, c), xr, 8 * c)
        g = group_sum(g)
        u = group_sum(u)
        if n < inter and lane == 0:
            h[a, n] = silu_mul(g, u)

    return gateup_rows


@lru_cache(maxsize=None)
def make_down_rows(FMT: str):
    """``y[r] = sum_s rw[r, s] * (h[r k + s] Wd_e^T)`` for rows ``row0 ..
    row0 + gridDim.y``; grid ``(ceil(H / 16), rows)``."""
    dec = make_decode8(FMT)
    wide_ok, dot_wide = make_dot_wide(FMT, "f32")
    V = WIDE_VALUES[FMT]

    @cuda.jit
    def down_rows(y, h, ids, rw, wa, wb, wc, row0):
        t = cuda.threadIdx.x
        lane = t % LANES
        n = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        r = row0 + cuda.blockIdx.y
        topk = ids.shape[1]
        acc = float32(0.0)
        wide = wide_ok(wa, h.shape[1], h)
        if n < y.shape[1]:
            for s in range(topk):
                e = ids[r, s]
                hr = h[r * topk + s]
                part = float32(0.0)
                if wide:  # 16 bytes of the row a lane a step
                    for q in range(lane, h.shape[1] // V, LANES):
                        part += dot_wide(wa, wb, wc, e, n, q, hr)
                else:
                    for c in range(lane, h.shape[1] // 8, LANES):
                        part += dot8(dec(wa, wb, wc, e, n, c), hr, 8 * c)
                acc += rw[r, s] * part
        acc = group_sum(acc)
        if n < y.shape[1] and lane == 0:
            y[r, n] = acc

    return down_rows


@lru_cache(maxsize=None)
def make_route_count():
    """``counts[e]``: assignments routed to expert ``e``; grid ``E``, one warp."""

    @cuda.jit
    def route_count(counts, ids):
        e = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        topk = ids.shape[1]
        total = ids.shape[0] * topk
        n = 0
        for base in range(0, total, SORT_THREADS):
            i = base + lane
            hit = False
            if i < total:
                hit = ids[i // topk, i % topk] == e
            n += cuda.popc(cuda.ballot_sync(FULL_MASK, hit))
        if lane == 0:
            counts[e] = n

    return route_count


@lru_cache(maxsize=None)
def make_route_scatter():
    """``order[offsets[e] ..]``: expert ``e``'s assignments in increasing
    order, ``offsets[e + 1] = offsets[e] + counts[e]``, and ``tok[p]`` the
    row (token) of sorted assignment ``p``; grid ``E``, one warp."""

    @cuda.jit
    def route_scatter(order, tok, offsets, counts, ids):
        e = cuda.blockIdx.x
        lane = cuda.threadIdx.x
        start = 0
        for j in range(lane, e, SORT_THREADS):
            start += counts[j]
        for d in (16, 8, 4, 2, 1):
            start += cuda.shfl_xor_sync(FULL_MASK, start, d)
        if lane == 0:
            offsets[e + 1] = start + counts[e]
            if e == 0:
                offsets[0] = 0
        topk = ids.shape[1]
        total = ids.shape[0] * topk
        below = (1 << lane) - 1
        pos = start
        for base in range(0, total, SORT_THREADS):
            i = base + lane
            hit = False
            if i < total:
                hit = ids[i // topk, i % topk] == e
            ballot = cuda.ballot_sync(FULL_MASK, hit)
            if hit:
                order[pos + cuda.popc(ballot & below)] = i
                tok[pos + cuda.popc(ballot & below)] = i // topk
            pos += cuda.popc(ballot)

    return route_scatter


@lru_cache(maxsize=None)
def make_combine():
    """``y[r, n] = sum_s rw[r, s] * ys[r k + s, n]`` in slot order; one thread per output."""

    @cuda.jit
    def combine(y, ys, rw):
        i = cuda.grid(1)
        rows, width = y.shape
        if i < rows * width:
            r = i // width
            n = i - r * width
            topk = rw.shape[1]
            acc = float32(0.0)
            for s in range(topk):
                acc += rw[r, s] * ys[r * topk + s, n]
            y[r, n] = acc

    return combine


# ── host side ───────────────────────────────────────────────────────────────


def _weights(bufs: dict, prefix: str):
    """(wa, wb, wc) of the weight named ``prefix`` in ``bufs``."""
    return bufs[f"{prefix}_a"], bufs[f"{prefix}_b"], bufs[f"{prefix}_c"]


def gateup_rows(FMT: str, inter: int, rows: int, topk: int):
    """launch(h, x, ids, (wa, wb, wc), row0=0) over ``rows`` rows from ``row0``."""
    kern = make_gateup_rows(FMT)
    grid = check_grid((blocks_for(inter, OUT_PER_BLOCK), rows * topk))
    check_block(THREADS)

    def launch(h, x, ids, w, row0=0):
        kern[grid, THREADS](h, x, ids, *w, row0)

    return launch


def down_rows(FMT: str, hidden: int, rows: int):
    kern = make_down_rows(FMT)
    grid = check_grid((blocks_for(hidden, OUT_PER_BLOCK), rows))
    check_block(THREADS)

    def launch(y, h, ids, rw, w, row0=0):
        kern[grid, THREADS](y, h, ids, rw, *w, row0)

    return launch


def route_sort(experts: int, rows: int, topk: int):
    """launch(ids) sorting the assignments by expert into its own scratch:
    ``launch.workspace`` holds ``counts``, ``order``, ``tok`` and ``offsets``."""
    count, scatter = make_route_count(), make_route_scatter()
    check_grid(experts)
    ws = {
        "counts": cuda.device_array(experts, np.int32),
        "order": cuda.device_array(rows * topk, np.int32),
        "tok": cuda.device_array(rows * topk, np.int32),
        "offsets": cuda.device_array(experts + 1, np.int32),
    }

    def launch(ids):
        count[experts, SORT_THREADS](ws["counts"], ids)
        scatter[experts, SORT_THREADS](ws["order"], ws["tok"], ws["offsets"], ws["counts"], ids)

    launch.workspace = ws
    return launch


def combine(rows: int, hidden: int):
    kern = make_combine()
    grid = check_grid(blocks_for(rows * hidden, COMBINE_THREADS))

    def launch(y, ys, rw):
        kern[grid, COMBINE_THREADS](y, ys, rw)

    return launch
