"""The single-token GDN step as device functions, shared by the token-by-token
verify kernel, both decode launches, the conv-fused decode and the WY17
verify's last token.

Thread ``(c, p)`` of a block holds an ``R x CW`` patch of the block's
column slice in registers: rows ``p*R .. p*R+R-1`` of the ``CW`` adjacent
columns ``c*CW ..`` (``CW = 4`` wherever the slice and the state's rows
allow 16-byte accesses, else 1; see ``_layout.Tile``)::

    Sr[r*CW + w] = S[p*R + r, v0 + c*CW + w]      r < R, w < CW

so each of the thread's ``R`` state rows is one coherent 16-byte load and
one 16-byte store (``vload.ld_f32x4``/``st_f32x4``: the state is written in
place, so not the read-only path).

Lanes and warps (whole-warp blocks): a warp is ``QW`` column groups by
``WP = 32/QW`` row parts (``QW = 8``: one 128-byte line of a state row, 4
rows a warp instruction); warps tile the slice, ``CG`` across and ``KG``
down::

    lane l of warp w:  c = (w % CG)*QW + l % QW,   p = (w // CG)*WP + l // QW

One token is two device calls with a barrier between them:

1. :func:`partials` -- every thread dots its rows with ``k`` and ``q``
   (one pass over the old state gives both ``S^T k`` and ``S^T q``) for
   each of its columns; the ``WP`` row parts of a warp are summed by a
   butterfly of shuffles (every lane ends with the same sum), and the
   first row part of each warp writes its columns' sums to ``red[0|1, g,
   col]`` (``g`` the warp's row group); the ``k.k``, ``q.q``, ``k.q``
   partials go the same way to ``nrm[0..2, g]``.
2. :func:`finish` -- every thread sums the ``KG`` groups of its columns
   in a fixed order (so every part of a column gets the same ``delta``
   without a second barrier), then::

       a     = exp(g)
       rk    = 1/sqrt(k.k + eps),   rq = scale/sqrt(q.q + eps)
       delta = beta (v_j - a rk (S^T k)_j)
       S     = a S + (rk k) delta                        (own patch only)
       o_j   = a rq (S_old^T q)_j + delta rk rq (k.q)    (= S_new^T q_hat)

   The output comes from the *old* state's ``S^T q`` plus a rank-one
   correction, which is why one pass over the state serves the whole step:
   the state is read once and written once per token, the least a
   memory-bound decode can move.

Blocks that are not whole warps (only the smoke shapes) skip the shuffles:
each row part is its own group. ``k``/``q`` are read by the callers from
shared memory (one broadcast per warp row part). Callers double-buffer
``red``/``nrm`` across tokens so one barrier per token is enough.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
from numba import cuda, float32, uint64

from ..common.launch import device_inline
from ..common.smem import ld_shared_f32x4, smem_addr
from ..common.vload import ld_f32x4, st_f32x4
from ._layout import WARP, Tile, step_tile
from .naive import L2_EPS

FULL = 0xFFFFFFFF


@dataclass(frozen=True)
class Step:
    """A step's thread layout and device functions (``make_step``)."""

    tile: Tile
    whole: bool  # whole warps: row parts summed by shuffles first
    qw: int  # column groups a warp spans
    wp: int  # row parts a warp spans
    cg: int  # warps across the slice
    kg: int  # row groups (shared partial sums per column)
    coords: Any
    offset: Any
    load: Any
    load_shared: Any
    store: Any
    partials: Any
    finish: Any
    put_cols: Any

    @property
    def red_shape(self) -> tuple[int, int, int]:
        return (2, self.kg, self.tile.bv)

    @property
    def nrm_shape(self) -> tuple[int, int]:
        return (3, self.kg)

    @property
    def shared_bytes(self) -> int:
        """One buffer of ``red`` and ``nrm``."""
        return 4 * (2 * self.kg * self.tile.bv + 3 * self.kg)


def warp_grid(tile: Tile) -> tuple[bool, int, int, int, int]:
    """``(whole, QW, WP, CG, KG)`` of :class:`Step` for ``tile``."""
    qn = tile.groups
    qw = 8 if qn % 8 == 0 else (qn if WARP % qn == 0 else 0)
    whole = tile.threads % WARP == 0 and qw > 0 and tile.ksplit % (WARP // qw) == 0
    if not whole:
        return False, qn, 1, 1, tile.ksplit
    wp = WARP // qw
    return True, qw, wp, qn // qw, tile.ksplit // wp


def butterfly_levels(wp: int) -> int:
    """Shuffle levels that sum a warp's ``wp`` row parts (a test breaks it)."""
    return wp.bit_length() - 1


@lru_cache(maxsize=None)
def make_step(DK: int, DV: int, BV: int, NT: int) -> Step:
    """The step on a ``DK x BV`` column slice of a ``DK x DV`` state with
    about ``NT`` threads (``_layout.step_tile`` fixes the exact count).

    ``offset``/``load``/``store`` address the state as a flat 1-D array
    from a per-thread ``uint64`` offset with the compile-time row stride
    ``DV``: the ``R`` addresses are then one register plus immediate
    offsets. (Indexing the 4-D array with signed indices costs a
    wrap-around select and a 64-bit address per row: 125 registers against
    40 for the same loop.)"""
    tile = step_tile(DK, DV, BV, NT)
    CW, R, QN, BV = tile.cw, tile.rows, tile.groups, tile.bv
    WHOLE, QW, WP, CG, KG = warp_grid(tile)
    LOGWP = butterfly_levels(WP)
    SCALE = np.float32(1.0 / math.sqrt(DK))
    EPS = np.float32(L2_EPS)

    @device_inline
    def coords(tid):
        """``(c, p, g, lead)``: the thread's column group and row part, its
        row group in ``red``, and whether it writes that group's sums."""
        if WHOLE:
            w = tid // WARP
            lane = tid - w * WARP
            wr = w // CG
            lr = lane // QW
            return (w - wr * CG) * QW + lane - lr * QW, wr * WP + lr, wr, lr == 0
        p = tid // QN
        return tid - p * QN, p, p, True

    @cuda.jit(device=True)
    def offset(slot, h, hv, p, col):
        """Flat index of ``state[slot, h, p*R, col]`` in a C-ordered
        ``[slots, hv, DK, DV]`` state viewed as 1-D (``hv`` at run time)."""
        return (uint64(slot) * uint64(hv) + uint64(h)) * uint64(DK * DV) + uint64(p) * uint64(R * DV) + uint64(col)

    @device_inline
    def put4(Sr, r, q):
        """Row ``r`` of the patch from a quad (a 16-byte load's four floats)."""
        Sr[r * 4] = q[0]
        Sr[r * 4 + 1] = q[1]
        Sr[r * 4 + 2] = q[2]
        Sr[r * 4 + 3] = q[3]

    @cuda.jit(device=True)
    def load(Sr, S1, o0):
        """Sr <- this thread's R x CW patch, one row (16 bytes) a load."""
        for r in range(R):
            if CW == 4:
                put4(Sr, r, ld_f32x4(S1, o0 + uint64(r * DV)))
            else:
                for w in range(CW):
                    Sr[r * CW + w] = S1[o0 + uint64(r * DV + w)]

    @cuda.jit(device=True)
    def load_shared(Sr, Ssh, p, c):
        """Sr <- this thread's patch of a slice held in shared memory (``Ssh``
        ``[DK, BV]``, 16-byte aligned): one 16-byte load a row, so a warp's
        rows fall on distinct banks' wavefronts (no conflict)."""
        if CW == 4:
            at = smem_addr(Ssh) + np.uint32(4 * (p * R * BV + c * 4))
            for r in range(R):
                put4(Sr, r, ld_shared_f32x4(at + np.uint32(4 * r * BV)))
        else:
            for r in range(R):
                for w in range(CW):
                    Sr[r * CW + w] = Ssh[p * R + r, c * CW + w]

    @cuda.jit(device=True)
    def store(Sr, S1, o0):
        for r in range(R):
            if CW == 4:
                st_f32x4(S1, o0 + uint64(r * DV), Sr[r * 4], Sr[r * 4 + 1], Sr[r * 4 + 2], Sr[r * 4 + 3])
            else:
                for w in range(CW):
                    S1[o0 + uint64(r * DV + w)] = Sr[r * CW + w]

    @cuda.jit(device=True)
    def put_cols(row, i, vals, r):
        """row[i .. i+CW-1] = vals[r*CW .. r*CW+CW-1] (a float32 row: of the
        output, or of the state for a patch held elsewhere; 16 bytes a store)."""
        if CW == 4:
            st_f32x4(row, i, vals[r * 4], vals[r * 4 + 1], vals[r * 4 + 2], vals[r * 4 + 3])
        else:
            for w in range(CW):
                row[i + w] = vals[r * CW + w]

    @cuda.jit(device=True)
    def partials(Sr, qr, kr, c, p, g, lead, red, nrm):
        """red[0, g, col] = sum S k, red[1, g, col] = sum S q over the row
        group's rows; nrm[0..2, g] = its k.k, q.q, k.q (column group 0)."""
        d0 = p * R
        sk = cuda.local.array(CW, float32)
        sq = cuda.local.array(CW, float32)
        for w in range(CW):
            sk[w] = float32(0.0)
            sq[w] = float32(0.0)
        kk = float32(0.0)
        qq = float32(0.0)
        kq = float32(0.0)
        for r in range(R):
            kd = float32(kr[d0 + r])
            qd = float32(qr[d0 + r])
            for w in range(CW):
                s = Sr[r * CW + w]
                sk[w] += s * kd
                sq[w] += s * qd
            kk += kd * kd
            qq += qd * qd
            kq += kd * qd
        if WHOLE:
            for i in range(LOGWP):  # butterfly over the warp's row parts
                m = QW << i
                for w in range(CW):
                    sk[w] += cuda.shfl_xor_sync(FULL, sk[w], m)
                    sq[w] += cuda.shfl_xor_sync(FULL, sq[w], m)
                kk += cuda.shfl_xor_sync(FULL, kk, m)
                qq += cuda.shfl_xor_sync(FULL, qq, m)
                kq += cuda.shfl_xor_sync(FULL, kq, m)
        if lead:
            for w in range(CW):
                red[0, g, c * CW + w] = sk[w]
                red[1, g, c * CW + w] = sq[w]
            if c == 0:
                nrm[0, g] = kk
                nrm[1, g] = qq
                nrm[2, g] = kq

    @cuda.jit(device=True)
    def finish(Sr, kr, c, p, red, nrm, vr, vi, gt, bt, ov):
        """Apply the token to own patch; ov[w] = o of column c*CW + w (valid
        in every row part). ``vr[vi + w]`` is that column's v."""
        sk = cuda.local.array(CW, float32)
        sq = cuda.local.array(CW, float32)
        for w in range(CW):
            sk[w] = float32(0.0)
            sq[w] = float32(0.0)
        kk = float32(0.0)
        qq = float32(0.0)
        kq = float32(0.0)
        for gg in range(KG):  # fixed order: every part gets the same sums
            for w in range(CW):
                sk[w] += red[0, gg, c * CW + w]
                sq[w] += red[1, gg, c * CW + w]
            kk += nrm[0, gg]
            qq += nrm[1, gg]
            kq += nrm[2, gg]
        rk = float32(1.0) / math.sqrt(kk + EPS)
        rq = SCALE / math.sqrt(qq + EPS)
        a = math.exp(float32(gt))
        b = float32(bt)
        dl = cuda.local.array(CW, float32)
        for w in range(CW):
            delta = b * (float32(vr[vi + w]) - a * rk * sk[w])
            ov[w] = a * rq * sq[w] + delta * (rk * rq * kq)
            dl[w] = delta * rk
        d0 = p * R
        for r in range(R):
            kd = float32(kr[d0 + r])
            for w in range(CW):
                Sr[r * CW + w] = a * Sr[r * CW + w] + kd * dl[w]

    return Step(tile, WHOLE, QW, WP, CG, KG, coords, offset, load, load_shared, store, partials, finish, put_cols)
