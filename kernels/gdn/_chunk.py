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

Shared memory per block, ``M`` reused three times::

    static (fp32)
    M [C, MP]   A in the strict lower triangle, T^T in the strict upper one
                (thread m writes column m of T into row m: no barrier while
                inverting), then P in the lower triangle incl. the diagonal;
                rows ``MP = m_pitch(C)`` floats apart, 8 (mod 16): the MMA
                results go in as pairs, 8 bytes a lane (a half-warp's four
                rows then hit 32 banks), and the inversion's lanes, each on
                its own row and column, stay on different banks
    D [C, BV]   R = beta (V - exp(G) K_hat S), then delta
    Gs, Bs, Rk, Rq, Ek [C]   G, beta, 1/|k|, scale/|q|, rk exp(G_L - G)
                (Ek holds the raw g until the prefix is made)
    Ssh [dk, BV]  the state slice, when it is kept on chip (the caller's)
    dynamic (fp16, :func:`stage_bytes`)
    Qs, Ks [C, RS]  the chunk's q and k rows as stored, RS = dk + 8 halves
                    (``row_stride``: a row is 4 (mod 32) words, so the
                    eight rows of an MMA fragment load hit 32 banks)
    Vs [C, BV]      v's column slice

At the model shape (C = 64, dk = 128, BV = 32) that is 43 KiB static with
the state slice (under the 48 KiB a kernel may declare statically) and 38
KiB dynamic, 81 KiB a block: two blocks an SM, which the prefill's
registers (two blocks of 128 threads at up to 255) allowed anyway; the
launch raises the kernel's dynamic maximum past 48 KiB
(``_layout.dynamic_launch``). The verifies' 16- and 17-row chunks take
9.5-10 KiB of it.

Each chunk begins by staging its rows (:func:`make_stage`): ``q``, ``k``
and ``v``'s slice 16 bytes a lane, every byte once per block, so the dot
products, the MMAs and the state update read shared memory. Before, they
read ``q``/``k`` from global memory element by element inside every dot
product (through L1, 20 % of the sectors used, 12-13x the bytes the WY
verifies declare).

Eight barriers per chunk (the staging's one added). Which unit computes which product, and why:

=================  ============  ===========================================
product            unit          why
=================  ============  ===========================================
k_i . k_j  (A)     mma.sync f16  q and k are fp16 as stored: exact MMA
q_i . k_j  (P)     mma.sync f16  inputs; norms, beta, decay applied to the
                                 f32 result after (``_mma_qk``)
K_hat S, Q_hat S   FP32 FMA      S is fp32
T R                FP32 FMA      T and R are fp32, made in the chunk
P delta            FP32 FMA      P and delta are fp32
K^T (e delta)      FP32 FMA      the state update: fp32 delta, into fp32 S
norms, T           FP32 FMA      row-wise sums; a triangular solve
=================  ============  ===========================================

An fp32 operand on the tensor cores would have to be split into 16-bit
parts: two fp16 parts carry 22 of its 24 significand bits and lose more
wherever the low part falls under fp16's normal range (a state entry near
1e-3 leaves a low part near 5e-7, where fp16 has 3 significant bits left);
bf16 parts need three of them, and ``k`` (fp16, not exact in bf16) two. Three or more MMAs per
product, the parts made at every chunk (``S`` and ``delta`` change), and
staging for them in shared memory that already holds 41 of the 48 KiB:
not done, so these products stay exactly what they were.

The MMA products are made per 16 x 8 tile by whole warps (``_mma_qk``);
everything else is spread over the ``NT`` threads by flat index (``e =
tid, tid + NT, ...``), each element a full dot product by one thread, so no
reductions are needed anywhere in the chunk. ``NT`` is whole warps
(``_layout.warp_threads``).

The inner loops are ``while`` loops over ``uint64`` counters, not ``for ...
in range``: a signed index costs Numba's negative-index wrap-around (a
compare, shift and add per element), and Numba's range iterator unrolls into
a select chain per step; this form compiles (sm_90) to one load per operand
with an immediate offset and one FMA per element.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, types, uint32, uint64

from ..common.launch import device_inline
from ..common.smem import ld_shared_f32x4, shared_view, smem_addr, st_shared_f32x4, st_shared_v4
from ..common.vload import aligned16, ld_f32x4, ldg_v4, st_f32x4
from ._layout import SHARED_ALIGN
from ._mma_qk import LAYOUT, TC_DTYPE, TC_FORM, make_lower_product
from .naive import L2_EPS

F32 = 4
float16 = types.float16
FULL = 0xFFFFFFFF  # every lane of a warp (the norms' shuffles)
STAGE_FAULTS = (None, "drop", "dup")  # make_chunk's test knob


def m_pitch(C: int) -> int:
    """Floats between two rows of ``M``: ``C`` rounded up to 8 (mod 16)
    (72 at ``C = 64``, 24 at the verifies' 17). Rows a multiple of 32 words
    apart put a warp's stores of the MMA results, eight rows by four
    column pairs, four rows on each bank."""
    return C + (8 - C) % 16


def shared_bytes(C: int, DK: int, BV: int, resident: bool) -> int:
    """Static shared memory of a chunked kernel's block."""
    words = C * m_pitch(C) + C * BV + 5 * C + (DK * BV if resident else 1)
    return words * F32


def chunk_flops(L: int, DK: int, DV: int) -> int:
    """Algorithmic FLOPs of one chunk of ``L`` tokens for one value head
    (a multiply-add is 2): norms, A, T, K S, T R, P, Q S, P delta, the state
    update; exp and the per-element scalars are not counted. The ``A`` and
    ``P`` terms run on the tensor cores, the rest on FP32 FMAs; what the
    tensor cores execute (whole tiles, per column slice) is
    ``_mma_qk.mma_flops``."""
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
        + 2 * L * DK * DV
        + DK * DV  # S' = a S + K^T (e delta)
    )


def chunk_tc_flops(L: int, DK: int) -> int:
    """The part of :func:`chunk_flops` on the tensor cores: ``A`` (strict
    lower) and ``P`` (lower incl. the diagonal), each a dot product over
    ``DK``."""
    tri = L * (L - 1) // 2
    return 2 * tri * DK + 2 * (tri + L) * DK


def tensor_core_launch(launch):
    """Mark a chunked kernel's launch for the record: its ``A`` and ``P``
    products run on ``mma.sync`` with fp16 inputs (``_mma_qk``)."""
    launch.tensor_cores = TC_FORM
    launch.tc_dtype = TC_DTYPE
    return launch


def row_stride(DK: int) -> int:
    """Halves between two staged ``q``/``k`` rows: ``DK`` rounded up to 16
    bytes, then padded to ``8 (mod 64)`` halves, so a row is ``4 (mod 32)``
    words and the eight rows one MMA fragment load reads sit on 32
    different banks (136 at ``DK = 128``: 16 bytes of padding a row)."""
    rs = -(-DK // 8) * 8
    return rs + (8 - rs) % 64


def stage_bytes(C: int, DK: int, BV: int) -> int:
    """Dynamic shared memory of a chunked kernel's block: the chunk's
    staged ``q`` and ``k`` rows (``C x row_stride``) and ``v``'s column
    slice (``C x BV``), all fp16."""
    return (2 * C * row_stride(DK) + C * -(-BV // 8) * 8) * 2


@lru_cache(maxsize=None)
def make_scratch(C: int, DK: int, BV: int):
    """Device function ``scratch() -> (M, D, Gs, Bs, Rk, Rq, Ek, Qs, Ks,
    Vs)``: the chunk's shared arrays (layout above), for a kernel to declare
    once and hand to every ``chunk`` call. ``Qs``/``Ks`` (``[C, 1, RS]``,
    one head's rows as the MMA product indexes them) and ``Vs`` (``[C,
    BV']``) are views of the block's dynamic shared memory, which the launch
    sizes at :func:`stage_bytes`; it is declared 16-byte aligned, as the
    staging's 16-byte stores need (``.extern .shared .align 16``: the
    driver places it so; Numba's default is the element's 2 bytes)."""
    RS = row_stride(DK)
    VS = -(-BV // 8) * 8
    NQ = C * RS
    MP = m_pitch(C)

    @device_inline
    def scratch():
        dyn = cuda.shared.array(0, float16, alignment=SHARED_ALIGN)
        return (
            cuda.shared.array((C, MP), float32, alignment=SHARED_ALIGN),  # 8-byte pair stores
            cuda.shared.array((C, BV), float32),
            cuda.shared.array(C, float32),
            cuda.shared.array(C, float32),
            cuda.shared.array(C, float32),
            cuda.shared.array(C, float32),
            cuda.shared.array(C, float32),
            shared_view(dyn, 0, (C, 1, RS)),
            shared_view(dyn, NQ, (C, 1, RS)),
            shared_view(dyn, 2 * NQ, (C, VS)),
        )

    return scratch


@lru_cache(maxsize=None)
def make_slice_io(DK: int, DV: int, BV: int, NT: int):
    """Device functions ``load_slice(Ssh, S2, v0, tid)`` and
    ``store_slice(S2, Ssh, v0, tid)``: the block's ``DK x BV`` state slice
    (columns ``v0 ..`` of the head's ``S2``, rows of ``DV``) into shared
    memory and back, ``NT`` threads along the flat index. Where the slice
    and the rows allow it (``BV``, ``DV`` multiples of 4) each thread moves
    16 bytes a step, coherent on the global side (the state is written in
    place, ``vload``) and one ``v4`` access on the shared side (``Ssh``
    16-byte aligned, ``_layout.SHARED_ALIGN``): a warp covers four 128-byte
    lines of state rows at ``BV = 32``. Else one float a step, coalesced
    along columns. Both end without a barrier: the caller's next one orders
    them (the chunk's first, or the end of the kernel)."""
    WIDE = BV % 4 == 0 and DV % 4 == 0
    QN = BV // 4

    @device_inline
    def load_slice(Ssh, S2, v0, tid):
        if WIDE:
            base = smem_addr(Ssh)
            for e in range(tid, DK * QN, NT):
                d = e // QN
                c4 = 4 * (e - d * QN)
                a, b, c, x = ld_f32x4(S2, d * DV + v0 + c4)
                st_shared_f32x4(base + np.uint32(4 * (d * BV + c4)), a, b, c, x)
        else:
            for e in range(tid, DK * BV, NT):
                d = e // BV
                Ssh[d, e - d * BV] = S2[d, v0 + e - d * BV]

    @device_inline
    def store_slice(S2, Ssh, v0, tid):
        if WIDE:
            base = smem_addr(Ssh)
            for e in range(tid, DK * QN, NT):
                d = e // QN
                c4 = 4 * (e - d * QN)
                a, b, c, x = ld_shared_f32x4(base + np.uint32(4 * (d * BV + c4)))
                st_f32x4(S2, d * DV + v0 + c4, a, b, c, x)
        else:
            for e in range(tid, DK * BV, NT):
                d = e // BV
                S2[d, v0 + e - d * BV] = Ssh[d, e - d * BV]

    return load_slice, store_slice


@lru_cache(maxsize=None)
def make_stage(C: int, DK: int, BV: int, NT: int, fault=None):
    """Device function ``stage(q, k, v, g, beta, Qs, Ks, Vs, Ek, Bs, h, hk,
    v0, c0, L, tid)``: the chunk's rows ``c0 .. c0+L-1`` into shared memory,
    once: ``q``/``k`` rows into ``Qs``/``Ks``, ``v``'s column slice into
    ``Vs`` (fp16 as stored), ``g`` into ``Ek`` (raw, the prefix is made
    from it) and ``beta`` into ``Bs``. No barrier: the caller's next one
    orders the stores.

    The rows go 16 bytes a lane (``ld.global.nc.v4.u32`` of eight halves,
    one ``st.shared.v4.b32``: ``q``, ``k``, ``v`` are read-only in every
    kernel that stages them) where a row is whole 16-byte pieces (``DK``;
    ``BV`` and ``v``'s row length for ``v``) and the arrays start on 16
    bytes (both checked per call, ``aligned16``); lanes run along a row, so a warp reads whole
    lines (two 256-byte rows of ``q`` at ``DK = 128``). Else one half a step,
    coalesced along the row. Nothing past row ``L - 1`` is read: a short
    last chunk stops at the sequence's end.

    ``fault`` (tests only) breaks the staging of a short chunk (``L < C``,
    the sequence's last): ``"drop"`` stages one row fewer (the last row
    keeps what its slot held from the chunk before), ``"dup"`` stages the
    next-to-last row in the last one's slot too (counted twice)."""
    if fault not in STAGE_FAULTS:
        raise ValueError(f"stage fault {fault!r}: one of {STAGE_FAULTS}")
    WQK = DK % 8 == 0
    WV = BV % 8 == 0
    QPR = DK // 8  # 16-byte pieces of a q/k row
    VPR = BV // 8  # of v's slice row
    RS = row_stride(DK)
    VS = -(-BV // 8) * 8
    DROP = fault == "drop"
    DUP = fault == "dup"

    @device_inline
    def src(c0, i, L):
        """The global row staged into slot ``i`` (``i`` itself unless a fault)."""
        if DUP and L < C and i == L - 1 and i > 0:
            return c0 + i - 1
        return c0 + i

    @cuda.jit(device=True)
    def stage(q, k, v, g, beta, Qs, Ks, Vs, Ek, Bs, h, hk, v0, c0, L, tid):
        n = L - 1 if DROP and L < C else L
        HK = q.shape[1]
        HV = v.shape[1]
        DV = v.shape[2]
        if WQK and aligned16(q) and aligned16(k):
            qb = smem_addr(Qs)
            kb = smem_addr(Ks)
            for e in range(tid, n * QPR, NT):
                i = e // QPR
                p8 = 8 * (e - i * QPR)
                at = (src(c0, i, L) * HK + hk) * DK + p8
                a0, a1, a2, a3 = ldg_v4(q, at)
                b0, b1, b2, b3 = ldg_v4(k, at)
                off = uint32(2 * (i * RS + p8))
                st_shared_v4(qb + off, a0, a1, a2, a3)
                st_shared_v4(kb + off, b0, b1, b2, b3)
        else:
            for e in range(tid, n * DK, NT):
                i = e // DK
                d = e - i * DK
                t = src(c0, i, L)
                Qs[i, 0, d] = q[t, hk, d]
                Ks[i, 0, d] = k[t, hk, d]
        if WV and DV % 8 == 0 and aligned16(v):
            vb = smem_addr(Vs)
            for e in range(tid, n * VPR, NT):
                i = e // VPR
                p8 = 8 * (e - i * VPR)
                a0, a1, a2, a3 = ldg_v4(v, (src(c0, i, L) * HV + h) * DV + v0 + p8)
                st_shared_v4(vb + uint32(2 * (i * VS + p8)), a0, a1, a2, a3)
        else:
            for e in range(tid, n * BV, NT):
                i = e // BV
                jj = e - i * BV
                Vs[i, jj] = v[src(c0, i, L), h, v0 + jj]
        for i in range(tid, n, NT):
            t = src(c0, i, L)
            Ek[i] = g[t, h]
            Bs[i] = beta[t, h]

    return stage


@lru_cache(maxsize=None)
def make_chunk(C: int, DK: int, BV: int, NT: int, RESIDENT: bool, layout=LAYOUT, fault=None):
    """The device function ``chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk,
    v0, c0, L, tid)`` for chunks of at most ``C`` tokens on a ``DK x BV``
    slice with ``NT`` threads;
    ``scr`` is :func:`make_scratch`'s tuple. ``RESIDENT``: the state slice
    lives in the shared ``Ssh`` (the caller loads and stores it once,
    :func:`make_slice_io`); otherwise it is read from and written back to
    the global ``S2`` view within every chunk. ``fault``: :func:`make_stage`'s
    test knob."""
    EPT = -(-C * BV // NT)  # delta entries per thread (registers)
    a_lower = make_lower_product(DK, NT, True, layout)
    p_lower = make_lower_product(DK, NT, False, layout)
    stage = make_stage(C, DK, BV, NT, fault)
    UDK = np.uint64(DK)
    ONE = np.uint64(1)
    SCALE = np.float32(1.0 / math.sqrt(DK))
    EPS = np.float32(L2_EPS)
    NW = NT // 32  # warps (whole: _layout.warp_threads)
    W32 = np.uint64(32)
    ZERO = np.uint64(0)

    @cuda.jit(device=True)
    def sget(S2, Ssh, d, jj, v0):  # uint64 indices
        if RESIDENT:
            return Ssh[d, jj]
        return S2[d, v0 + jj]

    @cuda.jit(device=True)
    def sput(S2, Ssh, d, jj, v0, x):
        if RESIDENT:
            Ssh[d, jj] = x
        else:
            S2[d, v0 + jj] = x

    @device_inline
    def dot_s(a, S2, Ssh, jj, v0):
        """``a . S[:, jj]``: an fp16 row (staged) against a column of the state slice."""
        acc = float32(0.0)
        d = uint64(0)
        while d < UDK:
            acc += float32(a[d]) * sget(S2, Ssh, d, jj, v0)
            d += ONE
        return acc

    @cuda.jit(device=True)
    def chunk(q, k, v, g, beta, S2, Ssh, o, scr, h, hk, v0, c0, L, tid):
        M, D, Gs, Bs, Rk, Rq, Ek, Qs, Ks, Vs = scr
        # 0. the chunk's rows into shared memory, once (16 bytes a lane).
        stage(q, k, v, g, beta, Qs, Ks, Vs, Ek, Bs, h, hk, v0, c0, L, tid)
        cuda.syncthreads()
        #    Per-token scalars: the norms by whole warps, a row each (lanes
        #    along d, consecutive halves: no bank conflict; a butterfly of
        #    shuffles sums them); the cumulative decay by each thread over
        #    its own prefix of the staged g (L <= C adds, one address a step
        #    across the warp).
        lane = uint64(tid & 31)
        for i in range(tid >> 5, L, NW):  # the same rows in every lane of a warp
            ui = uint64(i)
            kk = float32(0.0)
            qq = float32(0.0)
            d = lane
            while d < UDK:
                kd = float32(Ks[ui, 0, d])
                qd = float32(Qs[ui, 0, d])
                kk += kd * kd
                qq += qd * qd
                d += W32
            for m in (16, 8, 4, 2, 1):
                kk += cuda.shfl_xor_sync(FULL, kk, m)
                qq += cuda.shfl_xor_sync(FULL, qq, m)
            if lane == ZERO:
                Rk[i] = float32(1.0) / math.sqrt(kk + EPS)
                Rq[i] = SCALE / math.sqrt(qq + EPS)
        for i in range(tid, L, NT):
            G = float32(0.0)
            for l in range(i + 1):
                G += Ek[l]
            Gs[i] = G
        cuda.syncthreads()

        # 1. A (strict lower triangle of M) and R = beta (v - exp(G) K_hat S).
        GL = Gs[L - 1]
        uv0 = uint64(v0)
        for i in range(tid, L, NT):
            Ek[i] = Rk[i] * math.exp(GL - Gs[i])
        a_lower(Ks, Ks, M, Gs, Rk, Rk, Bs, 0, 0, L, tid)  # tensor cores, rows from shared memory
        for e in range(tid, L * BV, NT):
            i = e // BV
            jj = e - i * BV
            y = dot_s(Ks[i, 0], S2, Ssh, uint64(jj), uv0)
            D[i, jj] = Bs[i] * (float32(Vs[i, jj]) - math.exp(Gs[i]) * Rk[i] * y)
        cuda.syncthreads()

        # 2. T = (I + A)^-1 by forward substitution down each column:
        #    T[i, m] = -A[i, m] - sum_{m<l<i} A[i, l] T[l, m], stored at M[m, i].
        #    Thread m reads only A (lower) and its own row m (upper): no races.
        for m in range(tid, L, NT):
            um = uint64(m)
            for i in range(m + 1, L):
                ui = uint64(i)
                acc = -M[ui, um]
                l = um + ONE
                while l < ui:
                    acc -= M[ui, l] * M[um, l]
                    l += ONE
                M[um, ui] = acc
        cuda.syncthreads()

        # 3. delta = T R. Rows depend on earlier rows of R, so compute all
        #    into registers, then overwrite D after a barrier.
        tmp = cuda.local.array(EPT, float32)
        for s in range(EPT):
            e = tid + s * NT
            if e < L * BV:
                i = e // BV
                jj = e - i * BV
                ui = uint64(i)
                ujj = uint64(jj)
                acc = D[ui, ujj]
                l = uint64(0)
                while l < ui:
                    acc += M[l, ui] * D[l, ujj]
                    l += ONE
                tmp[s] = acc
        cuda.syncthreads()
        for s in range(EPT):
            e = tid + s * NT
            if e < L * BV:
                i = e // BV
                D[i, e - i * BV] = tmp[s]
        #    T is dead: P = Q_hat K_hat^T exp(G_i - G_j) into M's lower part.
        p_lower(Qs, Ks, M, Gs, Rq, Rk, Bs, 0, 0, L, tid)  # tensor cores
        cuda.syncthreads()

        # 4. o = exp(G) Q_hat S + P delta.
        for e in range(tid, L * BV, NT):
            i = e // BV
            jj = e - i * BV
            ui = uint64(i)
            ujj = uint64(jj)
            acc = dot_s(Qs[i, 0], S2, Ssh, ujj, uv0)
            acc *= Rq[i] * math.exp(Gs[i])
            l = uint64(0)
            while l <= ui:
                acc += M[ui, l] * D[l, ujj]
                l += ONE
            o[c0 + i, h, v0 + jj] = acc
        cuda.syncthreads()  # everyone has read S before it changes

        # 5. S' = exp(G_L) S + K_hat^T diag(exp(G_L - G)) delta.
        a = math.exp(GL)
        uL = uint64(L)
        for e in range(tid, DK * BV, NT):
            d = e // BV
            ud = uint64(d)
            ujj = uint64(e - d * BV)
            acc = a * sget(S2, Ssh, ud, ujj, uv0)
            l = uint64(0)
            while l < uL:
                acc += float32(Ks[l, 0, ud]) * Ek[l] * D[l, ujj]
                l += ONE
            sput(S2, Ssh, ud, ujj, uv0, acc)
        cuda.syncthreads()  # next chunk's staging overwrites Qs/Ks/Vs and the scalars

    return chunk
