"""Activations to int8 per block of 32 along each row, for the Q4_K MMQ
arm: ``a`` fp16 ``[m, k]`` -> ``aq`` int8 ``[m, k]``, ``d8`` and ``s8``
float32 ``[m, k / 32]``, in the float32 operations
``naive.quantize_blocks_q8`` spells out (``s8 = d8 * sum(q)``, the sum of a
block's int8 values, which the Q4_K mins multiply).

One warp per row, four rows per block of 128 threads; lane ``l`` takes
element ``l`` of each block of 32, so a block's largest magnitude and the
sum of its int8 values are five ``shfl.xor`` steps each. No shared memory,
no block barrier.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32

from ...common import launch as L

BLOCK = 32
THREADS = 128
ROWS = THREADS // 32
_FULL = 0xFFFFFFFF


@lru_cache(maxsize=None)
def make_q8_blocks():
    @cuda.jit
    def q8_blocks(aq, d8, s8, a):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        m = a.shape[0]
        k = a.shape[1]
        if row < m:  # whole warps leave together
            for b in range(k // BLOCK):
                x = float32(a[row, b * BLOCK + lane])
                amax = abs(x)
                for off in (16, 8, 4, 2, 1):
                    amax = max(amax, cuda.shfl_xor_sync(_FULL, amax, off))
                inv = float32(0.0)
                if amax > float32(0.0):
                    inv = float32(127.0) / amax
                q = int32(math.floor(x * inv + float32(0.5)))
                q = min(max(q, int32(-127)), int32(127))
                aq[row, b * BLOCK + lane] = np.int8(q)
                total = q
                for off in (16, 8, 4, 2, 1):
                    total += cuda.shfl_xor_sync(_FULL, total, off)
                if lane == 0:
                    d = amax / float32(127.0)
                    d8[row, b] = d
                    s8[row, b] = d * float32(total)

    return q8_blocks


def launcher():
    kernel = make_q8_blocks()
    threads = L.check_block(THREADS)

    def run(aq, d8, s8, a):
        if a.shape[1] % BLOCK:
            raise ValueError(f"k={a.shape[1]}: int8 blocks of {BLOCK} need k a multiple of {BLOCK}")
        kernel[L.check_grid(L.blocks_for(a.shape[0], ROWS)), threads](aq, d8, s8, a)

    return run
