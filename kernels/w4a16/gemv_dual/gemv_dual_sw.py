"""W4A16 dual decode GEMV, one warp per output row (``gemv_sw`` on).

Gate and up projections of a SiLU FFN in one pass over ``x``:
``gate[n] = W_gate x`` and ``up[n] = W_up x``, both ``W`` packed as in
``leverctl_kernels.common.int4`` (``uint32[n, k/8]`` + ``fp16[n, k/128]``),
``x fp16[k]``, fp32 accumulation, both outputs written as fp16.

Launch: exactly ``gemv_sw``'s (``WARPS`` warps per block, warp = row, blocks
striding over row groups, ``x`` staged per K-chunk in shared memory,
transposed by nibble). Each lane reads the gate word and the up word of the
same packed column, so one staged activation feeds two int4 values::

    warp w -> row r:   lane l reads W_gate[r, l], W_up[r, l],
                       then   W_gate[r, l+32], W_up[r, l+32], ...
                       (two coalesced 128 B lines per warp step)
    acc_gate, acc_up   -> two shuffle reductions -> lane 0 writes gate[r], up[r]

Against two separate GEMVs it halves the activation staging and the
launches, and keeps two independent load streams in flight per lane.
Body: ``_warp_rows`` with ``DUAL``.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda

from .._device import launcher, path_build
from .._warp_rows import DEFAULT_KCHUNK, DEFAULT_WARPS, launch_config, make_warp_rows


@lru_cache(maxsize=None)
def make_gemv_dual_sw(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    rows = make_warp_rows(WARPS, KCHUNK, True, False)

    @cuda.jit
    def gemv_dual_sw(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        rows((gate, up), (qw_gate, s_gate, qw_up, s_up), (x,))

    return gemv_dual_sw


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(gate, up, qw_gate, s_gate, qw_up, s_up, x)`` for ``n x k`` weights."""
    return launcher(make_gemv_dual_sw, launch_config, n, k, WARPS, KCHUNK)


build = path_build(make_launch, ("gate", "up", "qw_gate", "s_gate", "qw_up", "s_up", "x"))
