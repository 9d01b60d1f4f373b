"""The chunk's two products of rows as stored -- ``k_i . k_j`` (for ``A``)
and ``q_i . k_j`` (for ``P``) -- on the warp MMA (``mma.sync.aligned.
m16n8k16``, fp16 inputs, f32 accumulators; ``common/mma.py``).

Only these two go to the tensor cores, because only their operands are
exact fp16: ``q`` and ``k`` are fp16 in global memory, and the MMA is fed
those raw bits. Every factor the FMA form applied around the dot product
(the reciprocal norms, ``beta``, ``exp(G_i - G_j)``) is applied afterwards
to the f32 result, in the same order, so the only difference from the FMA
form is how the ``dk`` exact products are summed (in f32 there, inside the
MMA here). The products with an fp32 operand (``K S``, ``T R``, ``Q S``,
``P delta``, ``K^T delta``) stay on FP32 FMAs: see ``_chunk``.

Tiling. ``M`` is ``C x C``; a warp's MMA makes a 16 x 8 tile of it (rows
``i``, columns ``l``), walking ``dk`` in steps of 16. Only tiles holding an
element with ``l <= i`` are made (row tile ``mi`` needs column tiles
``ni <= 2 mi + 1``), dealt round-robin to the block's warps::

           l: 0   8   16  24  32 ...           C = 64: 20 tiles of the 32,
    i  0    [w0][w1]                                   5 per warp of 4
      16    [w2][w3][w0][w1]
      32    [w2][w3][w0][w1][w2][w3]
      48    [w0][w1][w2][w3][w0][w1][w2][w3]

The loop over tiles is the same in every lane of a warp (its bounds are the
chunk length ``L``, the same in the block), so all 32 lanes reach each
``mma.sync`` together, as ``.aligned`` demands.

Hardware constraints behind each choice:

* Both operands come from the same kind of array, ``x[t, hk, d]`` with
  ``d`` contiguous: for ``A = X`` rows (row-major, ``.row``) and for ``B =
  K^T`` stored as ``Bt[n, k] = k[t, hk, d]`` (``.col``), which is ``k`` as
  stored. No transpose, no staging: the rows are read straight from global
  memory (through L1; every row serves ``C/8`` tiles), since shared memory
  (41 KiB at the model shape) has no room for two ``C x dk`` fp16 tiles.
* Each fragment register's two elements are consecutive ``d`` of one row
  (checked below from ``mma``'s layout data), so a register is one 32-bit
  load of the array viewed as ``uint32`` (``dk`` even; a row then starts
  4-byte aligned).
* Edges are fed zeros, never skipped: rows past ``L`` (the tail chunk, and
  ``L < 16`` in a verify) and ``d`` past ``dk`` when ``dk % 16 != 0`` read as
  0 and contribute nothing; their results are not stored.
* The kernel's block must be whole warps (``_layout``): a 16- or 24-thread
  block at the smoke shapes is rounded up to 32.

Which lane holds which element is ``mma``'s: the loaders below go through
``mma.a_elem``/``b_elem``/``c_elem`` (a test passes a wrong map to see the
check fail), never lane arithmetic of their own.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32, uint64

from ..common import mma

TM, TN, TK = mma.M, mma.N, mma.K  # one MMA: 16 rows x 8 columns, 16 deep
WARP = mma.WARP
TC_FORM = "mma.sync"  # the record's tensor_cores
TC_DTYPE = "f16"  # the MMA's input type (q, k as stored)

LAYOUT = (mma.a_elem, mma.b_elem, mma.c_elem)
WARP_SHIFT, TM_SHIFT, TN_SHIFT = 5, 4, 3  # divisions by 32, 16, 8 as shifts
assert (1 << WARP_SHIFT, 1 << TM_SHIFT, 1 << TN_SHIFT) == (WARP, TM, TN)


def _check_pairs() -> None:
    """A and B registers hold two consecutive ``d`` (k index) of one row, the
    even one low: one aligned 32-bit load per register."""
    for lane in range(WARP):
        for i in range(0, 8, 2):
            (r0, c0), (r1, c1) = mma.A_TABLE[lane, i], mma.A_TABLE[lane, i + 1]
            assert r0 == r1 and c1 == c0 + 1 and c0 % 2 == 0, (lane, i)
        for i in range(0, 4, 2):
            (k0, n0), (k1, n1) = mma.B_TABLE[lane, i], mma.B_TABLE[lane, i + 1]
            assert n0 == n1 and k1 == k0 + 1 and k0 % 2 == 0, (lane, i)


_check_pairs()


def lower_tiles(L: int) -> int:
    """How many 16 x 8 tiles hold a lower-triangle element (incl. the
    diagonal) of an ``L x L`` matrix: the MMAs per ``dk`` step of one product."""
    rows, cols = -(-L // TM), -(-L // TN)
    return sum(min(2 * mi + 2, cols) for mi in range(rows))


def mma_flops(L: int, DK: int) -> int:
    """FLOPs the tensor cores execute for one of the two products of a
    chunk of ``L`` tokens (padded tiles included, a multiply-add is 2)."""
    return lower_tiles(L) * -(-DK // TK) * 2 * TM * TN * TK


@cuda.jit(device=True, inline="always")
def words(x):
    """An fp16 ``[T, H, dk]`` array as ``uint32 [T, H, dk/2]``: each word two
    consecutive halves, the lower ``d`` in the low 16 bits (little-endian),
    as an MMA register holds them. A reinterpretation, no copy."""
    return x.view(np.uint32)


@lru_cache(maxsize=None)
def make_tile(DK: int, layout=LAYOUT):
    """Device functions ``coords(lane)`` and ``tile(x, k, hk, ta, la, tb, lb,
    f) -> (d0..d3)``.

    ``coords`` is where this lane's fragments sit, from ``layout`` (a tuple
    ``f``, made once per product): ``f[0:8]`` (row, column) of the low half
    of A registers a0..a3, ``f[8:12]`` (k, column) of the low half of B
    registers b0, b1, ``f[12:20]`` (row, column) of D values d0..d3.

    ``tile`` is the raw 16 x 8 tile ``x[ta + 0..15] . k[tb + 0..7]`` over all
    ``DK`` as this lane's D fragment; rows of ``x`` from ``la`` on and of
    ``k`` from ``lb`` on, and ``d`` past ``DK``, read as zero.

    Plain device functions, compiled once per ``DK`` and shared by both
    products (inlining them at Numba's level, as the chunk's other helpers
    are, made the kernels compile 4x slower); they index with ``uint64``
    and shifts, so no wrap-around code is lost by compiling them apart. The
    loads are written out rather than called: in the simulator every device
    call costs as much as a few dozen lines."""
    if DK % 2:
        raise ValueError(f"dk={DK} is odd: fp16 pairs of a row are loaded as one 32-bit word")
    a_elem, b_elem, c_elem = layout
    KSTEPS = -(-DK // TK)
    WSTEP = TK // 2  # 32-bit words per k-step
    DKW = DK // 2  # 32-bit words per row
    PAD = DK % TK != 0  # the last step reads past dk: zeros there
    Z = uint32(0)

    @cuda.jit(device=True)
    def coords(lane):
        ar0, ac0 = a_elem(lane, 0)  # register j: ISA elements 2j (low) and 2j + 1
        ar1, ac1 = a_elem(lane, 2)
        ar2, ac2 = a_elem(lane, 4)
        ar3, ac3 = a_elem(lane, 6)
        bk0, bn0 = b_elem(lane, 0)
        bk1, bn1 = b_elem(lane, 2)
        dr0, dc0 = c_elem(lane, 0)
        dr1, dc1 = c_elem(lane, 1)
        dr2, dc2 = c_elem(lane, 2)
        dr3, dc3 = c_elem(lane, 3)
        return (ar0, ac0, ar1, ac1, ar2, ac2, ar3, ac3, bk0, bn0, bk1, bn1, dr0, dc0, dr1, dc1, dr2, dc2, dr3, dc3)

    @cuda.jit(device=True)
    def tile(x, k, hk, ta, la, tb, lb, f):
        xw = words(x)  # here, not in the chunk: no view lives across it
        kw = words(k)
        h = uint64(hk)
        # Each register: a row (zero past la / lb) and a word of it.
        ok0, ok1, ok2, ok3 = f[0] < la, f[2] < la, f[4] < la, f[6] < la
        ok4, ok5 = f[9] < lb, f[11] < lb
        t0, t1, t2, t3 = uint64(ta + f[0]), uint64(ta + f[2]), uint64(ta + f[4]), uint64(ta + f[6])
        t4, t5 = uint64(tb + f[9]), uint64(tb + f[11])
        c0, c1, c2, c3 = f[1] >> 1, f[3] >> 1, f[5] >> 1, f[7] >> 1
        c4, c5 = f[8] >> 1, f[10] >> 1
        d0 = float32(0.0)
        d1 = float32(0.0)
        d2 = float32(0.0)
        d3 = float32(0.0)
        for s in range(KSTEPS):
            w0 = s * WSTEP
            if PAD:  # the last step runs past dk: those words are zero
                a0 = xw[t0, h, uint64(w0 + c0)] if ok0 and w0 + c0 < DKW else Z
                a1 = xw[t1, h, uint64(w0 + c1)] if ok1 and w0 + c1 < DKW else Z
                a2 = xw[t2, h, uint64(w0 + c2)] if ok2 and w0 + c2 < DKW else Z
                a3 = xw[t3, h, uint64(w0 + c3)] if ok3 and w0 + c3 < DKW else Z
                b0 = kw[t4, h, uint64(w0 + c4)] if ok4 and w0 + c4 < DKW else Z
                b1 = kw[t5, h, uint64(w0 + c5)] if ok5 and w0 + c5 < DKW else Z
            else:
                a0 = xw[t0, h, uint64(w0 + c0)] if ok0 else Z
                a1 = xw[t1, h, uint64(w0 + c1)] if ok1 else Z
                a2 = xw[t2, h, uint64(w0 + c2)] if ok2 else Z
                a3 = xw[t3, h, uint64(w0 + c3)] if ok3 else Z
                b0 = kw[t4, h, uint64(w0 + c4)] if ok4 else Z
                b1 = kw[t5, h, uint64(w0 + c5)] if ok5 else Z
            d0, d1, d2, d3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
        return d0, d1, d2, d3

    return coords, tile


@lru_cache(maxsize=None)
def make_lower_product(DK: int, NT: int, STRICT: bool, layout=LAYOUT):
    """Device function ``lower(x, k, M, Gs, Ri, Rk, Bs, hk, c0, L, tid)``:
    for every ``i < L`` and ``l < i`` (``l <= i`` unless ``STRICT``)::

        M[i, l] = s_i * Rk[l] * exp(Gs[i] - Gs[l]) * (x_i . k_l)
        s_i     = Bs[i] * Ri[i]   (STRICT: A)      Ri[i]   (P)

    with ``x_i = x[c0 + i, hk]``, ``k_l = k[c0 + l, hk]`` (fp16 rows, read
    as ``uint32`` pairs, :func:`words`) and the dot product on
    ``mma.sync``. The block's ``NT`` threads are ``NT / 32`` warps; each
    makes its share of the tiles. ``layout``: ``(a_elem, b_elem, c_elem)``,
    ``mma``'s unless a test breaks one."""
    if NT % WARP:
        raise ValueError(f"{NT} threads are not whole warps: mma.sync needs all 32 lanes")
    coords, tile = make_tile(DK, layout)
    NW = NT // WARP
    RATIO = TM // TN

    @cuda.jit(device=True)
    def put(M, Gs, Ri, Rk, Bs, L, ii, ll, dot):
        i = uint64(ii)
        l = uint64(ll)
        keep = l < i if STRICT else l <= i
        if keep and i < uint64(L):
            if STRICT:
                M[i, l] = Bs[i] * Ri[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot
            else:
                M[i, l] = Ri[i] * Rk[l] * math.exp(Gs[i] - Gs[l]) * dot

    @cuda.jit(device=True)
    def put4(M, Gs, Ri, Rk, Bs, L, i0, l0, f, d0, d1, d2, d3):
        put(M, Gs, Ri, Rk, Bs, L, i0 + f[12], l0 + f[13], d0)
        put(M, Gs, Ri, Rk, Bs, L, i0 + f[14], l0 + f[15], d1)
        put(M, Gs, Ri, Rk, Bs, L, i0 + f[16], l0 + f[17], d2)
        put(M, Gs, Ri, Rk, Bs, L, i0 + f[18], l0 + f[19], d3)

    @cuda.jit(device=True)
    def lower(x, k, M, Gs, Ri, Rk, Bs, hk, c0, L, tid):
        warp = tid >> WARP_SHIFT
        f = coords(cuda.laneid)
        rows = (L + TM - 1) >> TM_SHIFT
        cols = (L + TN - 1) >> TN_SHIFT
        turn = 0
        for mi in range(rows):
            i0 = mi * TM
            for ni in range(min(RATIO * mi + RATIO, cols)):
                if turn == warp:  # the same in every lane of the warp
                    l0 = ni * TN
                    d0, d1, d2, d3 = tile(x, k, hk, c0 + i0, L - i0, c0 + l0, L - l0, f)
                    put4(M, Gs, Ri, Rk, Bs, L, i0, l0, f, d0, d1, d2, d3)
                turn += 1
                if turn == NW:
                    turn = 0

    return lower
