"""Inputs of the MoE prefill paths (NumPy only): activations, routing and
expert weights in the formats the kernels read.

Routing, one of two loads (the shape's ``skew``):

* ``uniform``: every expert gets ``floor`` or ``ceil`` of ``T * top_k / E``
  rows (token ``t``'s ``j``-th choice is ``perm[(t * top_k + j) % E]``, a
  random permutation of the experts): the load any tile bound of at least
  the average can carry.
* ``skewed``: one hot expert is every token's first choice (``T`` rows, the
  most a token-distinct routing can give one expert, ``1 / top_k`` of all
  routed rows); the other choices spread evenly over the other experts.

Weights are drawn per expert (Student-t, as the dense FFN's) and stored as
NVFP4 with a tensor scale per expert, which *are* the model's weights: the
reference decodes them exactly. The FP8 down projection's E4M3 weights (a
float32 scale per output row) are re-encoded from those.
"""
from __future__ import annotations

import numpy as np

from ..common import bits
from ..ffn_prefill import activations
from ..ffn_prefill.naive import quantize_nvfp4, quantize_rows_e4m3


def routing(rng: np.random.Generator, tokens: int, experts: int, top_k: int, skewed: bool):
    """``(ids int32 [T, top_k], wts float32 [T, top_k])``; weights are a
    softmax over each token's choices."""
    if top_k > experts or (skewed and top_k > 1 and top_k - 1 > experts - 1):
        raise ValueError(f"top_k={top_k} distinct experts of {experts}")
    perm = rng.permutation(experts)
    if skewed:
        hot, rest = perm[0], perm[1:]
        r = np.arange(tokens * (top_k - 1)).reshape(tokens, top_k - 1)
        ids = np.concatenate([np.full((tokens, 1), hot), rest[r % len(rest)]], axis=1) if top_k > 1 \
            else np.full((tokens, 1), hot)
    else:
        ids = perm[np.arange(tokens * top_k).reshape(tokens, top_k) % experts]
    logits = rng.standard_normal((tokens, top_k)).astype(np.float32)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return ids.astype(np.int32), (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def expert_weights(rng: np.random.Generator, experts: int, n: int, k: int) -> dict[str, np.ndarray]:
    """NVFP4 ``[E, n, k]``: ``fp4 [E, n, k/2]``, ``sc [E, n, k/16]``, ``ts
    float32 [E]``, and ``dec`` float32 ``[E, n, k]`` (their exact values)."""
    fp4 = np.empty((experts, n, k // 2), np.uint8)
    sc = np.empty((experts, n, k // bits.NVFP4_BLOCK), np.uint8)
    ts = np.empty(experts, np.float32)
    dec = np.empty((experts, n, k), np.float32)
    for e in range(experts):
        w = rng.standard_t(5, size=(n, k)).astype(np.float32) * np.float32(0.02)
        fp4[e], sc[e], ts[e] = quantize_nvfp4(w)
        dec[e] = bits.nvfp4_decode_np(fp4[e], sc[e], ts[e])
    return {"fp4": fp4, "sc": sc, "ts": ts, "dec": dec}


def e4m3_rows(dec: np.ndarray) -> dict[str, np.ndarray]:
    """E4M3 per output row of ``[E, n, k]`` weights: ``q [E, n, k]`` codes,
    ``s float32 [E, n]``."""
    e, n, k = dec.shape
    q, s = quantize_rows_e4m3(dec.reshape(e * n, k))
    return {"q": q.reshape(e, n, k), "s": s.reshape(e, n)}


def tokens_in(rng: np.random.Generator, tokens: int, hidden: int) -> np.ndarray:
    """fp16 ``[T, H]`` with outlier channels (the dense FFN's activations)."""
    return activations(rng, tokens, hidden)
