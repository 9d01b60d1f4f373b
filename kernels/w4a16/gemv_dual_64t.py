"""W4A16 dual decode GEMV, 64 threads per row block (``gemv_sw`` off).

``gate = W_gate x`` and ``up = W_up x`` in one pass, laid out and launched
as ``gemv_64t``: one 64-thread block per ``ROWS`` rows (default 4), thread
``t`` on packed columns ``t, t+64, ...``; the 8 staged activations of a
column are loaded to registers once and used for ``2 * ROWS`` packed words
(the gate and up word of each row)::

    rows r0..r0+3, column c (thread t = c mod 64):
      x8 = xs[:, c]            (registers)
      acc_g[r] += s_gate[r, c/16] * dot(W_gate[r, c], x8)
      acc_u[r] += s_up[r, c/16]   * dot(W_up[r, c],   x8)

The ``2 * ROWS`` partial sums per thread are reduced across the block by a
shared-memory tree (``2 x ROWS x 64`` fp32); threads ``0..ROWS-1`` write
``gate`` and ``up`` (fp16).
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ..common import launch as L
from ._device import dot_word_regs, load_x8, stage_x
from .gemv_64t import DEFAULT_KCHUNK, DEFAULT_ROWS, NT


@lru_cache(maxsize=None)
def make_gemv_dual_64t(ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    if ROWS < 1 or ROWS > 16:
        raise ValueError(f"ROWS={ROWS}: 1..16 rows per block")
    if KCHUNK < 256 or KCHUNK % 256:
        raise ValueError(f"KCHUNK={KCHUNK}: a positive multiple of 256 inputs")
    KWC = KCHUNK // 8
    STRIDE = KWC + 1
    XS = 8 * STRIDE
    R2 = 2 * ROWS
    RED = R2 * NT

    @cuda.jit
    def gemv_dual_64t(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        n = qw_gate.shape[0]
        kw = qw_gate.shape[1]
        k = x.shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        red = cuda.shared.array(RED, dtype=float32)
        acc = cuda.local.array(R2, dtype=float32)  # [gate rows | up rows]
        xv = cuda.local.array(8, dtype=float32)
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * ROWS
        for r in range(R2):
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
                        acc[r] += float32(s_gate[row, g]) * dot_word_regs(qw_gate[row, gw], xv)
                        acc[ROWS + r] += float32(s_up[row, g]) * dot_word_regs(qw_up[row, gw], xv)
        for r in range(R2):
            red[r * NT + tid] = acc[r]
        cuda.syncthreads()
        s = NT // 2
        while s > 0:
            if tid < s:
                for r in range(R2):
                    red[r * NT + tid] += red[r * NT + tid + s]
            cuda.syncthreads()
            s >>= 1
        if tid < ROWS and row0 + tid < n:
            gate[row0 + tid] = red[tid * NT]
            up[row0 + tid] = red[(ROWS + tid) * NT]

    return gemv_dual_64t


def launch_config(n: int, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    grid = L.check_grid(L.blocks_for(n, ROWS))
    block = (L.check_block(NT, warps=True),)
    L.check_shared(4 * (8 * (KCHUNK // 8 + 1) + 2 * ROWS * NT))
    return grid, block


def make_launch(n: int, k: int, *, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(gate, up, qw_gate, s_gate, qw_up, s_up, x)`` for ``n x k`` weights."""
    if k % 8:
        raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
    kern = make_gemv_dual_64t(ROWS, KCHUNK)
    grid, block = launch_config(n, ROWS, KCHUNK)

    def launch(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        kern[grid, block](gate, up, qw_gate, s_gate, qw_up, s_up, x)

    return launch


def build(shape, *, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    run = make_launch(shape["n"], shape["k"], ROWS=ROWS, KCHUNK=KCHUNK)

    def launch(bufs):
        run(bufs["gate"], bufs["up"], bufs["qw_gate"], bufs["s_gate"], bufs["qw_up"], bufs["s_up"], bufs["x"])

    return launch
