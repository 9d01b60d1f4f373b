"""What the attention projections and the dense-FFN prefill's mma.sync
forms (``ffn/prefill/_mma_forms.py``) share for
``y[r, c] = (sum_k A[r, k] B[c, k]) * rs[r] * cs[c] * ts[0]``: the B
stagers, the scaled epilogue store, and the two-stage mma.sync loop of
devices without wgmma. On wgmma the same GEMMs run on the asynchronous
mainloop (``common/gemm/wgmma_async.py``), which takes these stagers and
this store.

``A`` arrives as the MMA's own input type, packed into uint32 words
(``[rows, k * bytes / 4]``: bf16 pairs or E4M3 quads) and is copied into
shared memory as it is. ``B`` is staged by one of four loaders, a
compile-time choice (``B_KINDS``):

* ``copy``:       B is already the MMA type, packed as A is;
* ``nvfp4_bf16``: NVFP4 weights (``common/bits.py``: E2M1 nibbles two per
  byte, viewed as uint32 ``[n, k/8]``, one E4M3 block scale per 16 in
  ``bsc``) dequantised to BF16: E2M1 x E4M3 has at most 6 significant
  bits, so every value is exact in BF16;
* ``nvfp4_e4m3``: the same weights to E4M3: ``e2m1 * scale * 2^-3``
  (the power of two keeps 6 x 448 within E4M3's 448), rounded to nearest
  E4M3; the epilogue's ``ts`` carries the 2^3 back. The rounding is a
  perturbation of its own (up to 2^-4 relative per weight), which the
  records of the FP8 path include;
* ``int4_bf16``:  the W4A16 layout (``common/int4.py``: ``qweight`` uint32
  ``[n, k/8]``, fp16 scales per 128 in ``bsc``), ``(q - 8) * scale``
  rounded to BF16 (up to 2^-9 relative per weight);
* ``int4_f16``:   the same weights rounded to fp16 (up to 2^-11), for fp16
  activations (``w4a16.gemm``; wgmma only);
* ``int4_e4m3``:  the same weights' values ``q - 8`` (-8..7, exact in
  E4M3), without their scales: the mainloop's per-stage ``fold`` applies
  those, a stage being one scale group (the FFN prefill's ``fp8_m64``).

A stager writes 16-byte chunks with ``st.shared.v4`` at ``(row, chunk)``
offsets of one of two layouts: core matrices without swizzle (this
module's loop) or the 128-byte swizzle (``stager(..., swizzled=True)``,
what ``wgmma_async`` reads). Rows past the edges and k past ``k`` are
staged as zeros; ``k`` must be a multiple of 16 (a 16-byte chunk of bf16
is 8 k, of E4M3 16 k, and the NVFP4 block is 16).

The mma.sync loop: ``WG`` warpgroups (128 threads each) per block, each on
64 rows of A; ``BN`` columns (rows of B) per block; ``blockIdx.x`` along
B's rows, ``blockIdx.y`` along A's; K in stages of ``CHUNKS`` x 16 bytes
per row, two buffers, the next stage staged after the current one's MMAs.

The epilogue multiplies each accumulator by its row's ``rs``, its
column's ``cs`` and ``ts[0]`` (f32, in that order) and stores it, converted
to ``y``'s type, at ``y[r, c]`` or, with ``SWAP``, at ``y[c, r]`` (the FP8
projection puts the weights on the 64-row side and the tokens on the
``BN`` side).

Each warp runs its 16 rows as ``BN / 8`` ``mma.sync`` m16n8k16 bf16 per
k16 (bf16 only), its fragments read from the staged tiles
(:func:`make_mma_step`). Its accumulators are wgmma's tuple in wgmma's
layout (per 8 columns, the m16n8 C fragment), so the store is the one the
wgmma loop uses, and it has no wgmma or async-proxy fence, so it assembles
for sm_80.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import cuda, uint32

from . import bits, cvt
from . import launch as L
from . import swizzle as sw
from . import wgmma as wg

B_KINDS = ("copy", "nvfp4_bf16", "nvfp4_e4m3", "int4_bf16", "int4_f16", "int4_e4m3")
DTYPE_OF = {
    "copy": None,
    "nvfp4_bf16": "bf16",
    "nvfp4_e4m3": "e4m3",
    "int4_bf16": "bf16",
    "int4_f16": "f16",
    "int4_e4m3": "e4m3",
}
BM = wg.M
LBO = wg.LBO
STEP = 2 * wg.LBO  # one instruction's K: 32 bytes, two core matrices
E4M3_FOLD = np.float32(0.125)  # nvfp4_e4m3: weights staged x 2^-3, the epilogue's ts x 8
K_MULTIPLE = 16


def shared_bytes(wgs: int, bn: int, chunks: int) -> int:
    return 2 * (BM * wgs + bn) * chunks * 16


def _chunker(chunks: int):
    @cuda.jit(device=True, inline="always")
    def chunk(c):
        """Thread-chunk ``c`` -> (tile row, 16-byte chunk along K), the 8
        rows of a core matrix first (conflict-free 16-byte stores)."""
        kc = (c >> 3) % chunks
        return ((c >> 3) // chunks) * 8 + (c & 7), kc

    return chunk


def _offsetter(chunks: int, swizzled: bool):
    """``at(r, kc)``: a 16-byte chunk's byte offset in a staged tile: core
    matrices without swizzle, or (``swizzled``, 128-byte rows: ``chunks``
    8) the 128-byte-swizzled K-major layout ``common/gemm/wgmma_async.py``
    reads."""
    sbo = chunks * LBO
    if swizzled:
        if chunks != 8:
            raise ValueError(f"a swizzled stage is 128 bytes of K: 8 chunks, not {chunks}")

        @cuda.jit(device=True, inline="always")
        def at(r, kc):
            return sw.sw128(r * 128 + kc * 16)
    else:

        @cuda.jit(device=True, inline="always")
        def at(r, kc):
            return wg.core_offset(r, kc * 16, LBO, sbo)

    return at


def _make_copy(chunks: int, threads: int, epc: int):
    """Stage rows ``r0..r0+rows`` of a packed operand (``epc`` elements per
    16-byte chunk), zeros past ``nrows`` and ``k``."""
    chunk = _chunker(chunks)
    sbo = chunks * LBO
    bk = chunks * epc

    @cuda.jit(device=True, inline="always")
    def copy(at, src, bsc, nrows, k, r0, kt, tid, rows):  # bsc unused: one signature for every stager
        k0 = kt * bk
        for c in range(tid, rows * chunks, threads):
            r, kc = chunk(c)
            gr = r0 + r
            gk = k0 + kc * epc
            x0 = x1 = x2 = x3 = uint32(0)
            if gr < nrows and gk < k:
                w = (gk // epc) * 4
                x0 = src[gr, w]
                x1 = src[gr, w + 1]
                x2 = src[gr, w + 2]
                x3 = src[gr, w + 3]
            wg.st_shared_v4(at + wg.core_offset(r, kc * 16, LBO, sbo), x0, x1, x2, x3)

    return copy


@cuda.jit(device=True, inline="always")
def _fp4(word, i, s):
    return bits.e2m1_to_f32((word >> uint32(4 * i)) & uint32(15)) * s


@cuda.jit(device=True, inline="always")
def _q4(word, i, s):
    return np.float32(np.int32((word >> uint32(4 * i)) & uint32(15)) - 8) * s


@cuda.jit(device=True, inline="always")
def _f32(x):
    return np.float32(x)


def _make_packed_bf16(chunks: int, threads: int, shift: int, value, scale, swizzled: bool = False, pair=None):
    """Stage eight 4-bit weights a 32-bit word as bf16 (or as ``pair``
    encodes two: fp16): ``value(word, i, s)`` decodes the i-th with the
    scale ``scale(bsc[row, k >> shift])`` of its block (NVFP4: E2M1 codes,
    an E4M3 scale per 16; int4: ``q - 8``, an fp16 scale per group)."""
    pair = pair or cvt.f32x2_to_bf16x2
    chunk = _chunker(chunks)
    off = _offsetter(chunks, swizzled)
    bk = chunks * 8

    @cuda.jit(device=True, inline="always")
    def load(at, src, bsc, nrows, k, r0, kt, tid, rows):
        k0 = kt * bk
        for c in range(tid, rows * chunks, threads):
            r, kc = chunk(c)
            gr = r0 + r
            gk = k0 + kc * 8
            x0 = x1 = x2 = x3 = uint32(0)
            if gr < nrows and gk < k:
                word = src[gr, gk >> 3]
                s = scale(bsc[gr, gk >> shift])
                x0 = pair(value(word, 0, s), value(word, 1, s))
                x1 = pair(value(word, 2, s), value(word, 3, s))
                x2 = pair(value(word, 4, s), value(word, 5, s))
                x3 = pair(value(word, 6, s), value(word, 7, s))
            wg.st_shared_v4(at + off(r, kc), x0, x1, x2, x3)

    return load


def _make_nvfp4_bf16(chunks: int, threads: int, block_shift: int = 4, swizzled: bool = False):
    return _make_packed_bf16(chunks, threads, block_shift, _fp4, bits.e4m3_to_f32, swizzled)


@cuda.jit(device=True, inline="always")
def _e4m3x4(word, s):
    lo = uint32(cvt.f32x2_to_e4m3x2(_fp4(word, 0, s), _fp4(word, 1, s)))
    hi = uint32(cvt.f32x2_to_e4m3x2(_fp4(word, 2, s), _fp4(word, 3, s)))
    return lo | (hi << uint32(16))


def _make_packed_e4m3(chunks: int, threads: int, quad, scale, swizzled: bool = False):
    """Stage sixteen 4-bit weights (two 32-bit words) a 16-byte chunk as
    E4M3: ``quad(word, j, s)`` encodes nibbles ``j .. j + 3`` with the
    block's factor ``s = scale(bsc, row, k)``."""
    chunk = _chunker(chunks)
    off = _offsetter(chunks, swizzled)
    bk = chunks * 16

    @cuda.jit(device=True, inline="always")
    def load(at, src, bsc, nrows, k, r0, kt, tid, rows):
        k0 = kt * bk
        for c in range(tid, rows * chunks, threads):
            r, kc = chunk(c)
            gr = r0 + r
            gk = k0 + kc * 16
            x0 = x1 = x2 = x3 = uint32(0)
            if gr < nrows and gk < k:
                w0 = src[gr, gk >> 3]
                w1 = src[gr, (gk >> 3) + 1]
                s = scale(bsc, gr, gk)
                x0 = quad(w0, 0, s)
                x1 = quad(w0, 4, s)
                x2 = quad(w1, 0, s)
                x3 = quad(w1, 4, s)
            wg.st_shared_v4(at + off(r, kc), x0, x1, x2, x3)

    return load


@cuda.jit(device=True, inline="always")
def _fp4_e4m3x4(word, j, s):
    return _e4m3x4(word >> uint32(4 * j), s)


def _make_nvfp4_e4m3(chunks: int, threads: int, block_shift: int = 4, swizzled: bool = False):
    @cuda.jit(device=True, inline="always")
    def scale(bsc, r, k):
        return bits.e4m3_to_f32(bsc[r, k >> block_shift]) * E4M3_FOLD

    return _make_packed_e4m3(chunks, threads, _fp4_e4m3x4, scale, swizzled)


def _make_int4_bf16(chunks: int, threads: int, group_shift: int = 7, swizzled: bool = False):
    return _make_packed_bf16(chunks, threads, group_shift, _q4, _f32, swizzled)


def _make_int4_f16(chunks: int, threads: int, group_shift: int = 7, swizzled: bool = False):
    return _make_packed_bf16(chunks, threads, group_shift, _q4, _f32, swizzled, pair=cvt.f32x2_to_f16x2)


@cuda.jit(device=True, inline="always")
def _q4_e4m3x4(word, j, s):
    """Four E4M3 codes of nibbles ``j .. j + 3`` of a packed word: ``q - 8``,
    exact (``s`` is 1: the per-stage fold applies the group scales)."""
    lo = uint32(cvt.f32x2_to_e4m3x2(_q4(word, j, s), _q4(word, j + 1, s)))
    hi = uint32(cvt.f32x2_to_e4m3x2(_q4(word, j + 2, s), _q4(word, j + 3, s)))
    return lo | (hi << uint32(16))


@cuda.jit(device=True, inline="always")
def _unscaled(bsc, r, k):
    return np.float32(1)


def _make_int4_e4m3(chunks: int, threads: int, swizzled: bool = False):
    return _make_packed_e4m3(chunks, threads, _q4_e4m3x4, _unscaled, swizzled)


def stager(b_kind: str, chunks: int, threads: int, swizzled: bool = False, group_shift: int = 7):
    """The B stager of ``b_kind`` (a transform on the way in), writing
    16-byte chunks as ``st.shared.v4``: ``load(at, src, bsc, nrows, k,
    r0, kt, tid, rows)``, ``at`` the tile's shared-window address.
    ``group_shift`` (int4 kinds: the scale group is ``k >> group_shift``)
    exists for the tests' broken variants."""
    return {
        "nvfp4_bf16": lambda: _make_nvfp4_bf16(chunks, threads, swizzled=swizzled),
        "nvfp4_e4m3": lambda: _make_nvfp4_e4m3(chunks, threads, swizzled=swizzled),
        "int4_bf16": lambda: _make_int4_bf16(chunks, threads, group_shift, swizzled=swizzled),
        "int4_f16": lambda: _make_int4_f16(chunks, threads, group_shift, swizzled=swizzled),
        "int4_e4m3": lambda: _make_int4_e4m3(chunks, threads, swizzled=swizzled),
    }[b_kind]()


def _store_source(n: int, swap: bool) -> str:
    """``store(y, m, ncols, r0, n0, acc, rs, cs, t)``, unrolled over the
    ``n // 2`` accumulators (constant tuple indices)."""
    at = (lambda r, c: f"y[{c}, {r}]") if swap else (lambda r, c: f"y[{r}, {c}]")
    lines = [
        "def store(y, m, ncols, r0, n0, acc, rs, cs, t):",
        "    tid = cuda.threadIdx.x & 127",
        "    r = r0 + 16 * (tid >> 5) + ((tid & 31) >> 2)",
        "    c = n0 + 2 * (tid & 3)",
        "    lo = r < m",
        "    hi = r + 8 < m",
        "    s_lo = rs[r] if lo else np.float32(0)",
        "    s_hi = rs[r + 8] if hi else np.float32(0)",
    ]
    for j in range(n // 8):
        for e in (0, 1):
            col = f"c + {8 * j + e}"
            lines += [
                f"    if {col} < ncols:",
                f"        sc = cs[{col}]",
                "        if lo:",
                f"            {at('r', col)} = acc[{4 * j + e}] * s_lo * sc * t",
                "        if hi:",
                f"            {at('r + 8', col)} = acc[{4 * j + 2 + e}] * s_hi * sc * t",
            ]
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=None)
def make_store(n: int, swap: bool):
    wg.check_shape("bf16", n)
    ns: dict = {"cuda": cuda, "np": np}
    exec(compile(_store_source(n, swap), f"<proj store n={n} swap={swap}>", "exec"), ns)  # noqa: S102
    return cuda.jit(device=True, inline="always")(ns["store"])


def _mma_step_source(n: int) -> str:
    """``step(As, Bs, abase, bbase, sbo, acc)``: one k16 step of a warp's
    16 x ``n`` slice on ``mma.sync`` m16n8k16 bf16, its fragments read from
    the staged tiles (uint32 arrays; ``abase``/``bbase`` byte offsets of
    the tile, stage and K sub-step). The accumulators are wgmma's tuple:
    per 8-column slice ``j`` the m16n8 C fragment, the same layout."""
    lines = [
        "def step(As, Bs, abase, bbase, sbo, acc):",
        "    lane = cuda.threadIdx.x & 31",
        "    ra = 16 * ((cuda.threadIdx.x >> 5) & 3) + (lane >> 2)",
        "    kb = 4 * (lane & 3)",
        "    a0 = As[(abase + wg.core_offset(ra, kb, LBO, sbo)) >> 2]",
        "    a1 = As[(abase + wg.core_offset(ra + 8, kb, LBO, sbo)) >> 2]",
        "    a2 = As[(abase + wg.core_offset(ra, kb + 16, LBO, sbo)) >> 2]",
        "    a3 = As[(abase + wg.core_offset(ra + 8, kb + 16, LBO, sbo)) >> 2]",
    ]
    outs = []
    for j in range(n // 8):
        lines += [
            f"    b0 = Bs[(bbase + wg.core_offset({8 * j} + (lane >> 2), kb, LBO, sbo)) >> 2]",
            f"    b1 = Bs[(bbase + wg.core_offset({8 * j} + (lane >> 2), kb + 16, LBO, sbo)) >> 2]",
            f"    d{j} = mma.mma_bf16_16816(a0, a1, a2, a3, b0, b1, acc[{4 * j}], acc[{4 * j + 1}], "
            f"acc[{4 * j + 2}], acc[{4 * j + 3}])",
        ]
        outs += [f"d{j}[{e}]" for e in range(4)]
    lines.append(f"    return ({', '.join(outs)},)")
    return "\n".join(lines) + "\n"


@lru_cache(maxsize=None)
def make_mma_step(n: int):
    from . import mma

    ns: dict = {"cuda": cuda, "wg": wg, "mma": mma, "LBO": LBO}
    exec(compile(_mma_step_source(n), f"<proj mma.sync step n={n}>", "exec"), ns)  # noqa: S102
    return cuda.jit(device=True, inline="always")(ns["step"])


def make_kernel(
    dtype: str,
    b_kind: str,
    wgs: int,
    bn: int,
    chunks: int,
    swap: bool = False,
    load_b=None,
    ksub: int | None = None,
    form: str = "mma.sync",
):
    """Compile ``kernel(y, a32, b, bsc, rs, cs, ts)``, the mma.sync form
    (wgmma runs on ``common/gemm/wgmma_async.py``). ``load_b`` and ``ksub``
    exist for the tests' broken variants."""
    if b_kind not in B_KINDS:
        raise ValueError(f"B loader {b_kind!r}: one of {B_KINDS}")
    if DTYPE_OF[b_kind] not in (None, dtype):
        raise ValueError(f"B loader {b_kind} stages {DTYPE_OF[b_kind]}, not {dtype}")
    wg.check_shape(dtype, bn)
    if form != "mma.sync":
        raise ValueError(f"tensor-core form {form!r}: this loop is mma.sync's; wgmma is common/gemm/wgmma_async.py")
    if dtype != "bf16":
        raise ValueError("mma.sync form: bf16 only here (FP8 tensor cores are wgmma's)")
    threads = wg.WARPGROUP * wgs
    epc = 16 // 2  # bf16 elements per 16-byte chunk
    bk = chunks * epc
    sbo = chunks * LBO
    ksub = chunks // 2 if ksub is None else ksub
    warp_step = make_mma_step(bn)
    copy_a = _make_copy(chunks, threads, epc)
    if load_b is None:
        load_b = _make_copy(chunks, threads, epc) if b_kind == "copy" else stager(b_kind, chunks, threads)
    zeros, store = wg.zeros(bn), make_store(bn, swap)
    t_mul = np.float32(1.0)
    a_rows = BM * wgs
    a_bytes, b_bytes = a_rows * chunks * 16, bn * chunks * 16
    a_len, b_len = 2 * a_bytes // 4, 2 * b_bytes // 4
    align = wg.SMEM_ALIGN

    @L.jit_bounded(threads)
    def proj_mma(y, a32, b, bsc, rs, cs, ts):
        m = a32.shape[0]
        n = b.shape[0]
        k = a32.shape[1] * 4 // (16 // epc)
        As = cuda.shared.array(a_len, np.uint32, alignment=align)
        Bs = cuda.shared.array(b_len, np.uint32, alignment=align)
        tid = cuda.threadIdx.x
        g = tid >> 7  # this thread's warpgroup: rows 64 g .. 64 g + 63 of the A tile
        r0 = cuda.blockIdx.y * a_rows
        n0 = cuda.blockIdx.x * bn
        nk = (k + bk - 1) // bk
        a_at = wg.smem_addr(As)
        b_at = wg.smem_addr(Bs)
        copy_a(a_at, a32, bsc, m, k, r0, 0, tid, a_rows)
        load_b(b_at, b, bsc, n, k, n0, 0, tid, bn)
        cuda.syncthreads()
        acc = zeros()
        for kt in range(nk):
            s = kt & 1
            for j in range(ksub):  # each warp its 16 rows, synchronously
                acc = warp_step(As, Bs, s * a_bytes + g * (BM // 8) * sbo + j * STEP, s * b_bytes + j * STEP, sbo, acc)
            if kt + 1 < nk:  # the next stage into the other buffer
                copy_a(a_at + (1 - s) * a_bytes, a32, bsc, m, k, r0, kt + 1, tid, a_rows)
                load_b(b_at + (1 - s) * b_bytes, b, bsc, n, k, n0, kt + 1, tid, bn)
            cuda.syncthreads()
        store(y, m, n, r0 + BM * g, n0, acc, rs, cs, ts[0] * t_mul)

    proj_mma.geometry = (dtype, b_kind, wgs, bn, chunks, swap)
    proj_mma.form = form
    return proj_mma


@lru_cache(maxsize=None)
def kernel(dtype: str, b_kind: str, wgs: int, bn: int, chunks: int, swap: bool = False, form: str = "mma.sync"):
    return make_kernel(dtype, b_kind, wgs, bn, chunks, swap, form=form)


def supports(k: int) -> str:
    if k <= 0 or k % K_MULTIPLE:
        return f"k={k} is not a positive multiple of {K_MULTIPLE}"
    return ""


def make_launch(rows_a: int, rows_b: int, k: int, kern):
    """``launch(y, a32, b, bsc, rs, cs, ts)`` over ``rows_a`` x ``rows_b``."""
    why = supports(k)
    if why:
        raise ValueError(f"proj_wgmma: {why}")
    _dtype, _kind, wgs, bn, chunks, _swap = kern.geometry
    L.check_shared(shared_bytes(wgs, bn, chunks))
    grid = L.check_grid((L.blocks_for(rows_b, bn), L.blocks_for(rows_a, BM * wgs)))
    threads = L.check_block(wg.WARPGROUP * wgs, warps=True)

    def launch(y, a32, b, bsc, rs, cs, ts):
        kern[grid, threads](y, a32, b, bsc, rs, cs, ts)

    return launch


def require_wgmma(variant: str) -> None:
    """These kernels exist on wgmma alone: on a device whose tensor-core
    form is mma.sync (``common/tc.py``) the build refuses, saying so."""
    from . import tc

    if tc.current() != tc.WGMMA:
        raise ValueError(
            f"{variant}: built on wgmma (sm_90a) only; this device's tensor-core form is "
            f"{tc.current()}, which has no kernel for it here"
        )


def ones(n: int):
    """A device float32 vector of ones (an epilogue scale a variant does not use)."""
    return cuda.to_device(np.ones(max(n, 1), np.float32))
