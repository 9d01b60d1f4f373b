"""W4A16 decode GEMV, 64 threads per row block (``gemv_sw`` off).

The kernel the one-warp-per-row GEMV replaced. Same operands as
``gemv_sw``: ``y[n] = W x`` with ``qweight uint32[n, k/8]``,
``scales fp16[n, k/128]``, ``x fp16[k]``, fp32 accumulation, fp16 ``y``.

Launch: one block of 64 threads (two warps) per block of ``ROWS`` rows
(default 4), ``ceil(n / ROWS)`` blocks. All 64 threads work on every row of
the block: thread ``t`` takes the 4-word (16-byte) column groups ``t, t+64,
...`` of each row (single words ``t, t+64, ...`` where ``k % 32 != 0``;
see ``_row_block``)::

    rows r0..r0+3     column groups (4 packed words) ->
      r0   t0 t1 ... t63 | t0 t1 ... t63 | ...
      r1   t0 t1 ... t63 | t0 t1 ... t63 | ...    1 KiB coalesced per row
      ...                                          per step, ROWS loads in flight

A thread loads the 8 staged activations of each word of its group into
registers once and uses them for all ``ROWS`` rows (``x`` is staged per K-chunk in shared
memory exactly as in ``gemv_sw``). Each thread ends with ``ROWS`` partial
sums, reduced across the block by a shared-memory tree (``ROWS x 64`` fp32,
six ``syncthreads`` levels); threads ``0..ROWS-1`` write the outputs.
Against ``gemv_sw`` it reuses each staged activation across ``ROWS`` rows
from registers, but pays a block-wide barrier reduction per row block and
re-stages ``x`` for every 4 rows (no row-group loop). Both read the same
bytes; only the summation order differs, so results agree to rounding.

The body is ``_row_block``'s, shared with ``gemv_dual_64t``.
"""

from __future__ import annotations

from functools import lru_cache, partial

from numba import cuda

from .._device import launcher, path_build
from .._row_block import DEFAULT_KCHUNK, DEFAULT_ROWS, make_row_block
from .._row_block import launch_config as _launch_config

launch_config = partial(_launch_config, DUAL=False)


@lru_cache(maxsize=None)
def make_gemv_64t(ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK, TAIL_FAULT: int = 0):
    """Compile the 64-thread GEMV for ``ROWS`` rows per block and a
    shared-memory chunk of ``KCHUNK`` activations (``TAIL_FAULT``: a planted
    fault, for tests; see ``_row_block``)."""
    row_block = make_row_block(ROWS, KCHUNK, False, TAIL_FAULT)

    @cuda.jit
    def gemv_64t(y, qweight, scales, x):
        row_block((y,), (qweight, scales), x)

    return gemv_64t


def make_launch(n: int, k: int, *, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qweight, scales, x)`` for an ``n x k`` weight."""
    return launcher(make_gemv_64t, launch_config, n, k, ROWS, KCHUNK)


build = path_build(make_launch, ("y", "qweight", "scales", "x"))
