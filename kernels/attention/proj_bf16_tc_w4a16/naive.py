"""The float64 reference of ``attention.proj_bf16_tc_w4a16``: ``y = x W^T``
with bf16 activations ``x [m, k]`` and int4 W4A16 weights (``qweight
[n, k/8]``, ``scales`` fp16, ``common/int4.py``). Checked against the
*unquantised* activations and the weights exactly as stored, decoded in
float64, so a variant's error is the perturbation its
own arithmetic adds.
"""

from __future__ import annotations

import numpy as np

from ...common import int4
from ...common.bits import bf16_to_f32_np


def naive_proj_w4(x, qweight, scales) -> np.ndarray:
    w = int4.dequantize_w4(qweight, scales).astype(np.float64)  # exact: q x fp16 scale fits float32
    return bf16_to_f32_np(x).astype(np.float64) @ w.T


def reference(shape, x: dict) -> dict:
    return {"y": naive_proj_w4(x["x"], x["qweight"], x["scales"])}
