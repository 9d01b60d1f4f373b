"""The device side of the int4 weight layout (``int4.py`` is the host
side): the exact nibble decode every int4 kernel uses, and the staging
layout of the W4A16 GEMVs' activations.

Activation staging
------------------
The GEMVs stage the activations of one K-chunk (``KCHUNK`` inputs, a
multiple of 256) in shared memory as fp32, *transposed by nibble position*:
input ``e = 8*w + j`` of the chunk (packed word ``w``, nibble ``j``) lives at
``xs[j * stride + w]`` with ``stride = KCHUNK // 8 + 1``::

    chunk inputs  e:   0  1 .. 7 | 8  9 .. 15 | 16 ..
    word w, nibble j: (0,0)..(0,7)|(1,0)..(1,7)| ...

    xs row j=0:  x[0]  x[8]  x[16] ... x[8w]   ... | pad
    xs row j=1:  x[1]  x[9]  x[17] ... x[8w+1] ... | pad
    ...
    xs row j=7:  x[7]  x[15] x[23] ... x[8w+7] ... | pad

Lanes that own consecutive packed words then read consecutive fp32 words of
shared memory for every nibble: no bank conflicts (the natural layout,
``xs[8w + j]``, would be an 8-way conflict). The one padding column staggers
the rows so that the staging stores, done once per chunk, conflict at most
4-way.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32

from . import cvt
from .launch import device_inline
from .vload import ldg_v4


def chunk_layout(KCHUNK: int) -> tuple[int, int, int]:
    """``(KWC, STRIDE, XS)`` for K-chunks of ``KCHUNK`` inputs: packed words
    per chunk, the padded row stride, and the staged fp32 values
    (``8 * STRIDE``, the shared array's size)."""
    if KCHUNK < 256 or KCHUNK % 256:
        raise ValueError(f"KCHUNK={KCHUNK}: a positive multiple of 256 inputs")
    KWC = KCHUNK // 8
    STRIDE = KWC + 1
    return KWC, STRIDE, 8 * STRIDE


# Shared-memory indices are cast to uint32 before use: Numba adds a
# negative-index wraparound (64-bit compare and select) to every signed
# index, which in the per-nibble loops costs more than the arithmetic.


@cuda.jit(device=True)
def stage_x(xs, x, c0, k, tid, nthreads, kchunk, stride):
    """``xs`` <- fp32 of ``x[c0 : min(c0 + kchunk, k)]`` in the transposed
    layout (slots past ``k`` are left alone: no packed word reads them).
    Global reads are coalesced (consecutive threads read consecutive fp16
    inputs)."""
    for e in range(tid, min(kchunk, k - c0), nthreads):
        xs[uint32((e & 7) * stride + (e >> 3))] = float32(x[c0 + e])


# float32 bit pattern of 2**23: OR-ing a nibble q into its mantissa gives the
# float 2**23 + q exactly; subtracting 2**23 + 8 leaves q - 8, exactly.
_MAGIC_BITS = 0x4B000000
_MAGIC_BIAS = 8388616.0  # 2**23 + 8


@cuda.jit(device=True)
def nibble(word, j):
    """Signed int4 value ``j`` (0..7) of a packed word, as fp32 (exact).

    No integer-to-float conversion (a quarter-rate instruction that would
    cap the GEMVs well below the memory bandwidth): the nibble is OR-ed into
    the mantissa of 2**23 and the bias subtracted, i.e. shift+and+or and one
    FADD. The uint32 -> float32 reinterpretation goes through a one-element
    local array viewed as float32, which the compiler turns into a register
    move (no local memory) and which the simulator runs as a NumPy view.
    """
    bits = cuda.local.array(1, dtype=uint32)
    bits[0] = ((word >> uint32(4 * j)) & uint32(0xF)) | uint32(_MAGIC_BITS)
    return bits.view(np.float32)[0] - float32(_MAGIC_BIAS)


@cuda.jit(device=True)
def dot_word(word, xs, col, stride):
    """``sum_j q_j * x_j`` over the 8 int4 values of ``word`` against the
    staged activations of packed column ``col``, in fp32."""
    acc = float32(0.0)
    for j in range(8):
        acc += nibble(word, j) * xs[uint32(j * stride + col)]
    return acc


@cuda.jit(device=True)
def load_x8(xv, xs, col, stride):
    """Copy the 8 staged activations of packed column ``col`` to ``xv``
    (registers), for kernels that reuse them across several rows."""
    for j in range(8):
        xv[j] = xs[uint32(j * stride + col)]


@cuda.jit(device=True)
def dot_word_regs(word, xv):
    acc = float32(0.0)
    for j in range(8):
        acc += nibble(word, j) * xv[j]
    return acc


# ── the grouped staging layout (for 128-bit weight loads) ────────────────────
#
# A kernel that loads its packed weights 16 bytes at a time hands each lane
# a *group* of four consecutive words (32 int4 values, inputs 32q .. 32q+31
# of the chunk for group q). It stages the chunk transposed by the input's
# position inside its group: input ``e`` lives at
# ``xs[(e % 32) * stride + e // 32]`` with ``stride = KCHUNK // 32 + 1``::
#
#     xs row p (p = 8t + j: word t of the group, nibble j), column q:
#         row  0:  x[0]   x[32]  x[64]  ... x[32q]        | pad
#         row  1:  x[1]   x[33]  x[65]  ... x[32q+1]      | pad
#         ...
#         row 31:  x[31]  x[63]  x[95]  ... x[32q+31]     | pad
#
# Lanes that own consecutive groups read consecutive words of a row for
# every (t, j): no bank conflicts. Staging stores are conflict-free too: a
# warp's 32 consecutive inputs go to its 32 rows, one column, and the stride
# is odd (KCHUNK a multiple of 256 makes it 8c + 1), so the 32 rows fall in
# 32 different banks (the nibble-transposed layout above conflicts up to
# 4-way there). A lane that owns single words (a scalar path over the same
# staging) reads word w's nibble j at row 8 * (w % 4) + j, column w // 4:
# 32 consecutive words hit rows 8 * (w % 4) + j and 8 columns, i.e. banks
# 8 * (w % 4) + w // 4 + const, all different; conflict-free as well.


def group_layout(KCHUNK: int) -> tuple[int, int, int, int]:
    """``(KWC, GPC, STRIDE, XS)`` for K-chunks of ``KCHUNK`` inputs in the
    grouped layout: packed words and 4-word groups per chunk, the padded
    row stride, and the staged fp32 values (``32 * STRIDE``)."""
    KWC = chunk_layout(KCHUNK)[0]
    GPC = KCHUNK // 32
    STRIDE = GPC + 1
    return KWC, GPC, STRIDE, 32 * STRIDE


@cuda.jit(device=True)
def stage_x_grouped(xs, x, c0, k, tid, nthreads, kchunk, stride):
    """:func:`stage_x` in the grouped layout."""
    for e in range(tid, min(kchunk, k - c0), nthreads):
        xs[uint32((e & 31) * stride + (e >> 5))] = float32(x[c0 + e])


@device_inline
def _put8_grouped(xs, e, w0, w1, w2, w3, stride):
    """Eight fp16 activations ``e .. e + 7`` (four words) into the grouped
    layout: rows ``e % 32 ..`` of column ``e // 32``."""
    at = (e & 31) * stride + (e >> 5)
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


@cuda.jit(device=True)
def stage_x_grouped_v4(xs, x, c0, k, tid, nthreads, kchunk, stride):
    """:func:`stage_x_grouped` with 16-byte loads (``x`` fp16, its first
    element 16-byte aligned, ``c0`` a multiple of 8): eight activations a
    load, a thread's first two loads issued before either is stored (at
    ``kchunk = 2048`` and 128 threads, the whole chunk: one round trip to
    L2 instead of one per four elements); the chunk's last ``< 8`` one at a
    time. Lane ``l``'s eight go to rows ``8 (l % 4) ..`` of column
    ``l // 4``, so each store of a warp falls on bank ``8 ((l % 4) stride
    % 4) + l // 4`` (plus a constant): 32 banks for 32 lanes when
    ``stride`` is odd, as ``group_layout``'s ``GPC + 1`` is for every chunk
    ``chunk_layout`` allows (a multiple of 256 inputs)."""
    lim = min(kchunk, k - c0)
    nv = lim >> 3
    v0 = tid
    v1 = tid + nthreads
    z = uint32(0)
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = z
    if v0 < nv:
        a0, a1, a2, a3 = ldg_v4(x, c0 + 8 * v0)
    if v1 < nv:
        b0, b1, b2, b3 = ldg_v4(x, c0 + 8 * v1)
    if v0 < nv:
        _put8_grouped(xs, 8 * v0, a0, a1, a2, a3, stride)
    if v1 < nv:
        _put8_grouped(xs, 8 * v1, b0, b1, b2, b3, stride)
    for v in range(tid + 2 * nthreads, nv, nthreads):
        c_0, c_1, c_2, c_3 = ldg_v4(x, c0 + 8 * v)
        _put8_grouped(xs, 8 * v, c_0, c_1, c_2, c_3, stride)
    for e in range(8 * nv + tid, lim, nthreads):
        xs[uint32((e & 31) * stride + (e >> 5))] = float32(x[c0 + e])


@cuda.jit(device=True)
def stage_x_grouped_v4_serial(xs, x, c0, k, tid, nthreads, kchunk, stride):
    """:func:`stage_x_grouped_v4` one load at a time: each 16-byte load is
    stored before the thread's next is issued, which holds four words
    live instead of eight (the 64-thread GEMV blocks: 67 registers against
    90 for two in flight, 62 for one fp16 a load). Same layout, stores and
    values."""
    lim = min(kchunk, k - c0)
    nv = lim >> 3
    for v in range(tid, nv, nthreads):
        a0, a1, a2, a3 = ldg_v4(x, c0 + 8 * v)
        _put8_grouped(xs, 8 * v, a0, a1, a2, a3, stride)
    for e in range(8 * nv + tid, lim, nthreads):
        xs[uint32((e & 31) * stride + (e >> 5))] = float32(x[c0 + e])


@cuda.jit(device=True)
def dot_word_grouped(word, xs, col, stride):
    """:func:`dot_word` over the grouped layout: packed word ``col`` of the
    chunk (its activations at rows ``8 * (col % 4) + j``, column ``col // 4``)."""
    base = (col & 3) * 8 * stride + (col >> 2)
    acc = float32(0.0)
    for j in range(8):
        acc += nibble(word, j) * xs[uint32(base + j * stride)]
    return acc


@cuda.jit(device=True)
def load_x8_grouped(xv, xs, col, stride):
    """:func:`load_x8` over the grouped layout (packed word ``col``)."""
    base = (col & 3) * 8 * stride + (col >> 2)
    for j in range(8):
        xv[j] = xs[uint32(base + j * stride)]


@cuda.jit(device=True)
def dot_group(w0, w1, w2, w3, xs, q, stride):
    """``sum q_i * x_i`` over the 32 int4 values of the four words of group
    ``q`` of the chunk (one 16-byte load) against the grouped staging, in
    fp32: four independent 8-term sums, then their total."""
    return (
        dot_word_grouped(w0, xs, 4 * q, stride)
        + dot_word_grouped(w1, xs, 4 * q + 1, stride)
        + dot_word_grouped(w2, xs, 4 * q + 2, stride)
        + dot_word_grouped(w3, xs, 4 * q + 3, stride)
    )
