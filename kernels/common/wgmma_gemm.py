"""What the tensor-core GEMMs on ``common/gemm/``'s mainloops share for
``y[r, c] = (sum_k A[r, k] B[c, k]) * rs[r] * cs[c] * ts[0]``: the B
stagers (a transform on the way in) and the scaled epilogue store.

``A`` arrives as the MMA's own input type, packed into uint32 words
(``[rows, k * bytes / 4]``: bf16 pairs, E4M3 or s8 quads) and is copied
into shared memory as it is. ``B`` is staged by one of these, a
compile-time choice (``B_KINDS``):

* ``copy``:       B is already the MMA type, packed as A is (copied
  asynchronously, as A);
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
  activations (``w4a16.gemm``);
* ``int4_e4m3``:  the same weights' values ``q - 8`` (-8..7, exact in
  E4M3), without their scales: the mainloop's per-stage ``fold`` applies
  those, a stage being one scale group (the FFN prefill's ``fp8_m64``).

A stager writes 16-byte chunks with ``st.shared.v4`` at the 128-byte
swizzle's ``(row, chunk)`` offsets of a stage (128 bytes of K per row),
the layout both mainloops read. Rows past the edges and k past ``k`` are
staged as zeros; ``k`` must be a multiple of 16 (a 16-byte chunk of bf16
is 8 k, of E4M3 16 k, and the NVFP4 block is 16).

The epilogue (:func:`store`) multiplies each accumulator by its row's
``rs``, its column's ``cs`` and ``ts[0]`` (f32, in that order) and stores
it, converted to ``y``'s type, at ``y[r, c]`` or, with ``swap``, at
``y[c, r]`` (the FP8 projection puts the weights on the 64-row side and
the tokens on the ``BN`` side). Each accumulator's place is
``wgmma.acc_elem``'s: the mma.sync mainloop keeps wgmma's layout.
Unswapped, the four lanes of a row exchange their values by shuffles so
that each stores 16 bytes of one row (:func:`_make_store`).
"""

from __future__ import annotations

import numpy as np
from numba import cuda, int32, uint32

from . import cvt, unroll, vload
from . import swizzle as sw
from . import wgmma as wg
from .launch import device_inline

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
CHUNKS = sw.ROW_BYTES // 16  # 16-byte chunks in a stage's 128 bytes of K
E4M3_FOLD = np.float32(0.125)  # nvfp4_e4m3: weights staged x 2^-3, the epilogue's ts x 8
K_MULTIPLE = 16


@device_inline
def _chunk(c):
    """Thread-chunk ``c`` -> (tile row, 16-byte chunk along K): eight
    consecutive rows at one K chunk first, which the swizzle spreads over
    all 32 banks (conflict-free 16-byte stores)."""
    return ((c >> 3) >> 3) * 8 + (c & 7), (c >> 3) & 7


@device_inline
def _chunk_along_k(c):
    """Thread-chunk ``c`` -> (tile row, chunk) along K first: a row's eight
    chunks to eight consecutive lanes, so a warp's loads of a weight row are
    one contiguous run (whole sectors), and its 16-byte stores still fall in
    eight different bank groups (the swizzle XORs the chunk with the row)."""
    return c >> 3, c & 7


@device_inline
def _at(r, kc):
    """A 16-byte chunk's byte offset in a staged tile: 128-byte rows, swizzled."""
    return sw.sw128(r * 128 + kc * 16)


def spread_of(spread: tuple) -> tuple:
    """``(piece, gap)`` of a stage spread (``ChunkStager.device``'s), the
    piece at least 1: ``(1, 0)`` leaves every row where it is."""
    return max(spread[0], 1), spread[1]


@device_inline
def spread_row(r, piece, gap):
    """Where tile row ``r`` lies in a spread stage: after ``r // piece``
    gaps of ``gap`` rows (none at ``gap = 0``: folded away)."""
    return r + (r // piece) * gap


class ChunkStager:
    """A stager: stage ``kt`` of a tile (``rows`` rows from ``r0``, ``kpc``
    k per 16-byte chunk, eight chunks a row) written as ``st.shared.v4``
    chunks at their swizzled places, in two halves the mainloop runs an
    iteration apart:

    * ``fetch(src, bsc, nrows, k, r0, kt, tid) -> raw``: every global load
      of this thread's chunks of the stage, issued back to back and nothing
      computed from them (``kind_fetch(src, bsc, row, gk, ok)`` per chunk,
      a tuple of loaded values, zeros of their types where ``ok`` is false:
      a chunk outside the tile loads nothing);
    * ``put(at, raw, nrows, k, r0, kt, tid)``: each chunk's four words
      (``kind_convert(raw_i, gk)``, zeros past ``nrows`` and ``k``) stored.

    A thread's chunks are a compile-time count (``device(rows)``: one
    build per tile height), unrolled, so a stage's loads are all in flight
    at once; the pipeline fetches stage ``s + 1`` while the tensor cores
    work on stage ``s`` and puts it an iteration later, so a load's latency
    is spent under the MMAs rather than once per chunk, in turn (the
    rolled loop of load, convert and store this replaces took a round
    trip to memory per chunk: eight a stage for int4 weights at BN = 128).
    A chunk outside the tile is a predicated-off load, not a branch."""

    def __init__(self, threads: int, kpc: int, fetch, convert, wide=None, settle=None, place=None):
        self.threads, self.kpc, self.fetch, self.convert = threads, kpc, fetch, convert
        self.wide = wide  # (G, fetch16, convert_j, window, settle, empty): see :func:`_build_wide_stager`
        self.place = place  # where a wide load's chunks go in the row, if not side by side
        self.settle = settle  # a paired kind's exchange: see :func:`_build_chunk_stager`
        self._built: dict = {}

    def device(self, rows: int, along_k: bool = False, spread: tuple = (0, 0)):
        """``(fetch, put)`` for tiles of ``rows`` rows; ``along_k``: a
        thread's chunks dealt along K first (:func:`_chunk_along_k`: the
        decode tile's weights, whose loads are the kernel's traffic, a
        spread tile's, and any tile's of a kind with a ``wide`` form, which
        then loads ``G`` chunks of a row with one 16-byte load,
        :func:`_build_wide_stager`, except on a spread tile, whose carried
        loads would not fit its register bound), and ``(fetch, put,
        start, carried)``: the stages are fetched in order, each
        ``fetch(..., kt, tid, win)`` given ``carried(raw)`` of the stage
        before it (``start()`` for the first), what a stage's loads leave
        for the next (int4's group scales, loaded a window of groups at a
        time). ``spread = (piece, gap)``: tile row ``r`` is stored at row
        ``r + (r // piece) * gap`` (each ``piece`` rows, a multiple of 8,
        followed by ``gap`` rows another segment fills: a gated tile's gate
        and up quarters interleaved for two warpgroups along BN)."""
        key = (rows, along_k, spread)
        if key not in self._built:
            if spread[1] and spread[0] % 8:
                raise ValueError(f"a spread {spread} stage: in pieces of 8k rows")
            if along_k and self.wide is not None and not spread[1]:
                self._built[key] = _build_wide_stager(self.threads, self.kpc, *self.wide, rows, self.place)
            else:
                built = _build_chunk_stager(
                    self.threads, self.kpc, self.fetch, self.convert, rows, along_k, self.settle, spread
                )
                self._built[key] = carry_nothing(*built) if along_k else built
        return self._built[key]


@device_inline
def no_window():
    """What a stager that carries nothing starts from."""
    return uint32(0)


@device_inline
def no_window_of(raw):
    """What a stage of a stager that carries nothing leaves the next."""
    return uint32(0)


@device_inline
def as_fetched(raw, gk, k):
    """A wide stager's settle where the lanes exchange nothing."""
    return raw


def carry_nothing(fetch2, put):
    """``(fetch, put, start, carried)`` of a stager that leaves nothing for
    the next stage (``fetch2`` without the window argument), in the
    carrying form of :meth:`ChunkStager.device`."""

    @device_inline
    def fetch(src, bsc, nrows, k, r0, kt, tid, win):
        return fetch2(src, bsc, nrows, k, r0, kt, tid)

    return fetch, put, no_window, no_window_of


def _build_chunk_stager(
    threads: int, kpc: int, kind_fetch, kind_convert, rows: int, along_k: bool = False, settle=None, spread=(0, 0)
):
    """A stager's ``(fetch, put)`` for tiles of ``rows`` rows. A *paired*
    kind (``settle`` given: a row's two neighbouring chunks in two lanes,
    ``PARTNER`` apart, load them together) is fetched as
    ``kind_fetch(src, bsc, row, gk, row_ok, k)`` and, before its chunks are
    stored, ``settle(raw, gk, PARTNER)`` runs in every lane (its shuffles
    exchange what the pair loaded for each other). ``spread``: see
    :meth:`ChunkStager.device`."""
    chunk = _chunk_along_k if along_k else _chunk
    piece, gap = spread_of(spread)
    bk = CHUNKS * kpc
    total = rows * CHUNKS
    slots = tuple(range(-(-total // threads)))  # this thread's chunks: tid, tid + threads, ...
    whole = total % threads == 0
    PARTNER = 1 if along_k else 8  # the lane holding the same row's other chunk of the pair (kc ^ 1)
    if settle is not None and (whole is False or total % 16):
        raise ValueError(f"a paired stager on a tile of {rows} rows: every chunk's pair in the tile")

    if settle is None:

        @device_inline
        def _fetch_one(i, _x, _y, ctx):
            src, bsc, nrows, k, r0, k0, tid = ctx
            c = tid + i * threads
            r, kc = chunk(min(c, total - 1))
            gr = r0 + r
            gk = k0 + kc * kpc
            return kind_fetch(src, bsc, gr, gk, (whole or c < total) and gr < nrows and gk < k)

        @device_inline
        def _settled(raw, gk):
            return raw

    else:

        @device_inline
        def _fetch_one(i, _x, _y, ctx):
            src, bsc, nrows, k, r0, k0, tid = ctx
            r, kc = chunk(tid + i * threads)
            gr = r0 + r
            return kind_fetch(src, bsc, gr, k0 + kc * kpc, gr < nrows, k)

        @device_inline
        def _settled(raw, gk):
            return settle(raw, gk, PARTNER)

    @device_inline
    def _put_one(i, raw, ctx):
        at, nrows, k, r0, k0, tid = ctx
        c = tid + i * threads
        r, kc = chunk(c)
        gk = k0 + kc * kpc
        raw = _settled(raw, gk)  # every lane, before any branch
        if whole or c < total:
            x0 = x1 = x2 = x3 = uint32(0)
            if r0 + r < nrows and gk < k:
                x0, x1, x2, x3 = kind_convert(raw, gk)
            wg.st_shared_v4(at + _at(spread_row(r, piece, gap), kc), x0, x1, x2, x3)

    @device_inline
    def fetch(src, bsc, nrows, k, r0, kt, tid):
        return unroll.each_map(_fetch_one, slots, slots, (src, bsc, nrows, k, r0, kt * bk, tid))

    @device_inline
    def put(at, raw, nrows, k, r0, kt, tid):
        unroll.each(_put_one, raw, (at, nrows, k, r0, kt * bk, tid))

    return fetch, put


def chunk_stager(threads: int, kpc: int, fetch, convert, wide=None, settle=None, place=None) -> ChunkStager:
    """A :class:`ChunkStager` from a kind's ``fetch(src, bsc, row, gk, ok)``
    (the loads of one chunk) and ``convert(raw, gk)`` (its four words).
    Every stager is this with a pair of its own; ``wide`` its 16-byte form
    along K, where it has one, and ``place`` where that form's chunks go
    (:func:`_build_wide_stager`); ``settle`` a paired kind's exchange
    (:func:`_build_chunk_stager`)."""
    return ChunkStager(threads, kpc, fetch, convert, wide, settle, place)


@device_inline
def side_by_side(u, j, G):
    """Chunk ``j`` of a row's load ``u`` of ``G`` consecutive chunks."""
    return u * G + j


def _build_wide_stager(
    threads: int, kpc: int, G: int, fetch16, convert_j, window, settle, empty, rows: int, place=None
):
    """The along-K stager of a kind whose weights are ``32 / G`` bits a
    value: one ``ld.global.nc.v4.u32`` brings ``G`` consecutive chunks of a
    row (an FP8 row's 16 codes: G = 2; int4's 32 values: G = 4), so a warp's
    loads of a stage are 16 bytes a lane, whole sectors, where the
    narrow form made ``8 / G`` 32-bit loads a lane and each used half a
    sector. Slot ``c`` is row ``c // (8 / G)``, group ``c % (8 / G)``: a
    quarter-warp's stores of its first chunks then fall in 8 different
    bank groups (the rows' swizzles differ), as the narrow form's. A
    thread's slots are the same rows, at the same place in a stage, in
    every stage.

    * ``fetch16(src, bsc, gr, gk, ok, vec, win, k) -> raw``: the group from
      input ``gk`` of row ``gr`` (four words and its scale, or what the
      scale is made from), one 16-byte load where ``vec`` (the rows whole
      16-byte loads from an aligned start: uniform for the launch), else
      word by word; ``win`` is ``window(raw)`` of the slot's previous stage
      (``empty()`` before the first), what it carries forward;
    * ``settle(raw, gk, k) -> raw``: run by every lane before the chunks
      are stored (so it may shuffle), what ``convert_j`` reads;
    * ``convert_j(raw, gk, j)``: chunk ``j`` of the group, four words;
    * ``place(u, j, G)``: the chunk (0-7 along the stage's row) that chunk
      ``j`` of the row's load ``u`` is, and ``gk`` of a load its first
      chunk's (default :func:`side_by_side`; Q4_K's 16 bytes hold two
      chunks 32 values apart, one a nibble side). The loads' places must
      keep a quarter-warp's stores of each ``j`` in eight bank groups."""
    place = place or side_by_side
    per_row = CHUNKS // G
    if per_row * G != CHUNKS or G not in (2, 4):
        raise ValueError(f"a wide stager of {G} chunks a load: 2 or 4")
    bk = CHUNKS * kpc
    total = rows * per_row
    slots = tuple(range(-(-total // threads)))
    whole = total % threads == 0
    FOUR = G == 4

    @device_inline
    def _slot(c, k0):
        cc = uint32(min(c, total - 1))  # unsigned: a slot is never negative (no signed-division code)
        r = cc // uint32(per_row)
        return r, k0 + uint32(place(cc - r * uint32(per_row), 0, G)) * uint32(kpc)

    @device_inline
    def _fetch_one(i, win, _y, ctx):
        src, bsc, nrows, k, r0, k0, tid, vec = ctx
        c = tid + i * threads
        r, gk = _slot(c, k0)
        gr = r0 + r
        return fetch16(src, bsc, gr, gk, (whole or c < total) and gr < nrows and gk < k, vec, win, k)

    @device_inline
    def _put_chunk(at, r, kc, raw, gk, ok, j):
        x0 = x1 = x2 = x3 = uint32(0)
        if ok:
            x0, x1, x2, x3 = convert_j(raw, gk, j)
        wg.st_shared_v4(at + _at(r, kc), x0, x1, x2, x3)

    @device_inline
    def _put_of(at, r, u, raw, k0, k, ok, j):
        kc = place(u, j, G)
        gk = k0 + kc * kpc
        _put_chunk(at, r, kc, raw, gk, ok and gk < k, j)

    @device_inline
    def _put_one(i, raw, ctx):
        at, nrows, k, r0, k0, tid = ctx
        c = tid + i * threads
        _r, gk = _slot(c, k0)
        raw = settle(raw, gk, k)  # every lane, before any branch
        if whole or c < total:
            r = c // per_row
            u = c - r * per_row
            ok = r0 + r < nrows
            _put_of(at, r, u, raw, k0, k, ok, 0)
            _put_of(at, r, u, raw, k0, k, ok, 1)
            if FOUR:
                _put_of(at, r, u, raw, k0, k, ok, 2)
                _put_of(at, r, u, raw, k0, k, ok, 3)

    @device_inline
    def fetch(src, bsc, nrows, k, r0, kt, tid, win):
        vec = vload.aligned16(src) and src.shape[1] % 4 == 0
        return unroll.each_map(_fetch_one, win, slots, (src, bsc, nrows, k, r0, kt * bk, tid, vec))

    @device_inline
    def put(at, raw, nrows, k, r0, kt, tid):
        unroll.each(_put_one, raw, (at, nrows, k, r0, kt * bk, tid))

    @device_inline
    def _zero_window(i, _x, _y, _c):
        return empty()

    @device_inline
    def start():
        return unroll.each_map(_zero_window, slots, slots, 0)

    @device_inline
    def _window_one(i, raw, _y, _c):
        return window(raw)

    @device_inline
    def carried(raw):
        return unroll.each_map(_window_one, raw, slots, 0)

    return fetch, put, start, carried


@device_inline
def scale_window(raw):
    """What a wide stager's load carries to its slot's next stage: the two
    words of scales after its four of values (a window of group or block
    scales loaded at its first stage)."""
    return raw[4], raw[5]


@device_inline
def _zeros2(i, _x, _y, _c):
    z = uint32(0)
    return z, z


@device_inline
def _zeros4(i, _x, _y, _c):
    z = uint32(0)
    return z, z, z, z


def carried_windows(slots: tuple, words: int):
    """``(start, carried)`` of a scale-table stager (``pipeline.side_stager``)
    whose stages carry their own loads on, a window of scales loaded at its
    first stage: ``start()`` is ``words`` (2 or 4) zero words a slot,
    ``carried(raw)`` the loads as they are."""
    empty = {2: _zeros2, 4: _zeros4}[words]

    @device_inline
    def start():
        return unroll.each_map(empty, slots, slots, 0)

    @device_inline
    def carried(raw):
        return raw

    return start, carried


@device_inline
def words4(src, gr, w, ok, vec):
    """Words ``w .. w + 3`` of row ``gr``: one 16-byte load (``vec``), else
    each one in the row loaded alone (zeros past it, or where not ``ok``)."""
    z = uint32(0)
    w0 = w1 = w2 = w3 = z
    if ok:
        if vec:
            w0, w1, w2, w3 = vload.ldg_v4(src, gr * src.shape[1] + w)
        else:
            n = src.shape[1]
            w0 = src[gr, w]
            if w + 1 < n:
                w1 = src[gr, w + 1]
            if w + 2 < n:
                w2 = src[gr, w + 2]
            if w + 3 < n:
                w3 = src[gr, w + 3]
    return w0, w1, w2, w3


@device_inline
def _fp4(word, i, s):
    """E2M1 value ``i`` of a word (low nibble first) times ``s``: the
    nibble's bits placed in a float32 (``cvt.e2m1_to_f32``, three
    instructions; ``bits.e2m1_to_f32`` branches and converts an integer a
    value, a quarter-rate ``I2F``)."""
    return cvt.e2m1_to_f32((word >> uint32(4 * i)) & uint32(15)) * s


@device_inline
def _q4(word, i, s):
    return np.float32(np.int32((word >> uint32(4 * i)) & uint32(15)) - 8) * s


@device_inline
def _f32(x):
    return np.float32(x)


@device_inline
def _zero_f16():
    return np.float16(0)


@device_inline
def _zero_u8():
    return np.uint8(0)


def _make_packed_bf16(threads: int, shift: int, value, scale, szero, pair=None):
    """Stage eight 4-bit weights a 32-bit word as bf16 (or as ``pair``
    encodes two: fp16): ``value(word, i, s)`` decodes the i-th with the
    scale ``scale(bsc[row, k >> shift])`` of its block (NVFP4: E2M1 codes,
    an E4M3 scale per 16; int4: ``q - 8``, an fp16 scale per group;
    ``szero()`` a zero of the scales' type)."""
    pair = pair or cvt.f32x2_to_bf16x2

    @device_inline
    def fetch(src, bsc, gr, gk, ok):
        return src[gr, gk >> 3] if ok else uint32(0), bsc[gr, gk >> shift] if ok else szero()

    @device_inline
    def convert(raw, gk):
        word, sraw = raw
        s = scale(sraw)
        return (
            pair(value(word, 0, s), value(word, 1, s)),
            pair(value(word, 2, s), value(word, 3, s)),
            pair(value(word, 4, s), value(word, 5, s)),
            pair(value(word, 6, s), value(word, 7, s)),
        )

    return chunk_stager(threads, 8, fetch, convert)


NVFP4_WINDOW_STAGES = 4  # stages whose scale bytes a row's lanes load at once (8 bytes a lane)


@device_inline
def bytes4(bsc, gr, b):
    """Scale bytes ``b .. b + 3`` of row ``gr`` as a word, the first in bits
    0-7 (zeros past the row), each loaded alone: a window's bytes where the
    rows do not allow its wide load (8 bytes a lane in the wide NVFP4
    stagers, 16 in the MMQ's scale tables)."""
    n = bsc.shape[1]
    w = uint32(0)
    for i in range(4):
        if b + i < n:
            w = uint32(w | (uint32(bsc[gr, b + i]) << uint32(8 * i)))
    return w


def _nvfp4_wide(G: int, convert):
    """The 16-byte form along K of an NVFP4 stager whose narrow chunk is
    ``convert(raw, gk)``: one ``ld.global.nc.v4.u32`` of a row brings 32
    values (two blocks of 16), where the narrow form loaded a word or two
    and a scale byte a chunk. ``G`` chunks a load: 4 to bf16 (a word a
    chunk, two chunks a block; two lanes a row), 2 to E4M3 (a block a chunk;
    four lanes a row).

    The block scales (a byte each, two a lane's load): where ``k`` is a
    multiple of 64 (a row's scales whole words), the ``8 / G``
    lanes of a row load the scales of :data:`NVFP4_WINDOW_STAGES` stages at
    the first of them, 8 bytes a lane (``ldg_v2`` where ``k`` is a multiple
    of 128, a row's scales whole 8-byte units; two ``ldg_u32`` where every
    other row starts 4 bytes off 8, as at Nemotron's expert width 1856;
    byte by byte where the scales' rows do not start aligned, or lie
    apart), and carry them; each stage takes
    its two bytes from the lane that holds them by two shuffles. A row's
    scales then cost a quarter of a sector a window, where two 1-byte loads
    a lane each stage took a sector each. Otherwise each lane loads its own
    two bytes a stage."""
    P = CHUNKS // G  # lanes of a row
    stage_k = CHUNKS * (8 if G == 4 else 16)  # a stage's values of a row: 64 bf16, 128 E4M3
    span = NVFP4_WINDOW_STAGES * stage_k  # the values a window's scales cover: 8 bytes of each lane

    @device_inline
    def _windowed(k):
        return k % 64 == 0

    @device_inline
    def fetch16(src, bsc, gr, gk, ok, vec, win, k):
        # 32 values (``gk`` a multiple of 32): four words, and the scales
        w0, w1, w2, w3 = words4(src, gr, gk >> 3, ok, vec)
        v0, v1 = win
        if _windowed(k):
            if (gk & (span - 1)) < stage_k:  # a window's first stage: this lane's 8 bytes of it
                b = ((gk - (gk & (span - 1))) >> 4) + 8 * (cuda.threadIdx.x & (P - 1))
                n = bsc.shape[1]
                v0 = v1 = uint32(0)
                if ok and b < n:  # (a last window's lanes past the row: none)
                    rows = vload.aligned16(bsc) and bsc.strides[0] == n  # rows side by side from an aligned start
                    if rows and n % 8 == 0:
                        v0, v1 = vload.ldg_v2(bsc, gr * n + b)
                    elif rows:  # rows of whole words, every other one 4 bytes off 8: a word a load
                        v0 = vload.ldg_u32(bsc, gr * n + b)
                        if b + 4 < n:
                            v1 = vload.ldg_u32(bsc, gr * n + b + 4)
                    else:
                        v0, v1 = bytes4(bsc, gr, b), bytes4(bsc, gr, b + 4)
        else:  # the lane's own two blocks' bytes, in bits 0-15 of v0
            b = gk >> 4
            v0 = v1 = uint32(0)
            if ok:
                v0 = uint32(bsc[gr, b])
                if b + 1 < bsc.shape[1]:
                    v0 = uint32(v0 | (uint32(bsc[gr, b + 1]) << uint32(8)))
        return w0, w1, w2, w3, v0, v1

    window = scale_window

    @device_inline
    def settle(raw, gk, k):
        w0, w1, w2, w3, v0, v1 = raw
        h = v0
        if _windowed(k):
            u = (gk & (span - 1)) >> 5  # the load's place in the window: its bytes 2u, 2u + 1
            src = (cuda.threadIdx.x & (32 - P)) | (u >> 2)  # the row's lane holding them
            x0 = uint32(cuda.shfl_sync(0xFFFFFFFF, int32(v0), src))  # (a shuffle moves signed words)
            x1 = uint32(cuda.shfl_sync(0xFFFFFFFF, int32(v1), src))
            h = uint32((x1 if (u >> 1) & 1 else x0) >> uint32(16 * (u & 1)))
        return w0, w1, w2, w3, np.uint8(h & uint32(0xFF)), np.uint8((h >> uint32(8)) & uint32(0xFF))

    if G == 4:

        @device_inline
        def convert_j(raw, gk, j):
            word = raw[0] if j == 0 else (raw[1] if j == 1 else (raw[2] if j == 2 else raw[3]))
            return convert((word, raw[4] if j < 2 else raw[5]), gk)
    else:

        @device_inline
        def convert_j(raw, gk, j):
            if j == 0:
                return convert((raw[0], raw[1], raw[4]), gk)
            return convert((raw[2], raw[3], raw[5]), gk)

    @device_inline
    def empty():
        return uint32(0), uint32(0)

    return (G, fetch16, convert_j, window, settle, empty)


def _make_nvfp4_bf16(threads: int, block_shift: int = 4):
    """NVFP4 to bf16, a word (8 values) a chunk; along K (every unspread
    tile) 32 values a 16-byte load (:func:`_nvfp4_wide`)."""
    base = _make_packed_bf16(threads, block_shift, _fp4, cvt.e4m3_to_f32, _zero_u8)
    if block_shift != 4:  # a test's broken block size: the narrow form alone
        return base
    return chunk_stager(threads, 8, base.fetch, base.convert, _nvfp4_wide(4, base.convert))


@device_inline
def _e4m3x4(word, s):
    lo = uint32(cvt.f32x2_to_e4m3x2(_fp4(word, 0, s), _fp4(word, 1, s)))
    hi = uint32(cvt.f32x2_to_e4m3x2(_fp4(word, 2, s), _fp4(word, 3, s)))
    return lo | (hi << uint32(16))


def _make_packed_e4m3(threads: int, quad, scale_at, scale):
    """Stage sixteen 4-bit weights (two 32-bit words) a 16-byte chunk as
    E4M3: ``quad(word, j, s)`` encodes nibbles ``j .. j + 3`` with the
    block's factor ``s = scale(scale_at(bsc, row, k))``."""

    @device_inline
    def fetch(src, bsc, gr, gk, ok):
        z = uint32(0)
        return src[gr, gk >> 3] if ok else z, src[gr, (gk >> 3) + 1] if ok else z, scale_at(bsc, gr, gk, ok)

    @device_inline
    def convert(raw, gk):
        w0, w1, sraw = raw
        s = scale(sraw)
        return quad(w0, 0, s), quad(w0, 4, s), quad(w1, 0, s), quad(w1, 4, s)

    return chunk_stager(threads, 16, fetch, convert)


@device_inline
def _fp4_e4m3x4(word, j, s):
    return _e4m3x4(word >> uint32(4 * j), s)


def _make_nvfp4_e4m3(threads: int, block_shift: int = 4):
    """NVFP4 to E4M3, a block (two words) a chunk; along K 32 values a
    16-byte load (:func:`_nvfp4_wide`)."""

    @device_inline
    def scale_at(bsc, r, k, ok):
        return bsc[r, k >> block_shift] if ok else np.uint8(0)

    @device_inline
    def scale(sraw):
        return cvt.e4m3_to_f32(sraw) * E4M3_FOLD

    base = _make_packed_e4m3(threads, _fp4_e4m3x4, scale_at, scale)
    if block_shift != 4:
        return base
    return chunk_stager(threads, 16, base.fetch, base.convert, _nvfp4_wide(2, base.convert))


def _make_int4_bf16(threads: int, group_shift: int = 7):
    """int4 weights to bf16: :func:`_make_int4_f16`'s stager, each pair
    rounded to bf16 (``cvt.rn.bf16x2.f32``) where that one rounds to fp16."""
    return _make_int4_f16(threads, group_shift, cvt.f32x2_to_bf16x2)


def _make_int4_f16(threads: int, group_shift: int = 7, pair=cvt.f32x2_to_f16x2):
    """int4 weights to fp16, a word (8 values) a chunk; along K (every tile
    the pipeline stages unspread: the W4A16 GEMM's, the decode tile's) a
    16-byte load brings four chunks, 32 values of one group of 128,
    and each chunk is converted as the narrow form converts its word. That
    form spilled 8 bytes at the decode tile's bound of five blocks an SM
    until the wide stager's slot arithmetic went unsigned (its signed
    64-bit divisions held registers from the prologue on).

    The group scales along K: a stage's 64 values of a row are two slots,
    lanes 2m and 2m + 1 of a warp, in one group. Where a row's scales are
    whole 8-byte units (``k`` a multiple of four groups), the pair loads
    eight groups' at once, 8 bytes a lane, at the first stage of each
    eight (a window of 1024 values, 16 stages), and carries them from
    stage to stage; each stage takes its group's from the lane that holds
    it by a shuffle. A row's scales then cost one 16-byte piece of a
    sector every 16 stages, where a 2-byte load a stage took a sector a
    stage (at the model's rows each row's scales lie in sectors of their
    own). Otherwise the even lane reads the stage's scale and the odd one
    takes it by a shuffle, a stage at a time."""
    base = _make_packed_bf16(threads, group_shift, _q4, _f32, _zero_f16, pair=pair)
    group = 1 << group_shift
    span = 8 * group  # the values a window's scales cover
    stage_k = CHUNKS * 8  # a stage's values of a row

    @device_inline
    def _windowed(k):
        return k % (4 * group) == 0

    @device_inline
    def fetch16(src, bsc, gr, gk, ok, vec, win, k):
        # 32 values (``gk`` a multiple of 32) within one group
        w0, w1, w2, w3 = words4(src, gr, gk >> 3, ok, vec)
        lane = cuda.threadIdx.x & 31
        v0, v1 = win
        if _windowed(k):
            if (gk & (span - 1)) < stage_k:  # the window's first stage: this lane's four groups
                g = ((gk >> group_shift) >> 3 << 3) + 4 * (lane & 1)
                v0 = v1 = uint32(0)
                if ok and g < bsc.shape[1]:  # (the odd lane's half of a last window of four: none)
                    v0, v1 = vload.ldg_v2(bsc, gr * bsc.shape[1] + g)
        else:  # the even lane the stage's group's alone (in bits 0-15 of v0)
            s = np.float32(bsc[gr, gk >> group_shift]) if ok and (lane & 1) == 0 else np.float32(0)
            v0 = cvt.f32x2_to_f16x2(s, np.float32(0))  # exact: the scale is an fp16
            v1 = uint32(0)
        return w0, w1, w2, w3, v0, v1

    window = scale_window

    @device_inline
    def settle(raw, gk, k):
        w0, w1, w2, w3, v0, v1 = raw
        word, upper, owner = v0, False, 0  # a stage's scale alone: the even lane's bits 0-15
        if _windowed(k):
            g = (gk >> group_shift) & 7  # the group's place in its window: lane 2m holds 0-3, 2m + 1 4-7
            word = v0 if (g & 3) < 2 else v1
            upper = (g & 1) == 1
            owner = g >> 2
        lo, hi = cvt.f16x2_to_f32x2(word)
        s = cuda.shfl_sync(0xFFFFFFFF, hi if upper else lo, (cuda.threadIdx.x & 30) | owner)
        return w0, w1, w2, w3, s

    convert = base.convert  # a word and its scale: the narrow form's chunk

    @device_inline
    def convert_j(raw, gk, j):
        word = raw[0] if j == 0 else (raw[1] if j == 1 else (raw[2] if j == 2 else raw[3]))
        return convert((word, raw[4]), gk)

    @device_inline
    def empty():
        return uint32(0), uint32(0)

    return chunk_stager(threads, 8, base.fetch, base.convert, (4, fetch16, convert_j, window, settle, empty))


@device_inline
def _q4_e4m3x4(word, j, s):
    """Four E4M3 codes of nibbles ``j .. j + 3`` of a packed word: ``q - 8``,
    exact (``s`` is 1: the per-stage fold applies the group scales)."""
    lo = uint32(cvt.f32x2_to_e4m3x2(_q4(word, j, s), _q4(word, j + 1, s)))
    hi = uint32(cvt.f32x2_to_e4m3x2(_q4(word, j + 2, s), _q4(word, j + 3, s)))
    return lo | (hi << uint32(16))


@device_inline
def _unscaled(bsc, r, k, ok):
    return np.float32(1)


@device_inline
def _q4_e4m3_fetch16(src, bsc, gr, gk, ok, vec, win, k):
    # 32 values (``gk`` a multiple of 32): four words, two staged chunks of 16 E4M3
    return words4(src, gr, gk >> 3, ok, vec)


@device_inline
def _q4_e4m3_convert_j(raw, gk, j):
    one = np.float32(1)
    lo = raw[0] if j == 0 else raw[2]
    hi = raw[1] if j == 0 else raw[3]
    return _q4_e4m3x4(lo, 0, one), _q4_e4m3x4(lo, 4, one), _q4_e4m3x4(hi, 0, one), _q4_e4m3x4(hi, 4, one)


def _make_int4_e4m3(threads: int):
    """int4 weights as the exact E4M3 of ``q - 8``, two words (16 values) a
    chunk; along K (every unspread tile: ``ffn.prefill`` ``fp8_m64``'s) a
    16-byte load brings two chunks, 32 values, so a stage's 64 bytes of a
    row are four lanes' loads, whole sectors. No scale rides with them: the
    FP8 arm's per-stage fold applies the group scales."""
    base = _make_packed_e4m3(threads, _q4_e4m3x4, _unscaled, _f32)
    wide = (2, _q4_e4m3_fetch16, _q4_e4m3_convert_j, no_window_of, as_fetched, no_window)
    return chunk_stager(threads, 16, base.fetch, base.convert, wide)


def stager(b_kind: str, threads: int, group_shift: int = 7):
    """The B stager of ``b_kind`` (a transform on the way in), writing
    16-byte chunks as ``st.shared.v4`` into a swizzled stage of 128 bytes
    of K: a :class:`ChunkStager` (``device(rows)``: its ``fetch`` and
    ``put`` for tiles of that height), ``at`` the tile's
    shared-window address, ``kt`` the stage. ``group_shift`` (int4
    kinds: the scale group is ``k >> group_shift``) exists for the tests'
    broken variants."""
    return {
        "nvfp4_bf16": lambda: _make_nvfp4_bf16(threads),
        "nvfp4_e4m3": lambda: _make_nvfp4_e4m3(threads),
        "int4_bf16": lambda: _make_int4_bf16(threads, group_shift),
        "int4_f16": lambda: _make_int4_f16(threads, group_shift),
        "int4_e4m3": lambda: _make_int4_e4m3(threads),
    }[b_kind]()


@device_inline
def row_direct(rowmap, p):
    """Row ``p`` of an array as it is (``rowmap`` not read)."""
    return p


@device_inline
def row_gathered(rowmap, p):
    """Row ``rowmap[p]``: a gathered read or a scattered write."""
    return rowmap[p]


FULL_MASK = 0xFFFFFFFF


@device_inline
def _sel4(w0, w1, w2, w3, j):
    return w0 if j == 0 else (w1 if j == 1 else (w2 if j == 2 else w3))


@device_inline
def _quad_transpose(w0, w1, w2, w3, q):
    """Lane ``q`` of a quad (four lanes, ``q = lane & 3``) holds word ``j``
    of slices ``0 .. 3`` as ``w_j``'s word ``q``; it gets slice ``q``'s
    four words (the quad's ``w_q``, lane order), by three shuffles: in
    round ``x`` it reads lane ``q ^ x``, which sends it its word of slice ``q``."""
    own = _sel4(w0, w1, w2, w3, q)
    g1 = uint32(cuda.shfl_xor_sync(FULL_MASK, int32(_sel4(w0, w1, w2, w3, q ^ 1)), 1))
    g2 = uint32(cuda.shfl_xor_sync(FULL_MASK, int32(_sel4(w0, w1, w2, w3, q ^ 2)), 2))
    g3 = uint32(cuda.shfl_xor_sync(FULL_MASK, int32(_sel4(w0, w1, w2, w3, q ^ 3)), 3))
    return (
        _sel4(own, g1, g2, g3, q),
        _sel4(own, g1, g2, g3, q ^ 1),
        _sel4(own, g1, g2, g3, q ^ 2),
        _sel4(own, g1, g2, g3, q ^ 3),
    )


@device_inline
def _pair_halves(a0, a1, b0, b1, odd):
    """Two lanes side by side in a quad, each holding two columns of two
    slices (``a``: the first, ``b``: the second): the even lane gets the
    first slice's four columns of the pair, the odd one the second's, by
    one swap (two shuffles)."""
    x0 = cuda.shfl_xor_sync(FULL_MASK, a0 if odd else b0, 1)
    x1 = cuda.shfl_xor_sync(FULL_MASK, a1 if odd else b1, 1)
    if odd:
        return x0, x1, b0, b1
    return a0, a1, x0, x1


@device_inline
def _scaled(v, s, cs, col, ncols, t, live):
    """An accumulator times its row's and column's scales and ``t`` (f32, in
    that order; an integer MMA's int32 sum to f32 first); zero, without
    loading the column's scale, for a row past ``m`` (``live`` false, the
    same across a quad) or a column past ``ncols``: such values are
    exchanged but never stored."""
    if live and col < ncols:
        return np.float32(v) * s * cs[col] * t
    return np.float32(0)


def _make_store(row_of, wide: bool = True):
    """``store_rows``: a warpgroup's scaled accumulators to ``y``'s rows
    (``row_of(dest, r)``). Unswapped, to an fp16 or float32 ``y``, they leave
    16 bytes a lane: the four lanes of a row (a quad) hold two columns each
    of every 8-column slice, so the quad exchanges its values by shuffles
    until each lane holds 16 bytes of one row (fp16: a slice of four, by
    :func:`_quad_transpose`; float32: half of a slice of two, one swap with
    the lane beside it, :func:`_pair_halves`), stored by one ``st.global.v4`` where ``y``'s rows
    are whole 16-byte units from an aligned start and the 16 bytes lie
    inside ``ncols``, else element by element. A quad's row then takes 64
    bytes a store, two whole sectors, where an element a store wrote 2 or 4
    bytes of each lane's 32. Swapped (``y[c, r]``), other element types and
    the accumulators past the last whole group go element by element, as
    every one does where ``wide`` is false (a register-bound tile's small
    output: the exchange's values live beside the accumulators)."""

    @device_inline
    def put(i, v, at):
        y, m, ncols, r0, n0, tid, s_lo, s_hi, cs, t, swap, dest, _fast = at
        r, c = wg.acc_elem(tid, i)
        r += r0
        c += n0
        if r < m and c < ncols:
            s = s_hi if (r - r0) & 8 else s_lo  # the thread's two rows: g and g + 8
            val = np.float32(v) * s * cs[c] * t  # an integer MMA's int32 sum to f32 first
            if swap:
                y[c, r] = val
            else:
                y[row_of(dest, r), c] = val

    @device_inline
    def _put_f16x8(y, row, col, ncols, x0, x1, x2, x3, fast):
        if fast and col + 8 <= ncols:
            vload.stg_v4(y, row * y.shape[1] + col, x0, x1, x2, x3)
        else:
            for j in range(4):
                lo, hi = cvt.f16x2_to_f32x2(_sel4(x0, x1, x2, x3, j))
                if col + 2 * j < ncols:
                    y[row, col + 2 * j] = lo
                if col + 2 * j + 1 < ncols:
                    y[row, col + 2 * j + 1] = hi

    @device_inline
    def _f16_half(part, h, y, dest, m, ncols, row, c0, q, s, cs, t, fast):
        # row half h (the thread's row g, or g + 8): its words of the 4 slices
        live = row < m
        w0 = cvt.f32x2_to_f16x2(
            _scaled(part[2 * h], s, cs, c0, ncols, t, live), _scaled(part[2 * h + 1], s, cs, c0 + 1, ncols, t, live)
        )
        w1 = cvt.f32x2_to_f16x2(
            _scaled(part[4 + 2 * h], s, cs, c0 + 8, ncols, t, live),
            _scaled(part[5 + 2 * h], s, cs, c0 + 9, ncols, t, live),
        )
        w2 = cvt.f32x2_to_f16x2(
            _scaled(part[8 + 2 * h], s, cs, c0 + 16, ncols, t, live),
            _scaled(part[9 + 2 * h], s, cs, c0 + 17, ncols, t, live),
        )
        w3 = cvt.f32x2_to_f16x2(
            _scaled(part[12 + 2 * h], s, cs, c0 + 24, ncols, t, live),
            _scaled(part[13 + 2 * h], s, cs, c0 + 25, ncols, t, live),
        )
        x0, x1, x2, x3 = _quad_transpose(w0, w1, w2, w3, q)  # (every lane: before any branch)
        if live:
            _put_f16x8(y, row_of(dest, row), c0 - 2 * q + 8 * q, ncols, x0, x1, x2, x3, fast)

    @device_inline
    def group_f16(i, part, at):
        """Four slices (16 accumulators from ``i``) to an fp16 ``y``: lane
        ``q`` of the quad stores slice ``q``'s 8 columns of each of its rows."""
        y, m, ncols, r0, n0, tid, s_lo, s_hi, cs, t, _swap, dest, fast = at
        r, c = wg.acc_elem(tid, i)  # (row g, the lane's first column of the group's first slice)
        q = tid & 3
        _f16_half(part, 0, y, dest, m, ncols, r0 + r, n0 + c, q, s_lo, cs, t, fast)
        _f16_half(part, 1, y, dest, m, ncols, r0 + r + 8, n0 + c, q, s_hi, cs, t, fast)

    @device_inline
    def _f32_half(part, h, y, dest, m, ncols, row, c0, q, s, cs, t, fast):
        live = row < m
        a0 = _scaled(part[2 * h], s, cs, c0, ncols, t, live)  # slice 0: the lane's columns c0, c0 + 1
        a1 = _scaled(part[2 * h + 1], s, cs, c0 + 1, ncols, t, live)
        b0 = _scaled(part[4 + 2 * h], s, cs, c0 + 8, ncols, t, live)  # slice 1: c0 + 8, c0 + 9
        b1 = _scaled(part[5 + 2 * h], s, cs, c0 + 9, ncols, t, live)
        odd = (q & 1) == 1  # lane 2a + 1 keeps slice 1 and sends slice 0, lane 2a the other way
        v0, v1, v2, v3 = _pair_halves(a0, a1, b0, b1, odd)  # (every lane: before any branch)
        if live:
            yr = row_of(dest, row)
            col = c0 - 2 * q + 4 * (q >> 1) + (8 if odd else 0)  # half q >> 1 of slice q & 1
            if fast and col + 4 <= ncols:
                vload.stg_v4(
                    y, yr * y.shape[1] + col, cvt.f32_bits(v0), cvt.f32_bits(v1), cvt.f32_bits(v2), cvt.f32_bits(v3)
                )
            else:
                if col < ncols:
                    y[yr, col] = v0
                if col + 1 < ncols:
                    y[yr, col + 1] = v1
                if col + 2 < ncols:
                    y[yr, col + 2] = v2
                if col + 3 < ncols:
                    y[yr, col + 3] = v3

    @device_inline
    def group_f32(i, part, at):
        """Two slices (8 accumulators from ``i``) to a float32 ``y``: lane
        ``q`` stores half ``q >> 1`` of slice ``q & 1`` of each of its rows."""
        y, m, ncols, r0, n0, tid, s_lo, s_hi, cs, t, _swap, dest, fast = at
        r, c = wg.acc_elem(tid, i)
        q = tid & 3
        _f32_half(part, 0, y, dest, m, ncols, r0 + r, n0 + c, q, s_lo, cs, t, fast)
        _f32_half(part, 1, y, dest, m, ncols, r0 + r + 8, n0 + c, q, s_hi, cs, t, fast)

    @device_inline
    def store_rows(y, dest, m, ncols, r0, n0, acc, rs, cs, t, swap):
        tid = cuda.threadIdx.x & 127
        r, _c = wg.acc_elem(tid, 0)
        r += r0
        s_lo = rs[r] if r < m else np.float32(0)
        s_hi = rs[r + 8] if r + 8 < m else np.float32(0)
        size = vload.elem_bytes(y)  # a constant: the other element size's branch folds away
        row_bytes = y.shape[1] * size
        fast = vload.aligned16(y) and y.strides[1] == size and y.strides[0] == row_bytes and row_bytes % 16 == 0
        at = (y, m, ncols, r0, n0, tid, s_lo, s_hi, cs, t, swap, dest, fast)
        if swap or not wide:
            unroll.each(put, acc, at)
        elif size == 2:
            unroll.each_group(group_f16, put, acc, 16, at)
        elif size == 4:
            unroll.each_group(group_f32, put, acc, 8, at)
        else:
            unroll.each(put, acc, at)

    return store_rows


_store_direct = _make_store(row_direct)
_store_scattered = _make_store(row_gathered)
_store_direct_narrow = _make_store(row_direct, wide=False)
_store_scattered_narrow = _make_store(row_gathered, wide=False)


@device_inline
def store(y, m, ncols, r0, n0, acc, rs, cs, t, swap):
    """The scaled epilogue: accumulator ``i`` (``wgmma.acc_elem``'s place)
    times its row's ``rs``, its column's ``cs`` and ``t`` (f32, in that
    order) to ``y[r, c]`` or, with ``swap`` (a constant), ``y[c, r]``. Each
    element reads its column's scale as it is stored (its two rows each
    once): loading them all first would save half those loads, L1 hits once
    per tile, but the mma.sync kernel at BN = 128 went from 162 to 203
    registers on sm_90a with it: two resident blocks instead of three."""
    _store_direct(y, rs, m, ncols, r0, n0, acc, rs, cs, t, swap)


@device_inline
def store_to(y, dest, m, ncols, r0, n0, acc, rs, cs, t):
    """:func:`store`, row ``r``'s values written to ``y[dest[r], c]`` (an
    MoE's outputs scattered back to their assignments)."""
    _store_scattered(y, dest, m, ncols, r0, n0, acc, rs, cs, t, False)


@device_inline
def store_narrow(y, m, ncols, r0, n0, acc, rs, cs, t, swap):
    """:func:`store` element by element (the decode tile's: 16 rows, its
    registers bound at five blocks an SM)."""
    _store_direct_narrow(y, rs, m, ncols, r0, n0, acc, rs, cs, t, swap)


@device_inline
def store_to_narrow(y, dest, m, ncols, r0, n0, acc, rs, cs, t):
    """:func:`store_to` element by element, as :func:`store_narrow`."""
    _store_scattered_narrow(y, dest, m, ncols, r0, n0, acc, rs, cs, t, False)


def make_store(n: int, swap: bool):
    """``store(y, m, ncols, r0, n0, acc, rs, cs, t)`` for ``n`` columns,
    ``swap`` fixed: :func:`store`."""
    wg.check_shape("bf16", n)
    sw_ = bool(swap)

    @device_inline
    def store_n(y, m, ncols, r0, n0, acc, rs, cs, t):
        store(y, m, ncols, r0, n0, acc, rs, cs, t, sw_)

    return store_n


def supports(k: int, elem_bytes: int = 1) -> str:
    """Why a GEMM over ``k`` cannot run (empty: it can). Rows start on 16
    bytes (``cp.async`` chunks, and a stager's chunk of 16 output bytes):
    ``k`` a multiple of :data:`K_MULTIPLE` one-byte elements, or of 8 where
    the MMA's elements are two bytes (``elem_bytes``: fp16, bf16); the last
    stage is zero-filled past ``k``."""
    multiple = K_MULTIPLE // elem_bytes
    if k <= 0 or k % multiple:
        return f"k={k} is not a positive multiple of {multiple}"
    return ""


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


# fp16 stagers (the MoE grouped GEMM's fp16 MMAs), A or B side; the type
# each stages, and (as A) its k per element of the array it reads:
#
# * ``nvfp4_f16``: NVFP4 weights or activations as ``nvfp4_bf16``, to fp16:
#   E2M1 x E4M3 (at most 6 significant bits, 2^-10 .. 2688) is exact in
#   fp16, the tensor scale left to the epilogue;
# * ``e4m3_f16``: E4M3 codes (uint32 ``[n, k/4]``) to fp16, exact (3
#   mantissa bits, 2^-9 .. 448); their scales (per row) left to the epilogue;
# * ``f32_f16``:  float32 values (``[n, k]``) rounded to fp16 (2^-11
#   relative): a float32 intermediate entering the MMA.
#
# * ``nvfp4_f16_rows``: ``nvfp4_f16`` of A rows read through a row map (an
#   MoE's gathered NVFP4 activations): its scales argument is the pair
#   ``(scales, rowmap)``, tile row ``r`` being row ``rowmap[r0 + r]``;
# * ``f32_f16_rows``: ``f32_f16`` through a row map (an MoE's float32
#   intermediate read by assignment): its scales argument is the row map;
# * ``e4m3_blk_f16``: E4M3 weights times their float32 scale of a 128 x 128
#   block (``bsc[n >> 7, k >> 7]``), rounded once to fp16 (2^-11 relative):
#   a block scale changes along K, so it cannot wait for the epilogue.
MORE_KINDS = {
    "nvfp4_f16": "f16",
    "e4m3_f16": "f16",
    "f32_f16": "f16",
    "nvfp4_f16_rows": "f16",
    "f32_f16_rows": "f16",
    "e4m3_blk_f16": "f16",
}
K_PER_WORD = {"nvfp4_f16": 8, "e4m3_f16": 4, "f32_f16": 1, "nvfp4_f16_rows": 8, "f32_f16_rows": 1, "e4m3_blk_f16": 4}


def _make_nvfp4_f16(threads: int, block_shift: int = 4):
    """NVFP4 to fp16 (the MoE grouped GEMMs' weights and activations on
    mma.sync), as :func:`_make_nvfp4_bf16`: a word a chunk, and along K
    (every unspread tile) 32 values a 16-byte load (:func:`_nvfp4_wide`)."""
    base = _make_packed_bf16(threads, block_shift, _fp4, cvt.e4m3_to_f32, _zero_u8, pair=cvt.f32x2_to_f16x2)
    if block_shift != 4:  # a test's broken block size: the narrow form alone
        return base
    return chunk_stager(threads, 8, base.fetch, base.convert, _nvfp4_wide(4, base.convert))


@device_inline
def _e4m3_scaled_pair(word, i, s):
    """fp16 pair of E4M3 codes ``i`` and ``i + 1`` (bytes) of a word, each
    times ``s`` in float32 and rounded once to fp16: the pair decoded by one
    ``cvt.rn.f16x2.e4m3x2`` (exact; ``cvt.e4m3x2_to_f32x2``), not code by
    code (``bits.e4m3_to_f32`` branches and converts an integer a code, a
    quarter-rate ``I2F``)."""
    lo, hi = cvt.e4m3x2_to_f32x2((word >> uint32(8 * i)) & uint32(0xFFFF))
    return cvt.f32x2_to_f16x2(lo * s, hi * s)


@device_inline
def _e4m3_pair(word, i):
    """fp16 pair of E4M3 codes ``i`` and ``i + 1`` (bytes) of a word."""
    return _e4m3_scaled_pair(word, i, np.float32(1))


@device_inline
def _e4m3_f16_fetch(src, bsc, gr, gk, ok):
    z = uint32(0)
    return src[gr, gk >> 2] if ok else z, src[gr, (gk >> 2) + 1] if ok else z


@device_inline
def _e4m3_f16_convert(raw, gk):
    w0, w1 = raw
    return _e4m3_pair(w0, 0), _e4m3_pair(w0, 2), _e4m3_pair(w1, 0), _e4m3_pair(w1, 2)


@device_inline
def _e4m3_f16_fetch16(src, bsc, gr, gk, ok, vec, win, k):
    # 16 codes (``gk`` a multiple of 16): four words, no scale (the epilogue's)
    return words4(src, gr, gk >> 2, ok, vec)


@device_inline
def _e4m3_f16_convert_j(raw, gk, j):
    return _e4m3_f16_convert((raw[0], raw[1]) if j == 0 else (raw[2], raw[3]), gk)


def _make_e4m3_f16(threads: int):
    """E4M3 codes to fp16 (the MoE grouped GEMMs' FP8 weights, scaled per
    row in the epilogue): two words a chunk, and along K (every unspread
    tile) 16 codes, two chunks, a 16-byte load (four lanes a row's 64
    bytes of a stage, two sectors)."""
    wide = (2, _e4m3_f16_fetch16, _e4m3_f16_convert_j, no_window_of, as_fetched, no_window)
    return chunk_stager(threads, 8, _e4m3_f16_fetch, _e4m3_f16_convert, wide)


@device_inline
def _f32x4_at(src, row, at, ok, k, vec):
    """Four float32 of a row from ``at`` (a multiple of 4): one 16-byte load
    where ``vec`` (the rows whole 16-byte units from an aligned start,
    uniform for a launch), else one a load; zeros past ``k``."""
    z = np.float32(0)
    a0 = a1 = a2 = a3 = z
    if ok and at < k:
        if vec:
            a0, a1, a2, a3 = vload.ld_f32x4(src, row * src.shape[1] + at)
        else:
            a0 = src[row, at]
            if at + 1 < k:
                a1 = src[row, at + 1]
            if at + 2 < k:
                a2 = src[row, at + 2]
            if at + 3 < k:
                a3 = src[row, at + 3]
    return a0, a1, a2, a3


@device_inline
def _f32x8_paired(src, row, gk, ok, k):
    """A paired fetch of a float32 row's chunks (eight values, 32 bytes): the
    two lanes of a row's chunks ``2j`` and ``2j + 1`` load chunk ``2j``
    together, then chunk ``2j + 1`` (the even lane each one's first half,
    the odd lane its second), so each 16-byte load of a warp lies in whole
    sectors, where each lane's own chunk in two loads used half of each
    sector a load; :func:`_f32x8_settle` then gives each lane its chunk."""
    vec = vload.aligned16(src) and src.shape[1] % 4 == 0
    first = gk >> 4 << 4  # the pair's even chunk
    half = (gk & 8) >> 1  # 0 in the even lane, 4 in the odd one
    a0, a1, a2, a3 = _f32x4_at(src, row, first + half, ok, k, vec)
    b0, b1, b2, b3 = _f32x4_at(src, row, first + 8 + half, ok, k, vec)
    return a0, a1, a2, a3, b0, b1, b2, b3


@device_inline
def _f32x8_settle(raw, gk, partner):
    """The lane's own chunk of a pair's loads (:func:`_f32x8_paired`): the
    even lane keeps its half of chunk ``2j`` and takes the odd lane's, the
    odd lane its half of chunk ``2j + 1`` and the even lane's."""
    a0, a1, a2, a3, b0, b1, b2, b3 = raw
    odd = (gk & 8) != 0
    m = 0xFFFFFFFF
    r0 = cuda.shfl_xor_sync(m, a0 if odd else b0, partner)
    r1 = cuda.shfl_xor_sync(m, a1 if odd else b1, partner)
    r2 = cuda.shfl_xor_sync(m, a2 if odd else b2, partner)
    r3 = cuda.shfl_xor_sync(m, a3 if odd else b3, partner)
    if odd:
        return r0, r1, r2, r3, b0, b1, b2, b3
    return a0, a1, a2, a3, r0, r1, r2, r3


@device_inline
def _f32_f16_fetch(src, bsc, gr, gk, ok, k):
    return _f32x8_paired(src, gr, gk, ok, k)


@device_inline
def _f32_f16_rows_fetch(src, rowmap, gr, gk, ok, k):
    """``_f32_f16_fetch`` of row ``rowmap[gr]``: the scales argument is the row map."""
    return _f32x8_paired(src, rowmap[gr] if ok else 0, gk, ok, k)


@device_inline
def _f32_f16_convert(raw, gk):
    return (
        cvt.f32x2_to_f16x2(raw[0], raw[1]),
        cvt.f32x2_to_f16x2(raw[2], raw[3]),
        cvt.f32x2_to_f16x2(raw[4], raw[5]),
        cvt.f32x2_to_f16x2(raw[6], raw[7]),
    )


def _make_f32_f16(threads: int):
    return chunk_stager(threads, 8, _f32_f16_fetch, _f32_f16_convert, settle=_f32x8_settle)


def _make_f32_f16_rows(threads: int):
    return chunk_stager(threads, 8, _f32_f16_rows_fetch, _f32_f16_convert, settle=_f32x8_settle)


@device_inline
def _e4m3_blk_fetch(src, bsc, gr, gk, ok):
    z = uint32(0)
    s = bsc[gr >> 7, gk >> 7] if ok else np.float32(0)
    return src[gr, gk >> 2] if ok else z, src[gr, (gk >> 2) + 1] if ok else z, s


@device_inline
def _e4m3_blk_convert(raw, gk):
    w0, w1, s = raw
    pair = _e4m3_scaled_pair
    return pair(w0, 0, s), pair(w0, 2, s), pair(w1, 0, s), pair(w1, 2, s)


BLK = 128  # an FP8 block scale's rows and values along K
BLK_WINDOW = 8 * BLK  # the values along K a window of block scales covers (16 stages)


@device_inline
def _e4m3_blk_fetch16(src, bsc, gr, gk, ok, vec, win, k):
    # 16 codes, within one 128 x 128 scale block (``gk`` a multiple of 16).
    # A warp's slots are 8 whole rows (8-aligned) of one stage, all in one
    # 128-row block, so a block scale serves the warp: at a window's first
    # stage lanes 0-7 load the next eight blocks' along K (32 contiguous
    # bytes, lane j block j), carried from stage to stage; each stage's is
    # shuffled from its lane when the chunks are put (:func:`_e4m3_blk_settle`)
    w0, w1, w2, w3 = words4(src, gr, gk >> 2, ok, vec)
    v = win
    if (gk & (BLK_WINDOW - 1)) < CHUNKS * 8:
        j = cuda.threadIdx.x & 31
        b = (gk >> 7) + j
        v = np.float32(0)
        if j < 8 and (gr >> 7) < bsc.shape[0] and b < bsc.shape[1]:
            v = bsc[gr >> 7, b]
    return w0, w1, w2, w3, v


@device_inline
def _e4m3_blk_window(raw):
    return raw[4]


@device_inline
def _e4m3_blk_settle(raw, gk, k):
    w0, w1, w2, w3, v = raw
    return w0, w1, w2, w3, cuda.shfl_sync(0xFFFFFFFF, v, (gk >> 7) & 7)


@device_inline
def _e4m3_blk_empty():
    return np.float32(0)


@device_inline
def _e4m3_blk_convert_j(raw, gk, j):
    lo = raw[0] if j == 0 else raw[2]
    hi = raw[1] if j == 0 else raw[3]
    s = raw[4]
    pair = _e4m3_scaled_pair
    return pair(lo, 0, s), pair(lo, 2, s), pair(hi, 0, s), pair(hi, 2, s)


def _make_e4m3_blk_f16(threads: int):
    wide = (2, _e4m3_blk_fetch16, _e4m3_blk_convert_j, _e4m3_blk_window, _e4m3_blk_settle, _e4m3_blk_empty)
    return chunk_stager(threads, 8, _e4m3_blk_fetch, _e4m3_blk_convert, wide)


def _make_nvfp4_f16_rows(threads: int):
    @device_inline
    def fetch(src, scales_rows, gr, gk, ok):
        bsc, rowmap = scales_rows
        if not ok:
            return uint32(0), np.uint8(0)
        sr = rowmap[gr]
        return src[sr, gk >> 3], bsc[sr, gk >> 4]

    @device_inline
    def convert(raw, gk):
        word, sraw = raw
        s = cvt.e4m3_to_f32(sraw)
        return (
            cvt.f32x2_to_f16x2(_fp4(word, 0, s), _fp4(word, 1, s)),
            cvt.f32x2_to_f16x2(_fp4(word, 2, s), _fp4(word, 3, s)),
            cvt.f32x2_to_f16x2(_fp4(word, 4, s), _fp4(word, 5, s)),
            cvt.f32x2_to_f16x2(_fp4(word, 6, s), _fp4(word, 7, s)),
        )

    return chunk_stager(threads, 8, fetch, convert)


def stager_of(kind: str, threads: int):
    """:func:`stager` of any kind, the fp16 ones (:data:`MORE_KINDS`) included."""
    more = {
        "nvfp4_f16": _make_nvfp4_f16,
        "e4m3_f16": _make_e4m3_f16,
        "f32_f16": _make_f32_f16,
        "nvfp4_f16_rows": _make_nvfp4_f16_rows,
        "f32_f16_rows": _make_f32_f16_rows,
        "e4m3_blk_f16": _make_e4m3_blk_f16,
    }
    return more[kind](threads) if kind in more else stager(kind, threads)
