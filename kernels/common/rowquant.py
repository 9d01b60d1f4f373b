"""Per-token activation quantisation, shared by the int8 and FP8 arms:
``a`` fp16 ``[m, k]`` -> ``aq`` ``[m, k]`` and ``sa`` float32 ``[m]``,
symmetric per row (one token's activations share one scale), in the
float32 operations ``naive.quantize_rows_int8`` / ``naive.quantize_rows_e4m3``
spell out:

* ``"int8"``: ``inv = 127 / amax``, ``q = floor(x inv + 0.5)`` clipped to
  +-127, int8; ``sa = amax / 127``.
* ``"e4m3"``: ``inv = 448 / amax``, ``q = e4m3(x inv)`` (round to nearest
  even, saturating: ``cvt.rn.satfinite.e4m3x2.f32``, two per instruction),
  E4M3 codes in a uint8 array; ``sa = amax / 448``; ``k`` even.

An all-zero row gets scale 0 and zeros. One warp per row, four rows per
block of :data:`THREADS` threads: each lane takes the largest magnitude of
its strided share of the row (consecutive lanes, consecutive elements), five
``shfl.xor`` steps give every lane the row's, and the lanes then write their
share of ``aq``. No shared memory and no block barrier. ``fmt`` is a
compile-time constant: the other format's branch compiles away.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32

from . import cvt
from . import launch as L

THREADS = 128
ROWS = THREADS // 32  # one warp per row
QMAX = {"int8": 127, "e4m3": 448}
_FULL = 0xFFFFFFFF


@lru_cache(maxsize=None)
def make_rowquant(fmt: str):
    if fmt not in QMAX:
        raise ValueError(f"row quantisation format {fmt!r}: one of {', '.join(QMAX)}")
    INT8 = fmt == "int8"
    QM = float32(QMAX[fmt])

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
            for off in (16, 8, 4, 2, 1):
                amax = max(amax, cuda.shfl_xor_sync(_FULL, amax, off))
            inv = float32(0.0)
            if amax > float32(0.0):
                inv = QM / amax
            if INT8:
                for c in range(lane, k, 32):
                    q = int32(math.floor(float32(a[row, c]) * inv + float32(0.5)))
                    q = min(max(q, int32(-127)), int32(127))
                    aq[row, c] = np.int8(q)
            else:
                for c in range(2 * lane, k, 64):
                    pair = cvt.f32x2_to_e4m3x2(float32(a[row, c]) * inv, float32(a[row, c + 1]) * inv)
                    aq[row, c] = np.uint8(pair & np.uint16(0xFF))
                    aq[row, c + 1] = np.uint8(pair >> np.uint16(8))
            if lane == 0:
                sa[row] = amax / QM

    return rowquant


def launcher(fmt: str):
    kernel = make_rowquant(fmt)
    threads = L.check_block(THREADS)

    def run(aq, sa, a):
        if fmt == "e4m3" and a.shape[1] % 2:
            raise ValueError(f"e4m3 row quantisation converts pairs: k={a.shape[1]} must be even")
        kernel[L.check_grid(L.blocks_for(a.shape[0], ROWS)), threads](aq, sa, a)

    return run
