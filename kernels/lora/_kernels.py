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
  format): one thread per weight, the rank-r sum in fp32, one rounding.
  Out of place, so a swap re-merges from the kept base weights.

FP32 CUDA cores throughout (no tensor cores): the adapter's share of the
work is small (``r / k``), and what the levers choose between is where the
adapter is applied, which these kernels measure alike for both variants.
"""

from __future__ import annotations

import functools

from numba import cuda, float32

from ..common import cvt, vload
from ..common import launch as L
from ..common.warp import warp_sum  # lane 0 ends with the 32 lanes' total

WARPS = 4  # warps (output columns) per projection block
ROWS = 8  # rows of x one warp carries through its weight row
MERGE_THREADS = 128


@cuda.jit(device=True, inline="always")
def _dot8(a, b):
    """The sum of eight fp16 products, ``a`` and ``b`` four words each."""
    return _dot2(a[0], b[0]) + _dot2(a[1], b[1]) + _dot2(a[2], b[2]) + _dot2(a[3], b[3])


@cuda.jit(device=True, inline="always")
def _dot2(a, b):
    a0, a1 = cvt.f16x2_to_f32x2(a)
    b0, b1 = cvt.f16x2_to_f32x2(b)
    return a0 * b0 + a1 * b1


@cuda.jit(device=True, inline="always")
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
            acc += _dot8(xa, wa)
            if v2 < nv:
                acc += _dot8(xb, wb)
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
def make_merge():
    """``merge(dst, w, a, b, s)``: ``dst = fp16(W + s B A)``; ``dst`` may be
    ``w``. One thread per weight, in row-major order (coalesced)."""

    @L.jit_bounded(MERGE_THREADS)
    def merge(dst, w, a, b, s):
        e = cuda.blockIdx.x * MERGE_THREADS + cuda.threadIdx.x
        k = w.shape[1]
        row = e // k
        if row >= w.shape[0]:
            return
        kk = e - row * k
        acc = float32(0.0)
        for j in range(a.shape[0]):
            acc += float32(b[row, j]) * float32(a[j, kk])
        dst[row, kk] = float32(w[row, kk]) + s * acc  # one rounding, to fp16

    return merge


def proj_grid(m: int, n: int) -> tuple[tuple[int, int], int]:
    threads = L.check_block(WARPS * L.WARP_SIZE)
    return L.check_grid((L.blocks_for(n, WARPS), L.blocks_for(m, ROWS))), threads


def xa_grid(m: int, r: int) -> tuple[int, int]:
    return L.grid_1d(m * r * L.WARP_SIZE, WARPS * L.WARP_SIZE)


def merge_grid(n: int, k: int) -> tuple[int, int]:
    return L.grid_1d(n * k, MERGE_THREADS)
