"""The contiguous-batch W4A16 GEMV body shared by ``proj_batch4`` and
``proj_batch16``: ``Y[m, n] = X[m, k] W[n, k]^T`` for ``m <= MROWS``
rows (decode sequences), each weight read once for all of them.

Same walk as ``w4a16.gemv_sw`` (``w4a16/_warp_rows``): ``WARPS`` warps per
block, warp ``w`` on output row ``blockIdx.x * WARPS + w``, blocks striding
over row groups, lane ``l`` on packed words ``l, l + 32, ...`` of the row.
The difference is the activations: per K-chunk the block stages every
row's chunk (``MROWS`` copies of ``common.int4_device``'s nibble-transposed
layout, conflict-free reads), and a lane decodes each int4 word once into
8 registers, then multiplies them against each live row, keeping one fp32
accumulator per row::

    word = qweight[row, gw]           (one coalesced load for all m rows)
    q[0..7] = nibbles(word) * scale   (decoded once)
    for r < m:  acc[r] += sum_j q[j] * xs[r][j, gw]
    ... one shuffle reduction per live row, lane 0 writes Y[r, row] (fp16)

So the weight traffic, which bounds a GEMV, is paid once for the batch
instead of once per row. ``MROWS`` and ``KCHUNK`` are compile-time: 4 rows
with chunks of 2048 inputs, or 16 rows with chunks of 512 (33 KiB of
shared memory either way).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ...common import launch as L
from ...common.int4_device import chunk_layout, nibble
from ...common.warp import warp_sum

DEFAULT_WARPS = 4
MAX_RESIDENT_BLOCKS = 132 * 8


@lru_cache(maxsize=None)
def make_batch_gemv(MROWS: int, KCHUNK: int, WARPS: int = DEFAULT_WARPS, ROWS_USED: int = 0):
    """The kernel ``(y, qweight, scales, x)`` for up to ``MROWS`` rows.
    ``ROWS_USED`` (tests only), when not 0, multiplies only that many rows'
    activations, as if the kernel read a row too few."""
    L.check_block(WARPS * L.WARP_SIZE, warps=True)
    KWC, STRIDE, XS = chunk_layout(KCHUNK)
    NT = WARPS * 32
    USED = ROWS_USED or MROWS
    XS_ALL = MROWS * XS  # a constant here: the kernel's shared array needs one

    @cuda.jit
    def gemv_batch(y, qweight, scales, x):
        m = x.shape[0]
        k = x.shape[1]
        n = qweight.shape[0]
        kw = qweight.shape[1]
        xs = cuda.shared.array(XS_ALL, np.float32)
        acc = cuda.local.array(MROWS, np.float32)
        qv = cuda.local.array(8, np.float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:  # block-uniform: every thread reaches the barriers
            row = rb + warp
            for r in range(MROWS):
                acc[r] = float32(0.0)
            for c in range(nchunks):
                c0 = c * KCHUNK
                if nchunks > 1 or not staged:
                    cuda.syncthreads()  # the previous chunk fully read
                    for e in range(tid, m * KCHUNK, NT):
                        r = e // KCHUNK
                        ke = e - r * KCHUNK
                        if c0 + ke < k:
                            xs[uint32(r * XS + (ke & 7) * STRIDE + (ke >> 3))] = float32(x[r, c0 + ke])
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    w0 = c * KWC
                    w1 = min(kw, w0 + KWC)
                    for gw in range(w0 + lane, w1, 32):
                        word = qweight[row, gw]
                        s = float32(scales[row, gw >> 4])
                        for j in range(8):
                            qv[j] = nibble(word, j) * s
                        col = gw - w0
                        for r in range(MROWS):
                            if r < m and r < USED:
                                a = acc[r]
                                for j in range(8):
                                    a += qv[j] * xs[uint32(r * XS + j * STRIDE + col)]
                                acc[r] = a
            if row < n:  # warp-uniform
                for r in range(MROWS):
                    if r < m:
                        v = warp_sum(acc[r])
                        if lane == 0:
                            y[r, row] = v
            rb += cuda.gridDim.x * WARPS

    return gemv_batch


def shared_bytes(MROWS: int, KCHUNK: int) -> int:
    return 4 * MROWS * chunk_layout(KCHUNK)[2]


def make_build(MROWS: int, KCHUNK: int):
    """A variant's ``build(shape)`` for the ``MROWS``-row tier."""

    def build(shape, WARPS: int = DEFAULT_WARPS, ROWS_USED: int = 0):
        m, n, k = shape["m"], shape["n"], shape["k"]
        if not 1 <= m <= MROWS:
            raise ValueError(f"the {MROWS}-row GEMV tier takes 1 to {MROWS} rows, not {m}")
        if k % 8:
            raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
        kern = make_batch_gemv(MROWS, KCHUNK, WARPS, ROWS_USED)
        L.check_shared(shared_bytes(MROWS, KCHUNK))
        grid = L.check_grid(min(L.blocks_for(n, WARPS), MAX_RESIDENT_BLOCKS))
        threads = L.check_block(WARPS * L.WARP_SIZE, warps=True)

        def launch(bufs):
            kern[grid, threads](bufs["y"], bufs["qweight"], bufs["scales"], bufs["x"])

        return launch

    return build
