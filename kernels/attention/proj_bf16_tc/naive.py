"""The float64 reference of ``attention.proj_bf16_tc``: ``y = x W^T`` with
bf16 activations ``x [m, k]`` and NVFP4 weights (``w_packed [n, k/2]``
E2M1 two a byte, low nibble first; ``w_scales [n, k/16]`` E4M3 block
scales; ``w_ts [1]`` a float32 per-tensor scale). Checked against the
*unquantised* activations and the weights exactly as stored, decoded in
float64, so a variant's error is the perturbation its
own arithmetic adds.
"""

from __future__ import annotations

import numpy as np

from ...common.bits import NVFP4_BLOCK, bf16_to_f32_np, e2m1_to_f32_np, e4m3_to_f32_np


def nvfp4_weights(w_packed, w_scales, w_ts) -> np.ndarray:
    """float64 ``[n, k]``: E2M1 x E4M3 block scale x tensor scale, exactly."""
    packed = np.asarray(w_packed, dtype=np.uint8)
    nib = np.stack([packed & 0xF, packed >> 4], axis=-1).reshape(packed.shape[0], -1)
    block = np.repeat(e4m3_to_f32_np(w_scales).astype(np.float64), NVFP4_BLOCK, axis=-1)
    return e2m1_to_f32_np(nib).astype(np.float64) * block * float(np.asarray(w_ts).reshape(-1)[0])


def naive_proj_nvfp4(x, w_packed, w_scales, w_ts) -> np.ndarray:
    return bf16_to_f32_np(x).astype(np.float64) @ nvfp4_weights(w_packed, w_scales, w_ts).T


def reference(shape, x: dict) -> dict:
    return {"y": naive_proj_nvfp4(x["x"], x["w_packed"], x["w_scales"], x["w_ts"])}
