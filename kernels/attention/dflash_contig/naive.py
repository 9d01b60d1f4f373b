"""Float64 reference for the DFlash draft block's attention
(``attention.dflash_contig``): both variants are checked against this.

Layouts (bf16 as raw ``uint16`` bits)::

    q            [N, T, Hq, D]         bf16   the draft block: T query tokens per sequence
    k_cache      [blocks, 16, Hkv, D]  bf16   paged KV (the ``paged`` variant)
    block_table  [N, max_blocks]       int32
    k_contig     [N, C, Hkv, D]        bf16   the same tokens, one buffer per sequence (``contig``)
    context_lens [N]                   int32  L: tokens in the cache, the block's T last
    o            [N, T, Hq, D]                query t sees tokens 0 .. L - T + t

Query head ``h`` reads KV head ``h // (Hq / Hkv)``.
"""

from __future__ import annotations

import numpy as np

from ...common.bits import bf16_to_f32_np
from ..naive import gather


def naive_dflash_block(q, k_cache, v_cache, block_table, context_lens) -> np.ndarray:
    n, t_, hq, d = q.shape
    hkv = k_cache.shape[2]
    group = hq // hkv
    qf = bf16_to_f32_np(q).astype(np.float64)
    o = np.empty(q.shape, np.float64)
    for i in range(n):
        length = int(context_lens[i])
        k = gather(k_cache, block_table[i], length)  # [L, Hkv, D]
        v = gather(v_cache, block_table[i], length)
        # query t sees tokens j <= L - T + t
        hidden = np.arange(length)[None, :] > (length - t_ + np.arange(t_))[:, None]  # [T, L]
        for g in range(hkv):
            heads = slice(g * group, (g + 1) * group)
            kg, vg = np.ascontiguousarray(k[:, g]), np.ascontiguousarray(v[:, g])  # [L, D]
            s = (qf[i, :, heads].reshape(-1, d) @ kg.T).reshape(t_, group, length) / np.sqrt(d)
            s[np.broadcast_to(hidden[:, None, :], s.shape)] = -np.inf
            p = np.exp(s - s.max(axis=2, keepdims=True))  # [T, G, L]
            pv = (p.reshape(-1, length) @ vg).reshape(t_, group, d)
            o[i, :, heads] = pv / p.sum(axis=2, keepdims=True)
    return o
