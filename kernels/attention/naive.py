"""Float64 reference for paged decode attention: every variant is checked
against this and nothing else.

Layouts (bf16 as raw ``uint16`` bits, see ``common.bits``)::

    q            [N, Hq, D]            bf16   one new token per sequence
    k_cache      [blocks, 16, Hkv, D]  bf16   the paged KV cache, 16 tokens a block
    v_cache      [blocks, 16, Hkv, D]  bf16
    block_table  [N, max_blocks]       int32  sequence n's i-th block is k_cache[block_table[n, i]]
    context_lens [N]                   int32  tokens in the cache for sequence n (the new one included)
    o            [N, Hq, D]                   softmax(q k^T / sqrt(D)) v over those tokens

Query head ``h`` reads KV head ``h // (Hq / Hkv)`` (grouped-query attention).
Only the first ``context_lens[n]`` slots are read: the rest of the tail block
was never written.
"""

from __future__ import annotations

import numpy as np

from ..common.bits import bf16_to_f32_np

BLOCK = 16  # tokens per KV block


def gather(cache: np.ndarray, table_row: np.ndarray, length: int) -> np.ndarray:
    """``[length, Hkv, D]`` float64: a sequence's first ``length`` tokens."""
    blocks = table_row[: -(-length // BLOCK)]
    return bf16_to_f32_np(cache[blocks]).astype(np.float64).reshape(-1, *cache.shape[2:])[:length]


def naive_paged_decode(q, k_cache, v_cache, block_table, context_lens) -> np.ndarray:
    n, hq, d = q.shape
    hkv = k_cache.shape[2]
    group = hq // hkv
    qf = bf16_to_f32_np(q).astype(np.float64)
    o = np.empty((n, hq, d), np.float64)
    for i in range(n):
        length = int(context_lens[i])
        k = gather(k_cache, block_table[i], length)  # [L, Hkv, D]
        v = gather(v_cache, block_table[i], length)
        for h in range(hq):
            s = k[:, h // group] @ qf[i, h] / np.sqrt(d)
            p = np.exp(s - s.max())
            o[i, h] = p @ v[:, h // group] / p.sum()
    return o
