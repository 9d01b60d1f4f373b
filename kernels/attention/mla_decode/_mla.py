"""The kernel both ``attention.mla_decode`` variants launch: MLA decode in
the latent space. With the query's up-projection absorbed, every head
attends over the same cache row of ``R`` latent dims plus ``P`` rotary
dims, and its output stays in the latent space::

    score[h, j] = (q_nope[h] . c_kv[j] + q_pe[h] . k_pe[j]) * SCALE
    o[h]        = softmax_j(score[h]) @ c_kv          (the latent is also V)

``SCALE`` is ``mscale2 / sqrt(qk_dim)`` (``mscale2`` 1 unless the model's
YaRN scaling applies, :func:`mscale2`), ``qk_dim`` the model's query-key head dim before
absorption (DeepSeek-V3: 128 + 64), not ``R + P``.

Grid ``(ceil(H / HT), N_launch)``, ``NT`` threads; block ``(i, n)`` runs
heads ``i*HT .. i*HT+HT-1`` of sequence ``seq0 + n`` over the whole
sequence, no split::

    q tile (HT heads x (R + P)) -> shared fp32, 16 bytes a lane where R
                  and P are multiples of 8 and q starts on 16 bytes
                  (_paged.make_row_stage), else a bf16 a lane
    per KV block (16 tokens):
      latent + rotary rows -> shared, as bf16 pairs (16 rows of 289 words
                  at DeepSeek-V3: fp32 would leave room for only 4 heads),
                  in 16-byte loads where the rows allow (below)
      scores   thread (h, j): the R + P dot product (-inf past L)
      softmax  thread h: online max, alpha, p -> sc
      PV       thread d: acc[h, d] = acc[h, d] alpha[h] + sum_j p[h, j] c_kv[j, d],
               c_kv read from the same shared tile
    four barriers per KV block: the next tile overwrites what PV reads

The KV tile comes in as ``ld.global.nc.v4.u32`` (eight bf16 a lane) where
``R`` and ``P`` are multiples of 8 and both caches start on 16 bytes: every
lane issues all its loads of the block (five at DeepSeek-V3's 576 dims on
256 threads) before storing any, a warp taking 4 tokens x 128 contiguous
bytes, which on rows of an odd number of words puts its stores on 32
banks; otherwise one pair of bf16 a lane. The scores read a row a word (two
dims) at a time.

A block's work depends on its sequence alone, never on which or how many
sequences share the launch, so one launch per sequence (``seq0 = i``, one
block row) gives the batched launch's bits. ``READ_TAIL`` (tests only)
scores every slot of the tail block, reading what was never written.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint32

from ...common import cvt, unroll, vload
from ...common.launch import check_block, check_grid, check_shared, device_inline, jit_bounded
from .._paged import BLOCK, make_row_stage, make_softmax_rows, threads_for, v_half

_NEG_INF = np.float32(-math.inf)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
MAX_HEAD_TILE = 8


@device_inline
def _pair(c_kv, k_pe, n, t, c, R, RP):
    """Dims ``c`` and ``c + 1`` of token ``t``'s row (latent then rotary) as
    one word, the lower dim low; zero past ``RP``."""
    lo = np.uint32(c_kv[n, t, c]) if c < R else np.uint32(k_pe[n, t, c - R])
    hi = np.uint32(0)
    if c + 1 < RP:
        hi = np.uint32(c_kv[n, t, c + 1]) if c + 1 < R else np.uint32(k_pe[n, t, c + 1 - R])
    return lo | (hi << np.uint32(16))


def head_tile(h: int) -> int:
    return min(h, MAX_HEAD_TILE)


def kv_words(R: int, P: int) -> int:
    """Words (bf16 pairs) of a staged KV row: an odd count, so that rows
    start on different banks."""
    w = (R + P + 1) // 2
    return w if w % 2 else w + 1


def shared_bytes(HT: int, R: int, P: int) -> int:
    """Static shared memory: the q tile (fp32, rows of ``R + P + 1``), the
    KV tile (rows of :func:`kv_words`); scores and three per-head values."""
    return 4 * HT * (R + P + 1) + 4 * BLOCK * kv_words(R, P) + 4 * (HT * BLOCK + 3 * HT)


def mscale2(shape) -> float:
    """The factor on ``1/sqrt(qk_dim)`` (spec): ``(0.1 mscale_all_dim
    ln(factor) + 1)^2`` for a shape with ``yarn_factor``, 1 without."""
    factor = shape.get("yarn_factor", 0)
    if not factor:
        return 1.0
    m = 0.1 * float(shape.get("mscale_all_dim", 1.0)) * math.log(factor) + 1.0
    return m * m


@lru_cache(maxsize=None)
def make_decode(H: int, R: int, P: int, QK_DIM: int, READ_TAIL: bool = False, MSCALE2: float = 1.0):
    HT = head_tile(H)
    NT = threads_for(R)
    softmax_rows = make_softmax_rows(HT, NT)
    DPT = -(-R // NT)
    RP = R + P
    W = RP + 1  # padded rows
    HB = HT * BLOCK
    SCALE = np.float32(MSCALE2 / math.sqrt(QK_DIM))  # the model's: YaRN's mscale^2 where it applies (spec)
    KW = kv_words(R, P)
    HALF = (RP + 1) // 2  # words holding the row's dims
    CHR, CHT = R // 8, (R + P) // 8  # 16-byte chunks: latent, and the whole row
    VEC = R % 8 == 0 and P % 8 == 0
    MAP = VEC and CHT % 8 == 0  # a warp: 4 tokens x 8 chunks
    SLOTS = tuple(range(-(-BLOCK * CHT // NT)))  # a lane's chunks
    stage_nope = make_row_stage(HT, R, NT)  # q rows: latent dims to columns 0 .. R - 1
    stage_pe = make_row_stage(HT, P, NT, R)  # rotary dims after them

    @device_inline
    def _where(c):
        """Chunk ``c`` of a block's tile: token and chunk of its row."""
        if MAP:
            r = c >> 5
            return (r % (BLOCK // 4)) * 4 + ((c >> 3) & 3), (r // (BLOCK // 4)) * 8 + (c & 7)
        t = c // CHT
        return t, c - t * CHT

    @device_inline
    def _fetch(i, _x, _y, ctx):
        c_kv, k_pe, n, base, length, tid = ctx
        c = tid + i * NT
        t, dc = _where(min(c, BLOCK * CHT - 1))
        # every lane loads (no branch around a load: a lane's loads issue as
        # one run); a token past the length reads the last one instead and
        # is not stored (_put)
        row = np.int64(n) * c_kv.shape[1] + (base + t if READ_TAIL else min(base + t, length - 1))
        if dc < CHR:
            return vload.ldg_v4(c_kv, row * R + dc * 8)
        return vload.ldg_v4(k_pe, row * P + (dc - CHR) * 8)

    @device_inline
    def _put(i, words, ctx):
        kv_s, base, length, tid = ctx
        c = tid + i * NT
        t, dc = _where(min(c, BLOCK * CHT - 1))
        if c < BLOCK * CHT and (READ_TAIL or base + t < length):
            w0, w1, w2, w3 = words
            kv_s[t, 4 * dc] = w0
            kv_s[t, 4 * dc + 1] = w1
            kv_s[t, 4 * dc + 2] = w2
            kv_s[t, 4 * dc + 3] = w3

    # launch bound: 512 threads an SM (two blocks at R = 512), so at most 128 registers
    @jit_bounded(NT, min(32, max(1, 512 // NT)))
    def mla_decode(q_nope, q_pe, c_kv, k_pe, context_lens, seq0, o):
        h0 = cuda.blockIdx.x * HT
        n = seq0 + cuda.blockIdx.y
        tid = cuda.threadIdx.x
        length = context_lens[n]

        q_s = cuda.shared.array((HT, W), float32)
        kv_s = cuda.shared.array((BLOCK, KW), uint32)
        sc = cuda.shared.array((HT, BLOCK), float32)
        m_s = cuda.shared.array(HT, float32)
        l_s = cuda.shared.array(HT, float32)
        a_s = cuda.shared.array(HT, float32)
        acc = cuda.local.array((HT, DPT), float32)

        # the tile's q rows, once (heads past H -- the last tile of a head
        # count HT does not divide -- as zeros): 16 bytes a lane where the rows allow
        qw = VEC and vload.aligned16(q_nope) and vload.aligned16(q_pe)
        stage_nope(q_s, q_nope[n], h0, H - h0, qw, tid)
        stage_pe(q_s, q_pe[n], h0, H - h0, qw, tid)
        if tid < HT:
            m_s[tid] = _NEG_INF
            l_s[tid] = _ZERO
        for h in range(HT):
            for j in range(DPT):
                acc[h, j] = _ZERO

        nblocks = (length + BLOCK - 1) // BLOCK
        wide = VEC and vload.aligned16(c_kv) and vload.aligned16(k_pe)  # the same in every lane
        for b in range(nblocks):
            base = b * BLOCK
            if wide:  # every load of the lane, then every store
                raw = unroll.each_map(_fetch, SLOTS, SLOTS, (c_kv, k_pe, n, base, length, tid))
                unroll.each(_put, raw, (kv_s, base, length, tid))
            else:
                for i in range(tid, BLOCK * HALF, NT):
                    jj = i // HALF
                    c = 2 * (i - jj * HALF)
                    if READ_TAIL or base + jj < length:
                        kv_s[jj, c >> 1] = _pair(c_kv, k_pe, n, base + jj, c, R, RP)
            cuda.syncthreads()
            for i in range(tid, HB, NT):
                h = i // BLOCK
                jj = i - h * BLOCK
                if READ_TAIL or base + jj < length:
                    dot = _ZERO
                    for w in range(RP // 2):  # a word: dims 2w and 2w + 1
                        lo, hi = cvt.bf16x2_to_f32x2(kv_s[jj, w])
                        dot += q_s[h, 2 * w] * lo + q_s[h, 2 * w + 1] * hi
                    if RP % 2:
                        dot += q_s[h, RP - 1] * v_half(kv_s[jj, RP // 2], RP - 1)
                    sc[h, jj] = dot * SCALE
                else:
                    sc[h, jj] = _NEG_INF
            cuda.syncthreads()
            softmax_rows(sc, m_s, l_s, a_s, tid)
            cuda.syncthreads()
            for j in range(DPT):
                d = tid + j * NT
                if d < R:
                    for h in range(HT):
                        acc[h, j] *= a_s[h]
                    for jj in range(BLOCK):
                        if READ_TAIL or base + jj < length:
                            vv = v_half(kv_s[jj, d >> 1], d)
                            for h in range(HT):
                                acc[h, j] += sc[h, jj] * vv
            cuda.syncthreads()

        for h in range(HT):
            if h0 + h < H:
                inv = _ONE / l_s[h]
                for j in range(DPT):
                    d = tid + j * NT
                    if d < R:
                        o[n, h0 + h, d] = acc[h, j] * inv

    return mla_decode


def launcher(shape, per_sequence: bool, read_tail: bool = False):
    """One launch over the batch, or (``per_sequence``) one per sequence of
    the same kernel. The number of sequences comes from the buffers."""
    h, r, p = shape["h"], shape["r"], shape["p"]
    kern = make_decode(h, r, p, shape["qk_dim"], read_tail, mscale2(shape))
    tiles = -(-h // head_tile(h))
    nt = check_block(threads_for(r), warps=False)
    check_grid((tiles, shape["n"]))
    check_shared(shared_bytes(head_tile(h), r, p))

    def launch(b):
        nseq = b["q_nope"].shape[0]
        args = (b["q_nope"], b["q_pe"], b["c_kv"], b["k_pe"], b["context_lens"])
        if per_sequence:
            for i in range(nseq):
                kern[(tiles, 1), nt](*args, np.int64(i), b["o"])
        else:
            kern[(tiles, nseq), nt](*args, np.int64(0), b["o"])

    launch.workspace = {}
    return launch
