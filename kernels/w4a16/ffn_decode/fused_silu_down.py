"""Fused SiLU-multiply + down GEMV for the FFN decode (``decode_split_silu`` off).

``y[n] = W_down h`` with ``h = silu(gate) * up`` computed on the fly: the
kernel never writes ``h``. ``W_down`` is packed as in
``leverctl_kernels.common.int4`` (``uint32[hidden, inter/8]`` +
``fp16[hidden, inter/128]``); ``gate``, ``up`` are the fp16 outputs of the
dual GEMV; fp32 accumulation; ``y`` fp16.

Launch: the one-warp-per-row GEMV of ``gemv_sw`` (``WARPS`` warps per
block, warp = output row, blocks striding over row groups), except for the
staging step, which reads ``gate`` and ``up`` and stores
``silu(gate) * up`` in fp32 into shared memory (grouped layout)::

    per K-chunk:   gate[c0:c1], up[c0:c1]  --silu(g)*u, fp32-->  xs (smem)
    per row:       lanes stride over W_down[row, :] in 16-byte groups
                   (two loads in flight per lane) against xs,
                   one shuffle reduction, lane 0 writes y[row]

Against the split path (SiLU-multiply kernel, then the down GEMV) it saves
one launch and the ``h`` round trip (``2 * inter`` bytes written and read
back), and ``h`` keeps fp32 precision instead of being rounded to fp16.
The exponentials are recomputed by every block that stages the chunk; with
``inter`` a few thousand and blocks reusing the staged chunk across row
groups, that stays small next to the weight stream. Body: ``_warp_rows``
with ``SILU``.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda

from .._device import launcher
from .._warp_rows import DEFAULT_KCHUNK, DEFAULT_WARPS, launch_config, make_warp_rows


@lru_cache(maxsize=None)
def make_ffn_fused_silu_down(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK, TAIL_FAULT: int = 0):
    rows = make_warp_rows(WARPS, KCHUNK, False, True, TAIL_FAULT)

    @cuda.jit
    def ffn_fused_silu_down(y, qw_down, s_down, gate, up):
        rows((y,), (qw_down, s_down), (gate, up))

    return ffn_fused_silu_down


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qw_down, s_down, gate, up)`` for an ``n x k`` down weight
    (``n`` = hidden, ``k`` = intermediate)."""
    return launcher(make_ffn_fused_silu_down, launch_config, n, k, WARPS, KCHUNK)
