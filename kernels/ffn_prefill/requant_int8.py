"""Activation requantisation for the int8 arm: ``a`` fp16 ``[m, k]`` ->
``aq`` int8 ``[m, k]`` and ``sa`` float32 ``[m]``, symmetric per row (one
token's activations share one scale), in the float32 operations
:func:`leverctl_kernels.ffn_prefill.naive.quantize_rows_int8` spells out.

One block of :data:`THREADS` threads per row: each thread takes the largest
magnitude of its strided share of the row, a shared-memory tree reduces the
block's, and the threads then write their share of ``aq``.
"""
from __future__ import annotations

from functools import lru_cache

import math

import numpy as np
from numba import cuda, float32, int32

from ..common import launch as L
from .naive import INT8_MAX

THREADS = 128


@lru_cache(maxsize=None)
def make_requant(threads: int = THREADS):
    @cuda.jit
    def requant_int8(aq, sa, a):
        row = cuda.blockIdx.x
        tid = cuda.threadIdx.x
        k = a.shape[1]
        red = cuda.shared.array(threads, dtype=float32)
        amax = float32(0.0)
        for c in range(tid, k, threads):
            amax = max(amax, abs(float32(a[row, c])))
        red[tid] = amax
        cuda.syncthreads()
        step = threads // 2
        while step > 0:
            if tid < step:
                red[tid] = max(red[tid], red[tid + step])
            cuda.syncthreads()
            step //= 2
        amax = red[0]
        inv = float32(0.0)
        if amax > float32(0.0):
            inv = float32(INT8_MAX) / amax
        for c in range(tid, k, threads):
            q = int32(math.floor(float32(a[row, c]) * inv + float32(0.5)))
            q = min(max(q, int32(-INT8_MAX)), int32(INT8_MAX))
            aq[row, c] = np.int8(q)
        if tid == 0:
            sa[row] = amax / float32(INT8_MAX)

    return requant_int8


def launcher(threads: int = THREADS):
    kernel = make_requant(threads)
    L.check_block(threads)

    def run(aq, sa, a):
        grid = L.check_grid(a.shape[0])
        kernel[grid, threads](aq, sa, a)

    return run
