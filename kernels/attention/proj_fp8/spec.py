"""``attention.proj_fp8`` (Metrale): the FP8 E4M3 projection GEMM
(per-channel weight scales, per-token activation scales), the 32-row
tensor-core twin (``fp8_attn_m32``, more than 16 rows) against the
16-row kernel; its rows are decode/verify batch sizes on both sides of the
16-row threshold."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ...common.bits import f32_to_e4m3_np
from ...common.path import Shape, Traffic, Variant, check_preset, declared_path
from ...selection.attention import PROJ_FP8 as TABLE
from .. import projections as P
from . import m16, m32, naive

FP8_ROWS = (16, 32, 128)


def fp8_shapes(preset: str, model: Mapping[str, Any] | None) -> list[Shape]:
    check_preset(preset)
    if preset == "smoke":
        return [P.shape_of("smoke", 13, 19, 48), P.shape_of("smoke", 21, 19, 48)]
    n, k = P.model_nk(model)
    return [P.shape_of("model", m, n, k) for m in FP8_ROWS]


def _e4m3_rows(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    amax = np.abs(a).max(axis=1)
    scale = np.where(amax > 0, amax / 448.0, 1.0).astype(np.float32)
    return f32_to_e4m3_np(a / scale[:, None]), scale


def fp8_inputs(shape: Shape, rng) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    x8, xs = _e4m3_rows(rng.standard_normal((m, k), dtype=np.float32))
    w8, ws = _e4m3_rows(rng.standard_normal((n, k), dtype=np.float32) * np.float32(P.W_STD))
    return {"x8": x8, "x_scale": xs, "w8": w8, "w_scale": ws}


def x_inputs(shape: Shape, rng) -> dict:
    x8, xs = _e4m3_rows(rng.standard_normal((shape["m"], shape["k"]), dtype=np.float32))
    return {"x8": x8, "x_scale": xs}


def file_weights(t) -> dict:
    """A model file's matrix as this path reads it: FP8 E4M3 with one scale
    per output channel or per tensor as stored (a tensor's scale given to
    every channel); anything else, block-scaled FP8 among it, decoded and
    re-encoded to E4M3 per channel."""
    if t.fp8 is not None and t.fp8_scale_kind in ("channel", "tensor"):
        scale = np.broadcast_to(np.asarray(t.fp8_scale, np.float32).reshape(-1), (t.n,))
        return {"w8": np.ascontiguousarray(t.fp8, dtype=np.uint8), "w_scale": np.ascontiguousarray(scale)}
    w8, ws = _e4m3_rows(np.asarray(t.values, np.float32))
    return {"w8": w8, "w_scale": ws}


def fp8_traffic(shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(m * k + n * k + 4 * (m + n), m * n * 4, P.flops(shape))


PATH = declared_path(
    TABLE,
    {
        mod.NAME: Variant(
            mod.NAME, mod.SUMMARY, mod.build, tolerance=P.TOL_FP8_GEMM, tensor_cores="wgmma", tc_dtype="e4m3"
        )
        for mod in (m16, m32)
    },
    shapes=fp8_shapes,
    make_inputs=fp8_inputs,
    outputs=P.outputs_f32,
    reference=naive.reference,
    traffic=fp8_traffic,
    tolerance=P.TOL_FP8_GEMM,
    notes="Weight-stream-bound at small batches.",
    extra={**P.EXTRA, "weights": P.weight_use(x_inputs, file_weights)},
)
