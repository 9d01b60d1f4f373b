"""``mamba2.prefill_scan`` variant ``sequential`` (``ssd`` not taken and
``ssm_persistent`` off): the token-by-token scan.

One thread per (head, head-dim row), ``H * P`` threads in all, walks the
prompt token by token; its row of the state (``N`` fp32) stays where it
lives, in the state buffer in global memory, read and written at every
token::

    thread (h, p):  for t:  dt = softplus(dt_raw[t, h] + dt_bias[h]),  a = exp(dt A_h)
                             for n:  S[h, p, n] = a S[h, p, n] + dt x[t, h, p] B[t, g, n]
                                     y += S[h, p, n] C[t, g, n]
                             y[t, h, p] = y + D_h x[t, h, p]

The simplest correct kernel and the slowest: ``H * P`` threads (8192 at
Nemotron-H's shape, a few waves of an H200) each make ``T * N`` dependent
steps, and a warp's 32 threads touch 32 state rows ``4 N`` bytes apart,
so every state access is its own memory transaction (L1/L2 absorb most of
them: each thread's row is 512 bytes).
"""

from __future__ import annotations

import math
from functools import lru_cache

from numba import cuda, float32

from ...common import launch as L
from ._device import group_of, step_dt

NAME = "sequential"
SUMMARY = "token-by-token scan: a thread per (head, row), its state row updated in global memory every token"
ARGS = ("y", "state", "x", "dt_raw", "dt_bias", "A", "B", "C", "D")
MAX_THREADS = 128


@lru_cache(maxsize=None)
def make_scan(HPG: int, DECAY_SCALE: float = 1.0):
    """The kernel for ``HPG`` heads per group. ``DECAY_SCALE`` (tests
    only) scales the log-decay: anything but 1 is a wrong decay."""
    SC = float32(DECAY_SCALE)

    @cuda.jit
    def scan_sequential(y, state, x, dt_raw, dt_bias, A, B, C, D):
        t_len, h_len, p_len = x.shape
        n_len = state.shape[2]
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i >= h_len * p_len:
            return
        h = i // p_len
        p = i - h * p_len
        g = h // HPG
        a_h = A[h]
        d_h = D[h]
        for t in range(t_len):
            dt = step_dt(dt_raw, dt_bias, t, h)
            decay = math.exp(SC * dt * a_h)
            xv = float32(x[t, h, p])
            dx = dt * xv
            acc = float32(0.0)
            for n in range(n_len):
                s = decay * state[h, p, n] + dx * float32(B[t, g, n])
                state[h, p, n] = s
                acc += s * float32(C[t, g, n])
            y[t, h, p] = acc + d_h * xv

    return scan_sequential


def build(shape, **cfg):
    h, p, g = shape["h"], shape["p"], shape["g"]
    kern = make_scan(group_of(h, g), **cfg)
    threads = min(MAX_THREADS, -(-h * p // L.WARP_SIZE) * L.WARP_SIZE)
    blocks, threads = L.grid_1d(h * p, threads)

    def launch(bufs):
        kern[blocks, threads](*[bufs[a] for a in ARGS])

    return launch
