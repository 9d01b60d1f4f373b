"""The one-warp-per-row GEMV body shared by ``gemv_sw``, ``gemv_dual_sw`` and
``ffn_fused_silu_down`` (see those modules for each kernel's layout).

``WARPS`` warps per block, warp ``w`` on row ``blockIdx.x * WARPS + w``,
blocks striding over row groups. Per K-chunk the block stages its
activations in shared memory (``common.int4_device``), then each lane walks packed
words ``lane, lane + 32, ...`` of its warp's row; one shuffle reduction per
row and output, lane 0 writes. When ``k <= KCHUNK`` the chunk is staged once
per block and reused for every row group the block visits.

Two compile-time switches pick the kernel:

* ``DUAL``: two weight matrices against the same staged activations (the
  gate and up projections); each lane loads both packed words of a column,
  then the column's 8 activations into registers, used by both dots.
* ``SILU``: the staged activations are ``silu(gate) * up`` (fp32) instead of
  ``x``: the SiLU-multiply fused into the down GEMV.

The kernels pass their arrays as tuples: ``outs`` (one output vector per
matrix), ``mats`` (``(qweight, scales)`` or ``(qw_gate, s_gate, qw_up,
s_up)``) and ``src`` (``(x,)`` or ``(gate, up)``); the switches are
constants, so the branches they guard compile away.
"""

from __future__ import annotations

from functools import lru_cache

from numba import cuda, float32

from ..common import launch as L
from ..common.int4_device import chunk_layout, dot_word, dot_word_regs, load_x8, stage_x
from ..common.warp import warp_sum
from ._device import stage_silu_mul

DEFAULT_WARPS = 4
DEFAULT_KCHUNK = 2048
# Grid cap for the row-group stride: 132 SMs (H200) x 16 resident 128-thread
# blocks; more blocks would only queue.
MAX_RESIDENT_BLOCKS = 132 * 16


def check_config(WARPS: int, KCHUNK: int) -> None:
    L.check_block(WARPS * L.WARP_SIZE, warps=True)
    chunk_layout(KCHUNK)


@lru_cache(maxsize=None)
def make_warp_rows(WARPS: int, KCHUNK: int, DUAL: bool, SILU: bool):
    """The device function ``rows(outs, mats, src)``: the whole kernel body
    for a block of ``WARPS`` warps and K-chunks of ``KCHUNK`` inputs."""
    check_config(WARPS, KCHUNK)
    NT = WARPS * 32
    KWC, STRIDE, XS = chunk_layout(KCHUNK)

    @cuda.jit(device=True)
    def stage(xs, src, c0, k, tid):
        if SILU:
            stage_silu_mul(xs, src[0], src[1], c0, k, tid, NT, KCHUNK, STRIDE)
        else:
            stage_x(xs, src[0], c0, k, tid, NT, KCHUNK, STRIDE)

    @cuda.jit(device=True)
    def rows(outs, mats, src):
        qw = mats[0]
        sc = mats[1]
        n = qw.shape[0]
        kw = qw.shape[1]
        k = src[0].shape[0]
        xs = cuda.shared.array(XS, dtype=float32)
        xv = cuda.local.array(8, dtype=float32)  # DUAL: a column's activations
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:  # block-uniform: every thread reaches the barriers
            row = rb + warp
            acc = float32(0.0)
            acc2 = float32(0.0)
            for c in range(nchunks):
                c0 = c * KCHUNK
                if nchunks > 1 or not staged:
                    cuda.syncthreads()  # previous chunk fully consumed
                    stage(xs, src, c0, k, tid)
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    w0 = c * KWC
                    w1 = min(kw, w0 + KWC)
                    for gw in range(w0 + lane, w1, 32):
                        if DUAL:
                            wg = qw[row, gw]
                            wu = mats[2][row, gw]
                            load_x8(xv, xs, gw - w0, STRIDE)
                            g = gw >> 4
                            acc += float32(sc[row, g]) * dot_word_regs(wg, xv)
                            acc2 += float32(mats[3][row, g]) * dot_word_regs(wu, xv)
                        else:
                            acc += float32(sc[row, gw >> 4]) * dot_word(qw[row, gw], xs, gw - w0, STRIDE)
            if row < n:  # warp-uniform
                acc = warp_sum(acc)
                if DUAL:
                    acc2 = warp_sum(acc2)
                if lane == 0:
                    outs[0][row] = acc
                    if DUAL:
                        outs[1][row] = acc2
            rb += cuda.gridDim.x * WARPS

    return rows


def launch_config(n: int, WARPS: int = DEFAULT_WARPS, KCHUNK: int = DEFAULT_KCHUNK):
    grid = L.check_grid(min(L.blocks_for(n, WARPS), MAX_RESIDENT_BLOCKS))
    block = (L.check_block(WARPS * L.WARP_SIZE, warps=True),)
    L.check_shared(4 * chunk_layout(KCHUNK)[2])
    return grid, block
