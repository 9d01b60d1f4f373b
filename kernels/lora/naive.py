"""The float64 reference of both LoRA projection paths (NumPy only).

``y = x W^T + s (x A^T) B^T``: ``x[m, k]`` activations, ``W[n, k]`` the base
weights, ``A[r, k]`` and ``B[n, r]`` the adapter (each stored with its
reduction dimension contiguous, as ``W`` is), ``s = alpha / r`` its scale.
"""

from __future__ import annotations

import numpy as np


def naive_lora(x: np.ndarray, w: np.ndarray, a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    """``x W^T + s (x A^T) B^T`` in float64."""
    x64, w64 = np.asarray(x, np.float64), np.asarray(w, np.float64)
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return x64 @ w64.T + float(s) * ((x64 @ a64.T) @ b64.T)


def naive_merge(w: np.ndarray, a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    """The merged weights ``W + s B A`` in float64 (``[n, k]``)."""
    return np.asarray(w, np.float64) + float(s) * (np.asarray(b, np.float64) @ np.asarray(a, np.float64))


def scale(shape) -> float:
    """The adapter's scale ``s = alpha / r``."""
    return float(shape["alpha"]) / float(shape["r"])


def reference(shape, inputs: dict) -> dict:
    return {"y": naive_lora(inputs["x"], inputs["w"], inputs["a"], inputs["b"], scale(shape))}
