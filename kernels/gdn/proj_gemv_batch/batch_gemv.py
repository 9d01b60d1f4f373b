"""The contiguous-batch W4A16 GEMV body shared by ``proj_batch4`` and
``proj_batch16``: ``Y[m, n] = X[m, k] W[n, k]^T`` for ``m <= MROWS``
rows (decode sequences), each weight read once for all of them.

Same walk as ``w4a16.gemv_sw`` (``w4a16/_warp_rows``): ``WARPS`` warps per
block, warp ``w`` on output row ``blockIdx.x * WARPS + w``, blocks striding
over row groups. The difference is the activations: per K-chunk the block
stages every row's chunk (``MROWS`` copies of the layout below,
conflict-free reads), and a lane decodes each int4 word
once into 8 registers, then multiplies them against each live row, keeping
one fp32 accumulator per row::

    4 words = qweight[row, 4g .. 4g+3]   (one 16-byte load for all m rows;
                                          UNROLL groups a lane in flight)
    q[0..7] = nibbles(word) * scale      (each word decoded once)
    for r < m:  acc[r] += sum_j q[j] * xs[r][word's j-th input]
    ... one shuffle reduction per live row, lane 0 writes Y[r, row]

Lane ``l`` owns the 4-word groups ``l, l + 32, ...`` of the chunk, so a
warp step reads 512 contiguous bytes of the row (16 whole sectors) through
``ld.global.nc.v4.u32``; rows whose words are not a multiple of 4 (``k %
32 != 0``) or a matrix whose first word is not 16-byte aligned take one
32-bit word a lane instead (uniform per launch). The activations come in by
16-byte loads where ``x`` is 16-byte aligned.

So the weight traffic, which bounds a GEMV, is paid once for the batch
instead of once per row. ``MROWS`` and ``KCHUNK`` are compile-time: 4 rows
with chunks of 2048 inputs, or 16 rows with chunks of 512 (33-35 KiB of
shared memory either way).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ...common import cvt
from ...common import launch as L
from ...common.int4_device import make_stagers, nibble
from ...common.launch import device_inline
from ...common.vload import aligned16, ldg_v4
from ...common.warp import warp_sum

DEFAULT_WARPS = 4
MAX_RESIDENT_BLOCKS = 132 * 8
MIN_BLOCKS = 5  # resident blocks an SM must fit: at most 102 registers a thread
UNROLL = 2  # 16-byte groups a lane loads before using the first (written out below)


# The tiers' staging: each row's chunk transposed by an input's position in
# its 4-word group, input ``e`` at ``xs[(e % 32) * stride + e // 32]`` with
# ``stride = KCHUNK // 32 + 1`` (odd: a warp's 32 consecutive inputs, one
# column, fall in 32 banks; lanes on consecutive words read consecutive
# floats of a row). The one-row GEMVs' layout (``common.int4_device``:
# groups of 32 contiguous floats read 16 bytes at a time, pre-scaled) is not
# used here: with its 16-byte stores the 16-row tier spilled 8-24 bytes at
# its register bound, whatever the staging's form, and a tier bound by its
# FMAs gains nothing from the wider reads.


def group_layout(KCHUNK: int) -> tuple[int, int, int, int]:
    """``(KWC, GPC, STRIDE, XS)`` for K-chunks of ``KCHUNK`` inputs in the
    grouped layout: packed words and 4-word groups per chunk, the padded
    row stride, and the staged fp32 values (``32 * STRIDE``)."""
    if KCHUNK < 256 or KCHUNK % 256:
        raise ValueError(f"KCHUNK={KCHUNK}: a positive multiple of 256 inputs")
    KWC = KCHUNK // 8
    GPC = KCHUNK // 32
    STRIDE = GPC + 1
    return KWC, GPC, STRIDE, 32 * STRIDE


@lru_cache(maxsize=None)
def stagers(stride: int):
    """``(stage, stage_v4)`` of the layout with row stride ``stride``
    (``int4_device.make_stagers``): a 16-byte load's eight inputs ``e ..
    e + 7`` go to rows ``e % 32 ..`` of column ``e // 32``, so lane ``l``'s
    store falls on bank ``8 ((l % 4) stride % 4) + l // 4`` (plus a
    constant): 32 banks for 32 lanes when ``stride`` is odd, as
    ``group_layout``'s ``GPC + 1`` is for every chunk it allows."""

    @device_inline
    def store1(xs, e, value):
        xs[uint32((e & 31) * stride + (e >> 5))] = value

    @device_inline
    def store8(xs, v, w0, w1, w2, w3):
        at = (v & 3) * 8 * stride + (v >> 2)
        a, b = cvt.f16x2_to_f32x2(w0)
        xs[uint32(at)] = a
        xs[uint32(at + stride)] = b
        a, b = cvt.f16x2_to_f32x2(w1)
        xs[uint32(at + 2 * stride)] = a
        xs[uint32(at + 3 * stride)] = b
        a, b = cvt.f16x2_to_f32x2(w2)
        xs[uint32(at + 4 * stride)] = a
        xs[uint32(at + 5 * stride)] = b
        a, b = cvt.f16x2_to_f32x2(w3)
        xs[uint32(at + 6 * stride)] = a
        xs[uint32(at + 7 * stride)] = b

    stage, stage_v4, _ = make_stagers(store8, store1)
    return stage, stage_v4


@lru_cache(maxsize=None)
def make_batch_gemv(MROWS: int, KCHUNK: int, WARPS: int = DEFAULT_WARPS, ROWS_USED: int = 0, TAIL_FAULT: int = 0):
    """The kernel ``(y, qweight, scales, x)`` for up to ``MROWS`` rows.
    Test-only faults: ``ROWS_USED``, when not 0, multiplies only that many
    rows' activations, as if the kernel read a row too few; ``TAIL_FAULT``
    1 drops each chunk's last 16-byte group, 2 lets the lane one past the
    end load the last group again (a clamped index) and count it twice."""
    L.check_block(WARPS * L.WARP_SIZE, warps=True)
    if TAIL_FAULT not in (0, 1, 2):
        raise ValueError(f"TAIL_FAULT={TAIL_FAULT}: one of 0, 1, 2")
    KWC, _, STRIDE, XS = group_layout(KCHUNK)
    stage_x_grouped, stage_x_grouped_v4 = stagers(STRIDE)
    NT = WARPS * 32
    USED = ROWS_USED or MROWS

    @device_inline
    def fma_word(acc, qv, word, s, xs, col, m):
        """Decode ``word`` (scale ``s``) once; add its 8 products to every
        live row's accumulator. ``col``: the word's index in the chunk."""
        for j in range(8):
            qv[j] = nibble(word, j) * s
        base = (col & 3) * 8 * STRIDE + (col >> 2)
        for r in range(MROWS):
            if r < m and r < USED:
                a = acc[r]
                for j in range(8):
                    a += qv[j] * xs[r, uint32(base + j * STRIDE)]
                acc[r] = a

    @L.jit_bounded(NT, MIN_BLOCKS)
    def gemv_batch(y, qweight, scales, x):
        m = x.shape[0]
        k = x.shape[1]
        n = qweight.shape[0]
        kw = qweight.shape[1]
        xs = cuda.shared.array((MROWS, XS), np.float32)
        acc = cuda.local.array(MROWS, np.float32)
        qv = cuda.local.array(8, np.float32)
        tid = cuda.threadIdx.x
        lane = tid & 31
        warp = tid >> 5
        nchunks = (k + KCHUNK - 1) // KCHUNK
        vec = (kw & 3) == 0 and aligned16(qweight)
        xvec = aligned16(x)  # k % 8 == 0 (build): every row then starts aligned too
        staged = False
        rb = cuda.blockIdx.x * WARPS
        while rb < n:  # block-uniform: every thread reaches the barriers
            row = rb + warp
            for r in range(MROWS):
                acc[r] = float32(0.0)
            for c in range(nchunks):
                c0 = c * KCHUNK
                w0 = c * KWC
                w1 = min(kw, w0 + KWC)
                g0 = w0 >> 2
                g1 = w1 >> 2
                if nchunks > 1 or not staged:
                    cuda.syncthreads()  # the previous chunk fully read
                    for r in range(MROWS):
                        if r < m:
                            if xvec:
                                stage_x_grouped_v4(xs[r], x[r], c0, k, tid, NT, KCHUNK)
                            else:
                                stage_x_grouped(xs[r], x[r], c0, k, tid, NT, KCHUNK)
                    cuda.syncthreads()
                    staged = True
                if row < n:
                    if vec:
                        base = row * kw
                        lim = g1 - 1 if TAIL_FAULT == 1 else (g1 + 1 if TAIL_FAULT == 2 else g1)
                        for g in range(g0 + lane, lim, 64):
                            # both groups' loads issued before either is used
                            ga = min(g, g1 - 1) if TAIL_FAULT == 2 else g
                            a0, a1, a2, a3 = ldg_v4(qweight, base + 4 * ga)
                            sa = float32(scales[row, ga >> 2])
                            gb = g + 32
                            b0 = b1 = b2 = b3 = uint32(0)
                            sb = float32(0.0)
                            if gb < lim:
                                gb = min(gb, g1 - 1) if TAIL_FAULT == 2 else gb
                                b0, b1, b2, b3 = ldg_v4(qweight, base + 4 * gb)
                                sb = float32(scales[row, gb >> 2])
                            q = 4 * (ga - g0)
                            fma_word(acc, qv, a0, sa, xs, q, m)
                            fma_word(acc, qv, a1, sa, xs, q + 1, m)
                            fma_word(acc, qv, a2, sa, xs, q + 2, m)
                            fma_word(acc, qv, a3, sa, xs, q + 3, m)
                            if g + 32 < lim:
                                q = 4 * (gb - g0)
                                fma_word(acc, qv, b0, sb, xs, q, m)
                                fma_word(acc, qv, b1, sb, xs, q + 1, m)
                                fma_word(acc, qv, b2, sb, xs, q + 2, m)
                                fma_word(acc, qv, b3, sb, xs, q + 3, m)
                    else:
                        for gw in range(w0 + lane, w1, 32):
                            fma_word(acc, qv, qweight[row, gw], float32(scales[row, gw >> 4]), xs, gw - w0, m)
            if row < n:  # warp-uniform
                for r in range(MROWS):
                    if r < m:
                        v = warp_sum(acc[r])
                        if lane == 0:
                            y[r, row] = v
            rb += cuda.gridDim.x * WARPS

    return gemv_batch


def shared_bytes(MROWS: int, KCHUNK: int) -> int:
    return 4 * MROWS * group_layout(KCHUNK)[3]


def make_build(MROWS: int, KCHUNK: int):
    """A variant's ``build(shape)`` for the ``MROWS``-row tier."""

    def build(shape, WARPS: int = DEFAULT_WARPS, ROWS_USED: int = 0, TAIL_FAULT: int = 0):
        m, n, k = shape["m"], shape["n"], shape["k"]
        if not 1 <= m <= MROWS:
            raise ValueError(f"the {MROWS}-row GEMV tier takes 1 to {MROWS} rows, not {m}")
        if k % 8:
            raise ValueError(f"k={k}: the W4A16 layout needs k a multiple of 8")
        kern = make_batch_gemv(MROWS, KCHUNK, WARPS, ROWS_USED, TAIL_FAULT)
        L.check_shared(shared_bytes(MROWS, KCHUNK))
        grid = L.check_grid(min(L.blocks_for(n, WARPS), MAX_RESIDENT_BLOCKS))
        threads = L.check_block(WARPS * L.WARP_SIZE, warps=True)

        def launch(bufs):
            kern[grid, threads](bufs["y"], bufs["qweight"], bufs["scales"], bufs["x"])

        return launch

    return build
