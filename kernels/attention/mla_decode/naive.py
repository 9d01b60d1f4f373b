"""Float64 reference for MLA decode in the latent space
(``attention.mla_decode``): both variants are checked against this.

Layouts (bf16 as raw ``uint16`` bits)::

    q_nope       [N, H, R]   bf16   the query with W_UK absorbed: latent space
    q_pe         [N, H, P]   bf16   the query's rotary part
    c_kv         [N, C, R]   bf16   the latent KV cache (also the values)
    k_pe         [N, C, P]   bf16   the shared rotary key
    context_lens [N]         int32  tokens of sequence n (the new one included)
    o            [N, H, R]          softmax((q_nope c_kv^T + q_pe k_pe^T) mscale2 / sqrt(qk_dim)) c_kv
"""

from __future__ import annotations

import numpy as np

from ...common.bits import bf16_to_f32_np


def _f64(a) -> np.ndarray:
    return bf16_to_f32_np(a).astype(np.float64)


def naive_mla_decode(q_nope, q_pe, c_kv, k_pe, context_lens, qk_dim: int, mscale2: float = 1.0) -> np.ndarray:
    n, h, r = q_nope.shape
    o = np.empty((n, h, r), np.float64)
    qn, qp = _f64(q_nope), _f64(q_pe)
    for i in range(n):
        length = int(context_lens[i])
        ckv, kpe = _f64(c_kv[i, :length]), _f64(k_pe[i, :length])
        s = (qn[i] @ ckv.T + qp[i] @ kpe.T) * (mscale2 / np.sqrt(qk_dim))  # [H, L]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        o[i] = (p @ ckv) / p.sum(axis=1, keepdims=True)
    return o
