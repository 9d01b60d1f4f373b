"""NVFP4 MMQ (``ffn_nvfp4_mmq``, ``ffn_nvfp4_mmq_down``): the dense-FFN GEMM
with NVFP4 weights and NVFP4 activations multiplied in integer arithmetic
from the packed codes, as an MMQ kernel does, not decoded to floats.

An E2M1 value times 2 is an exact small integer (0, 1, 2, 3, 4, 6, 8, 12
and their negatives), so a 16-value NVFP4 block of either operand is 16
int8 values and one E4M3 scale. Per 16-value block ``b`` of row ``r`` and
column ``n`` the integer dot product ``dot = sum 2a * 2w`` is exact (at most
16 x 144 = 2304), and::

    c[r, n] = fp16( (ts_a * ts_w / 4) * sum_b  dot[r, n, b] * (sa[r, b] * sw[n, b]) )

Every term of the sum is exact in float32 (``sa * sw``, two E4M3 values,
has at most 8 significant bits, ``dot`` at most 12): only the float32 sum
over K's blocks and the final tensor-scale product round. Activations are
quantised per GEMM by ``nvfp4_act`` (the W4A4 arm's encoder).

Tensor cores: ``mma.sync.aligned.m16n8k32`` s8 (``common/mma``; sm_80 and
later, ``IMMA`` in SASS). Its K of 32 spans two NVFP4 blocks whose scales
differ, and an MMA sums across its whole K, so each k32 step issues two
MMAs, one with the A fragment's upper K half zeroed (the registers ``a2``,
``a3`` hold k 16..31) and one with the lower half zeroed, and folds each
block's dot product with its own scales. Half of each MMA multiplies
zeros: the price of 16-wide scales on a 32-wide integer MMA (an s8
``m16n8k16`` atom would issue half the work; sm_90 runs both on the same
``IMMA`` pipe).

Tiling (``q4k_mmq``'s): blocks of two warps own 32 rows x 16 columns of
``c``; K stages of 64 put in shared memory both operands' doubled values as
bytes (32 x 64 and 16 x 64) and their block scales decoded to float32 (4 per
row). Rows past ``m``, columns past ``n`` and k past ``k`` are staged as
zeros with zero scales and not stored. ``k % 16 == 0``.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint8, uint32

from ...common import bits, mma, nvfp4_act
from ...common import launch as L

WARPS_M = 2
TM, TN = mma.M * WARPS_M, 2 * mma.N
THREADS = mma.WARP * WARPS_M
BLOCK = bits.NVFP4_BLOCK  # 16
KS = 64  # K per stage: two k32 MMA steps, four NVFP4 blocks
BLOCKS = KS // BLOCK

# 2 x |E2M1| for the magnitude codes 0..7, one nibble each: 0 1 2 3 4 6 8 12.
DOUBLED = 0xC8643210
DOUBLED_VALUES = tuple((DOUBLED >> (4 * i)) & 0xF for i in range(8))


@cuda.jit(device=True, inline="always")
def doubled(code):
    """2 x the E2M1 value of nibble ``code`` as an int8's byte (two's complement)."""
    v = int32((uint32(DOUBLED) >> uint32(4 * (code & 7))) & uint32(15))
    if code & 8:
        v = -v
    return uint8(v & 0xFF)


@cuda.jit(device=True, inline="always")
def _stage(S, SC, packed, scales, total, k, g0, k0, tid, rows):
    """Stage ``rows`` rows of an NVFP4 operand from row ``g0``, k ``k0``:
    doubled values into ``S`` (bytes), block scales into ``SC`` (float32),
    zeros past the edges."""
    for idx in range(tid, rows * (KS // 2), THREADS):
        r = idx // (KS // 2)
        byte = idx - r * (KS // 2)
        lo = uint8(0)
        hi = uint8(0)
        if g0 + r < total and k0 + 2 * byte < k:
            x = packed[g0 + r, (k0 >> 1) + byte]
            lo = doubled(x & uint8(15))
            hi = doubled(x >> uint8(4))
        S[r, 2 * byte] = lo
        S[r, 2 * byte + 1] = hi
    for idx in range(tid, rows * BLOCKS, THREADS):
        r = idx // BLOCKS
        b = idx - r * BLOCKS
        s = float32(0.0)
        if g0 + r < total and k0 + b * BLOCK < k:
            s = bits.e4m3_to_f32(scales[g0 + r, (k0 // BLOCK) + b])
        SC[r, b] = s


@cuda.jit(device=True, inline="always")
def _fold(acc, dot, SA, SW, r, col, b):
    return acc + float32(dot) * (SA[r, b] * SW[col, b])


@cuda.jit(device=True, inline="always")
def _store(c, t, m, n, r0, n0, lane, i, v):
    r, col = mma.c_elem(lane, i)
    if r0 + r < m and n0 + col < n:
        c[r0 + r, n0 + col] = np.float16(v * t)


@lru_cache(maxsize=None)
def make_nvfp4_mmq(HALVES: int = 2, SCALE_PER_32: bool = False):
    """Compile the kernel ``(c, pa, sa, ts_a, pw, sw, ts_w)``: ``pa``/``pw``
    packed E2M1 bytes, ``sa``/``sw`` E4M3 block-scale codes, ``ts_*`` the
    one-element tensor scales. Tests only: ``HALVES=1`` drops every odd
    block of 16 (half of K); ``SCALE_PER_32`` folds both halves of a k32
    step with the even block's scales. Both are broken variants the checks
    must reject."""

    @cuda.jit
    def nvfp4_mmq(c, pa, sa, ts_a, pw, sw, ts_w):
        m = pa.shape[0]
        k = 2 * pa.shape[1]
        n = pw.shape[0]
        As = cuda.shared.array((TM, KS), dtype=uint8)
        Bs = cuda.shared.array((TN, KS), dtype=uint8)
        SA = cuda.shared.array((TM, BLOCKS), dtype=float32)
        SW = cuda.shared.array((TN, BLOCKS), dtype=float32)
        tid = cuda.threadIdx.x
        lane = cuda.laneid
        wr = (tid // mma.WARP) * mma.M
        r0 = cuda.blockIdx.y * TM
        n0 = cuda.blockIdx.x * TN
        z = uint32(0)
        i0 = int32(0)
        d0 = d1 = d2 = d3 = float32(0.0)
        e0 = e1 = e2 = e3 = float32(0.0)
        for k0 in range(0, k, KS):
            _stage(As, SA, pa, sa, m, k, r0, k0, tid, TM)
            _stage(Bs, SW, pw, sw, n, k, n0, k0, tid, TN)
            cuda.syncthreads()
            for s in range(KS // 32):
                a0, a1, a2, a3 = mma.load_a_s8(As, wr, 32 * s)
                b0, b1 = mma.load_b_s8(Bs, 0, 32 * s)
                f0, f1 = mma.load_b_s8(Bs, mma.N, 32 * s)
                for h in range(HALVES):
                    if h == 0:
                        x0, x1, x2, x3 = mma.mma_s8_16832(a0, a1, z, z, b0, b1, i0, i0, i0, i0)
                        y0, y1, y2, y3 = mma.mma_s8_16832(a0, a1, z, z, f0, f1, i0, i0, i0, i0)
                    else:
                        x0, x1, x2, x3 = mma.mma_s8_16832(z, z, a2, a3, b0, b1, i0, i0, i0, i0)
                        y0, y1, y2, y3 = mma.mma_s8_16832(z, z, a2, a3, f0, f1, i0, i0, i0, i0)
                    b = 2 * s + h
                    if SCALE_PER_32:
                        b = 2 * s
                    r, col = mma.c_elem(lane, 0)
                    d0 = _fold(d0, x0, SA, SW, wr + r, col, b)
                    e0 = _fold(e0, y0, SA, SW, wr + r, col + mma.N, b)
                    r, col = mma.c_elem(lane, 1)
                    d1 = _fold(d1, x1, SA, SW, wr + r, col, b)
                    e1 = _fold(e1, y1, SA, SW, wr + r, col + mma.N, b)
                    r, col = mma.c_elem(lane, 2)
                    d2 = _fold(d2, x2, SA, SW, wr + r, col, b)
                    e2 = _fold(e2, y2, SA, SW, wr + r, col + mma.N, b)
                    r, col = mma.c_elem(lane, 3)
                    d3 = _fold(d3, x3, SA, SW, wr + r, col, b)
                    e3 = _fold(e3, y3, SA, SW, wr + r, col + mma.N, b)
            cuda.syncthreads()
        t = ts_a[0] * ts_w[0] * float32(0.25)
        rr = r0 + wr
        _store(c, t, m, n, rr, n0, lane, 0, d0)
        _store(c, t, m, n, rr, n0, lane, 1, d1)
        _store(c, t, m, n, rr, n0, lane, 2, d2)
        _store(c, t, m, n, rr, n0, lane, 3, d3)
        cc = n0 + mma.N
        _store(c, t, m, n, rr, cc, lane, 0, e0)
        _store(c, t, m, n, rr, cc, lane, 1, e1)
        _store(c, t, m, n, rr, cc, lane, 2, e2)
        _store(c, t, m, n, rr, cc, lane, 3, e3)

    return nvfp4_mmq


def supports(k: int) -> str:
    if k <= 0 or k % BLOCK:
        return f"k={k} is not a positive multiple of {BLOCK} (an NVFP4 block)"
    return ""


def build(shape, kern=None):
    m, k = shape["m"], shape["k"]
    why = supports(k)
    if why:
        raise ValueError(f"nvfp4_mmq: {why}")
    kern = kern or make_nvfp4_mmq()
    L.check_shared((TM + TN) * KS + 4 * BLOCKS * (TM + TN))
    grid = L.check_grid((L.blocks_for(shape["n"], TN), L.blocks_for(m, TM)))
    threads = L.check_block(THREADS)
    quant = nvfp4_act.launcher()
    packed = cuda.device_array((m, k // 2), dtype=np.uint8)
    scales = cuda.device_array((m, k // BLOCK), dtype=np.uint8)
    ts = cuda.device_array(1, dtype=np.float32)
    rowmax = cuda.device_array(m, dtype=np.float32)

    def launch(bufs):
        quant(packed, scales, ts, rowmax, bufs["a"])
        kern[grid, threads](bufs["c"], packed, scales, ts, bufs["w_fp4"], bufs["w_fp4_scales"], bufs["w_fp4_ts"])

    launch.workspace = {"packed": packed, "scales": scales, "ts": ts, "rowmax": rowmax}
    launch.tensor_cores = "mma.sync"
    launch.tc_dtype = "s8"
    return launch
