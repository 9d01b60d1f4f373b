"""The float64 reference of ``attention.proj_fp8``: ``y = x W^T`` with E4M3
activations ``x8 [m, k]`` (per-token scales ``x_scale [m]``) and E4M3
weights ``w8 [n, k]`` (per-channel scales ``w_scale [n]``), decoded exactly.
"""

from __future__ import annotations

import numpy as np

from ...common.bits import e4m3_to_f32_np


def naive_proj_fp8(x8, x_scale, w8, w_scale) -> np.ndarray:
    xf = e4m3_to_f32_np(x8).astype(np.float64) * np.asarray(x_scale, np.float64)[:, None]
    wf = e4m3_to_f32_np(w8).astype(np.float64) * np.asarray(w_scale, np.float64)[:, None]
    return xf @ wf.T


def reference(shape, x: dict) -> dict:
    return {"y": naive_proj_fp8(x["x8"], x["x_scale"], x["w8"], x["w_scale"])}
