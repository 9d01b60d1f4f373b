"""The weight formats the dense-FFN prefill arms read, made from one float
weight matrix (NumPy only).

* ``w4a16``: ``qweight``/``scales``, int4 with fp16 scales per 128 inputs
  (``leverctl_kernels.common.int4``): the default GEMM, and the BF16 and
  FP8 arms, which dequantise it in registers.
* ``int8``: ``w_i8 int8[n, k]`` and ``s_i8 float32[n]``: symmetric int8 per
  output row (scale ``max|w| / 127``), the int8 faith2/faith5 arm's weights.
"""
from __future__ import annotations

import numpy as np

from ..common import int4
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
