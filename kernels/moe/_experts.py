"""The routed-expert kernels every MoE path here is made of.

Routing is given as ``ids int32[R, k]`` (row ``r``'s ``k`` experts, in the
router's order) and ``rw float32[R, k]`` (their renormalised weights). An
*assignment* ``a = r * k + s`` is row ``r``'s slot ``s``; ``h float32[R*k,
I]`` holds each assignment's SiLU product ``silu(x W_gate^T) * (x W_up^T)``.
Gate and up are one stacked weight per expert, ``[E, 2I, H]`` (gate rows
``0 .. I-1``, up rows ``I .. 2I-1``), as the engines store them; down is
``[E, H, I]``. The per-row kernels read weights through
``_decode.make_dot_wide(FMT, X)``.

Two ways through the experts, the same sums in another order:

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
striding K by 64. The activations are staged once a chunk a block: as
float32 for int4 and NVFP4 (int4's pre-scaled for its nibble decode), as
fp16 for FP8's gate/up. The group reduces with three XOR shuffles. A block past the outputs' end still
shuffles (with zeros), so every lane of a warp reaches every shuffle. NVFP4
down rows whose block scales are whole 4-byte words (K a multiple of 64)
take their own kernel (``make_down_rows(..., PAIRS=True)``, chosen by the
launch's shape): a step's 32 scale bytes a row come as one 4-byte load a lane,
shared by one more XOR shuffle, so its 16-byte loop runs every lane of the
warp through the same steps.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32
from numba.core import types

from ..common import cvt, int4_device, smem, vload
from ..common.int4_device import pre4, xscale
from ..common.launch import blocks_for, check_block, check_grid, device_inline, jit_bounded
from ._decode import (
    LD8,
    STAGE,
    STAGE_F32,
    WIDE_VALUES,
    make_dot_wide,
    make_stage_chunk_scales,
    swz,
)

FULL_MASK = 0xFFFFFFFF
LANES = 8
THREADS = 128
OUT_PER_BLOCK = THREADS // LANES
# The per-row kernels' launch bound: seven resident blocks an SM (28 warps,
# at most 72 registers a thread; no spill in any format). Unbounded, ptxas
# takes 93-149 registers for the staged kernels and halves the warps in
# flight; at eight blocks (64) the NVFP4 and FP8 gate/up kernels spill.
MIN_BLOCKS = 7
# ptxas 13.5 spills the NVFP4 and FP8 gate/up kernels (two rows' decode and
# block scales) at seven blocks an SM (72 registers: 4 bytes each; NVFP4's
# 32 until its values were placed in fp16 pairs): six (80 registers, no
# spill) for those two. NVFP4's spilled at six too (16 bytes) until its
# scales were staged a chunk at a time (it ran at five, 96).
GATEUP_MIN_BLOCKS = {"nvfp4": 6, "fp8": 6}
float16 = types.float16
SORT_THREADS = 32  # one warp per expert in the routing sort
COMBINE_THREADS = 128


@device_inline
def group_sum(v):
    """Sum over the 8 lanes of an output's group (all lanes get it)."""
    v += cuda.shfl_xor_sync(FULL_MASK, v, 4)
    v += cuda.shfl_xor_sync(FULL_MASK, v, 2)
    v += cuda.shfl_xor_sync(FULL_MASK, v, 1)
    return v


@device_inline
def silu_mul(g, u):
    return g / (float32(1.0) + math.exp(-g)) * u


@cuda.jit(device=True)
def stage_f16(xs, xa, x, c0, k, t, vec):
    """Inputs ``c0 .. c0 + STAGE - 1`` (or to ``k``) of the fp16 row ``x``
    into the fp16 stage ``xs`` (shared address ``xa``). With ``vec``, a
    chunk's 256 16-byte units are two a thread (``STAGE = 2 * 8 *
    THREADS``: no loop, so nothing for the compiler to unroll), both
    ``ld.global.nc.v4`` issued before either swizzled ``st.shared.v4``: one
    round trip; otherwise one value a lane a load."""
    m = min(STAGE, k - c0)
    n8 = m // 8 if vec else 0
    i2 = t + THREADS
    z = np.uint32(0)
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = z
    if t < n8:
        a0, a1, a2, a3 = vload.ldg_v4(x, c0 + 8 * t)
    if i2 < n8:
        b0, b1, b2, b3 = vload.ldg_v4(x, c0 + 8 * i2)
    if t < n8:
        smem.st_shared_v4(xa + np.uint32(16 * swz(t)), a0, a1, a2, a3)
    if i2 < n8:
        smem.st_shared_v4(xa + np.uint32(16 * swz(i2)), b0, b1, b2, b3)
    for j in range(8 * n8 + t, m, THREADS):
        xs[8 * swz(j >> 3) + (j & 7)] = x[c0 + j]


@device_inline
def _f32_unit(xa, i, n4, PRE, d0, d1, d2, d3):
    """Unit ``i`` (inputs ``4 i ..``) of a float32 stage, where ``i < n4``:
    group ``i >> 3``, 16 bytes ``i & 7`` of its 144 (``int4_device``)."""
    if i < n4:
        if PRE:
            d0, d1, d2, d3 = pre4(d0, d1, d2, d3)
        at = xa + np.uint32(int4_device.GROUP_BYTES * (i >> 3) + 16 * (i & 7))
        smem.st_shared_f32x4(at, d0, d1, d2, d3)


@lru_cache(maxsize=None)
def make_stage_f32(SRC: str, PRE: bool):
    """``stage(xs, xa, x, c0, k, t, vec)``: :func:`stage_f16` of a ``SRC``
    row (``f16`` or ``f32``) into a float32 stage, four values a unit; with
    ``PRE``, pre-scaled for int4's sums (``int4_device.pre4``: unit places
    0-3 are a half-word's nibbles), in the W4A16 GEMVs' group layout
    (``_decode.STAGE_F32`` floats: ``int4_device.slot``). A chunk's 512 units: a float32 row's
    four a thread (``ld.global.v4.f32``), an fp16 row's two loads of eight
    a thread (``ld.global.nc.v4``), every load issued before any is stored
    (``st.shared.v4.f32``). With ``vec`` (the row on 16 bytes) a float32
    row's length is a multiple of 4 and an fp16 row's of 8: an fp16 load
    fills two units."""
    F16 = SRC == "f16"

    @cuda.jit(device=True)
    def stage(xs, xa, x, c0, k, t, vec):
        m = min(STAGE, k - c0)
        n4 = m // 4 if vec else 0
        z = float32(0.0)
        a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = z
        c0_ = c1_ = c2_ = c3_ = d0 = d1 = d2 = d3 = z
        if F16:  # units 2 v and 2 v + 1 from load v, loads t and t + THREADS
            u = np.uint32(0)
            p0 = p1 = p2 = p3 = q0 = q1 = q2 = q3 = u
            if 2 * t < n4:
                p0, p1, p2, p3 = vload.ldg_v4(x, c0 + 8 * t)
            if 2 * (t + THREADS) < n4:
                q0, q1, q2, q3 = vload.ldg_v4(x, c0 + 8 * (t + THREADS))
            a0, a1 = cvt.f16x2_to_f32x2(p0)
            a2, a3 = cvt.f16x2_to_f32x2(p1)
            b0, b1 = cvt.f16x2_to_f32x2(p2)
            b2, b3 = cvt.f16x2_to_f32x2(p3)
            c0_, c1_ = cvt.f16x2_to_f32x2(q0)
            c2_, c3_ = cvt.f16x2_to_f32x2(q1)
            d0, d1 = cvt.f16x2_to_f32x2(q2)
            d2, d3 = cvt.f16x2_to_f32x2(q3)
            _f32_unit(xa, 2 * t, n4, PRE, a0, a1, a2, a3)
            _f32_unit(xa, 2 * t + 1, n4, PRE, b0, b1, b2, b3)
            _f32_unit(xa, 2 * (t + THREADS), n4, PRE, c0_, c1_, c2_, c3_)
            _f32_unit(xa, 2 * (t + THREADS) + 1, n4, PRE, d0, d1, d2, d3)
        else:
            if t < n4:
                a0, a1, a2, a3 = vload.ld_f32x4(x, c0 + 4 * t)
            if t + THREADS < n4:
                b0, b1, b2, b3 = vload.ld_f32x4(x, c0 + 4 * (t + THREADS))
            if t + 2 * THREADS < n4:
                c0_, c1_, c2_, c3_ = vload.ld_f32x4(x, c0 + 4 * (t + 2 * THREADS))
            if t + 3 * THREADS < n4:
                d0, d1, d2, d3 = vload.ld_f32x4(x, c0 + 4 * (t + 3 * THREADS))
            _f32_unit(xa, t, n4, PRE, a0, a1, a2, a3)
            _f32_unit(xa, t + THREADS, n4, PRE, b0, b1, b2, b3)
            _f32_unit(xa, t + 2 * THREADS, n4, PRE, c0_, c1_, c2_, c3_)
            _f32_unit(xa, t + 3 * THREADS, n4, PRE, d0, d1, d2, d3)
        for j in range(4 * n4 + t, m, THREADS):
            v = float32(x[c0 + j])
            xs[int4_device.slot(j)] = v * xscale(j) if PRE else v

    return stage


@device_inline
def warp_read(a, i, j, t):
    """``a[i, j]``, the same for every thread of the block, read by one lane
    of each warp and shuffled to the others (32 lanes reading the same 4
    bytes make a 128-byte request for them); every lane of the warp calls it."""
    v = a[i, j] if (t & 31) == 0 else a.dtype.type(0)
    return cuda.shfl_sync(FULL_MASK, v, 0)


@device_inline
def warp_read1(a, i, t):
    """:func:`warp_read` of a vector's ``a[i]``."""
    v = a[i] if (t & 31) == 0 else a.dtype.type(0)
    return cuda.shfl_sync(FULL_MASK, v, 0)


@lru_cache(maxsize=None)
def make_gateup_rows(FMT: str):
    """``h[a] = silu(x[r] Wg_e^T) * (x[r] Wu_e^T)`` for assignments
    ``row0 * k .. (row0 + gridDim.y / k) * k``; grid ``(ceil(I / 16), rows * k)``.
    FP8 stages the fp16 row as it is; int4 and NVFP4 as float32 (int4's
    pre-scaled: ``_decode.make_dot_wide``)."""
    X = "f16" if FMT == "fp8" else "f32"
    dots = make_dot_wide(FMT, X)
    wide_ok, dot_pair, chunk, finish = dots.wide_ok, dots.dot_pair, dots.chunk, dots.finish
    ld8 = LD8[X]
    XT, XN = (float16, STAGE) if X == "f16" else (float32, STAGE_F32)
    stage_x = stage_f16 if X == "f16" else make_stage_f32("f16", FMT == "int4")
    TS = FMT == "nvfp4"  # a tensor scale in wc
    HALVES, stage_chunk_scales = make_stage_chunk_scales(FMT)  # a chunk's scales, staged once a block
    V = WIDE_VALUES[FMT]

    @jit_bounded(THREADS, GATEUP_MIN_BLOCKS.get(FMT, MIN_BLOCKS))
    def gateup_rows(h, x, ids, wa, wb, wc, row0):
        xs = cuda.shared.array(XN, dtype=XT)
        xa = smem.smem_addr(xs)
        ss = cuda.shared.array(HALVES, dtype=float16)  # the chunk's scales
        sa = smem.smem_addr(ss)
        t = cuda.threadIdx.x
        lane = t % LANES
        r16 = t // LANES  # the output's row in the block
        n0 = cuda.blockIdx.x * OUT_PER_BLOCK
        n = n0 + r16
        inter = h.shape[1]
        topk = ids.shape[1]
        k = x.shape[1]
        a = row0 * topk + cuda.blockIdx.y
        r = a // topk
        e = warp_read(ids, r, a - r * topk, t)
        ts = warp_read1(wc, e, t) if TS else float32(1.0)  # NVFP4's tensor scale
        xr = x[r]
        wide = wide_ok(wa, wb, k)  # 16 bytes of each row a lane a step
        sfast = wide  # the steps read their scales from the chunk's staged table
        vec = vload.aligned16(xr) and k % 8 == 0
        g = float32(0.0)
        u = float32(0.0)
        for c0 in range(0, k, STAGE):
            if c0 > 0:
                cuda.syncthreads()  # every lane is done with the last chunk
            c1 = min(k, c0 + STAGE)
            stage_x(xs, xa, xr, c0, k, t, vec)
            if sfast:
                stage_chunk_scales(ss, sa, wb, e, n0, inter, inter, 2, c0, c1, k, t)
            cuda.syncthreads()
            if n < inter:
                if wide:
                    wv = wa.view(np.uint32)  # once a chunk, not a load
                    # a 32-bit counter (Numba's range counts in 64 bits: a
                    # 64-bit compare and two carries a step; common/index32.py)
                    q1 = np.int32(c1 // V)
                    q = np.int32(c0 // V + lane)
                    while q < q1:
                        g, u = dot_pair(g, u, wv, wb, e, n, n + inter, q, q1, xa, c0, ss, r16, r16 + 16, sfast)
                        q = np.int32(q + LANES)
                else:
                    for c in range(c0 // 8 + lane, c1 // 8, LANES):
                        xv = ld8(xa, 8 * c - c0)  # once for gate and up
                        g += chunk(wa, wb, wc, e, n, c, xv)
                        u += chunk(wa, wb, wc, e, n + inter, c, xv)
        g = finish(group_sum(g), ts)
        u = finish(group_sum(u), ts)
        if n < inter and lane == 0:
            h[a, n] = silu_mul(g, u)

    return gateup_rows


@lru_cache(maxsize=None)
def make_down_rows(FMT: str, PAIRS: bool = False, SHFL_FAULT: int = 0):
    """``y[r] = sum_s rw[r, s] * (h[r k + s] Wd_e^T)`` for rows ``row0 ..
    row0 + gridDim.y``; grid ``(ceil(H / 16), rows)``. ``PAIRS`` (NVFP4
    rows whose scales are whole words, ``K`` a multiple of 64; the launch
    chooses): the 16-byte loop runs every lane of the warp through the same
    steps (``_decode.dot_shfl``), a row past the end reading the last row's
    weights for sums it never writes, so that a step's scales come as one
    4-byte load a lane shared by a shuffle; its own kernel, the 2-byte scale
    loop beside it spilling at the launch bound. ``SHFL_FAULT``: tests only
    (``_decode.SHFL_FAULTS``)."""
    if PAIRS and FMT != "nvfp4":
        raise ValueError(f"PAIRS: NVFP4's scale words, not {FMT}'s")
    dots = make_dot_wide(FMT, "f32", SHFL_FAULT)
    wide_ok, dot_wide, pairs_ok, dot_shfl = dots.wide_ok, dots.dot, dots.pairs_ok, dots.dot_shfl
    chunk, finish = dots.chunk, dots.finish
    stage_h = make_stage_f32("f32", FMT == "int4")
    ld8 = LD8["f32"]
    TS = FMT == "nvfp4"  # a tensor scale in wc
    HALVES, stage_chunk_scales = make_stage_chunk_scales(FMT)  # a chunk's scales, staged once a block
    V = WIDE_VALUES[FMT]

    @jit_bounded(THREADS, MIN_BLOCKS)
    def down_rows(y, h, ids, rw, wa, wb, wc, row0):
        xs = cuda.shared.array(STAGE_F32, dtype=float32)
        xa = smem.smem_addr(xs)
        ss = cuda.shared.array(HALVES, dtype=float16)  # the chunk's scales (16 rows)
        sa = smem.smem_addr(ss)
        t = cuda.threadIdx.x
        lane = t % LANES
        r16 = t // LANES  # the output's row in the block
        n0 = cuda.blockIdx.x * OUT_PER_BLOCK
        n = n0 + r16
        live = n < y.shape[1]
        if PAIRS:
            n = min(n, y.shape[1] - 1)  # a row past the end: the last row, its sums never written
        r = row0 + cuda.blockIdx.y
        topk = ids.shape[1]
        k = h.shape[1]
        acc = float32(0.0)
        wide = wide_ok(wa, wb, k)  # 16 bytes of the row a lane a step
        sfast = wide and not PAIRS  # the steps read their scales from the chunk's staged table (not dot_shfl's)
        pairs = PAIRS and wide and pairs_ok(k)  # a step's scales one word a lane, shuffled
        for s in range(topk):
            e = warp_read(ids, r, s, t)
            ts = warp_read1(wc, e, t) if TS else float32(1.0)  # NVFP4's tensor scale
            hr = h[r * topk + s]
            vec = vload.aligned16(hr) and k % 4 == 0
            part = float32(0.0)
            for c0 in range(0, k, STAGE):
                if s > 0 or c0 > 0:
                    cuda.syncthreads()  # every lane is done with the last chunk
                c1 = min(k, c0 + STAGE)
                stage_h(xs, xa, hr, c0, k, t, vec)
                if sfast:
                    stage_chunk_scales(ss, sa, wb, e, n0, y.shape[1], 0, 1, c0, c1, k, t)
                cuda.syncthreads()
                if pairs:  # every lane of the warp alike (the scale shuffle)
                    wv = wa.view(np.uint32)  # once a chunk, not a load
                    wbw = wb.view(np.int32)
                    q1 = np.int32(c1 // V)
                    for b in range(np.int32(c0 // V), q1, np.int32(2 * LANES)):
                        part = dot_shfl(part, wv, wbw, e, n, np.int32(b + lane), q1, xa, c0)
                elif live:
                    if wide and not PAIRS:
                        wv = wa.view(np.uint32)  # once a chunk, not a load
                        q1 = np.int32(c1 // V)
                        q = np.int32(c0 // V + lane)
                        while q < q1:  # two loads a lane in flight
                            part = dot_wide(part, wv, wb, e, n, q, q1, xa, c0, ss, r16, sfast)
                            q = np.int32(q + 2 * LANES)
                    else:
                        for c in range(c0 // 8 + lane, c1 // 8, LANES):
                            part += chunk(wa, wb, wc, e, n, c, ld8(xa, 8 * c - c0))
            acc += warp_read(rw, r, s, t) * finish(part, ts)
        acc = group_sum(acc)
        if live and lane == 0:
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


def down_rows(FMT: str, hidden: int, rows: int, inter: int, SHFL_FAULT: int = 0):
    """launch(y, h, ids, rw, (wa, wb, wc), row0=0) over rows of ``inter``
    inputs: NVFP4 at ``inter`` a multiple of 64 takes the ``PAIRS`` kernel
    (which, given rows of another width, reads them 8 values at a time)."""
    kern = make_down_rows(FMT, FMT == "nvfp4" and inter % 64 == 0, SHFL_FAULT)
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
