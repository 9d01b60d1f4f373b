"""The kernel both ``attention.mla_decode`` variants launch: MLA decode in
the latent space. With the query's up-projection absorbed, every head
attends over the same cache row of ``R`` latent dims plus ``P`` rotary
dims, and its output stays in the latent space::

    score[h, j] = (q_nope[h] . c_kv[j] + q_pe[h] . k_pe[j]) * SCALE
    o[h]        = softmax_j(score[h]) @ c_kv          (the latent is also V)

``SCALE`` is ``1 / sqrt(qk_dim)``, the model's query-key head dim before
absorption (DeepSeek-V3: 128 + 64), not ``R + P``.

Grid ``(ceil(H / HT), N_launch)``, ``NT`` threads; block ``(i, n)`` runs
heads ``i*HT .. i*HT+HT-1`` of sequence ``seq0 + n`` over the whole
sequence, no split::

    q tile (HT heads x (R + P)) -> shared fp32
    per KV block (16 tokens):
      latent + rotary rows -> shared, as bf16 bits (16 x 577 x 2 bytes at
                  DeepSeek-V3: fp32 would leave room for only 4 heads)
      scores   thread (h, j): the R + P dot product (-inf past L)
      softmax  thread h: online max, alpha, p -> sc
      PV       thread d: acc[h, d] = acc[h, d] alpha[h] + sum_j p[h, j] c_kv[j, d],
               c_kv read from the same shared tile
    four barriers per KV block: the next tile overwrites what PV reads

A block's work depends on its sequence alone, never on which or how many
sequences share the launch, so one launch per sequence (``seq0 = i``, one
block row) gives the batched launch's bits. ``READ_TAIL`` (tests only)
scores every slot of the tail block, reading what was never written.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, uint16

from ...common import cvt
from ...common.launch import check_block, check_grid, check_shared, jit_bounded
from .._paged import BLOCK, online_softmax_row, threads_for

_NEG_INF = np.float32(-math.inf)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)
MAX_HEAD_TILE = 8


def head_tile(h: int) -> int:
    return min(h, MAX_HEAD_TILE)


def shared_bytes(HT: int, R: int, P: int) -> int:
    """Static shared memory: the q tile (fp32), the KV tile (bf16 bits),
    rows of ``R + P + 1``; scores and three per-head values."""
    RP = R + P + 1
    return 4 * HT * RP + 2 * BLOCK * RP + 4 * (HT * BLOCK + 3 * HT)


@lru_cache(maxsize=None)
def make_decode(H: int, R: int, P: int, QK_DIM: int, READ_TAIL: bool = False):
    HT = head_tile(H)
    NT = threads_for(R)
    DPT = -(-R // NT)
    RP = R + P
    W = RP + 1  # padded rows
    HB = HT * BLOCK
    SCALE = np.float32(1.0 / math.sqrt(QK_DIM))

    @jit_bounded(NT)
    def mla_decode(q_nope, q_pe, c_kv, k_pe, context_lens, seq0, o):
        h0 = cuda.blockIdx.x * HT
        n = seq0 + cuda.blockIdx.y
        tid = cuda.threadIdx.x
        length = context_lens[n]

        q_s = cuda.shared.array((HT, W), float32)
        kv_s = cuda.shared.array((BLOCK, W), uint16)
        sc = cuda.shared.array((HT, BLOCK), float32)
        m_s = cuda.shared.array(HT, float32)
        l_s = cuda.shared.array(HT, float32)
        a_s = cuda.shared.array(HT, float32)
        acc = cuda.local.array((HT, DPT), float32)

        for i in range(tid, HT * RP, NT):
            h = i // RP
            c = i - h * RP
            val = _ZERO
            if h0 + h < H:  # the last tile of a head count HT does not divide
                if c < R:
                    val = cvt.bf16_to_f32(q_nope[n, h0 + h, c])
                else:
                    val = cvt.bf16_to_f32(q_pe[n, h0 + h, c - R])
            q_s[h, c] = val
        if tid < HT:
            m_s[tid] = _NEG_INF
            l_s[tid] = _ZERO
        for h in range(HT):
            for j in range(DPT):
                acc[h, j] = _ZERO

        nblocks = (length + BLOCK - 1) // BLOCK
        for b in range(nblocks):
            base = b * BLOCK
            for i in range(tid, BLOCK * RP, NT):
                jj = i // RP
                c = i - jj * RP
                if READ_TAIL or base + jj < length:
                    if c < R:
                        kv_s[jj, c] = c_kv[n, base + jj, c]
                    else:
                        kv_s[jj, c] = k_pe[n, base + jj, c - R]
            cuda.syncthreads()
            for i in range(tid, HB, NT):
                h = i // BLOCK
                jj = i - h * BLOCK
                if READ_TAIL or base + jj < length:
                    dot = _ZERO
                    for c in range(RP):
                        dot += q_s[h, c] * cvt.bf16_to_f32(kv_s[jj, c])
                    sc[h, jj] = dot * SCALE
                else:
                    sc[h, jj] = _NEG_INF
            cuda.syncthreads()
            if tid < HT:
                online_softmax_row(sc, m_s, l_s, a_s, tid, BLOCK)
            cuda.syncthreads()
            for j in range(DPT):
                d = tid + j * NT
                if d < R:
                    for h in range(HT):
                        acc[h, j] *= a_s[h]
                    for jj in range(BLOCK):
                        if READ_TAIL or base + jj < length:
                            vv = cvt.bf16_to_f32(kv_s[jj, d])
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
    kern = make_decode(h, r, p, shape["qk_dim"], read_tail)
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
