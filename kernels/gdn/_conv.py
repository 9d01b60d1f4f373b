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
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from .naive import RMS_EPS


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
