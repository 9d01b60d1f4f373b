"""The grouped GEMM over rows sorted by expert, FP32 CUDA cores:

    out[p, n] = act( sum_k A[row(p), k] * W[e(p), n, k] )    for sorted rows p of expert e

One warp per ``BM x BN`` tile of one expert's rows (``BM`` = 8,
``BN`` = 32: each lane one column and an 8 x 1 register micro-tile, two for
the gated projection; a short M tile wastes little on the few rows an
expert gets at prefill (Qwen3-Next: 20 to 80 on average); K in stages of one NVFP4 block, 16). Per stage the block stages the A
rows it owns and the weight rows of its columns, decoded to float32, in
shared memory (padded by one column against bank conflicts), and every
thread does 16 rank-1 updates. Compile-time switches, whose other branches
compile away:

* ``SCHED``: ``BOUNDED`` launches ``E * max_m_tiles`` tile rows (grid ``x``)
  and a block whose tile starts past its expert's rows leaves at once; rows
  past ``max_m_tiles * BM`` get no block (``bounds``). ``GROUPED`` is the
  single-launch grouped GEMM: a fixed grid whose blocks walk the exact tile
  list (``tile_off``, written by the sort) until it is done, so every row of
  every expert is computed, however the routing falls.
* ``GATHER``: A's row ``row(p)`` is ``tok[p]`` (the token of sorted row
  ``p``: the gate/up projection reads the tokens' activations in place);
  otherwise ``p`` (the down projection reads the sorted intermediate).
* ``ACT``: ``NONE``; ``SILU_GLU`` (the weights hold gate rows ``0 .. N-1``
  and up rows ``N .. 2N-1``, and each thread accumulates both columns:
  ``silu(gate) * up``); ``RELU2`` (``max(x, 0)^2``, Nemotron's experts).
* ``AFMT``: A as float (fp16 or float32); ``E4M3`` codes times a float32
  scale per row; ``NVFP4`` (packed E2M1 pairs, an E4M3 scale per 16, one
  float32 tensor scale: activations quantised by ``ffn_prefill.nvfp4_act``).
* ``WFMT``: ``NVFP4`` weights (``[E, N, K/2]`` packed, ``[E, N, K/16]``
  scales, ``[E]`` tensor scales); ``E4M3`` (``[E, N, K]`` codes, ``[E, N]``
  float32 scales per output row: the FP8 grouped GEMM's weights).

``out`` is float32 ``[rows, N]``. ``K`` a multiple of 16; ``N`` any.
"""
from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32, int32, uint32

from ..common import bits
from ..common import launch as L
from .bounds import BM

BN = 32
BK = bits.NVFP4_BLOCK
TN = 32
TM = 1
THREADS = TN * TM
RM = BM // TM
PERSISTENT_BLOCKS = 8 * 132  # the single-launch grid: eight one-warp blocks per H200 SM

BOUNDED, GROUPED = 0, 1
NONE, SILU_GLU, RELU2 = 0, 1, 2
FLOAT, E4M3, NVFP4 = 0, 1, 2


@cuda.jit(device=True, inline="always")
def _fp4(packed_byte, i, scale_code, ts):
    b = int32(packed_byte)
    nib = (b >> 4) if (i & 1) else (b & 0xF)
    return (bits.e2m1_to_f32(nib) * bits.e4m3_to_f32(scale_code)) * ts


@lru_cache(maxsize=None)
def make_grouped(SCHED: int, GATHER: bool, ACT: int, AFMT: int, WFMT: int):
    """Compile one grouped GEMM (see the module notes for the switches)."""
    if SCHED not in (BOUNDED, GROUPED) or ACT not in (NONE, SILU_GLU, RELU2) or AFMT not in (FLOAT, E4M3, NVFP4) \
            or WFMT not in (NVFP4, E4M3):
        raise ValueError(f"grouped GEMM: no such configuration {(SCHED, GATHER, ACT, AFMT, WFMT)}")
    GATED = ACT == SILU_GLU
    WROWS = 2 * BN if GATED else BN
    AS = BM + 1
    WS = WROWS + 1
    AS_SIZE = BK * AS
    WS_SIZE = BK * WS
    A_ITERS = BM * BK // THREADS
    W_ITERS = WROWS * BK // THREADS

    @cuda.jit(device=True, inline="always")
    def load_a(a, a_sc, a_ts, src, kk):
        if AFMT == FLOAT:
            return float32(a[src, kk])
        if AFMT == E4M3:
            return bits.e4m3_to_f32(a[src, kk]) * a_sc[src]
        return _fp4(a[src, kk >> 1], kk, a_sc[src, kk >> 4], a_ts[0])

    @cuda.jit(device=True, inline="always")
    def load_w(w, w_sc, w_ts, e, col, kk):
        if WFMT == NVFP4:
            return _fp4(w[e, col, kk >> 1], kk, w_sc[e, col, kk >> 4], w_ts[e])
        return bits.e4m3_to_f32(w[e, col, kk]) * w_sc[e, col]

    @cuda.jit(device=True, inline="always")
    def tile(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, e, row0, row_end, n0, k, As, Ws, acc, acc2):
        tid = cuda.threadIdx.x
        tx = tid % TN
        ty = tid // TN
        n = out.shape[1]
        for i in range(RM):
            acc[i] = float32(0.0)
            acc2[i] = float32(0.0)
        for k0 in range(0, k, BK):
            for it in range(A_ITERS):
                idx = tid + it * THREADS
                mm = idx // BK
                kk = idx % BK
                r = row0 + mm
                v = float32(0.0)
                if r < row_end:
                    src = tok[r] if GATHER else r
                    v = load_a(a, a_sc, a_ts, src, k0 + kk)
                As[uint32(kk * AS + mm)] = v
            for it in range(W_ITERS):
                idx = tid + it * THREADS
                nn = idx // BK
                kk = idx % BK
                c = n0 + (nn % BN)
                v = float32(0.0)
                if c < n:
                    col = c + n if nn >= BN else c
                    v = load_w(w, w_sc, w_ts, e, col, k0 + kk)
                Ws[uint32(kk * WS + nn)] = v
            cuda.syncthreads()
            for kk in range(BK):
                wv = Ws[uint32(kk * WS + tx)]
                wu = float32(0.0)
                if GATED:
                    wu = Ws[uint32(kk * WS + BN + tx)]
                for i in range(RM):
                    av = As[uint32(kk * AS + ty + i * TM)]
                    acc[i] += av * wv
                    if GATED:
                        acc2[i] += av * wu
            cuda.syncthreads()
        c = n0 + tx
        if c < n:
            for i in range(RM):
                r = row0 + ty + i * TM
                if r < row_end:
                    v = acc[i]
                    if ACT == SILU_GLU:
                        v = v / (float32(1.0) + math.exp(-v)) * acc2[i]
                    elif ACT == RELU2:
                        v = max(v, float32(0.0))
                        v = v * v
                    out[r, c] = v

    @L.jit_bounded(THREADS)
    def grouped(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles):
        As = cuda.shared.array(AS_SIZE, dtype=float32)
        Ws = cuda.shared.array(WS_SIZE, dtype=float32)
        acc = cuda.local.array(RM, dtype=float32)
        acc2 = cuda.local.array(RM, dtype=float32)
        k = 2 * w.shape[2] if WFMT == NVFP4 else w.shape[2]
        ntn = (out.shape[1] + BN - 1) // BN
        if SCHED == BOUNDED:
            e = cuda.blockIdx.x // max_m_tiles
            row0 = off[e] + (cuda.blockIdx.x % max_m_tiles) * BM
            row_end = off[e + 1]
            if row0 < row_end:  # the whole block leaves together: no barrier is left waiting
                tile(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, e, row0, row_end, cuda.blockIdx.y * BN, k,
                     As, Ws, acc, acc2)
        else:
            e_n = off.shape[0] - 1
            total = tile_off[e_n] * ntn
            t = int32(cuda.blockIdx.x)
            e = int32(0)
            while t < total:
                mt = t // ntn
                while tile_off[e + 1] <= mt:  # tiles are walked in order: the expert only moves on
                    e += 1
                row0 = off[e] + (mt - tile_off[e]) * BM
                tile(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, e, row0, off[e + 1], (t % ntn) * BN, k,
                     As, Ws, acc, acc2)
                t += cuda.gridDim.x

    return grouped


def launcher(sched: int, gather: bool, act: int, afmt: int, wfmt: int):
    """``run(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles, rows)``
    on the grid the schedule needs (``max_m_tiles`` is read by ``BOUNDED``
    only; ``rows`` is every routed row, which sizes the single-launch grid)."""
    kern = make_grouped(sched, gather, act, afmt, wfmt)
    threads = L.check_block(THREADS)
    L.check_shared(4 * BK * ((BM + 1) + (2 * BN if act == SILU_GLU else BN) + 1))

    def run(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles, rows):
        experts = off.shape[0] - 1
        ntn = L.blocks_for(out.shape[1], BN)
        if sched == BOUNDED:
            # tile rows along x: E * max_m_tiles passes grid.y's 65535 at Qwen3-Next's worst case
            # (512 experts x 512 tiles of 4096 tokens)
            grid = L.check_grid((experts * int(max_m_tiles), ntn))
        else:  # at most this many tiles, whatever the routing: one partial tile per expert
            grid = L.check_grid(min(PERSISTENT_BLOCKS, ntn * (L.blocks_for(rows, BM) + experts)))
        kern[grid, threads](out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, int32(max_m_tiles))

    return run
