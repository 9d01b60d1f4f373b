"""The grouped GEMM over rows sorted by expert, on tensor cores (warp MMA
``mma.sync`` m16n8k16, fp16 inputs, f32 accumulators, ``common/mma``):

    out[p, n] = act( sum_k A[row(p), k] * W[e(p), n, k] )    for sorted rows p of expert e

One warp (the whole block) per ``BM x BN`` tile of one expert's rows
(``BM`` = 8, ``BN`` = 32): a short M tile wastes little on the few rows an
expert gets at prefill (Qwen3-Next: 20 to 80 on average). The MMA is taken
transposed, ``out^T = W A^T``, so that the instruction's 8-wide ``n`` side
holds the tile's 8 rows and its 16-row ``m`` side 16 of the weights'
columns: MMA A is a 16 x 16 block of ``W[e]`` (``W[n, k]`` is row-major in
``k``, the ``.row`` operand as stored), MMA B the tile's 8 rows of ``A``
(``A[row, k]``: ``B[k, row]`` stored by column, the ``.col`` operand), and
no row of the instruction is padding. Per K step of 16 (one NVFP4 block)
each lane decodes the elements of its fragments straight from global memory
(``mma.a_elem``, ``mma.b_elem``: each weight of the tile is read by one
lane, once), two MMAs cover the 32 columns, four for the gated projection
(gate and up columns side by side), and the epilogue writes each lane's
accumulators where ``mma.c_elem`` places them. Rows past the tile's end and
columns past ``N`` enter as zeros (every lane issues every MMA); a last
column tile whose second 16 columns are all past ``N`` skips their MMAs, a
branch the whole warp takes together.

Precision: the weights (and E4M3 or NVFP4 activations) are decoded to
float32 and rounded once to fp16 as they enter the MMA
(``cvt.rn.f16x2.f32``, 2^-11 relative); fp16 activations enter exactly,
the float32 intermediate of the down projection rounds once to fp16 too (as
``moe._experts_mma``'s down does); the products and sums are f32. A value
past fp16's range (65504) would enter as inf: the layer's activations and
decoded weights are far inside it.

Compile-time switches, whose other branches compile away:

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
  and up rows ``N .. 2N-1``, and each lane accumulates both columns:
  ``silu(gate) * up``); ``RELU2`` (``max(x, 0)^2``, Nemotron's experts).
* ``AFMT``: A as float (fp16 or float32); ``E4M3`` codes times a float32
  scale per row; ``NVFP4`` (packed E2M1 pairs, an E4M3 scale per 16, one
  float32 tensor scale: activations quantised by ``common.nvfp4_act``).
* ``WFMT``: ``NVFP4`` weights (``[E, N, K/2]`` packed, ``[E, N, K/16]``
  scales, ``[E]`` tensor scales); ``E4M3`` (``[E, N, K]`` codes, ``[E, N]``
  float32 scales per output row: the FP8 grouped GEMM's weights).

``out`` is float32 ``[rows, N]``. ``K`` a multiple of 16; ``N`` any.
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32, int32

from ...common import bits, cvt, mma
from ...common import launch as L
from .bounds import BM

BN = 32
BK = bits.NVFP4_BLOCK  # one K step: the MMA's k (16) and one NVFP4 block
THREADS = 32  # one warp a block
PERSISTENT_BLOCKS = 8 * 132  # the single-launch grid: eight one-warp blocks per H200 SM
TENSOR_CORES, TC_DTYPE = "mma.sync", "f16"  # what every launch runs on (the records' claim)

assert BM == mma.N and BK == mma.K and BN % mma.M == 0  # the tile is whole MMAs, none of it padding

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
    if (
        SCHED not in (BOUNDED, GROUPED)
        or ACT not in (NONE, SILU_GLU, RELU2)
        or AFMT not in (FLOAT, E4M3, NVFP4)
        or WFMT not in (NVFP4, E4M3)
    ):
        raise ValueError(f"grouped GEMM: no such configuration {(SCHED, GATHER, ACT, AFMT, WFMT)}")
    GATED = ACT == SILU_GLU

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

    # The helpers below are plain device functions: NVVM inlines every one
    # (the PTX has no call), where Numba's own IR inlining (inline="always")
    # of their nesting took over a minute to compile one kernel.
    @cuda.jit(device=True)
    def aval(a, a_sc, a_ts, tok, r, row_end, kk):
        """A[row(r), kk] as float32, zero past the tile's rows."""
        if r < row_end:
            src = tok[r] if GATHER else r
            return load_a(a, a_sc, a_ts, src, kk)
        return float32(0.0)

    @cuda.jit(device=True)
    def wval(w, w_sc, w_ts, e, c, n, shift, kk):
        """W[e, c + shift, kk] as float32 (``shift`` = N: the up half), zero past N."""
        if c < n:
            return load_w(w, w_sc, w_ts, e, c + shift, kk)
        return float32(0.0)

    @cuda.jit(device=True)
    def afrag(a, a_sc, a_ts, tok, row0, row_end, k0, lane):
        """The MMA's B operand: the tile's rows ``row0 ..`` x ``k0 .. k0 + 15``, fp16 pairs."""
        kb, rb = mma.b_elem(lane, 0)
        b0 = cvt.f32x2_to_f16x2(
            aval(a, a_sc, a_ts, tok, row0 + rb, row_end, k0 + kb),
            aval(a, a_sc, a_ts, tok, row0 + rb, row_end, k0 + kb + 1),
        )
        kb, rb = mma.b_elem(lane, 2)
        b1 = cvt.f32x2_to_f16x2(
            aval(a, a_sc, a_ts, tok, row0 + rb, row_end, k0 + kb),
            aval(a, a_sc, a_ts, tok, row0 + rb, row_end, k0 + kb + 1),
        )
        return b0, b1

    @cuda.jit(device=True)
    def wpair(w, w_sc, w_ts, e, c0, n, shift, k0, lane, i):
        cr, kc = mma.a_elem(lane, i)
        return cvt.f32x2_to_f16x2(
            wval(w, w_sc, w_ts, e, c0 + cr, n, shift, k0 + kc), wval(w, w_sc, w_ts, e, c0 + cr, n, shift, k0 + kc + 1)
        )

    @cuda.jit(device=True)
    def wmma(w, w_sc, w_ts, e, c0, n, shift, k0, lane, b0, b1, d0, d1, d2, d3):
        """``D += W[e, c0 + shift .. +15, k0 .. k0 + 15] B`` (the MMA's A: 16 weight columns)."""
        return mma.mma_f16_16816(
            wpair(w, w_sc, w_ts, e, c0, n, shift, k0, lane, 0),
            wpair(w, w_sc, w_ts, e, c0, n, shift, k0, lane, 2),
            wpair(w, w_sc, w_ts, e, c0, n, shift, k0, lane, 4),
            wpair(w, w_sc, w_ts, e, c0, n, shift, k0, lane, 6),
            b0,
            b1,
            d0,
            d1,
            d2,
            d3,
        )

    @cuda.jit(device=True)
    def put(out, row0, row_end, c0, n, lane, i, g, u):
        """Accumulator ``i`` (``mma.c_elem``: column ``c0 + cr``, row ``row0 + rr``), activated."""
        cr, rr = mma.c_elem(lane, i)
        r = row0 + rr
        c = c0 + cr
        if r < row_end and c < n:
            v = g
            if ACT == SILU_GLU:
                v = v / (float32(1.0) + math.exp(-v)) * u
            elif ACT == RELU2:
                v = max(v, float32(0.0))
                v = v * v
            out[r, c] = v

    @cuda.jit(device=True)
    def tile(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, e, row0, row_end, n0, k):
        lane = cuda.laneid
        n = out.shape[1]
        c1 = n0 + mma.M  # the second 16 columns
        p0 = p1 = p2 = p3 = q0 = q1 = q2 = q3 = float32(0.0)  # columns n0 .., c1 ..
        u0 = u1 = u2 = u3 = v0 = v1 = v2 = v3 = float32(0.0)  # their up halves (SILU_GLU)
        for k0 in range(0, k, BK):
            b0, b1 = afrag(a, a_sc, a_ts, tok, row0, row_end, k0, lane)
            p0, p1, p2, p3 = wmma(w, w_sc, w_ts, e, n0, n, 0, k0, lane, b0, b1, p0, p1, p2, p3)
            if GATED:
                u0, u1, u2, u3 = wmma(w, w_sc, w_ts, e, n0, n, n, k0, lane, b0, b1, u0, u1, u2, u3)
            if c1 < n:  # the same for the whole warp: a last tile's columns past N cost no MMA
                q0, q1, q2, q3 = wmma(w, w_sc, w_ts, e, c1, n, 0, k0, lane, b0, b1, q0, q1, q2, q3)
                if GATED:
                    v0, v1, v2, v3 = wmma(w, w_sc, w_ts, e, c1, n, n, k0, lane, b0, b1, v0, v1, v2, v3)
        put(out, row0, row_end, n0, n, lane, 0, p0, u0)
        put(out, row0, row_end, n0, n, lane, 1, p1, u1)
        put(out, row0, row_end, n0, n, lane, 2, p2, u2)
        put(out, row0, row_end, n0, n, lane, 3, p3, u3)
        if c1 < n:
            put(out, row0, row_end, c1, n, lane, 0, q0, v0)
            put(out, row0, row_end, c1, n, lane, 1, q1, v1)
            put(out, row0, row_end, c1, n, lane, 2, q2, v2)
            put(out, row0, row_end, c1, n, lane, 3, q3, v3)

    @L.jit_bounded(THREADS)
    def grouped(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles):
        k = 2 * w.shape[2] if WFMT == NVFP4 else w.shape[2]
        ntn = (out.shape[1] + BN - 1) // BN
        if SCHED == BOUNDED:
            e = cuda.blockIdx.x // max_m_tiles
            row0 = off[e] + (cuda.blockIdx.x % max_m_tiles) * BM
            row_end = off[e + 1]
            if row0 < row_end:  # the whole warp leaves together: every MMA has its 32 lanes
                tile(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, e, row0, row_end, cuda.blockIdx.y * BN, k)
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
                tile(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, e, row0, off[e + 1], (t % ntn) * BN, k)
                t += cuda.gridDim.x

    return grouped


def launcher(sched: int, gather: bool, act: int, afmt: int, wfmt: int):
    """``run(out, a, a_sc, a_ts, tok, w, w_sc, w_ts, off, tile_off, max_m_tiles, rows)``
    on the grid the schedule needs (``max_m_tiles`` is read by ``BOUNDED``
    only; ``rows`` is every routed row, which sizes the single-launch grid).
    ``run.tensor_cores``, ``run.tc_dtype``: what it runs on."""
    kern = make_grouped(sched, gather, act, afmt, wfmt)
    threads = L.check_block(THREADS)

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

    run.tensor_cores, run.tc_dtype = TENSOR_CORES, TC_DTYPE
    return run
