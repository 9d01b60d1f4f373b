"""Expert weights in three formats, summed against staged activations by
the per-row decode kernels (``_experts``).

Every per-row kernel reads weights through ``make_dot_wide(FMT, X)``: a
row's 16-byte loads, or its 8-value chunks where rows are not whole loads,
decoded in registers and summed against the activations the block staged
in shared memory. The three arrays carry the format (host side in
``formats``):

=======  ====================================  =================================  ==============
FMT      ``wa``                                ``wb``                             ``wc``
=======  ====================================  =================================  ==============
int4     uint32[E, N, K/8]: W4A16 words        float16[E, N, ceil(K/128)]         unused
nvfp4    uint8[E, N, K/2]: E2M1, low first     uint8[E, N, K/16]: E4M3 codes      float32[E]
fp8      uint8[E, N, K]: E4M3 codes            float32[E, ceil(N/128),            unused
                                               ceil(K/128)]: 128 x 128 blocks
=======  ====================================  =================================  ==============

Eight values is one W4A16 word, four NVFP4 bytes (half a 16-value scale
block), eight FP8 bytes: one chunk never straddles a scale, so each chunk
reads one scale. Eight values come back as a tuple unpacked with constant
indices, so they stay in registers (a loop over them would make a local
array).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np
from numba import cuda, float32

from ..common import cvt, index32, int4_device, smem, vload
from ..common.int4_device import dot8_from
from ..common.launch import device_inline

FORMATS = ("int4", "nvfp4", "fp8")
LANES = 8  # lanes an output (the per-row kernels' group)
FULL_MASK = 0xFFFFFFFF
FP8_BLOCK = 128  # the FP8 weights' scale blocks, 128 x 128: the common block-wise FP8 layout (this project's choice)


@device_inline
def fp8_values8(wa, e, n, c):
    """The eight E4M3 values ``W_e[n, 8c .. 8c+7]`` of FP8 weights,
    unscaled, as float32 (a code a load: rows that are not whole 16-byte
    loads)."""
    k = 8 * c
    a0, a1 = _e4m3_at(wa, e, n, k)
    a2, a3 = _e4m3_at(wa, e, n, k + 2)
    a4, a5 = _e4m3_at(wa, e, n, k + 4)
    a6, a7 = _e4m3_at(wa, e, n, k + 6)
    return a0, a1, a2, a3, a4, a5, a6, a7


@device_inline
def _e4m3_at(wa, e, n, k):
    """The values of codes ``W_e[n, k]`` and ``W_e[n, k + 1]`` (two byte
    loads), one ``cvt.rn.f16x2.e4m3x2``."""
    return cvt.e4m3x2_to_f32x2(np.uint32(wa[e, n, k]) | (np.uint32(wa[e, n, k + 1]) << np.uint32(8)))


# 16-byte weight loads (``vload.ldg_v4``): the values one load carries, per format
WIDE_VALUES = {"int4": 32, "nvfp4": 32, "fp8": 16}


# The activations a block reads are staged in shared memory once, ``STAGE``
# inputs a chunk. An fp16 row kept as fp16 (FP8's gate/up: eight values a
# 16-byte unit, converted as read, half the shared memory of float32) lies
# in units at swizzled places: unit ``u`` at unit ``swz(u) = u ^ ((u >> 3)
# & 7)``. A float32 stage (the int4 and NVFP4 gate/up kernels' fp16 row
# converted once as staged, and every down kernel's SiLU products) takes
# the W4A16 GEMVs' group layout (``int4_device``: each 32 inputs followed by
# 4 floats of padding, ``STAGE_F32`` floats): the 32 inputs of a 16-byte
# int4 or NVFP4 load are 128 contiguous bytes, read by eight
# ``ld.shared.v4.f32`` at constant offsets from one address. Either way a
# lane of an output's 8-lane group reads the units of its own weights'
# values (8 float32 units for a 16-byte int4/NVFP4 load; for an FP8 one 2
# fp16 or 4 float32; 1 or 2 for an 8-value chunk), the 8 lanes of a
# quarter-warp on consecutive
# loads, which the XOR (or the 144-byte pitch) spreads over the 8 different
# 16-byte bank groups; the stagers' writes of consecutive units stay
# conflict-free too.
STAGE = 2048
STAGE_F32 = int4_device.PITCH * (STAGE // 32)


@device_inline
def swz(u):
    """The staged place of 16-byte unit ``u`` of an fp16 stage."""
    return u ^ ((u >> 3) & 7)


@device_inline
def ld8_at(at):
    """Eight float32 values at shared address ``at`` (16-byte aligned): two
    ``ld.shared.v4.f32``."""
    x0, x1, x2, x3 = smem.ld_shared_f32x4(at)
    x4, x5, x6, x7 = smem.ld_shared_f32x4(at + np.uint32(16))
    return x0, x1, x2, x3, x4, x5, x6, x7


@device_inline
def group_at(xa, j):
    """The shared address of the float32 stage's group holding local index
    ``j`` (a multiple of 32, non-negative): its 32 values at constant
    offsets from it."""
    return xa + np.uint32(int4_device.GROUP_BYTES) * (index32.u32(j) >> np.uint32(5))


@device_inline
def ld8_f(xa, j):
    """Eight staged float32 values from local index ``j`` (a multiple of 8)
    of the float32 stage at shared address ``xa``."""
    return ld8_at(int4_device.word_at(xa, j >> 3))


@device_inline
def ld8_h(xa, j):
    """:func:`ld8_f` of a stage of fp16: one ``ld.shared.v4``, each pair
    converted to float32 (exactly)."""
    a, b, c, d = smem.ld_shared_v4(xa + np.uint32(16 * swz(j >> 3)))
    x0, x1 = cvt.f16x2_to_f32x2(a)
    x2, x3 = cvt.f16x2_to_f32x2(b)
    x4, x5 = cvt.f16x2_to_f32x2(c)
    x6, x7 = cvt.f16x2_to_f32x2(d)
    return x0, x1, x2, x3, x4, x5, x6, x7


@device_inline
def dot8v(w, x):
    """``sum_i w[i] * x[i]`` over eight values, in a fixed order."""
    return w[0] * x[0] + w[1] * x[1] + w[2] * x[2] + w[3] * x[3] + w[4] * x[4] + w[5] * x[5] + w[6] * x[6] + w[7] * x[7]


LD8 = {"f16": ld8_h, "f32": ld8_f}


# int4's group scales of a chunk, staged beside the activations: a
# ``STAGE`` chunk of a row covers 16 groups of 128, whose fp16 scales are 32
# contiguous bytes (one sector); the block's rows' are copied once a chunk,
# two 16-byte loads a row (:func:`stage_scales`), where each step would
# otherwise read a sector a row for 4 of its bytes (a warp's four rows lie
# ``K / 64`` bytes apart). Where the rows' scales are not whole 16-byte
# loads (``K`` not a multiple of 1024, or not on 16 bytes) each scale of the
# chunk is copied once, one fp16 a thread (:func:`stage_scales_narrow`),
# where each step's lanes read their own (8 lanes a row, 4 of them a
# scale: 2-byte loads, an eighth of the bytes a step requested). A row's
# 16 scales are two 16-byte halves, swapped in rows 4-7 of every eight
# (:func:`scale_slot`): rows lie 32 bytes apart, so without the swap a
# warp's narrow copy of four groups a row (eight rows, ``K`` = 512) put
# rows ``r`` and ``r + 4`` in the same banks, two wavefronts a store.
SCALE_ROWS = 32  # gate/up: the block's 16 gate rows, then its 16 up rows
SCALE_GROUPS = STAGE // 128
SCALE_HALVES = SCALE_ROWS * SCALE_GROUPS
# NVFP4's E4M3 block scales, a byte a 16 values, are staged the same way,
# where each 16-byte weight load read its pair as one 2-byte load (an eighth
# of the load's bytes, a ninth of those loaded): a chunk's are ``STAGE / 16``
# = 128 bytes a row, 16-byte loads where a row's are whole (``K`` a multiple
# of 256: :func:`stage_nvfp4_scales`), else a pair a thread
# (:func:`stage_nvfp4_scales_narrow`). Rows lie 144 bytes apart in the
# table, so a warp's four rows read four different bank groups.
NV_ROW_BYTES = STAGE // 16 + 16
NV_SCALE_HALVES = SCALE_ROWS * NV_ROW_BYTES // 2


@device_inline
def scale_slot(lr, g):
    """The place of group ``g`` of table row ``lr`` among the staged int4
    scales: the row's two 8-scale halves swapped where ``lr & 4``."""
    return lr * SCALE_GROUPS + (g ^ ((lr << 1) & 8))


@device_inline
def _copy_rows(tab, pitch, swap, src, e, n0, nend, off, sets, first, count, t):
    """Elements ``first .. first + count - 1`` of rows ``n0 + r`` (``+ off``
    for the second set) of ``src[e]`` to row ``set * 16 + r`` of the table
    ``tab`` (``pitch`` elements a row; with ``swap`` at the
    :func:`scale_slot` places), one a thread a turn, a row's consecutive
    elements by consecutive threads; rows past ``nend`` copy nothing. The
    narrow staging of every format's scales."""
    for i in range(t, sets * 16 * count, cuda.blockDim.x):
        rr = i // count  # set * 16 + row
        j = i - rr * count
        n = n0 + (rr & 15)
        if n < nend:
            at = scale_slot(rr, j) if swap else rr * pitch + j
            tab[at] = src[e, n + (rr >> 4) * off, first + j]


@device_inline
def stage_scales_narrow(ss, wb, e, n0, nend, off, sets, c0, c1, t):
    """:func:`stage_scales` of rows whose chunk's scales are not whole
    16-byte loads: each of the chunk's scales copied once into the same
    ``[set][row][16]`` places, one fp16 a thread; groups past the chunk
    copy nothing."""
    _copy_rows(ss, SCALE_GROUPS, True, wb, e, n0, nend, off, sets, c0 >> 7, (c1 - c0 + 127) >> 7, t)


@device_inline
def stage_scales(sa, wb, e, n0, nend, off, sets, c0, c1, t):
    """Thread ``t < 32 sets`` copies 16 bytes (8 scales) of row ``n0 + r
    (+ off for the second set)`` of expert ``e``'s int4 scales, chunk
    ``c0 .. c1``, to the :func:`scale_slot` places of the stage at shared
    address ``sa`` (``[set][row][16]`` fp16, place ``t`` with its row's
    halves swapped where ``r & 4``): rows past ``nend`` and halves past the
    chunk copy nothing."""
    if t < 32 * sets:
        r = (t >> 1) & 15
        h = t & 1
        n = n0 + r
        if n < nend and (h == 0 or c1 - c0 > 1024):
            w32 = wb.view(np.uint32)  # fp16 pairs: 8 scales a 16-byte load
            at = (np.int64(e) * w32.shape[1] + n + (t >> 5) * off) * w32.shape[2] + (c0 >> 8) + 4 * h
            a0, a1, a2, a3 = vload.ldg_v4(w32, at)
            smem.st_shared_v4(sa + np.uint32(16 * (t ^ ((t >> 3) & 1))), a0, a1, a2, a3)


# FP8's 128 x 128 block scales of a chunk, staged the same way: a block's 16
# rows lie in one 128-row block (gate's, and up's ``inter`` rows on, another),
# so a chunk needs 16 float32 scales a set, where every lane read its load's
# own (4 bytes a 16-byte load, a quarter of the weights' bytes requested).
# They go into the int4 scales' shared array, viewed as float32.


@device_inline
def stage_fp8_scales(ss, wb, e, n0, off, sets, c0, c1, t):
    """Thread ``t < 16 sets`` copies the float32 block scale of inputs ``c0 +
    128 (t % 16) ..`` for the 128-row block of row ``n0`` (``+ off`` for the
    second set) to place ``t`` of ``ss`` viewed as float32; blocks past
    ``c1`` copy nothing."""
    j = t & 15
    if t < 16 * sets and c0 + 128 * j < c1:
        ss.view(np.float32)[t] = wb[e, (n0 + (t >> 4) * off) // FP8_BLOCK, (c0 >> 7) + j]


@device_inline
def stage_nvfp4_scales(sa, wb, e, n0, nend, off, sets, c0, c1, t):
    """The NVFP4 scales of chunk ``c0 .. c1`` (a multiple of 256 inputs)
    for rows ``n0 ..`` of expert ``e`` (``+ off`` for the second set), 16
    bytes a thread a turn, a row's consecutive loads by consecutive threads,
    to row ``set * 16 + r`` of the table at shared address ``sa``; rows past
    ``nend`` copy nothing."""
    per = (c1 - c0) >> 8  # a row's 16-byte loads: 256 inputs each
    w32 = wb.view(np.uint32)  # E4M3 quads: 16 scales a 16-byte load
    for i in range(t, sets * 16 * per, cuda.blockDim.x):
        rr = i // per  # set * 16 + row
        j = i - rr * per
        n = n0 + (rr & 15)
        if n < nend:
            at = (np.int64(e) * w32.shape[1] + n + (rr >> 4) * off) * w32.shape[2] + (c0 >> 6) + 4 * j
            a0, a1, a2, a3 = vload.ldg_v4(w32, at)
            smem.st_shared_v4(sa + np.uint32(rr * NV_ROW_BYTES + 16 * j), a0, a1, a2, a3)


@device_inline
def stage_nvfp4_scales_narrow(ss, wb, e, n0, nend, off, sets, c0, c1, t):
    """:func:`stage_nvfp4_scales` of rows whose chunk's scales are not
    whole 16-byte loads: a pair (one 16-value block's and the next's) a
    thread a turn, into the same places."""
    _copy_rows(
        ss.view(np.uint16),
        NV_ROW_BYTES // 2,
        False,
        wb.view(np.uint16),
        e,
        n0,
        nend,
        off,
        sets,
        c0 >> 5,
        (c1 - c0) >> 5,
        t,
    )


@lru_cache(maxsize=None)
def make_stage_chunk_scales(FMT: str):
    """``(halves, stage)`` for the per-row kernels, whose wide steps read a
    chunk's scales from a shared table of ``halves`` fp16 places, which
    ``stage(ss, sa, wb, e, n0, nend, off, sets, c0, c1, k, t)`` fills: FP8's
    block scales (:func:`stage_fp8_scales`); NVFP4's 16 bytes a load where a
    row's are whole (``k`` a multiple of 256; the wide steps need ``wb`` on
    16 bytes: :func:`stage_nvfp4_scales`), else a pair a thread; int4's
    likewise where ``k`` is a multiple of 1024 and ``wb`` on 16 bytes
    (:func:`stage_scales`), else one scale a thread
    (:func:`stage_scales_narrow`)."""
    FP8 = FMT == "fp8"
    NV = FMT == "nvfp4"
    halves = NV_SCALE_HALVES if NV else SCALE_HALVES

    @device_inline
    def stage(ss, sa, wb, e, n0, nend, off, sets, c0, c1, k, t):
        if FP8:
            stage_fp8_scales(ss, wb, e, n0, off, sets, c0, c1, t)
        elif NV:
            if k % 256 == 0:
                stage_nvfp4_scales(sa, wb, e, n0, nend, off, sets, c0, c1, t)
            else:
                stage_nvfp4_scales_narrow(ss, wb, e, n0, nend, off, sets, c0, c1, t)
        elif k % 1024 == 0 and vload.aligned16(wb):
            stage_scales(sa, wb, e, n0, nend, off, sets, c0, c1, t)
        else:
            stage_scales_narrow(ss, wb, e, n0, nend, off, sets, c0, c1, t)

    return halves, stage


# NVFP4's block scales where a row's are whole 4-byte words (``K`` a
# multiple of 64): a step's 16 loads of a row (lane ``l`` of its 8 loads
# ``b + l`` and ``b + 8 + l``) have 32 scale bytes, one sector, read as one
# 4-byte load a lane where two 2-byte loads a lane would each use half of
# it. Lane ``2m`` loads word ``m`` (loads ``b + 2m`` and ``b + 2m + 1``'s
# pairs), lane ``2m + 1`` word ``m + 4``: the two need each other's word
# and their own, so one shuffle (``lane ^ 1``) gives each its two pairs.
# ``SHFL_FAULTS`` (tests only, default 0): 1 shuffles with ``lane ^ 2``, a
# wrong source.
SHFL_FAULTS = (0, 1)


# The per-row kernels' sums, unscaled a value: the 16 to 32 values of a
# 16-byte load under one scale (two for NVFP4) are summed against the
# staged activations first and the sum is scaled once (one multiply a
# 16- or 32-value sum instead of one or two a value).
#
# * int4: ``sum_j (q_j - 8) x_j`` by ``int4_device.dot8``, which decodes a
#   nibble where it lies in its half-word as a float32 subnormal (an AND and
#   an FADD) against an activation staged pre-scaled by ``2**(89 - 4 (j %
#   4))`` (``xscale``; the products exact for activations of ``2**-66`` to
#   ``2**39``), so every sum carries ``2**-60``; then times the group's
#   scale, and the row's sum, at its end (:func:`Dots.finish`), by ``2**60``.
# * NVFP4: two values at a time, nibbles ``j`` and ``j + 4`` of a word, are
#   placed in an fp16 pair: the nibble's exponent and mantissa bits at
#   fp16's bits 9-11 (the low two exponent bits and the top mantissa bit),
#   its sign at bit 15, which makes the fp16 ``e2m1 2**-14`` exactly, E2M1's
#   subnormal (0.5) landing on fp16's (shift, AND; shift, AND-OR: four
#   instructions a pair, three for the last); each half becomes a float32
#   (exact) for its FFMA. A 16-value block's sum is multiplied by its E4M3
#   scale (a pair of scales one ``cvt.rn.f16x2.e4m3x2``), and the row's sum,
#   at its end (:func:`Dots.finish`), by ``2**14`` and the tensor scale.
#   Every sum is the unscaled one times ``2**-14`` exactly but where it
#   falls below float32's normal range (``2**-126``): a running sum under
#   ``2**-112``, or a block's sum times an E4M3 scale (as small as
#   ``2**-9``) under about ``2**-103``. An fp16 ``x`` never gives one (its
#   nonzero sums are at least ``2**-25``); float32 SiLU products only at
#   negligible sizes.
# * FP8: a pair of codes a ``cvt.rn.f16x2.e4m3x2`` (:func:`_e8`), each
#   half a float32 for its FFMA; the load's sum times its block's scale.
#
# Against a decode that scales every value before its multiply (these
# kernels' until 2026-12-07) only the rounding order differs: each product
# of a value and an activation is exact or rounded once either way.
FP4_EM = 0x0E000E00  # a pair's exponent and mantissa bits
FP4_SIGN = 0x80008000  # a pair's sign bits
FP4_UNIT = 16384.0  # 2**14: the fp16 placement's factor


@device_inline
def fp4x8(w):
    """The eight E2M1 values of an NVFP4 word (low nibble first) times
    ``2**-14``, exactly, as float32: nibbles ``j`` and ``j + 4`` a pair
    placed in fp16 (the comment above)."""
    em, sg = np.uint32(FP4_EM), np.uint32(FP4_SIGN)
    w = np.uint32(w)
    v0, v4 = cvt.f16x2_to_f32x2(((w << np.uint32(9)) & em) | ((w << np.uint32(12)) & sg))
    v1, v5 = cvt.f16x2_to_f32x2(((w << np.uint32(5)) & em) | ((w << np.uint32(8)) & sg))
    v2, v6 = cvt.f16x2_to_f32x2(((w << np.uint32(1)) & em) | ((w << np.uint32(4)) & sg))
    v3, v7 = cvt.f16x2_to_f32x2(((w >> np.uint32(3)) & em) | (w & sg))
    return v0, v1, v2, v3, v4, v5, v6, v7


@device_inline
def int4_dot(acc, w, x):
    """``acc`` plus ``2**-60 sum_j (q_j - 8) x_j`` of a W4A16 word against
    eight staged pre-scaled activations (the tuple ``x``), one FFMA chain
    from ``acc``."""
    return dot8_from(acc, w, x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7])


@device_inline
def fp4_dot(acc, w, x):
    """``acc`` plus ``sum_j e2m1_j 2**-14 x_j`` of an NVFP4 word against
    eight staged activations (the tuple ``x``), one FFMA chain from ``acc``."""
    v0, v1, v2, v3, v4, v5, v6, v7 = fp4x8(w)
    acc += v0 * x[0]
    acc += v1 * x[1]
    acc += v2 * x[2]
    acc += v3 * x[3]
    acc += v4 * x[4]
    acc += v5 * x[5]
    acc += v6 * x[6]
    acc += v7 * x[7]
    return acc


@device_inline
def fp4_finish(acc, ts):
    """An NVFP4 row's sum (its values times ``2**-14``) times ``2**14``
    (exact) and the expert's tensor scale ``ts``."""
    return (acc * float32(FP4_UNIT)) * ts


class Dots(NamedTuple):
    """The device functions of :func:`make_dot_wide`."""

    wide_ok: object
    dot: object
    dot_pair: object
    pairs_ok: object
    dot_shfl: object
    chunk: object
    finish: object


@lru_cache(maxsize=None)
def make_dot_wide(FMT: str, X: str, SHFL_FAULT: int = 0) -> Dots:
    """The per-row kernels' sums over an expert's weight row, against the
    activations staged at shared address ``xa`` holding inputs ``c0 ..``
    (:data:`LD8`: ``X`` is ``f16`` or ``f32``, the stage's type; int4 and
    NVFP4 need ``f32``, int4's pre-scaled by ``int4_device.pre4``). Every
    NVFP4 sum carries the fp16 placement's ``2**-14`` and leaves out the
    tensor scale, both of which ``finish`` applies:

    * ``dot(acc, wv, wb, e, n, q, q1, xa, c0, ss, lr, sfast)``: ``acc``
      plus ``sum_j W_e[n, k0 + j] x[k0 + j]`` over the ``V`` values of
      16-byte loads ``q`` and ``q + LANES`` (below ``q1``; ``k0 = q V``, ``V``
      is :data:`WIDE_VALUES`: 32 int4 or NVFP4 values, 16 FP8 codes), both
      ``ld.global.nc.v4.u32`` issued before either is used, decoded in
      registers (the comment above; FP8 a pair of codes a
      ``cvt.rn.f16x2.e4m3x2``);
    * ``dot_pair(g, u, wv, wb, e, n, n2, q, q1, xa, c0, ss, lr, lr2,
      sfast)``: the same for rows ``n`` and ``n2`` (gate and up) over load
      ``q``, each eight staged values read once for both;
    * ``dot_shfl(acc, wv, wbw, e, n, q, q1, xa, c0)`` (NVFP4 where
      ``pairs_ok``): :func:`dot` run by every lane of the warp alike, a
      step's scales one 4-byte load a lane (``wbw``: ``wb.view(np.int32)``,
      taken before the loop) shared by a shuffle;
    * ``chunk(wa, wb, wc, e, n, c, x)``: the sum of the eight values of
      chunk ``c`` (inputs ``8c .. 8c + 7``) against the staged values ``x``
      (a tuple from :data:`LD8`), where rows are not whole loads;
    * ``finish(acc, ts)``: a row's sum with NVFP4's tensor scale ``ts``
      (and the fp16 placement's ``2**14``) applied.

    ``wv``: ``wa.view(np.uint32)``, the weights as 32-bit words, taken
    before the loop. ``wide_ok``: rows of ``k`` values are whole loads and the weights
    start on 16 bytes (the loop is then this). ``sfast``: a load's scales come
    from row ``lr`` of the chunk's staged scales ``ss``
    (:func:`make_stage_chunk_scales`), else from ``wb``. ``pairs_ok``:
    NVFP4 rows of ``k`` values whose scales are whole 4-byte words (with
    ``wide_ok``'s 16-byte start, every row's are word-aligned and a chunk's
    steps start on a word)."""
    if SHFL_FAULT not in SHFL_FAULTS:
        raise ValueError(f"SHFL_FAULT={SHFL_FAULT}: one of {SHFL_FAULTS}")
    if FMT not in FORMATS:
        raise ValueError(f"unknown expert weight format {FMT!r}: one of {FORMATS}")
    if FMT != "fp8" and X != "f32":
        raise ValueError(f"{FMT} sums its values against a float32 stage, not {X}")
    V = WIDE_VALUES[FMT]
    KPW = {"int4": 8, "nvfp4": 8, "fp8": 4}[FMT]  # values per 32-bit word
    ld8 = LD8[X]
    NV = FMT == "nvfp4"
    FP8 = FMT == "fp8"
    word_dot = int4_dot if FMT == "int4" else fp4_dot

    @device_inline
    def wide_ok(wa, wb, k):
        # NVFP4 reads a load's two block scales as one 16-bit word: K / 16
        # scales a row, even, from an aligned start
        return k % V == 0 and vload.aligned16(wa) and (not NV or vload.aligned16(wb))

    # ``wv``: the weights as 32-bit words (``wa.view(np.uint32)``: int4's
    # already are, the others' bytes read as words), viewed by the kernel
    # once before a loop of 16-byte loads: a view checks its shape, which
    # may raise, so the compiler keeps a view taken in the loop there.
    @device_inline
    def words_of(wv, e, n, q):
        # the row's address once, before the loop; the load's index 32-bit (index32)
        return vload.ldg_v4(index32.row(wv[e, n]), index32.u32(q * (V // KPW)))

    # ``row(...) -> (w0, w1, w2, w3, sa, sb)``: a load's words and scales
    # (``sa`` for its first 16 values, ``sb`` for the next: NVFP4's two blocks).
    if FMT == "int4":

        @device_inline
        def row(wv, wb, e, n, q, c0, ss, lr, sfast):
            w0, w1, w2, w3 = words_of(wv, e, n, q)
            k0 = q * V
            # 32 values within one group of 128: its scale staged (an unsigned
            # chunk offset), or loaded
            if sfast:
                s = float32(ss[scale_slot(np.uint32(lr), index32.u32(k0 - c0) >> np.uint32(7))])
            else:
                s = float32(wb[e, n, k0 >> 7])
            return w0, w1, w2, w3, s, s

    elif NV:

        @device_inline
        def row(wv, wb, e, n, q, c0, ss, lr, sfast):
            w0, w1, w2, w3 = words_of(wv, e, n, q)
            # the two 16-value blocks' scales, adjacent bytes: staged, or one 16-bit load
            if sfast:
                at = index32.u32(lr * (NV_ROW_BYTES // 2)) + (index32.u32(q * V - c0) >> 5)
                pair = np.uint32(ss.view(np.uint16)[at])
            else:
                pair = np.uint32(wb.view(np.uint16)[e, n, (q * V) >> 5])
            sa, sb = cvt.e4m3x2_to_f32x2(pair)
            return w0, w1, w2, w3, sa, sb

    else:

        @device_inline
        def row(wv, wb, e, n, q, c0, ss, lr, sfast):
            w0, w1, w2, w3 = words_of(wv, e, n, q)
            # 16 values within one block of 128: its scale staged, or loaded
            if sfast:
                s = ss.view(np.float32)[index32.u32((lr >> 4) << 4) + (index32.u32(q * V - c0) >> 7)]
            else:
                s = wb[e, n // FP8_BLOCK, (q * V) // FP8_BLOCK]
            return w0, w1, w2, w3, s, s

    if FP8:  # two words of eight codes a load, summed, the sum scaled once

        @device_inline
        def use(acc, w0, w1, w2, w3, sa, sb, xa, j):
            """``acc`` plus a loaded row's sum against the staged values
            from ``j``: a float32 stage's 16 at constant offsets from one
            address (``j`` a multiple of 16: within one group)."""
            if X == "f32":
                at = int4_device.word_at(xa, j >> 3)
                xa0, xb0 = ld8_at(at), ld8_at(at + np.uint32(32))
            else:
                xa0, xb0 = ld8(xa, j), ld8(xa, j + 8)
            return acc + (dot8v(_e8(w0, w1), xa0) + dot8v(_e8(w2, w3), xb0)) * sa

        @device_inline
        def use_pair(g0, u0, w0, w1, w2, w3, sa, sb, v0, v1, v2, v3, ta, tb, xa, j):
            """:func:`use` of two rows (gate into ``g0``, up into ``u0``)
            against the same staged values, each eight read once for both."""
            j = index32.u32(j)
            x = ld8(xa, j)
            g = dot8v(_e8(w0, w1), x)
            u = dot8v(_e8(v0, v1), x)
            x = ld8(xa, j + 8)
            g += dot8v(_e8(w2, w3), x)
            u += dot8v(_e8(v2, v3), x)
            return g0 + g * sa, u0 + u * ta

    else:  # four words a load, summed two a scale, each sum scaled once

        @device_inline
        def use(acc, w0, w1, w2, w3, sa, sb, xa, j):
            """``acc`` plus the load's two 16-value sums, each one chain of
            FFMAs from zero, each times its scale by one FFMA into ``acc``."""
            at = group_at(xa, j)  # the load's 32 values: one group of the float32 stage
            z = float32(0.0)
            a = word_dot(word_dot(z, w0, ld8_at(at)), w1, ld8_at(at + np.uint32(32)))
            b = word_dot(word_dot(z, w2, ld8_at(at + np.uint32(64))), w3, ld8_at(at + np.uint32(96)))
            return b * sb + (a * sa + acc)

        @device_inline
        def use_pair(g0, u0, w0, w1, w2, w3, sa, sb, v0, v1, v2, v3, ta, tb, xa, j):
            at = group_at(xa, j)
            z = float32(0.0)
            x = ld8_at(at)
            ga = word_dot(z, w0, x)
            ua = word_dot(z, v0, x)
            x = ld8_at(at + np.uint32(32))
            ga = word_dot(ga, w1, x)
            ua = word_dot(ua, v1, x)
            x = ld8_at(at + np.uint32(64))
            gb = word_dot(z, w2, x)
            ub = word_dot(z, v2, x)
            x = ld8_at(at + np.uint32(96))
            gb = word_dot(gb, w3, x)
            ub = word_dot(ub, v3, x)
            return gb * sb + (ga * sa + g0), ub * tb + (ua * ta + u0)

    @device_inline
    def dot(acc, wv, wb, e, n, q, q1, xa, c0, ss, lr, sfast):
        """``acc`` plus row ``n``'s sums over loads ``q`` and, where ``q +
        LANES < q1``, ``q + LANES``: both loads issued before either is used
        (two in flight a lane), the sums added in step order."""
        qb = np.int32(q + LANES)
        more = qb < q1
        w0, w1, w2, w3, sa, sb = row(wv, wb, e, n, q, c0, ss, lr, sfast)
        z = np.uint32(0)
        y0 = y1 = y2 = y3 = z
        ya = yb = sa
        if more:
            y0, y1, y2, y3, ya, yb = row(wv, wb, e, n, qb, c0, ss, lr, sfast)
        acc = use(acc, w0, w1, w2, w3, sa, sb, xa, q * V - c0)
        if more:
            acc = use(acc, y0, y1, y2, y3, ya, yb, xa, qb * V - c0)
        return acc

    @device_inline
    def dot_pair(g, u, wv, wb, e, n, n2, q, q1, xa, c0, ss, lr, lr2, sfast):
        """:func:`dot` of rows ``n`` (into ``g``) and ``n2`` (into ``u``):
        one load of each row, at one step (four rows' loads would hold too
        many registers: gate and up already make two in flight a lane)."""
        w0, w1, w2, w3, sa, sb = row(wv, wb, e, n, q, c0, ss, lr, sfast)
        v0, v1, v2, v3, ta, tb = row(wv, wb, e, n2, q, c0, ss, lr2, sfast)
        return use_pair(g, u, w0, w1, w2, w3, sa, sb, v0, v1, v2, v3, ta, tb, xa, q * V - c0)

    XOR = 2 if SHFL_FAULT == 1 else 1  # the lane holding the other word (a fault: the wrong one)

    @device_inline
    def pairs_ok(k):
        return NV and k % 64 == 0

    @device_inline
    def dot_shfl(acc, wv, wbw, e, n, q, q1, xa, c0):
        """:func:`dot` of loads ``q`` and ``q + LANES`` (NVFP4 rows of whole
        scale words), called by every lane of the warp alike (``q = b +
        lane``, ``b`` a step's first load, even): every lane issues its
        loads, those past ``q1`` reading the chunk's last again (a clamped
        index), and adds only its own below ``q1``. Lane ``2m`` loads scale
        word ``m`` of the step, lane ``2m + 1`` word ``m + 4``; one shuffle
        (``lane ^ 1``) gives each lane its neighbour's, the low halves
        serving even lanes, the high odd ones. Both loads are issued
        unconditionally; ptxas 13.5 sinks the first into the branch that
        sums it, so here one is in flight a lane at a time (README)."""
        qb = np.int32(q + LANES)
        last = np.int32(q1 - 1)
        w0, w1, w2, w3 = words_of(wv, e, n, min(q, last))
        y0, y1, y2, y3 = words_of(wv, e, n, min(qb, last))
        odd = q & 1  # the lane's: a step starts on an even load
        wi = np.int32((q >> 1) + (odd << 2))
        word = wbw[e, n, index32.u32(min(wi, np.int32((q1 >> 1) - 1)))]
        other = cuda.shfl_xor_sync(FULL_MASK, word, XOR)
        h = np.uint32(odd << 4)  # the pairs' half of their words
        pa = np.uint32(other if odd else word) >> h
        pb = np.uint32(word if odd else other) >> h
        if q < q1:
            sa, sb = cvt.e4m3x2_to_f32x2(pa & np.uint32(0xFFFF))
            acc = use(acc, w0, w1, w2, w3, sa, sb, xa, q * V - c0)
        if qb < q1:
            ya, yb = cvt.e4m3x2_to_f32x2(pb & np.uint32(0xFFFF))
            acc = use(acc, y0, y1, y2, y3, ya, yb, xa, qb * V - c0)
        return acc

    if FP8:

        @device_inline
        def chunk(wa, wb, wc, e, n, c, x):
            return dot8v(fp8_values8(wa, e, n, c), x) * wb[e, n // FP8_BLOCK, (8 * c) // FP8_BLOCK]

    elif NV:

        @device_inline
        def chunk(wa, wb, wc, e, n, c, x):
            b = 4 * c  # the chunk's four bytes, one word
            w = (
                np.uint32(wa[e, n, b])
                | (np.uint32(wa[e, n, b + 1]) << np.uint32(8))
                | (np.uint32(wa[e, n, b + 2]) << np.uint32(16))
                | (np.uint32(wa[e, n, b + 3]) << np.uint32(24))
            )
            return fp4_dot(float32(0.0), w, x) * cvt.e4m3_to_f32(wb[e, n, c >> 1])  # 2 chunks per 16-value block

    else:

        @device_inline
        def chunk(wa, wb, wc, e, n, c, x):
            return int4_dot(float32(0.0), np.uint32(wa[e, n, c]), x) * float32(wb[e, n, c >> 4])  # 16 words per group

    @device_inline
    def finish(acc, ts):
        if NV:
            return fp4_finish(acc, ts)
        if FP8:
            return acc
        return acc * float32(int4_device.UNSCALE)  # int4's sums carry 2**-SHIFT

    return Dots(wide_ok, dot, dot_pair, pairs_ok, dot_shfl, chunk, finish)


@device_inline
def _e8(lo, hi):
    """Eight E4M3 codes of two words (lowest byte first), unscaled: a pair
    of codes a ``cvt.rn.f16x2.e4m3x2`` (``cvt.e4m3x2_to_f32x2``)."""
    a0, a1 = cvt.e4m3x2_to_f32x2(lo & np.uint32(0xFFFF))
    a2, a3 = cvt.e4m3x2_to_f32x2(lo >> np.uint32(16))
    a4, a5 = cvt.e4m3x2_to_f32x2(hi & np.uint32(0xFFFF))
    a6, a7 = cvt.e4m3x2_to_f32x2(hi >> np.uint32(16))
    return a0, a1, a2, a3, a4, a5, a6, a7
