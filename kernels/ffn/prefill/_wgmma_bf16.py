"""The BF16 tensor-core GEMM body of the ``bf16_v1`` and ``bf16_v2`` arms:
``c[m, n] = a[m, k] @ W[n, k].T`` on Hopper's ``wgmma.mma_async``
m64nNk16 with bf16 inputs and f32 accumulators (``common/wgmma.py``,
sm_90a). ``a`` is bf16 (bits in a uint16 array, passed as uint32 pairs),
``W`` the int4 weights as stored (``common/int4``), dequantised to bf16 in
registers while they are staged; ``c`` fp16, rounded once from f32.

A block is ``WGS`` warpgroups (128 threads each) and owns ``64 WGS`` rows by
``BN`` columns; warpgroup ``g`` multiplies rows ``64 g .. 64 g + 63`` of the
staged A tile by the whole staged B tile. v1: one warpgroup, 64 x 128
tiles. v2: two warpgroups, 128 x 64 tiles (the 128-row tile the engine's v2
prefers: each staged weight tile feeds twice the rows). K goes by in stages
of ``BK = 64``, two in flight, both operands K-major in the no-swizzle
layout of core matrices (8 rows x 16 bytes; LBO = 128 bytes along K, SBO =
1024 bytes per 8 rows)::

    stage: As  64 WGS x 64 bf16          Bs  BN x 64 bf16 (W's rows, dequantised)
    v1: 8 + 16 KiB per stage; v2: 16 + 8 KiB; two stages: 48 KiB, the static limit

    load stage 0; fence.proxy.async; barrier
    for each stage t:
        wgmma.fence; 4 x wgmma m64nBNk16 (K sub-steps of 16); commit
        load stage t + 1 into the other buffer (overlaps the MMAs)
        wait_group 0; fence.proxy.async; barrier
    store: one fp16 rounding per element, rows past m and columns past n left out

Who stages what: one 16-byte core-matrix row is 8 consecutive k of one row,
one packed int4 word of W; eight consecutive threads fill one core matrix's
128 contiguous bytes (one ``st.shared.v4`` each). A weight becomes the exact
fp32 ``(q - 8) * scale`` and is rounded once to bf16 (``cvt.rn.bf16x2.f32``,
<= 2^-9 relative), the arm's only rounding besides the output's. Rows and k
past the edges are staged as zeros. ``k % 16 == 0``; a stage never
straddles a scale group (128 is a multiple of 64).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, uint32

from ...common import cvt, int4
from ...common import launch as L
from ...common import wgmma as wg
from ...common.int4_device import nibble

BM, BK = wg.M, 64
KSUB = BK // wg.K_BF16
LBO = wg.LBO
SBO = (BK * 2 // wg.CORE_BYTES) * wg.LBO
STEP = 2 * wg.LBO  # one instruction's K: 16 bf16 = 32 bytes, two core matrices
CHUNKS = BK // 8
WG_ROWS_BYTES = BM * BK * 2  # one warpgroup's 64 rows of a staged A tile
assert BK % int4.PACK == 0 and int4.GROUP % BK == 0


def shared_bytes(wgs: int, bn: int) -> int:
    return 2 * (BM * wgs + bn) * BK * 2


@cuda.jit(device=True, inline="always")
def _chunk(c):
    """Thread-chunk ``c`` -> (tile row, 16-byte chunk along K), the 8 rows
    of a core matrix first (conflict-free 16-byte stores)."""
    kc = (c >> 3) % CHUNKS
    return ((c >> 3) // CHUNKS) * 8 + (c & 7), kc


def make_stagers(threads: int, group_shift: int = 7):
    """(stage A, stage B) for blocks of ``threads``; ``group_shift`` exists
    for the tests' broken variant (a wrong scale group)."""

    @cuda.jit(device=True, inline="always")
    def load_a(at, a32, m, k, r0, k0, tid, rows):
        for c in range(tid, rows * CHUNKS, threads):
            r, kc = _chunk(c)
            gr = r0 + r
            gk = k0 + kc * 8
            x0 = x1 = x2 = x3 = uint32(0)
            if gr < m and gk < k:
                w = gk >> 1
                x0 = a32[gr, w]
                x1 = a32[gr, w + 1]
                x2 = a32[gr, w + 2]
                x3 = a32[gr, w + 3]
            wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, SBO), x0, x1, x2, x3)

    @cuda.jit(device=True, inline="always")
    def load_b(at, qweight, scales, n, k, n0, k0, tid, bn):
        for c in range(tid, bn * CHUNKS, threads):
            r, kc = _chunk(c)
            gn = n0 + r
            gk = k0 + kc * 8
            x0 = x1 = x2 = x3 = uint32(0)
            if gn < n and gk < k:
                word = qweight[gn, gk >> 3]
                s = np.float32(scales[gn, gk >> group_shift])
                x0 = cvt.f32x2_to_bf16x2(s * nibble(word, 0), s * nibble(word, 1))
                x1 = cvt.f32x2_to_bf16x2(s * nibble(word, 2), s * nibble(word, 3))
                x2 = cvt.f32x2_to_bf16x2(s * nibble(word, 4), s * nibble(word, 5))
                x3 = cvt.f32x2_to_bf16x2(s * nibble(word, 6), s * nibble(word, 7))
            wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, SBO), x0, x1, x2, x3)

    return load_a, load_b


def make_gemm(wgs: int, bn: int, group_shift: int = 7):
    """Compile the kernel ``(c, a32, qweight, scales)`` for ``64 wgs x bn``
    tiles."""
    wg.check_shape("bf16", bn)
    threads = wg.WARPGROUP * wgs
    rows = BM * wgs
    mma, zeros, store = wg.op("bf16", bn), wg.zeros(bn), wg.make_store(bn)
    load_a, load_b = make_stagers(threads, group_shift)
    a_words, b_words = rows * BK // 2, bn * BK // 2
    a_bytes, b_bytes = 4 * a_words, 4 * b_words
    a_len, b_len = 2 * a_words, 2 * b_words
    align = wg.SMEM_ALIGN
    swz = wg.SWIZZLE_NONE

    @L.jit_bounded(threads)
    def gemm_bf16(c, a32, qweight, scales):
        m = a32.shape[0]
        k = 2 * a32.shape[1]
        n = qweight.shape[0]
        As = cuda.shared.array(a_len, np.uint32, alignment=align)
        Bs = cuda.shared.array(b_len, np.uint32, alignment=align)
        tid = cuda.threadIdx.x
        mine = (tid >> 7) * WG_ROWS_BYTES  # this warpgroup's rows of the A tile
        r0 = cuda.blockIdx.y * rows
        n0 = cuda.blockIdx.x * bn
        nk = (k + BK - 1) // BK
        a_at = wg.smem_addr(As)
        b_at = wg.smem_addr(Bs)
        load_a(a_at, a32, m, k, r0, 0, tid, rows)
        load_b(b_at, qweight, scales, n, k, n0, 0, tid, bn)
        wg.fence_proxy_async()
        cuda.syncthreads()
        acc = zeros()
        for kt in range(nk):
            s = kt & 1
            wg.wgmma_fence()
            for j in range(KSUB):
                da = wg.make_desc(a_at + s * a_bytes + mine + j * STEP, LBO, SBO, swz)
                db = wg.make_desc(b_at + s * b_bytes + j * STEP, LBO, SBO, swz)
                acc = mma(da, db, acc, 1, 1, 1, 0, 0)
            wg.wgmma_commit_group()
            if kt + 1 < nk:
                load_a(a_at + (1 - s) * a_bytes, a32, m, k, r0, (kt + 1) * BK, tid, rows)
                load_b(b_at + (1 - s) * b_bytes, qweight, scales, n, k, n0, (kt + 1) * BK, tid, bn)
            wg.wgmma_wait_group(0)
            wg.fence_proxy_async()
            cuda.syncthreads()
        store(c, m, n, r0 + (tid >> 7) * BM, n0, acc)

    gemm_bf16.tile = (rows, bn)
    gemm_bf16.threads = threads
    return gemm_bf16


@lru_cache(maxsize=None)
def kernel(wgs: int, bn: int):
    return make_gemm(wgs, bn)


def supports(k: int) -> str:
    if k <= 0 or k % wg.K_BF16:
        return f"k={k} is not a positive multiple of {wg.K_BF16} (one wgmma K step; no K edge)"
    return ""


def build_with(shape, wgs: int, bn: int, kern=None):
    why = supports(shape["k"])
    if why:
        raise ValueError(f"bf16 wgmma GEMM: {why}")
    kern = kern or kernel(wgs, bn)
    rows, cols = kern.tile
    L.check_shared(shared_bytes(wgs, bn))
    grid = L.check_grid((L.blocks_for(shape["n"], cols), L.blocks_for(shape["m"], rows)))
    L.check_block(kern.threads, warps=True)

    def launch(bufs):
        kern[grid, kern.threads](bufs["c"], bufs["a_bf16"].view(np.uint32), bufs["qweight"], bufs["scales"])

    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "bf16"
    return launch
