"""Device functions for the decode-side mixer around the GDN step: the
causal depthwise conv1d with its rolling state, SiLU, and the gated RMSNorm.
Shared by the fused kernel and the separate kernels of ``gdn.fused_conv``.

Layouts::

    x          [N, C]            fp16   this token's mixer input, channels [q | k | v]
    conv_w     [C, W]            fp16   tap W-1 multiplies the newest input
    conv_state [slots, W-1, C]   fp16   last W-1 inputs, oldest first, in place
                                        (channel-fastest: a warp's reads coalesce)
    z          [N, Hv, dv]       fp16   the output gate
    norm_w     [dv]              fp32

Where the channel count is a multiple of 8 and ``x``, ``conv_w`` and
``conv_state`` start on 16 bytes, a thread convolves eight adjacent
channels (:func:`make_conv_piece`): their input, state rows and taps are
whole 16-byte pieces (``x[n, c..c+7]``, ``conv_state[slot, i, c..c+7]``,
``conv_w[c..c+7, :]`` = ``W`` pieces), read one load a piece, and the
shifted state goes back 16 bytes a store. Each channel's sum is the scalar
path's, term for term in the same order, so the two paths agree bit for bit.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ..common.cvt import f16x2_to_f32x2
from ..common.launch import device_inline
from ..common.vload import aligned16, ld_v4, ldg_v4, stg_v4
from .naive import RMS_EPS

PIECE = 8  # fp16 channels a 16-byte piece carries


@cuda.jit(device=True)
def silu(x):
    return x / (float32(1.0) + math.exp(-x))


@lru_cache(maxsize=None)
def make_conv_step(W: int):
    """``conv_step(x, w, cs, n, slot, c) -> silu(conv)`` for one channel of
    one sequence; shifts that channel's rolling state by one token."""

    @cuda.jit(device=True)
    def conv_step(x, w, cs, n, slot, c):
        xn = x[n, c]
        acc = float32(w[c, W - 1]) * float32(xn)
        for i in range(W - 1):
            acc += float32(w[c, i]) * float32(cs[slot, i, c])
        for i in range(W - 2):  # oldest drops out; all reads above are done
            cs[slot, i, c] = cs[slot, i + 1, c]
        if W > 1:
            cs[slot, W - 2, c] = xn
        return silu(acc)

    return conv_step


@lru_cache(maxsize=None)
def make_conv_piece(W: int, TAIL_FAULT: int = 0):
    """``(wide, conv_piece)``: ``wide(x, w, cs)`` says whether eight channels
    a thread go 16 bytes a load (channels a multiple of 8, the three arrays
    16-byte aligned; the same for a whole launch), ``conv_piece(x, w, cs, n,
    slot, c0, vec, ys)`` puts ``silu(conv)`` of channels ``c0 .. c0+7``
    (``c0 % 8 == 0``) into ``ys[0..7]`` and shifts their rolling state, by
    16-byte accesses when ``vec``, else channel by channel
    (:func:`make_conv_step`). ``TAIL_FAULT`` (tests only) breaks the
    16-byte path's last tap piece (the last channels' taps): 1 drops it (its
    taps read as 0), 2 reads the piece before it in its place (those taps
    counted twice)."""
    if TAIL_FAULT not in (0, 1, 2):
        raise ValueError(f"TAIL_FAULT={TAIL_FAULT}: one of 0, 1, 2")
    conv_step = make_conv_step(W)
    WS = max(W - 1, 1)  # state rows (at least one slot, for the arrays' sizes)
    NWF, NSW, NSF = PIECE * W, 4 * WS, PIECE * WS  # local array sizes: compile-time constants

    @device_inline
    def wide(x, w, cs):
        return x.shape[1] % PIECE == 0 and aligned16(x) and aligned16(w) and aligned16(cs)

    @device_inline
    def unpack(dst, at, a, b, c, d):
        """The eight halves of four words to ``dst[at .. at+7]`` as fp32."""
        dst[at], dst[at + 1] = f16x2_to_f32x2(a)
        dst[at + 2], dst[at + 3] = f16x2_to_f32x2(b)
        dst[at + 4], dst[at + 5] = f16x2_to_f32x2(c)
        dst[at + 6], dst[at + 7] = f16x2_to_f32x2(d)

    @cuda.jit(device=True)
    def conv_piece(x, w, cs, n, slot, c0, vec, ys):
        if not vec:
            for m in range(PIECE):
                ys[m] = conv_step(x, w, cs, n, slot, c0 + m)
            return
        C = x.shape[1]
        wf = cuda.local.array(NWF, float32)  # channel m's tap i at wf[m*W + i]
        for u in range(W):
            if TAIL_FAULT == 1 and u == W - 1:
                unpack(wf, PIECE * u, uint32(0), uint32(0), uint32(0), uint32(0))
            else:
                src = u - 1 if TAIL_FAULT == 2 and u == W - 1 and u > 0 else u
                a, b, c, d = ldg_v4(w, c0 * W + PIECE * src)
                unpack(wf, PIECE * u, a, b, c, d)
        xw = cuda.local.array(4, uint32)
        xw[0], xw[1], xw[2], xw[3] = ldg_v4(x, n * C + c0)
        xf = cuda.local.array(8, float32)  # PIECE
        unpack(xf, 0, xw[0], xw[1], xw[2], xw[3])
        sw = cuda.local.array(NSW, uint32)  # the state rows as stored
        sf = cuda.local.array(NSF, float32)
        for i in range(W - 1):
            a, b, c, d = ld_v4(cs, (slot * (W - 1) + i) * C + c0)
            sw[4 * i], sw[4 * i + 1], sw[4 * i + 2], sw[4 * i + 3] = a, b, c, d
            unpack(sf, PIECE * i, a, b, c, d)
        for m in range(PIECE):
            acc = wf[m * W + W - 1] * xf[m]
            for i in range(W - 1):
                acc += wf[m * W + i] * sf[PIECE * i + m]
            ys[m] = silu(acc)
        for i in range(W - 2):  # oldest drops out; all reads above are done
            at = (slot * (W - 1) + i) * C + c0
            stg_v4(cs, at, sw[4 * i + 4], sw[4 * i + 5], sw[4 * i + 6], sw[4 * i + 7])
        if W > 1:
            stg_v4(cs, (slot * (W - 1) + W - 2) * C + c0, xw[0], xw[1], xw[2], xw[3])

    return wide, conv_piece


@lru_cache(maxsize=None)
def make_gated_rmsnorm(DV: int):
    """``gated(os_row, oj, zj, wj) -> o_j / rms(os_row) * w_j * silu(z_j)``,
    ``os_row`` the head's ``DV`` outputs in shared memory. Every caller sums
    the whole row itself (broadcast reads, fixed order): no second barrier."""
    EPS = np.float32(RMS_EPS)
    INV = np.float32(1.0 / DV)

    @cuda.jit(device=True)
    def gated(os_row, oj, zj, wj):
        ss = float32(0.0)
        for jj in range(DV):
            x = os_row[jj]
            ss += x * x
        return oj / math.sqrt(ss * INV + EPS) * float32(wj) * silu(float32(zj))

    return gated
