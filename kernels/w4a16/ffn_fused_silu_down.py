"""Fused SiLU-multiply + down GEMV for the FFN decode (``decode_split_silu`` off).

``y[n] = W_down h`` with ``h = silu(gate) * up`` computed on the fly: the
kernel never writes ``h``. ``W_down`` is packed as in
``leverctl_kernels.common.int4`` (``uint32[hidden, inter/8]`` +
``fp16[hidden, inter/128]``); ``gate``, ``up`` are the fp16 outputs of the
dual GEMV; fp32 accumulation; ``y`` fp16.

Launch: the one-warp-per-row GEMV of ``gemv_sw`` (``WARPS`` warps per
block, warp = output row, blocks striding over row groups), except for the
staging step, which reads ``gate`` and ``up`` and stores
``silu(gate) * up`` in fp32 into shared memory (transposed by nibble)::

    per K-chunk:   gate[c0:c1], up[c0:c1]  --silu(g)*u, fp32-->  xs (smem)
    per row:       lanes stride over W_down[row, :] words against xs,
                   one shuffle reduction, lane 0 writes y[row]

Against the split path (SiLU-multiply kernel, then the down GEMV) it saves
one launch and the ``h`` round trip (``2 * inter`` bytes written and read
back), and ``h`` keeps fp32 precision instead of being rounded to fp16.
The exponentials are recomputed by every block that stages the chunk; with
``inter`` a few thousand and blocks reusing the staged chunk across row
groups, that stays small next to the weight stream.
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ._device import dot_word, stage_silu_mul, warp_sum
from .gemv_sw import DEFAULT_KCHUNK, DEFAULT_WARPS, _check_config, launch_config


@lru_cache(maxsize=None)
def make_ffn_fused_silu_down(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    _check_config(WARPS, KCHUNK)
    NT = WARPS * 32
    KWC = KCHUNK // 8
    STRIDE = KWC + 1
    XS = 8 * STRIDE

    @cuda.jit
    def ffn_fused_silu_down(y, qw_down, s_down, gate, up):
        n = qw_down.shape[0]
        kw = qw_down.shape[1]
        k = gate.shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:
            row = rb + warp
            acc = float32(0.0)
            for c in range(nchunks):
                c0 = c * KCHUNK
                if nchunks > 1 or not staged:
                    cuda.syncthreads()
                    stage_silu_mul(xs, gate, up, c0, k, tid, NT, KCHUNK, STRIDE)
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    w0 = c * KWC
                    w1 = min(kw, w0 + KWC)
                    for gw in range(w0 + lane, w1, 32):
                        acc += float32(s_down[row, gw >> 4]) * dot_word(
                            qw_down[row, gw], xs, gw - w0, STRIDE
                        )
            if row < n:
                acc = warp_sum(acc)
                if lane == 0:
                    y[row] = acc
            rb += cuda.gridDim.x * WARPS

    return ffn_fused_silu_down


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(y, qw_down, s_down, gate, up)`` for an ``n x k`` down weight
    (``n`` = hidden, ``k`` = intermediate)."""
    if k % 8:
        raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
    kern = make_ffn_fused_silu_down(WARPS, KCHUNK)
    grid, block = launch_config(n, WARPS, KCHUNK)

    def launch(y, qw_down, s_down, gate, up):
        kern[grid, block](y, qw_down, s_down, gate, up)

    return launch
