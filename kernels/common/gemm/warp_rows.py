"""Products of rows as stored, ``x_i . y_l``, on the warp MMA (``mma.sync.
aligned.m16n8k16``, fp16 inputs, f32 accumulators; ``common/mma.py``), for
the small matrix products inside a fused kernel: a GDN chunk's ``k_i .
k_j`` and ``q_i . k_j``, the SSD scan's ``C_i . B_j``. The rest of such a
kernel is scalar work on the same block, so the product is a device
function of the kernel, not a kernel of its own, and what becomes of each
element (the decays, norms, masks a caller applies) is the caller's
``put``.

Operands: two fp16 arrays ``x[t, h, d]`` and ``y[t, h, d]`` with ``d``
contiguous. ``A = x`` rows (``.row``) and ``B = y^T`` held as ``Bt[n, k]
= y[t, h, d]`` (``.col``): ``y`` as stored, no transpose and no staging.
Each fragment register's two elements are consecutive ``d`` of one row
(checked below from ``mma``'s layout data), so a register is one 32-bit
load of the array viewed as ``uint32`` where ``d`` is even (a row then
starts 4-byte aligned), two 16-bit loads where it is odd. The rows are read
where the caller keeps them: global memory through L1 (the SSD scan; every
row serves ``cols / 8`` tiles), or a copy the caller staged in shared
memory (the GDN chunk, ``gdn/_chunk.py``, rows padded so each fragment load
is conflict-free).

A block of ``la x lb`` elements (rows ``ta ..``, columns ``tb ..``) is made
in 16 x 8 tiles, walking ``d`` by 16, dealt round-robin to the ``NT / 32``
warps; ``lower`` keeps only the tiles holding an element with ``l <= i``
(row tile ``mi`` needs column tiles ``ni <= 2 mi + 1``)::

           l: 0   8   16  24  32 ...           L = 64: 20 tiles of the 32,
    i  0    [w0][w1]                                   5 per warp of 4
      16    [w2][w3][w0][w1]
      32    [w2][w3][w0][w1][w2][w3]
      48    [w0][w1][w2][w3][w0][w1][w2][w3]

The walk's bounds are the same in every lane of a warp (the block's
``la``, ``lb``), so all 32 lanes reach each ``mma.sync`` together, as
``.aligned`` demands. Edges are fed zeros, never skipped: rows past ``la``
/ ``lb`` and ``d`` past ``DK`` when ``DK % 16 != 0`` read as 0 and add
nothing; their results are not given to ``put``. Which lane holds which
element is ``mma``'s (``a_elem``/``b_elem``/``c_elem``; a test passes a
wrong map to see a check fail), never lane arithmetic of its own.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32, uint64

from .. import mma, vload
from ..launch import device_inline

TM, TN, TK = mma.M, mma.N, mma.K  # one MMA: 16 rows x 8 columns, 16 deep
WARP = mma.WARP
FORM = "mma.sync"  # a record's tensor_cores
DTYPE = "f16"  # the MMA's input type (the rows as stored)

LAYOUT = (mma.a_elem, mma.b_elem, mma.c_elem)
WARP_SHIFT, TM_SHIFT, TN_SHIFT = 5, 4, 3  # divisions by 32, 16, 8 as shifts
assert (1 << WARP_SHIFT, 1 << TM_SHIFT, 1 << TN_SHIFT) == (WARP, TM, TN)
RATIO = TM // TN


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


def block_tiles(la: int, lb: int, lower: bool) -> int:
    """How many 16 x 8 tiles a block of ``la x lb`` takes (``lower``: only
    those holding an element with ``l <= i``): the MMAs per ``d`` step."""
    rows, cols = -(-la // TM), -(-lb // TN)
    return sum(min(RATIO * mi + RATIO, cols) if lower else cols for mi in range(rows))


def lower_tiles(L: int) -> int:
    """The tiles of the lower triangle (with the diagonal) of ``L x L``."""
    return block_tiles(L, L, True)


def tile_flops(tiles: int, DK: int) -> int:
    """FLOPs the tensor cores execute for ``tiles`` tiles over ``DK`` (padded
    tiles and steps included, a multiply-add is 2)."""
    return tiles * -(-DK // TK) * 2 * TM * TN * TK


def mma_flops(L: int, DK: int) -> int:
    """The lower-triangle product of ``L`` rows over ``DK``."""
    return tile_flops(lower_tiles(L), DK)


# Numba's IR inlining, not NVVM's: a device function compiled on its own
# cannot return an array view it made (no runtime to own it).
@cuda.jit(device=True, inline="always")
def words(x):
    """An fp16 ``[T, H, d]`` array as ``uint32 [T, H, d/2]``: each word two
    consecutive halves, the lower ``d`` in the low 16 bits (little-endian),
    as an MMA register holds them. A reinterpretation, no copy."""
    return x.view(np.uint32)


@device_inline
def _halves(x, t, h, w, ok, DK):
    """Word ``w`` of a row of odd length: its two fp16 (``d = 2w, 2w + 1``)
    from 16-bit loads, zero past ``DK`` and where not ``ok``."""
    xh = x.view(np.uint16)
    d = uint64(2 * w)
    lo = uint32(xh[t, h, d]) if ok and 2 * w < DK else uint32(0)
    hi = uint32(xh[t, h, d + uint64(1)]) if ok and 2 * w + 1 < DK else uint32(0)
    return lo | (hi << uint32(16))


@device_inline
def _where(f, ta, la, tb, lb):
    """Each register's row (in range: below ``la`` / ``lb``; its index) and
    word of the row: A's four, then B's two."""
    ok = (f[0] < la, f[2] < la, f[4] < la, f[6] < la, f[9] < lb, f[11] < lb)
    t = (uint64(ta + f[0]), uint64(ta + f[2]), uint64(ta + f[4]), uint64(ta + f[6]))
    t = t + (uint64(tb + f[9]), uint64(tb + f[11]))
    c = (f[1] >> 1, f[3] >> 1, f[5] >> 1, f[7] >> 1, f[8] >> 1, f[10] >> 1)
    return ok + t + c


def paired_steps(layout) -> bool:
    """Whether every lane's A registers 0 and 2 (and 1 and 3) are one row's
    ``d`` 8 apart, its B registers 0 and 1 one column's, all in the first
    half of the step: then a lane may read the four consecutive ``d`` at
    ``4 (c % 4)`` of a step with one 8-byte load for each pair, the step's
    ``d`` permuted alike in both operands (the dot product unchanged)."""
    a_elem, b_elem, _c = (getattr(f, "py_func", f) for f in layout)
    for lane in range(WARP):
        for lo, hi in ((0, 4), (2, 6)):
            (r0, c0), (r1, c1) = a_elem(lane, lo), a_elem(lane, hi)
            if r1 != r0 or c1 != c0 + 8 or c0 >= 8 or c0 % 2:
                return False
        (k0, n0), (k1, n1) = b_elem(lane, 0), b_elem(lane, 2)
        if n1 != n0 or k1 != k0 + 8 or k0 >= 8 or k0 % 2:
            return False
    return True


@lru_cache(maxsize=None)
def make_tile(DK: int, layout=LAYOUT, wide: bool = False):
    """Device functions ``coords(lane)`` and ``tile(x, y, h, ta, la, tb, lb,
    f) -> (d0..d3)``.

    ``coords`` is where this lane's fragments sit, from ``layout`` (a tuple
    ``f``, made once per product): ``f[0:8]`` (row, column) of the low half
    of A registers a0..a3, ``f[8:12]`` (k, column) of the low half of B
    registers b0, b1, ``f[12:20]`` (row, column) of D values d0..d3.

    ``tile`` is the raw 16 x 8 tile ``x[ta + 0..15, h] . y[tb + 0..7, h]``
    over all ``DK`` as this lane's D fragment; rows of ``x`` from ``la`` on
    and of ``y`` from ``lb`` on, and ``d`` past ``DK``, read as zero.

    Plain device functions, compiled once per ``DK`` and shared by every
    product of a kernel (inlining them at Numba's level made the GDN
    kernels compile 4x slower); they index with ``uint64`` and shifts, so
    no wrap-around code is lost by compiling them apart. The loads are
    written out rather than called: in the simulator every device call
    costs as much as a few dozen lines.

    ``wide`` (rows in global memory, ``DK`` a multiple of 4 and a layout
    whose pairs allow it, :func:`paired_steps`): each k step's ``d`` is
    read permuted, a lane's two registers of one row as one 8-byte
    ``ld.global.nc.v2`` of four consecutive ``d`` (its row's four lanes
    then read the step's 32 bytes, whole sectors, where two 4-byte loads
    each used half of them); where either array does not start 16-byte
    aligned, the word loads."""
    a_elem, b_elem, c_elem = layout
    WIDE = wide and DK % 4 == 0 and paired_steps(layout)
    ODD = DK % 2 == 1  # rows not 4-byte aligned: each register from two 16-bit loads
    KSTEPS = -(-DK // TK)
    WSTEP = TK // 2  # 32-bit words per k-step
    DKW = DK // 2  # 32-bit words per row (even DK)
    PAD = DK % TK != 0  # the last step reads past d: zeros there
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

    @cuda.jit(device=True, inline="always")  # returns a view: inlined in Numba's IR (see words)
    def rows_of(x):
        """What ``load`` reads: the rows as words (even ``DK``), else as stored."""
        if ODD:
            return x
        return words(x)

    @device_inline
    def load(xa, t, hh, w, ok):
        """Word ``w`` of row ``t`` (zero where not ``ok`` or past ``DK``)."""
        if ODD:
            return _halves(xa, t, hh, w, ok, DK)
        if PAD:  # the last step runs past d: those words are zero
            return xa[t, hh, uint64(w)] if ok and w < DKW else Z
        return xa[t, hh, uint64(w)] if ok else Z

    @device_inline
    def load2(xa, t, hh, w, ok):
        """Words ``w``, ``w + 1`` of row ``t`` by one 8-byte load (``w``
        even; zeros where not ``ok`` or past ``DK``)."""
        at = (t * uint64(xa.shape[1]) + hh) * uint64(DKW) + uint64(w)
        if ok and (not PAD or w < DKW):
            return vload.ldg_v2(xa, at)
        return Z, Z

    @cuda.jit(device=True)
    def tile(x, y, h, ta, la, tb, lb, f):
        xa = rows_of(x)  # here, not in the caller: no view lives across it
        ya = rows_of(y)
        hh = uint64(h)
        ok0, ok1, ok2, ok3, ok4, ok5, t0, t1, t2, t3, t4, t5, c0, c1, c2, c3, c4, c5 = _where(f, ta, la, tb, lb)
        d0 = float32(0.0)
        d1 = float32(0.0)
        d2 = float32(0.0)
        d3 = float32(0.0)
        if WIDE and vload.aligned16(xa) and vload.aligned16(ya):  # (the same in every lane)
            for s in range(KSTEPS):
                w0 = s * WSTEP  # a step's d permuted alike in A and B: registers 0, 2 (1, 3) one load
                a0, a2 = load2(xa, t0, hh, w0 + 2 * c0, ok0)
                a1, a3 = load2(xa, t1, hh, w0 + 2 * c1, ok1)
                b0, b1 = load2(ya, t4, hh, w0 + 2 * c4, ok4)
                d0, d1, d2, d3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
            return d0, d1, d2, d3
        for s in range(KSTEPS):
            w0 = s * WSTEP
            a0 = load(xa, t0, hh, w0 + c0, ok0)
            a1 = load(xa, t1, hh, w0 + c1, ok1)
            a2 = load(xa, t2, hh, w0 + c2, ok2)
            a3 = load(xa, t3, hh, w0 + c3, ok3)
            b0 = load(ya, t4, hh, w0 + c4, ok4)
            b1 = load(ya, t5, hh, w0 + c5, ok5)
            d0, d1, d2, d3 = mma.mma_f16_16816(a0, a1, a2, a3, b0, b1, d0, d1, d2, d3)
        return d0, d1, d2, d3

    return coords, tile


def pairs_along_rows(c_elem) -> bool:
    """Whether D values ``d0, d1`` (and ``d2, d3``) of every lane are one
    row's columns ``2j, 2j + 1``: then a caller may store each pair as
    one 8-byte store (``mma``'s layout; a test's broken map may not be)."""
    f = getattr(c_elem, "py_func", c_elem)
    for lane in range(WARP):
        for i in (0, 2):
            (r0, c0), (r1, c1) = f(lane, i), f(lane, i + 1)
            if r1 != r0 or c1 != c0 + 1 or c0 % 2:
                return False
    return True


@lru_cache(maxsize=None)
def make_product(DK: int, NT: int, put, layout=LAYOUT, put2=None, wide: bool = False):
    """Device function ``product(x, y, h, ta, la, tb, lb, lower, ctx,
    tid)``: every element ``(i < la, l < lb)`` of the block's tiles (with
    ``lower``, only the tiles holding some ``l <= i``; elements above the
    diagonal inside those tiles are given too, ``put`` masks them) handed
    to ``put(ctx, i, l, dot)`` (``uint64`` indices, relative to ``ta`` and
    ``tb``) with ``dot = x[ta + i, h] . y[tb + l, h]`` over ``DK``. The
    block's ``NT`` threads are ``NT / 32`` warps; each makes its share of
    the tiles. ``layout``: ``(a_elem, b_elem, c_elem)``, ``mma``'s unless a
    test breaks one.

    ``put2(ctx, i, l, dot, dot1)``, where given, takes the elements
    ``(i, l)`` and ``(i, l + 1)`` (``l`` even) together wherever both are in
    the block, so that a caller may store them as one 8-byte store (a
    lane's scalar stores of one row's two columns, eight rows a warp, put
    four rows on each bank where the rows lie a multiple of 32 words
    apart); ``put`` takes the column a pair has alone at the block's edge.
    Only with a layout whose pairs are a row's (:func:`pairs_along_rows`);
    else every element goes to ``put``. ``wide``: rows read from global
    memory in 8-byte pieces (:func:`make_tile`)."""
    if NT % WARP:
        raise ValueError(f"{NT} threads are not whole warps: mma.sync needs all 32 lanes")
    coords, tile = make_tile(DK, layout, wide)
    NW = NT // WARP
    PAIRS = put2 is not None and pairs_along_rows(layout[2])

    @cuda.jit(device=True)
    def put_apart(ctx, i, l, dot, dot1):
        put(ctx, i, l, dot)
        put(ctx, i, l + uint64(1), dot1)

    put2_ = put2 if PAIRS else put_apart

    @cuda.jit(device=True)
    def put_one(ctx, la, lb, ii, ll, dot):
        i = uint64(ii)
        l = uint64(ll)
        if i < uint64(la) and l < uint64(lb):
            put(ctx, i, l, dot)

    @cuda.jit(device=True)
    def put_two(ctx, la, lb, ii, ll, dot, dot1):
        i = uint64(ii)
        l = uint64(ll)
        if i < uint64(la):
            if l + uint64(1) < uint64(lb):
                put2_(ctx, i, l, dot, dot1)
            elif l < uint64(lb):
                put(ctx, i, l, dot)

    @cuda.jit(device=True)
    def put4(ctx, la, lb, i0, l0, f, d0, d1, d2, d3):
        if PAIRS:
            put_two(ctx, la, lb, i0 + f[12], l0 + f[13], d0, d1)
            put_two(ctx, la, lb, i0 + f[16], l0 + f[17], d2, d3)
        else:
            put_one(ctx, la, lb, i0 + f[12], l0 + f[13], d0)
            put_one(ctx, la, lb, i0 + f[14], l0 + f[15], d1)
            put_one(ctx, la, lb, i0 + f[16], l0 + f[17], d2)
            put_one(ctx, la, lb, i0 + f[18], l0 + f[19], d3)

    @cuda.jit(device=True)
    def product(x, y, h, ta, la, tb, lb, lower, ctx, tid):
        warp = tid >> WARP_SHIFT
        f = coords(cuda.laneid)
        rows = (la + TM - 1) >> TM_SHIFT
        cols = (lb + TN - 1) >> TN_SHIFT
        turn = 0
        for mi in range(rows):
            i0 = mi * TM
            for ni in range(min(RATIO * mi + RATIO, cols) if lower else cols):
                if turn == warp:  # the same in every lane of the warp
                    l0 = ni * TN
                    d0, d1, d2, d3 = tile(x, y, h, ta + i0, la - i0, tb + l0, lb - l0, f)
                    put4(ctx, la, lb, i0, l0, f, d0, d1, d2, d3)
                turn += 1
                if turn == NW:
                    turn = 0

    return product
