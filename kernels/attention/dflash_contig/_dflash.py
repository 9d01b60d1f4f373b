"""The two kernels both ``attention.dflash_contig`` variants launch: a draft
block of ``T`` query tokens, causal within the block, over a sequence's
KV (the target's context, the block's own tokens last). ``PAGED`` (a
compile-time constant) is the only difference between the variants: where
the K and V of token ``j`` of sequence ``n`` live::

    PAGED    k[block_table[n, j // 16], j % 16, g, :]   pool of 16-token blocks
    contig   k[n, j, g, :]                              one buffer per sequence

Everything else -- the split policy, the arithmetic and its order -- is the
same code, so the two variants give the same bits (the tests check it); the
contiguous one does not read the block table.

Causality: query ``t`` of the block (``0 .. T-1``) sits at position
``L - T + t`` of a sequence of ``L`` tokens and sees its first ``L - T + t
+ 1`` tokens. ``NO_MASK`` (tests only) lets every query see all ``L``: the
bug of a block attending to its own future tokens.

Kernel 1, ``split``: grid ``(S_max, T * Hkv, N)``, ``NT`` threads; block
``(s, t * Hkv + g, n)`` runs query ``t``'s heads ``g*G .. g*G+G-1`` over
the KV blocks of split ``s`` (``_paged.num_splits`` of the sequence's
length, the launch's ``N * T`` queries counted as sequences). The loop is
``_paged``'s: the query's q rows staged once by ``_paged.make_row_stage``,
the paged form's block table a word a lane into shared memory ``NT``
entries at a time, K and V tiles to shared memory by ``_paged.make_kv_stage``
(16-byte loads where the head dim allows, V as bf16 pairs in two slots),
scores by thread (head, token), the online softmax by thread head, PV by
thread dim, three barriers per KV block. A split wholly after what its
query sees writes ``m = -inf, l = 0``, which the merge weighs zero. Kernel
2, ``merge``: grid ``(Hq, T, N)``, ``D / 4`` threads, the splits merged in
split order as ``_paged``'s merge: the length read by one lane, the
``(m, l)`` pairs into shared memory once a block, the partials summed 16
bytes a lane (``_paged.make_combine``).

Each of the ``T`` queries' blocks reads the group's K and V of its splits:
``T`` reads of the same bytes, the repeats served from L2 (the declared
traffic counts them once). fp32 on CUDA cores.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from numba import cuda, float32, int32, uint32

from ...common import vload
from ...common.launch import check_block, check_grid, check_shared, device_inline, jit_bounded
from .._paged import (
    BLOCK,
    V_ALIGN,
    V_TILES,
    make_combine,
    make_kv_stage,
    make_row_stage,
    make_softmax_rows,
    max_splits,
    merge_threads,
    num_splits,
    split_shared_bytes,
    threads_for,
    v_half,
    v_pitch,
)

_NEG_INF = np.float32(-math.inf)
_ZERO = np.float32(0.0)
_ONE = np.float32(1.0)

_num_splits = device_inline(num_splits)


@lru_cache(maxsize=None)
def make_split(HKV: int, G: int, T: int, D: int, TARGET: int, MIN_BLOCKS: int, PAGED: bool, NO_MASK: bool = False):
    """Kernel 1 for ``Hkv`` KV heads of ``G`` query heads, a draft block of
    ``T`` tokens, head dim ``D``, the split policy's ``TARGET`` and
    ``MIN_BLOCKS``; ``PAGED`` picks the KV layout. ``NO_MASK`` builds the
    broken kernel of the tests."""
    NT = threads_for(D)
    DPT = -(-D // NT)
    GB = G * BLOCK
    softmax_rows = make_softmax_rows(G, NT)
    DP = D + 1  # shared rows padded: threads of different tokens hit different banks
    SCALE = np.float32(1.0 / math.sqrt(D))
    VP = v_pitch(D)
    QVEC = D % 8 == 0
    BT = NT if PAGED else 1  # block-table entries staged at a time (the contiguous form reads none)
    CHUNK = NT if PAGED else 1 << 30  # KV blocks a table refill covers (contiguous: the whole split)
    wide_ok, stage = make_kv_stage(HKV, D, NT)
    stage_q = make_row_stage(G, D, NT)

    @jit_bounded(NT, min(32, max(1, 512 // NT)))  # as _paged's split: at most 128 registers
    def dflash_split(q, k, v, block_table, context_lens, ref_seqs, part_o, part_ml):
        si = cuda.blockIdx.x
        t = cuda.blockIdx.y // HKV
        g = cuda.blockIdx.y - t * HKV
        n = cuda.blockIdx.z
        length = context_lens[n]
        splits, per = _num_splits(length, ref_seqs, HKV, TARGET, MIN_BLOCKS)
        if si >= splits:  # the whole block leaves before any barrier
            return
        seen = length if NO_MASK else length - T + t + 1
        tid = cuda.threadIdx.x

        q_s = cuda.shared.array((G, DP), float32)
        k_s = cuda.shared.array((BLOCK, DP), float32)
        v_s = cuda.shared.array((2, BLOCK, VP), uint32, alignment=V_ALIGN)
        sc = cuda.shared.array((G, BLOCK), float32)
        m_s = cuda.shared.array(G, float32)
        l_s = cuda.shared.array(G, float32)
        a_s = cuda.shared.array(G, float32)
        bt_s = cuda.shared.array(BT, int32)
        acc = cuda.local.array((G, DPT), float32)

        stage_q(q_s, q[n, t], g * G, G, QVEC and vload.aligned16(q), tid)  # _paged's q staging, once
        if tid < G:
            m_s[tid] = _NEG_INF
            l_s[tid] = _ZERO
        for h in range(G):
            for j in range(DPT):
                acc[h, j] = _ZERO

        b0 = si * per
        b_end = b0 + per
        seen_blocks = (seen + BLOCK - 1) // BLOCK
        if b_end > seen_blocks:
            b_end = seen_blocks
        wide = wide_ok(k, v)  # the same in every lane
        for c0 in range(b0, b_end, CHUNK):
            if PAGED:  # as _paged: the table's next NT entries -> shared, a word a lane
                if tid < b_end - c0:
                    bt_s[tid] = block_table[n, c0 + tid]
                cuda.syncthreads()
            for b in range(c0, min(c0 + CHUNK, b_end)):
                base = b * BLOCK
                if PAGED:
                    a0 = bt_s[b - c0]
                    off = 0
                else:
                    a0 = n
                    off = base
                vb = b & 1
                stage(k_s, v_s, k, v, a0, off, g, vb, base, seen, wide, tid)  # _paged's K and V tiles
                cuda.syncthreads()
                for i in range(tid, GB, NT):
                    h = i // BLOCK
                    tt = i - h * BLOCK
                    if base + tt < seen:
                        dot = _ZERO
                        for d in range(D):
                            dot += q_s[h, d] * k_s[tt, d]
                        sc[h, tt] = dot * SCALE
                    else:
                        sc[h, tt] = _NEG_INF
                cuda.syncthreads()
                softmax_rows(sc, m_s, l_s, a_s, tid)  # the block's first token is always seen: the max is finite
                cuda.syncthreads()
                for j in range(DPT):
                    d = tid + j * NT
                    if d < D:
                        for h in range(G):
                            acc[h, j] *= a_s[h]
                        for tt in range(BLOCK):
                            if base + tt < seen:
                                vv = v_half(v_s[vb, tt, d >> 1], d)
                                for h in range(G):
                                    acc[h, j] += sc[h, tt] * vv
                # no barrier: as in _paged, the next writes of k_s, sc and a_s
                # come after the next first barrier, and the next V tile goes to
                # the other slot

        for j in range(DPT):
            d = tid + j * NT
            if d < D:
                for h in range(G):
                    part_o[n, t, g * G + h, si, d] = acc[h, j]
        if tid < G:
            part_ml[n, t, g * G + tid, si, 0] = m_s[tid]
            part_ml[n, t, g * G + tid, si, 1] = l_s[tid]

    return dflash_split


@lru_cache(maxsize=None)
def make_merge(HKV: int, D: int, TARGET: int, MIN_BLOCKS: int, FAULT: int = 0):
    """Kernel 2: per (query head, draft token, sequence) the splits merged in
    split order; a split its query does not reach has ``m = -inf`` and
    weight 0. The sum is ``_paged``'s (``make_combine``: 16 bytes a lane
    where the rows allow); ``FAULT`` builds the broken kernels of the tests."""
    NT = merge_threads(D)
    VEC = D % 4 == 0
    combine = make_combine(D, NT, FAULT)

    @jit_bounded(NT)
    def dflash_merge(context_lens, ref_seqs, part_o, part_ml, o):
        h = cuda.blockIdx.x
        t = cuda.blockIdx.y
        n = cuda.blockIdx.z
        tid = cuda.threadIdx.x
        w = cuda.shared.array(TARGET, float32)
        ml = cuda.shared.array((TARGET, 2), float32)
        ns = cuda.shared.array(1, int32)
        if tid == 0:  # the length, one lane: the split count to every lane through shared memory
            ns[0] = _num_splits(context_lens[n], ref_seqs, HKV, TARGET, MIN_BLOCKS)[0]
        cuda.syncthreads()
        splits = ns[0]
        for i in range(tid, 2 * splits, NT):  # the splits' (m, l), contiguous: read once a block
            ml[i >> 1, i & 1] = part_ml[n, t, h, i >> 1, i & 1]
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
        combine(part_o[n, t, h], w, inv, splits, o[n, t, h], wide, tid)

    return dflash_merge


def ref_seqs(shape) -> int:
    """The count the split policy divides the GPU by: every query of the
    launch (``N * T``), each already a row of blocks in the grid."""
    return shape["n"] * shape["t"]


def launcher(shape, paged: bool, no_mask: bool = False):
    """The launch of a variant at ``shape``: ``split`` over the layout
    ``paged`` names, then ``merge``. The partials are its workspace."""
    n, t, hq, hkv, d = shape["n"], shape["t"], shape["hq"], shape["hkv"], shape["d"]
    target, minb = shape["target_ctas"], shape["min_split_blocks"]
    ref = ref_seqs(shape)
    split = make_split(hkv, hq // hkv, t, d, target, minb, paged, no_mask)
    merge = make_merge(hkv, d, target, minb)
    smax = max_splits(shape["ctx"], ref, hkv, target, minb)
    nt = check_block(threads_for(d), warps=False)
    mt = check_block(merge_threads(d), warps=False)
    check_grid((smax, t * hkv, n))
    check_grid((hq, t, n))
    check_shared(split_shared_bytes(hq // hkv, d, V_TILES, paged))
    part_o = cuda.device_array((n, t, hq, smax, d), np.float32)
    part_ml = cuda.device_array((n, t, hq, smax, 2), np.float32)
    no_table = None if paged else cuda.to_device(np.zeros((1, 1), np.int32))

    def launch(b):
        if paged:
            kv, table = (b["k_cache"], b["v_cache"]), b["block_table"]
        else:
            kv, table = (b["k_contig"], b["v_contig"]), no_table
        r = np.int64(ref)
        split[(smax, t * hkv, n), nt](b["q"], *kv, table, b["context_lens"], r, part_o, part_ml)
        merge[(hq, t, n), mt](b["context_lens"], r, part_o, part_ml, b["o"])

    launch.workspace = {"part_o": part_o, "part_ml": part_ml}
    return launch


__all__ = ["BLOCK", "launcher", "make_merge", "make_split", "num_splits", "ref_seqs"]
