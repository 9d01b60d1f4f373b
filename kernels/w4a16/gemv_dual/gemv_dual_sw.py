"""W4A16 dual decode GEMV, one warp per output row (``gemv_sw`` on).

Gate and up projections of a SiLU FFN in one pass over ``x``:
``gate[n] = W_gate x`` and ``up[n] = W_up x``, both ``W`` packed as in
``leverctl_kernels.common.int4`` (``uint32[n, k/8]`` + ``fp16[n, k/128]``),
``x fp16[k]``, fp32 accumulation, both outputs written as fp16.

Launch: exactly ``gemv_sw``'s (``WARPS`` warps per block, warp = row, blocks
striding over row groups, ``x`` staged per K-chunk in shared memory,
grouped layout). Each lane reads the gate group and the up group of the
same packed columns, so one staged activation feeds two int4 values::

    warp w -> row r:   lane l reads W_gate[r, 4l:4l+4], W_up[r, 4l:4l+4],
                       and the same at groups l+32 (four 16-byte loads in
                       flight), then groups l+64, l+96, ...
                       (two coalesced 512 B spans per warp step)
    acc_gate, acc_up   -> two shuffle reductions -> lane 0 writes gate[r], up[r]

Against two separate GEMVs it halves the activation staging and the
launches, and keeps two independent load streams in flight per lane.
Body: ``_warp_rows`` with ``DUAL``.
"""

from __future__ import annotations

from functools import lru_cache

from ...common import launch as L
from .._device import launcher, path_build
from .._warp_rows import DEFAULT_KCHUNK, DEFAULT_WARPS, launch_config, make_warp_rows

# Resident blocks an SM the kernel is bounded to: six of 128 threads, 80
# registers (unbounded, ptxas takes 85 and five fit).
DUAL_BLOCKS = 6


@lru_cache(maxsize=None)
def make_gemv_dual_sw(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK, TAIL_FAULT: int = 0):
    rows = make_warp_rows(WARPS, KCHUNK, True, False, TAIL_FAULT)

    @L.jit_bounded(WARPS * 32, DUAL_BLOCKS)
    def gemv_dual_sw(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        rows((gate, up), (qw_gate, s_gate, qw_up, s_up), (x,))

    return gemv_dual_sw


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(gate, up, qw_gate, s_gate, qw_up, s_up, x)`` for ``n x k`` weights."""
    return launcher(make_gemv_dual_sw, launch_config, n, k, WARPS, KCHUNK)


build = path_build(make_launch, ("gate", "up", "qw_gate", "s_gate", "qw_up", "s_up", "x"))
