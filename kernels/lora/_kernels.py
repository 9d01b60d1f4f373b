"""The LoRA family's three kernels, shared by both variants.

* :func:`make_proj` -- ``y = x W^T`` over fp16 ``x[m, k]`` and ``W[n, k]``,
  fp32 sums, fp16 ``y``; with ``LORA`` (compile-time) the adapter's
  up-projection is fused into the same dot products:
  ``y += s * t[i, :] . B[n, :]`` where ``t = x A^T`` (fp32, ``[m, r]``).
  One warp per output column and group of ``ROWS`` rows: the lanes stride
  over K, a shuffle tree sums them. Where ``k`` is a multiple of 8 and
  ``x`` and ``W`` start on 16 bytes, a lane reads eight fp16 of each a
  load (``vload.ldg_v4``), two steps of both issued before either is used
  (64 bytes a lane in flight); otherwise one fp16 of each at a time. A group's rows
  re-read the warp's weight row (8 KiB at K = 4096), mostly from L1, so
  DRAM sees the weights about once per group: at decode (m <= 8) once per
  call, at a 512-token prefill 64 times (an FP32-core GEMV shape, not a
  tiled GEMM; the adapter's placement, not the base GEMM, is what the
  variants differ in).
* :func:`make_xa` -- the adapter's down-projection ``t = x A^T`` into the
  small fp32 ``[m, r]`` buffer, one warp per element (the same loads).
* :func:`make_merge` -- ``W' = W + s B A`` in fp16 (the base weights'
  format): the rank-r sum in fp32 in rank order, one rounding per weight.
  A block takes a strip of 256 columns over 64 rows, with ``A[:, strip]``
  staged in shared memory once and each step's ``B`` rows once; a lane
  merges 8 columns of 4 rows, reading ``W`` and writing ``W'`` 16 bytes
  an access where ``k % 8 == 0`` and the arrays start on 16 bytes (one
  fp16 at a time otherwise). Out of place, so a swap re-merges from the
  kept base weights.

FP32 CUDA cores throughout (no tensor cores): the adapter's share of the
work is small (``r / k``), and what the levers choose between is where the
adapter is applied, which these kernels measure alike for both variants.
"""

from __future__ import annotations

import functools

from numba import config, cuda, float32, types, uint32

from ..common import cvt, smem, vload
from ..common import launch as L
from ..common.launch import device_inline
from ..common.warp import warp_sum  # lane 0 ends with the 32 lanes' total

WARPS = 4  # warps (output columns) per projection block
ROWS = 8  # rows of x one warp carries through its weight row
MERGE_THREADS = 128
MERGE_COLS = 256  # a merge block's column strip: eight columns a lane
MERGE_RT = 4  # rows a warp merges at once (its register tile: 8 x 4)
MERGE_GROUP = MERGE_THREADS // L.WARP_SIZE * MERGE_RT  # rows a block merges at once
MERGE_ROWS = 4 * MERGE_GROUP  # rows a merge block covers (A's strip staged once for them)
MERGE_RANK = 64  # ranks staged at once: A's strip of them is 32 KiB of fp16
A_STAGE = MERGE_RANK * MERGE_COLS
B_STAGE = MERGE_GROUP * MERGE_RANK
W_ROWS = 2  # rows of W a lane has in flight as it writes W'
W_WORDS = 4 * W_ROWS  # their 16-byte groups, packed fp16 pairs
TILE = 8 * MERGE_RT  # a lane's accumulators
MERGE_MIN_BLOCKS = 6  # resident merge blocks an SM, as its 36 KiB of shared memory allows: 80 registers, no spill
TAIL_FAULTS = (0, 1, 2)
float16 = types.float16
# 16-byte shared accesses need A's staged strip on 16 bytes; the simulator
# refuses an alignment (its shared arrays' addresses are 1024-byte aligned).
A_ALIGN = None if config.ENABLE_CUDASIM else 16


@device_inline
def _dot8(a, b):
    """The sum of eight fp16 products, ``a`` and ``b`` four words each."""
    return _dot2(a[0], b[0]) + _dot2(a[1], b[1]) + _dot2(a[2], b[2]) + _dot2(a[3], b[3])


@device_inline
def _dot2(a, b):
    a0, a1 = cvt.f16x2_to_f32x2(a)
    b0, b1 = cvt.f16x2_to_f32x2(b)
    return a0 * b0 + a1 * b1


@device_inline
def row_dot(x, i, w, j, lane, k):
    """``x[i, :] . w[j, :]`` over ``k`` as lane ``lane``'s share (fp16 rows,
    fp32 sums): 16-byte loads of both where they allow, two steps issued
    before either is used (the second step's loads, past the row, read the
    first's again and are not summed: no branch around a load)."""
    acc = float32(0.0)
    if k % 8 == 0 and vload.aligned16(x) and vload.aligned16(w):
        nv = k >> 3
        xi = i * k
        wj = j * k
        for v in range(lane, nv, 64):
            v2 = v + 32
            u = v2 if v2 < nv else v
            xa = vload.ldg_v4(x, xi + 8 * v)
            wa = vload.ldg_v4(w, wj + 8 * v)
            xb = vload.ldg_v4(x, xi + 8 * u)
            wb = vload.ldg_v4(w, wj + 8 * u)
            # both steps' sums made whatever v2 is and the second selected
            # away past the row: a branch around it lets ptxas sink the
            # second step's loads below the first step's use (one step in
            # flight, not two)
            da = _dot8(xa, wa)
            db = _dot8(xb, wb)
            acc += da
            acc += db if v2 < nv else float32(0.0)
    else:
        for kk in range(lane, k, 32):
            acc += float32(x[i, kk]) * float32(w[j, kk])
    return acc


@functools.lru_cache(maxsize=None)
def make_proj(LORA: bool):
    """``proj(y, x, w, t, b, s)``; without ``LORA`` ``t``, ``b`` and ``s``
    are not read (the branch compiles away)."""

    @L.jit_bounded(WARPS * L.WARP_SIZE)
    def proj(y, x, w, t, b, s):
        lane = cuda.threadIdx.x & 31
        col = cuda.blockIdx.x * WARPS + (cuda.threadIdx.x >> 5)
        m = x.shape[0]
        k = x.shape[1]
        if col >= w.shape[0]:
            return  # the whole warp: one column per warp
        i0 = cuda.blockIdx.y * ROWS
        i1 = min(i0 + ROWS, m)
        for i in range(i0, i1):
            acc = row_dot(x, i, w, col, lane, k)
            if LORA:
                up = float32(0.0)
                for j in range(lane, t.shape[1], 32):
                    up += t[i, j] * float32(b[col, j])
                acc += s * up
            acc = warp_sum(acc)
            if lane == 0:
                y[i, col] = acc  # rounded to fp16 by the store

    return proj


@functools.lru_cache(maxsize=None)
def make_xa():
    """``xa(t, x, a)``: ``t[i, j] = x[i, :] . A[j, :]`` in fp32."""

    @L.jit_bounded(WARPS * L.WARP_SIZE)
    def xa(t, x, a):
        lane = cuda.threadIdx.x & 31
        g = cuda.blockIdx.x * WARPS + (cuda.threadIdx.x >> 5)
        r = a.shape[0]
        k = x.shape[1]
        i = g // r
        j = g - i * r
        if i >= x.shape[0]:
            return
        acc = warp_sum(row_dot(x, i, a, j, lane, k))
        if lane == 0:
            t[i, j] = acc

    return xa


@functools.lru_cache(maxsize=None)
def make_merge(TAIL_FAULT: int = 0):
    """``merge(dst, w, a, b, s)``: ``dst = fp16(W + s B A)``; ``dst`` may be
    ``w`` (each weight is read, then written, by one thread).

    A block merges a strip of ``MERGE_COLS`` columns over ``MERGE_ROWS``
    rows, ``MERGE_GROUP`` rows a step (``MERGE_RT`` a warp). ``A[:, strip]``
    is staged in shared memory once a block (fp16, as stored; once a step
    where the rank exceeds ``MERGE_RANK`` and goes in chunks), a step's
    ``B`` rows once a step (fp32, a contiguous copy: conflict-free, and a
    warp's reads of it broadcast). Each lane holds an ``8 x MERGE_RT``
    register tile: with ``k % 8 == 0`` and ``dst``, ``w`` and ``a`` on 16
    bytes (decided once a launch, for every thread alike) its eight
    consecutive columns, read from ``W`` and ``A`` 16 bytes a load
    (``vload.ldg_v4``) and written to ``W'`` 16 bytes a store
    (``vload.stg_v4``); otherwise columns ``lane + 32 q``, one fp16 a load
    or store, so that a warp's accesses stay contiguous. Either way each
    weight sums ``b[row, j] * a[j, col]`` in fp32 for ``j = 0 .. r-1`` in
    that order and is rounded to fp16 once, as one thread per weight did.

    ``TAIL_FAULT`` (tests only, default 0) plants a fault in the 16-byte
    path: 1 leaves each row's last 8-wide group unwritten, 2 adds its
    adapter term twice."""
    if TAIL_FAULT not in TAIL_FAULTS:
        raise ValueError(f"TAIL_FAULT={TAIL_FAULT}: one of {TAIL_FAULTS}")

    @L.jit_bounded(MERGE_THREADS, MERGE_MIN_BLOCKS)
    def merge(dst, w, a, b, s):
        a_s = cuda.shared.array(A_STAGE, float16, alignment=A_ALIGN)  # A[chunk, strip], row-major
        b_s = cuda.shared.array(B_STAGE, float32)  # B[step's rows, chunk], row-major
        wv = cuda.local.array(W_WORDS, uint32)  # the 16-byte path's W rows, packed
        av = cuda.local.array(8, float32)  # one rank's A at the lane's columns
        acc = cuda.local.array(TILE, float32)
        o = cuda.local.array(4, uint32)  # a row's eight merged weights, packed
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        n = w.shape[0]
        k = w.shape[1]
        r = a.shape[0]
        c0 = cuda.blockIdx.x * MERGE_COLS
        row0 = cuda.blockIdx.y * MERGE_ROWS
        row1 = min(row0 + MERGE_ROWS, n)
        vec = k % 8 == 0 and vload.aligned16(w) and vload.aligned16(dst) and vload.aligned16(a)
        col = c0 + 8 * lane  # the 16-byte path's first column
        live = col + 8 < k if TAIL_FAULT == 1 else col < k
        a_at = smem.smem_addr(a_s)
        nchunks = (r + MERGE_RANK - 1) // MERGE_RANK
        for g0 in range(row0, row1, MERGE_GROUP):  # block-uniform: every thread reaches the barriers
            rw = g0 + warp * MERGE_RT
            for q in range(8 * MERGE_RT):
                acc[q] = float32(0.0)
            for c in range(nchunks):
                j0 = c * MERGE_RANK
                cr = min(MERGE_RANK, r - j0)
                cuda.syncthreads()  # the last step's readers are done with both stages
                if nchunks > 1 or g0 == row0:
                    if vec:
                        for e in range(tid, cr * 32, MERGE_THREADS):
                            j = e >> 5
                            cc = c0 + 8 * (e & 31)
                            y0 = y1 = y2 = y3 = uint32(0)  # past the row: zeros, summed but not stored
                            if cc < k:
                                y0, y1, y2, y3 = vload.ldg_v4(a, (j0 + j) * k + cc)
                            smem.st_shared_v4(a_at + 2 * (j * MERGE_COLS + 8 * (e & 31)), y0, y1, y2, y3)
                    else:
                        for e in range(tid, cr * MERGE_COLS, MERGE_THREADS):
                            cc = c0 + (e & (MERGE_COLS - 1))
                            if cc < k:
                                a_s[e] = a[j0 + e // MERGE_COLS, cc]
                            else:
                                a_s[e] = float32(0.0)  # past the row: summed but not stored
                for e in range(tid, MERGE_GROUP * cr, MERGE_THREADS):
                    rl = e // cr
                    b_s[e] = float32(b[g0 + rl, j0 + e - rl * cr]) if g0 + rl < n else float32(0.0)
                cuda.syncthreads()
                for j in range(cr):
                    if vec:
                        z0, z1, z2, z3 = smem.ld_shared_v4(a_at + 2 * (j * MERGE_COLS + 8 * lane))
                        av[0], av[1] = cvt.f16x2_to_f32x2(z0)
                        av[2], av[3] = cvt.f16x2_to_f32x2(z1)
                        av[4], av[5] = cvt.f16x2_to_f32x2(z2)
                        av[6], av[7] = cvt.f16x2_to_f32x2(z3)
                    else:
                        for q in range(8):
                            av[q] = float32(a_s[j * MERGE_COLS + lane + 32 * q])
                    for i in range(MERGE_RT):
                        bj = b_s[(warp * MERGE_RT + i) * cr + j]
                        for q in range(8):
                            acc[8 * i + q] += bj * av[q]
            for h in range(0, MERGE_RT, W_ROWS):
                if vec and live:  # W_ROWS rows of W: both loads issued before either is used
                    for u in range(W_ROWS):
                        x0 = x1 = x2 = x3 = uint32(0)  # past the last row: written anyway, so not carried
                        if rw + h + u < n:
                            x0, x1, x2, x3 = vload.ldg_v4(w, (rw + h + u) * k + col)
                        wv[4 * u] = x0
                        wv[4 * u + 1] = x1
                        wv[4 * u + 2] = x2
                        wv[4 * u + 3] = x3
                for u in range(W_ROWS):
                    i = h + u
                    row = rw + i
                    if row < n:
                        if vec:
                            if live:
                                if TAIL_FAULT == 2 and col + 8 == k:
                                    for q in range(8):
                                        acc[8 * i + q] += acc[8 * i + q]
                                for p in range(4):
                                    lo, hi = cvt.f16x2_to_f32x2(wv[4 * u + p])
                                    o[p] = cvt.f32x2_to_f16x2(
                                        lo + s * acc[8 * i + 2 * p], hi + s * acc[8 * i + 2 * p + 1]
                                    )
                                vload.stg_v4(dst, row * k + col, o[0], o[1], o[2], o[3])
                        else:
                            for q in range(8):
                                cc = c0 + lane + 32 * q
                                if cc < k:
                                    dst[row, cc] = float32(w[row, cc]) + s * acc[8 * i + q]  # one rounding, to fp16

    return merge


def proj_grid(m: int, n: int) -> tuple[tuple[int, int], int]:
    threads = L.check_block(WARPS * L.WARP_SIZE)
    return L.check_grid((L.blocks_for(n, WARPS), L.blocks_for(m, ROWS))), threads


def xa_grid(m: int, r: int) -> tuple[int, int]:
    return L.grid_1d(m * r * L.WARP_SIZE, WARPS * L.WARP_SIZE)


def merge_grid(n: int, k: int) -> tuple[tuple[int, int], int]:
    threads = L.check_block(MERGE_THREADS)
    return L.check_grid((L.blocks_for(k, MERGE_COLS), L.blocks_for(n, MERGE_ROWS))), threads
