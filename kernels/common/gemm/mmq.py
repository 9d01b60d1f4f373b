"""MMQ operands for the pipeline: NVFP4 multiplied in integer arithmetic
from its codes, one 16-value block per ``mma.sync`` k32 step.

An E2M1 value times 2 is an exact small integer (0, 1, 2, 3, 4, 6, 8, 12
and their negatives), so a 16-value NVFP4 block is 16 int8 values and one
E4M3 scale; a block's integer dot product (at most 16 x 144 = 2304) is
exact in s32 and in f32. A k32 s8 MMA sums over 32 values, which would
mix two blocks with different scales, so the stager (``nvfp4_s8x``) puts
each block's 16 doubled values in the lower 16 bytes of a 32-byte K step
and zeros in the upper 16: one step, one block (half of each MMA multiplies
zeros: the price of 16-wide scales on a 32-wide integer MMA). A stage of
128 bytes is then four blocks, 64 values of the real K, and the pipeline's
``k`` counts staged bytes (``2 k``: :data:`K_PER_WORD` 16 per packed
word of eight codes).

The per-step fold (``pipeline``'s ``step_fold``, on mma.sync) adds each
step's s32 accumulators to the f32 running sums times the product of the
two operands' block scales, read from a table in shared memory that each
stage's scales are decoded into once, beside its operands (as an MMQ kernel
stages them: the fold then reads shared memory, not the scales' bytes in
global memory per accumulator) (``sa[r, b] * sw[c, b] / 4``: the 1/4 undoes
the doubling, a power of two, exact): every term is exact in f32 (the
scale product has at most 8 significant bits, the dot at most 12), and
only the sum over blocks rounds.
"""

from __future__ import annotations

import numpy as np
from numba import cuda, float32, int32, uint32, uint64

from .. import bits, cvt, unroll, vload
from .. import smem as sm
from .. import wgmma as wg
from ..launch import device_inline
from ..wgmma_gemm import as_fetched, bytes4, carried_windows, chunk_stager, no_window, no_window_of, words4

KIND = "nvfp4_s8x"
Q4K = "q4k_s8"
KINDS = {KIND: "s8", Q4K: "s8"}
K_PER_WORD = {KIND: 16}  # staged bytes per uint32 of packed codes (8 codes, each 1 byte + 1 zero byte)
BLOCK = bits.NVFP4_BLOCK
BLOCKS_PER_STAGE = 4
WINDOW_STAGES = 4  # stages whose scale bytes a row's lane loads at once (16 bytes)
DOUBLED = 0xC8643210  # 2 x |E2M1| for the magnitude codes 0..7, a nibble each: 0 1 2 3 4 6 8 12
DOUBLED_VALUES = tuple((DOUBLED >> (4 * i)) & 0xF for i in range(8))


@device_inline
def doubled(code):
    """2 x the E2M1 value of nibble ``code`` as an int8's byte (two's complement), in a uint32."""
    v = int32((uint32(DOUBLED) >> uint32(4 * (code & 7))) & uint32(15))
    if code & 8:
        v = -v
    return uint32(v & 0xFF)


@device_inline
def _quad(word, j):
    """Bytes of the doubled values of nibbles ``j .. j + 3`` of a packed word."""
    x = word >> uint32(4 * j)
    return (
        doubled(x & uint32(15))
        | (doubled((x >> uint32(4)) & uint32(15)) << uint32(8))
        | (doubled((x >> uint32(8)) & uint32(15)) << uint32(16))
        | (doubled((x >> uint32(12)) & uint32(15)) << uint32(24))
    )


def stager(threads: int, kind: str = KIND, drop_odd: bool = False):
    if kind == Q4K:
        return q4k_stager(threads)
    return _nvfp4_stager(threads, kind, drop_odd)


def _nvfp4_stager(threads: int, kind: str = KIND, drop_odd: bool = False):
    """A stage's chunks of 16 staged bytes, each the 8 doubled values of
    half a block's codes or a block's zero half. Along K (the weights'
    tile, ``pipeline``'s B) a lane's 16-byte load brings two blocks' 32
    codes, four chunks (two of values, two zero halves), and the two
    lanes of a row read its 32 bytes of a stage, one whole sector, where a
    chunk of values was two 32-bit loads (a quarter of each sector used at
    the model's rows); rows not whole 16-byte units take the words one a
    load."""

    @device_inline
    def fetch(src, bsc, gr, gk, ok):  # gk: the chunk's first staged byte; its block: 32 staged bytes each
        b = gk >> 5
        z = uint32(0)
        # the block's zero half (and a dropped block) loads nothing: its words are the first half's
        ld = ok and not ((gk >> 4) & 1 or (drop_odd and b & 1))
        return src[gr, 2 * b] if ld else z, src[gr, 2 * b + 1] if ld else z

    @device_inline
    def convert(raw, gk):
        b = gk >> 5
        z = uint32(0)
        if (gk >> 4) & 1 or (drop_odd and b & 1):  # the block's zero half (or a dropped block)
            return z, z, z, z
        w0, w1 = raw
        return _quad(w0, 0), _quad(w0, 4), _quad(w1, 0), _quad(w1, 4)

    @device_inline
    def fetch16(src, bsc, gr, gk, ok, vec, win, k):  # gk: a multiple of 64 staged bytes, blocks gk / 32 and next
        return words4(src, gr, gk >> 4, ok, vec)

    @device_inline
    def convert_j(raw, gk, j):  # chunk j of the four: block (j // 2), values (j even) or its zero half
        w0, w1, w2, w3 = raw
        z = uint32(0)
        if j == 0:
            return _quad(w0, 0), _quad(w0, 4), _quad(w1, 0), _quad(w1, 4)
        if j == 2 and not drop_odd:  # the odd block (a dropped block in the tests' broken kernel)
            return _quad(w2, 0), _quad(w2, 4), _quad(w3, 0), _quad(w3, 4)
        return z, z, z, z

    wide = (4, fetch16, convert_j, no_window_of, as_fetched, no_window)
    return chunk_stager(threads, 16, fetch, convert, wide)


def _side_stager(fetch_one, put_one, slots):
    """A scale table's ``(fetch, put)`` from its per-entry halves, unrolled
    over this thread's entries (``slots``): ``fetch_one(i, _, _, (asc,
    bsc, m, n, k, r0, n0, kt, tid))`` loads entry ``i``'s raw values,
    ``put_one(i, raw, (smem, word, tid, kt))`` decodes and stores them."""

    @device_inline
    def fetch(asc, bsc, m, n, k, r0, n0, kt, tid):
        return unroll.each_map(fetch_one, slots, slots, (asc, bsc, m, n, k, r0, n0, kt, tid))

    @device_inline
    def put(smem, at, raw, kt, tid):
        unroll.each(put_one, raw, (smem, at >> 2, tid, kt))

    return fetch, put


class Nvfp4Scales:
    """The NVFP4 MMQ's per-step fold (``pipeline``'s ``step_fold``): each
    stage's block scales decoded once into a table in shared memory (after
    the operand stages: ``(rows + BN) x 4`` float32, A's already times 1/4;
    ``smem`` below is the dynamic shared memory viewed as float32),
    then each step's s32 sums folded with its block's two scales from it.
    ``scale_per_32`` (tests only) uses the even block's scales for both
    blocks of each 32."""

    def __init__(self, scale_per_32: bool = False):
        self.mask = 2 if scale_per_32 else 3

    @staticmethod
    def side_bytes(a_rows: int, bn: int) -> int:
        return (a_rows + bn) * BLOCKS_PER_STAGE * 4

    @staticmethod
    def stager(threads: int, a_rows: int, bn: int):
        """``(fetch, put, start, carried)``: a thread's rows of the table
        (one row of A's tile or B's a thread: ``a_rows + bn`` of them), each
        row's scale bytes of :data:`WINDOW_STAGES` stages loaded at the first
        of them, 16 bytes a lane (``ldg_v4``; byte by byte where the scales'
        rows are not whole 16-byte units from an aligned start), and carried
        (``fetch(asc, bsc, m, n, k, r0, n0, kt, tid, win)``, every load of
        this thread's rows at once, unrolled); each stage's four bytes of a
        row decoded into the table an iteration later (``put(smem, at, raw,
        kt, tid)``), as the operands' stagers do. A stage's entries were a
        byte a lane, four lanes a row: a quarter of a sector a row each
        stage, where a window now takes half a sector a row every four."""
        quarter = np.float32(0.25)
        rows = a_rows + bn
        slots = tuple(range(-(-rows // threads)))

        @device_inline
        def _window(arr, gr, b):
            n = arr.shape[1]
            if vload.aligned16(arr) and n % 16 == 0 and arr.strides[0] == n:
                return vload.ldg_v4(arr, gr * n + b)  # (b a multiple of 16, below n: the 16 bytes in the row)
            return bytes4(arr, gr, b), bytes4(arr, gr, b + 4), bytes4(arr, gr, b + 8), bytes4(arr, gr, b + 12)

        @device_inline
        def _fetch_one(i, win, _y, ctx):
            asc, bsc, m, n, _k, r0, n0, kt, tid = ctx
            row = tid + i * threads
            w0, w1, w2, w3 = win
            if kt % WINDOW_STAGES == 0:  # a window's first stage: the row's bytes of four stages
                z = uint32(0)
                w0 = w1 = w2 = w3 = z
                b = BLOCKS_PER_STAGE * kt
                if row < a_rows:
                    if r0 + row < m and b < asc.shape[1]:
                        w0, w1, w2, w3 = _window(asc, r0 + row, b)
                elif row < rows and n0 + row - a_rows < n and b < bsc.shape[1]:
                    w0, w1, w2, w3 = _window(bsc, n0 + row - a_rows, b)
            return w0, w1, w2, w3

        @device_inline
        def fetch(asc, bsc, m, n, k, r0, n0, kt, tid, win):
            return unroll.each_map(_fetch_one, win, slots, (asc, bsc, m, n, k, r0, n0, kt, tid))

        @device_inline
        def _put_one(i, win, ctx):
            base, tid, kt = ctx
            row = tid + i * threads
            if row < rows:
                j = kt % WINDOW_STAGES
                word = win[0] if j == 0 else (win[1] if j == 1 else (win[2] if j == 2 else win[3]))
                f = quarter if row < a_rows else np.float32(1.0)
                # the row's four entries one 16-byte store (a warp's 32 rows: 512
                # consecutive bytes, conflict-free; four word stores a lane fell
                # 4-way on the banks)
                s0, s1 = cvt.e4m3x2_to_f32x2(word & uint32(0xFFFF))
                s2, s3 = cvt.e4m3x2_to_f32x2(word >> uint32(16))
                sm.st_shared_f32x4(base + 4 * BLOCKS_PER_STAGE * row, s0 * f, s1 * f, s2 * f, s3 * f)

        @device_inline
        def put(smem, at, raw, kt, tid):
            unroll.each(_put_one, raw, (sm.smem_addr(smem) + at, tid, kt))

        return (fetch, put, *carried_windows(slots, 4))

    def fold(self, entries: int):
        mask = self.mask

        @device_inline
        def fold(total, acc, fx, step):
            smem, at, g_row, c_row = fx
            at2 = (at >> 2, g_row, step & mask, cuda.threadIdx.x & 127, c_row, smem)
            return unroll.each_map(_nvfp4_one, total, acc, at2)

        return fold


@device_inline
def _nvfp4_one(i, tot, dot, at):
    w0, g_row, jj, tid, c_row, smem = at
    r, c = wg.acc_elem(tid, i)
    sa = smem[w0 + ((g_row + r) << 2) + jj]
    sw = smem[w0 + ((c_row + c) << 2) + jj]
    return tot + float32(dot) * (sa * sw)


def make_step_fold(scale_per_32: bool = False):
    """The NVFP4 MMQ's per-step fold (:class:`Nvfp4Scales`)."""
    return Nvfp4Scales(scale_per_32)


# ── Q4_K weights (GGUF) against int8 activations per block of 32 ─────────────
#
# A Q4_K super-block is 256 values in 144 bytes (``common/q4k.py``): fp16
# ``d`` and ``dmin``, 12 bytes of 6-bit sub-block scales and mins, then 128
# bytes of 4-bit values, each 32 bytes holding 64 values (the low nibbles
# the first 32, the high nibbles the next). One 32-value sub-block is one
# k32 step; its integer dot product with the int8 activations is folded as
#
#     total + dot * (d8[r, b] * (d * sc)[c, b]) - (dmin * m)[c, b] * s8[r, b]
#
# (``d8``, ``s8`` the activations' block scale and scaled sum), the
# formula the FMA reference spells out.

Q4K_BLOCK_BYTES = 144
Q4K_VALUES = 256


@device_inline
def _nibbles4(word, hi):
    """The four nibbles (low or high half of each byte) of a word as bytes."""
    x = word >> uint32(4 * hi)
    return (
        (x & uint32(15))
        | ((x >> uint32(8)) & uint32(15)) << uint32(8)
        | ((x >> uint32(16)) & uint32(15)) << uint32(16)
        | ((x >> uint32(24)) & uint32(15)) << uint32(24)
    )


@device_inline
def _q4k_fetch(src, bsc, gr, gk, ok):
    if not ok:
        z = uint32(0)
        return z, z, z, z
    v0 = gk & (Q4K_VALUES - 1)  # the chunk's first value within its super-block
    w = (gk >> 8) * (Q4K_BLOCK_BYTES // 4) + 4 + (32 * (v0 >> 6) + (v0 & 31)) // 4
    return _q4k_words(src, gr, w)


@device_inline
def _q4k_words(src, row, w):
    """Words ``w .. w + 3`` of row ``row`` of Q4_K blocks (``src`` uint32):
    one 16-byte load where the blocks start on 16 bytes (a super-block is
    nine 16-byte units, so every row and every chunk a stager or a header
    read asks for is then on 16 bytes too), else four word loads."""
    if vload.aligned16(src):
        return vload.ldg_v4(src, row * src.shape[1] + w)
    return src[row, w], src[row, w + 1], src[row, w + 2], src[row, w + 3]


@device_inline
def _q4k_convert(raw, gk):
    hi = ((gk & (Q4K_VALUES - 1)) >> 5) & 1
    return _nibbles4(raw[0], hi), _nibbles4(raw[1], hi), _nibbles4(raw[2], hi), _nibbles4(raw[3], hi)


@device_inline
def _q4k_fetch16(src, bsc, gr, gk, ok, vec, win, k):
    return _q4k_fetch(src, bsc, gr, gk, ok)


@device_inline
def _q4k_convert_j(raw, gk, j):
    return _q4k_convert(raw, gk)  # (``gk`` the chunk's own: its nibble side)


@device_inline
def _q4k_place(u, j, G):
    """Chunk ``j`` of a row's load ``u`` (four a stage): the load's 16
    bytes are chunks ``c`` (low nibbles) and ``c + 2`` (high: 32 values on),
    ``c`` = 0, 1, 4, 5; the odd loads put the high one first, so that each
    ``j``'s stores of a quarter-warp's two rows (chunks 0, 3, 4, 7 and, the
    row beside it, those XOR 1 after the swizzle) fall in eight bank groups."""
    odd = u & 1
    return 4 * (u >> 1) + odd + 2 * (j ^ odd)


def q4k_stager(threads: int):
    """A ``ChunkStager`` of stage ``kt``
    (values ``128 kt ..``: half a super-block) of Q4_K rows (``src``: the
    blocks as uint32, 36 words a super-block) as bytes 0..15 in value
    order; rows past ``nrows`` zeros. A 16-byte chunk is 16 consecutive
    values, all in one 32-byte run of the super-block's 4-bit bytes and on
    one nibble side: four words on 16 bytes, one load (:func:`_q4k_words`).
    Along K (every tile of the MMQ) a load serves both nibble sides, two
    chunks (:func:`_q4k_place`): a row's stage is four loads, 64
    consecutive bytes, where chunks dealt across the rows loaded each 16
    bytes twice, a lane a row."""
    wide = (2, _q4k_fetch16, _q4k_convert_j, no_window_of, as_fetched, no_window)
    return chunk_stager(threads, 16, _q4k_fetch, _q4k_convert, wide, place=_q4k_place)


@device_inline
def _scale_min(s0, s1, s2, j):
    """The 6-bit scale and min of sub-block ``j`` of a Q4_K super-block
    (``common.q4k``'s packing) from its 12 scale bytes as three words
    (``s0`` bytes 0-3, ``s1`` 4-7, ``s2`` 8-11): for ``j < 4`` the low six
    bits of bytes ``j`` and ``j + 4``; above, bytes ``j + 4`` (the low
    nibbles of both), ``j - 4`` and ``j`` (their top two bits)."""
    sh = uint32(8 * (j & 3))
    b0 = int32((s0 >> sh) & uint32(255))
    b1 = int32((s1 >> sh) & uint32(255))
    if j < 4:
        return b0 & 63, b1 & 63
    p = int32((s2 >> sh) & uint32(255))
    return (p & 15) | ((b0 >> 6) << 4), (p >> 4) | ((b1 >> 6) << 4)


class Q4kScales:
    """The Q4_K MMQ's per-step fold: each stage's four sub-blocks' factors
    decoded once into a table in shared memory (``(rows + BN) x 4`` pairs
    of float32: the activations' ``d8, s8``, the weights' ``d * sc, dmin *
    m``, in two planes, the first of each pair and the second, so that a
    warp's puts and fold reads are one word a bank), then each step's s32
    sums folded with the formula above.
    ``subs_used`` below 8 (tests only) skips each super-block's last
    sub-blocks."""

    # Six values an entry (two floats; the super-block's 16-byte header,
    # ``d``, ``dmin`` and the 12 scale bytes, as four words), six entries a
    # thread at BN = 128: carried across an iteration beside the weights'
    # chunks such entries (then nine values) took q4k_mmq to 255 registers
    # and a spill, so the tables are fetched and put in the same iteration
    # (the loads still together).
    ahead = False

    def __init__(self, subs_used: int = 8):
        self.subs_used = subs_used

    @staticmethod
    def side_bytes(a_rows: int, bn: int) -> int:
        return (a_rows + bn) * 4 * 8

    @staticmethod
    def stager(threads: int, a_rows: int, bn: int):
        """``(fetch, put)`` as :meth:`Nvfp4Scales.stager`: per entry, the
        activations' two floats (one 8-byte pair, ``q8_blocks``' ``ds``:
        a row's four lanes read its stage's four pairs, one sector) or the
        weights' super-block header (``d``,
        ``dmin`` and the 12 bytes of 6-bit scales and mins: 16 bytes, one
        load where the blocks start on 16 bytes; ``blocks`` the blocks as
        uint32) loaded, then the sub-block's factors decoded and stored."""
        total = (a_rows + bn) * 4
        slots = tuple(range(-(-total // threads)))

        @device_inline
        def _fetch_one(i, _x, _y, ctx):
            ds8, blocks, m, n, k, r0, n0, kt, tid = ctx
            idx = tid + i * threads
            row = idx >> 2
            sub = 4 * kt + (idx & 3)  # the 32-value sub-block along K
            x = y = float32(0.0)
            z = uint32(0)
            h0 = h1 = h2 = h3 = z
            if idx < total and 32 * sub < k:
                if row < a_rows:
                    if r0 + row < m:  # the row's four lanes: its stage's four pairs, one sector
                        pair = ds8[r0 + row, sub]
                        x = cvt.bits_f32(uint32(pair & uint64(0xFFFFFFFF)))
                        y = cvt.bits_f32(uint32(pair >> uint64(32)))
                else:
                    c = n0 + row - a_rows
                    if c < n:  # the four entries of a column read one header: one sector, four lanes
                        h0, h1, h2, h3 = _q4k_words(blocks, c, (sub >> 3) * (Q4K_BLOCK_BYTES // 4))
            return x, y, h0, h1, h2, h3

        @device_inline
        def _put_one(i, raw, ctx):
            smem, w0, tid, kt = ctx
            idx = tid + i * threads
            if idx < total:
                x, y, h0, h1, h2, h3 = raw
                if (idx >> 2) >= a_rows:
                    sc, mn = _scale_min(h1, h2, h3, (4 * kt + (idx & 3)) & 7)
                    d, dmin = cvt.f16x2_to_f32x2(h0)
                    x = d * float32(sc)
                    y = dmin * float32(mn)
                smem[w0 + idx] = x  # two planes of ``total`` words: a word a lane, consecutive
                smem[w0 + total + idx] = y

        return _side_stager(_fetch_one, _put_one, slots)

    def fold(self, entries: int):
        subs_used = self.subs_used
        plane = entries * 4  # words of a plane: (rows + BN) x 4 sub-blocks

        @device_inline
        def fold(total, acc, fx, step):
            smem, at, g_row, c_row = fx
            if (step & 7) >= subs_used:
                return total
            at2 = (at >> 2, g_row, step & 3, cuda.threadIdx.x & 127, c_row, smem, plane)
            return unroll.each_map(_q4k_one, total, acc, at2)

        return fold


@device_inline
def _q4k_one(i, tot, dot, at):
    w0, g_row, jj, tid, c_row, smem, plane = at
    r, c = wg.acc_elem(tid, i)
    ra = w0 + ((g_row + r) << 2) + jj  # a row's 4 words a plane: 8 rows (or 4 columns 2 apart) on 32 banks
    cb = w0 + ((c_row + c) << 2) + jj
    d8, s8 = smem[ra], smem[ra + plane]
    dsc, dmm = smem[cb], smem[cb + plane]
    return tot + float32(dot) * (d8 * dsc) - dmm * s8


def make_q4k_fold(subs_used: int = 8):
    """The Q4_K MMQ's per-step fold (:class:`Q4kScales`)."""
    return Q4kScales(subs_used)
