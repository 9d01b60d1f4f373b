"""The 64-thread row-block GEMV body shared by ``gemv_64t`` and
``gemv_dual_64t`` (see those modules for each kernel's layout).

One block of ``NT = 64`` threads per ``ROWS`` rows; every thread works on
every row of the block and uses the staged activations it loads into
registers for all of them (and, with ``DUAL``, for the gate and the up word
of each row). The ``R = ROWS`` (``2 * ROWS`` with ``DUAL``) partial sums
per thread are reduced across the block by a shared-memory tree (``R x 64``
fp32, six barrier levels); threads ``0 .. ROWS-1`` write the outputs.

How a thread reads the rows (activations staged per K-chunk in
``common.int4_device``'s grouped layout; ``x`` by 16-byte loads, one at a
time, where it starts on 16 bytes, ``stage_x_grouped_v4_serial``: every
block stages the whole chunk, as many bytes as its rows' weights, so one
fp16 a load was half the block's loaded bytes in 2-byte loads, a round trip
each four of a thread's 32 at the default chunk):

* **16-byte loads** when the rows are 16-byte aligned (``k % 32 == 0`` and
  the matrices' first words aligned): thread ``t`` owns the 4-word groups
  ``t, t + 64, ...`` of the chunk (1,024 contiguous bytes per row and step)
  and loads its group of all ``ROWS`` rows (``2 * ROWS`` with ``DUAL``)
  with ``ld.global.nc.v4.u32`` (``common.vload``) before using any: four
  16-byte loads in flight per thread, eight in the dual kernel. Then, word
  by word, the word's 8 staged activations go to registers once and feed
  the word of every row; one scale per row and group.
* **32-bit loads** otherwise (``k % 32 != 0``: the four rows of a block
  start at four different 16-byte phases, so no column of 16 bytes is
  common to them): thread ``t`` on words ``t, t + 64, ...``, as before.

``TAIL_FAULT`` (tests only, default 0) plants a fault in the 16-byte path's
tail, as in ``_warp_rows``: 1 drops each chunk's last group, 2 lets the
thread one past the end load it again and count it twice.

The kernels pass their arrays as tuples, ``outs`` and ``mats`` (``(qweight,
scales)`` or ``(qw_gate, s_gate, qw_up, s_up)``); ``DUAL`` is a constant, so
the branches it guards compile away.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ..common import index32
from ..common import launch as L
from ..common.int4_device import (
    UNSCALE,
    dot_word_regs,
    group_layout,
    load_x8_at,
    stage_x_grouped,
    stage_x_grouped_v4_serial,
    word_at,
)
from ..common.smem import ALIGN16, smem_addr
from ..common.vload import aligned16, ldg_v4
from ._warp_rows import TAIL_FAULTS, put4

NT = 64
DEFAULT_ROWS = 4
DEFAULT_KCHUNK = 2048


# The reduction's rows of NT partial sums lie NT + 1 floats apart, so the
# final read of each row's sum (thread r reads row r's first) falls in a bank
# of its own; NT apart they all fell in bank 0 (4-way at four rows).
RED_PITCH = NT + 1


def _accumulators(ROWS: int, DUAL: bool) -> int:
    return 2 * ROWS if DUAL else ROWS


@lru_cache(maxsize=None)
def make_row_block(ROWS: int, KCHUNK: int, DUAL: bool, TAIL_FAULT: int = 0):
    """The device function ``row_block(outs, mats, x)``: the whole kernel
    body for ``ROWS`` rows per block and K-chunks of ``KCHUNK`` inputs."""
    if ROWS < 1 or ROWS > 16:
        raise ValueError(f"ROWS={ROWS}: 1..16 rows per block")
    if TAIL_FAULT not in TAIL_FAULTS:
        raise ValueError(f"TAIL_FAULT={TAIL_FAULT}: one of {TAIL_FAULTS}")
    KWC, _, XS = group_layout(KCHUNK)
    R = _accumulators(ROWS, DUAL)
    RED = R * RED_PITCH
    WV = 4 * R  # a group's words, every row and matrix

    @cuda.jit(device=True)
    def row_block(outs, mats, x):
        qw = mats[0]
        sc = mats[1]
        n = qw.shape[0]
        kw = qw.shape[1]
        k = x.shape[0]
        xs = cuda.shared.array(XS, dtype=float32, alignment=ALIGN16)
        xb = smem_addr(xs)
        red = cuda.shared.array(RED, dtype=float32)
        acc = cuda.local.array(R, dtype=float32)  # [first matrix's rows | second's]
        part = cuda.local.array(R, dtype=float32)  # one group's sums, before its scale
        xv = cuda.local.array(8, dtype=float32)
        wv = cuda.local.array(WV, dtype=uint32)  # a group of every row: [first matrix | second]
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * ROWS
        for r in range(R):
            acc[r] = float32(0.0)
        vec = (kw & 3) == 0 and aligned16(qw)
        if DUAL:
            vec = vec and aligned16(mats[2])
        xvec = aligned16(x)  # x by 16-byte loads
        nchunks = (k + KCHUNK - 1) // KCHUNK
        for c in range(nchunks):
            c0 = c * KCHUNK
            cuda.syncthreads()
            if xvec:
                stage_x_grouped_v4_serial(xs, x, c0, k, tid, NT, KCHUNK)
            else:
                stage_x_grouped(xs, x, c0, k, tid, NT, KCHUNK)
            cuda.syncthreads()
            w0 = c * KWC
            w1 = min(kw, w0 + KWC)
            if vec:
                g0 = np.int32(w0 >> 2)
                g1 = np.int32(w1 >> 2)
                lim = np.int32(g1 - 1 if TAIL_FAULT == 1 else (g1 + 1 if TAIL_FAULT == 2 else g1))
                g = np.int32(g0 + tid)
                while g < lim:  # a 32-bit counter (Numba's range counts in 64 bits)
                    gi = min(g, np.int32(g1 - 1)) if TAIL_FAULT == 2 else g
                    w4 = index32.u32(4 * gi)
                    # Every row's group is loaded before any is used. A row
                    # past ``n`` (the last block's) reads row ``n - 1`` again
                    # and its sums are never stored, so no row is tested in
                    # the loop and each row's address is formed once, before
                    # it (index32).
                    for r in range(ROWS):
                        rr = min(row0 + r, n - 1)
                        put4(wv, 4 * r, ldg_v4(index32.row(qw[rr]), w4))
                        if DUAL:
                            put4(wv, 4 * (ROWS + r), ldg_v4(index32.row(mats[2][rr]), w4))
                    for r in range(R):
                        part[r] = float32(0.0)
                    col = index32.u32(4 * (gi - g0))
                    for t in range(4):
                        load_x8_at(xv, word_at(xb, col + t))
                        for r in range(ROWS):
                            part[r] += dot_word_regs(wv[4 * r + t], xv)
                            if DUAL:
                                part[ROWS + r] += dot_word_regs(wv[4 * (ROWS + r) + t], xv)
                    gs = index32.u32(gi >> 2)
                    for r in range(ROWS):
                        rr = min(row0 + r, n - 1)
                        acc[r] += float32(index32.row(sc[rr])[gs]) * part[r]
                        if DUAL:
                            acc[ROWS + r] += float32(index32.row(mats[3][rr])[gs]) * part[ROWS + r]
                    g = np.int32(g + NT)
            else:
                for gw in range(w0 + tid, w1, NT):
                    load_x8_at(xv, word_at(xb, gw - w0))
                    gs = gw >> 4
                    for r in range(ROWS):
                        row = row0 + r
                        if row < n:
                            acc[r] += float32(sc[row, gs]) * dot_word_regs(qw[row, gw], xv)
                            if DUAL:
                                acc[ROWS + r] += float32(mats[3][row, gs]) * dot_word_regs(mats[2][row, gw], xv)
        # Block-wide tree reduction of the R partial sums in shared memory.
        for r in range(R):
            red[r * RED_PITCH + tid] = acc[r]
        cuda.syncthreads()
        s = NT // 2
        while s > 0:
            if tid < s:
                for r in range(R):
                    red[r * RED_PITCH + tid] += red[r * RED_PITCH + tid + s]
            cuda.syncthreads()
            s >>= 1
        if tid < ROWS and row0 + tid < n:
            outs[0][row0 + tid] = red[tid * RED_PITCH] * float32(UNSCALE)
            if DUAL:
                outs[1][row0 + tid] = red[(ROWS + tid) * RED_PITCH] * float32(UNSCALE)

    return row_block


def launch_config(n: int, ROWS: int, KCHUNK: int, DUAL: bool):
    grid = L.check_grid(L.blocks_for(n, ROWS))
    block = (L.check_block(NT, warps=True),)
    L.check_shared(4 * (group_layout(KCHUNK)[2] + _accumulators(ROWS, DUAL) * RED_PITCH))
    return grid, block
