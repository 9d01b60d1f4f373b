"""Expert weights in three formats, decoded eight values at a time.

Every expert kernel reads weights through ``make_decode8(FMT)``: a device
function ``(wa, wb, wc, e, n, c) -> (w0, ..., w7)``, the float32 values
``W_e[n, 8c .. 8c+7]`` of expert ``e``. The three arrays carry the format
(host side in ``formats``):

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
reads one scale. The eight values come back as a tuple unpacked with
constant indices, so they stay in registers (a loop over them would make a
local array).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32

from ..common import bits, cvt, smem, vload
from ..common.int4_device import nibble
from ..common.launch import device_inline

FORMATS = ("int4", "nvfp4", "fp8")
LANES = 8  # lanes an output (the per-row kernels' group)
FULL_MASK = 0xFFFFFFFF
FP8_BLOCK = 128  # the FP8 weights' scale blocks, 128 x 128: the common block-wise FP8 layout (this project's choice)


@lru_cache(maxsize=None)
def make_decode8(FMT: str):
    if FMT == "int4":

        @device_inline
        def decode8(wa, wb, wc, e, n, c):
            word = np.int64(wa[e, n, c])
            s = float32(wb[e, n, c >> 4])  # 16 words per group of 128
            return (
                float32(np.int32(word & 15) - 8) * s,
                float32(np.int32((word >> 4) & 15) - 8) * s,
                float32(np.int32((word >> 8) & 15) - 8) * s,
                float32(np.int32((word >> 12) & 15) - 8) * s,
                float32(np.int32((word >> 16) & 15) - 8) * s,
                float32(np.int32((word >> 20) & 15) - 8) * s,
                float32(np.int32((word >> 24) & 15) - 8) * s,
                float32(np.int32((word >> 28) & 15) - 8) * s,
            )

        return decode8
    if FMT == "nvfp4":

        @device_inline
        def decode8(wa, wb, wc, e, n, c):
            sc = bits.e4m3_to_f32(wb[e, n, c >> 1])  # 2 chunks per 16-value block
            ts = wc[e]
            b0 = np.int32(wa[e, n, 4 * c])
            b1 = np.int32(wa[e, n, 4 * c + 1])
            b2 = np.int32(wa[e, n, 4 * c + 2])
            b3 = np.int32(wa[e, n, 4 * c + 3])
            # (e2m1 * e4m3) * tensor scale, as bits.nvfp4_at: the first product is exact
            return (
                (cvt.e2m1_to_f32(b0 & 15) * sc) * ts,
                (cvt.e2m1_to_f32(b0 >> 4) * sc) * ts,
                (cvt.e2m1_to_f32(b1 & 15) * sc) * ts,
                (cvt.e2m1_to_f32(b1 >> 4) * sc) * ts,
                (cvt.e2m1_to_f32(b2 & 15) * sc) * ts,
                (cvt.e2m1_to_f32(b2 >> 4) * sc) * ts,
                (cvt.e2m1_to_f32(b3 & 15) * sc) * ts,
                (cvt.e2m1_to_f32(b3 >> 4) * sc) * ts,
            )

        return decode8
    if FMT == "fp8":

        @device_inline
        def decode8(wa, wb, wc, e, n, c):
            s = wb[e, n // FP8_BLOCK, (8 * c) // FP8_BLOCK]
            k = 8 * c
            return (
                bits.e4m3_to_f32(wa[e, n, k]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 1]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 2]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 3]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 4]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 5]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 6]) * s,
                bits.e4m3_to_f32(wa[e, n, k + 7]) * s,
            )

        return decode8
    raise ValueError(f"unknown expert weight format {FMT!r}: one of {FORMATS}")


# 16-byte weight loads (``vload.ldg_v4``): the values one load carries, per format
WIDE_VALUES = {"int4": 32, "nvfp4": 32, "fp8": 16}


# The activations a block reads are staged in shared memory once, ``STAGE``
# inputs a chunk, in 16-byte units at swizzled places: unit ``u`` lives at
# unit ``swz(u) = u ^ ((u >> 3) & 7)``. An fp16 row of x stays fp16 (eight
# values a unit, converted as read: half the registers and shared memory of
# float32); a float32 row of SiLU products keeps four a unit. A lane of an
# output's 8-lane group reads the units of its own weights' values (4 or 8
# for a 16-byte int4/NVFP4 load, 2 or 4 for an FP8 one, 1 or 2 for an
# 8-value chunk), so the 8 lanes of a quarter-warp read units 1, 2, 4 or 8
# apart, which the XOR spreads over the 8 different 16-byte bank groups;
# the stagers' writes of consecutive units stay conflict-free too.
STAGE = 2048


@device_inline
def swz(u):
    """The staged place of 16-byte unit ``u``."""
    return u ^ ((u >> 3) & 7)


@device_inline
def ld8_f(xa, j):
    """Eight staged float32 values from local index ``j`` (a multiple of 8)
    of the stage at shared address ``xa``: two ``ld.shared.v4.f32``."""
    u = j >> 2
    x0, x1, x2, x3 = smem.ld_shared_f32x4(xa + np.uint32(16 * swz(u)))
    x4, x5, x6, x7 = smem.ld_shared_f32x4(xa + np.uint32(16 * swz(u + 1)))
    return x0, x1, x2, x3, x4, x5, x6, x7


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


@device_inline
def sdot8_f(w, xa, j):
    """``sum_i w[i] * xs[j + i]`` over eight staged float32 values
    (:func:`ld8_f`), summed in a fixed order."""
    return dot8v(w, ld8_f(xa, j))


@device_inline
def sdot8_h(w, xa, j):
    """:func:`sdot8_f` of eight staged fp16 values (:func:`ld8_h`)."""
    return dot8v(w, ld8_h(xa, j))


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


@device_inline
def _q8s(w, s, ts):
    return _q8(w, s)


def _four_chunks(decode, split: bool):
    """``chunk0 .. chunk3(w0, w1, w2, w3, sa, sb, ts)``: the eight values of
    word ``i`` of a 16-byte load, ``decode(word, scale, ts)`` with ``sa``
    (``split``: ``sa`` for words 0 and 1, ``sb`` for 2 and 3, NVFP4's two
    16-value blocks)."""

    @device_inline
    def chunk0(w0, w1, w2, w3, sa, sb, ts):
        return decode(w0, sa, ts)

    @device_inline
    def chunk1(w0, w1, w2, w3, sa, sb, ts):
        return decode(w1, sa, ts)

    @device_inline
    def chunk2(w0, w1, w2, w3, sa, sb, ts):
        return decode(w2, sb if split else sa, ts)

    @device_inline
    def chunk3(w0, w1, w2, w3, sa, sb, ts):
        return decode(w3, sb if split else sa, ts)

    return chunk0, chunk1, chunk2, chunk3


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


@lru_cache(maxsize=None)
def make_dot_wide(FMT: str, X: str, SHFL_FAULT: int = 0):
    """Device functions ``(wide_ok(wa, wb, k), dot, dot_pair, pairs_ok(k),
    dot_shfl)`` over the
    ``V`` values of one 16-byte load of an expert's row (``k0 = q V``; ``V``
    is :data:`WIDE_VALUES`: 32 int4 or NVFP4 values, 16 FP8 codes), the
    load an ``ld.global.nc.v4.u32`` of the weights viewed as words, decoded
    in registers eight values at a time and summed in the order of
    ``make_decode8``'s chunks, the activations from the stage at shared
    address ``xa`` holding inputs ``c0 ..`` (:data:`LD8`: ``X`` is ``f16``
    or ``f32``, the stage's type):

    * ``dot(acc, wa, wb, ts, e, n, q, q1, xa, c0, ss, lr, sfast)``: ``acc``
      plus ``sum_j W_e[n, k0 + j] x[k0 + j]`` over loads ``q`` and ``q +
      LANES`` (below ``q1``), both issued before either is used;
    * ``dot_pair(g, u, wa, wb, ts, e, n, n2, q, q1, xa, c0, ss, lr, lr2,
      sfast)``: the same for rows ``n`` and ``n2`` (gate and up) over load
      ``q``, each eight staged values read once for both, each row's sum in
      ``dot``'s order.

    * ``dot_shfl(acc, wa, wb, ts, e, n, q, q1, xa, c0)`` (NVFP4 where
      ``pairs_ok``): :func:`dot` run by every lane of the warp alike, a
      step's scales one 4-byte load a lane shared by a shuffle.

    ``ts``: NVFP4's tensor scale (``wc[e]``, 1 for the other formats), which
    the kernel reads once (:func:`_experts.warp_read`), not every lane a step.
    ``wide_ok``: rows of ``k`` values are whole loads and the weights start
    on 16 bytes (the loop is then this). ``sfast``: a load's scales come
    from row ``lr`` of the chunk's staged scales ``ss``
    (:func:`make_stage_chunk_scales`), else from ``wb``. ``pairs_ok``:
    NVFP4 rows of ``k`` values whose scales are whole 4-byte words (with
    ``wide_ok``'s 16-byte start, every row's are word-aligned and a chunk's
    steps start on a word)."""
    if SHFL_FAULT not in SHFL_FAULTS:
        raise ValueError(f"SHFL_FAULT={SHFL_FAULT}: one of {SHFL_FAULTS}")
    V = WIDE_VALUES[FMT]
    KPW = {"int4": 8, "nvfp4": 8, "fp8": 4}[FMT]  # values per 32-bit word
    ld8 = LD8[X]

    @device_inline
    def wide_ok(wa, wb, k):
        # NVFP4 reads a load's two block scales as one 16-bit word: K / 16
        # scales a row, even, from an aligned start
        return k % V == 0 and vload.aligned16(wa) and (FMT != "nvfp4" or vload.aligned16(wb))

    if FMT == "int4":  # already words

        @device_inline
        def words_of(wa, e, n, q):
            return vload.ldg_v4(wa, (np.int64(e) * wa.shape[1] + n) * wa.shape[2] + q * (V // KPW))

    else:  # bytes, read as words

        @device_inline
        def words_of(wa, e, n, q):
            w32 = wa.view(np.uint32)
            return vload.ldg_v4(w32, (np.int64(e) * w32.shape[1] + n) * w32.shape[2] + q * (V // KPW))

    # ``row(...) -> (w0, w1, w2, w3, sa, sb)``: a load's words and scales;
    # ``chunk{i}(w0, w1, w2, w3, sa, sb, ts)``: its i-th eight values.
    if FMT == "int4":

        @device_inline
        def row(wa, wb, ts, e, n, q, c0, ss, lr, sfast):
            w0, w1, w2, w3 = words_of(wa, e, n, q)
            k0 = q * V
            # 32 values within one group of 128: its scale staged, or loaded
            s = float32(ss[scale_slot(lr, (k0 - c0) >> 7)]) if sfast else float32(wb[e, n, k0 >> 7])
            return w0, w1, w2, w3, s, s

        chunk0, chunk1, chunk2, chunk3 = _four_chunks(_q8s, False)

    elif FMT == "nvfp4":

        @device_inline
        def row(wa, wb, ts, e, n, q, c0, ss, lr, sfast):
            w0, w1, w2, w3 = words_of(wa, e, n, q)
            # the two 16-value blocks' scales, adjacent bytes: staged, or one 16-bit load
            if sfast:
                pair = np.uint32(ss.view(np.uint16)[lr * (NV_ROW_BYTES // 2) + ((q * V - c0) >> 5)])
            else:
                pair = np.uint32(wb.view(np.uint16)[e, n, (q * V) >> 5])
            return w0, w1, w2, w3, bits.e4m3_to_f32(pair & np.uint32(255)), bits.e4m3_to_f32(pair >> np.uint32(8))

        chunk0, chunk1, chunk2, chunk3 = _four_chunks(_fp8x, True)

    else:

        @device_inline
        def row(wa, wb, ts, e, n, q, c0, ss, lr, sfast):
            w0, w1, w2, w3 = words_of(wa, e, n, q)
            # 16 values within one block of 128: its scale staged, or loaded
            if sfast:
                s = ss.view(np.float32)[((lr >> 4) << 4) + ((q * V - c0) >> 7)]
            else:
                s = wb[e, n // FP8_BLOCK, (q * V) // FP8_BLOCK]
            return w0, w1, w2, w3, s, s

        @device_inline
        def chunk0(w0, w1, w2, w3, sa, sb, ts):
            return _e8(w0, w1, sa)

        @device_inline
        def chunk1(w0, w1, w2, w3, sa, sb, ts):
            return _e8(w2, w3, sa)

        chunk2 = chunk3 = chunk1  # FP8: two chunks a load (not reached)

    FOUR = V // 8 == 4

    @device_inline
    def use(w0, w1, w2, w3, sa, sb, ts, xa, j):
        """A loaded row's sum against the staged values from ``j``."""
        acc = dot8v(chunk0(w0, w1, w2, w3, sa, sb, ts), ld8(xa, j))
        acc += dot8v(chunk1(w0, w1, w2, w3, sa, sb, ts), ld8(xa, j + 8))
        if FOUR:
            acc += dot8v(chunk2(w0, w1, w2, w3, sa, sb, ts), ld8(xa, j + 16))
            acc += dot8v(chunk3(w0, w1, w2, w3, sa, sb, ts), ld8(xa, j + 24))
        return acc

    @device_inline
    def use_pair(w0, w1, w2, w3, sa, sb, v0, v1, v2, v3, ta, tb, ts, xa, j):
        """:func:`use` of two rows (gate and up) against the same staged
        values, each eight read once for both."""
        x = ld8(xa, j)
        g = dot8v(chunk0(w0, w1, w2, w3, sa, sb, ts), x)
        u = dot8v(chunk0(v0, v1, v2, v3, ta, tb, ts), x)
        x = ld8(xa, j + 8)
        g += dot8v(chunk1(w0, w1, w2, w3, sa, sb, ts), x)
        u += dot8v(chunk1(v0, v1, v2, v3, ta, tb, ts), x)
        if FOUR:
            x = ld8(xa, j + 16)
            g += dot8v(chunk2(w0, w1, w2, w3, sa, sb, ts), x)
            u += dot8v(chunk2(v0, v1, v2, v3, ta, tb, ts), x)
            x = ld8(xa, j + 24)
            g += dot8v(chunk3(w0, w1, w2, w3, sa, sb, ts), x)
            u += dot8v(chunk3(v0, v1, v2, v3, ta, tb, ts), x)
        return g, u

    @device_inline
    def dot(acc, wa, wb, ts, e, n, q, q1, xa, c0, ss, lr, sfast):
        """``acc`` plus row ``n``'s sums over loads ``q`` and, where ``q +
        LANES < q1``, ``q + LANES``: both loads issued before either is used
        (two in flight a lane), the sums added in step order."""
        qb = q + LANES
        more = qb < q1
        w0, w1, w2, w3, sa, sb = row(wa, wb, ts, e, n, q, c0, ss, lr, sfast)
        z = np.uint32(0)
        y0 = y1 = y2 = y3 = z
        ya = yb = sa
        if more:
            y0, y1, y2, y3, ya, yb = row(wa, wb, ts, e, n, qb, c0, ss, lr, sfast)
        acc += use(w0, w1, w2, w3, sa, sb, ts, xa, q * V - c0)
        if more:
            acc += use(y0, y1, y2, y3, ya, yb, ts, xa, qb * V - c0)
        return acc

    @device_inline
    def dot_pair(g, u, wa, wb, ts, e, n, n2, q, q1, xa, c0, ss, lr, lr2, sfast):
        """:func:`dot` of rows ``n`` (into ``g``) and ``n2`` (into ``u``):
        one load of each row, at one step (four rows' loads would hold too
        many registers: gate and up already make two in flight a lane)."""
        w0, w1, w2, w3, sa, sb = row(wa, wb, ts, e, n, q, c0, ss, lr, sfast)
        v0, v1, v2, v3, ta, tb = row(wa, wb, ts, e, n2, q, c0, ss, lr2, sfast)
        dg, du = use_pair(w0, w1, w2, w3, sa, sb, v0, v1, v2, v3, ta, tb, ts, xa, q * V - c0)
        return g + dg, u + du

    PAIRS = FMT == "nvfp4"
    XOR = 2 if SHFL_FAULT == 1 else 1  # the lane holding the other word (a fault: the wrong one)

    @device_inline
    def pairs_ok(k):
        return PAIRS and k % 64 == 0

    @device_inline
    def dot_shfl(acc, wa, wb, ts, e, n, q, q1, xa, c0):
        """:func:`dot` of loads ``q`` and ``q + LANES`` (NVFP4 rows of whole
        scale words), called by every lane of the warp alike (``q = b +
        lane``, ``b`` a step's first load, even): every lane issues its
        loads, those past ``q1`` reading the chunk's last again (a clamped
        index), and adds only its own below ``q1``. Lane ``2m`` loads scale
        word ``m`` of the step, lane ``2m + 1`` word ``m + 4``; one shuffle
        (``lane ^ 1``) gives each lane its neighbour's, the low halves
        serving even lanes, the high odd ones."""
        qb = q + LANES
        w0, w1, w2, w3 = words_of(wa, e, n, min(q, q1 - 1))
        y0, y1, y2, y3 = words_of(wa, e, n, min(qb, q1 - 1))
        odd = q & 1  # the lane's: a step starts on an even load
        wi = (q >> 1) + (odd << 2)
        word = wb.view(np.int32)[e, n, min(wi, (q1 >> 1) - 1)]
        other = cuda.shfl_xor_sync(FULL_MASK, word, XOR)
        h = np.uint32(odd << 4)  # the pairs' half of their words
        pa = np.uint32(other if odd else word) >> h
        pb = np.uint32(word if odd else other) >> h
        if q < q1:
            sa = bits.e4m3_to_f32(pa & np.uint32(255))
            sb = bits.e4m3_to_f32((pa >> np.uint32(8)) & np.uint32(255))
            acc += use(w0, w1, w2, w3, sa, sb, ts, xa, q * V - c0)
        if qb < q1:
            ya = bits.e4m3_to_f32(pb & np.uint32(255))
            yb = bits.e4m3_to_f32((pb >> np.uint32(8)) & np.uint32(255))
            acc += use(y0, y1, y2, y3, ya, yb, ts, xa, qb * V - c0)
        return acc

    return wide_ok, dot, dot_pair, pairs_ok, dot_shfl


@device_inline
def _q8(w, s):
    """Eight int4 values of a W4A16 word (low nibble first), ``(q - 8) s``
    (``int4_device.nibble``: the GEMVs' decode, no integer-to-float)."""
    return (
        nibble(w, 0) * s,
        nibble(w, 1) * s,
        nibble(w, 2) * s,
        nibble(w, 3) * s,
        nibble(w, 4) * s,
        nibble(w, 5) * s,
        nibble(w, 6) * s,
        nibble(w, 7) * s,
    )


@device_inline
def _fp8x(w, sc, ts):
    """Eight E2M1 values of four NVFP4 bytes (low nibble first), ``(e2m1 sc) ts``
    (``cvt.e2m1_to_f32``: bit placement, no conversion instruction)."""
    return (
        (cvt.e2m1_to_f32(w & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32((w >> np.uint32(4)) & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32((w >> np.uint32(8)) & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32((w >> np.uint32(12)) & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32((w >> np.uint32(16)) & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32((w >> np.uint32(20)) & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32((w >> np.uint32(24)) & np.uint32(15)) * sc) * ts,
        (cvt.e2m1_to_f32(w >> np.uint32(28)) * sc) * ts,
    )


@device_inline
def _e8(lo, hi, s):
    """Eight E4M3 codes of two words (lowest byte first), times ``s``: a
    pair of codes a ``cvt.rn.f16x2.e4m3x2`` (``cvt.e4m3x2_to_f32x2``)."""
    a0, a1 = cvt.e4m3x2_to_f32x2(lo & np.uint32(0xFFFF))
    a2, a3 = cvt.e4m3x2_to_f32x2(lo >> np.uint32(16))
    a4, a5 = cvt.e4m3x2_to_f32x2(hi & np.uint32(0xFFFF))
    a6, a7 = cvt.e4m3x2_to_f32x2(hi >> np.uint32(16))
    return a0 * s, a1 * s, a2 * s, a3 * s, a4 * s, a5 * s, a6 * s, a7 * s
