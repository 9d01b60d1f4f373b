"""Float64 references for the attention projections (``y = x W^T``, the
q/k/v projection of a prefill): every projection variant is checked
against these and nothing else. Each takes the *unquantised* activations
(bf16 as given, or FP8 codes with their scales) and the weights exactly
as stored, decoded in float64, so a variant's error is the perturbation
its own arithmetic adds (an FP8 crush of the activations, a rounding of
the weights, fp32 accumulation, the output's rounding).

Layouts::

    x          [m, k]   bf16 bits (uint16)              tokens x hidden
    w_packed   [n, k/2] uint8, NVFP4 E2M1 two a byte    (low nibble first)
    w_scales   [n, k/16] uint8 E4M3 block scales
    w_ts       [1]      float32 per-tensor scale
    qweight    [n, k/8] uint32, int4 (common/int4.py),  scales fp16 [n, ceil(k/128)]
    x8, w8     [m, k], [n, k] uint8 E4M3;  x_scale [m], w_scale [n] float32
"""
from __future__ import annotations

import numpy as np

from ..common import int4
from ..common.bits import NVFP4_BLOCK, bf16_to_f32_np, e2m1_to_f32_np, e4m3_to_f32_np


def nvfp4_weights(w_packed, w_scales, w_ts) -> np.ndarray:
    """float64 ``[n, k]``: E2M1 x E4M3 block scale x tensor scale, exactly."""
    packed = np.asarray(w_packed, dtype=np.uint8)
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    block = np.repeat(e4m3_to_f32_np(w_scales).astype(np.float64), NVFP4_BLOCK, axis=-1)
    return e2m1_to_f32_np(nib).astype(np.float64) * block * float(np.asarray(w_ts).reshape(-1)[0])


def naive_proj_nvfp4(x, w_packed, w_scales, w_ts) -> np.ndarray:
    return bf16_to_f32_np(x).astype(np.float64) @ nvfp4_weights(w_packed, w_scales, w_ts).T


def naive_proj_w4(x, qweight, scales) -> np.ndarray:
    w = int4.dequantize_w4(qweight, scales).astype(np.float64)  # exact: q x fp16 scale fits float32
    return bf16_to_f32_np(x).astype(np.float64) @ w.T


def naive_proj_fp8(x8, x_scale, w8, w_scale) -> np.ndarray:
    xf = e4m3_to_f32_np(x8).astype(np.float64) * np.asarray(x_scale, np.float64)[:, None]
    wf = e4m3_to_f32_np(w8).astype(np.float64) * np.asarray(w_scale, np.float64)[:, None]
    return xf @ wf.T
