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

Weights are NVFP4 codes with a tensor scale per expert, drawn as codes:
they *are* the model's weights, and the reference decodes them exactly. The FP8 down projection's E4M3 weights (a
float32 scale per output row) are re-encoded from those.
"""

from __future__ import annotations

import numpy as np

from ...common import bits
from ...ffn.prefill.naive import quantize_rows_e4m3
from ...ffn.prefill.spec import activations


def routing(rng: np.random.Generator, tokens: int, experts: int, top_k: int, skewed: bool):
    """``(ids int32 [T, top_k], wts float32 [T, top_k])``; weights are a
    softmax over each token's choices."""
    if top_k > experts or (skewed and top_k > 1 and top_k - 1 > experts - 1):
        raise ValueError(f"top_k={top_k} distinct experts of {experts}")
    perm = rng.permutation(experts)
    if skewed:
        hot, rest = perm[0], perm[1:]
        r = np.arange(tokens * (top_k - 1)).reshape(tokens, top_k - 1)
        ids = (
            np.concatenate([np.full((tokens, 1), hot), rest[r % len(rest)]], axis=1)
            if top_k > 1
            else np.full((tokens, 1), hot)
        )
    else:
        ids = perm[np.arange(tokens * top_k).reshape(tokens, top_k) % experts]
    logits = rng.standard_normal((tokens, top_k)).astype(np.float32)
    w = np.exp(logits - logits.max(axis=1, keepdims=True))
    return ids.astype(np.int32), (w / w.sum(axis=1, keepdims=True)).astype(np.float32)


def expert_weights(rng: np.random.Generator, experts: int, n: int, k: int) -> dict[str, np.ndarray]:
    """NVFP4 ``[E, n, k]`` drawn as codes: ``fp4 [E, n, k/2]`` (every E2M1
    value equally likely, so |w| up to 6 block scales), ``sc [E, n, k/16]``
    (E4M3 block scales over two binades, 0.5 to 1.875), ``ts float32 [E]``
    (about 0.02 / 6 per expert). Drawing codes, not quantising floats,
    keeps a 512-expert model layer to seconds on the host."""
    fp4 = rng.integers(0, 256, size=(experts, n, k // 2), dtype=np.uint8)
    sc = rng.integers(0x30, 0x40, size=(experts, n, k // bits.NVFP4_BLOCK), dtype=np.uint8)
    ts = (np.float32(0.02 / 6) * rng.uniform(0.5, 2.0, size=experts)).astype(np.float32)
    return {"fp4": fp4, "sc": sc, "ts": ts}


def decode(w: dict[str, np.ndarray]) -> np.ndarray:
    """float32 ``[E, n, k]``: the exact values of :func:`expert_weights`'s codes."""
    return np.stack([bits.nvfp4_decode_np(w["fp4"][e], w["sc"][e], w["ts"][e]) for e in range(len(w["ts"]))])


def e4m3_rows(dec: np.ndarray) -> dict[str, np.ndarray]:
    """E4M3 per output row of ``[E, n, k]`` weights: ``q [E, n, k]`` codes,
    ``s float32 [E, n]``."""
    e, n, k = dec.shape
    q, s = quantize_rows_e4m3(dec.reshape(e * n, k))
    return {"q": q.reshape(e, n, k), "s": s.reshape(e, n)}


def tokens_in(rng: np.random.Generator, tokens: int, hidden: int) -> np.ndarray:
    """fp16 ``[T, H]`` with outlier channels (the dense FFN's activations)."""
    return activations(rng, tokens, hidden)
