"""The int8 GEMM body shared by the faith2 and faith5 tilings:
``c[m, n] = fp16((acc * sa[row]) * sw[col])`` with ``acc`` the exact s32 dot
product of int8 activations ``aq[m, k]`` and int8 weights ``wq[n, k]``, on
``mma.sync.aligned.m16n8k32`` s8 (``common/mma.py``).

A block of ``WARPS_M x WARPS_N`` warps owns a tile of ``16 WARPS_M`` rows by
``16 WARPS_N`` columns; each warp a 16 x 16 tile, two n8 MMAs per k32 step
sharing one A fragment. Each K stage of ``32 K_STEPS`` inputs is staged
through shared memory as bytes, zero-filled past ``m``, ``n`` and ``k``
(so any ``k`` works, and lanes past the edges feed zeros to the MMA, which
every lane of the warp must issue), and the fragments are loaded from the
staged tiles by ``mma.load_a_s8``/``load_b_s8``::

    stage:  As[TM, TK] <- aq[r0 .. r0+TM, k0 .. k0+TK]   (bytes, zero past the edges)
            Bs[TN, TK] <- wq[n0 .. n0+TN, k0 .. k0+TK]
    warp (wm, wn):  rows 16 wm .. +16 of As, columns 16 wn .. +16 of Bs
            for each k32 of the stage: 2 x mma.m16n8k32.s8 (s32 accumulators)

Integer sums are exact and the products of 127 x 127 over any real ``k``
stay far inside s32 (12288 x 16129 < 2^28), so every tiling and K order
gives the same ``acc``; the epilogue is the same float32 expression in
both. The two tilings' outputs are bitwise identical, which the tests hold.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint8

from ...common import launch as L
from ...common import mma

MMA_K = 32  # m16n8k32
WARP_N = 2 * mma.N  # two n8 MMAs per warp


@cuda.jit(device=True, inline="always")
def _byte(x):
    """An int8 value as its two's-complement byte."""
    return uint8(int32(x) & int32(0xFF))


@cuda.jit(device=True, inline="always")
def _store(c, sa, sw, m, n, r0, n0, lane, i, acc):
    r, col = mma.c_elem(lane, i)
    gr = r0 + r
    gc = n0 + col
    if gr < m and gc < n:
        c[gr, gc] = np.float16(float32(acc) * sa[gr] * sw[gc])


@lru_cache(maxsize=None)
def make_int8_gemm(WARPS_M: int, WARPS_N: int, K_STEPS: int, K_LIMIT: int = 0):
    """Compile the kernel ``(c, aq, sa, wq, sw)``. ``K_LIMIT`` (tests only):
    when positive, stages past it are skipped, a broken variant the check
    must reject."""
    TM = mma.M * WARPS_M
    TN = WARP_N * WARPS_N
    TK = MMA_K * K_STEPS
    THREADS = mma.WARP * WARPS_M * WARPS_N

    @cuda.jit
    def int8_gemm(c, aq, sa, wq, sw):
        m = aq.shape[0]
        k = aq.shape[1]
        n = wq.shape[0]
        As = cuda.shared.array((TM, TK), dtype=uint8)
        Bs = cuda.shared.array((TN, TK), dtype=uint8)
        tid = cuda.threadIdx.x
        warp = tid // mma.WARP
        lane = cuda.laneid
        wr = (warp % WARPS_M) * mma.M
        wc = (warp // WARPS_M) * WARP_N
        r0 = cuda.blockIdx.y * TM
        n0 = cuda.blockIdx.x * TN
        d0 = int32(0)
        d1 = int32(0)
        d2 = int32(0)
        d3 = int32(0)
        e0 = int32(0)
        e1 = int32(0)
        e2 = int32(0)
        e3 = int32(0)
        k_end = k
        if K_LIMIT > 0:
            k_end = min(k, K_LIMIT)
        for k0 in range(0, k_end, TK):
            for idx in range(tid, TM * TK, THREADS):
                r = idx // TK
                kk = idx - r * TK
                v = uint8(0)
                if r0 + r < m and k0 + kk < k:
                    v = _byte(aq[r0 + r, k0 + kk])
                As[r, kk] = v
            for idx in range(tid, TN * TK, THREADS):
                r = idx // TK
                kk = idx - r * TK
                v = uint8(0)
                if n0 + r < n and k0 + kk < k:
                    v = _byte(wq[n0 + r, k0 + kk])
                Bs[r, kk] = v
            cuda.syncthreads()
            for s in range(K_STEPS):
                a0, a1, a2, a3 = mma.load_a_s8(As, wr, s * MMA_K)
                b0, b1 = mma.load_b_s8(Bs, wc, s * MMA_K)
                d0, d1, d2, d3 = mma.mma_s8_16832(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
                b0, b1 = mma.load_b_s8(Bs, wc + mma.N, s * MMA_K)
                e0, e1, e2, e3 = mma.mma_s8_16832(a0, a1, a2, a3, b0, b1, e0, e1, e2, e3)
            cuda.syncthreads()
        rr = r0 + wr
        cc = n0 + wc
        _store(c, sa, sw, m, n, rr, cc, lane, 0, d0)
        _store(c, sa, sw, m, n, rr, cc, lane, 1, d1)
        _store(c, sa, sw, m, n, rr, cc, lane, 2, d2)
        _store(c, sa, sw, m, n, rr, cc, lane, 3, d3)
        cc = cc + mma.N
        _store(c, sa, sw, m, n, rr, cc, lane, 0, e0)
        _store(c, sa, sw, m, n, rr, cc, lane, 1, e1)
        _store(c, sa, sw, m, n, rr, cc, lane, 2, e2)
        _store(c, sa, sw, m, n, rr, cc, lane, 3, e3)

    return int8_gemm


def tile(WARPS_M: int, WARPS_N: int) -> tuple[int, int]:
    return mma.M * WARPS_M, WARP_N * WARPS_N


def launcher(WARPS_M: int, WARPS_N: int, K_STEPS: int, K_LIMIT: int = 0):
    kernel = make_int8_gemm(WARPS_M, WARPS_N, K_STEPS, K_LIMIT)
    threads = L.check_block(mma.WARP * WARPS_M * WARPS_N)
    tm, tn = tile(WARPS_M, WARPS_N)
    L.check_shared((tm + tn) * MMA_K * K_STEPS)

    def run(c, aq, sa, wq, sw):
        grid = L.check_grid((L.blocks_for(wq.shape[0], tn), L.blocks_for(aq.shape[0], tm)))
        kernel[grid, threads](c, aq, sa, wq, sw)

    return run
