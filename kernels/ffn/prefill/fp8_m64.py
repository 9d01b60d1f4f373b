"""FP8 M64 prefill GEMM: activations quantised to FP8 E4M3 per token
(``common.rowquant``, scale ``sa``), the int4 weights' values ``q - 8`` (-8..7,
exact in E4M3) on Hopper's ``wgmma.mma_async`` m64nNk32 E4M3 with f32
accumulators (``common/wgmma.py``, sm_90a), the fp16 group scales applied
outside the tensor cores::

    c[r, n] = fp16( sa[r] * sum_g  scale[n, g] * (sum_{k in g} aq[r, k] (q[n, k] - 8)) )

One warpgroup per 64 x ``BN`` tile of ``c`` (the engine's M64 tiles). K goes
by in stages of ``BK = 128`` inputs, exactly one scale group, two stages in
flight: 4 wgmma (K = 32 each) into a stage accumulator started from zero
(``scale_d = 0``), then, once they are waited for, each thread folds its
stage accumulators into its running sums with the scale of each one's
column (``scale[n, g]``), and the store multiplies each row by its ``sa``.
Products of two E4M3 values are exact and their sums are f32 in the tensor
cores, so the arm's rounding is the activations' E4M3 (3 mantissa bits) and
the output's fp16.

Staging is ``_wgmma_bf16``'s with bytes for elements: a 16-byte core-matrix
row holds 16 E4M3 values, four words of ``aq`` or, for W, two packed int4
words converted pairwise (``cvt.rn.satfinite.e4m3x2.f32`` of the exact
``q - 8``). No swizzle, LBO = 128 bytes, SBO = 1024 bytes; A 8 KiB and B
16 KiB per stage at BN = 128: 48 KiB for two, the static limit. Rows and k
past the edges are zeros; ``k % 32 == 0`` (:func:`supports`).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ...common import cvt, int4, tc
from ...common import launch as L
from ...common import rowquant as _rowquant
from ...common import wgmma as wg
from ...common.int4_device import nibble

BM, BK = wg.M, int4.GROUP  # one stage is one scale group
BN = 128
THREADS = wg.WARPGROUP
KSUB = BK // wg.K_E4M3
LBO = wg.LBO
SBO = (BK // wg.CORE_BYTES) * wg.LBO
STEP = 2 * wg.LBO  # one instruction's K: 32 E4M3 = 32 bytes, two core matrices
CHUNKS = BK // 16


def shared_bytes(bn: int) -> int:
    return 2 * (BM + bn) * BK


def _fold_source(n: int) -> str:
    """``fold(total, stage, scales, ncols, n0, g)``: the running sums plus
    each stage accumulator times its column's group scale, unrolled so that
    every tuple index is a constant (columns past ``ncols`` read the last
    column's scale; they are never stored)."""
    lines = [
        "def fold(total, stage, scales, ncols, n0, g):",
        "    c = n0 + 2 * (cuda.threadIdx.x & 3)",
        "    last = ncols - 1",
    ]
    out = [""] * (n // 2)
    for j in range(n // 8):
        for e in (0, 1):
            lines.append(f"    s{j}_{e} = float32(scales[min(c + {8 * j + e}, last), g])")
            for r in (0, 2):
                i = 4 * j + r + e
                out[i] = f"total[{i}] + stage[{i}] * s{j}_{e}"
    lines.append("    return (" + ", ".join(out) + ",)")
    return "\n".join(lines) + "\n"


def _store_source(n: int) -> str:
    """``store(D, sa, m, ncols, r0, n0, acc)``: ``wgmma.make_store``'s
    layout, each row times its activation scale."""
    lines = [
        "def store(D, sa, m, ncols, r0, n0, acc):",
        "    tid = cuda.threadIdx.x & 127",
        "    r = r0 + 16 * (tid >> 5) + ((tid & 31) >> 2)",
        "    c = n0 + 2 * (tid & 3)",
        "    lo = r < m",
        "    hi = r + 8 < m",
        "    s_lo = float32(0.0)",
        "    s_hi = float32(0.0)",
        "    if lo:",
        "        s_lo = sa[r]",
        "    if hi:",
        "        s_hi = sa[r + 8]",
    ]
    for j in range(n // 8):
        for e in (0, 1):
            lines += [
                f"    if c + {8 * j + e} < ncols:",
                "        if lo:",
                f"            D[r, c + {8 * j + e}] = acc[{4 * j + e}] * s_lo",
                "        if hi:",
                f"            D[r + 8, c + {8 * j + e}] = acc[{4 * j + 2 + e}] * s_hi",
            ]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=None)
def _generated(n: int):
    ns: dict = {"cuda": cuda, "float32": float32}
    exec(compile(_fold_source(n), f"<fp8 fold n={n}>", "exec"), ns)  # noqa: S102 - generated, fixed text
    exec(compile(_store_source(n), f"<fp8 store n={n}>", "exec"), ns)  # noqa: S102
    jit = cuda.jit(device=True, inline="always")
    return jit(ns["fold"]), jit(ns["store"])


@cuda.jit(device=True, inline="always")
def _chunk(c):
    """Thread-chunk ``c`` -> (tile row, 16-byte chunk along K), the 8 rows
    of a core matrix first (conflict-free 16-byte stores)."""
    kc = (c >> 3) % CHUNKS
    return ((c >> 3) // CHUNKS) * 8 + (c & 7), kc


@cuda.jit(device=True, inline="always")
def _load_a(at, a32, m, k, r0, k0, tid):
    for c in range(tid, BM * CHUNKS, THREADS):
        r, kc = _chunk(c)
        gr = r0 + r
        gk = k0 + kc * 16
        x0 = x1 = x2 = x3 = uint32(0)
        if gr < m and gk < k:
            w = gk >> 2
            x0 = a32[gr, w]
            x1 = a32[gr, w + 1]
            x2 = a32[gr, w + 2]
            x3 = a32[gr, w + 3]
        wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, SBO), x0, x1, x2, x3)


@cuda.jit(device=True, inline="always")
def _e4m3x4(word, j):
    """Four E4M3 codes of nibbles ``j .. j + 3`` of a packed word (``q - 8``, exact)."""
    lo = uint32(cvt.f32x2_to_e4m3x2(nibble(word, j), nibble(word, j + 1)))
    hi = uint32(cvt.f32x2_to_e4m3x2(nibble(word, j + 2), nibble(word, j + 3)))
    return lo | (hi << uint32(16))


@cuda.jit(device=True, inline="always")
def _load_b(at, qweight, n, k, n0, k0, tid, bn):
    for c in range(tid, bn * CHUNKS, THREADS):
        r, kc = _chunk(c)
        gn = n0 + r
        gk = k0 + kc * 16
        x0 = x1 = x2 = x3 = uint32(0)
        if gn < n and gk < k:
            w0 = qweight[gn, gk >> 3]
            w1 = qweight[gn, (gk >> 3) + 1]
            x0 = _e4m3x4(w0, 0)
            x1 = _e4m3x4(w0, 4)
            x2 = _e4m3x4(w1, 0)
            x3 = _e4m3x4(w1, 4)
        wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, SBO), x0, x1, x2, x3)


def make_gemm(bn: int = BN, ksub: int = KSUB):
    """Compile the kernel ``(c, aq32, sa, qweight, scales)``; ``ksub`` (tests
    only) below 4 drops K sub-steps, a broken variant the check must see."""
    wg.check_shape("e4m3", bn)
    mma, zeros = wg.op("e4m3", bn), wg.zeros(bn)
    fold, store = _generated(bn)
    a_bytes, b_bytes = BM * BK, bn * BK
    a_len, b_len = 2 * a_bytes // 4, 2 * b_bytes // 4  # two stages, in words
    align = wg.SMEM_ALIGN
    swz = wg.SWIZZLE_NONE

    @L.jit_bounded(THREADS)
    def gemm_fp8(c, aq32, sa, qweight, scales):
        m = aq32.shape[0]
        k = 4 * aq32.shape[1]
        n = qweight.shape[0]
        As = cuda.shared.array(a_len, np.uint32, alignment=align)
        Bs = cuda.shared.array(b_len, np.uint32, alignment=align)
        tid = cuda.threadIdx.x
        r0 = cuda.blockIdx.y * BM
        n0 = cuda.blockIdx.x * bn
        nk = (k + BK - 1) // BK
        a_at = wg.smem_addr(As)
        b_at = wg.smem_addr(Bs)
        _load_a(a_at, aq32, m, k, r0, 0, tid)
        _load_b(b_at, qweight, n, k, n0, 0, tid, bn)
        wg.fence_proxy_async()
        cuda.syncthreads()
        total = zeros()
        for kt in range(nk):
            s = kt & 1
            stage = zeros()
            wg.wgmma_fence()
            for j in range(ksub):
                da = wg.make_desc(a_at + s * a_bytes + j * STEP, LBO, SBO, swz)
                db = wg.make_desc(b_at + s * b_bytes + j * STEP, LBO, SBO, swz)
                stage = mma(da, db, stage, 1, 1, 1)
            wg.wgmma_commit_group()
            if kt + 1 < nk:
                _load_a(a_at + (1 - s) * a_bytes, aq32, m, k, r0, (kt + 1) * BK, tid)
                _load_b(b_at + (1 - s) * b_bytes, qweight, n, k, n0, (kt + 1) * BK, tid, bn)
            wg.wgmma_wait_group(0)
            total = fold(total, stage, scales, n, n0, kt)
            wg.fence_proxy_async()
            cuda.syncthreads()
        store(c, sa, m, n, r0, n0, total)

    gemm_fp8.tile_n = bn
    return gemm_fp8


@lru_cache(maxsize=None)
def kernel(bn: int = BN):
    return make_gemm(bn)


def supports(k: int) -> str:
    if k <= 0 or k % wg.K_E4M3:
        return f"k={k} is not a positive multiple of {wg.K_E4M3} (one E4M3 wgmma K step)"
    return ""


def build(shape, kern=None):
    """On wgmma only: the FP8 tensor cores are reached through it alone on
    Hopper (its mma.sync runs E4M3 through FP16), and sm_80 has no FP8 MMA;
    elsewhere the build refuses, saying so (the record is a FAIL naming it)."""
    if tc.current() != tc.WGMMA:
        raise ValueError(
            f"fp8_m64: built on wgmma (sm_90a) only; this device's tensor-core form is "
            f"{tc.current()}, and no FP8 mma.sync form is built here"
        )
    m, k = shape["m"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"fp8_m64: {why}")
    kern = kern or kernel()
    L.check_shared(shared_bytes(kern.tile_n))
    grid = L.check_grid((L.blocks_for(shape["n"], kern.tile_n), L.blocks_for(m, BM)))
    L.check_block(THREADS, warps=True)
    quant = _rowquant.launcher("e4m3")
    aq = cuda.device_array((m, k), dtype=np.uint8)
    sa = cuda.device_array(m, dtype=np.float32)

    def launch(bufs):
        quant(aq, sa, bufs["a"])
        kern[grid, THREADS](bufs["c"], aq.view(np.uint32), sa, bufs["qweight"], bufs["scales"])

    launch.workspace = {"aq": aq, "sa": sa}
    launch.tensor_cores = "wgmma"
    launch.tc_dtype = "e4m3"
    return launch
