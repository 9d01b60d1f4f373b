"""Float64 reference of ``attention.rotation``: project, rotate each head
with the orthonormal Walsh-Hadamard transform, quantise K and V to FP8 E4M3
with one scale per (token, KV head)."""

from __future__ import annotations

import numpy as np

from ...common.bits import bf16_to_f32_np, e4m3_to_f32_np, f32_to_e4m3_np

E4M3_MAX = 448.0


def hadamard(d: int) -> np.ndarray:
    """The orthonormal Walsh-Hadamard matrix of order ``d`` (Sylvester order:
    ``(-1)^popcount(i & j) / sqrt(d)``)."""
    i = np.arange(d)
    pop = np.vectorize(lambda v: bin(v).count("1"))(i[:, None] & i[None, :])
    return np.where(pop % 2 == 0, 1.0, -1.0) / np.sqrt(d)


def project(x_bits, w_bits, hq: int, hkv: int, d: int):
    """Unrotated float64 ``(q, k, v)`` of shapes (T, H, d)."""
    x = bf16_to_f32_np(x_bits).astype(np.float64)
    w = bf16_to_f32_np(w_bits).astype(np.float64)
    qkv = (x @ w.T).reshape(x.shape[0], hq + 2 * hkv, d)
    return qkv[:, :hq], qkv[:, hq : hq + hkv], qkv[:, hq + hkv :]


def rotate(a: np.ndarray) -> np.ndarray:
    """Each head's last-axis vector times the Hadamard matrix."""
    return a @ hadamard(a.shape[-1]).T


def quantise(a: np.ndarray):
    """(E4M3 codes, scale per vector): scale = amax / 448 over the last axis."""
    amax = np.max(np.abs(a), axis=-1)
    scale = np.where(amax > 0, amax / E4M3_MAX, 1.0)
    codes = f32_to_e4m3_np((a / scale[..., None]).astype(np.float32))
    return codes, scale


def dequantise(codes, scale) -> np.ndarray:
    return e4m3_to_f32_np(codes).astype(np.float64) * np.asarray(scale, np.float64)[..., None]


def naive_rotated_qkv_write(x_bits, w_bits, hq: int, hkv: int, d: int) -> dict:
    """The expected outputs: rotated q (float64), and K and V as cached:
    their E4M3 codes' values (unscaled, as the check decodes them) and
    scales."""
    q, k, v = (rotate(a) for a in project(x_bits, w_bits, hq, hkv, d))
    kc, ks = quantise(k)
    vc, vs = quantise(v)
    return {
        "q": q,
        "k_cache": e4m3_to_f32_np(kc).astype(np.float64),
        "k_scale": ks,
        "v_cache": e4m3_to_f32_np(vc).astype(np.float64),
        "v_scale": vs,
    }
