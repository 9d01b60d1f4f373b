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
"""
from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ._device import load_x8, dot_word_regs, stage_x, warp_sum
from .gemv_sw import DEFAULT_KCHUNK, DEFAULT_WARPS, _check_config, launch_config


@lru_cache(maxsize=None)
def make_gemv_dual_sw(WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    _check_config(WARPS, KCHUNK)
    NT = WARPS * 32
    KWC = KCHUNK // 8
    STRIDE = KWC + 1
    XS = 8 * STRIDE

    @cuda.jit
    def gemv_dual_sw(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        n = qw_gate.shape[0]
        kw = qw_gate.shape[1]
        k = x.shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        xv = cuda.local.array(8, dtype=float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:
            row = rb + warp
            acc_g = float32(0.0)
            acc_u = float32(0.0)
            for c in range(nchunks):
                c0 = c * KCHUNK
                if nchunks > 1 or not staged:
                    cuda.syncthreads()
                    stage_x(xs, x, c0, k, tid, NT, KCHUNK, STRIDE)
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    w0 = c * KWC
                    w1 = min(kw, w0 + KWC)
                    for gw in range(w0 + lane, w1, 32):
                        wg = qw_gate[row, gw]
                        wu = qw_up[row, gw]
                        load_x8(xv, xs, gw - w0, STRIDE)
                        g = gw >> 4
                        acc_g += float32(s_gate[row, g]) * dot_word_regs(wg, xv)
                        acc_u += float32(s_up[row, g]) * dot_word_regs(wu, xv)
            if row < n:
                acc_g = warp_sum(acc_g)
                acc_u = warp_sum(acc_u)
                if lane == 0:
                    gate[row] = acc_g
                    up[row] = acc_u
            rb += cuda.gridDim.x * WARPS

    return gemv_dual_sw


def make_launch(n: int, k: int, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    """``launch(gate, up, qw_gate, s_gate, qw_up, s_up, x)`` for ``n x k`` weights."""
    if k % 8:
        raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
    kern = make_gemv_dual_sw(WARPS, KCHUNK)
    grid, block = launch_config(n, WARPS, KCHUNK)

    def launch(gate, up, qw_gate, s_gate, qw_up, s_up, x):
        kern[grid, block](gate, up, qw_gate, s_gate, qw_up, s_up, x)

    return launch


def build(shape, *, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    run = make_launch(shape["n"], shape["k"], WARPS=WARPS, KCHUNK=KCHUNK)

    def launch(bufs):
        run(bufs["gate"], bufs["up"], bufs["qw_gate"], bufs["s_gate"], bufs["qw_up"], bufs["s_up"], bufs["x"])

    return launch
