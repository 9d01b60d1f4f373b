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
  (stable: by assignment within an expert) into ``order`` with
  ``offsets[E + 1]``; block ``(j, e)`` then reads expert ``e``'s weights
  once per chunk for up to four of its rows at a time. Down writes one
  partial row per assignment (``ys``) and ``combine`` sums each row's ``k``
  partials in slot order.

Launch: 128 threads, ``LANES = 8`` lanes per output (16 outputs a block):
the 8 lanes of an output read 8 consecutive chunks of 8 weights (one 32-byte
sector of int4 words), striding K by 64, and reduce with three XOR
shuffles inside their group of eight. A block past the outputs' end still
shuffles (with zeros), so every lane of a warp reaches every shuffle.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32

from ..common.launch import blocks_for, check_block, check_grid
from ._decode import dot8, make_decode8

FULL_MASK = 0xFFFFFFFF
LANES = 8
THREADS = 128
OUT_PER_BLOCK = THREADS // LANES
GROUP_ROWS = 4  # rows of one expert the grouped kernels carry at a time
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

    @cuda.jit
    def down_rows(y, h, ids, rw, wa, wb, wc, row0):
        t = cuda.threadIdx.x
        lane = t % LANES
        n = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        r = row0 + cuda.blockIdx.y
        topk = ids.shape[1]
        acc = float32(0.0)
        if n < y.shape[1]:
            for s in range(topk):
                e = ids[r, s]
                hr = h[r * topk + s]
                part = float32(0.0)
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
    order, ``offsets[e + 1] = offsets[e] + counts[e]``; grid ``E``, one warp."""

    @cuda.jit
    def route_scatter(order, offsets, counts, ids):
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
            pos += cuda.popc(ballot)

    return route_scatter


@cuda.jit(device=True, inline=True)
def _slot(order, beg, end, q):
    return order[beg + q] if beg + q < end else int32(-1)


@lru_cache(maxsize=None)
def make_gateup_grouped(FMT: str):
    """Gate/up for every assignment, expert by expert; grid ``(ceil(I / 16), E)``."""
    dec = make_decode8(FMT)

    @cuda.jit
    def gateup_grouped(h, x, ids, wa, wb, wc, order, offsets):
        e = cuda.blockIdx.y
        beg = offsets[e]
        end = offsets[e + 1]
        t = cuda.threadIdx.x
        lane = t % LANES
        n = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        inter = h.shape[1]
        topk = ids.shape[1]
        live = n < inter
        nc = x.shape[1] // 8
        for q in range(beg, end, GROUP_ROWS):  # the same count in every lane: shuffles stay uniform
            a0 = _slot(order, q, end, 0)
            a1 = _slot(order, q, end, 1)
            a2 = _slot(order, q, end, 2)
            a3 = _slot(order, q, end, 3)
            x0 = x[a0 // topk]
            x1 = x[max(a1, 0) // topk]
            x2 = x[max(a2, 0) // topk]
            x3 = x[max(a3, 0) // topk]
            g0 = g1 = g2 = g3 = u0 = u1 = u2 = u3 = float32(0.0)
            if live:
                for c in range(lane, nc, LANES):
                    k = 8 * c
                    wg = dec(wa, wb, wc, e, n, c)
                    wu = dec(wa, wb, wc, e, n + inter, c)
                    g0 += dot8(wg, x0, k)
                    u0 += dot8(wu, x0, k)
                    if a1 >= 0:
                        g1 += dot8(wg, x1, k)
                        u1 += dot8(wu, x1, k)
                    if a2 >= 0:
                        g2 += dot8(wg, x2, k)
                        u2 += dot8(wu, x2, k)
                    if a3 >= 0:
                        g3 += dot8(wg, x3, k)
                        u3 += dot8(wu, x3, k)
            # a1..a3 are the same in every lane of the block: uniform branches
            g0 = group_sum(g0)
            u0 = group_sum(u0)
            if a1 >= 0:
                g1 = group_sum(g1)
                u1 = group_sum(u1)
            if a2 >= 0:
                g2 = group_sum(g2)
                u2 = group_sum(u2)
            if a3 >= 0:
                g3 = group_sum(g3)
                u3 = group_sum(u3)
            if live and lane == 0:
                h[a0, n] = silu_mul(g0, u0)
                if a1 >= 0:
                    h[a1, n] = silu_mul(g1, u1)
                if a2 >= 0:
                    h[a2, n] = silu_mul(g2, u2)
                if a3 >= 0:
                    h[a3, n] = silu_mul(g3, u3)

    return gateup_grouped


@lru_cache(maxsize=None)
def make_down_grouped(FMT: str):
    """``ys[a] = h[a] Wd_e^T`` for every assignment, expert by expert; grid
    ``(ceil(H / 16), E)``."""
    dec = make_decode8(FMT)

    @cuda.jit
    def down_grouped(ys, h, wa, wb, wc, order, offsets):
        e = cuda.blockIdx.y
        beg = offsets[e]
        end = offsets[e + 1]
        t = cuda.threadIdx.x
        lane = t % LANES
        n = cuda.blockIdx.x * OUT_PER_BLOCK + t // LANES
        live = n < ys.shape[1]
        nc = h.shape[1] // 8
        for q in range(beg, end, GROUP_ROWS):
            a0 = _slot(order, q, end, 0)
            a1 = _slot(order, q, end, 1)
            a2 = _slot(order, q, end, 2)
            a3 = _slot(order, q, end, 3)
            h0 = h[a0]
            h1 = h[max(a1, 0)]
            h2 = h[max(a2, 0)]
            h3 = h[max(a3, 0)]
            p0 = p1 = p2 = p3 = float32(0.0)
            if live:
                for c in range(lane, nc, LANES):
                    k = 8 * c
                    w = dec(wa, wb, wc, e, n, c)
                    p0 += dot8(w, h0, k)
                    if a1 >= 0:
                        p1 += dot8(w, h1, k)
                    if a2 >= 0:
                        p2 += dot8(w, h2, k)
                    if a3 >= 0:
                        p3 += dot8(w, h3, k)
            p0 = group_sum(p0)
            if a1 >= 0:
                p1 = group_sum(p1)
            if a2 >= 0:
                p2 = group_sum(p2)
            if a3 >= 0:
                p3 = group_sum(p3)
            if live and lane == 0:
                ys[a0, n] = p0
                if a1 >= 0:
                    ys[a1, n] = p1
                if a2 >= 0:
                    ys[a2, n] = p2
                if a3 >= 0:
                    ys[a3, n] = p3

    return down_grouped


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
    ``launch.workspace`` holds ``counts``, ``order`` and ``offsets``."""
    count, scatter = make_route_count(), make_route_scatter()
    check_grid(experts)
    ws = {
        "counts": cuda.device_array(experts, np.int32),
        "order": cuda.device_array(rows * topk, np.int32),
        "offsets": cuda.device_array(experts + 1, np.int32),
    }

    def launch(ids):
        count[experts, SORT_THREADS](ws["counts"], ids)
        scatter[experts, SORT_THREADS](ws["order"], ws["offsets"], ws["counts"], ids)

    launch.workspace = ws
    return launch


def gateup_grouped(FMT: str, inter: int, experts: int):
    kern = make_gateup_grouped(FMT)
    grid = check_grid((blocks_for(inter, OUT_PER_BLOCK), experts))

    def launch(h, x, ids, w, order, offsets):
        kern[grid, THREADS](h, x, ids, *w, order, offsets)

    return launch


def down_grouped(FMT: str, hidden: int, experts: int):
    kern = make_down_grouped(FMT)
    grid = check_grid((blocks_for(hidden, OUT_PER_BLOCK), experts))

    def launch(ys, h, w, order, offsets):
        kern[grid, THREADS](ys, h, *w, order, offsets)

    return launch


def combine(rows: int, hidden: int):
    kern = make_combine()
    grid = check_grid(blocks_for(rows * hidden, COMBINE_THREADS))

    def launch(y, ys, rw):
        kern[grid, COMBINE_THREADS](y, ys, rw)

    return launch
