"""Activation preparation kernels of the projection paths (one launch each,
before the GEMM):

* :func:`quant_e4m3_rows`: Atlas's default path crushes the bf16
  activations to FP8 E4M3. The seed says only that they are crushed; the
  scale is this project's choice: one per token (row), ``amax / 448``
  (1 for an all-zero row), each value divided by it and rounded to nearest
  E4M3, saturating (``cvt.rn.satfinite``). The GEMM's epilogue multiplies
  the row's scale back.
* :func:`bf16_to_f16`: Metrale's default projection GEMM is this project's
  fp16-activation W4A16 GEMM (``w4a16/gemm_tc.py``); its bf16 activations
  are converted first (exact for normal values: fp16 has three more
  significand bits; values below fp16's 2^-14 lose bits, and above 65504
  overflow).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda

from ..common import cvt
from ..common import launch as L

QUANT_THREADS = 32  # one warp a token: k is a few thousand at most
FULL = 0xFFFFFFFF
ROWS_PER_WARP = 8  # tokens one warp crushes in turn (512 blocks at 4096 tokens)
E4M3_MAX = np.float32(448.0)
CONVERT_THREADS = 256


def make_quant_e4m3_rows(e4m3_max=E4M3_MAX):
    """Compile ``kernel(xq16, xs, x)``: one warp per block, crushing
    ``ROWS_PER_WARP`` rows in turn, each row's maximum by shuffles; ``xq16`` the E4M3
    codes as uint16 pairs ``[m, k/2]``, ``xs`` float32 ``[m]`` the row
    scales, ``x`` bf16 bits ``[m, k]``. ``e4m3_max`` exists for a test's
    broken variant."""

    @L.jit_bounded(QUANT_THREADS)
    def quant_e4m3_rows(xq16, xs, x):
        tid = cuda.threadIdx.x
        m = x.shape[0]
        k = x.shape[1]
        for r in range(cuda.blockIdx.x * ROWS_PER_WARP, min(m, (cuda.blockIdx.x + 1) * ROWS_PER_WARP)):
            amax = np.float32(0.0)
            for i in range(tid, k, QUANT_THREADS):
                amax = max(amax, abs(cvt.bf16_to_f32(x[r, i])))
            for off in (16, 8, 4, 2, 1):  # the warp's maximum, in every lane
                amax = max(amax, cuda.shfl_xor_sync(FULL, amax, off))
            scale = amax / e4m3_max if amax > np.float32(0.0) else np.float32(1.0)
            for i in range(tid, k // 2, QUANT_THREADS):
                xq16[r, i] = cvt.f32x2_to_e4m3x2(
                    cvt.bf16_to_f32(x[r, 2 * i]) / scale, cvt.bf16_to_f32(x[r, 2 * i + 1]) / scale
                )
            if tid == 0:
                xs[r] = scale

    return quant_e4m3_rows


@lru_cache(maxsize=None)
def quant_kernel():
    return make_quant_e4m3_rows()


@L.jit_bounded(CONVERT_THREADS)
def bf16_to_f16(y32, x32):
    """``y32`` fp16 pairs from ``x32`` bf16 pairs (both uint32 ``[m, k/2]``)."""
    i = cuda.grid(1)
    w = x32.shape[1]
    if i < x32.shape[0] * w:
        r = i // w
        c = i - r * w
        v = x32[r, c]
        y32[r, c] = cvt.f32x2_to_f16x2(cvt.bf16_to_f32(v & np.uint32(0xFFFF)), cvt.bf16_to_f32(v >> np.uint32(16)))


def quant_launch(m: int, k: int, kern=None):
    kern = kern or quant_kernel()
    grid = L.check_grid(L.blocks_for(m, ROWS_PER_WARP))

    def launch(xq, xs, x):
        kern[grid, QUANT_THREADS](xq.view(np.uint16), xs, x)

    return launch


def convert_launch(m: int, k: int):
    grid = L.check_grid(L.blocks_for(m * (k // 2), CONVERT_THREADS))

    def launch(x16, x):
        bf16_to_f16[grid, CONVERT_THREADS](x16.view(np.uint32), x.view(np.uint32))

    return launch
