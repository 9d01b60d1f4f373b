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

from ..common import bits, cvt, vload
from ..common.int4_device import nibble

FORMATS = ("int4", "nvfp4", "fp8")
FP8_BLOCK = 128  # the FP8 weights' scale blocks, 128 x 128: the common block-wise FP8 layout (this project's choice)


@lru_cache(maxsize=None)
def make_decode8(FMT: str):
    if FMT == "int4":

        @cuda.jit(device=True, inline=True)
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

        @cuda.jit(device=True, inline=True)
        def decode8(wa, wb, wc, e, n, c):
            sc = bits.e4m3_to_f32(wb[e, n, c >> 1])  # 2 chunks per 16-value block
            ts = wc[e]
            b0 = np.int32(wa[e, n, 4 * c])
            b1 = np.int32(wa[e, n, 4 * c + 1])
            b2 = np.int32(wa[e, n, 4 * c + 2])
            b3 = np.int32(wa[e, n, 4 * c + 3])
            # (e2m1 * e4m3) * tensor scale, as bits.nvfp4_at: the first product is exact
            return (
                (bits.e2m1_to_f32(b0 & 15) * sc) * ts,
                (bits.e2m1_to_f32(b0 >> 4) * sc) * ts,
                (bits.e2m1_to_f32(b1 & 15) * sc) * ts,
                (bits.e2m1_to_f32(b1 >> 4) * sc) * ts,
                (bits.e2m1_to_f32(b2 & 15) * sc) * ts,
                (bits.e2m1_to_f32(b2 >> 4) * sc) * ts,
                (bits.e2m1_to_f32(b3 & 15) * sc) * ts,
                (bits.e2m1_to_f32(b3 >> 4) * sc) * ts,
            )

        return decode8
    if FMT == "fp8":

        @cuda.jit(device=True, inline=True)
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


@cuda.jit(device=True, inline="always")
def dot8_h(w, xr, k):
    """:func:`dot8` of an fp16 row, its eight values one 16-byte load
    (``ld.global.nc.v4``: the activations are read-only here), summed in
    the same order."""
    a, b, c, d = vload.ldg_v4(xr, k)
    x0, x1 = cvt.f16x2_to_f32x2(a)
    x2, x3 = cvt.f16x2_to_f32x2(b)
    x4, x5 = cvt.f16x2_to_f32x2(c)
    x6, x7 = cvt.f16x2_to_f32x2(d)
    return w[0] * x0 + w[1] * x1 + w[2] * x2 + w[3] * x3 + w[4] * x4 + w[5] * x5 + w[6] * x6 + w[7] * x7


@cuda.jit(device=True, inline="always")
def dot8_f(w, xr, k):
    """:func:`dot8` of a float32 row, its eight values two 16-byte loads."""
    x0, x1, x2, x3 = vload.ld_f32x4(xr, k)
    x4, x5, x6, x7 = vload.ld_f32x4(xr, k + 4)
    return w[0] * x0 + w[1] * x1 + w[2] * x2 + w[3] * x3 + w[4] * x4 + w[5] * x5 + w[6] * x6 + w[7] * x7


@lru_cache(maxsize=None)
def make_dot_wide(FMT: str, X: str = "f16"):
    """Device functions ``(wide_ok(wa, k, x), dot(wa, wb, wc, e, n, q, xr))``:
    ``dot`` is ``sum_j W_e[n, k0 + j] * xr[k0 + j]`` over the ``V`` values of
    one 16-byte load of expert ``e``'s row ``n`` (``k0 = q V``; ``V`` is
    :data:`WIDE_VALUES`: 32 int4 or NVFP4 values, 16 FP8 codes), the load an
    ``ld.global.nc.v4.u32`` of the weights viewed as words, decoded in
    registers eight values at a time and summed in the order of
    ``make_decode8``'s chunks; the activations ``xr`` (``X``: fp16 ``f16`` or
    float32 ``f32`` rows) come in 16-byte loads too, eight values a load or
    two. ``wide_ok``: rows of ``k`` values are whole loads and the weights
    and activations ``x`` start on 16 bytes (the loop is then this)."""
    V = WIDE_VALUES[FMT]
    KPW = {"int4": 8, "nvfp4": 8, "fp8": 4}[FMT]  # values per 32-bit word
    xdot8 = {"f16": dot8_h, "f32": dot8_f}[X]

    @cuda.jit(device=True, inline="always")
    def wide_ok(wa, k, x):
        return k % V == 0 and vload.aligned16(wa) and vload.aligned16(x)

    if FMT == "int4":  # already words

        @cuda.jit(device=True, inline="always")
        def words_of(wa, e, n, q):
            return vload.ldg_v4(wa, (np.int64(e) * wa.shape[1] + n) * wa.shape[2] + q * (V // KPW))

    else:  # bytes, read as words

        @cuda.jit(device=True, inline="always")
        def words_of(wa, e, n, q):
            w32 = wa.view(np.uint32)
            return vload.ldg_v4(w32, (np.int64(e) * w32.shape[1] + n) * w32.shape[2] + q * (V // KPW))

    if FMT == "int4":

        @cuda.jit(device=True, inline="always")
        def dot(wa, wb, wc, e, n, q, xr):
            w0, w1, w2, w3 = words_of(wa, e, n, q)
            k0 = q * V
            s = float32(wb[e, n, k0 >> 7])  # 32 values within one group of 128
            return (
                xdot8(_q8(w0, s), xr, k0)
                + xdot8(_q8(w1, s), xr, k0 + 8)
                + xdot8(_q8(w2, s), xr, k0 + 16)
                + xdot8(_q8(w3, s), xr, k0 + 24)
            )

    elif FMT == "nvfp4":

        @cuda.jit(device=True, inline="always")
        def dot(wa, wb, wc, e, n, q, xr):
            w0, w1, w2, w3 = words_of(wa, e, n, q)
            k0 = q * V
            ts = wc[e]
            s0 = bits.e4m3_to_f32(wb[e, n, k0 >> 4])  # two 16-value blocks
            s1 = bits.e4m3_to_f32(wb[e, n, (k0 >> 4) + 1])
            return (
                xdot8(_fp8x(w0, s0, ts), xr, k0)
                + xdot8(_fp8x(w1, s0, ts), xr, k0 + 8)
                + xdot8(_fp8x(w2, s1, ts), xr, k0 + 16)
                + xdot8(_fp8x(w3, s1, ts), xr, k0 + 24)
            )

    else:

        @cuda.jit(device=True, inline="always")
        def dot(wa, wb, wc, e, n, q, xr):
            w0, w1, w2, w3 = words_of(wa, e, n, q)
            k0 = q * V
            s = wb[e, n // FP8_BLOCK, k0 // FP8_BLOCK]  # 16 values within one block of 128
            return xdot8(_e8(w0, w1, s), xr, k0) + xdot8(_e8(w2, w3, s), xr, k0 + 8)

    return wide_ok, dot


@cuda.jit(device=True, inline="always")
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


@cuda.jit(device=True, inline="always")
def _fp8x(w, sc, ts):
    """Eight E2M1 values of four NVFP4 bytes (low nibble first), ``(e2m1 sc) ts``."""
    return (
        (bits.e2m1_to_f32(w & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(4)) & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(8)) & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(12)) & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(16)) & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(20)) & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(24)) & np.uint32(15)) * sc) * ts,
        (bits.e2m1_to_f32((w >> np.uint32(28)) & np.uint32(15)) * sc) * ts,
    )


@cuda.jit(device=True, inline="always")
def _e8(lo, hi, s):
    """Eight E4M3 codes of two words (lowest byte first), times ``s``."""
    return (
        bits.e4m3_to_f32(lo & np.uint32(255)) * s,
        bits.e4m3_to_f32((lo >> np.uint32(8)) & np.uint32(255)) * s,
        bits.e4m3_to_f32((lo >> np.uint32(16)) & np.uint32(255)) * s,
        bits.e4m3_to_f32(lo >> np.uint32(24)) * s,
        bits.e4m3_to_f32(hi & np.uint32(255)) * s,
        bits.e4m3_to_f32((hi >> np.uint32(8)) & np.uint32(255)) * s,
        bits.e4m3_to_f32((hi >> np.uint32(16)) & np.uint32(255)) * s,
        bits.e4m3_to_f32(hi >> np.uint32(24)) * s,
    )


@cuda.jit(device=True, inline=True)
def dot8(w, xr, k):
    """``sum_j w[j] * xr[k + j]`` in float32, in a fixed order."""
    return (
        w[0] * float32(xr[k])
        + w[1] * float32(xr[k + 1])
        + w[2] * float32(xr[k + 2])
        + w[3] * float32(xr[k + 3])
        + w[4] * float32(xr[k + 4])
        + w[5] * float32(xr[k + 5])
        + w[6] * float32(xr[k + 6])
        + w[7] * float32(xr[k + 7])
    )
