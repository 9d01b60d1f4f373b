"""One chunk of the GDN recurrence in the WY form, as a device function:
the body of the chunked prefill and of the WY verify kernels.

A block owns one value head ``h`` and the column slice ``v0 .. v0+BV-1`` of
its state (``_layout``). For a chunk of ``L <= C`` tokens starting at ``c0``
with start state ``S`` (``dk x BV``)::

    G_i   = g_0 + ... + g_i                         cumulative log-decay
    A     = strictly-lower(beta_i rk_i rk_j (k_i . k_j) exp(G_i - G_j))
    T     = (I + A)^-1                              forward substitution
    U     = T diag(beta) V,   W = T diag(beta exp(G)) K_hat
    delta = U - W S = T (beta (V - exp(G) K_hat S))  (W S applied as T (diag . (K_hat S)),
                                                     so the C x dk matrix W is never stored)
    o     = exp(G) Q_hat S + P delta,   P = lower-incl(Q_hat K_hat^T exp(G_i - G_j))
    S'    = exp(G_L) S + K_hat^T diag(exp(G_L - G_j)) delta

(``rk``/``rq``: reciprocal L2 norms; ``K_hat``, ``Q_hat`` the normalised,
``Q_hat`` also scaled, rows. Every ``exp`` has a non-positive argument:
nothing overflows however strong the decay.)

Shared memory per block (fp32), ``M`` reused three times::

    M [C, C]    A in the strict lower triangle, T^T in the strict upper one
                (thread m writes column m of T into row m: no barrier while
                inverting), then P in the lower triangle incl. the diagonal
    D [C, BV]   R = beta (V - exp(G) K_hat S), then delta
    Gs, Bs, Rk, Rq, Ek [C]   G, beta, 1/|k|, scale/|q|, rk exp(G_L - G)
    Ssh [dk, BV]  the state slice, when it is kept on chip (the caller's)

At the model shape (C = 64, dk = 128, BV = 32) that is 41 KiB with the state
slice, under the 48 KiB a kernel may declare statically. ``q``/``k``/``v``
are read straight from global memory (fp16, through L1: every row is reused
by the whole block) -- staging them would not fit next to ``M``.

Seven barriers per chunk. Work is spread over the ``NT`` threads by flat
index (``e = tid, tid + NT, ...``); every product is a full dot product by
one thread, so no reductions are needed anywhere in the chunk.
"""
from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32

from .naive import L2_EPS

F32 = 4


def shared_bytes(C: int, DK: int, BV: int, resident: bool) -> int:
    """Static shared memory of a chunked kernel's block."""
    words = C * C + C * BV + 5 * C + (DK * BV if resident else 1)
    return words * F32


def chunk_flops(L: int, DK: int, DV: int) -> int:
    """Algorithmic FLOPs of one chunk of ``L`` tokens for one value head
    (a multiply-add is 2): norms, A, T, K S, T R, P, Q S, P delta, the state
    update; exp and the per-element scalars are not counted."""
    tri = L * (L - 1) // 2
    return (
        4 * L * DK  # k.k, q.q
        + 2 * tri * DK  # A = K K^T (strict lower)
        + (L * (L - 1) * (L - 2)) // 3  # T by substitution, ~L^3/3
        + 2 * L * DK * DV  # K S
        + 2 * tri * DV  # T R
        + 2 * (tri + L) * DK  # P = Q K^T (lower incl. diagonal)
        + 2 * L * DK * DV  # Q S
        + 2 * (tri + L) * DV  # P delta
        + 2 * L * DK * DV + DK * DV  # S' = a S + K^T (e delta)
    )


@lru_cache(maxsize=None)
def make_chunk(C: int, DK: int, BV: int, NT: int, RESIDENT: bool):
    """The device function ``chunk(...)`` for chunks of at most ``C`` tokens
    on a ``DK x BV`` slice with ``NT`` threads. ``RESIDENT``: the state slice
    lives in the shared ``Ssh`` (the caller loads and stores it once);
    otherwise it is read from and written back to the global ``S2`` view
    within every chunk."""
    EPT = -(-C * BV // NT)  # delta entries per thread (registers)
    SCALE = np.float32(1.0 / math.sqrt(DK))
    EPS = np.float32(L2_EPS)

    @cuda.jit(device=True)
    def sget(S2, Ssh, d, jj, v0):
        if RESIDENT:
            return Ssh[d, jj]
        return S2[d, v0 + jj]

    @cuda.jit(device=True)
    def sput(S2, Ssh, d, jj, v0, x):
        if RESIDENT:
            Ssh[d, jj] = x
        else:
            S2[d, v0 + jj] = x

    @cuda.jit(device=True)
    def chunk(q, k, v, g, beta, S2, Ssh, o, M, D, Gs, Bs, Rk, Rq, Ek, h, hk, v0, c0, L, tid):
        # 0. per-token scalars: norms, beta, the cumulative decay. Each
        #    thread sums its own prefix (L <= C adds): no scan, no barrier.
        for i in range(tid, L, NT):
            t = c0 + i
            kk = float32(0.0)
            qq = float32(0.0)
            for d in range(DK):
                kd = float32(k[t, hk, d])
                qd = float32(q[t, hk, d])
                kk += kd * kd
                qq += qd * qd
            Rk[i] = float32(1.0) / math.sqrt(kk + EPS)
            Rq[i] = SCALE / math.sqrt(qq + EPS)
            G = float32(0.0)
            for l in range(i + 1):
                G += float32(g[c0 + l, h])
            Gs[i] = G
            Bs[i] = float32(beta[t, h])
        cuda.syncthreads()

        # 1. A (strict lower triangle of M) and R = beta (v - exp(G) K_hat S).
        GL = Gs[L - 1]
        for i in range(tid, L, NT):
            Ek[i] = Rk[i] * math.exp(GL - Gs[i])
        for e in range(tid, L * L, NT):
            i = e // L
            l = e - i * L
            if l < i:
                dot = float32(0.0)
                for d in range(DK):
                    dot += float32(k[c0 + i, hk, d]) * float32(k[c0 + l, hk, d])
                M[i, l] = Bs[i] * Rk[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
        for e in range(tid, L * BV, NT):
            i = e // BV
            jj = e - i * BV
            y = float32(0.0)
            for d in range(DK):
                y += float32(k[c0 + i, hk, d]) * sget(S2, Ssh, d, jj, v0)
            D[i, jj] = Bs[i] * (float32(v[c0 + i, h, v0 + jj]) - math.exp(Gs[i]) * Rk[i] * y)
        cuda.syncthreads()

        # 2. T = (I + A)^-1 by forward substitution down each column:
        #    T[i, m] = -A[i, m] - sum_{m<l<i} A[i, l] T[l, m], stored at M[m, i].
        #    Thread m reads only A (lower) and its own row m (upper): no races.
        for m in range(tid, L, NT):
            for i in range(m + 1, L):
                acc = -M[i, m]
                for l in range(m + 1, i):
                    acc -= M[i, l] * M[m, l]
                M[m, i] = acc
        cuda.syncthreads()

        # 3. delta = T R. Rows depend on earlier rows of R, so compute all
        #    into registers, then overwrite D after a barrier.
        tmp = cuda.local.array(EPT, float32)
        for s in range(EPT):
            e = tid + s * NT
            if e < L * BV:
                i = e // BV
                jj = e - i * BV
                acc = D[i, jj]
                for l in range(i):
                    acc += M[l, i] * D[l, jj]
                tmp[s] = acc
        cuda.syncthreads()
        for s in range(EPT):
            e = tid + s * NT
            if e < L * BV:
                i = e // BV
                D[i, e - i * BV] = tmp[s]
        #    T is dead: P = Q_hat K_hat^T exp(G_i - G_j) into M's lower part.
        for e in range(tid, L * L, NT):
            i = e // L
            l = e - i * L
            if l <= i:
                dot = float32(0.0)
                for d in range(DK):
                    dot += float32(q[c0 + i, hk, d]) * float32(k[c0 + l, hk, d])
                M[i, l] = Rq[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
        cuda.syncthreads()

        # 4. o = exp(G) Q_hat S + P delta.
        for e in range(tid, L * BV, NT):
            i = e // BV
            jj = e - i * BV
            acc = float32(0.0)
            for d in range(DK):
                acc += float32(q[c0 + i, hk, d]) * sget(S2, Ssh, d, jj, v0)
            acc *= Rq[i] * math.exp(Gs[i])
            for l in range(i + 1):
                acc += M[i, l] * D[l, jj]
            o[c0 + i, h, v0 + jj] = acc
        cuda.syncthreads()  # everyone has read S before it changes

        # 5. S' = exp(G_L) S + K_hat^T diag(exp(G_L - G)) delta.
        a = math.exp(GL)
        for e in range(tid, DK * BV, NT):
            d = e // BV
            jj = e - d * BV
            acc = a * sget(S2, Ssh, d, jj, v0)
            for l in range(L):
                acc += float32(k[c0 + l, hk, d]) * Ek[l] * D[l, jj]
            sput(S2, Ssh, d, jj, v0, acc)
        cuda.syncthreads()  # next chunk's scalars overwrite Gs/Ek/Rk

    return chunk
