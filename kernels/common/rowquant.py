"""Per-token activation quantisation, shared by the int8 and FP8 arms:
``a`` fp16 (or float32) ``[m, k]`` -> ``aq`` ``[m, k]`` and ``sa`` float32
``[m]``, symmetric per row (one token's activations share one scale), in
the float32 operations ``naive.quantize_rows_int8`` /
``naive.quantize_rows_e4m3`` spell out:

* ``"int8"``: ``inv = 127 / amax``, ``q = floor(x inv + 0.5)`` clipped to
  +-127, int8; ``sa = amax / 127``.
* ``"e4m3"``: ``inv = 448 / amax``, ``q = e4m3(x inv)`` (round to nearest
  even, saturating: ``cvt.rn.satfinite.e4m3x2.f32``, two per instruction),
  E4M3 codes in a uint8 array; ``sa = amax / 448``; ``k`` even.

An all-zero row gets scale 0 and zeros. One warp per row, four rows per
block of :data:`THREADS` threads: each lane takes the largest magnitude of
its share of the row, five ``shfl.xor`` steps give every lane the row's,
and the lanes then write their share of ``aq``. No shared memory and no
block barrier. ``fmt`` is a compile-time constant: the other format's
branch compiles away.

Where the rows are C-contiguous and whole 16-byte units (``k`` a multiple
of 8 fp16 or 4 float32), a lane's share is the ``l``-th 16 bytes of each
512 (``vload.wide_rows``), so a warp's load is 512 contiguous bytes, and
its codes are one store (8 bytes for fp16 rows, 4 for float32: ``aq``
viewed as uint64 or uint32). A row whose first element is not 16-byte
aligned takes the same shares one element a load (the kernel's own check);
other layouts and lengths take the element kernel, lane ``l`` elements
``l, l + 32, ...``.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint32, uint64

from . import cvt, vload
from . import launch as L
from .launch import device_inline
from .warp import warp_max

THREADS = 128
ROWS = THREADS // 32  # one warp per row
QMAX = {"int8": 127, "e4m3": 448}
FAULTS = ("tail_dropped",)  # tests only: the wide path skips each row's last 16 bytes


@device_inline
def int8_of(x, inv):
    q = int32(math.floor(x * inv + float32(0.5)))
    return min(max(q, int32(-127)), int32(127))


@device_inline
def pack_bytes4(q0, q1, q2, q3):
    """Four int8 values' bytes in a word, the first in bits 0-7."""
    m = uint32(0xFF)
    return (
        (uint32(q0) & m)
        | ((uint32(q1) & m) << uint32(8))
        | ((uint32(q2) & m) << uint32(16))
        | ((uint32(q3) & m) << uint32(24))
    )


@device_inline
def int8_word(x0, x1, x2, x3, inv):
    """Four int8 codes, the first in bits 0-7."""
    return pack_bytes4(int8_of(x0, inv), int8_of(x1, inv), int8_of(x2, inv), int8_of(x3, inv))


@device_inline
def _e4m3_word(x0, x1, x2, x3, inv):
    """Four E4M3 codes, the first in bits 0-7."""
    lo = uint32(cvt.f32x2_to_e4m3x2(x0 * inv, x1 * inv))
    hi = uint32(cvt.f32x2_to_e4m3x2(x2 * inv, x3 * inv))
    return lo | (hi << uint32(16))


@lru_cache(maxsize=None)
def make_rowquant(fmt: str, esize: int = 0, fault: str = ""):
    """The kernel ``(aq, sa, a)``: ``esize`` 0 the element kernel (any row
    length and layout); 2 or 4 the wide one, for C-contiguous fp16 or
    float32 rows of whole 16-byte units, ``aq`` then viewed as uint64 (fp16:
    a lane's 8 codes) or uint32 (float32: 4). ``fault`` (:data:`FAULTS`,
    tests only) plants a bug the check must see."""
    if fmt not in QMAX:
        raise ValueError(f"row quantisation format {fmt!r}: one of {', '.join(QMAX)}")
    if fault and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    INT8 = fmt == "int8"
    QM = float32(QMAX[fmt])
    word = int8_word if INT8 else _e4m3_word

    @device_inline
    def inverse(amax):
        inv = float32(0.0)
        if amax > float32(0.0):
            inv = QM / amax
        return inv

    if not esize:

        @cuda.jit
        def rowquant(aq, sa, a):
            row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
            lane = cuda.laneid
            m = a.shape[0]
            k = a.shape[1]
            if row < m:  # whole warps leave together: the shuffles below stay full-warp
                amax = float32(0.0)
                for c in range(lane, k, 32):
                    amax = max(amax, abs(float32(a[row, c])))
                amax = warp_max(amax)
                inv = inverse(amax)
                if INT8:
                    for c in range(lane, k, 32):
                        aq[row, c] = np.int8(int8_of(float32(a[row, c]), inv))
                else:
                    for c in range(2 * lane, k, 64):
                        pair = cvt.f32x2_to_e4m3x2(float32(a[row, c]) * inv, float32(a[row, c + 1]) * inv)
                        aq[row, c] = np.uint8(pair & np.uint16(0xFF))
                        aq[row, c + 1] = np.uint8(pair >> np.uint16(8))
                if lane == 0:
                    sa[row] = amax / QM

        return rowquant

    per, _load, amax_of, share = vload.wide_rows(esize)
    EIGHT = per == 8
    dropped = 1 if fault == "tail_dropped" else 0

    @device_inline
    def codes(x, inv):
        if EIGHT:
            x0, x1, x2, x3, x4, x5, x6, x7 = x
            return uint64(word(x0, x1, x2, x3, inv)) | (uint64(word(x4, x5, x6, x7, inv)) << uint64(32))
        x0, x1, x2, x3 = x
        return word(x0, x1, x2, x3, inv)

    @cuda.jit
    def rowquant(aq, sa, a):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        k = a.shape[1]
        if row < a.shape[0]:
            aligned = vload.aligned16(a)
            units = k // per - dropped
            amax = float32(0.0)
            for c in range(lane, units, 32):
                amax = max(amax, amax_of(share(a, row, k, c, aligned)))
            amax = warp_max(amax)
            inv = inverse(amax)
            for c in range(lane, units, 32):
                aq[row, c] = codes(share(a, row, k, c, aligned), inv)
            if lane == 0:
                sa[row] = amax / QM

    return rowquant


def launcher(fmt: str, fault: str = ""):
    threads = L.check_block(THREADS)

    def run(aq, sa, a):
        m, k = a.shape
        if fmt == "e4m3" and k % 2:
            raise ValueError(f"e4m3 row quantisation converts pairs: k={k} must be even")
        esize = a.dtype.itemsize
        grid = L.check_grid(L.blocks_for(m, ROWS))
        wide = esize in (2, 4) and k % (16 // esize) == 0 and vload.c_contiguous(a) and vload.c_contiguous(aq)
        if wide:
            out = aq.view(np.uint64 if esize == 2 else np.uint32)
            make_rowquant(fmt, esize, fault)[grid, threads](out, sa, a)
        else:
            make_rowquant(fmt)[grid, threads](aq, sa, a)

    return run
