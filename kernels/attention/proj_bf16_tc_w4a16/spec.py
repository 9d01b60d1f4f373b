"""``attention.proj_bf16_tc_w4a16`` (Metrale): the prefill q/k/v projection
on int4 weights, the W4A16 BF16 GEMM with 128 x 128 tiles (``bf16_tc_proj``)
against the default fp16 W4A16 GEMM."""

from __future__ import annotations

from ...common import int4
from ...common.path import Shape, Traffic, Variant, declared_path
from ...selection.attention import PROJ_BF16_TC_W4A16 as TABLE
from ...w4a16.gemm import gemm_tc
from .. import projections as P
from . import bf16_n128, naive, w4a16_f16


def w4_inputs(shape: Shape, rng) -> dict:
    m, n, k = shape["m"], shape["n"], shape["k"]
    qweight, scales = int4.random_w4(rng, n, k, P.W_STD)
    return {"x": P.x_bf16(rng, m, k), "qweight": qweight, "scales": scales}


def x_inputs(shape: Shape, rng) -> dict:
    return {"x": P.x_bf16(rng, shape["m"], shape["k"])}


def file_weights(t) -> dict:
    """A model file's matrix quantised to int4 as the W4A16 GEMMs read it."""
    qweight, scales = int4.quantize_w4(t.values)
    return {"qweight": qweight, "scales": scales}


def outputs_f16(shape: Shape):
    return {"y": ((shape["m"], shape["n"]), "float16")}


def w4_traffic(shape) -> Traffic:
    m, n, k = shape["m"], shape["n"], shape["k"]
    return Traffic(m * k * 2 + int4.packed_bytes(n, k), m * n * 2, P.flops(shape))


def w4_f16_traffic(shape) -> Traffic:
    """The fp16 copy of x is written once and read back."""
    m, k = shape["m"], shape["k"]
    base = w4_traffic(shape)
    return Traffic(base.bytes_read + m * k * 2, base.bytes_written + m * k * 2, base.flops)


PATH = declared_path(
    TABLE,
    {
        "bf16_n128": Variant(
            bf16_n128.NAME,
            bf16_n128.SUMMARY,
            bf16_n128.build,
            tolerance=P.TOL_BF16_W4,
            tensor_cores=P.FORM,
            tc_dtype="bf16" if P.FORM else None,
        ),
        "w4a16_f16": Variant(
            w4a16_f16.NAME,
            w4a16_f16.SUMMARY,
            w4a16_f16.build,
            tolerance=P.TOL_F16_W4,
            traffic=w4_f16_traffic,
            launches=w4a16_f16.LAUNCHES,
            tensor_cores=P.FORM,
            tc_dtype=gemm_tc.TC_DTYPE if P.FORM else None,
        ),
    },
    shapes=P.prefill_shapes,
    make_inputs=w4_inputs,
    outputs=outputs_f16,
    reference=naive.reference,
    traffic=w4_traffic,
    tolerance=P.TOL_BF16_W4,
    notes="Tensor-core-bound at prefill; the error fields carry each path's weight rounding.",
    extra={**P.EXTRA, "weights": P.weight_use(x_inputs, file_weights)},
)
