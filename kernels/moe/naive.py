"""Float64 references of the MoE paths: the router, the routed experts and
the union statistics at decode; the whole layer's routed experts and the
shared expert at prefill; short enough to check by eye.

Expert weights arrive as ``expert(e) -> float array [N, K]`` (the format's
exact decoding, ``formats.DECODE``), so one reference serves every format.
"""

from __future__ import annotations

import numpy as np


def silu(v: np.ndarray) -> np.ndarray:
    return v / (1.0 + np.exp(-v))


def naive_router(x: np.ndarray, wg: np.ndarray, top_k: int):
    """``(logits, ids, weights)``: ``logits = x wg^T``, softmax over the
    experts, the ``top_k`` most probable (the lower expert first on equal
    probabilities) and their probabilities over their sum."""
    logits = np.asarray(x, np.float64) @ np.asarray(wg, np.float64).T
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    ids = np.argsort(-p, axis=1, kind="stable")[:, :top_k]
    w = np.take_along_axis(p, ids, axis=1)
    return logits, ids, w / w.sum(axis=1, keepdims=True)


def _by_expert(ids: np.ndarray) -> dict[int, np.ndarray]:
    """expert -> its assignments ``a = r * k + s``, in increasing order."""
    flat = np.asarray(ids).reshape(-1)
    return {int(e): np.flatnonzero(flat == e) for e in np.unique(flat)}


def naive_gateup(x: np.ndarray, ids: np.ndarray, expert) -> np.ndarray:
    """``h[a] = silu(x[r] Wg_e^T) * (x[r] Wu_e^T)`` for every assignment
    ``a = r k + s`` routed to ``e = ids[r, s]``; gate and up stacked in
    ``expert(e)`` (``[2I, H]``)."""
    x = np.asarray(x, np.float64)
    k = ids.shape[1]
    h = None
    for e, assigned in _by_expert(ids).items():
        w = np.asarray(expert(e), np.float64)
        inter = w.shape[0] // 2
        if h is None:
            h = np.zeros((ids.size, inter))
        xa = x[assigned // k]
        h[assigned] = silu(xa @ w[:inter].T) * (xa @ w[inter:].T)
    return h


def naive_down(h: np.ndarray, ids: np.ndarray, rw: np.ndarray, expert) -> np.ndarray:
    """``y[r] = sum_s rw[r, s] * h[r k + s] Wd_e^T``."""
    h = np.asarray(h, np.float64)
    rows, k = ids.shape
    part = None
    for e, assigned in _by_expert(ids).items():
        w = np.asarray(expert(e), np.float64)
        if part is None:
            part = np.zeros((ids.size, w.shape[0]))
        part[assigned] = h[assigned] @ w.T
    return (part.reshape(rows, k, -1) * np.asarray(rw, np.float64)[:, :, None]).sum(axis=1)


def naive_moe(x, ids, rw, gate_up, down) -> np.ndarray:
    """The routed-expert FFN of a batch: gate/up, SiLU product, down, combine."""
    return naive_down(naive_gateup(x, ids, gate_up), ids, rw, down)


def naive_union(ids: np.ndarray, experts: int):
    """``(distinct experts the batch touches, rows routed to each expert)``."""
    rows = np.bincount(np.asarray(ids).reshape(-1), minlength=experts)
    return int(np.count_nonzero(rows)), rows


# ── prefill ─────────────────────────────────────────────────────────────────
#
# Float64 references: the whole MoE layer's routed experts, and the
# shared expert, in a page of NumPy.
#
# ``naive_routed_moe``: for each token ``t`` and choice ``j`` (expert
# ``e = ids[t, j]``, weight ``wts[t, j]``)::
#
#     y[t] = sum_j wts[t, j] * W_down[e] @ act(W_up[e] @ x[t])
#
# with ``act`` SiLU-GLU (``w_up[e]`` holds the gate rows, then the up rows:
# ``silu(g) * u``) or squared ReLU (non-gated). ``naive_shared_expert`` is
# one expert on every token, weight 1.


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
