"""Warp-level tensor-core MMA: ``mma.sync.aligned.m16n8k16.row.col`` with
bf16 or fp16 inputs and f32 accumulators, and ``m16n8k32`` with s8 inputs
and s32 accumulators, callable from ``@cuda.jit`` kernels, with an exact
twin for the CUDA simulator.

One warp computes ``D = A @ B + C`` for A 16x16 (row-major), B 16x8
(column-major) and C/D 16x8. Every lane holds a fragment of each:

* A: four .b32 registers ``a0..a3``, each two 16-bit elements (lower
  column in the low half);
* B: two .b32 registers ``b0, b1``, each two 16-bit elements (lower k in
  the low half);
* C and D: four float32 ``c0..c3``.

Kernels see the data as bit patterns (bf16/fp16 in uint16 arrays, as in
``bits.py``) and never spell lane arithmetic: they call the loaders and the
store below, which read the layout from this module, and the MMA::

    a = load_a_bf16(A, r0, k0)            # A[r0:r0+16, k0:k0+16]
    b = load_b_bf16(Bt, n0, k0)           # B[k0:k0+16, n0:n0+8], B stored as Bt[n, k]
    d = mma_bf16_16816(a[0], a[1], a[2], a[3], b[0], b[1], c0, c1, c2, c3)
    store_c(D, r0, n0, d[0], d[1], d[2], d[3])

All 32 lanes of the warp must make the call together, with the same
operands' shapes (``mma.sync.aligned``).

Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating
point type"); ``g = lane >> 2`` (groupID), ``t = lane % 4``
(threadID_in_group). Below, ``a0..a3`` etc. are the *registers* (the
arguments); the ISA's element ``i`` is register ``i >> 1``, half ``i & 1``
(0 = low 16 bits). Each register as (row, columns) of its two elements::

    A 16x16 (row x k)       k 0..7          k 8..15
      rows g   (0..7)       a0 = (g, 2t..2t+1)     a2 = (g, 2t+8..2t+9)
      rows g+8 (8..15)      a1 = (g+8, 2t..2t+1)   a3 = (g+8, 2t+8..2t+9)

      row 0:  k  0 1 | 2 3 | 4 5 | 6 7 | 8 9 | .. | 14 15
              lane 0 | 1   | 2   | 3   | 0   | .. | 3        (a0 | a2)
      row 1:  lanes 4..7 likewise, ..., row 7: lanes 28..31; rows 8..15: a1, a3

    B 16x8 (k x n)          b0 = (k 2t..2t+1, n g)   b1 = (k 2t+8..2t+9, n g)

    C/D 16x8 (row x n), one float32 each
                            c0, c1 = (g, 2t), (g, 2t+1)
                            c2, c3 = (g+8, 2t), (g+8, 2t+1)
      row 0:  n  0 1 | 2 3 | 4 5 | 6 7
              lane 0 | 1   | 2   | 3

s8, m16n8k32 (PTX ISA, "... mma.m16n8k32" integer types): four bytes per
.b32 register, lowest k in the low byte; C/D as above, s32::

    A 16x32:  a0 = (g, 4t..4t+3)      a1 = (g+8, 4t..4t+3)
              a2 = (g, 4t+16..4t+19)  a3 = (g+8, 4t+16..4t+19)
    B 32x8:   b0 = (k 4t..4t+3, n g)  b1 = (k 4t+16..4t+19, n g)

:data:`A_ELEMS`, :data:`B_ELEMS` and :data:`C_ELEMS` hold this as data: per
element ``i``, its row and its column, each as ``(g or t, multiplier,
constant)``. :func:`a_elem`, :func:`b_elem` and :func:`c_elem` (device
functions) turn ``(lane, i)`` into ``(row, col)`` from that data, and are the
only place a lane becomes a coordinate; ``A_TABLE`` etc. are the same data
expanded per lane for the simulator twin and the tests.

The simulator twin (``NUMBA_ENABLE_CUDASIM=1``): each lane deposits its
registers in the warp's exchange of ``simwarp`` (one barrier per call, full
mask), and every lane assembles A, B and C from the 32 deposits through the
same layout, decodes the 16-bit (or 8-bit) inputs exactly (``bits.bf16_to_f32_np``, or
NumPy's float16), forms the products exactly in float64 (a product of two
bf16 or fp16 values fits in 22 bits of significand), sums the 16 products and
C in float64 and rounds the sum to float32 once. The hardware's order of
accumulation inside one MMA is not specified by the ISA (and its internal
precision is not documented either), so results on a GPU may differ from the
twin in the last bits of the float32 result; tests compare with a relative
tolerance of about 1e-6 of the result's scale. The s8 twin is exact
(int64 sums, wrapped to s32 as the instruction without ``.satfinite`` does).

On the CUDA target the MMA is a Numba ``@intrinsic`` that emits the PTX
instruction through llvmlite's ``InlineAsm``; ptxas for sm_90 turns it into
``HMMA.16816.F32.BF16`` (``HMMA.16816.F32`` for fp16, ``IMMA.16832.S8.S8``
for s8; ``tests/kernels/common/test_mma_ptx.py`` reads the SASS).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import config, cuda

from . import bits, simwarp, smem
from .launch import device_inline

M, N, K = 16, 8, 16  # the instruction's shape
WARP = 32

# ── the fragment layout, written once ─────────────────────────────────────────
#
# Per element i of a lane's fragment: (row term, col term), each term
# (which lane coordinate: "g" or "t", its multiplier, the constant added).
# Read with g = lane >> 2, t = lane & 3 as  coord = mult * g_or_t + const.
A_ELEMS = (  # A[row, k]: ISA elements 0..7, two per register a0..a3 (low half first)
    (("g", 1, 0), ("t", 2, 0)),
    (("g", 1, 0), ("t", 2, 1)),  # a0: row g,   k 2t, 2t+1
    (("g", 1, 8), ("t", 2, 0)),
    (("g", 1, 8), ("t", 2, 1)),  # a1: row g+8
    (("g", 1, 0), ("t", 2, 8)),
    (("g", 1, 0), ("t", 2, 9)),  # a2: row g,   k 2t+8, 2t+9
    (("g", 1, 8), ("t", 2, 8)),
    (("g", 1, 8), ("t", 2, 9)),  # a3: row g+8
)
B_ELEMS = (  # B[k, n]: registers b0, b1
    (("t", 2, 0), ("g", 1, 0)),
    (("t", 2, 1), ("g", 1, 0)),  # b0: k 2t, 2t+1,   n g
    (("t", 2, 8), ("g", 1, 0)),
    (("t", 2, 9), ("g", 1, 0)),  # b1: k 2t+8, 2t+9
)
C_ELEMS = (  # C[row, n] / D: c0..c3, one per register
    (("g", 1, 0), ("t", 2, 0)),
    (("g", 1, 0), ("t", 2, 1)),  # c0, c1: row g
    (("g", 1, 8), ("t", 2, 0)),
    (("g", 1, 8), ("t", 2, 1)),  # c2, c3: row g+8
)

# m16n8k32 with s8 inputs (A 16x32, B 32x8, C/D as above, s32): each .b32
# register holds four bytes, lowest k in the low byte.
K_S8 = 32
A_ELEMS_S8 = tuple(  # ISA elements 0..15, four per register a0..a3
    (("g", 1, 8 * ((i >> 2) & 1)), ("t", 4, (i & 3) + 16 * (i >> 3))) for i in range(16)
)  # a0: row g, k 4t..4t+3; a1: row g+8; a2: row g, k 4t+16..; a3: row g+8, k 4t+16..
B_ELEMS_S8 = tuple(
    (("t", 4, (i & 3) + 16 * (i >> 2)), ("g", 1, 0)) for i in range(8)
)  # b0: k 4t..4t+3, n g; b1: k 4t+16..4t+19


def _coord(term, lane):
    which, mult, const = term
    return mult * ((lane >> 2) if which == "g" else (lane & 3)) + const


def layout_table(elems) -> np.ndarray:
    """``table[lane, i] = (row, col)`` of element ``i`` held by ``lane``."""
    out = np.empty((WARP, len(elems), 2), dtype=np.int64)
    for lane in range(WARP):
        for i, (r, c) in enumerate(elems):
            out[lane, i] = (_coord(r, lane), _coord(c, lane))
    return out


A_TABLE = layout_table(A_ELEMS)  # (32, 8, 2)
B_TABLE = layout_table(B_ELEMS)  # (32, 4, 2)
C_TABLE = layout_table(C_ELEMS)  # (32, 4, 2)
A_TABLE_S8 = layout_table(A_ELEMS_S8)  # (32, 16, 2)
B_TABLE_S8 = layout_table(B_ELEMS_S8)  # (32, 8, 2)


# ldmatrix.x4 of a 16x16 A tile: lane L gives the address of one 8-element
# (16-byte) row: row L % 8 of 8x8 matrix L // 8, the matrices ordered as the
# A registers are (a0: rows 0..7 k 0..7, a1: rows 8..15 k 0..7, a2: rows
# 0..7 k 8..15, a3: rows 8..15 k 8..15). Register j of lane L then holds row
# L >> 2, columns 2 (L % 4) .. +1 of matrix j: exactly a_j of the MMA.
def _ldsm_a_row(lane):
    return (lane & 7) + 8 * ((lane >> 3) & 1), 8 * ((lane >> 4) & 1)


LDSM_A_TABLE = np.array([_ldsm_a_row(L) for L in range(WARP)])  # (32, 2): (row, col)
ldsm_a_row = device_inline(_ldsm_a_row)


def _elem_fn(elems):
    """A device function ``(lane, i) -> (row, col)`` reading ``elems``, split
    into per-element constant tuples: in a kernel ``i`` is a constant and the
    whole thing folds to shifts and adds."""
    rg = tuple(m if w == "g" else 0 for (w, m, _), _c in elems)
    rt = tuple(m if w == "t" else 0 for (w, m, _), _c in elems)
    rc = tuple(c for (_w, _m, c), _c in elems)
    cg = tuple(m if w == "g" else 0 for _r, (w, m, _) in elems)
    ct = tuple(m if w == "t" else 0 for _r, (w, m, _) in elems)
    cc = tuple(c for _r, (_w, _m, c) in elems)

    def elem(lane, i):
        g = lane >> 2
        t = lane & 3
        return rg[i] * g + rt[i] * t + rc[i], cg[i] * g + ct[i] * t + cc[i]

    return device_inline(elem)


a_elem = _elem_fn(A_ELEMS)
b_elem = _elem_fn(B_ELEMS)
c_elem = _elem_fn(C_ELEMS)
a_elem_s8 = _elem_fn(A_ELEMS_S8)
b_elem_s8 = _elem_fn(B_ELEMS_S8)


# ── loaders and store: the only users of a lane id ───────────────────────────

_U16 = np.uint32(16)


def make_a_loader(elem):
    """A loader of A fragments through the element map ``elem``
    (:data:`a_elem`; tests pass a wrong one to prove the check sees it)."""

    @device_inline
    def pair(X, r0, c0, lane, i):
        r, c = elem(lane, i)
        lo = np.uint32(X[r0 + r, c0 + c])
        r, c = elem(lane, i + 1)
        return lo | (np.uint32(X[r0 + r, c0 + c]) << _U16)

    @device_inline
    def load(X, r0, c0):
        lane = cuda.laneid
        return (pair(X, r0, c0, lane, 0), pair(X, r0, c0, lane, 2), pair(X, r0, c0, lane, 4), pair(X, r0, c0, lane, 6))

    return load


def make_b_loader(elem):
    """A loader of B fragments through the element map ``elem``. B is stored
    transposed, ``Bt[n, k]`` (the ``.col`` operand: k contiguous per column),
    as a weight matrix ``W[out, in]`` is."""

    @device_inline
    def pair(Bt, n0, k0, lane, i):
        k, n = elem(lane, i)
        lo = np.uint32(Bt[n0 + n, k0 + k])
        k, n = elem(lane, i + 1)
        return lo | (np.uint32(Bt[n0 + n, k0 + k]) << _U16)

    @device_inline
    def load(Bt, n0, k0):
        lane = cuda.laneid
        return pair(Bt, n0, k0, lane, 0), pair(Bt, n0, k0, lane, 2)

    return load


load_a_bf16 = make_a_loader(a_elem)
"""``(a0, a1, a2, a3)`` uint32 of ``A[r0:r0+16, k0:k0+16]`` (16-bit patterns,
any 2-D uint16 array); the same loader serves fp16."""
load_b_bf16 = make_b_loader(b_elem)
"""``(b0, b1)`` uint32 of ``B[k0:k0+16, n0:n0+8]`` from ``Bt[n, k]``."""
load_a_f16 = load_a_bf16
load_b_f16 = load_b_bf16


@device_inline
def load_a_ldsm(S, r0, k0):
    """As :func:`load_a_bf16`, from a shared-memory tile ``S`` (uint16,
    rows of at least 16-byte aligned 8-element runs) with one
    ``ldmatrix.x4``: the same four registers in one instruction."""
    r, c = ldsm_a_row(cuda.laneid)
    return ldmatrix_x4(S, r0 + r, k0 + c)


_U8 = np.uint32(8)
_U24 = np.uint32(24)


def _make_quad_s8(elem, FROM_BT: bool):
    """Four bytes of a fragment packed into one uint32, byte ``j`` from the
    ``i + j``-th element ``elem`` maps the lane to: ``(row, col)`` read as
    ``X[r0 + row, c0 + col]``, or with ``FROM_BT`` ``(k, n)`` read from
    ``Bt[n0 + n, k0 + k]`` (the first two arguments are then ``n0, k0``)."""

    @device_inline
    def byte(X, a0, b0, lane, i):
        u, v = elem(lane, i)
        if FROM_BT:
            return np.uint32(X[a0 + v, b0 + u])
        return np.uint32(X[a0 + u, b0 + v])

    @device_inline
    def quad(X, a0, b0, lane, i):
        return (
            byte(X, a0, b0, lane, i)
            | (byte(X, a0, b0, lane, i + 1) << _U8)
            | (byte(X, a0, b0, lane, i + 2) << _U16)
            | (byte(X, a0, b0, lane, i + 3) << _U24)
        )

    return quad


def make_a_loader_s8(elem):
    """A loader of s8 A fragments (m16n8k32) through the element map
    ``elem`` (:data:`a_elem_s8`), from bytes (a uint8 view of int8 data)."""
    quad = _make_quad_s8(elem, False)

    @device_inline
    def load(X, r0, c0):
        lane = cuda.laneid
        return (quad(X, r0, c0, lane, 0), quad(X, r0, c0, lane, 4), quad(X, r0, c0, lane, 8), quad(X, r0, c0, lane, 12))

    return load


def make_b_loader_s8(elem):
    """A loader of s8 B fragments from ``Bt[n, k]`` bytes."""
    quad = _make_quad_s8(elem, True)

    @device_inline
    def load(Bt, n0, k0):
        lane = cuda.laneid
        return quad(Bt, n0, k0, lane, 0), quad(Bt, n0, k0, lane, 4)

    return load


load_a_s8 = make_a_loader_s8(a_elem_s8)
"""``(a0, a1, a2, a3)`` uint32 of ``A[r0:r0+16, k0:k0+32]`` (a 2-D uint8 view
of int8 data)."""
load_b_s8 = make_b_loader_s8(b_elem_s8)
"""``(b0, b1)`` uint32 of ``B[k0:k0+32, n0:n0+8]`` from ``Bt[n, k]`` bytes."""


def _make_c_loader(cast):
    """A loader of the C fragment ``(c0, c1, c2, c3)`` of ``C[r0:r0+16, n0:n0+8]``
    as ``cast`` (float32 for the f32 accumulators, int32 for s32)."""

    @device_inline
    def load(C, r0, n0):
        lane = cuda.laneid
        r, c = c_elem(lane, 0)
        x0 = cast(C[r0 + r, n0 + c])
        r, c = c_elem(lane, 1)
        x1 = cast(C[r0 + r, n0 + c])
        r, c = c_elem(lane, 2)
        x2 = cast(C[r0 + r, n0 + c])
        r, c = c_elem(lane, 3)
        x3 = cast(C[r0 + r, n0 + c])
        return x0, x1, x2, x3

    return load


load_c_s32 = _make_c_loader(np.int32)
"""``(c0, c1, c2, c3)`` int32 of ``C[r0:r0+16, n0:n0+8]``."""
load_c = _make_c_loader(np.float32)
"""``(c0, c1, c2, c3)`` float32 of ``C[r0:r0+16, n0:n0+8]``."""


@device_inline
def store_c(D, r0, n0, d0, d1, d2, d3):
    """Write the D fragment ``(d0..d3)`` to ``D[r0:r0+16, n0:n0+8]``."""
    lane = cuda.laneid
    r, c = c_elem(lane, 0)
    D[r0 + r, n0 + c] = d0
    r, c = c_elem(lane, 1)
    D[r0 + r, n0 + c] = d1
    r, c = c_elem(lane, 2)
    D[r0 + r, n0 + c] = d2
    r, c = c_elem(lane, 3)
    D[r0 + r, n0 + c] = d3


# ── the simulator twin ───────────────────────────────────────────────────────


def _split(regs: np.ndarray, width: int) -> np.ndarray:
    """(32, R) uint32 registers -> (32, R * 32 // width) elements of ``width``
    bits (uint16 or uint8), lowest bits first."""
    regs = regs.astype(np.uint32)
    per = 32 // width
    out = np.empty((regs.shape[0], per * regs.shape[1]), dtype=np.uint16 if width == 16 else np.uint8)
    for j in range(per):
        out[:, j::per] = (regs >> np.uint32(j * width)) & np.uint32((1 << width) - 1)
    return out


def _scatter(table: np.ndarray, values: np.ndarray, shape) -> np.ndarray:
    out = np.zeros(shape, dtype=values.dtype)
    out[table[..., 0], table[..., 1]] = values
    return out


def _decode_bf16(h: np.ndarray) -> np.ndarray:
    return bits.bf16_to_f32_np(h).astype(np.float64)


def _decode_f16(h: np.ndarray) -> np.ndarray:
    return h.view(np.float16).astype(np.float64)


def _decode_s8(h: np.ndarray) -> np.ndarray:
    return h.view(np.int8).astype(np.int64)


class _Atom:
    """One MMA instruction as the twin sees it: its k, its A/B layouts, the
    width of an input element, how to decode one, and the accumulator type."""

    def __init__(self, k, a_table, b_table, width, decode, acc):
        self.k, self.a_table, self.b_table = k, a_table, b_table
        self.width, self.decode, self.acc = width, decode, acc

    def reference(self, a_regs, b_regs, c_regs) -> np.ndarray:
        """The warp's D registers, (32, 4), from every lane's A (32, 4) and B
        (32, 2) uint32 registers and C (32, 4)."""
        A = _scatter(self.a_table, self.decode(_split(np.asarray(a_regs), self.width)), (M, self.k))
        B = _scatter(self.b_table, self.decode(_split(np.asarray(b_regs), self.width)), (self.k, N))
        C = _scatter(C_TABLE, np.asarray(c_regs, dtype=self.acc).astype(A.dtype), (M, N))
        if self.acc == np.int32:
            # Exact in int64; without .satfinite the s32 result wraps.
            D = (A @ B + C).astype(np.uint64).astype(np.uint32).view(np.int32)
        else:
            # Products exact in float64; one rounding of the float64 sum.
            D = (A @ B + C).astype(np.float32)
        return D[C_TABLE[..., 0], C_TABLE[..., 1]]


BF16_16816 = _Atom(K, A_TABLE, B_TABLE, 16, _decode_bf16, np.float32)
F16_16816 = _Atom(K, A_TABLE, B_TABLE, 16, _decode_f16, np.float32)
S8_16832 = _Atom(K_S8, A_TABLE_S8, B_TABLE_S8, 8, _decode_s8, np.int32)


def _operands(buf, atom):
    """The warp's A, B and C registers, one row a lane, from the lanes'
    ``(a, b, c)`` deposits of a twin's exchange."""
    a = np.array([buf[i][1][0] for i in range(WARP)], dtype=np.uint32)
    b = np.array([buf[i][1][1] for i in range(WARP)], dtype=np.uint32)
    c = np.array([buf[i][1][2] for i in range(WARP)], dtype=atom.acc)
    return a, b, c


def _twin(kind, atom):
    def mma(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        regs = ((int(a0), int(a1), int(a2), int(a3)), (int(b0), int(b1)), (c0, c1, c2, c3))
        tile, members, lane = simwarp._exchange(kind, simwarp.FULL_MASK, regs, once=whole)
        if members != simwarp.FULL_MASK:
            raise simwarp.WarpSyncError(
                f"{kind}: mma.sync needs all 32 lanes of the warp; the block has lanes {members:#x}"
            )
        d = tile[lane]
        return d[0], d[1], d[2], d[3]

    def whole(buf, members):
        """The warp's D registers (32, 4), computed once by the last lane in
        from every lane's deposits."""
        if members != simwarp.FULL_MASK:
            return None  # each lane reports it
        return atom.reference(*_operands(buf, atom))

    mma.__name__ = kind
    return mma


def _ldmatrix_x4_twin(S, row, col):
    hook = simwarp.TRACE_HOOK
    if hook is not None:  # memory tracer: one 16-byte row per lane, as the instruction reads
        S = hook("load", S, int(row) * S.strides[0] + int(col) * S.strides[1], 16)
    buf, members, lane = simwarp._exchange("ldmatrix_x4", simwarp.FULL_MASK, (S, int(row), int(col)))
    if members != simwarp.FULL_MASK:
        raise simwarp.WarpSyncError("ldmatrix_x4: needs all 32 lanes of the warp")
    g, t = lane >> 2, lane & 3
    out = []
    for j in range(4):  # register j: row g of matrix j, from lane 8j + g's address
        src, r, c = buf[8 * j + g][1]
        lo, hi = int(src[r, c + 2 * t]), int(src[r, c + 2 * t + 1])
        out.append(np.uint32(lo | (hi << 16)))
    return out[0], out[1], out[2], out[3]


# ── the CUDA target ──────────────────────────────────────────────────────────


def _hw(instr: str, integer_acc: bool):
    """An @intrinsic emitting ``instr`` (A: 4 x .b32, B: 2 x .b32, C/D: 4 x
    f32 or s32) through inline PTX."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    asm_text = instr + " {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
    acc_c = "r" if integer_acc else "f"
    constraints = ",".join(["=" + acc_c] * 4 + ["r"] * 6 + [acc_c] * 4)

    def mma(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        regs, acc = (a0, a1, a2, a3, b0, b1), (c0, c1, c2, c3)
        if not all(isinstance(x, types.Integer) for x in regs):
            return None
        if not all(isinstance(x, (types.Float, types.Integer)) for x in acc):
            return None
        u32 = types.uint32
        at = types.int32 if integer_acc else types.float32
        # Arguments are cast to these types before codegen sees them.
        sig = types.UniTuple(at, 4)(u32, u32, u32, u32, u32, u32, at, at, at, at)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            a = i32 if integer_acc else ir.FloatType()
            fnty = ir.FunctionType(ir.LiteralStructType([a] * 4), [i32] * 6 + [a] * 4)
            res = builder.call(ir.InlineAsm(fnty, asm_text, constraints, side_effect=False), args)
            outs = [builder.extract_value(res, i) for i in range(4)]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    mma.__name__ = "mma_" + instr.split(".")[-4] + "_" + instr.split(".")[3]
    return intrinsic(mma)


def _ldmatrix_x4_hw():
    from llvmlite import ir
    from numba.cuda import cgutils, types
    from numba.cuda.extending import intrinsic

    # Numba's shared arrays hold generic pointers; ldmatrix wants a shared one.
    asm_text = (
        "{ .reg .u64 p; cvta.to.shared.u64 p, $4; ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0, $1, $2, $3}, [p]; }"
    )

    def ldmatrix_x4(typingctx, S, row, col):
        if not (isinstance(S, types.Array) and S.ndim == 2 and S.dtype.bitwidth == 16):
            return None
        if not (isinstance(row, types.Integer) and isinstance(col, types.Integer)):
            return None
        u32 = types.uint32
        sig = types.UniTuple(u32, 4)(S, types.intp, types.intp)

        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], args[2]])
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.LiteralStructType([i32] * 4), [ir.IntType(64)])
            asm = ir.InlineAsm(fnty, asm_text, "=r,=r,=r,=r,l,~{memory}", side_effect=True)
            res = builder.call(asm, [builder.ptrtoint(ptr, ir.IntType(64))])
            outs = [builder.extract_value(res, i) for i in range(4)]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    return intrinsic(ldmatrix_x4)


_BF16 = "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32"
_F16 = "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32"
_S8 = "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32"

if config.ENABLE_CUDASIM:
    # The simulator's exit hook lets a lane that waits report a lane that
    # returned without reaching the MMA, instead of hanging.
    simwarp.install()
    mma_bf16_16816 = _twin("mma_bf16_16816", BF16_16816)
    mma_f16_16816 = _twin("mma_f16_16816", F16_16816)
    mma_s8_16832 = _twin("mma_s8_16832", S8_16832)
    ldmatrix_x4 = _ldmatrix_x4_twin
else:
    ldmatrix_x4 = _ldmatrix_x4_hw()
    mma_bf16_16816 = _hw(_BF16, integer_acc=False)
    mma_f16_16816 = _hw(_F16, integer_acc=False)
    mma_s8_16832 = _hw(_S8, integer_acc=True)

mma_bf16_16816.__doc__ = f"""``{_BF16}``:
``(a0..a3, b0, b1: uint32 bf16 pairs, c0..c3: float32) -> (d0..d3) float32``."""
mma_f16_16816.__doc__ = f"""``{_F16}``:
as :func:`mma_bf16_16816` with fp16 pairs."""
mma_s8_16832.__doc__ = f"""``{_S8}``:
``(a0..a3, b0, b1: uint32 s8 quads, c0..c3: int32) -> (d0..d3) int32``
(wraps on overflow)."""
ldmatrix_x4.__doc__ = """``ldmatrix.sync.aligned.m8n8.x4.shared.b16``: ``(S, row, col) -> (r0..r3)``
uint32; each lane passes the address ``S[row, col]`` of one 8-element row
(lanes 8j..8j+7: rows 0..7 of matrix j) and gets row ``lane >> 2``, columns
``2 (lane % 4)`` and ``+1`` of matrix j in register j. Kernels use it through
:func:`load_a_ldsm`."""


# ── runs of instructions on a GEMM's swizzled stages ─────────────────────────
#
# The mma.sync mainloop (``common/gemm/mma_sync.py``) reads its fragments
# with ``ldmatrix`` from 128-byte-swizzled stages addressed by shared-window
# address (``wgmma.smem_addr``, the stage's start rounded up to 1024 bytes),
# and keeps its accumulators as one tuple in wgmma's layout (per 8 columns,
# one m16n8 C fragment). A warp's share of one K step is then one ``ldmatrix``
# for A, ``n / 16`` for B and ``n / 8`` MMAs, each run one call: its twin is
# one exchange of the warp, not one per instruction.


def _twin_ldsm_run(count: int, stride: int):
    def ldsm(addr):
        addr = int(addr)
        rows = [smem.twin_read_shared(addr + i * stride, 16, "ldmatrix") for i in range(count)]
        buf, members, lane = simwarp._exchange("ldsm_run", simwarp.FULL_MASK, rows)
        if members != simwarp.FULL_MASK:
            raise simwarp.WarpSyncError("ldmatrix: needs all 32 lanes of the warp")
        g, t = lane >> 2, lane & 3
        out = []
        for i in range(count):  # register j of instruction i: row g of matrix j, from lane 8j + g's row
            for j in range(4):
                out.append(np.uint32(buf[8 * j + g][1][i][4 * t : 4 * t + 4].view(np.uint32)[0]))
        return tuple(out)

    ldsm.__name__ = f"ldsm_x4_run{count}"
    return ldsm


def _hw_ldsm_run(count: int, stride: int):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    text = "ldmatrix.sync.aligned.m8n8.x4.shared.b16 {$0, $1, $2, $3}, [$4];"

    def ldsm(typingctx, addr):
        if not isinstance(addr, types.Integer):
            return None
        sig = types.UniTuple(types.uint32, 4 * count)(types.uint32)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            fnty = ir.FunctionType(ir.LiteralStructType([i32] * 4), [i32])
            # the memory clobber keeps each load below the wait and barrier that publish its stage
            asm = ir.InlineAsm(fnty, text, "=r,=r,=r,=r,r,~{memory}", side_effect=True)
            outs = []
            for i in range(count):
                res = builder.call(asm, [builder.add(args[0], ir.Constant(i32, i * stride))])
                outs += [builder.extract_value(res, j) for j in range(4)]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    ldsm.__name__ = f"ldsm_x4_run{count}"
    return intrinsic(ldsm)


@lru_cache(maxsize=None)
def ldsm_run(count: int, stride: int):
    """``regs = ldsm_run(count, stride)(addr)``: ``count`` x
    ``ldmatrix.sync.aligned.m8n8.x4.shared.b16``, instruction ``i`` at
    shared-window address ``addr + i * stride`` (``addr``: this lane's row,
    lanes 8j..8j+7 giving matrix j's eight rows); ``regs`` are the
    ``4 * count`` uint32, instruction ``i``'s registers at ``4i .. 4i + 3``.
    ``count`` and ``stride`` are compile-time constants."""
    if count < 1 or stride % 16:
        raise ValueError(f"ldsm_run: count {count} >= 1 and a 16-byte-multiple stride, not {stride}")
    return _twin_ldsm_run(count, stride) if config.ENABLE_CUDASIM else _hw_ldsm_run(count, stride)


RUN_KINDS = {"bf16": (BF16_16816, _BF16), "f16": (F16_16816, _F16), "s8": (S8_16832, _S8)}


def _twin_mma_run(kind: str, n: int):
    atom = RUN_KINDS[kind][0]
    name = f"mma_run_{kind}_n{n}"

    def run(a, b, acc):
        regs = (tuple(int(x) for x in a), tuple(int(x) for x in b), tuple(acc))
        tile, members, lane = simwarp._exchange(name, simwarp.FULL_MASK, regs, once=whole)
        if members != simwarp.FULL_MASK:
            raise simwarp.WarpSyncError(f"{name}: mma.sync needs all 32 lanes of the warp; the block has {members:#x}")
        return tuple(tile[lane])

    def whole(buf, members):
        """Every lane's results (32, n // 2), computed once by the last lane in."""
        if members != simwarp.FULL_MASK:
            return None  # each lane reports it
        A, B, C = _operands(buf, atom)
        parts = [atom.reference(A, B[:, 2 * j : 2 * j + 2], C[:, 4 * j : 4 * j + 4]) for j in range(n // 8)]
        return np.concatenate(parts, axis=1)

    run.__name__ = name
    return run


def _hw_mma_run(kind: str, n: int):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    atom, instr = RUN_KINDS[kind]
    integer = atom.acc == np.int32
    at = types.int32 if integer else types.float32
    h = n // 2
    text = instr + " {$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};"
    acc_c = "r" if integer else "f"
    cons = ",".join(["=" + acc_c] * 4 + ["r"] * 6 + [acc_c] * 4)

    def run(typingctx, a, b, acc):
        if not (isinstance(a, types.UniTuple) and a.count == 4 and isinstance(a.dtype, types.Integer)):
            return None
        if not (isinstance(b, types.UniTuple) and b.count == n // 4 and isinstance(b.dtype, types.Integer)):
            return None
        if not (isinstance(acc, types.UniTuple) and acc.count == h and acc.dtype == at):
            return None
        sig = acc(a, b, acc)

        def codegen(context, builder, signature, args):
            i32 = ir.IntType(32)
            av = ir.IntType(32) if integer else ir.FloatType()
            fnty = ir.FunctionType(ir.LiteralStructType([av] * 4), [i32] * 6 + [av] * 4)
            asm = ir.InlineAsm(fnty, text, cons, side_effect=False)
            ra = [builder.extract_value(args[0], i) for i in range(4)]
            outs = []
            for j in range(n // 8):
                rb = [builder.extract_value(args[1], 2 * j + e) for e in range(2)]
                rc = [builder.extract_value(args[2], 4 * j + e) for e in range(4)]
                res = builder.call(asm, ra + rb + rc)
                outs += [builder.extract_value(res, e) for e in range(4)]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    run.__name__ = f"mma_run_{kind}_n{n}"
    return intrinsic(run)


@lru_cache(maxsize=None)
def mma_run(kind: str, n: int):
    """``acc = mma_run(kind, n)(a, b, acc)``: a warp's 16 x ``n`` slice as
    ``n / 8`` MMAs (m16n8k16 bf16/f16, m16n8k32 s8) sharing one A fragment
    ``a`` (4 uint32): slice ``j`` takes B registers ``b[2j], b[2j + 1]``
    and accumulators ``acc[4j .. 4j + 3]`` (float32, int32 for s8): wgmma's
    accumulator layout over the warp's 16 rows."""
    if kind not in RUN_KINDS:
        raise ValueError(f"mma_run: kind {kind!r}, one of {tuple(RUN_KINDS)}")
    if n < 8 or n % 8:
        raise ValueError(f"mma_run: n={n} is not a positive multiple of 8")
    return _twin_mma_run(kind, n) if config.ENABLE_CUDASIM else _hw_mma_run(kind, n)
