"""Hopper warpgroup MMA (``wgmma.mma_async``, sm_90a) callable from
``@cuda.jit`` kernels: the instruction, its fences, and the shared-memory
matrix descriptors its operands are read through.

One *warpgroup* (four consecutive warps, 128 threads, the first warp's
index a multiple of 4) computes ``D = A @ B + scale_d * D`` for

* ``m64n8k16``, bf16 inputs, f32 accumulators: A 64x16, B 16x8, D 64x8;
* ``m64n8k32``, E4M3 (FP8) inputs, f32 accumulators: A 64x32, B 32x8.

A and B both come from shared memory through 64-bit matrix descriptors;
D lives in registers, four float32 per thread (64 * 8 / 128). The sequence
in a kernel, every thread of the warpgroup taking part::

    # shared tiles written by ordinary stores, then made visible to the
    # async proxy the tensor cores read through:
    fence_proxy_async()
    cuda.syncthreads()
    da = make_desc(smem_addr(As), LBO, SBO, SWIZZLE_NONE)
    db = make_desc(smem_addr(Bs), LBO, SBO, SWIZZLE_NONE)
    wgmma_fence()                 # wgmma.fence.sync.aligned
    d = wgmma_m64n8k16_bf16(da, db, d0, d1, d2, d3, 1, 1, 1, 0, 0)
    wgmma_commit_group()          # wgmma.commit_group.sync.aligned
    wgmma_wait_group(0)           # wgmma.wait_group.sync.aligned 0
    # d[0..3] may be read now, not before

Operands of ``wgmma_m64n8k16_bf16(da, db, d0..d3, scale_d, scale_a,
scale_b, tnsp_a, tnsp_b)``: ``scale_d`` is a run-time integer (0: D = A@B,
C ignored; else D = A@B + D), turned into the predicate operand with
``setp.ne.b32``; ``scale_a``/``scale_b`` (``imm-scale-a/b``, 1 or -1) and
``tnsp_a``/``tnsp_b`` (``imm-trans-a/b``, 0: K-major, 1: transposed) are
immediates in the instruction, so they must be integer constants in the
kernel. The E4M3 form takes no transpose operands (the ISA allows only
K-major for 8-bit types): ``wgmma_m64n8k32_e4m3(da, db, d0..d3, scale_d,
scale_a, scale_b)``.

Accumulator layout (PTX ISA, "Register Fragments ... wgmma .m64nNk16"),
per thread ``tid`` of the warpgroup, ``w = tid // 32`` (warp in the
group), ``g = (tid % 32) >> 2``, ``t = tid % 4``::

    d0, d1 = D[16w + g,     2t], D[16w + g,     2t + 1]
    d2, d3 = D[16w + g + 8, 2t], D[16w + g + 8, 2t + 1]

that is, each warp holds a 16x8 slice of D laid out as ``mma.sync``'s
m16n8 C fragment (``mma.C_ELEMS``); :func:`store_d` writes it.

Matrix descriptor (64 bits; PTX ISA "Matrix Descriptor Format" for
wgmma)::

    bits  0-13  start address of the matrix in shared memory, >> 4
    bits 16-29  leading-dimension byte offset (LBO), >> 4
    bits 32-45  stride-dimension byte offset (SBO), >> 4
    bits 49-51  base offset (0 here: only the swizzled modes use it)
    bits 62-63  swizzle mode: 0 none ("interleave"), 1 128-byte,
                2 64-byte, 3 32-byte

Everything here uses mode 0, no swizzle, the simplest layout the ISA
allows. Both operands are K-major (A row-major 64 x K, B stored as
``Bt[n, k]``), and in mode 0 the matrix is tiled into *core matrices* of
8 rows x 16 bytes (8 bf16 or 16 e4m3 along K), each stored as 128
contiguous bytes, row after row. Core matrix ``(i, j)`` (rows 8i..8i+7,
K bytes 16j..16j+15) starts at ``i * SBO + j * LBO`` bytes from the start
address: LBO steps along K (the leading dimension), SBO along M or N. The
tiles used here put the K neighbours next to each other: LBO = 128 bytes,
SBO = 2 * 128 = 256 bytes (two core matrices span K = 16 bf16 or 32
e4m3). :func:`core_offset` gives an element's byte offset in that layout;
a kernel fills the tile through it. All addresses must be 16-byte aligned.

:func:`smem_addr` turns a shared array into its 32-bit shared-window
address with ``cvta.to.shared.u64`` (inline PTX); :func:`make_desc` packs
the descriptor (a device function, ordinary integer arithmetic).

On the CUDA target each instruction is a Numba ``@intrinsic`` emitting the
PTX through llvmlite's ``InlineAsm``. ``wgmma`` exists only on sm_90a, not
sm_90: numba-cuda compiles the module to PTX (inline asm is not checked
there), and the PTX is assembled with ``ptxas -arch=sm_90a``, which turns
the bf16 form into ``HGMMA.64x8x16.F32.BF16`` and the E4M3 form into
``QGMMA.64x8x32.F32.E4M3.E4M3`` (``tests/kernels/common/test_wgmma_ptx.py``).
Under ``NUMBA_ENABLE_CUDASIM`` a twin stands in (see "the simulator twin"
below): it reads A and B from the simulated shared arrays through the same
descriptors; shared arrays take ``alignment=SMEM_ALIGN`` (128 on the CUDA
target, None in the simulator, which refuses alignments).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import config, cuda

from . import bits, ptx_stmt, simwarp, smem, unroll
from . import mma as warp_mma
from .launch import device_inline
from .smem import smem_addr, st_shared_v4  # noqa: F401 (the kernels' wg.smem_addr, wg.st_shared_v4)

M, N = 64, 8  # the instruction's shape (both forms)
K_BF16, K_E4M3 = 16, 32
WARPGROUP = 128

SWIZZLE_NONE, SWIZZLE_128B, SWIZZLE_64B, SWIZZLE_32B = 0, 1, 2, 3
CORE_ROWS, CORE_BYTES = 8, 16  # a core matrix: 8 rows of 16 bytes, 128 contiguous bytes
LBO = 128  # bytes between core matrices adjacent along K (no swizzle, K-major)
SBO = 256  # bytes between core matrices adjacent along M/N (two along K per 8 rows)


def make_desc_np(addr: int, lbo: int, sbo: int, swizzle: int = SWIZZLE_NONE) -> int:
    """The descriptor as a Python int (host side, for tests)."""
    return (
        ((addr >> 4) & 0x3FFF) | (((lbo >> 4) & 0x3FFF) << 16) | (((sbo >> 4) & 0x3FFF) << 32) | ((swizzle & 3) << 62)
    )


_M14 = np.uint64(0x3FFF)


@device_inline
def make_desc(addr, lbo, sbo, swizzle):
    """``uint64`` matrix descriptor from a shared-window address and the two
    byte offsets (all multiples of 16) and the swizzle mode; the layout is in
    the module docstring."""
    a = (np.uint64(addr) >> np.uint64(4)) & _M14
    l_ = (np.uint64(lbo) >> np.uint64(4)) & _M14
    s = (np.uint64(sbo) >> np.uint64(4)) & _M14
    return a | (l_ << np.uint64(16)) | (s << np.uint64(32)) | ((np.uint64(swizzle) & np.uint64(3)) << np.uint64(62))


@device_inline
def core_offset(row, kbyte, lbo, sbo):
    """Byte offset of (``row``, byte ``kbyte`` along K) in a K-major tile
    without swizzle: core matrix (row // 8, kbyte // 16) at ``SBO * i + LBO *
    j``, then 16 bytes per row inside it."""
    return (row >> 3) * sbo + (kbyte >> 4) * lbo + (row & 7) * CORE_BYTES + (kbyte & 15)


@device_inline
def store_d(D, r0, n0, d0, d1, d2, d3):
    """Write a warpgroup's accumulators to ``D[r0:r0+64, n0:n0+8]``."""
    tid = cuda.threadIdx.x & 127
    r = r0 + 16 * (tid >> 5) + ((tid & 31) >> 2)
    c = n0 + 2 * (tid & 3)
    D[r, c] = d0
    D[r, c + 1] = d1
    D[r + 8, c] = d2
    D[r + 8, c + 1] = d3


# ── the CUDA target ──────────────────────────────────────────────────────────


def _mma(shape_types: str, transposable: bool):
    """An @intrinsic for ``wgmma.mma_async.sync.aligned.<shape_types>`` with
    four f32 accumulators (tied in and out), two descriptors, a run-time
    scale-d and the immediates as integer literals."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    instr = "wgmma.mma_async.sync.aligned." + shape_types

    def typer(da, db, d0, d1, d2, d3, scale_d, scale_a, scale_b, tnsp):
        if not (isinstance(da, types.Integer) and isinstance(db, types.Integer)):
            return None
        if not all(isinstance(x, (types.Float, types.Integer)) for x in (d0, d1, d2, d3)):
            return None
        if not isinstance(scale_d, types.Integer):
            return None
        imms = (scale_a, scale_b, *tnsp)
        if not all(isinstance(x, types.IntegerLiteral) for x in imms):
            return None
        sa, sb, *tr = (int(x.literal_value) for x in imms)
        if sa not in (1, -1) or sb not in (1, -1) or any(x not in (0, 1) for x in tr):
            return None
        tail = ", ".join(str(x) for x in (sa, sb, *tr))
        text = f"{{\n.reg .pred p;\nsetp.ne.b32 p, $6, 0;\n{instr} {{$0, $1, $2, $3}}, $4, $5, p, {tail};\n}}"
        f32, u64 = types.float32, types.uint64
        sig = types.UniTuple(f32, 4)(u64, u64, f32, f32, f32, f32, types.int32, *imms)

        def codegen(context, builder, signature, args):
            i64, i32, f = ir.IntType(64), ir.IntType(32), ir.FloatType()
            fnty = ir.FunctionType(ir.LiteralStructType([f] * 4), [i64, i64, i32, f, f, f, f])
            cons = "=f,=f,=f,=f,l,l,r,0,1,2,3,~{memory}"
            da_, db_, c0, c1, c2, c3, sd = args[:7]
            res = builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), [da_, db_, sd, c0, c1, c2, c3])
            outs = [builder.extract_value(res, i) for i in range(4)]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    if transposable:

        def wgmma(typingctx, da, db, d0, d1, d2, d3, scale_d, scale_a, scale_b, tnsp_a, tnsp_b):
            return typer(da, db, d0, d1, d2, d3, scale_d, scale_a, scale_b, (tnsp_a, tnsp_b))
    else:

        def wgmma(typingctx, da, db, d0, d1, d2, d3, scale_d, scale_a, scale_b):
            return typer(da, db, d0, d1, d2, d3, scale_d, scale_a, scale_b, ())

    wgmma.__name__ = "wgmma_" + shape_types.split(".")[0] + "_" + shape_types.split(".")[-1]
    return intrinsic(wgmma)


_BF16 = "m64n8k16.f32.bf16.bf16"
_E4M3 = "m64n8k32.f32.e4m3.e4m3"

# ── any N: one instruction shape per (input type, N) ─────────────────────────
#
# The instruction exists for N = 8, 16, ..., 256; a thread holds N / 2
# accumulators, as a tuple (``UniTuple(float32, N // 2)``): element ``4j +
# e`` of it is, with ``w``, ``g``, ``t`` as for N = 8,
#
#     e = 0, 1:  D[16w + g,     8j + 2t + e]
#     e = 2, 3:  D[16w + g + 8, 8j + 2t + e - 2]
#
# i.e. the N = 8 layout repeated for each 8-column slice ``j``. A tuple, not a
# local array: its elements are registers by construction (inline asm takes
# and gives SSA values), where a local array would stay in local memory
# unless every access were unrolled to a constant index.

# input type -> (K of one instruction, bytes per element, PTX type suffix, transposable)
FORMS = {
    "bf16": (16, 2, "f32.bf16.bf16", True),
    "f16": (16, 2, "f32.f16.f16", True),
    "e4m3": (32, 1, "f32.e4m3.e4m3", False),
}


def check_shape(dtype: str, n: int) -> None:
    if dtype not in FORMS:
        raise ValueError(f"wgmma input type {dtype!r}: one of {', '.join(FORMS)}")
    if not (8 <= n <= 256 and n % 8 == 0):
        raise ValueError(f"wgmma N={n}: a multiple of 8 from 8 to 256")


def k_of(dtype: str) -> int:
    """K of one instruction for ``dtype`` (16 for bf16/f16, 32 for E4M3)."""
    return FORMS[dtype][0]


def _mma_n(dtype: str, n: int):
    """The @intrinsic for ``wgmma.mma_async ... m64n<n>k<K>`` taking and
    returning the accumulator tuple."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    k, _esize, suffix, transposable = FORMS[dtype]
    h = n // 2
    instr = f"wgmma.mma_async.sync.aligned.m64n{n}k{k}.{suffix}"
    acc_t = types.UniTuple(types.float32, h)

    def typer(da, db, acc, scale_d, imms):
        if not (isinstance(da, types.Integer) and isinstance(db, types.Integer)):
            return None
        if not (isinstance(acc, types.UniTuple) and acc.count == h and acc.dtype == types.float32):
            return None
        if not isinstance(scale_d, types.Integer):
            return None
        if not all(isinstance(x, types.IntegerLiteral) for x in imms):
            return None
        sa, sb, *tr = (int(x.literal_value) for x in imms)
        if sa not in (1, -1) or sb not in (1, -1) or any(x not in (0, 1) for x in tr):
            return None
        regs = ", ".join(f"${i}" for i in range(h))
        tail = ", ".join(str(x) for x in (sa, sb, *tr))
        text = f"{{\n.reg .pred p;\nsetp.ne.b32 p, ${h + 2}, 0;\n{instr} {{{regs}}}, ${h}, ${h + 1}, p, {tail};\n}}"
        sig = acc_t(types.uint64, types.uint64, acc_t, types.int32, *imms)

        def codegen(context, builder, signature, args):
            i64, i32, f = ir.IntType(64), ir.IntType(32), ir.FloatType()
            fnty = ir.FunctionType(ir.LiteralStructType([f] * h), [i64, i64, i32] + [f] * h)
            cons = ",".join(["=f"] * h + ["l", "l", "r"] + [str(i) for i in range(h)] + ["~{memory}"])
            da_, db_, tup, sd = args[:4]
            ins = [builder.extract_value(tup, i) for i in range(h)]
            res = builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), [da_, db_, sd, *ins])
            outs = [builder.extract_value(res, i) for i in range(h)]
            return context.make_tuple(builder, signature.return_type, outs)

        return sig, codegen

    if transposable:

        def wgmma(typingctx, da, db, acc, scale_d, scale_a, scale_b, tnsp_a, tnsp_b):
            return typer(da, db, acc, scale_d, (scale_a, scale_b, tnsp_a, tnsp_b))
    else:

        def wgmma(typingctx, da, db, acc, scale_d, scale_a, scale_b):
            return typer(da, db, acc, scale_d, (scale_a, scale_b))

    wgmma.__name__ = f"wgmma_m64n{n}k{k}_{dtype}"
    return intrinsic(wgmma)


def _wait_acc():
    """``acc = wait_acc(n, acc)``: ``wgmma.wait_group.sync.aligned n`` with
    every accumulator register tied through it (read and written by the
    asm), so the compiler cannot move arithmetic on them above the wait."""
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    def wait_acc(typingctx, n, acc):
        if not isinstance(n, types.IntegerLiteral):
            return None
        if not (isinstance(acc, types.UniTuple) and acc.dtype == types.float32):
            return None
        h = acc.count
        text = f"wgmma.wait_group.sync.aligned {int(n.literal_value)};"

        def codegen(context, builder, signature, args):
            f = ir.FloatType()
            fnty = ir.FunctionType(ir.LiteralStructType([f] * h), [f] * h)
            cons = ",".join(["=f"] * h + [str(i) for i in range(h)] + ["~{memory}"])
            ins = [builder.extract_value(args[1], i) for i in range(h)]
            res = builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), ins)
            return context.make_tuple(builder, signature.return_type, [builder.extract_value(res, i) for i in range(h)])

        return acc(n, acc), codegen

    return intrinsic(wait_acc)


def _zeros_n(n: int, integer: bool = False):
    from llvmlite import ir
    from numba.cuda import types
    from numba.cuda.extending import intrinsic

    h = n // 2

    def acc_zeros(typingctx):
        sig = types.UniTuple(types.int32 if integer else types.float32, h)()

        def codegen(context, builder, signature, args):
            zero = ir.Constant(ir.IntType(32), 0) if integer else ir.Constant(ir.FloatType(), 0.0)
            return context.make_tuple(builder, signature.return_type, [zero] * h)

        return sig, codegen

    acc_zeros.__name__ = f"acc_zeros_{n}"
    return intrinsic(acc_zeros)


# ── the accumulator layout, written once ────────────────────────────────────
#
# Accumulator ``i`` of thread ``tid`` of the warpgroup (``n // 2`` of them
# for an N = ``n`` instruction or run): slice ``j = i >> 2`` (columns 8j ..
# 8j + 7) holds warp ``w``'s 16 x 8 block as ``mma.sync``'s m16n8 C fragment,
# register ``i & 3`` of it. As data (``mma.C_ELEMS`` for the fragment, plus
# the warp's 16 rows and the slice's 8 columns):
ACC_WARP_ROWS = 16  # rows per warp: row += 16 * w
ACC_SLICE_COLS = 8  # columns per slice: col += 8 * (i >> 2)


def acc_table(n: int) -> np.ndarray:
    """(128, n // 2, 2): per thread and accumulator, (row, col) in the
    warpgroup's 64 x ``n`` tile: the layout as data, for the tests and the
    twins."""
    frag = warp_mma.C_TABLE  # (32, 4, 2)
    out = np.empty((WARPGROUP, n // 2, 2), dtype=np.int64)
    for tid in range(WARPGROUP):
        for i in range(n // 2):
            r, c = frag[tid & 31, i & 3]
            out[tid, i] = (ACC_WARP_ROWS * (tid >> 5) + r, ACC_SLICE_COLS * (i >> 2) + c)
    return out


@device_inline
def acc_elem(tid, i):
    """(row, col) of accumulator ``i`` of thread ``tid`` (0..127) in the
    warpgroup's tile, read from the fragment layout (``mma.c_elem``)."""
    r, c = warp_mma.c_elem(tid & 31, i & 3)
    return ACC_WARP_ROWS * ((tid >> 5) & 3) + r, ACC_SLICE_COLS * (i >> 2) + c


@device_inline
def _put(i, v, at):
    D, m, ncols, r0, n0, tid = at
    r, c = acc_elem(tid, i)
    if r0 + r < m and n0 + c < ncols:
        D[r0 + r, n0 + c] = v


@device_inline
def store(D, m, ncols, r0, n0, acc):
    """A warpgroup's accumulators (a tuple, ``n // 2`` per thread) to
    ``D[r0:r0+64, n0:n0+n]`` through :func:`acc_elem`, the elements at or past
    row ``m`` or column ``ncols`` left out; each value converted to ``D``'s
    type on the store (``unroll.each``: one store per accumulator)."""
    unroll.each(_put, acc, (D, m, ncols, r0, n0, cuda.threadIdx.x & 127))


def make_store(n: int):
    """:func:`store`, for ``n`` columns (one device function serves every
    ``n``: the tuple's length is its type)."""
    check_shape("bf16", n)
    return store


# ── the simulator twin ───────────────────────────────────────────────────────
#
# Shared arrays in the simulator get 1024-byte-aligned addresses from
# ``smem.smem_addr``'s registry, so that an MMA can find the bytes a
# descriptor points at. The MMA reads A and B
# through the descriptor (start, LBO, SBO, no swizzle, K-major), decodes the
# inputs exactly into float64, and each thread computes its own four
# accumulators: D[r, c] depends on C[r, c] only, so no thread needs another's
# registers. Sums in float64, one rounding to float32; the hardware's order
# and internal precision are not specified, so a GPU may differ in the last
# bits. Not modelled: the 128 threads' alignment (each thread computes on
# its own), the async proxy (the fences are no-ops), transposed operands
# (tnsp 1 raises), the 64- and 32-byte swizzles (raise; the 128-byte one is
# modelled).


@lru_cache(maxsize=1 << 12)
def _tile_offsets(desc: int, rows: int, kbytes: int) -> np.ndarray:
    """The shared addresses of the (rows, kbytes) K-major operand ``desc``
    points at: without swizzle through core matrices (start, LBO, SBO);
    with the 128-byte swizzle (mode 1) rows 128 bytes apart in 8-row atoms
    SBO apart, the address's bits 4-6 XORed with its bits 7-9 (absolute
    addresses: the twin's shared arrays start on 1024-byte boundaries, as a
    swizzled tile must). A kernel's descriptors are few: each is worked out
    once."""
    start = (desc & 0x3FFF) << 4
    lbo = ((desc >> 16) & 0x3FFF) << 4
    sbo = ((desc >> 32) & 0x3FFF) << 4
    mode = desc >> 62
    r = np.arange(rows)[:, None]
    kb = np.arange(kbytes)[None, :]
    if mode == SWIZZLE_NONE:
        off = start + (r >> 3) * sbo + (kb >> 4) * lbo + (r & 7) * CORE_BYTES + (kb & 15)
    elif mode == SWIZZLE_128B:
        off = start + (r >> 3) * sbo + (r & 7) * 128 + kb
        off = off ^ (((off >> 7) & 7) << 4)
    else:
        raise NotImplementedError("wgmma twin: only the no-swizzle (0) and 128-byte (1) layouts")
    off.setflags(write=False)
    return off


def _tile_bytes(desc: int, rows: int, kbytes: int, take=None) -> np.ndarray:
    """(rows, kbytes) uint8 of the K-major operand ``desc`` points at
    (:func:`_tile_offsets`), or of its rows ``take`` alone: a thread's
    accumulators need two rows of A and a quarter of B's."""
    off = _tile_offsets(desc, rows, kbytes)
    if take is not None:
        off = off[take]
    out = np.empty(off.shape, dtype=np.uint8)
    regions = smem.regions()
    lo, hi = int(off.min()), int(off.max())
    for addr, arr in regions:  # the usual case, one array holds the tile: integer tests only
        if addr <= lo and hi < addr + arr.nbytes:
            return np.asarray(arr).reshape(-1).view(np.uint8)[off - addr]
    for addr, arr in regions:
        raw = np.asarray(arr).reshape(-1).view(np.uint8)
        inside = (off >= addr) & (off < addr + raw.size)
        out[inside] = raw[off[inside] - addr]
        if inside.all():
            return out
    covered = [(a, a + x.nbytes) for a, x in regions]
    raise IndexError(f"wgmma twin: descriptor bytes {lo}..{hi} not in one shared array {covered}")


_E4M3_F64: list = []  # the 256 codes' values, from bits.e4m3_to_f32 (callable in the simulator)


def _decode_bf16(b: np.ndarray) -> np.ndarray:
    return bits.bf16_to_f32_np(b.view(np.uint16)).astype(np.float64)


def _decode_e4m3(b: np.ndarray) -> np.ndarray:
    if not _E4M3_F64:
        _E4M3_F64.append(np.array([float(bits.e4m3_to_f32(np.uint8(c))) for c in range(256)]))
    return _E4M3_F64[0][b]


def _twin_mma(name, dtype):
    """The N = 8 form with four scalar accumulators, through :func:`_twin_op`."""
    general = _twin_op(dtype, N)

    def mma(da, db, d0, d1, d2, d3, scale_d, scale_a, scale_b, tnsp_a=0, tnsp_b=0):
        return general(da, db, (d0, d1, d2, d3), scale_d, scale_a, scale_b, tnsp_a, tnsp_b)

    mma.__name__ = name
    return mma


def _twin_op(dtype: str, n: int):
    k, esize, _suffix, _tr = FORMS[dtype]
    decode = _decode_e4m3 if dtype == "e4m3" else (_decode_f16 if dtype == "f16" else _decode_bf16)
    js = np.arange(n // 8)

    def mma(da, db, acc, scale_d, scale_a, scale_b, tnsp_a=0, tnsp_b=0):
        if tnsp_a or tnsp_b:
            raise NotImplementedError(f"wgmma {dtype} twin: transposed operands")
        t = simwarp.current_lane()
        x, y, z = t.threadIdx
        bx, by, _bz = t._manager._block_dim
        tid = (x + bx * (y + by * z)) & (WARPGROUP - 1)
        r = 16 * (tid >> 5) + ((tid & 31) >> 2)
        cols = (8 * js[:, None] + 2 * (tid & 3) + np.arange(2)[None, :]).reshape(-1)  # j-major, e minor
        A = decode(_tile_bytes(int(da), M, k * esize, [r, r + 8])) * float(scale_a)  # this thread's rows
        Bt = decode(_tile_bytes(int(db), n, k * esize, cols)) * float(scale_b)  # and columns
        prod = A @ Bt.T  # (2, n // 4): rows r, r + 8
        # tuple order: for each j, (r, e=0), (r, e=1), (r+8, e=0), (r+8, e=1)
        val = prod.reshape(2, n // 8, 2).transpose(1, 0, 2).reshape(-1)
        if scale_d:
            val = val + np.asarray(acc, dtype=np.float64)
        return tuple(np.float32(v) for v in val)

    mma.__name__ = f"wgmma_m64n{n}k{k}_{dtype}"
    return mma


def _decode_f16(b: np.ndarray) -> np.ndarray:
    return b.view(np.float16).astype(np.float64)


def _nothing(*_args):
    return None


def _twin_wait_acc(n, acc):
    return acc


if config.ENABLE_CUDASIM:
    SMEM_ALIGN = None  # the simulator refuses an alignment; the twin aligns its own addresses
    wgmma_fence = _nothing
    wgmma_commit_group = _nothing
    wgmma_wait_group = _nothing
    wait_acc = _twin_wait_acc
    fence_proxy_async = _nothing
    wgmma_m64n8k16_bf16 = _twin_mma("wgmma_m64n8k16_bf16", "bf16")
    wgmma_m64n8k32_e4m3 = _twin_mma("wgmma_m64n8k32_e4m3", "e4m3")
else:
    SMEM_ALIGN = 128  # a descriptor's addresses are 16-byte aligned; 128 keeps core matrices whole
    wgmma_fence = ptx_stmt.void("wgmma.fence.sync.aligned;", "wgmma_fence")
    wgmma_commit_group = ptx_stmt.void("wgmma.commit_group.sync.aligned;", "wgmma_commit_group")
    wgmma_wait_group = ptx_stmt.void_n("wgmma.wait_group.sync.aligned {n};", "wgmma_wait_group")
    wait_acc = _wait_acc()
    fence_proxy_async = ptx_stmt.void("fence.proxy.async.shared::cta;", "fence_proxy_async")
    wgmma_m64n8k16_bf16 = _mma(_BF16, transposable=True)
    wgmma_m64n8k32_e4m3 = _mma(_E4M3, transposable=False)

wgmma_fence.__doc__ = "``wgmma.fence.sync.aligned``: before the first wgmma that touches registers written since."
wgmma_commit_group.__doc__ = "``wgmma.commit_group.sync.aligned``: close the group of wgmma issued so far."
wgmma_wait_group.__doc__ = "``wgmma.wait_group.sync.aligned N`` (N a constant): at most N groups still pending."
wait_acc.__doc__ = (
    "``acc = wait_acc(N, acc)``: ``wgmma.wait_group.sync.aligned N`` with the accumulator tuple tied "
    "through it, so no arithmetic on ``acc`` can be scheduled before the wait."
)
fence_proxy_async.__doc__ = (
    "``fence.proxy.async.shared::cta``: shared-memory stores made visible to the "
    "async proxy wgmma reads through (then a barrier)."
)
wgmma_m64n8k16_bf16.__doc__ = f"""``wgmma.mma_async.sync.aligned.{_BF16}``:
``(da, db: uint64, d0..d3: float32, scale_d: int, scale_a, scale_b: 1|-1,
tnsp_a, tnsp_b: 0|1 constants) -> (d0..d3) float32``."""
wgmma_m64n8k32_e4m3.__doc__ = f"""``wgmma.mma_async.sync.aligned.{_E4M3}``:
``(da, db: uint64, d0..d3: float32, scale_d: int, scale_a, scale_b: 1|-1
constants) -> (d0..d3) float32``."""


@lru_cache(maxsize=None)
def op(dtype: str, n: int):
    """``wgmma.mma_async`` m64n``n``k16 (bf16, f16) or m64n``n``k32 (e4m3)
    with f32 accumulators: ``acc = op(dtype, n)(da, db, acc, scale_d,
    scale_a, scale_b[, tnsp_a, tnsp_b])``, ``acc`` a tuple of ``n // 2``
    float32 (layout above :data:`FORMS`); the immediates are integer
    constants, as for the N = 8 forms. Call it from a kernel as a global
    (``MMA = wgmma.op("bf16", 128)`` at module or factory level)."""
    check_shape(dtype, n)
    return _twin_op(dtype, n) if config.ENABLE_CUDASIM else _mma_n(dtype, n)


@lru_cache(maxsize=None)
def zeros(n: int, integer: bool = False):
    """``acc = zeros(n)()``: ``n // 2`` float32 zeros, the accumulator tuple
    (``integer``: int32, an integer MMA's)."""
    check_shape("bf16", n)
    if config.ENABLE_CUDASIM:
        zero = np.int32(0) if integer else np.float32(0.0)

        def acc_zeros():
            return tuple(zero for _ in range(n // 2))

        return acc_zeros
    return _zeros_n(n, integer)
