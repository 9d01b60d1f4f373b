"""Activations to NVFP4 per GEMM, for the W4A4 arm: ``a`` fp16 (or float32)
``[m, k]`` -> ``packed`` uint8 ``[m, k / 2]`` (E2M1, two per byte, low nibble
first), ``scales`` uint8 ``[m, k / 16]`` (E4M3 codes) and the tensor scale
``ts[0]`` float32, exactly as ``common.bits.nvfp4_encode_np`` encodes with
the tensor scale ``amax / 2688`` computed in float32 (``naive.quantize_nvfp4``).

Two kernels, a warp per row and four rows per block, no block barrier and
no atomics: :func:`make_row_amax` writes each row's largest magnitude; the
encoder's every warp then reduces those ``m`` values itself to the tensor's
(``m`` floats, read from L2), so the tensor scale needs no third launch to
clear an accumulator. Each block of 16 gets its largest magnitude, its E4M3
scale of ``amax16 / 6 / ts``, then each value divided by ``scale * ts`` to
E2M1 (round to nearest even, saturating at 6; the software conversion of
``common.bits``: sm_90 has no FP4 conversion instruction).

Both kernels read a row in 16-byte loads, lane ``l`` the ``l``-th 16 bytes
of each 512 (``vload``: 8 fp16 or 4 float32 values), so a warp's load is
512 contiguous bytes; a block of 16 values is the 2 (fp16) or 4 (float32)
neighbouring lanes' loads, its largest magnitude met by one or two
butterfly shuffles; each lane writes its values' E2M1 codes as one word
(fp16: 4 bytes) or half-word (float32), a warp's store 128 or 64
contiguous bytes, and a block's first lane its scale. Where the rows are
not C-contiguous (the launcher's choice) or the first element is not
16-byte aligned (the kernel's own check), a lane takes whole blocks ``l, l
+ 32, ...`` one element a load instead. ``k % 16 == 0``, so a row is whole
16-byte loads and a block never straddles a warp's step.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint8, uint16, uint32

from . import bits, cvt, vload
from . import launch as L
from .launch import device_inline
from .warp import warp_max

THREADS = 128
ROWS = THREADS // 32
BLOCK = bits.NVFP4_BLOCK
_FULL = 0xFFFFFFFF
_RANGE = float32(bits.E4M3_MAX * bits.E2M1_MAX)  # 2688: the tensor's amax maps to the largest scale times 6
FAULTS = ("tail_dropped",)  # tests only: the wide path skips each row's last 16-byte load


@device_inline
def _code_pair(x0, x1, step):
    """One packed byte: the E2M1 codes of ``x0 / step`` (low nibble) and ``x1 / step``."""
    lo = uint8(0)
    hi = uint8(0)
    if step > float32(0.0):
        lo = bits.f32_to_e2m1(x0 / step)
        hi = bits.f32_to_e2m1(x1 / step)
    return uint32(lo | (hi << uint8(4)))


@device_inline
def _codes_f16(x, step):
    x0, x1, x2, x3, x4, x5, x6, x7 = x
    return (
        _code_pair(x0, x1, step)
        | (_code_pair(x2, x3, step) << uint32(8))
        | (_code_pair(x4, x5, step) << uint32(16))
        | (_code_pair(x6, x7, step) << uint32(24))
    )


@device_inline
def _codes_f32(x, step):
    x0, x1, x2, x3 = x
    return uint16(_code_pair(x0, x1, step) | (_code_pair(x2, x3, step) << uint32(8)))


def _wide(esize: int):
    """``(values a 16-byte load, its load, its largest magnitude, its codes)`` for ``esize``-byte elements."""
    if esize not in (2, 4):
        raise TypeError(f"NVFP4 activations: fp16 or float32 rows, not {esize}-byte elements")
    per, load, amax, _unit = vload.wide_rows(esize)
    return per, load, amax, _codes_f16 if esize == 2 else _codes_f32


@lru_cache(maxsize=None)
def make_row_amax(esize: int = 2, wide: bool = True):
    per, load, amax_of, _ = _wide(esize)

    @device_inline
    def reduce_store(out, row, lane, amax):
        amax = warp_max(amax)
        if lane == 0:
            out[row] = amax

    @device_inline
    def amax_elements(a, row, lane):
        amax = float32(0.0)
        for c in range(lane, a.shape[1], 32):
            amax = max(amax, abs(float32(a[row, c])))
        return amax

    @cuda.jit
    def row_amax(out, a):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        if row < a.shape[0]:
            k = a.shape[1]
            if vload.aligned16(a):
                amax = float32(0.0)
                for c in range(lane, k // per, 32):
                    amax = max(amax, amax_of(load(a, row * k + c * per, True)))
            else:
                amax = amax_elements(a, row, lane)
            reduce_store(out, row, lane, amax)

    @cuda.jit
    def row_amax_strided(out, a):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        if row < a.shape[0]:
            reduce_store(out, row, lane, amax_elements(a, row, lane))

    return row_amax if wide else row_amax_strided


@lru_cache(maxsize=None)
def make_encode(esize: int = 2, wide: bool = True, fault: str = ""):
    """The encoder for ``esize``-byte rows; ``wide`` the 16-byte loads (its
    ``packed`` is then the bytes viewed as uint32 (fp16) or uint16
    (float32), a lane's codes one element). ``fault`` (:data:`FAULTS`,
    tests only) plants a bug the check must see."""
    if fault and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    per, load, amax_of, codes_of = _wide(esize)
    lanes = BLOCK // per  # the lanes of a block of 16
    shuffles = (1,) if lanes == 2 else (1, 2)
    dropped = 1 if fault == "tail_dropped" else 0

    @device_inline
    def encode_wide(packed, scales, a, row, lane, ts):
        k = a.shape[1]
        chunks = k // per - dropped
        for c0 in range(0, k // per, 32):  # the same trip count in every lane: the shuffles need all 32
            c = c0 + lane
            ok = c < chunks
            x = load(a, row * k + c * per, ok)
            bmax = amax_of(x)
            for off in shuffles:
                bmax = max(bmax, cuda.shfl_xor_sync(_FULL, bmax, off))
            code = cvt.f32_to_e4m3(bmax / float32(bits.E2M1_MAX) / ts)
            step = cvt.e4m3_to_f32(code) * ts
            if ok:
                packed[row, c] = codes_of(x, step)
                if lane % lanes == 0:
                    scales[row, c // lanes] = code

    def make_blocks(pairs: int):
        """A lane's whole blocks ``l, l + 32, ...``, one element a load, into
        codes of ``pairs`` bytes an element (1: the bytes; 2 or 4: the wide
        path's view of them)."""

        @device_inline
        def encode_blocks(out, scales, a, row, lane, ts):
            for blk in range(lane, a.shape[1] // BLOCK, 32):
                c0 = blk * BLOCK
                bmax = float32(0.0)
                for i in range(BLOCK):
                    bmax = max(bmax, abs(float32(a[row, c0 + i])))
                code = cvt.f32_to_e4m3(bmax / float32(bits.E2M1_MAX) / ts)
                scales[row, blk] = code
                step = cvt.e4m3_to_f32(code) * ts
                for j in range(BLOCK // 2 // pairs):
                    w = uint32(0)
                    for i in range(pairs):
                        e = c0 + 2 * (j * pairs + i)
                        w |= _code_pair(float32(a[row, e]), float32(a[row, e + 1]), step) << uint32(8 * i)
                    out[row, blk * (BLOCK // 2 // pairs) + j] = w

        return encode_blocks

    blocks_wide, blocks_bytes = make_blocks(per // 2), make_blocks(1)

    @device_inline
    def tensor_scale(ts_out, rowmax, row, lane):
        """Every warp's own reduction of the rows' magnitudes to the tensor scale (row 0's lane 0 writes it)."""
        amax = float32(0.0)
        for r in range(lane, rowmax.shape[0], 32):
            amax = max(amax, rowmax[r])
        amax = warp_max(amax)
        ts = float32(1.0)
        if amax > float32(0.0):
            ts = amax / _RANGE
        if row == 0 and lane == 0:
            ts_out[0] = ts
        return ts

    @cuda.jit
    def encode_nvfp4(words, scales, ts_out, a, rowmax):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        if row < a.shape[0]:
            ts = tensor_scale(ts_out, rowmax, row, lane)
            if vload.aligned16(a):
                encode_wide(words, scales, a, row, lane, ts)
            else:
                blocks_wide(words, scales, a, row, lane, ts)

    @cuda.jit
    def encode_nvfp4_strided(packed, scales, ts_out, a, rowmax):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        if row < a.shape[0]:
            blocks_bytes(packed, scales, a, row, lane, tensor_scale(ts_out, rowmax, row, lane))

    return encode_nvfp4 if wide else encode_nvfp4_strided


def launcher(fault: str = ""):
    threads = L.check_block(THREADS)

    def run(packed, scales, ts, rowmax, a):
        if a.shape[1] % BLOCK:
            raise ValueError(f"k={a.shape[1]}: NVFP4 needs k a multiple of {BLOCK}")
        if a.dtype not in (np.float16, np.float32):
            raise TypeError(f"NVFP4 activations: fp16 or float32 rows, not {a.dtype}")
        esize = a.dtype.itemsize
        wide = vload.c_contiguous(a)  # (a strided view: one element a load, the kernel built without the wide path)
        grid = L.check_grid(L.blocks_for(a.shape[0], ROWS))
        codes = packed.view(np.uint32 if esize == 2 else np.uint16) if wide else packed
        make_row_amax(esize, wide)[grid, threads](rowmax, a)
        make_encode(esize, wide, fault)[grid, threads](codes, scales, ts, a, rowmax)

    return run
