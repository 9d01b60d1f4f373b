"""``attention.proj_bf16_tc`` (Atlas): the prefill q/k/v projection on
NVFP4 weights, BF16 tensor cores (``bf16_tc_proj``) against activations
crushed to FP8 E4M3 per token."""

from __future__ import annotations

import numpy as np

from ...common.bits import nvfp4_encode_np
from ...common.path import Shape, Traffic, Variant, declared_path
from ...selection.attention import PROJ_BF16_TC as TABLE
from .. import projections as P
from . import bf16_tc, fp8_e4m3, naive


def nvfp4_inputs(shape: Shape, rng) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    w = rng.standard_normal((n, k), dtype=np.float32) * np.float32(P.W_STD)
    packed, scales, ts = nvfp4_encode_np(w)
    return {"x": P.x_bf16(rng, m, k), "w_packed": packed, "w_scales": scales, "w_ts": np.array([ts], np.float32)}


def x_inputs(shape: Shape, rng) -> dict:
    return {"x": P.x_bf16(rng, shape["m"], shape["k"])}


def file_weights(t) -> dict:
    """A model file's matrix as this path reads it: its NVFP4 as stored, or
    the decoded matrix encoded to NVFP4."""
    if t.nvfp4 is not None:
        packed, scales, ts = t.nvfp4, t.nvfp4_scale, t.nvfp4_global
    else:
        packed, scales, ts = nvfp4_encode_np(t.values)
    return {
        "w_packed": np.ascontiguousarray(packed, dtype=np.uint8),
        "w_scales": np.ascontiguousarray(scales, dtype=np.uint8),
        "w_ts": np.array([ts], np.float32),
    }


def nvfp4_traffic(shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(m * k * 2 + n * k // 2 + n * k // 16 + 4, m * n * 4, P.flops(shape))


def fp8_crush_traffic(shape) -> Traffic:
    """The crush reads x twice (amax, then the values) and writes its
    codes and scales, which the GEMM reads back."""
    m, k = shape["m"], shape["k"]
    base = nvfp4_traffic(shape)
    return Traffic(base.bytes_read + m * k * 2 + m * k + m * 4, base.bytes_written + m * k + m * 4, base.flops)


PATH = declared_path(
    TABLE,
    {
        "bf16_tc": Variant(
            bf16_tc.NAME,
            bf16_tc.SUMMARY,
            bf16_tc.build,
            tolerance=P.TOL_BF16_TC,
            tensor_cores=P.FORM,
            tc_dtype="bf16" if P.FORM else None,
        ),
        "fp8_e4m3": Variant(
            fp8_e4m3.NAME,
            fp8_e4m3.SUMMARY,
            fp8_e4m3.build,
            tolerance=P.TOL_FP8_CRUSH,
            traffic=fp8_crush_traffic,
            launches=fp8_e4m3.LAUNCHES,
            tensor_cores="wgmma",
            tc_dtype="e4m3",
        ),
    },
    shapes=P.prefill_shapes,
    make_inputs=nvfp4_inputs,
    outputs=P.outputs_f32,
    reference=naive.reference,
    traffic=nvfp4_traffic,
    tolerance=P.TOL_BF16_TC,
    notes="Tensor-core-bound at prefill. The error fields carry the FP8 crush the lever removes.",
    extra={**P.EXTRA, "weights": P.weight_use(x_inputs, file_weights)},
)
