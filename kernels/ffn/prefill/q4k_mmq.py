"""Q4_K MMQ: the dense-FFN GEMM on GGUF Q4_K weights, as llama.cpp's MMQ
does it. Activations are quantised to int8 per block of 32 (``q8``: a
scale ``d8`` and ``s8 = d8 * sum(q)`` per block); each 32-value sub-block of
a Q4_K super-block contributes, for activation block ``b`` of row ``r`` and
weight sub-block ``b`` of column ``n``::

    d8[r, b] * (d * sc)[n, b] * dot(q8, q4)  -  (dmin * m)[n, b] * s8[r, b]

with ``dot`` the exact integer dot product of the int8 activations and the
4-bit values (0..15), on ``mma.sync.aligned.m16n8k32`` s8 (``common/mma``).

Tiling: blocks of two warps, 32 rows x 16 columns of
``c``; one K stage per Q4_K super-block (256 values). A stage puts in
shared memory the activations' bytes (32 x 256) and their eight ``d8`` and
``s8`` per row, the weights' 4-bit values unpacked to bytes (16 x 256, value
order) and per column and sub-block ``d * sc`` and ``dmin * m`` in float32,
unpacked from the block's fp16 ``d``, ``dmin`` and 12 scale bytes in
``common.q4k``'s layout. Then per sub-block: one A fragment, two n8 MMAs
from zero, and each thread folds its eight dot products into its running
float32 sums with the formula above. Rows past ``m`` and columns past ``n``
are staged as zeros (scales too) and not stored. ``k % 256 == 0``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint8, uint16

from ...common import launch as L
from ...common import mma, q4k
from . import q8_blocks

WARPS_M = 2
TM, TN = mma.M * WARPS_M, 2 * mma.N
THREADS = mma.WARP * WARPS_M
QK = q4k.QK_K
SUBS = QK // q4k.SUB  # 8 sub-blocks of 32
QS = q4k.BLOCK_BYTES - 16  # 128 bytes of 4-bit values


@cuda.jit(device=True, inline="always")
def _f16(lo, hi):
    """float32 of the little-endian fp16 in bytes ``lo``, ``hi``."""
    h = cuda.local.array(1, dtype=uint16)
    h[0] = uint16(lo) | (uint16(hi) << uint16(8))
    return float32(h.view(np.float16)[0])


@cuda.jit(device=True, inline="always")
def _scale_min(blocks, row, base, j):
    """The 6-bit scale and min of sub-block ``j`` of the super-block whose
    first byte is ``blocks[row, base]`` (``common.q4k``'s packing)."""
    s = base + 4
    if j < 4:
        sc = int32(blocks[row, s + j]) & 63
        mn = int32(blocks[row, s + j + 4]) & 63
    else:
        sc = (int32(blocks[row, s + j + 4]) & 15) | ((int32(blocks[row, s + j - 4]) >> 6) << 4)
        mn = (int32(blocks[row, s + j + 4]) >> 4) | ((int32(blocks[row, s + j]) >> 6) << 4)
    return sc, mn


@cuda.jit(device=True, inline="always")
def _fold(acc, dot, D8, S8, DSC, DMM, r, col, j):
    return acc + float32(dot) * (D8[r, j] * DSC[col, j]) - DMM[col, j] * S8[r, j]


@cuda.jit(device=True, inline="always")
def _store(c, m, n, r0, n0, lane, i, v):
    r, col = mma.c_elem(lane, i)
    if r0 + r < m and n0 + col < n:
        c[r0 + r, n0 + col] = np.float16(v)


@lru_cache(maxsize=None)
def make_q4k_mmq(SUBS_USED: int = SUBS):
    """Compile the kernel ``(c, aq, d8, s8, blocks)``. ``SUBS_USED`` (tests
    only): below 8 the last sub-blocks of every super-block are skipped, a
    broken variant the check must reject."""

    @cuda.jit
    def q4k_mmq(c, aq, d8, s8, blocks):
        m = aq.shape[0]
        k = aq.shape[1]
        n = blocks.shape[0]
        As = cuda.shared.array((TM, QK), dtype=uint8)
        Bs = cuda.shared.array((TN, QK), dtype=uint8)
        D8 = cuda.shared.array((TM, SUBS), dtype=float32)
        S8 = cuda.shared.array((TM, SUBS), dtype=float32)
        DSC = cuda.shared.array((TN, SUBS), dtype=float32)
        DMM = cuda.shared.array((TN, SUBS), dtype=float32)
        tid = cuda.threadIdx.x
        lane = cuda.laneid
        wr = (tid // mma.WARP) * mma.M
        r0 = cuda.blockIdx.y * TM
        n0 = cuda.blockIdx.x * TN
        d0 = d1 = d2 = d3 = float32(0.0)
        e0 = e1 = e2 = e3 = float32(0.0)
        for sb in range(k // QK):
            k0 = sb * QK
            base = sb * q4k.BLOCK_BYTES
            for idx in range(tid, TM * QK, THREADS):
                r = idx // QK
                kk = idx - r * QK
                v = uint8(0)
                if r0 + r < m:
                    v = uint8(int32(aq[r0 + r, k0 + kk]) & 0xFF)
                As[r, kk] = v
            for idx in range(tid, TM * SUBS, THREADS):
                r = idx // SUBS
                j = idx - r * SUBS
                a = float32(0.0)
                b = float32(0.0)
                if r0 + r < m:
                    a = d8[r0 + r, sb * SUBS + j]
                    b = s8[r0 + r, sb * SUBS + j]
                D8[r, j] = a
                S8[r, j] = b
            for idx in range(tid, TN * QS, THREADS):
                r = idx // QS
                byte = idx - r * QS
                x = uint8(0)
                if n0 + r < n:
                    x = blocks[n0 + r, base + 16 + byte]
                chunk = byte >> 5
                pos = 64 * chunk + (byte & 31)
                Bs[r, pos] = x & uint8(15)
                Bs[r, pos + 32] = x >> uint8(4)
            for idx in range(tid, TN * SUBS, THREADS):
                r = idx // SUBS
                j = idx - r * SUBS
                a = float32(0.0)
                b = float32(0.0)
                if n0 + r < n:
                    row = n0 + r
                    sc, mn = _scale_min(blocks, row, base, j)
                    a = _f16(blocks[row, base], blocks[row, base + 1]) * float32(sc)
                    b = _f16(blocks[row, base + 2], blocks[row, base + 3]) * float32(mn)
                DSC[r, j] = a
                DMM[r, j] = b
            cuda.syncthreads()
            for j in range(SUBS_USED):
                a0, a1, a2, a3 = mma.load_a_s8(As, wr, j * q4k.SUB)
                b0, b1 = mma.load_b_s8(Bs, 0, j * q4k.SUB)
                x0, x1, x2, x3 = mma.mma_s8_16832(a0, a1, a2, a3, b0, b1, int32(0), int32(0), int32(0), int32(0))
                b0, b1 = mma.load_b_s8(Bs, mma.N, j * q4k.SUB)
                y0, y1, y2, y3 = mma.mma_s8_16832(a0, a1, a2, a3, b0, b1, int32(0), int32(0), int32(0), int32(0))
                r, col = mma.c_elem(lane, 0)
                d0 = _fold(d0, x0, D8, S8, DSC, DMM, wr + r, col, j)
                e0 = _fold(e0, y0, D8, S8, DSC, DMM, wr + r, col + mma.N, j)
                r, col = mma.c_elem(lane, 1)
                d1 = _fold(d1, x1, D8, S8, DSC, DMM, wr + r, col, j)
                e1 = _fold(e1, y1, D8, S8, DSC, DMM, wr + r, col + mma.N, j)
                r, col = mma.c_elem(lane, 2)
                d2 = _fold(d2, x2, D8, S8, DSC, DMM, wr + r, col, j)
                e2 = _fold(e2, y2, D8, S8, DSC, DMM, wr + r, col + mma.N, j)
                r, col = mma.c_elem(lane, 3)
                d3 = _fold(d3, x3, D8, S8, DSC, DMM, wr + r, col, j)
                e3 = _fold(e3, y3, D8, S8, DSC, DMM, wr + r, col + mma.N, j)
            cuda.syncthreads()
        rr = r0 + wr
        _store(c, m, n, rr, n0, lane, 0, d0)
        _store(c, m, n, rr, n0, lane, 1, d1)
        _store(c, m, n, rr, n0, lane, 2, d2)
        _store(c, m, n, rr, n0, lane, 3, d3)
        cc = n0 + mma.N
        _store(c, m, n, rr, cc, lane, 0, e0)
        _store(c, m, n, rr, cc, lane, 1, e1)
        _store(c, m, n, rr, cc, lane, 2, e2)
        _store(c, m, n, rr, cc, lane, 3, e3)

    return q4k_mmq


def supports(k: int) -> str:
    if k <= 0 or k % QK:
        return f"k={k} is not a multiple of the Q4_K super-block ({QK})"
    return ""


def build(shape, kern=None):
    m, k = shape["m"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"q4k_mmq: {why}")
    kern = kern or make_q4k_mmq()
    L.check_shared(TM * QK + TN * QK + 4 * SUBS * (2 * TM + 2 * TN))
    grid = L.check_grid((L.blocks_for(shape["n"], TN), L.blocks_for(m, TM)))
    threads = L.check_block(THREADS)
    quant = q8_blocks.launcher()
    aq = cuda.device_array((m, k), dtype=np.int8)
    d8 = cuda.device_array((m, k // q8_blocks.BLOCK), dtype=np.float32)
    s8 = cuda.device_array((m, k // q8_blocks.BLOCK), dtype=np.float32)

    def launch(bufs):
        quant(aq, d8, s8, bufs["a"])
        kern[grid, threads](bufs["c"], aq, d8, s8, bufs["w_q4k"])

    launch.workspace = {"aq": aq, "d8": d8, "s8": s8}
    launch.tensor_cores = "mma.sync"
    launch.tc_dtype = "s8"
    return launch
