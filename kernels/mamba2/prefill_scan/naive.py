"""Float64 references for the Mamba2 prefill scan (NumPy only).

Per head ``h`` (of ``H``, in ``G`` groups sharing ``B`` and ``C``; head
``h`` reads group ``h // (H / G)``), with a scalar decay ``A_h < 0``, a
step ``dt_t = softplus(dt_raw[t, h] + dt_bias[h])`` and a skip ``D_h``::

    S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T        S: [head dim P, state N]
    y_t = S_t C_t + D_h x_t

and the final state carried out. Three forms, checked against each other
in the tests:

* :func:`naive_scan_loop`: the recurrence element by element, plain Python
  loops (tiny sizes only): the definition, by eye;
* :func:`naive_mamba2_scan`: the same recurrence token by token, vectorised
  over heads: the path's reference;
* :func:`naive_ssd_scan`: the chunked state-space-duality form: per chunk,
  the intra-chunk quadratic block ``(L o C B^T) (dt x)`` with the decay
  mask ``L[i, j] = exp(cum_i - cum_j)`` (``j <= i``), plus the state
  entering the chunk read out through ``exp(cum_i) C_i``; the states passed
  from chunk to chunk. It is what the SSD kernels compute.

Layouts: ``x [T, H, P]``, ``dt_raw [T, H]``, ``dt_bias [H]``, ``A [H]``,
``B``, ``C [T, G, N]``, ``D [H]``, ``state [H, P, N]``; ``y [T, H, P]``.
"""

from __future__ import annotations

import math

import numpy as np


def softplus(v):
    """``log(1 + exp(v))``, stable for large ``v``."""
    v = np.asarray(v, dtype=np.float64)
    return np.where(v > 20.0, v, np.log1p(np.exp(np.minimum(v, 20.0))))


def _f64(*arrays):
    return [np.asarray(a, dtype=np.float64) for a in arrays]


def _group_of(h: int, g: int) -> np.ndarray:
    if h % g:
        raise ValueError(f"{h} heads do not split into {g} groups")
    return np.arange(h) // (h // g)


def naive_scan_loop(x, dt_raw, dt_bias, A, B, C, D, state):
    """The recurrence with scalar loops: ``(y, final state)``."""
    x, dt_raw, dt_bias, A, B, C, D, S = _f64(x, dt_raw, dt_bias, A, B, C, D, state)
    S = S.copy()
    t_len, h_len, p_len = x.shape
    g_len, n_len = B.shape[1], B.shape[2]
    y = np.zeros_like(x)
    for t in range(t_len):
        for h in range(h_len):
            g = h // (h_len // g_len)
            v = dt_raw[t, h] + dt_bias[h]
            dt = v if v > 20.0 else math.log1p(math.exp(v))
            decay = math.exp(dt * A[h])
            for p in range(p_len):
                acc = 0.0
                for n in range(n_len):
                    S[h, p, n] = decay * S[h, p, n] + dt * x[t, h, p] * B[t, g, n]
                    acc += S[h, p, n] * C[t, g, n]
                y[t, h, p] = acc + D[h] * x[t, h, p]
    return y, S


def naive_mamba2_scan(x, dt_raw, dt_bias, A, B, C, D, state):
    """The recurrence token by token, vectorised over heads: ``(y, final state)``."""
    x, dt_raw, dt_bias, A, B, C, D, S = _f64(x, dt_raw, dt_bias, A, B, C, D, state)
    S = S.copy()
    grp = _group_of(x.shape[1], B.shape[1])
    dt = softplus(dt_raw + dt_bias[None, :])  # [T, H]
    y = np.empty_like(x)
    for t in range(x.shape[0]):
        b, c = B[t, grp], C[t, grp]  # [H, N]
        S *= np.exp(dt[t] * A)[:, None, None]
        S += (dt[t][:, None] * x[t])[:, :, None] * b[:, None, :]
        y[t] = np.einsum("hpn,hn->hp", S, c) + D[:, None] * x[t]
    return y, S


def naive_ssd_scan(x, dt_raw, dt_bias, A, B, C, D, state, chunk: int):
    """The chunked (SSD) form, chunks of ``chunk`` tokens (the last may be
    shorter): ``(y, final state)``."""
    x, dt_raw, dt_bias, A, B, C, D, S = _f64(x, dt_raw, dt_bias, A, B, C, D, state)
    S = S.copy()
    grp = _group_of(x.shape[1], B.shape[1])
    dt = softplus(dt_raw + dt_bias[None, :])  # [T, H]
    y = np.empty_like(x)
    for t0 in range(0, x.shape[0], chunk):
        sl = slice(t0, t0 + chunk)
        q = x[sl].shape[0]
        b, c = B[sl][:, grp], C[sl][:, grp]  # [q, H, N]
        cum = np.cumsum(dt[sl] * A[None, :], axis=0)  # [q, H] log-decay from the chunk's start
        seg = cum[:, None, :] - cum[None, :, :]  # [i, j, H]
        mask = np.tril(np.ones((q, q), dtype=bool))[:, :, None]
        L = np.where(mask, np.exp(np.where(mask, seg, 0.0)), 0.0)  # decay from token j to token i
        cb = np.einsum("ihn,jhn->ijh", c, b)
        xdt = x[sl] * dt[sl][:, :, None]  # [q, H, P]
        y_intra = np.einsum("ijh,jhp->ihp", L * cb, xdt)
        y_inter = np.exp(cum)[:, :, None] * np.einsum("ihn,hpn->ihp", c, S)
        y[sl] = y_intra + y_inter + D[None, :, None] * x[sl]
        tail = np.exp(cum[-1][None, :] - cum)  # [q, H] decay from token j to the chunk's end
        S = np.exp(cum[-1])[:, None, None] * S + np.einsum("jh,jhp,jhn->hpn", tail, xdt, b)
    return y, S


SCAN_ARGS = ("x", "dt_raw", "dt_bias", "A", "B", "C", "D", "state")


def reference(shape, inputs: dict) -> dict:
    """The path's reference: the token-by-token recurrence."""
    y, state = naive_mamba2_scan(*[inputs[a] for a in SCAN_ARGS])
    return {"y": y, "state": state}
