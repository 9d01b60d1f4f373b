"""W4A16 GEMM on Hopper's warpgroup MMA: ``c[m, n] = a[m, k] @ W[n, k].T``
through ``wgmma.mma_async`` m64nNk16 with fp16 inputs and f32
accumulators (``common/wgmma.py``), for sm_90a.

``a`` fp16 ``[m, k]``, ``W`` packed as in ``leverctl_kernels.common.int4``
(``qweight uint32[n, k/8]``, ``scales fp16[n, k/128]``), ``c`` fp16
``[m, n]``; ``k % 16 == 0`` (:func:`supports`), m and n free. The
activations are fp16 in this project's W4A16 layout, so the MMA is the
f16 form (bf16 activations would take the bf16 form, same tiles).

Tiling: one warpgroup (128 threads) per block and per 64 x ``BN`` tile of
``c`` (``BN`` = 64 for ``small_m``, 128 for ``default_tiles``;
``blockIdx.x`` along N, ``blockIdx.y`` along M). K goes by in stages of
``BK = 64``, each staged in shared memory, two stages in flight::

    stage s:     A  64 x 64 fp16  (8 KiB)    B = W^T tile, stored Bt[n, k]: BN x 64 fp16
    smem:        As[2 stages]                Bs[2 stages]      (BN = 128: 48 KiB in all)

    load stage 0; fence.proxy.async; barrier
    for each stage t:
        wgmma.fence
        4 x wgmma m64nBNk16 on stage t % 2 (K sub-steps 0, 16, 32, 48)
        wgmma.commit_group
        load stage t + 1 into the other buffer     <- overlaps the MMAs
        wgmma.wait_group 0
        fence.proxy.async; barrier
    store the accumulators (one rounding to fp16)

Both operands are K-major in the no-swizzle layout (``wgmma.core_offset``):
core matrices of 8 rows x 16 bytes; along K the stage has 8 of them (LBO =
128 bytes apart), rows step by SBO = 8 * 128 = 1024 bytes. A K sub-step of
16 fp16 is 32 bytes, two core matrices: the descriptor's start address
advances by 2 * LBO per sub-step.

Who loads what: a 16-byte core-matrix row is 8 consecutive k of one row,
which is exactly one packed int4 word of W (8 nibbles). Threads take the
8 rows of one core matrix first, then the chunks along K, so eight
consecutive threads fill a core matrix's 128 contiguous bytes with one
16-byte store each (``st.shared.v4``: no bank conflict; with K first, the
eight would sit 128 bytes apart, all in the same four banks). A warp reads
16 or 32 contiguous bytes per row from global memory. Each thread takes
whole words: it reads the word and the row's scale for that group, turns
the 8 nibbles into exact fp32 ``q - 8`` (``common.int4_device.nibble``), multiplies by
the scale (exact), rounds each product once to fp16 (``cvt.rn.f16x2.f32``,
pairs) and writes the four fp16 pairs as the row of its core matrix. A's
rows are copied the same way, four 32-bit words per 16 bytes. Rows past
``m`` or ``n`` and k past ``k`` are written as zeros (no out-of-range
read); their results are not stored. Scale groups are 128 wide and stages
64, so a word never straddles a group.

The dequantisation is the only rounding the FMA GEMM (``gemm_tiled``) does
not have: <= 2^-11 relative per weight, as in the ``mma.sync`` GEMM.
Accumulation is f32 for the whole K; the result is rounded to fp16 once.
No swizzle: the no-swizzle layout's stores and the tensor cores' reads are
not bank-conflict free, which a 128-byte swizzle would fix; measured on a
GPU this is where to look first.
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
THREADS = wg.WARPGROUP
KSUB = BK // wg.K_BF16  # wgmma instructions per stage (f16: K = 16, as bf16)
LBO = wg.LBO
SBO = (BK * 2 // wg.CORE_BYTES) * wg.LBO  # 8 core matrices along K per 8 rows
STEP = 2 * wg.LBO  # one instruction's K (16 fp16 = 32 bytes): two core matrices
CHUNKS = BK // 8  # 16-byte rows per tile row (8 fp16; one packed word of W)
TILE_N = {"small_m": 64, "default_tiles": 128}
assert BK % int4.PACK == 0 and int4.GROUP % BK == 0  # a stage never straddles a scale group


def shared_bytes(bn: int) -> int:
    """Static shared memory of a block: two stages of A and of B."""
    return 2 * (BM + bn) * BK * 2


@cuda.jit(device=True, inline="always")
def _chunk(c):
    """Thread-chunk ``c`` -> (tile row, 16-byte chunk along K): the 8 rows
    of a core matrix first, so that eight consecutive threads fill one
    core matrix's 128 contiguous bytes (conflict-free 16-byte stores)."""
    kc = (c >> 3) % CHUNKS
    return ((c >> 3) // CHUNKS) * 8 + (c & 7), kc


@cuda.jit(device=True, inline="always")
def _load_a(at, a32, m, k, r0, k0, tid):
    """Stage ``a[r0:r0+64, k0:k0+BK]`` at shared address ``at``, zeros past
    ``m`` and ``k``. ``a32`` is ``a`` viewed as uint32 pairs."""
    for c in range(tid, BM * CHUNKS, THREADS):
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


def make_load_b(group_shift: int = 7):
    """The dequantising B stager, the scale group taken as ``k >>
    group_shift`` (tests pass a wrong shift to prove the check sees it)."""

    @cuda.jit(device=True, inline="always")
    def load_b(at, qweight, scales, n, k, n0, k0, tid, bn):
        """Stage ``W[n0:n0+bn, k0:k0+BK]`` dequantised to fp16 at shared
        address ``at``, one packed word (8 k) per 16-byte core-matrix row."""
        for c in range(tid, bn * CHUNKS, THREADS):
            r, kc = _chunk(c)
            gn = n0 + r
            gk = k0 + kc * 8
            x0 = x1 = x2 = x3 = uint32(0)
            if gn < n and gk < k:
                word = qweight[gn, gk >> 3]
                s = np.float32(scales[gn, gk >> group_shift])
                x0 = cvt.f32x2_to_f16x2(s * nibble(word, 0), s * nibble(word, 1))
                x1 = cvt.f32x2_to_f16x2(s * nibble(word, 2), s * nibble(word, 3))
                x2 = cvt.f32x2_to_f16x2(s * nibble(word, 4), s * nibble(word, 5))
                x3 = cvt.f32x2_to_f16x2(s * nibble(word, 6), s * nibble(word, 7))
            wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, SBO), x0, x1, x2, x3)

    return load_b


_load_b = make_load_b()


def make_gemm_wgmma(bn: int, load_b=_load_b, ksub: int = KSUB):
    """Compile the kernel ``(c, a32, qweight, scales)`` for 64 x ``bn``
    tiles. ``load_b`` and ``ksub`` exist for the tests' broken variants."""
    wg.check_shape("f16", bn)
    mma, zeros, store = wg.op("f16", bn), wg.zeros(bn), wg.make_store(bn)
    a_words, b_words = BM * BK // 2, bn * BK // 2
    a_bytes, b_bytes = 4 * a_words, 4 * b_words
    a_len, b_len = 2 * a_words, 2 * b_words  # two stages; closure constants, as the shared arrays' sizes must be
    align = wg.SMEM_ALIGN
    swz = wg.SWIZZLE_NONE

    @L.jit_bounded(THREADS)
    def gemm_wgmma(c, a32, qweight, scales):
        m = a32.shape[0]
        k = 2 * a32.shape[1]
        n = qweight.shape[0]
        As = cuda.shared.array(a_len, np.uint32, alignment=align)
        Bs = cuda.shared.array(b_len, np.uint32, alignment=align)
        tid = cuda.threadIdx.x
        r0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * bn
        nk = (k + BK - 1) // BK
        a_at = wg.smem_addr(As)
        b_at = wg.smem_addr(Bs)
        _load_a(a_at, a32, m, k, r0, 0, tid)
        load_b(b_at, qweight, scales, n, k, n0, 0, tid, bn)
        wg.fence_proxy_async()
        cuda.syncthreads()
        acc = zeros()
        for kt in range(nk):
            s = kt & 1
            wg.wgmma_fence()
            for j in range(ksub):
                da = wg.make_desc(a_at + s * a_bytes + j * STEP, LBO, SBO, swz)
                db = wg.make_desc(b_at + s * b_bytes + j * STEP, LBO, SBO, swz)
                acc = mma(da, db, acc, 1, 1, 1, 0, 0)
            wg.wgmma_commit_group()
            if kt + 1 < nk:  # the next stage, while the tensor cores work
                _load_a(a_at + (1 - s) * a_bytes, a32, m, k, r0, (kt + 1) * BK, tid)
                load_b(b_at + (1 - s) * b_bytes, qweight, scales, n, k, n0, (kt + 1) * BK, tid, bn)
            wg.wgmma_wait_group(0)
            wg.fence_proxy_async()
            cuda.syncthreads()
        store(c, m, n, r0, n0, acc)

    gemm_wgmma.tile_n = bn
    return gemm_wgmma


@lru_cache(maxsize=None)
def kernel(bn: int):
    return make_gemm_wgmma(bn)


def supports(m: int, n: int, k: int) -> str:
    """Empty when the kernel can run ``m x n x k``, else why not."""
    if k <= 0 or k % wg.K_BF16:
        return f"k={k} is not a positive multiple of {wg.K_BF16} (one wgmma K step; no K edge)"
    return ""


def make_launch(m: int, n: int, k: int, bn: int, kern=None):
    """``launch(c, a, qweight, scales)`` with 64 x ``bn`` tiles (or ``kern``
    from :func:`make_gemm_wgmma`); ``a`` fp16, passed as uint32 pairs."""
    why = supports(m, n, k)
    if why:
        raise ValueError(f"gemm_wgmma: {why}")
    kern = kern or kernel(bn)
    L.check_shared(shared_bytes(kern.tile_n))  # static: 48 KiB at BN = 128, the limit
    grid = L.check_grid((L.blocks_for(n, kern.tile_n), L.blocks_for(m, BM)))
    L.check_block(THREADS, warps=True)

    def launch(c, a, qweight, scales):
        kern[grid, THREADS](c, a.view(np.uint32), qweight, scales)

    return launch


def _build(shape, bn: int):
    run = make_launch(shape["m"], shape["n"], shape["k"], bn)

    def launch(bufs):
        run(bufs["c"], bufs["a"], bufs["qweight"], bufs["scales"])

    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "f16"
    return launch


def build_small_m(shape):
    """64 x 64 tiles: more blocks along N where m is small and the weight
    stream is the cost."""
    return _build(shape, TILE_N["small_m"])


def build_default(shape):
    """64 x 128 tiles: each staged A tile feeds twice the columns."""
    return _build(shape, TILE_N["default_tiles"])
