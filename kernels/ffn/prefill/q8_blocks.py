"""Activations to int8 per block of 32 along each row, for the Q4_K MMQ
arm: ``a`` fp16 (or float32) ``[m, k]`` -> ``aq`` int8 ``[m, k]`` and
``ds`` uint64 ``[m, k / 32]``, each block's float32 pair ``d8`` (bits 0-31)
and ``s8`` (bits 32-63) in the float32 operations
``naive.quantize_blocks_q8`` spells out (``s8 = d8 * sum(q)``, the sum of a
block's int8 values, which the Q4_K mins multiply). The pair is one 8-byte
store here and one 8-byte load in the MMQ, whose four lanes of a row then
read a stage's four blocks as one whole sector (two float32 planes were
two loads of half a sector each); :func:`split` reads them back apart.

One warp per row, four rows per block of 128 threads, no shared memory, no
block barrier. Where the rows are C-contiguous, a lane reads the ``l``-th
16 bytes of each 512 (``vload.wide_rows``: 8 fp16 or 4 float32 values), so
a warp's load is 512 contiguous bytes and a block of 32 is the 4 (fp16) or
8 (float32) neighbouring lanes' loads: its largest magnitude and the sum of
its int8 values are two (or three) ``shfl.xor`` steps each, and a lane
stores its codes at once (8 bytes, or 4: ``aq`` viewed as uint64 or
uint32). Rows whose first element is not 16-byte aligned take the same
shares one element a load (the kernel's own check); strided rows the
element kernel, lane ``l`` element ``l`` of each block of 32 (five steps
each).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint64

from ...common import cvt, vload
from ...common import launch as L
from ...common.launch import device_inline
from ...common.rowquant import int8_of, pack_bytes4
from ...common.warp import warp_max

BLOCK = 32
THREADS = 128
ROWS = THREADS // 32
_FULL = 0xFFFFFFFF
FAULTS = ("sum_short",)  # tests only: the wide path's block sums miss their last shuffle (half a block's values)


@device_inline
def _codes_sum4(x0, x1, x2, x3, inv):
    """Four int8 codes packed (the first in bits 0-7) and their sum."""
    q0, q1, q2, q3 = int8_of(x0, inv), int8_of(x1, inv), int8_of(x2, inv), int8_of(x3, inv)
    return pack_bytes4(q0, q1, q2, q3), q0 + q1 + q2 + q3


@device_inline
def _pair(d, total):
    """A block's ``d8`` (bits 0-31) and ``s8 = d8 * total`` (bits 32-63)."""
    s = d * float32(total)
    return uint64(cvt.f32_bits(d)) | (uint64(cvt.f32_bits(s)) << uint64(32))


def split(ds):
    """``(d8, s8)`` float32 ``[m, k / 32]`` of a host copy of ``ds``."""
    x = np.ascontiguousarray(ds).view(np.float32)
    return x[:, 0::2], x[:, 1::2]


@device_inline
def _inverse(amax):
    """127 / ``amax``, 0 for an all-zero block."""
    inv = float32(0.0)
    if amax > float32(0.0):
        inv = float32(127.0) / amax
    return inv


@lru_cache(maxsize=None)
def make_q8_blocks(esize: int = 0, fault: str = ""):
    """The kernel ``(aq, ds, a)``: ``esize`` 0 the element kernel (any
    layout); 2 or 4 the wide one for C-contiguous fp16 or float32 rows,
    ``aq`` viewed as uint64 (fp16: a lane's 8 codes) or uint32 (float32: 4).
    ``fault`` (:data:`FAULTS`, tests only) plants a bug the check must see."""
    if fault and fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}")
    if not esize:

        @cuda.jit
        def q8_blocks(aq, ds, a):
            row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
            lane = cuda.laneid
            m = a.shape[0]
            k = a.shape[1]
            if row < m:  # whole warps leave together
                for b in range(k // BLOCK):
                    x = float32(a[row, b * BLOCK + lane])
                    amax = warp_max(abs(x))
                    q = int8_of(x, _inverse(amax))
                    aq[row, b * BLOCK + lane] = np.int8(q)
                    total = q
                    for off in (16, 8, 4, 2, 1):
                        total += cuda.shfl_xor_sync(_FULL, total, off)
                    if lane == 0:
                        ds[row, b] = _pair(amax / float32(127.0), total)

        return q8_blocks

    per, load, amax_of, unit = vload.wide_rows(esize)
    lanes = BLOCK // per  # a block of 32's lanes: 4 (fp16) or 8 (float32)
    shuffles = (1, 2) if lanes == 4 else (1, 2, 4)
    sums = shuffles[:-1] if fault == "sum_short" else shuffles
    EIGHT = per == 8

    @device_inline
    def codes(x, inv):
        """A lane's codes as one word of its store, and their sum."""
        if EIGHT:
            x0, x1, x2, x3, x4, x5, x6, x7 = x
            lo, s0 = _codes_sum4(x0, x1, x2, x3, inv)
            hi, s1 = _codes_sum4(x4, x5, x6, x7, inv)
            return uint64(lo) | (uint64(hi) << uint64(32)), s0 + s1
        x0, x1, x2, x3 = x
        w, s = _codes_sum4(x0, x1, x2, x3, inv)
        return w, s

    @cuda.jit
    def q8_blocks(aq, ds, a):
        row = cuda.blockIdx.x * ROWS + (cuda.threadIdx.x >> 5)
        lane = cuda.laneid
        k = a.shape[1]
        if row < a.shape[0]:  # whole warps leave together
            aligned = vload.aligned16(a)
            units = k // per
            for c0 in range(0, units, 32):  # the same trip count in every lane: the shuffles need all 32
                c = c0 + lane
                ok = c < units
                x = load(a, 0, False)  # (zeros: a lane past the row loads nothing)
                if ok:
                    x = unit(a, row, k, c, aligned)
                amax = amax_of(x)
                for off in shuffles:
                    amax = max(amax, cuda.shfl_xor_sync(_FULL, amax, off))
                w, total = codes(x, _inverse(amax))
                for off in sums:
                    total += cuda.shfl_xor_sync(_FULL, total, off)
                if ok:
                    aq[row, c] = w
                    if lane % lanes == 0:  # a warp's eight (fp16) or four blocks: 64 or 32 bytes together
                        ds[row, c // lanes] = _pair(amax / float32(127.0), total)

    return q8_blocks


def launcher(fault: str = ""):
    threads = L.check_block(THREADS)

    def run(aq, ds, a):
        m, k = a.shape
        if k % BLOCK:
            raise ValueError(f"k={k}: int8 blocks of {BLOCK} need k a multiple of {BLOCK}")
        esize = a.dtype.itemsize
        grid = L.check_grid(L.blocks_for(m, ROWS))
        if esize in (2, 4) and vload.c_contiguous(a) and vload.c_contiguous(aq):
            out = aq.view(np.uint64 if esize == 2 else np.uint32)
            make_q8_blocks(esize, fault)[grid, threads](out, ds, a)
        else:
            make_q8_blocks()[grid, threads](aq, ds, a)

    return run
