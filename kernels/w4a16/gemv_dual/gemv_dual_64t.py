"""W4A16 dual decode GEMV, 64 threads per row block (``gemv_sw`` off).

``gate = W_gate x`` and ``up = W_up x`` in one pass, laid out and launched
as ``gemv_64t``: one 64-thread block per ``ROWS`` rows (default 4), thread
``t`` on the 4-word column groups ``t, t+64, ...`` (``2 * ROWS`` 16-byte
loads in flight; single words where ``k % 32 != 0``); the 8 staged
activations of a column are loaded to registers once and used for
``2 * ROWS`` packed words (the gate and up word of each row)::

    rows r0..r0+3, column c of the group (thread t = group mod 64):
      x8 = activations of c    (registers)
      acc_g[r] += s_gate[r, c/16] * dot(W_gate[r, c], x8)
      acc_u[r] += s_up[r, c/16]   * dot(W_up[r, c],   x8)

The ``2 * ROWS`` partial sums per thread are reduced across the block by a
shared-memory tree (``2 x ROWS x 64`` fp32); threads ``0..ROWS-1`` write
``gate`` and ``up`` (fp16). Body: ``_row_block`` with ``DUAL``.
"""

from __future__ import annotations

from functools import lru_cache, partial

from ...common import launch as L
from .._device import launcher, path_build
from .._row_block import DEFAULT_KCHUNK, DEFAULT_ROWS, NT, make_row_block
from .._row_block import launch_config as _launch_config

launch_config = partial(_launch_config, DUAL=True)


# Resident 64-thread blocks an SM the kernel is bounded to: eight, 128
# registers (unbounded, ptxas takes 132 and six fit; at ten it spills).
DUAL_BLOCKS = 8


@lru_cache(maxsize=None)
def make_gemv_dual_64t(ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK, TAIL_FAULT: int = 0):
    row_block = make_row_block(ROWS, KCHUNK, True, TAIL_FAULT)

    @L.jit_bounded(NT, DUAL_BLOCKS)
    def gemv_dual_64t(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        row_block((gate, up), (qw_gate, s_gate, qw_up, s_up), x)

    return gemv_dual_64t


def make_launch(n: int, k: int, *, ROWS: int = DEFAULT_ROWS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(gate, up, qw_gate, s_gate, qw_up, s_up, x)`` for ``n x k`` weights."""
    return launcher(make_gemv_dual_64t, launch_config, n, k, ROWS, KCHUNK)


build = path_build(make_launch, ("gate", "up", "qw_gate", "s_gate", "qw_up", "s_up", "x"))
