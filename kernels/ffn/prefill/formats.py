"""The weight formats the dense-FFN prefill arms read, made from one float
weight matrix (NumPy only).

* ``w4a16``: ``qweight``/``scales``, int4 with fp16 scales per 128 inputs
  (``leverctl_kernels.common.int4``): the default GEMM, and the BF16 and
  FP8 arms, which dequantise it in registers.
* ``int8``: ``w_i8 int8[n, k]`` and ``s_i8 float32[n]``: symmetric int8 per
  output row (scale ``max|w| / 127``), the int8 faith2/faith5 arm's weights.
* ``q4k``: ``w_q4k uint8[n, k / 256 * 144]``, GGUF's Q4_K blocks byte for
  byte (``leverctl_kernels.common.q4k``); only where ``k`` is a multiple of
  256 (elsewhere the input is absent and the arm is not taken).
* ``nvfp4``: ``w_fp4 uint8[n, k / 2]``, ``w_fp4_scales uint8[n, k / 16]``,
  ``w_fp4_ts float32[1]``: the W4A4 arm's weights.
"""

from __future__ import annotations

import numpy as np

from ...common import int4, q4k
from .naive import quantize_rows_int8


def w4a16(w: np.ndarray) -> dict[str, np.ndarray]:
    qweight, scales = int4.quantize_w4(w)
    return {"qweight": qweight, "scales": scales}


def int8(w: np.ndarray) -> dict[str, np.ndarray]:
    q, s = quantize_rows_int8(w)
    return {"w_i8": q, "s_i8": s}


def w4a16_bytes(n: int, k: int) -> int:
    return int4.packed_bytes(n, k)


def int8_bytes(n: int, k: int) -> int:
    return n * k + 4 * n


def q4k_blocks(w: np.ndarray) -> dict[str, np.ndarray]:
    if w.shape[1] % q4k.QK_K:
        return {}
    return {"w_q4k": q4k.quantize(w)}


def q4k_bytes(n: int, k: int) -> int:
    return q4k.packed_bytes(n, k)


def nvfp4(w: np.ndarray) -> dict[str, np.ndarray]:
    """NVFP4 weights (``common.bits``' codec): E2M1 pairs, an E4M3 scale per
    16 values, and the float32 tensor scale as a one-element array."""
    from .naive import quantize_nvfp4

    packed, scales, ts = quantize_nvfp4(w)
    return {"w_fp4": packed, "w_fp4_scales": scales, "w_fp4_ts": np.array([ts], dtype=np.float32)}


def nvfp4_bytes(n: int, k: int) -> int:
    return n * (k // 2) + n * (k // 16) + 4
