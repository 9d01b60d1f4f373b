"""W4A16 decode GEMV, 64 threads per row block (``gemv_sw`` off).

The kernel the one-warp-per-row GEMV replaced. Same operands as
``gemv_sw``: ``y[n] = W x`` with ``qweight uint32[n, k/8]``,
``scales fp16[n, k/128]``, ``x fp16[k]``, fp32 accumulation, fp16 ``y``.

Launch: one block of 64 threads (two warps) per block of ``ROWS`` rows
(default 4), ``ceil(n / ROWS)`` blocks. All 64 threads work on every row of
the block: thread ``t`` takes packed columns ``t, t+64, ...`` of each row::

    rows r0..r0+3     columns (packed words) ->
      r0   t0 t1 ... t63 | t0 t1 ... t63 | ...
      r1   t0 t1 ... t63 | t0 t1 ... t63 | ...    256 B coalesced per row
      ...                                          per step, ROWS loads in flight

A thread loads the 8 staged activations of its column into registers once
and uses them for all ``ROWS`` rows (``x`` is staged per K-chunk in shared
memory exactly as in ``gemv_sw``). Each thread ends with ``ROWS`` partial
sums, reduced across the block by a shared-memory tree (``ROWS x 64`` fp32,
six ``syncthreads`` levels); threads ``0..ROWS-1`` write the outputs.
Against ``gemv_sw`` it reuses each staged activation across ``ROWS`` rows
from registers, but pays a block-wide barrier reduction per row block and
re-stages ``x`` for every 4 rows (no row-group loop). Both read the same
bytes; only the summation order differs, so results agree to rounding.
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ..common import launch as L
from ._device import dot_word_regs, load_x8, stage_x

NT = 64
DEFAULT_ROWS = 4
DEFAULT_KCHUNK = 2048


@lru_cache(maxsize=None)
def make_gemv_64t(ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    """Compile the 64-thread GEMV for ``ROWS`` rows per block and a
    shared-memory chunk of ``KCHUNK`` activations."""
    if ROWS < 1 or ROWS > 16:
        raise ValueError(f"ROWS={ROWS}: 1..16 rows per block")
    if KCHUNK < 256 or KCHUNK % 256:
        raise ValueError(f"KCHUNK={KCHUNK}: a positive multiple of 256 inputs")
    KWC = KCHUNK // 8
    STRIDE = KWC + 1
    XS = 8 * STRIDE
    RED = ROWS * NT

    @cuda.jit
    def gemv_64t(y, qweight, scales, x):
        n = qweight.shape[0]
        kw = qweight.shape[1]
        k = x.shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        red = cuda.shared.array(RED, dtype=float32)
        acc = cuda.local.array(ROWS, dtype=float32)
        xv = cuda.local.array(8, dtype=float32)
        tid = cuda.threadIdx.x
        row0 = cuda.blockIdx.x * ROWS
        for r in range(ROWS):
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
                        acc[r] += float32(scales[row, g]) * dot_word_regs(qweight[row, gw], xv)
        # Block-wide tree reduction of the ROWS partial sums in shared memory.
        for r in range(ROWS):
            red[r * NT + tid] = acc[r]
        cuda.syncthreads()
        s = NT // 2
        while s > 0:
            if tid < s:
                for r in range(ROWS):
                    red[r * NT + tid] += red[r * NT + tid + s]
            cuda.syncthreads()
            s >>= 1
        if tid < ROWS and row0 + tid < n:
            y[row0 + tid] = red[tid * NT]

    return gemv_64t


def launch_config(n: int, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    grid = L.check_grid(L.blocks_for(n, ROWS))
    block = (L.check_block(NT, warps=True),)
    L.check_shared(4 * (8 * (KCHUNK // 8 + 1) + ROWS * NT))
    return grid, block


def make_launch(n: int, k: int, *, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qweight, scales, x)`` for an ``n x k`` weight."""
    if k % 8:
        raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
    kern = make_gemv_64t(ROWS, KCHUNK)
    grid, block = launch_config(n, ROWS, KCHUNK)

    def launch(y, qweight, scales, x):
        kern[grid, block](y, qweight, scales, x)

    return launch


def build(shape, *, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    run = make_launch(shape["n"], shape["k"], ROWS=ROWS, KCHUNK=KCHUNK)

    def launch(bufs):
        run(bufs["y"], bufs["qweight"], bufs["scales"], bufs["x"])

    return launch
