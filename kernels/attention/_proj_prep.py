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

Both read C-contiguous rows of whole 16-byte units (``k % 8 == 0``) 16
bytes a thread and write each thread's result at once (the crush a lane's
eight codes, 8 bytes; the conversion 16 bytes); other rows take their
element kernels.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, uint64

from ..common import cvt, vload
from ..common import launch as L
from ..common.launch import device_inline
from ..common.warp import warp_max

QUANT_THREADS = 32  # one warp a token: k is a few thousand at most
ROWS_PER_WARP = 8  # tokens one warp crushes in turn (512 blocks at 4096 tokens)
E4M3_MAX = np.float32(448.0)
CONVERT_THREADS = 256


def make_quant_e4m3_rows(e4m3_max=E4M3_MAX, wide: bool = False):
    """Compile ``kernel(xq16, xs, x)``: one warp per block, crushing
    ``ROWS_PER_WARP`` rows in turn, each row's maximum by shuffles; ``xq16`` the E4M3
    codes as uint16 pairs ``[m, k/2]``, ``xs`` float32 ``[m]`` the row
    scales, ``x`` bf16 bits ``[m, k]``. ``wide``: the kernel for
    C-contiguous rows of whole 16-byte units (``k % 8 == 0``), a lane's
    share of a row its ``l``-th 16 bytes of each 512 (``vload.wide_rows``:
    one 16-byte load, or one element a load where ``x`` is not 16-byte
    aligned) and its eight codes one 8-byte store (``xq16`` then
    ``xq64``, the codes viewed as uint64). ``e4m3_max`` exists for a
    test's broken variant."""
    if wide:
        return _make_quant_wide(e4m3_max)

    @L.jit_bounded(QUANT_THREADS)
    def quant_e4m3_rows(xq16, xs, x):
        tid = cuda.threadIdx.x
        m = x.shape[0]
        k = x.shape[1]
        for r in range(cuda.blockIdx.x * ROWS_PER_WARP, min(m, (cuda.blockIdx.x + 1) * ROWS_PER_WARP)):
            amax = np.float32(0.0)
            for i in range(tid, k, QUANT_THREADS):
                amax = max(amax, abs(cvt.bf16_to_f32(x[r, i])))
            amax = warp_max(amax)  # the warp's maximum, in every lane
            scale = amax / e4m3_max if amax > np.float32(0.0) else np.float32(1.0)
            for i in range(tid, k // 2, QUANT_THREADS):
                xq16[r, i] = cvt.f32x2_to_e4m3x2(
                    cvt.bf16_to_f32(x[r, 2 * i]) / scale, cvt.bf16_to_f32(x[r, 2 * i + 1]) / scale
                )
            if tid == 0:
                xs[r] = scale

    return quant_e4m3_rows


def _make_quant_wide(e4m3_max):
    _per, _load, amax_of, unit = vload.wide_rows(2, bf16=True)

    @device_inline
    def _pair(a, b, scale):
        return uint64(cvt.f32x2_to_e4m3x2(a / scale, b / scale))

    @L.jit_bounded(QUANT_THREADS)
    def quant_e4m3_rows(xq64, xs, x):
        tid = cuda.threadIdx.x
        m = x.shape[0]
        k = x.shape[1]
        units = k // 8
        aligned = vload.aligned16(x)
        for r in range(cuda.blockIdx.x * ROWS_PER_WARP, min(m, (cuda.blockIdx.x + 1) * ROWS_PER_WARP)):
            amax = np.float32(0.0)
            for c in range(tid, units, QUANT_THREADS):
                amax = max(amax, amax_of(unit(x, r, k, c, aligned)))
            amax = warp_max(amax)  # the warp's maximum, in every lane
            scale = amax / e4m3_max if amax > np.float32(0.0) else np.float32(1.0)
            for c in range(tid, units, QUANT_THREADS):
                x0, x1, x2, x3, x4, x5, x6, x7 = unit(x, r, k, c, aligned)
                xq64[r, c] = (
                    _pair(x0, x1, scale)
                    | (_pair(x2, x3, scale) << uint64(16))
                    | (_pair(x4, x5, scale) << uint64(32))
                    | (_pair(x6, x7, scale) << uint64(48))
                )
            if tid == 0:
                xs[r] = scale

    return quant_e4m3_rows


@lru_cache(maxsize=None)
def quant_kernel(wide: bool = False):
    return make_quant_e4m3_rows(wide=wide)


def quant_kernels(e4m3_max=E4M3_MAX):
    """``(wide, element)``: the crush's two kernels with this ``e4m3_max``
    (a test's broken pair passes another), for :func:`quant_launch`."""
    if e4m3_max == E4M3_MAX:
        return quant_kernel(True), quant_kernel(False)
    return make_quant_e4m3_rows(e4m3_max, wide=True), make_quant_e4m3_rows(e4m3_max)


@L.jit_bounded(CONVERT_THREADS)
def bf16_to_f16(y32, x32):
    """``y32`` fp16 pairs from ``x32`` bf16 pairs (both uint32 ``[m, k/2]``)."""
    i = cuda.grid(1)
    w = x32.shape[1]
    if i < x32.shape[0] * w:
        r = i // w
        c = i - r * w
        y32[r, c] = _f16_pair(x32[r, c])


@device_inline
def _f16_pair(v):
    return cvt.f32x2_to_f16x2(cvt.bf16_to_f32(v & np.uint32(0xFFFF)), cvt.bf16_to_f32(v >> np.uint32(16)))


@L.jit_bounded(CONVERT_THREADS)
def bf16_to_f16_wide(y32, x32):
    """:func:`bf16_to_f16` 16 bytes a thread: words ``4i .. 4i + 3`` of the
    C-contiguous rows (``k % 8 == 0``) in one load and one store where both
    arrays start on 16 bytes, else word by word."""
    i = cuda.grid(1)
    w = x32.shape[1]
    if i < x32.shape[0] * (w >> 2):
        at = i << 2  # the flat word: rows are whole units of four
        if vload.aligned16(x32) and vload.aligned16(y32):
            a0, a1, a2, a3 = vload.ldg_v4(x32, at)
            vload.stg_v4(y32, at, _f16_pair(a0), _f16_pair(a1), _f16_pair(a2), _f16_pair(a3))
        else:
            r = at // w
            c = at - r * w
            for j in range(4):
                y32[r, c + j] = _f16_pair(x32[r, c + j])


def _wide_ok(k: int, *arrays) -> bool:
    return k % 8 == 0 and all(vload.c_contiguous(a) for a in arrays)


def quant_launch(m: int, k: int, kernels=None):
    """``launch(xq, xs, x)``: the crush, on the wide kernel where the rows
    allow it (:func:`make_quant_e4m3_rows`), else the element one.
    ``kernels``: :func:`quant_kernels`' pair."""
    wide, element = kernels or quant_kernels()
    grid = L.check_grid(L.blocks_for(m, ROWS_PER_WARP))

    def launch(xq, xs, x):
        if _wide_ok(k, xq, x):
            wide[grid, QUANT_THREADS](xq.view(np.uint64), xs, x)
        else:
            element[grid, QUANT_THREADS](xq.view(np.uint16), xs, x)

    return launch


def convert_launch(m: int, k: int):
    grid = L.check_grid(L.blocks_for(m * (k // 2), CONVERT_THREADS))
    grid_wide = L.check_grid(L.blocks_for(m * (k // 8), CONVERT_THREADS))

    def launch(x16, x):
        if _wide_ok(k, x16, x):
            bf16_to_f16_wide[grid_wide, CONVERT_THREADS](x16.view(np.uint32), x.view(np.uint32))
        else:
            bf16_to_f16[grid, CONVERT_THREADS](x16.view(np.uint32), x.view(np.uint32))

    return launch
