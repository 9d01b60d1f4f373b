"""The two kernels every ``attention.paged_decode`` variant launches, and the
split policy they share. The variants differ only in how they launch them:
which count the split policy is given (``ref_seqs``) and how many sequences
one launch covers.

Split policy (``num_splits``; the host and both kernels call the same
function)::

    blocks = ceil(L / 16)                          KV blocks of the sequence
    want   = ceil(TARGET / (ref_seqs * Hkv))       splits that fill the GPU when
                                                   ref_seqs sequences decode at once
    splits = clamp(min(want, blocks // MIN_BLOCKS), 1, ..)
    per    = ceil(blocks / splits)                 blocks per split; then
    splits = ceil(blocks / per)                    (no split is left empty)

Split ``s`` of a sequence covers its blocks ``s*per .. s*per+per-1``. The
online-softmax merge of the splits is not associative, so the bits of a
sequence's output depend on ``splits``: a function of its own length and
``ref_seqs``. Given the configured maximum batch (``max_decode_seqs``), a
sequence gets the same bits alone as co-batched; given the live batch size,
it does not.

Kernel 1, ``split``: grid ``(S_max, Hkv, N)``, ``NT`` threads; block ``(s, g,
n)`` runs the query heads ``g*G .. g*G+G-1`` of sequence ``seq0 + n`` over
split ``s`` and writes unnormalised partials::

    q heads -> shared (fp32), 16 bytes a lane (make_row_stage)
    per KV block (16 tokens):
      table    every NT blocks: the next NT entries of the split's block
               table -> shared, a word a lane, and a barrier
      K tile   -> shared fp32, rows padded to D + 1 (conflict-free columns)
      V tile   -> shared as stored (bf16 pairs), in two slots alternating
               by block
      scores   thread (h, t): q[h] . k[t] / sqrt(D) -> sc[h, t] (-inf past L)
      softmax  thread h: m_new = max(m, max_t sc), alpha = exp(m - m_new),
               p = exp(sc - m_new) -> sc[h, :], l = l alpha + sum p
      PV       thread d: acc[h, d] = acc[h, d] * alpha[h] + sum_t p[h, t] v[t, d]

    three barriers per KV block and no warp shuffles (the CUDA simulator
    pays for every shuffle with a barrier of its own)
    -> part_o[n, h, s, :] = acc,  part_ml[n, h, s] = (m, l)

The tiles travel in 16-byte loads (``vload.ldg_v4``: eight bf16 of a
token's row a lane, consecutive lanes along the row, so a warp reads two
tokens' 256-byte rows of K and of V whole at D = 128) where ``D`` is a
multiple of 8 and the caches start on 16 bytes; each lane issues all its
K and V loads of the block (four at D = 128 and 128 threads: 64 bytes in
flight a lane) before storing any. Other head dims, or an unaligned view,
take one bf16 a lane. V is staged (rather than read by the PV phase in
place, one bf16 a lane a token) so that it can come in wide; the two slots
let a block's V be written while a slower lane still reads the last
block's, with no fourth barrier; it stays bf16 there (the PV phase decodes
each value as it reads it, a shift), so the two slots take what one fp32
tile would and a head dim of 256 stays within 48 KiB.

Slots past the sequence's length are never read: their score is -inf
without loading k, and their v is skipped. ``READ_TAIL`` (tests only) loads
the whole tail block and relies on p = 0 instead: exact while the unwritten
slots hold zeros, NaN once they are poisoned.

The group's q rows (``G x D`` bf16, contiguous) are staged once a block
by the same 16-byte loads where ``D`` is a multiple of 8 and q starts on 16
bytes, a warp taking 8 heads x 4 chunks where ``G`` is a multiple of 8, so
that its fp32 stores to rows of ``D + 1`` hit 32 banks; otherwise one bf16
a lane. The block table is read a word a lane into shared memory, the
split's next ``NT`` entries at a time (one barrier per ``NT`` KV blocks),
rather than by every lane once a KV block (a warp's 128-byte request for
4 bytes, and a global load on each block's path to its K and V loads).
The length stays a load of every lane: the block leaves on it before any
barrier.

Kernel 2, ``merge``: grid ``(Hq, N)``, ``D / 4`` threads (``merge_threads``);
per (sequence, head) the splits' weights ``exp(m_s - M)`` in split order,
then ``o = sum_s w_s acc_s / sum_s w_s l_s`` -- a fixed order, so the result
depends on the split count alone. One lane reads the length and hands the
split count to the others through shared memory; the splits' ``(m, l)``
pairs are read into shared memory once a block, a word a lane (every lane
reading every pair was a 4-byte broadcast a lane, a sector an instruction
for 4 bytes used). The sum (``make_combine``) takes a 16-byte chunk of the
partial row a lane, one ``ld.global.nc.v4.f32`` a split, and writes it with
one ``st.global.v4.f32``, where ``D`` is a multiple of 4 and the partials
and ``o`` start on 16 bytes; otherwise a float a lane, the same products
summed in the same order (the same bits).

bf16 is decoded with ``cvt.bf16_to_f32`` (a shift on the GPU); arithmetic is
fp32 on CUDA cores.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint32

from ..common import cvt, smem, vload
from ..common import wgmma as wg
from ..common.launch import check_block, check_grid, check_shared, device_inline, jit_bounded
from ..common.warp import half_warp_max, half_warp_sum

BLOCK = 16
V_TILES = 2  # kernel 1's V slots
V_PAD = 124  # the most padding before the V tiles' 128-byte boundary
_NEG_INF = np.float32(-math.inf)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)


@device_inline
def _put8(row, d0, words):
    """Eight bf16 (four words, the lower-addressed of a pair in the low
    half) to ``row[d0 .. d0 + 7]`` as float32."""
    w0, w1, w2, w3 = words
    row[d0], row[d0 + 1] = cvt.bf16x2_to_f32x2(w0)
    row[d0 + 2], row[d0 + 3] = cvt.bf16x2_to_f32x2(w1)
    row[d0 + 4], row[d0 + 5] = cvt.bf16x2_to_f32x2(w2)
    row[d0 + 6], row[d0 + 7] = cvt.bf16x2_to_f32x2(w3)


@device_inline
def v_half(word, d):
    """Element ``d`` of a row of bf16 pairs, ``word`` its pair: float32."""
    lo, hi = cvt.bf16x2_to_f32x2(word)
    return hi if d & 1 else lo


@device_inline
def online_softmax_row(sc, m_s, l_s, a_s, h, width):
    """One step of the online softmax for row ``h`` (one head): the running
    max ``m_s[h]`` and sum ``l_s[h]`` take in the scores ``sc[h, :width]``,
    which become their probabilities under the new max; ``a_s[h]`` is the
    factor the row's accumulators must be rescaled by. Shared by every
    split-K attention kernel here, so all round alike."""
    m_old = m_s[h]
    m_new = m_old
    for t in range(width):
        m_new = max(m_new, sc[h, t])
    alpha = np.float32(math.exp(m_old - m_new))
    total = _ZERO
    for t in range(width):
        p = np.float32(math.exp(sc[h, t] - m_new))
        sc[h, t] = p
        total += p
    l_s[h] = l_s[h] * alpha + total
    m_s[h] = m_new
    a_s[h] = alpha


@lru_cache(maxsize=None)
def make_softmax_rows(G: int, NT: int):
    """Device function ``softmax_rows(sc, m_s, l_s, a_s, tid)``, called by
    every thread of a block of ``NT``: :func:`online_softmax_row` for heads
    ``0 .. G - 1`` (scores ``sc[h, :BLOCK]``). Where the block is whole
    warps, a half-warp takes a head, lane ``t`` its score ``t``: the max and
    the sum by four shuffles each, where one thread a head ran 16 steps of
    each in turn while the other warps waited at the barrier, and its 16
    reads of a row hit the bank of every other head's (``sc`` rows are 16
    words: heads two apart share banks). The sum is then a tree, not a
    run; every kernel here calls this, so all still round alike. A block
    of part of a warp (a tiny head dim: :func:`threads_for`) keeps a
    thread a head."""
    COOP = NT % 32 == 0
    HP = NT // 16  # heads a pass

    @device_inline
    def softmax_rows(sc, m_s, l_s, a_s, tid):
        if COOP:
            t = tid & (BLOCK - 1)
            for h0 in range(0, G, HP):
                h = h0 + (tid >> 4)
                live = h < G
                hh = h if live else 0  # a half-warp past the heads reads head 0, writes nothing
                x = sc[hh, t]
                m_old = m_s[hh]
                m_new = max(m_old, half_warp_max(x))
                p = np.float32(math.exp(x - m_new))
                total = half_warp_sum(p)
                if live:
                    sc[h, t] = p
                    if t == 0:
                        alpha = np.float32(math.exp(m_old - m_new))
                        l_s[h] = l_s[h] * alpha + total
                        m_s[h] = m_new
                        a_s[h] = alpha
        elif tid < G:
            online_softmax_row(sc, m_s, l_s, a_s, tid, BLOCK)

    return softmax_rows


def num_splits(length, ref_seqs, kv_heads, target, min_blocks):
    """``(splits, blocks per split)`` of a sequence of ``length`` tokens
    (see the module doc). Plain integer arithmetic: the host calls it as
    it is, the kernels as a device function."""
    blocks = (length + BLOCK - 1) // BLOCK
    if blocks < 1:  # an empty sequence (never in decode): one empty split
        return 1, 1
    share = ref_seqs * kv_heads
    want = (target + share - 1) // share
    cap = blocks // min_blocks
    s = want if want < cap else cap
    if s < 1:
        s = 1
    per = (blocks + s - 1) // s
    return (blocks + per - 1) // per, per


_num_splits = device_inline(num_splits)


def threads_for(d: int) -> int:
    """Threads per block: one per head dim (rounded up to 8), at most 256.
    A block of tiny head dims may be part of a warp, which spares the
    simulator (about a millisecond per simulated thread); every real head
    dim (64 and up) gets whole warps, and only those use warp shuffles
    (:func:`make_softmax_rows`)."""
    return min(256, max(8, -(-d // 8) * 8))


def v_pitch(D: int) -> int:
    """Words of a staged V row (bf16 pairs): padded by 16 where a warp stages
    8 tokens x 4 chunks (``make_kv_stage``), so a quarter-warp's two tokens
    land on different banks."""
    vw = (D + 1) // 2
    return vw + 16 if D % 32 == 0 else vw


V_ALIGN = wg.SMEM_ALIGN  # 16-byte stores need 16-byte rows (the simulator refuses an alignment)


@lru_cache(maxsize=None)
def make_kv_stage(HKV: int, D: int, NT: int, READ_TAIL: bool = False):
    """Device functions ``(wide_ok(k, v), stage(k_s, v_s, k, v, a0, off, g,
    vb, base, limit, wide, tid))`` for the split kernels (``make_split``,
    ``dflash_contig``): a KV block's K tile into ``k_s`` (fp32, rows of
    ``D + 1``) and V tile into slot ``vb`` of ``v_s`` (bf16 pairs, rows of
    :func:`v_pitch`), tokens ``t`` of ``k[a0, off + t, g, :]``, those at or
    past ``limit - base`` not loaded (``READ_TAIL``, tests: loaded).

    ``wide`` (``wide_ok``: ``D`` a multiple of 8 and both caches on 16
    bytes): 16-byte loads, all of a lane's (``CPT`` chunks of K and of V)
    before its stores; a warp takes 8 tokens x 4 consecutive chunks (64
    bytes of each row, whole sectors) where rows have whole groups of four,
    so that its fp32 K stores hit 32 banks (bank ``t + 8 chunk + j`` on rows
    of ``D + 1``), else consecutive chunks of a row; V goes as stored, one
    ``st.shared.v4`` a chunk. Otherwise one bf16 a lane."""
    VEC = D % 8 == 0  # rows of whole 16-byte chunks
    CH = max(1, D // 8)  # 16-byte chunks a token's row
    CPT = -(-BLOCK * CH // NT)  # chunks a lane, of each of K and V
    VW = (D + 1) // 2  # bf16 pairs (words) of a V row
    MAP4 = VEC and CH % 4 == 0
    VP = v_pitch(D)
    assert (VP != VW) == MAP4

    @device_inline
    def _chunk(c, a0, off, g, base, limit, rows):
        """Lane chunk ``c``: its token, first dim, whether it is staged, and
        the flat element its load reads. Every lane loads, whatever ``ok``
        (no branch around a load, so a lane's loads issue as one run): a
        chunk past the tile or a token past ``limit`` reads the last token
        in range instead (memory the block holds), and is not stored."""
        cc = min(c, BLOCK * CH - 1)
        if MAP4:
            r = cc >> 5
            t = (r % (BLOCK // 8)) * 8 + ((cc >> 2) & 7)
            d0 = ((r // (BLOCK // 8)) * 4 + (cc & 3)) * 8
        else:
            t = cc // CH
            d0 = (cc - t * CH) * 8
        ok = c < BLOCK * CH and (READ_TAIL or base + t < limit)
        tl = t if READ_TAIL else min(t, limit - 1 - base)
        return t, d0, ok, ((np.int64(a0) * rows + off + tl) * HKV + g) * D + d0

    @device_inline
    def _put_v(v_at, vb, t, d0, words):
        """A chunk of V's pairs as stored, one 16-byte store: a quarter-warp's
        eight lanes write 128 contiguous bytes (no bank conflict)."""
        a, b, c, d = words
        smem.st_shared_v4(v_at + np.uint32(4 * ((vb * BLOCK + t) * VP + (d0 >> 1))), a, b, c, d)

    @device_inline
    def _stage_wide(k_s, v_at, k, v, a0, off, g, vb, base, limit, tid):
        rows = k.shape[1]
        t0, d00, ok0, at0 = _chunk(tid, a0, off, g, base, limit, rows)
        ka = vload.ldg_v4(k, at0)
        va = vload.ldg_v4(v, at0)
        if CPT > 1:
            t1, d01, ok1, at1 = _chunk(tid + NT, a0, off, g, base, limit, rows)
            kb = vload.ldg_v4(k, at1)
            vb_ = vload.ldg_v4(v, at1)
        if ok0:
            _put8(k_s[t0], d00, ka)
            _put_v(v_at, vb, t0, d00, va)
        if CPT > 1:
            if ok1:
                _put8(k_s[t1], d01, kb)
                _put_v(v_at, vb, t1, d01, vb_)
        for j in range(2, CPT):  # more than two chunks a lane (small blocks): in turn
            t, d0, ok, at = _chunk(tid + j * NT, a0, off, g, base, limit, rows)
            if ok:
                _put8(k_s[t], d0, vload.ldg_v4(k, at))
                _put_v(v_at, vb, t, d0, vload.ldg_v4(v, at))

    @device_inline
    def wide_ok(k, v):
        return VEC and vload.aligned16(k) and vload.aligned16(v)

    @device_inline
    def stage(k_s, v_s, k, v, a0, off, g, vb, base, limit, wide, tid):
        if wide:
            _stage_wide(k_s, smem.smem_addr(v_s), k, v, a0, off, g, vb, base, limit, tid)
        else:
            for i in range(tid, BLOCK * D, NT):
                t = i // D
                if READ_TAIL or base + t < limit:
                    k_s[t, i - t * D] = cvt.bf16_to_f32(k[a0, off + t, g, i - t * D])
            for i in range(tid, BLOCK * VW, NT):
                t = i // VW
                d = 2 * (i - t * VW)
                if READ_TAIL or base + t < limit:
                    hi = np.uint32(v[a0, off + t, g, d + 1]) if d + 1 < D else np.uint32(0)
                    v_s[vb, t, d >> 1] = np.uint32(v[a0, off + t, g, d]) | (hi << np.uint32(16))

    return wide_ok, stage


STAGE_FAULTS = (0, 1)  # make_row_stage: 1 leaves the tile's last chunk unloaded
MERGE_FAULTS = (0, 1, 2)  # make_combine: 1 drops each row's last 4 floats, 2 adds the last split twice


@lru_cache(maxsize=None)
def make_row_stage(ROWS: int, D: int, NT: int, COL0: int = 0, FAULT: int = 0):
    """Device function ``stage(dst, src, row0, nrows, wide, tid)``: rows
    ``row0 .. row0 + ROWS - 1`` of ``src`` (a C-contiguous 2-D array of bf16
    bits, rows of ``D``) to ``dst[r, COL0 + d]`` as fp32 (the query heads of
    a block, staged once); rows ``r >= nrows`` (a head tile past the head
    count) become zeros and are not read.

    ``wide`` (``D`` a multiple of 8 and ``src`` on 16 bytes, the same in
    every lane): one 16-byte load a chunk of eight bf16, a warp taking 8
    rows x 4 consecutive chunks where the tile has whole groups of those
    (rows of ``dst`` padded to one word past a multiple of 32: its fp32
    stores then hit 32 banks, as ``make_kv_stage``'s K tile), else
    consecutive chunks of a row. Otherwise one bf16 a lane. ``FAULT``
    (tests only) 1: the tile's last chunk is left unloaded."""
    if FAULT not in STAGE_FAULTS:
        raise ValueError(f"FAULT={FAULT}: one of {STAGE_FAULTS}")
    CH = max(1, D // 8)  # 16-byte chunks a row
    NCH = ROWS * CH
    MAP4 = D % 8 == 0 and ROWS % 8 == 0 and CH % 4 == 0
    RG = max(1, ROWS // 8)  # groups of 8 rows
    END = NCH - 1 if FAULT == 1 else NCH

    @device_inline
    def stage(dst, src, row0, nrows, wide, tid):
        if wide:
            for c in range(tid, END, NT):
                if MAP4:
                    grp = c >> 5
                    r = (grp % RG) * 8 + ((c >> 2) & 7)
                    d0 = ((grp // RG) * 4 + (c & 3)) * 8
                else:
                    r = c // CH
                    d0 = (c - r * CH) * 8
                if r < nrows:
                    _put8(dst[r], COL0 + d0, vload.ldg_v4(src, (row0 + r) * D + d0))
                else:
                    for j in range(8):
                        dst[r, COL0 + d0 + j] = _ZERO
        else:
            for i in range(tid, ROWS * D, NT):
                r = i // D
                d = i - r * D
                val = _ZERO
                if r < nrows:
                    val = cvt.bf16_to_f32(src[row0 + r, d])
                dst[r, COL0 + d] = val

    return stage


def merge_threads(d: int) -> int:
    """Threads of a merge block: one per 4 floats of a partial row (its
    16-byte chunks), at least 8, as :func:`threads_for` rounds."""
    return threads_for(-(-d // 4))


@lru_cache(maxsize=None)
def make_combine(D: int, NT: int, FAULT: int = 0):
    """Device function ``combine(po, w, inv, splits, out, wide, tid)``: the
    merge's sum ``out[d] = (sum_s w[s] po[s, d]) * inv`` over splits ``0 ..
    splits - 1`` in split order, ``po`` a head's partial rows (fp32, ``splits``
    rows of ``D``), ``out`` its output row.

    ``wide`` (``D`` a multiple of 4, the partials and the output on 16 bytes,
    chosen once a launch): a lane takes a 16-byte chunk of the row, one
    ``ld.global.nc.v4.f32`` a split (the partials are the previous launch's,
    read-only here) and one ``st.global.v4.f32`` at the end; otherwise a
    float a lane. Each float sees the same products added in the same order
    either way, so the two paths give the same bits. ``FAULT`` (tests only)
    1: each row's last chunk is not written; 2: the last split is added
    twice."""
    if FAULT not in MERGE_FAULTS:
        raise ValueError(f"FAULT={FAULT}: one of {MERGE_FAULTS}")
    CH = D // 4
    END = CH - 1 if FAULT == 1 else CH
    EXTRA = 1 if FAULT == 2 else 0

    @device_inline
    def combine(po, w, inv, splits, out, wide, tid):
        if wide:
            for c in range(tid, END, NT):
                a0 = _ZERO
                a1 = _ZERO
                a2 = _ZERO
                a3 = _ZERO
                for s in range(splits + EXTRA):
                    ss = min(s, splits - 1) if EXTRA else s
                    x0, x1, x2, x3 = vload.ldg_f32x4(po, ss * D + 4 * c)
                    ws = w[ss]
                    a0 += ws * x0
                    a1 += ws * x1
                    a2 += ws * x2
                    a3 += ws * x3
                vload.st_f32x4(out, 4 * c, a0 * inv, a1 * inv, a2 * inv, a3 * inv)
        else:
            for d in range(tid, D, NT):
                a = _ZERO
                for s in range(splits):
                    a += w[s] * po[s, d]
                out[d] = a * inv

    return combine


@lru_cache(maxsize=None)
def make_split(HKV: int, G: int, D: int, TARGET: int, MIN_BLOCKS: int, READ_TAIL: bool = False, Q_FAULT: int = 0):
    """Compile kernel 1 for ``Hkv`` KV heads of ``G`` query heads each, head
    dim ``D``, the split policy's ``TARGET`` and ``MIN_BLOCKS``.
    ``READ_TAIL`` builds the broken kernel of the tests, ``Q_FAULT`` one
    whose q staging is broken (:func:`make_row_stage`)."""
    NT = threads_for(D)
    DPT = -(-D // NT)  # dims per thread in the PV phase
    GB = G * BLOCK
    DP = D + 1  # shared rows padded: threads of different tokens hit different banks
    SCALE = np.float32(1.0 / math.sqrt(D))
    VP = v_pitch(D)
    QVEC = D % 8 == 0
    wide_ok, stage = make_kv_stage(HKV, D, NT, READ_TAIL)
    softmax_rows = make_softmax_rows(G, NT)
    stage_q = make_row_stage(G, D, NT, 0, Q_FAULT)

    # launch bound: 512 threads an SM (two blocks at d 256, four at d 128), so at most 128
    # registers, which ptxas would otherwise exceed at d 128 (a quarter of the blocks lost)
    @jit_bounded(NT, min(32, max(1, 512 // NT)))
    def attn_split(q, k_cache, v_cache, block_table, context_lens, ref_seqs, seq0, part_o, part_ml):
        si = cuda.blockIdx.x
        g = cuda.blockIdx.y
        n = seq0 + cuda.blockIdx.z
        length = context_lens[n]
        splits, per = _num_splits(length, ref_seqs, HKV, TARGET, MIN_BLOCKS)
        if si >= splits:  # the whole block leaves before any barrier
            return
        tid = cuda.threadIdx.x

        q_s = cuda.shared.array((G, DP), float32)
        k_s = cuda.shared.array((BLOCK, DP), float32)
        v_s = cuda.shared.array((2, BLOCK, VP), uint32, alignment=V_ALIGN)  # 16-byte chunks (VEC)
        sc = cuda.shared.array((G, BLOCK), float32)
        m_s = cuda.shared.array(G, float32)
        l_s = cuda.shared.array(G, float32)
        a_s = cuda.shared.array(G, float32)
        bt_s = cuda.shared.array(NT, int32)  # the split's block table, NT entries at a time
        acc = cuda.local.array((G, DPT), float32)

        stage_q(q_s, q[n], g * G, G, QVEC and vload.aligned16(q), tid)  # the group's q rows, once
        if tid < G:
            m_s[tid] = _NEG_INF
            l_s[tid] = _ZERO
        for h in range(G):
            for j in range(DPT):
                acc[h, j] = _ZERO

        nblocks = (length + BLOCK - 1) // BLOCK
        b0 = si * per
        b_end = b0 + per
        if b_end > nblocks:
            b_end = nblocks
        wide = wide_ok(k_cache, v_cache)  # the same in every lane
        for c0 in range(b0, b_end, NT):
            # the table's next NT entries -> shared, a word a lane (one barrier per NT
            # blocks). The last reads of the entries it overwrites came before the
            # first barrier of their blocks, which every thread has passed.
            if tid < b_end - c0:
                bt_s[tid] = block_table[n, c0 + tid]
            cuda.syncthreads()
            for b in range(c0, min(c0 + NT, b_end)):
                phys = bt_s[b - c0]
                base = b * BLOCK
                vb = b & 1
                # K and V tiles -> shared, coalesced; slots past the length are not loaded
                stage(k_s, v_s, k_cache, v_cache, phys, 0, g, vb, base, length, wide, tid)
                cuda.syncthreads()
                # scores: thread (h, t)
                for i in range(tid, GB, NT):
                    h = i // BLOCK
                    t = i - h * BLOCK
                    if base + t < length:
                        dot = _ZERO
                        for d in range(D):
                            dot += q_s[h, d] * k_s[t, d]
                        sc[h, t] = dot * SCALE
                    else:
                        sc[h, t] = _NEG_INF
                cuda.syncthreads()
                # online softmax: each head rescaled and its scores turned into p
                softmax_rows(sc, m_s, l_s, a_s, tid)
                cuda.syncthreads()
                # PV: thread d accumulates every head of the group
                for j in range(DPT):
                    d = tid + j * NT
                    if d < D:
                        for h in range(G):
                            acc[h, j] *= a_s[h]
                        for t in range(BLOCK):
                            if READ_TAIL or base + t < length:
                                v = v_half(v_s[vb, t, d >> 1], d)
                                for h in range(G):
                                    acc[h, j] += sc[h, t] * v
                # No barrier here: the next K tile overwrites k_s, which the
                # scores finished reading before the second barrier; the next V
                # tile goes to the other slot (this one is written again only
                # after the next first barrier, which every thread reaches
                # after its PV); and the next scores and softmax write sc and
                # a_s only after that barrier too.

        for j in range(DPT):
            d = tid + j * NT
            if d < D:
                for h in range(G):
                    part_o[n, g * G + h, si, d] = acc[h, j]
        if tid < G:
            part_ml[n, g * G + tid, si, 0] = m_s[tid]
            part_ml[n, g * G + tid, si, 1] = l_s[tid]

    return attn_split


@lru_cache(maxsize=None)
def make_merge(HKV: int, D: int, TARGET: int, MIN_BLOCKS: int, FAULT: int = 0):
    """Compile kernel 2: per (query head, sequence) the splits merged in
    split order. At most ``TARGET`` splits (``want`` never exceeds it).
    ``FAULT`` builds the broken kernels of the tests (:func:`make_combine`)."""
    NT = merge_threads(D)
    VEC = D % 4 == 0
    combine = make_combine(D, NT, FAULT)

    @jit_bounded(NT)
    def attn_merge(context_lens, ref_seqs, seq0, part_o, part_ml, o):
        h = cuda.blockIdx.x
        n = seq0 + cuda.blockIdx.y
        tid = cuda.threadIdx.x
        w = cuda.shared.array(TARGET, float32)
        ml = cuda.shared.array((TARGET, 2), float32)
        ns = cuda.shared.array(1, int32)
        if tid == 0:  # the length, one lane: the split count to every lane through shared memory
            ns[0] = _num_splits(context_lens[n], ref_seqs, HKV, TARGET, MIN_BLOCKS)[0]
        cuda.syncthreads()
        splits = ns[0]
        for i in range(tid, 2 * splits, NT):  # the splits' (m, l), contiguous: read once a block
            ml[i >> 1, i & 1] = part_ml[n, h, i >> 1, i & 1]
        cuda.syncthreads()
        m = _NEG_INF
        for s in range(splits):
            m = max(m, ml[s, 0])
        for s in range(tid, splits, NT):
            w[s] = np.float32(math.exp(ml[s, 0] - m))
        cuda.syncthreads()
        total = _ZERO
        for s in range(splits):
            total += w[s] * ml[s, 1]
        inv = _ONE / total
        wide = VEC and vload.aligned16(part_o) and vload.aligned16(o)  # the same in every lane
        combine(part_o[n, h], w, inv, splits, o[n, h], wide, tid)

    return attn_merge


def split_shared_bytes(G: int, D: int, v_tiles: int = 0, table: bool = True) -> int:
    """Static shared memory of a split kernel: q and the K tile (rows of
    D + 1 fp32), ``v_tiles`` V tiles of bf16 pairs (kernel 1: two) on a
    128-byte boundary (at most 124 bytes of padding before them, counted),
    scores, three per-head values and (``table``) a word a thread of the
    block table: an upper bound, at most :data:`V_PAD` over what the
    compiler lays out."""
    pad = V_PAD if v_tiles else 0
    bt = threads_for(D) if table else 1
    return 4 * ((G + BLOCK) * (D + 1) + v_tiles * BLOCK * v_pitch(D) + G * BLOCK + 3 * G + bt) + pad


def max_splits(max_length: int, ref_seqs: int, kv_heads: int, target: int, min_blocks: int) -> int:
    """The most splits any sequence of at most ``max_length`` tokens gets
    (more blocks never mean fewer splits): the partials' third dimension."""
    return num_splits(max_length, ref_seqs, kv_heads, target, min_blocks)[0]


def launcher(shape, ref_seqs_of, per_sequence: bool = False, read_tail: bool = False, q_fault=0, merge_fault=0):
    """The launch of a variant at ``shape``: ``ref_seqs_of(nseq)`` is the count
    the split policy gets for a launch over ``nseq`` sequences (the pinned
    ``max_decode_seqs``, or the live batch). The number of sequences comes
    from the buffers, so one build also decodes a sub-batch (the batch
    invariance check decodes each sequence alone with it). The partials
    are the launch's declared workspace."""
    n, hq, hkv, d = shape["n"], shape["hq"], shape["hkv"], shape["d"]
    target, minb = shape["target_ctas"], shape["min_split_blocks"]
    split = make_split(hkv, hq // hkv, d, target, minb, read_tail, q_fault)
    merge = make_merge(hkv, d, target, minb, merge_fault)
    smax = max(max_splits(shape["ctx"], ref_seqs_of(k), hkv, target, minb) for k in (1, n))
    nt = check_block(threads_for(d), warps=False)
    mt = check_block(merge_threads(d), warps=False)
    check_grid((smax, hkv, n))
    check_grid((hq, n))
    check_shared(split_shared_bytes(hq // hkv, d, V_TILES))
    part_o = cuda.device_array((n, hq, smax, d), np.float32)
    part_ml = cuda.device_array((n, hq, smax, 2), np.float32)

    def launch(b):
        nseq = b["q"].shape[0]
        ref = np.int64(ref_seqs_of(nseq))
        args = (b["q"], b["k_cache"], b["v_cache"], b["block_table"], b["context_lens"], ref)
        if per_sequence:
            for i in range(nseq):
                split[(smax, hkv, 1), nt](*args, np.int64(i), part_o, part_ml)
                merge[(hq, 1), mt](b["context_lens"], ref, np.int64(i), part_o, part_ml, b["o"])
        else:
            split[(smax, hkv, nseq), nt](*args, np.int64(0), part_o, part_ml)
            merge[(hq, nseq), mt](b["context_lens"], ref, np.int64(0), part_o, part_ml, b["o"])

    launch.workspace = {"part_o": part_o, "part_ml": part_ml}
    return launch
