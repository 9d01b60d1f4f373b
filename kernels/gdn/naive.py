"""Float64 references for the Gated DeltaNet (GDN) paths.

Every GDN variant is checked against these, on its outputs *and* on the
carried state it leaves behind. Nothing here is fast; everything is written
to be read.

The recurrence, per value head ``h`` with an fp32 state ``S`` of shape
``d_k x d_v`` (rows: key dims, columns: value dims)::

    q_t, k_t  <- L2-normalised (eps inside the root), q_t also times 1/sqrt(d_k)
    S        <- exp(g_t) S                       g_t <= 0: per-token decay
    delta_t   = beta_t (v_t - S^T k_t)            beta_t in (0, 1)
    S        <- S + k_t delta_t^T                 the delta-rule write
    o_t       = S^T q_t

Grouped heads: q/k head ``h // (Hv / Hk)`` serves value head ``h``.

Layouts (token-major, as the engines keep them)::

    q, k   [T, Hk, dk]      v, o [T, Hv, dv]      g, beta [T, Hv]
    state  [Hv, dk, dv]     (one sequence)        pool [slots, Hv, dk, dv]

:func:`naive_chunked` is the same recurrence in the chunked WY form the
prefill and verify kernels use; ``test_gdn`` checks it against
:func:`naive_recurrent`, which is the one every kernel is compared with.
"""

from __future__ import annotations

import numpy as np

L2_EPS = 1e-6  # q/k normalisation: x / sqrt(sum x^2 + L2_EPS)
RMS_EPS = 1e-6  # gated RMSNorm: o / sqrt(mean o^2 + RMS_EPS)


def l2norm(x: np.ndarray) -> np.ndarray:
    """Normalise the last axis: ``x / sqrt(sum x^2 + L2_EPS)``."""
    x = np.asarray(x, np.float64)
    return x / np.sqrt(np.sum(x * x, axis=-1, keepdims=True) + L2_EPS)


def _heads(q, k, hv: int):
    """Normalised, scaled q and normalised k expanded to the value heads."""
    q = l2norm(q)
    k = l2norm(k)
    hk, dk = q.shape[-2], q.shape[-1]
    if hv % hk:
        raise ValueError(f"{hv} value heads do not split over {hk} q/k heads")
    group = hv // hk
    idx = np.arange(hv) // group
    return q[..., idx, :] / np.sqrt(dk), k[..., idx, :]


def _float64_inputs(q, k, v, g, beta, state):
    """``(qh, kh, v, g, beta, S)`` in float64: q/k normalised (q scaled) and
    expanded to the value heads, ``S`` a copy of ``state``."""
    v = np.asarray(v, np.float64)
    qh, kh = _heads(q, k, v.shape[1])
    return (qh, kh, v, np.asarray(g, np.float64), np.asarray(beta, np.float64), np.array(state, np.float64, copy=True))


def naive_recurrent(q, k, v, g, beta, state):
    """Token by token in float64. Returns ``(o [T, Hv, dv], final state
    [Hv, dk, dv])``; ``state`` itself is not modified."""
    qh, kh, v, g, beta, S = _float64_inputs(q, k, v, g, beta, state)
    T, hv, dv = v.shape
    o = np.zeros((T, hv, dv))
    for t in range(T):
        S *= np.exp(g[t])[:, None, None]
        pred = np.einsum("hkv,hk->hv", S, kh[t])
        delta = beta[t][:, None] * (v[t] - pred)
        S += kh[t][:, :, None] * delta[:, None, :]
        o[t] = np.einsum("hkv,hk->hv", S, qh[t])
    return o, S


def forward_substitution_inverse(A: np.ndarray) -> np.ndarray:
    """``(I + A)^-1`` for a strictly lower-triangular ``A``, row by row:
    ``T[i] = e_i - sum_{j<i} A[i, j] T[j]``."""
    n = A.shape[0]
    T = np.eye(n)
    for i in range(1, n):
        T[i, :i] -= A[i, :i] @ T[:i, :i]
    return T


def naive_chunked(q, k, v, g, beta, state, chunk: int):
    """The chunked WY form, chunk by chunk, in float64 (same result as
    :func:`naive_recurrent`). Within a chunk of ``L`` tokens and start state
    ``S``::

        G_i   = sum_{j<=i} g_j                      cumulative decay
        A     = strictly-lower(beta_i (k_i . k_j) exp(G_i - G_j))
        T     = (I + A)^-1                          forward substitution
        W     = T diag(beta exp(G)) K               U = T diag(beta) V
        delta = U - W S                             the chunk's delta_t rows
        o     = diag(exp(G)) Q S + (Q K^T * exp(G_i - G_j), lower incl.) delta
        S'    = exp(G_L) S + K^T diag(exp(G_L - G_j)) delta
    """
    qh, kh, v, g, beta, S = _float64_inputs(q, k, v, g, beta, state)
    T_, hv, dv = v.shape
    o = np.zeros((T_, hv, dv))
    for c0 in range(0, T_, chunk):
        sl = slice(c0, min(T_, c0 + chunk))
        for h in range(hv):
            Q, K, V = qh[sl, h], kh[sl, h], v[sl, h]
            b = beta[sl, h]
            G = np.cumsum(g[sl, h])
            decay = np.exp(G[:, None] - G[None, :])
            A = np.tril(b[:, None] * (K @ K.T) * decay, -1)
            Tm = forward_substitution_inverse(A)
            W = Tm @ ((b * np.exp(G))[:, None] * K)
            U = Tm @ (b[:, None] * V)
            delta = U - W @ S[h]
            P = np.tril((Q @ K.T) * decay)
            o[sl, h] = np.exp(G)[:, None] * (Q @ S[h]) + P @ delta
            S[h] = np.exp(G[-1]) * S[h] + K.T @ (np.exp(G[-1] - G)[:, None] * delta)
    return o, S


def naive_decode(q, k, v, g, beta, slots, pool):
    """One token for each of ``N`` sequences, sequence ``n`` carrying its
    state in ``pool[slots[n]]``. ``q, k [N, Hk, dk]``, ``v [N, Hv, dv]``,
    ``g, beta [N, Hv]``. Returns ``(o [N, Hv, dv], pool')``; slots not in
    ``slots`` are returned unchanged."""
    P = np.array(pool, np.float64, copy=True)
    v = np.asarray(v)
    o = np.zeros(v.shape)
    for n, s in enumerate(np.asarray(slots)):
        on, P[s] = naive_recurrent(q[n : n + 1], k[n : n + 1], v[n : n + 1], g[n : n + 1], beta[n : n + 1], P[s])
        o[n] = on[0]
    return o, P


def silu(x):
    x = np.asarray(x, np.float64)
    return x / (1.0 + np.exp(-x))


def naive_conv_decode(x, weight, conv_state, slots):
    """One decode step of the causal depthwise conv1d + SiLU.

    ``x [N, C]`` (this token's mixer input, channels ``[q | k | v]``),
    ``weight [C, W]`` (tap ``W-1`` multiplies the newest input),
    ``conv_state [slots, W-1, C]`` (the last ``W-1`` inputs, oldest first).
    Returns ``(silu(conv) [N, C], conv_state')``: each used slot shifts by one
    and takes ``x`` as its newest row."""
    x = np.asarray(x, np.float64)
    w = np.asarray(weight, np.float64)
    cs = np.array(conv_state, np.float64, copy=True)
    width = w.shape[1]
    y = np.zeros(x.shape)
    for n, s in enumerate(np.asarray(slots)):
        window = np.concatenate([cs[s], x[n][None, :]], axis=0)  # [W, C], oldest first
        y[n] = silu(np.sum(window * w.T, axis=0))
        cs[s] = window[1:] if width > 1 else cs[s]
    return y, cs


def naive_gated_rmsnorm(o, z, weight):
    """Qwen3-Next's gated RMSNorm over each head's ``dv`` values, norm before
    gate: ``o / sqrt(mean(o^2) + RMS_EPS) * weight * silu(z)``."""
    o = np.asarray(o, np.float64)
    rms = np.sqrt(np.mean(o * o, axis=-1, keepdims=True) + RMS_EPS)
    return o / rms * np.asarray(weight, np.float64) * silu(z)


def split_qkv(y, hk: int, hv: int, dk: int, dv: int):
    """The conv output's channels ``[q (Hk dk) | k (Hk dk) | v (Hv dv)]`` as
    ``q, k [N, Hk, dk]`` and ``v [N, Hv, dv]``."""
    n = y.shape[0]
    q = y[:, : hk * dk].reshape(n, hk, dk)
    k = y[:, hk * dk : 2 * hk * dk].reshape(n, hk, dk)
    v = y[:, 2 * hk * dk :].reshape(n, hv, dv)
    return q, k, v


def naive_fused_conv(
    x, conv_weight, conv_state, g, beta, z, norm_weight, slots, state, hk: int, hv: int, dk: int, dv: int
):
    """Decode through conv1d + SiLU, the GDN step and the gated RMSNorm.
    Returns ``(out [N, Hv, dv], conv_state', state')``."""
    y, cs = naive_conv_decode(x, conv_weight, conv_state, slots)
    q, k, v = split_qkv(y, hk, hv, dk, dv)
    o, pool = naive_decode(q, k, v, g, beta, slots, state)
    return naive_gated_rmsnorm(o, z, norm_weight), cs, pool
