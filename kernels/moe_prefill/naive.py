"""Float64 references: the whole MoE layer's routed experts, and the
shared expert, in a page of NumPy.

``naive_routed_moe``: for each token ``t`` and choice ``j`` (expert
``e = ids[t, j]``, weight ``wts[t, j]``)::

    y[t] = sum_j wts[t, j] * W_down[e] @ act(W_up[e] @ x[t])

with ``act`` SiLU-GLU (``w_up[e]`` holds the gate rows, then the up rows:
``silu(g) * u``) or squared ReLU (non-gated). ``naive_shared_expert`` is
one expert on every token, weight 1.
"""
from __future__ import annotations

import numpy as np


def _act(h: np.ndarray, act: str) -> np.ndarray:
    if act == "silu_glu":
        n = h.shape[-1] // 2
        g, u = h[..., :n], h[..., n:]
        return g / (1.0 + np.exp(-g)) * u
    if act == "relu2":
        return np.maximum(h, 0.0) ** 2
    raise ValueError(f"activation {act!r}: silu_glu or relu2")


def naive_routed_moe(x, ids, wts, w_up, w_down, act: str = "silu_glu") -> np.ndarray:
    """``x [T, H]``, ``ids int [T, top_k]``, ``wts [T, top_k]``, ``w_up
    [E, N_up, H]``, ``w_down [E, H, I]`` -> ``y float64 [T, H]``."""
    x = np.asarray(x, dtype=np.float64)
    y = np.zeros((x.shape[0], w_down.shape[1]))
    for e in np.unique(ids):
        t, j = np.nonzero(ids == e)
        h = _act(x[t] @ np.asarray(w_up[e], dtype=np.float64).T, act)
        y[t] += np.asarray(wts, dtype=np.float64)[t, j][:, None] * (h @ np.asarray(w_down[e], dtype=np.float64).T)
    return y


def naive_shared_expert(x, w_up, w_down, act: str = "relu2") -> np.ndarray:
    """One expert on every token: ``W_down @ act(W_up @ x[t])``."""
    x = np.asarray(x, dtype=np.float64)
    return _act(x @ np.asarray(w_up, dtype=np.float64).T, act) @ np.asarray(w_down, dtype=np.float64).T
