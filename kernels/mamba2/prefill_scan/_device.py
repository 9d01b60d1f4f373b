"""Device helpers shared by the Mamba2 scan kernels."""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

SOFTPLUS_LINEAR = np.float32(20.0)  # above this, softplus(v) = v in fp32


@cuda.jit(device=True)
def softplus_f32(v):
    """``log(1 + exp(v))`` in fp32; ``v`` itself past 20, where ``exp``
    would overflow long before the sum differs from ``v``."""
    if v > SOFTPLUS_LINEAR:
        return v
    return math.log1p(math.exp(v))


@cuda.jit(device=True)
def step_dt(dt_raw, dt_bias, t, h):
    """``dt`` of token ``t`` at head ``h`` (the bias added, then softplus)."""
    return softplus_f32(dt_raw[t, h] + dt_bias[h])


@cuda.jit(device=True, inline="always")
def decay_eight(s, b, decay, dx):
    """Eight states' update by a token, ``s = decay s + dx b`` (the caller
    sums their products with ``C`` in its own order)."""
    s0, s1, s2, s3, s4, s5, s6, s7 = s
    b0, b1, b2, b3, b4, b5, b6, b7 = b
    return (
        decay * s0 + dx * b0,
        decay * s1 + dx * b1,
        decay * s2 + dx * b2,
        decay * s3 + dx * b3,
        decay * s4 + dx * b4,
        decay * s5 + dx * b5,
        decay * s6 + dx * b6,
        decay * s7 + dx * b7,
    )


def group_of(h: int, g: int) -> int:
    """Heads per group; the heads of a group are consecutive."""
    if g <= 0 or h % g:
        raise ValueError(f"{h} heads do not split into {g} groups")
    return h // g
