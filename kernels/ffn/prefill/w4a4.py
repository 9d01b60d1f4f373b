"""W4A4 (``fp4_prefill``): NVFP4 weights and NVFP4 activations, the
activations quantised per GEMM (``nvfp4_act``: an E4M3 scale per 16 values
and one float32 tensor scale for the whole activation tensor).

sm_90 has no FP4 tensor cores, so both operands are decoded while they are
staged, exactly: an E2M1 value (two significant bits) times its E4M3 block
scale (four) has at most six significant bits and lies within 2^-10 ..
2688, so it is a bf16 value; the GEMM is then a bf16 one (one
warpgroup per 64 x 128 tile, K stages of 64, two in flight, wgmma
m64n128k16 bf16, f32 accumulators: products exact, sums f32), and the two tensor scales multiply
the result once, at the store::

    c[r, n] = fp16( (ts_a * ts_w) * sum_k  a4[r, k] * sa[r, k / 16] * w4[n, k] * sw[n, k / 16] )

A 16-byte core-matrix row is 8 consecutive k: one 32-bit word of either
operand's packed nibbles (element ``8w + j`` in nibble ``j``) and one block
scale. ``k % 16 == 0``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, uint32

from ...common import bits, cvt, nvfp4_act, tc, unroll
from ...common import launch as L
from ...common import wgmma as wg
from . import _mma_forms

BN = 128
THREADS = wg.WARPGROUP


# The staging geometry of this arm's own two-stage loop (K stages of 64,
# core matrices without swizzle): the last bf16 wgmma loop outside
# common/gemm/wgmma_async.py, whose A is staged by copy where this arm
# decodes both operands on the way in.
BM, BK = wg.M, 64
KSUB = BK // wg.K_BF16
LBO = wg.LBO
SBO = (BK * 2 // wg.CORE_BYTES) * wg.LBO
STEP = 2 * wg.LBO
CHUNKS = BK // 8


def shared_bytes(wgs: int, bn: int) -> int:
    return 2 * (BM * wgs + bn) * BK * 2


@cuda.jit(device=True, inline="always")
def _chunk(c):
    """Thread-chunk ``c`` -> (tile row, 16-byte chunk along K), the 8 rows
    of a core matrix first (conflict-free 16-byte stores)."""
    kc = (c >> 3) % CHUNKS
    return ((c >> 3) // CHUNKS) * 8 + (c & 7), kc


@cuda.jit(device=True, inline="always")
def _e2m1_pair(word, j, s):
    return cvt.f32x2_to_bf16x2(
        bits.e2m1_to_f32(word >> uint32(4 * j)) * s, bits.e2m1_to_f32(word >> uint32(4 * j + 4)) * s
    )


@cuda.jit(device=True, inline="always")
def _load(at, p32, sc, rows_total, k, r0, k0, tid, rows):
    """Stage ``rows`` rows of an NVFP4 operand (``p32``: packed nibbles as
    uint32 words, ``sc``: E4M3 block scales) from row ``r0`` and k ``k0``,
    decoded to bf16 (without the tensor scale), zeros past the edges."""
    for c in range(tid, rows * CHUNKS, THREADS):
        r, kc = _chunk(c)
        gr = r0 + r
        gk = k0 + kc * 8
        x0 = x1 = x2 = x3 = uint32(0)
        if gr < rows_total and gk < k:
            word = p32[gr, gk >> 3]
            s = bits.e4m3_to_f32(sc[gr, gk >> 4])
            x0 = _e2m1_pair(word, 0, s)
            x1 = _e2m1_pair(word, 2, s)
            x2 = _e2m1_pair(word, 4, s)
            x3 = _e2m1_pair(word, 6, s)
        wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, SBO), x0, x1, x2, x3)


@cuda.jit(device=True, inline="always")
def _put(i, v, at):
    D, t, m, ncols, r0, n0, tid = at
    r, c = wg.acc_elem(tid, i)
    if r0 + r < m and n0 + c < ncols:
        D[r0 + r, n0 + c] = v * t


@cuda.jit(device=True, inline="always")
def store(D, t, m, ncols, r0, n0, acc):
    """``wgmma.store`` with every value times ``t`` (the two tensor scales)."""
    unroll.each(_put, acc, (D, t, m, ncols, r0, n0, cuda.threadIdx.x & 127))


def make_gemm(bn: int = BN, ksub: int = KSUB):
    """Compile the kernel ``(c, pa32, sa, ts_a, pw32, sw, ts_w)``; ``ksub``
    (tests only) below 4 drops K sub-steps."""
    wg.check_shape("bf16", bn)
    mma, zeros = wg.op("bf16", bn), wg.zeros(bn)
    a_words, b_words = BM * BK // 2, bn * BK // 2
    a_bytes, b_bytes = 4 * a_words, 4 * b_words
    a_len, b_len = 2 * a_words, 2 * b_words
    align = wg.SMEM_ALIGN
    swz = wg.SWIZZLE_NONE

    @L.jit_bounded(THREADS)
    def gemm_w4a4(c, pa32, sa, ts_a, pw32, sw, ts_w):
        m = pa32.shape[0]
        k = 8 * pa32.shape[1]
        n = pw32.shape[0]
        As = cuda.shared.array(a_len, np.uint32, alignment=align)
        Bs = cuda.shared.array(b_len, np.uint32, alignment=align)
        tid = cuda.threadIdx.x
        r0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * bn
        nk = (k + BK - 1) // BK
        a_at = wg.smem_addr(As)
        b_at = wg.smem_addr(Bs)
        _load(a_at, pa32, sa, m, k, r0, 0, tid, BM)
        _load(b_at, pw32, sw, n, k, n0, 0, tid, bn)
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
            if kt + 1 < nk:
                _load(a_at + (1 - s) * a_bytes, pa32, sa, m, k, r0, (kt + 1) * BK, tid, BM)
                _load(b_at + (1 - s) * b_bytes, pw32, sw, n, k, n0, (kt + 1) * BK, tid, bn)
            wg.wgmma_wait_group(0)
            wg.fence_proxy_async()
            cuda.syncthreads()
        store(c, ts_a[0] * ts_w[0], m, n, r0, n0, acc)

    gemm_w4a4.tile_n = bn
    return gemm_w4a4


@lru_cache(maxsize=None)
def kernel(bn: int = BN):
    return make_gemm(bn)


def supports(k: int) -> str:
    if k <= 0 or k % bits.NVFP4_BLOCK:
        return f"k={k} is not a positive multiple of {bits.NVFP4_BLOCK} (an NVFP4 block)"
    return ""


def build(shape, kern=None, form: str | None = None):
    """On wgmma (Hopper, and the simulator) or, on a GPU without it,
    ``_mma_forms``' mma.sync m16n8k16 bf16 on 64 x 128 tiles (``form``:
    tests pass it)."""
    m, k = shape["m"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"w4a4: {why}")
    if tc.check_form(form or tc.current()) == tc.MMA_SYNC:
        return _mma_forms.build_w4a4(shape, 1, BN)
    kern = kern or kernel()
    L.check_shared(shared_bytes(1, kern.tile_n))
    grid = L.check_grid((L.blocks_for(shape["n"], kern.tile_n), L.blocks_for(m, BM)))
    L.check_block(THREADS, warps=True)
    quant = nvfp4_act.launcher()
    packed = cuda.device_array((m, k // 2), dtype=np.uint8)
    scales = cuda.device_array((m, k // bits.NVFP4_BLOCK), dtype=np.uint8)
    ts = cuda.device_array(1, dtype=np.float32)
    rowmax = cuda.device_array(m, dtype=np.float32)

    def launch(bufs):
        quant(packed, scales, ts, rowmax, bufs["a"])
        kern[grid, THREADS](
            bufs["c"],
            packed.view(np.uint32),
            scales,
            ts,
            bufs["w_fp4"].view(np.uint32),
            bufs["w_fp4_scales"],
            bufs["w_fp4_ts"],
        )

    launch.workspace = {"packed": packed, "scales": scales, "ts": ts, "rowmax": rowmax}
    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "bf16"
    return launch


build.forms = tc.FORMS


def launches(shape) -> int:
    """Encode (two launches) and the GEMM; on mma.sync also the decode to bf16."""
    return 4 if tc.current() == tc.MMA_SYNC else 3
