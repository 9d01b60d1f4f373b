"""Activations to NVFP4 per GEMM, for the W4A4 arm: ``a`` fp16 ``[m, k]`` ->
``packed`` uint8 ``[m, k / 2]`` (E2M1, two per byte, low nibble first),
``scales`` uint8 ``[m, k / 16]`` (E4M3 codes) and the tensor scale
``ts[0]`` float32, exactly as ``common.bits.nvfp4_encode_np`` encodes with
the tensor scale ``amax / 2688`` computed in float32 (``naive.quantize_nvfp4``).

Two kernels, a warp per row and four rows per block, no block barrier and
no atomics: :func:`make_row_amax` writes each row's largest magnitude; the
encoder's every warp then reduces those ``m`` values itself to the tensor's
(``m`` floats, read from L2), so the tensor scale needs no third launch to
clear an accumulator. In the encoder lane ``l`` takes the blocks of 16 ``l,
l + 32, ...`` of its row: the block's largest magnitude, its E4M3 scale of
``amax16 / 6 / ts``, then each value divided by ``scale * ts`` to E2M1
(round to nearest even, saturating at 6; the software conversion of
``common.bits``: sm_90 has no FP4 conversion instruction).
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32, uint8

from . import bits
from . import launch as L

THREADS = 128
ROWS = THREADS // 32
BLOCK = bits.NVFP4_BLOCK
_FULL = 0xFFFFFFFF
_RANGE = float32(bits.E4M3_MAX * bits.E2M1_MAX)  # 2688: the tensor's amax maps to the largest scale times 6


@lru_cache(maxsize=None)
def make_row_amax():
    @cuda.jit
    def row_amax(out, a):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        if row < a.shape[0]:
            amax = float32(0.0)
            for c in range(lane, a.shape[1], 32):
                amax = max(amax, abs(float32(a[row, c])))
            for off in (16, 8, 4, 2, 1):
                amax = max(amax, cuda.shfl_xor_sync(_FULL, amax, off))
            if lane == 0:
                out[row] = amax

    return row_amax


@lru_cache(maxsize=None)
def make_encode():
    @cuda.jit
    def encode_nvfp4(packed, scales, ts_out, a, rowmax):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        m = a.shape[0]
        if row < m:
            amax = float32(0.0)
            for r in range(lane, m, 32):
                amax = max(amax, rowmax[r])
            for off in (16, 8, 4, 2, 1):
                amax = max(amax, cuda.shfl_xor_sync(_FULL, amax, off))
            ts = float32(1.0)
            if amax > float32(0.0):
                ts = amax / _RANGE
            if row == 0 and lane == 0:
                ts_out[0] = ts
            for blk in range(lane, a.shape[1] // BLOCK, 32):
                c0 = blk * BLOCK
                bmax = float32(0.0)
                for i in range(BLOCK):
                    bmax = max(bmax, abs(float32(a[row, c0 + i])))
                code = bits.f32_to_e4m3(bmax / float32(bits.E2M1_MAX) / ts)
                scales[row, blk] = code
                step = bits.e4m3_to_f32(code) * ts
                for i in range(BLOCK // 2):
                    lo = uint8(0)
                    hi = uint8(0)
                    if step > float32(0.0):
                        lo = bits.f32_to_e2m1(float32(a[row, c0 + 2 * i]) / step)
                        hi = bits.f32_to_e2m1(float32(a[row, c0 + 2 * i + 1]) / step)
                    packed[row, blk * (BLOCK // 2) + i] = lo | (hi << uint8(4))

    return encode_nvfp4


def launcher():
    amax_k, encode_k = make_row_amax(), make_encode()
    threads = L.check_block(THREADS)

    def run(packed, scales, ts, rowmax, a):
        if a.shape[1] % BLOCK:
            raise ValueError(f"k={a.shape[1]}: NVFP4 needs k a multiple of {BLOCK}")
        grid = L.check_grid(L.blocks_for(a.shape[0], ROWS))
        amax_k[grid, threads](rowmax, a)
        encode_k[grid, threads](packed, scales, ts, a, rowmax)

    return run
