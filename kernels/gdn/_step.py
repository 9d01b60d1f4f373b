"""The single-token GDN step as device functions, shared by the token-by-token
verify kernel, both decode launches and the conv-fused decode.

Thread ``(j, p)`` of a block holds ``R = dk / KSPLIT`` state values of
column ``j`` in registers, rows ``p*R .. p*R+R-1`` (see ``_layout``)::

    column j:  p=0 -> Sr[0..R-1] = S[0 .. R-1, j]
               p=1 -> Sr[0..R-1] = S[R .. 2R-1, j]
               ...

One token is two device calls with a barrier between them:

1. :func:`partials` -- every thread dots its rows with the *raw* ``k`` and
   ``q`` (one pass over the old state gives both ``S^T k`` and ``S^T q``)
   and writes the two partial sums to ``red[0|1, p, j]``; the ``j == 0``
   threads also write the partial ``k.k``, ``q.q``, ``k.q`` to ``nrm``.
2. :func:`finish` -- every thread sums the ``KSPLIT`` parts of its column
   (so each part gets ``delta_j`` without a second barrier), then::

       a     = exp(g)
       rk    = 1/sqrt(k.k + eps),   rq = scale/sqrt(q.q + eps)
       delta = beta (v_j - a rk (S^T k)_j)
       S     = a S + (rk k) delta                        (own rows only)
       o_j   = a rq (S_old^T q)_j + delta rk rq (k.q)    (= S_new^T q_hat)

   The output comes from the *old* state's ``S^T q`` plus a rank-one
   correction, which is why one pass over the state serves the whole step:
   the state is read once and written once per token, the least a
   memory-bound decode can move.

Why shared memory and not shuffles: a column's parts are ``BV`` threads
apart, in other warps, because ``j`` is the fast thread index that makes the
state loads coalesce. Callers double-buffer ``red``/``nrm`` across tokens
so one barrier per token is enough.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint64

from .naive import L2_EPS


@lru_cache(maxsize=None)
def make_step(DK: int, DV: int, BV: int, KSPLIT: int):
    """Device functions for one token on a ``DK x BV`` column slice of a
    ``DK x DV`` state held as ``KSPLIT`` row parts per column. Returns
    ``(load, store, partials, finish)``.

    ``load``/``store`` address the state as a flat 1-D array from a
    per-thread ``uint64`` offset (``offset``) with the compile-time row stride ``DV``: the
    ``R`` addresses are then one register plus immediate offsets. (Indexing
    the 4-D array with signed indices costs a wrap-around select and a
    64-bit address per row: 125 registers against 40 for the same loop.)"""
    if DK % KSPLIT:
        raise ValueError(f"dk={DK} does not split into {KSPLIT} row parts")
    R = DK // KSPLIT
    SCALE = np.float32(1.0 / math.sqrt(DK))
    EPS = np.float32(L2_EPS)

    @cuda.jit(device=True)
    def offset(slot, h, hv, p, col):
        """Flat index of ``state[slot, h, p*R, col]`` in a C-ordered
        ``[slots, hv, DK, DV]`` state viewed as 1-D (``hv`` at run time)."""
        return (uint64(slot) * uint64(hv) + uint64(h)) * uint64(DK * DV) + uint64(p) * uint64(R * DV) + uint64(col)

    @cuda.jit(device=True)
    def load(Sr, S1, o0):
        """Sr[r] <- S1[o0 + r*DV]: this thread's rows of one column."""
        for r in range(R):
            Sr[r] = S1[o0 + uint64(r * DV)]

    @cuda.jit(device=True)
    def store(Sr, S1, o0):
        for r in range(R):
            S1[o0 + uint64(r * DV)] = Sr[r]

    @cuda.jit(device=True)
    def partials(Sr, qr, kr, p, j, red, nrm):
        """red[0, p, j] = sum_r S k, red[1, p, j] = sum_r S q over own rows;
        nrm[0..2, p] = partial k.k, q.q, k.q (written by column 0)."""
        d0 = uint64(p * R)
        sk = float32(0.0)
        sq = float32(0.0)
        kk = float32(0.0)
        qq = float32(0.0)
        kq = float32(0.0)
        for r in range(R):
            kd = float32(kr[d0 + uint64(r)])
            qd = float32(qr[d0 + uint64(r)])
            s = Sr[r]
            sk += s * kd
            sq += s * qd
            kk += kd * kd
            qq += qd * qd
            kq += kd * qd
        red[0, p, j] = sk
        red[1, p, j] = sq
        if j == 0:
            nrm[0, p] = kk
            nrm[1, p] = qq
            nrm[2, p] = kq

    @cuda.jit(device=True)
    def finish(Sr, kr, p, j, red, nrm, vj, gt, bt):
        """Apply the token to own rows; return o_j (valid in every part)."""
        sk = float32(0.0)
        sq = float32(0.0)
        kk = float32(0.0)
        qq = float32(0.0)
        kq = float32(0.0)
        for pp in range(KSPLIT):  # fixed order: every part gets the same sums
            sk += red[0, pp, j]
            sq += red[1, pp, j]
            kk += nrm[0, pp]
            qq += nrm[1, pp]
            kq += nrm[2, pp]
        rk = float32(1.0) / math.sqrt(kk + EPS)
        rq = SCALE / math.sqrt(qq + EPS)
        a = math.exp(float32(gt))
        delta = float32(bt) * (float32(vj) - a * rk * sk)
        dk_ = delta * rk
        d0 = uint64(p * R)
        for r in range(R):
            Sr[r] = a * Sr[r] + float32(kr[d0 + uint64(r)]) * dk_
        return a * rq * sq + delta * (rk * rq * kq)

    return offset, load, store, partials, finish
