"""The 64-thread row-block GEMV body shared by ``gemv_64t`` and
``gemv_dual_64t`` (see those modules for each kernel's layout).

One block of ``NT = 64`` threads per ``ROWS`` rows; thread ``t`` takes packed
columns ``t, t + 64, ...`` of every row of the block, loads the column's 8
staged activations into registers once and uses them for every row (and,
with ``DUAL``, for the gate and the up word of each row). The ``R = ROWS``
(``2 * ROWS`` with ``DUAL``) partial sums per thread are reduced across the
block by a shared-memory tree (``R x 64`` fp32, six barrier levels);
threads ``0 .. ROWS-1`` write the outputs.

The kernels pass their arrays as tuples, ``outs`` and ``mats`` (``(qweight,
scales)`` or ``(qw_gate, s_gate, qw_up, s_up)``); ``DUAL`` is a constant, so
the branches it guards compile away.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ..common import launch as L
from ..common.int4_device import chunk_layout, dot_word_regs, load_x8, stage_x

NT = 64
DEFAULT_ROWS = 4
DEFAULT_KCHUNK = 2048


def _accumulators(ROWS: int, DUAL: bool) -> int:
    return 2 * ROWS if DUAL else ROWS


@lru_cache(maxsize=None)
def make_row_block(ROWS: int, KCHUNK: int, DUAL: bool):
    """The device function ``row_block(outs, mats, x)``: the whole kernel
    body for ``ROWS`` rows per block and K-chunks of ``KCHUNK`` inputs."""
    if ROWS < 1 or ROWS > 16:
        raise ValueError(f"ROWS={ROWS}: 1..16 rows per block")
    KWC, STRIDE, XS = chunk_layout(KCHUNK)
    R = _accumulators(ROWS, DUAL)
    RED = R * NT

    @cuda.jit(device=True)
    def row_block(outs, mats, x):
        qw = mats[0]
        sc = mats[1]
        n = qw.shape[0]
        kw = qw.shape[1]
        k = x.shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        red = cuda.shared.array(RED, dtype=float32)
        acc = cuda.local.array(R, dtype=float32)  # [first matrix's rows | second's]
        xv = cuda.local.array(8, dtype=float32)
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * ROWS
        for r in range(R):
            acc[r] = float32(0.0)
        nchunks = (k + KCHUNK - 1) // KCHUNK
        for c in range(nchunks):
            c0 = c * KCHUNK
            cuda.syncthreads()
            stage_x(xs, x, c0, k, tid, NT, KCHUNK, STRIDE)
            cuda.syncthreads()
            w0 = c * KWC
            w1 = min(kw, w0 + KWC)
            for gw in range(w0 + tid, w1, NT):
                load_x8(xv, xs, gw - w0, STRIDE)
                g = gw >> 4
                for r in range(ROWS):
                    row = row0 + r
                    if row < n:
                        acc[r] += float32(sc[row, g]) * dot_word_regs(qw[row, gw], xv)
                        if DUAL:
                            acc[ROWS + r] += float32(mats[3][row, g]) * dot_word_regs(mats[2][row, gw], xv)
        # Block-wide tree reduction of the R partial sums in shared memory.
        for r in range(R):
            red[r * NT + tid] = acc[r]
        cuda.syncthreads()
        s = NT // 2
        while s > 0:
            if tid < s:
                for r in range(R):
                    red[r * NT + tid] += red[r * NT + tid + s]
            cuda.syncthreads()
            s >>= 1
        if tid < ROWS and row0 + tid < n:
            outs[0][row0 + tid] = red[tid * NT]
            if DUAL:
                outs[1][row0 + tid] = red[(ROWS + tid) * NT]

    return row_block


def launch_config(n: int, ROWS: int, KCHUNK: int, DUAL: bool):
    grid = L.check_grid(L.blocks_for(n, ROWS))
    block = (L.check_block(NT, warps=True),)
    L.check_shared(4 * (chunk_layout(KCHUNK)[2] + _accumulators(ROWS, DUAL) * NT))
    return grid, block
