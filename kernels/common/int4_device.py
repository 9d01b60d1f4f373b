"""The device side of the int4 weight layout (``int4.py`` is the host
side): the exact nibble decode every int4 kernel uses, and the staging
layout of the W4A16 GEMVs' activations, read 16 bytes at a time.

Activation staging
------------------
The GEMVs hand each lane a *group*: four consecutive packed words (one
16-byte weight load), 32 int4 values, the inputs ``32 q .. 32 q + 31`` of
the K-chunk for group ``q``. They stage the chunk's activations in shared
memory as fp32, group by group, each group's 32 followed by 4 floats of
padding (``PITCH = 36`` floats, 144 bytes)::

    input e of the chunk:  group q = e // 32, position p = e % 32
    float index:           36 q + p           (p = 8 t + j: word t, nibble j)

    group 0:  x0 .. x7 | x8 .. x15 | x16 .. x23 | x24 .. x31 | pad(4)
    group 1:  x32 ..                                          | pad(4)

A word's eight activations are 32 contiguous bytes, so a lane reads them
with two ``ld.shared.v4.f32`` (``LDS.128``) at constant offsets from its
group's address: no address arithmetic a value. The 144-byte pitch puts the
16-byte slots of eight consecutive groups (a quarter-warp, which is what one
``LDS.128`` wavefront serves) on eight different bank quads (``9 q + c`` mod
8 is a permutation over ``q``), so the lanes' group reads, the scalar path's
word reads (lanes on consecutive words) and the staging's 16-byte stores are
conflict-free; 32 floats a group apart they would all fall on one quad
(8-way).

Each activation is staged *pre-scaled* by ``2**(89 - 4 (j % 4))`` (``j``
its nibble; ``89`` is ``149 - SHIFT``; a power of two, so exact), which
lets :func:`dot8` decode a nibble where it lies in its half-word as a
float32 subnormal, with no shift, no magic number and no fill (the comment
above ``_dec``): ``(q - 8) 2**(4 (j % 4) - 149)`` times ``x 2**(89 - 4 (j
% 4))`` is the product ``(q - 8) x 2**-60`` exactly, so every product and
every sum is the unscaled decode's times ``2**-60``, and a row's sum times
:data:`UNSCALE` is the unscaled sum, bit for bit, for activations of
magnitude ``2**-66`` to ``2**39`` (every fp16 input, every SiLU product of
fp16 inputs).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, uint32

from . import cvt
from .launch import device_inline
from .smem import ld_shared_f32x4, smem_addr, st_shared_f32x4
from .vload import ldg_v4

PITCH = 36  # floats a staged group: its 32 activations, then 4 of padding
GROUP_BYTES = 4 * PITCH


def group_layout(KCHUNK: int) -> tuple[int, int, int]:
    """``(KWC, GPC, XS)`` for K-chunks of ``KCHUNK`` inputs (a positive
    multiple of 256): packed words and 4-word groups a chunk, and the staged
    fp32 values (``PITCH * GPC``, the shared array's size)."""
    if KCHUNK < 256 or KCHUNK % 256:
        raise ValueError(f"KCHUNK={KCHUNK}: a positive multiple of 256 inputs")
    GPC = KCHUNK // 32
    return KCHUNK // 8, GPC, PITCH * GPC


# float32 bit pattern of 2**23: OR-ing a nibble q into its mantissa gives the
# float 2**23 + q exactly; subtracting 2**23 + 8 leaves q - 8, exactly.
_MAGIC_BITS = 0x4B000000
_MAGIC_BIAS = 8388616.0  # 2**23 + 8


@cuda.jit(device=True)
def nibble(word, j):
    """Signed int4 value ``j`` (0..7) of a packed word, as fp32 (exact), for
    kernels that decode a word once and use its values against several
    rows or scale them (the tiled GEMM, the GDN batched tiers); the GEMVs,
    and since 2026-12-07 the MoE per-row kernels, decode against pre-scaled
    activations (:func:`dot8`).

    No integer-to-float conversion (a quarter-rate instruction that would
    cap the GEMVs well below the memory bandwidth): the nibble is OR-ed into
    the mantissa of 2**23 and the bias subtracted, i.e. shift+and+or and one
    FADD. The uint32 -> float32 reinterpretation goes through a one-element
    local array viewed as float32, which the compiler turns into a register
    move (no local memory) and which the simulator runs as a NumPy view. (A
    magic a position instead of the shift spilled the MoE gate/up kernel 16
    bytes at its 72-register bound with ptxas 13.0, when that kernel decoded
    by this function, its scale on every value.)
    """
    bits = cuda.local.array(1, dtype=uint32)
    bits[0] = ((word >> uint32(4 * j)) & uint32(0xF)) | uint32(_MAGIC_BITS)
    return bits.view(np.float32)[0] - float32(_MAGIC_BIAS)


# The pre-scaled decode (subnormal): a nibble at bits ``4 p`` of a word
# (``p`` 0-3: the low half-word; the high half after a 16-bit shift), with
# every other bit cleared by one AND, is the float32 subnormal ``q 2**(4 p -
# 149)`` (exponent field 0: no implicit bit, so no magic to OR in and no
# bias to fill the word with); one FADD of ``8 2**(4 p - 149)`` leaves
# ``(q - 8) 2**(4 p - 149)``, exact (subnormals are multiples of
# ``2**-149``). The activation staged for it carries ``2**(149 - 4 p -
# SHIFT)`` (:func:`xscale`), so the FFMA's exact product is ``(q - 8) x
# 2**-SHIFT``; a row's sum is scaled back by ``2**SHIFT`` (:data:`UNSCALE`)
# at its end, which changes no bit while every partial sum is a normal
# float (``SHIFT`` = 60: the pre-scaled activations stay below 2**128 for
# any ``|x| < 2**39``, and products are exact for ``|x| >= 2**-66``; every
# fp16 input and every SiLU product of fp16 inputs lies between).
SHIFT = 60
UNSCALE = float(2.0**SHIFT)
_XEXP = 149 - SHIFT  # the pre-scale's exponent at position 0
_BIAS = tuple(float(8 * 2.0 ** (4 * p - 149)) for p in range(4))  # 8 2**(4 p - 149)


@device_inline
def _dec(w, p):
    """``(q - 8) 2**(4 p - 149)`` of the nibble at bits ``4 p`` of ``w``."""
    return cvt.bits_f32(w & uint32(0xF << (4 * p))) - float32(_BIAS[p])


@device_inline
def dot8_from(acc, word, x0, x1, x2, x3, x4, x5, x6, x7):
    """``acc + 2**-SHIFT sum_j (q_j - 8) x_j`` over the 8 nibbles of
    ``word`` against their pre-scaled activations ``x0 .. x7``, in fp32:
    one FFMA chain from ``acc``, ``j`` in order."""
    hi = word >> uint32(16)
    acc += _dec(word, 0) * x0
    acc += _dec(word, 1) * x1
    acc += _dec(word, 2) * x2
    acc += _dec(word, 3) * x3
    acc += _dec(hi, 0) * x4
    acc += _dec(hi, 1) * x5
    acc += _dec(hi, 2) * x6
    acc += _dec(hi, 3) * x7
    return acc


@device_inline
def dot8(word, x0, x1, x2, x3, x4, x5, x6, x7):
    """:func:`dot8_from` zero: the word's sum alone, as an unscaled decode
    sums it (times ``2**-SHIFT``)."""
    return dot8_from(float32(0.0), word, x0, x1, x2, x3, x4, x5, x6, x7)


# ── staging ───────────────────────────────────────────────────────────────────


@device_inline
def xscale(e):
    """``2**(149 - SHIFT - 4 (e % 4))``, the pre-scale of chunk input ``e``
    (its nibble's position in its half-word), as fp32 bits."""
    return cvt.bits_f32(uint32(((127 + _XEXP) << 23) - (e & 3) * 0x02000000))


@device_inline
def slot(e):
    """The float index of chunk input ``e`` in the staged layout."""
    return uint32(PITCH * (e >> 5) + (e & 31))


@device_inline
def word_at(xb, col):
    """The shared address of packed word ``col``'s 8 activations (32 bytes,
    16-byte aligned) in the chunk staged at shared address ``xb``."""
    return xb + uint32(GROUP_BYTES * (col >> 2) + 32 * (col & 3))


@device_inline
def pre4(v0, v1, v2, v3):
    """Four activations of inputs ``4 i .. 4 i + 3`` (a half-word's
    nibbles) pre-scaled: :func:`xscale` of positions 0-3 as constants
    (exact powers of two)."""
    return (
        v0 * float32(2.0**_XEXP),
        v1 * float32(2.0 ** (_XEXP - 4)),
        v2 * float32(2.0 ** (_XEXP - 8)),
        v3 * float32(2.0 ** (_XEXP - 12)),
    )


@device_inline
def put8_f32(at, v0, v1, v2, v3, v4, v5, v6, v7):
    """Eight fp32 activations of one packed word (inputs ``8 w .. 8 w + 7``,
    ``at`` = :func:`word_at`'s address) pre-scaled, by two 16-byte stores."""
    a0, a1, a2, a3 = pre4(v0, v1, v2, v3)
    a4, a5, a6, a7 = pre4(v4, v5, v6, v7)
    st_shared_f32x4(at, a0, a1, a2, a3)
    st_shared_f32x4(at + uint32(16), a4, a5, a6, a7)


@device_inline
def put8(at, w0, w1, w2, w3):
    """:func:`put8_f32` of eight fp16 activations in four words (the first
    in bits 0-15 of ``w0``)."""
    a0, a1 = cvt.f16x2_to_f32x2(w0)
    a2, a3 = cvt.f16x2_to_f32x2(w1)
    a4, a5 = cvt.f16x2_to_f32x2(w2)
    a6, a7 = cvt.f16x2_to_f32x2(w3)
    put8_f32(at, a0, a1, a2, a3, a4, a5, a6, a7)


def make_stagers(store8, store1):
    """The staging functions of a layout, ``(stage, stage_v4,
    stage_v4_serial)``, each ``(xs, x, c0, k, tid, nthreads, kchunk)``:
    ``xs`` <- the chunk ``x[c0 : min(c0 + kchunk, k)]`` of fp16 activations
    as the layout keeps them, ``store8(xs, v, w0, w1, w2, w3)`` storing the
    eight inputs ``8 v .. 8 v + 7`` from four words (the first in bits 0-15
    of ``w0``) and ``store1(xs, e, value)`` input ``e`` as fp32 (slots past
    ``k`` are left alone: no packed word reads them).

    * ``stage``: one input a thread at a time (consecutive threads on
      consecutive inputs), for ``x`` that does not start on 16 bytes;
    * ``stage_v4``: 16-byte loads (``x`` starting on 16 bytes, ``c0`` a
      multiple of 8), a thread's first two issued before either is stored
      (at ``kchunk = 2048`` and 128 threads, the whole chunk: one round
      trip to L2 instead of one a four inputs), the chunk's last ``< 8``
      inputs one at a time;
    * ``stage_v4_serial``: ``stage_v4`` one load at a time, each stored
      before the next is issued: four words live instead of eight (the
      64-thread GEMV blocks)."""

    @cuda.jit(device=True)
    def stage(xs, x, c0, k, tid, nthreads, kchunk):
        for e in range(tid, min(kchunk, k - c0), nthreads):
            store1(xs, e, float32(x[c0 + e]))

    @cuda.jit(device=True)
    def stage_v4(xs, x, c0, k, tid, nthreads, kchunk):
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
            store8(xs, v0, a0, a1, a2, a3)
        if v1 < nv:
            store8(xs, v1, b0, b1, b2, b3)
        if kchunk > 16 * nthreads:  # constants where inlined: no loop when two loads a thread cover it
            for v in range(tid + 2 * nthreads, nv, nthreads):
                c_0, c_1, c_2, c_3 = ldg_v4(x, c0 + 8 * v)
                store8(xs, v, c_0, c_1, c_2, c_3)
        for e in range(8 * nv + tid, lim, nthreads):
            store1(xs, e, float32(x[c0 + e]))

    @cuda.jit(device=True)
    def stage_v4_serial(xs, x, c0, k, tid, nthreads, kchunk):
        lim = min(kchunk, k - c0)
        nv = lim >> 3
        for v in range(tid, nv, nthreads):
            a0, a1, a2, a3 = ldg_v4(x, c0 + 8 * v)
            store8(xs, v, a0, a1, a2, a3)
        for e in range(8 * nv + tid, lim, nthreads):
            store1(xs, e, float32(x[c0 + e]))

    return stage, stage_v4, stage_v4_serial


@device_inline
def _put8_staged(xs, v, w0, w1, w2, w3):
    """:func:`put8` of 16-byte unit ``v`` into the staged chunk ``xs``: its
    eight inputs are packed word ``v``'s, so the two 16-byte stores of a
    quarter-warp's 8 units fall on 8 bank quads (the layout's pitch)."""
    put8(word_at(smem_addr(xs), v), w0, w1, w2, w3)


@device_inline
def _put1_staged(xs, e, value):
    xs[slot(e)] = value * xscale(e)


# The staging of this layout (:func:`make_stagers`): one input a thread,
# 16-byte loads two in flight, or one at a time; every value pre-scaled.
stage_x_grouped, stage_x_grouped_v4, stage_x_grouped_v4_serial = make_stagers(_put8_staged, _put1_staged)


# ── reading ───────────────────────────────────────────────────────────────────


@device_inline
def dot_word_at(word, at):
    """:func:`dot8` of ``word`` against its 8 staged activations at shared
    address ``at`` (:func:`word_at`): two ``LDS.128``."""
    x0, x1, x2, x3 = ld_shared_f32x4(at)
    x4, x5, x6, x7 = ld_shared_f32x4(at + uint32(16))
    return dot8(word, x0, x1, x2, x3, x4, x5, x6, x7)


@device_inline
def dot_group_at(w0, w1, w2, w3, at):
    """``sum q_i * x_i`` over the 32 int4 values of the four words of one
    group (one 16-byte load) against the group's staged activations at
    shared address ``at``, in fp32: four independent 8-term sums, then
    their total."""
    return (
        dot_word_at(w0, at)
        + dot_word_at(w1, at + uint32(32))
        + dot_word_at(w2, at + uint32(64))
        + dot_word_at(w3, at + uint32(96))
    )


@device_inline
def load_x8_at(xv, at):
    """The 8 staged activations at shared address ``at`` into ``xv``
    (registers), for kernels that reuse them across several rows."""
    xv[0], xv[1], xv[2], xv[3] = ld_shared_f32x4(at)
    xv[4], xv[5], xv[6], xv[7] = ld_shared_f32x4(at + uint32(16))


@device_inline
def dot_word_regs(word, xv):
    """:func:`dot8` against activations held in ``xv`` (:func:`load_x8_at`)."""
    return dot8(word, xv[0], xv[1], xv[2], xv[3], xv[4], xv[5], xv[6], xv[7])
