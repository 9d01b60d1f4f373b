"""Gate/up and down of the grouped (prefill) path on tensor cores: warp MMA
``mma.sync`` m16n8k16, fp16 inputs, f32 accumulators (``common/mma``).

Grid ``(ceil(I / 32), E)``, four warps a block; warp ``w`` of block
``(j, e)`` owns gate columns ``n0 .. n0 + 7`` (``n0 = 8 (4 j + w)``) and the
up columns ``I + n0 ..`` of expert ``e``, for every assignment routed to
``e`` (``order[offsets[e] .. offsets[e + 1]]``, sorted by ``_experts``'
routing sort), sixteen at a time: the A tile is those sixteen rows of ``x``
gathered through ``order``, the B tiles the expert's weights decoded to
float32 (``make_decode1``) and rounded once to fp16 (``cvt.rn.f16x2.f32``),
K by 16. The epilogue writes ``h[a, n] = silu(gate) * up`` for rows and
columns inside the segment. Down (``make_down_grouped_mma``) is the same
with ``h``'s rows (float32, rounded to fp16 as they enter) for A, one 8-column
tile of ``Wd_e`` a warp, and each assignment's partial row ``ys[a]`` out.
Rows past the segment and columns past ``I`` are fed as zeros; a warp past ``I`` leaves before any MMA (the whole warp).

The activations are fp16 and enter exactly; each weight rounds once to fp16
(2^-11 relative, the W4A16 tensor-core GEMMs' rounding too). ``H`` must be
a multiple of 16.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ..common import bits, cvt, mma
from ..common.launch import blocks_for, check_block, check_grid
from ._decode import FP8_BLOCK
from ._experts import silu_mul

WARPS = 4
THREADS = 32 * WARPS
TILE_N = 8
TILE_M = 16
TILE_K = 16
Z = uint32(0)


@lru_cache(maxsize=None)
def make_decode1(FMT: str):
    """``(wa, wb, wc, e, n, k) -> float32``: one weight, as ``_decode``'s eight."""
    if FMT == "int4":

        @cuda.jit(device=True, inline=True)
        def decode1(wa, wb, wc, e, n, k):
            q = (np.int64(wa[e, n, k >> 3]) >> ((k & 7) * 4)) & 15
            return float32(np.int32(q) - 8) * float32(wb[e, n, k >> 7])

        return decode1
    if FMT == "nvfp4":

        @cuda.jit(device=True, inline=True)
        def decode1(wa, wb, wc, e, n, k):
            b = np.int32(wa[e, n, k >> 1])
            nib = (b >> 4) if (k & 1) else (b & 15)
            return (bits.e2m1_to_f32(nib) * bits.e4m3_to_f32(wb[e, n, k >> 4])) * wc[e]

        return decode1
    if FMT == "fp8":

        @cuda.jit(device=True, inline=True)
        def decode1(wa, wb, wc, e, n, k):
            return bits.e4m3_to_f32(wa[e, n, k]) * wb[e, n // FP8_BLOCK, k // FP8_BLOCK]

        return decode1
    raise ValueError(f"unknown expert weight format {FMT!r}")


@cuda.jit(device=True, inline=True)
def _fragments(lane, n0):
    """Where ``lane``'s fragments sit in a tile whose B columns start at
    ``n0``: A register j holds ISA elements 2j (low) and 2j + 1 of row
    ``arj``, columns ``acj``, ``acj + 1``; B register j holds rows ``bkj``,
    ``bkj + 1`` of column ``nbj``."""
    ar0, ac0 = mma.a_elem(lane, 0)
    ar1, ac1 = mma.a_elem(lane, 2)
    ar2, ac2 = mma.a_elem(lane, 4)
    ar3, ac3 = mma.a_elem(lane, 6)
    bk0, bn0 = mma.b_elem(lane, 0)
    bk1, bn1 = mma.b_elem(lane, 2)
    return ar0, ac0, ar1, ac1, ar2, ac2, ar3, ac3, bk0, bk1, n0 + bn0, n0 + bn1


@lru_cache(maxsize=None)
def make_gateup_grouped_mma(FMT: str):
    dec = make_decode1(FMT)

    @cuda.jit(device=True, inline=True)
    def xval(x, order, topk, q, end, r, k):
        if q + r < end:
            return float32(x[order[q + r] // topk, k])
        return float32(0.0)

    @cuda.jit(device=True, inline=True)
    def wval(wa, wb, wc, e, n, k, inter, shift):
        if n < inter:
            return dec(wa, wb, wc, e, n + shift, k)
        return float32(0.0)

    @cuda.jit
    def gateup_grouped_mma(h, x, ids, wa, wb, wc, order, offsets):
        e = cuda.blockIdx.y
        beg = offsets[e]
        end = offsets[e + 1]
        lane = cuda.laneid
        inter = h.shape[1]
        topk = ids.shape[1]
        n0 = (cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32) * TILE_N
        if n0 >= inter:
            return
        ar0, ac0, ar1, ac1, ar2, ac2, ar3, ac3, bk0, bk1, nb0, nb1 = _fragments(lane, n0)
        for q in range(beg, end, TILE_M):
            g0 = g1 = g2 = g3 = u0 = u1 = u2 = u3 = float32(0.0)
            for k0 in range(0, x.shape[1], TILE_K):
                a0 = cvt.f32x2_to_f16x2(
                    xval(x, order, topk, q, end, ar0, k0 + ac0), xval(x, order, topk, q, end, ar0, k0 + ac0 + 1)
                )
                a1 = cvt.f32x2_to_f16x2(
                    xval(x, order, topk, q, end, ar1, k0 + ac1), xval(x, order, topk, q, end, ar1, k0 + ac1 + 1)
                )
                a2 = cvt.f32x2_to_f16x2(
                    xval(x, order, topk, q, end, ar2, k0 + ac2), xval(x, order, topk, q, end, ar2, k0 + ac2 + 1)
                )
                a3 = cvt.f32x2_to_f16x2(
                    xval(x, order, topk, q, end, ar3, k0 + ac3), xval(x, order, topk, q, end, ar3, k0 + ac3 + 1)
                )
                kb0 = k0 + bk0
                kb1 = k0 + bk1
                bg0 = cvt.f32x2_to_f16x2(
                    wval(wa, wb, wc, e, nb0, kb0, inter, 0), wval(wa, wb, wc, e, nb0, kb0 + 1, inter, 0)
                )
                bg1 = cvt.f32x2_to_f16x2(
                    wval(wa, wb, wc, e, nb1, kb1, inter, 0), wval(wa, wb, wc, e, nb1, kb1 + 1, inter, 0)
                )
                bu0 = cvt.f32x2_to_f16x2(
                    wval(wa, wb, wc, e, nb0, kb0, inter, inter), wval(wa, wb, wc, e, nb0, kb0 + 1, inter, inter)
                )
                bu1 = cvt.f32x2_to_f16x2(
                    wval(wa, wb, wc, e, nb1, kb1, inter, inter), wval(wa, wb, wc, e, nb1, kb1 + 1, inter, inter)
                )
                g0, g1, g2, g3 = mma.mma_f16_16816(a0, a1, a2, a3, bg0, bg1, g0, g1, g2, g3)
                u0, u1, u2, u3 = mma.mma_f16_16816(a0, a1, a2, a3, bu0, bu1, u0, u1, u2, u3)
            _store(h, order, q, end, n0, inter, lane, 0, g0, u0)
            _store(h, order, q, end, n0, inter, lane, 1, g1, u1)
            _store(h, order, q, end, n0, inter, lane, 2, g2, u2)
            _store(h, order, q, end, n0, inter, lane, 3, g3, u3)

    return gateup_grouped_mma


@lru_cache(maxsize=None)
def make_down_grouped_mma(FMT: str):
    """``ys[a] = h[a] Wd_e^T`` for every assignment, expert by expert, on
    ``mma.sync`` fp16: the float32 SiLU products round once to fp16 as they
    enter. Grid ``(ceil(H / 32), E)``; ``I`` a multiple of 16."""
    dec = make_decode1(FMT)

    @cuda.jit(device=True, inline=True)
    def hval(h, order, q, end, r, k):
        if q + r < end:
            return h[order[q + r], k]
        return float32(0.0)

    @cuda.jit(device=True, inline=True)
    def wval(wa, wb, wc, e, n, k, width):
        if n < width:
            return dec(wa, wb, wc, e, n, k)
        return float32(0.0)

    @cuda.jit
    def down_grouped_mma(ys, h, wa, wb, wc, order, offsets):
        e = cuda.blockIdx.y
        beg = offsets[e]
        end = offsets[e + 1]
        lane = cuda.laneid
        width = ys.shape[1]
        n0 = (cuda.blockIdx.x * WARPS + cuda.threadIdx.x // 32) * TILE_N
        if n0 >= width:
            return
        ar0, ac0, ar1, ac1, ar2, ac2, ar3, ac3, bk0, bk1, nb0, nb1 = _fragments(lane, n0)
        for q in range(beg, end, TILE_M):
            d0 = d1 = d2 = d3 = float32(0.0)
            for k0 in range(0, h.shape[1], TILE_K):
                a0 = cvt.f32x2_to_f16x2(
                    hval(h, order, q, end, ar0, k0 + ac0), hval(h, order, q, end, ar0, k0 + ac0 + 1)
                )
                a1 = cvt.f32x2_to_f16x2(
                    hval(h, order, q, end, ar1, k0 + ac1), hval(h, order, q, end, ar1, k0 + ac1 + 1)
                )
                a2 = cvt.f32x2_to_f16x2(
                    hval(h, order, q, end, ar2, k0 + ac2), hval(h, order, q, end, ar2, k0 + ac2 + 1)
                )
                a3 = cvt.f32x2_to_f16x2(
                    hval(h, order, q, end, ar3, k0 + ac3), hval(h, order, q, end, ar3, k0 + ac3 + 1)
                )
                kb0 = k0 + bk0
                kb1 = k0 + bk1
                b0 = cvt.f32x2_to_f16x2(wval(wa, wb, wc, e, nb0, kb0, width), wval(wa, wb, wc, e, nb0, kb0 + 1, width))
                b1 = cvt.f32x2_to_f16x2(wval(wa, wb, wc, e, nb1, kb1, width), wval(wa, wb, wc, e, nb1, kb1 + 1, width))
                d0, d1, d2, d3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
            _store_ys(ys, order, q, end, n0, width, lane, 0, d0)
            _store_ys(ys, order, q, end, n0, width, lane, 1, d1)
            _store_ys(ys, order, q, end, n0, width, lane, 2, d2)
            _store_ys(ys, order, q, end, n0, width, lane, 3, d3)

    return down_grouped_mma


@cuda.jit(device=True, inline=True)
def _store_ys(ys, order, q, end, n0, width, lane, i, v):
    r, c = mma.c_elem(lane, i)
    if q + r < end and n0 + c < width:
        ys[order[q + r], n0 + c] = v


@cuda.jit(device=True, inline=True)
def _store(h, order, q, end, n0, inter, lane, i, g, u):
    r, c = mma.c_elem(lane, i)
    if q + r < end and n0 + c < inter:
        h[order[q + r], n0 + c] = silu_mul(g, u)


def gateup_grouped_mma(FMT: str, inter: int, hidden: int, experts: int):
    if hidden % TILE_K:
        raise ValueError(f"hidden={hidden}: the tensor-core gate/up steps K by {TILE_K}")
    kern = make_gateup_grouped_mma(FMT)
    grid = check_grid((blocks_for(inter, WARPS * TILE_N), experts))
    check_block(THREADS)

    def launch(h, x, ids, w, order, offsets):
        kern[grid, THREADS](h, x, ids, *w, order, offsets)

    launch.tensor_cores, launch.tc_dtype = "mma.sync", "f16"
    return launch


def down_grouped_mma(FMT: str, hidden: int, inter: int, experts: int):
    if inter % TILE_K:
        raise ValueError(f"expert_intermediate={inter}: the tensor-core down steps K by {TILE_K}")
    kern = make_down_grouped_mma(FMT)
    grid = check_grid((blocks_for(hidden, WARPS * TILE_N), experts))
    check_block(THREADS)

    def launch(ys, h, w, order, offsets):
        kern[grid, THREADS](ys, h, *w, order, offsets)

    launch.tensor_cores, launch.tc_dtype = "mma.sync", "f16"
    return launch
