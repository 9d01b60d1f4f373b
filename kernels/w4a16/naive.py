"""Float64 references for the W4A16 family: what every variant is checked against.

Weights are dequantized exactly (``leverctl_kernels.common.int4``) and the
fp16 activations taken at their fp16 values, then everything is computed in
float64 with no intermediate rounding. A kernel that accumulates in fp32 and
rounds its outputs (and, in the split/GEMM FFN variants, its intermediates)
to fp16 differs from these only by that rounding and its summation order.

Weights are ``[n, k]`` (output rows by inputs), as in the packed layout.
"""

from __future__ import annotations

import numpy as np

from ..common.int4 import dequantize_w4

_ROW_BLOCK = 2048  # rows dequantized at a time, so model shapes stay small


def _matmul_w4(qweight: np.ndarray, scales: np.ndarray, a: np.ndarray) -> np.ndarray:
    """``a[m, k] @ W.T`` in float64, W dequantized a block of rows at a time."""
    a = np.asarray(a, dtype=np.float64)
    n = qweight.shape[0]
    out = np.empty((a.shape[0], n), dtype=np.float64)
    for r0 in range(0, n, _ROW_BLOCK):
        w = dequantize_w4(qweight[r0 : r0 + _ROW_BLOCK], scales[r0 : r0 + _ROW_BLOCK])
        out[:, r0 : r0 + _ROW_BLOCK] = a @ w.astype(np.float64).T
    return out


def naive_gemv(qweight: np.ndarray, scales: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``y[n] = W x``."""
    return _matmul_w4(qweight, scales, np.asarray(x)[None, :])[0]


def naive_gemv_dual(qw_gate, s_gate, qw_up, s_up, x):
    """``(W_gate x, W_up x)``."""
    return naive_gemv(qw_gate, s_gate, x), naive_gemv(qw_up, s_up, x)


def naive_silu(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    return v / (1.0 + np.exp(-v))


def naive_silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """``silu(gate) * up``."""
    return naive_silu(gate) * np.asarray(up, dtype=np.float64)


def naive_ffn_decode(x, qw_gate, s_gate, qw_up, s_up, qw_down, s_down) -> np.ndarray:
    """Dense FFN for one token: ``W_down (silu(W_gate x) * (W_up x))``."""
    gate, up = naive_gemv_dual(qw_gate, s_gate, qw_up, s_up, x)
    return naive_gemv(qw_down, s_down, naive_silu_mul(gate, up))


def naive_gemm(a: np.ndarray, qweight: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """``c[m, n] = a[m, k] @ W.T``."""
    return _matmul_w4(qweight, scales, a)
